//! Helpers of the Bedrock tests: ConverseStream answers in the real binary event-stream framing
//! (each frame written by `aws-smithy-eventstream`, CRCs included), Bedrock's error responses,
//! an STS `AssumeRoleWithWebIdentity` answer, and an independent SigV4 check — the canonical
//! request, string to sign and signature recomputed here from the request the server received
//! (HMAC-SHA256 over `sha2`, no code shared with the client's signer).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use recursive_testkit::{RecordedRequest, Reply, Script};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The bytes of one event-stream message with these string headers and payload.
pub fn message(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut m = Message::new(payload.to_vec());
    for (name, value) in headers {
        m = m.add_header(Header::new(name.to_string(), HeaderValue::String(value.to_string().into())));
    }
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

/// An event of a ConverseStream: its type and JSON payload, with the `p` padding Bedrock adds.
pub fn event(kind: &str, mut payload: Value) -> Vec<u8> {
    payload["p"] = Value::String("abcdefghijklmnopqrstuvwxyzABCDEF".into());
    let headers = [(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")];
    message(&headers, payload.to_string().as_bytes())
}

/// An exception message of a ConverseStream.
pub fn exception(kind: &str, text: &str) -> Vec<u8> {
    let headers = [(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")];
    message(&headers, serde_json::json!({"message": text}).to_string().as_bytes())
}

/// A ConverseStream answer of these frames, written in pieces of `size` bytes (so frames are
/// split across reads).
pub fn stream(frames: Vec<Vec<u8>>, size: usize) -> Reply {
    let body: Vec<u8> = frames.concat();
    Reply::raw(Script::sse(&body, size).with_head(
        "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n\
         x-amzn-requestid: 6f4d1f3b-0000-4000-8000-000000000000\r\nconnection: close",
    ))
}

/// A JSON answer (`Converse`).
pub fn json_answer(body: &Value) -> Reply {
    Reply::raw(
        Script::sse(body.to_string().as_bytes(), 4096)
            .with_head("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close"),
    )
}

/// An error response as Bedrock sends one: the status, the error type in `x-amzn-ErrorType`,
/// `{"message": ...}`.
pub fn error(status: u16, reason: &str, kind: &str, text: &str) -> Reply {
    let body = serde_json::json!({"message": text}).to_string();
    Reply::raw(Script::sse(body.as_bytes(), 4096).with_head(format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n\
         x-amzn-ErrorType: {kind}:http://internal.amazon.com/coral/com.amazon.bedrock/\r\nconnection: close"
    )))
}

/// STS's answer to `AssumeRoleWithWebIdentity`.
pub fn sts_answer(access_key: &str, secret: &str, token: &str, expiration: &str) -> Reply {
    let xml = format!(
        r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:default:agent</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/bedrock-caller/agent-session</Arn>
      <AssumedRoleId>AROA3XFRBF535PLBIFPI4:agent-session</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>{token}</SessionToken>
      <SecretAccessKey>{secret}</SecretAccessKey>
      <Expiration>{expiration}</Expiration>
      <AccessKeyId>{access_key}</AccessKeyId>
    </Credentials>
    <Provider>arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#
    );
    Reply::raw(
        Script::sse(xml.as_bytes(), 4096).with_head("HTTP/1.1 200 OK\r\ncontent-type: text/xml\r\nconnection: close"),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(data: &[u8]) -> Vec<u8> {
    Sha256::digest(data).to_vec()
}

/// HMAC-SHA256 (RFC 2104).
fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&sha256(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).chain(data.iter().copied()).collect();
    let outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).chain(sha256(&inner)).collect();
    sha256(&outer)
}

/// URI-encodes every byte but the unreserved characters (`%` included: a path already
/// encoded is encoded again, as SigV4 asks for every service but S3).
fn uri_encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header.
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    /// The access key id.
    pub access_key: String,
    /// `yyyymmdd`.
    pub date: String,
    /// The region of the scope.
    pub region: String,
    /// The service of the scope.
    pub service: String,
    /// The signed header names.
    pub signed_headers: Vec<String>,
    /// The signature.
    pub signature: String,
}

/// Reads a request's `Authorization` header.
pub fn authorization(request: &RecordedRequest) -> Authorization {
    let header = request.header("authorization").expect("a signed request has an authorization header");
    let rest = header.strip_prefix("AWS4-HMAC-SHA256 ").expect("SigV4");
    let field = |name: &str| {
        rest.split(", ").find_map(|p| p.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("{name}: {header}"))
    };
    let scope: Vec<&str> = field("Credential").split('/').collect();
    assert_eq!(scope.len(), 5, "{header}");
    assert_eq!(scope[4], "aws4_request");
    Authorization {
        access_key: scope[0].into(),
        date: scope[1].into(),
        region: scope[2].into(),
        service: scope[3].into(),
        signed_headers: field("SignedHeaders").split(';').map(str::to_string).collect(),
        signature: field("Signature").into(),
    }
}

/// The signature `request` should carry if signed with `secret`, recomputed from what the
/// server received.
pub fn expected_signature(request: &RecordedRequest, secret: &str) -> String {
    let auth = authorization(request);
    let (path, query) = request.path.split_once('?').unwrap_or((&request.path, ""));
    let canonical_path: Vec<String> = path.split('/').map(uri_encode).collect();
    let canonical_headers: String = auth
        .signed_headers
        .iter()
        .map(|name| {
            let value = request.header(name).unwrap_or_else(|| panic!("signed header {name} was not sent"));
            format!("{name}:{}\n", value.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect();
    let canonical_request = format!(
        "{}\n{}\n{query}\n{canonical_headers}\n{}\n{}",
        request.method,
        canonical_path.join("/"),
        auth.signed_headers.join(";"),
        hex(&sha256(&request.raw_body))
    );
    let amz_date = request.header("x-amz-date").expect("x-amz-date");
    let scope = format!("{}/{}/{}/aws4_request", auth.date, auth.region, auth.service);
    let to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex(&sha256(canonical_request.as_bytes())));
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), auth.date.as_bytes());
    for part in [auth.region.as_str(), auth.service.as_str(), "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    hex(&hmac(&key, to_sign.as_bytes()))
}

/// Asserts that `request` is signed with SigV4 by `access_key` / `secret` for Bedrock in
/// `region`, over at least `content-type`, `host` and `x-amz-date`.
pub fn assert_signed(request: &RecordedRequest, access_key: &str, secret: &str, region: &str) {
    let auth = authorization(request);
    assert_eq!(
        (auth.access_key.as_str(), auth.region.as_str(), auth.service.as_str()),
        (access_key, region, "bedrock")
    );
    for needed in ["content-type", "host", "x-amz-date"] {
        assert!(auth.signed_headers.iter().any(|h| h == needed), "{needed} is not signed: {auth:?}");
    }
    assert_eq!(auth.signature, expected_signature(request, secret), "request #{} {}", request.index, request.path);
}

#[test]
fn hmac_matches_rfc_4231_test_case_2() {
    let mac = hmac(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

#[test]
fn the_verifier_reproduces_the_aws_signing_test_suite_post_vanilla() {
    // `post-vanilla` of the AWS SigV4 test suite: POST / to example.amazonaws.com, no body,
    // AKIDEXAMPLE, us-east-1, service `service`, 2015-08-30T12:36:00Z.
    let request = RecordedRequest {
        index: 0,
        method: "POST".into(),
        path: "/".into(),
        headers: vec![
            ("host".into(), "example.amazonaws.com".into()),
            ("x-amz-date".into(), "20150830T123600Z".into()),
            (
                "authorization".into(),
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date, \
                 Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
                    .into(),
            ),
        ],
        body: Value::Null,
        raw_body: Vec::new(),
    };
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    assert_eq!(expected_signature(&request, secret), authorization(&request).signature);
    assert_ne!(expected_signature(&request, "another secret"), authorization(&request).signature);
}

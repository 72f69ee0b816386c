//! AWS Signature Version 4 of a Bedrock request, by `aws-sigv4`: the headers it adds
//! (`x-amz-date`, `authorization`, and `x-amz-security-token` for temporary credentials) for a
//! `POST` of the encoded body to the URL with the headers given, signed for service
//! [`SERVICE`] in the region.

use std::time::SystemTime;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use recursive_core::ProviderError;

use super::credentials::Credentials;
use crate::shell::Unsigned;

/// The signing name of Bedrock Runtime.
pub const SERVICE: &str = "bedrock";

fn failed(provider: &str, e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Invalid(format!("{provider}: cannot sign the request: {e}"))
}

/// The signature headers of `request`, signed at `time`.
pub fn signature_headers(
    provider: &str,
    credentials: &Credentials,
    region: &str,
    request: Unsigned<'_>,
    time: SystemTime,
) -> Result<Vec<(String, String)>, ProviderError> {
    let identity = aws_credential_types::Credentials::new(
        credentials.access_key_id.clone(),
        credentials.secret_access_key.clone(),
        credentials.session_token.clone(),
        credentials.expires,
        "recursive",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| failed(provider, e))?
        .into();
    let headers = request.headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let signable = SignableRequest::new("POST", request.url, headers, SignableBody::Bytes(request.body))
        .map_err(|e| failed(provider, e))?;
    let (instructions, _signature) = sign(signable, &params).map_err(|e| failed(provider, e))?.into_parts();
    let (headers, _params) = instructions.into_parts();
    Ok(headers.into_iter().map(|h| (h.name().to_string(), h.value().to_string())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn credentials(token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: token.map(str::to_string),
            expires: None,
        }
    }

    fn sign_at(token: Option<&str>) -> Vec<(String, String)> {
        let headers = vec![("content-type".to_string(), "application/json".to_string())];
        let request = Unsigned {
            url: "https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-lite-v1%3A0/converse",
            headers: &headers,
            body: b"{}",
        };
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        signature_headers("bedrock", &credentials(token), "us-east-1", request, time).unwrap()
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_signature_names_its_scope_and_signed_headers() {
        let headers = sign_at(None);
        assert_eq!(header(&headers, "x-amz-date"), Some("20150830T123600Z"));
        let auth = header(&headers, "authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, "),
            "{auth}"
        );
        assert!(auth.contains("SignedHeaders=content-type;host;x-amz-date, Signature="), "{auth}");
        assert!(header(&headers, "x-amz-security-token").is_none());
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let headers = sign_at(Some("session"));
        assert_eq!(header(&headers, "x-amz-security-token"), Some("session"));
        assert!(header(&headers, "authorization").unwrap().contains("host;x-amz-date;x-amz-security-token"));
    }
}

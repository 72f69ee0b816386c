#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The official AWS SDK for Python (`boto3`) as the oracle of the Bedrock request: the SDK makes
//! a two-turn Converse tool loop (`tests/clients/bedrock_sdk.py`: a system prompt, a user
//! message, one tool, thinking, cache points; then the assistant message appended as it came —
//! its signed reasoning included — and the tool result) against a local server, and the
//! Recursive client makes the same calls against another; both servers serve the same answers,
//! and the requests must agree: the path (the model id percent-encoded), `Content-Type`, the
//! whole JSON body, the session token, and the set of signed headers (less the SDK's own
//! `amz-sdk-*` bookkeeping headers). Both requests' signatures are checked by the same
//! independent SigV4 verifier, so the verifier itself is checked against botocore's signer.
//!
//! The Python with `boto3` comes from `SERVE_TEST_PYTHON` (`./scripts/test` makes a
//! virtualenv); without it the test fails unless `RECURSIVE_ALLOW_SKIP=1`.

#[path = "common/aws.rs"]
mod aws;
mod common;

use std::sync::Arc;

use recursive_core::{ChatOptions, ToolChoice};
use recursive_llm::bedrock::{CredentialProvider, Credentials, credentials::Source};
use recursive_llm::{BedrockConfig, BedrockProvider};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const REGION: &str = "us-west-2";
const ACCESS_KEY: &str = "ASIASDKORACLE0001";
const SECRET: &str = "sdk/oracle+secret/key";
const TOKEN: &str = "sdk-oracle-session-token";

fn answer(content: Value, stop: &str) -> Reply {
    aws::json_answer(&json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 40, "outputTokens": 28, "totalTokens": 68},
        "metrics": {"latencyMs": 420}
    }))
}

/// Turn 1: signed reasoning, then a call of `echo`.
fn turn1() -> Reply {
    answer(
        json!([
            {"reasoningContent": {"reasoningText": {"text": "The user wants an echo.", "signature": "RXFzaWduYXR1cmU="}}},
            {"toolUse": {"toolUseId": "tooluse_Qm9vdHN0cmFw", "name": "echo", "input": {"text": "one"}}}
        ]),
        "tool_use",
    )
}

/// Turn 2: the answer.
fn turn2() -> Reply {
    answer(json!([{"text": "one"}]), "end_turn")
}

/// The same two turns through the Recursive client.
async fn ours(server: &ModelServer) {
    let credentials = Credentials {
        access_key_id: ACCESS_KEY.into(),
        secret_access_key: SECRET.into(),
        session_token: Some(TOKEN.into()),
        expires: None,
    };
    let source = Source::Static { credentials, from: "the test".into() };
    let provider = BedrockProvider::new(BedrockConfig {
        base_url: server.url().to_string(),
        region: REGION.into(),
        model: MODEL.into(),
        stream: false,
        credentials: Some(Arc::new(CredentialProvider::new(source).unwrap())),
        ..Default::default()
    })
    .unwrap();
    let options = ChatOptions {
        reasoning_effort: Some("medium".into()),
        tool_choice: Some(ToolChoice::Auto),
        ..Default::default()
    };
    common::echo_loop(&provider, common::echo_tool(false), options).await;
}

/// The signed header names, less the SDK's invocation bookkeeping.
fn signed_headers(request: &RecordedRequest) -> Vec<String> {
    aws::authorization(request).signed_headers.into_iter().filter(|h| !h.starts_with("amz-sdk-")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_sends_the_same_converse_requests_as_ours() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let sdk_server = ModelServer::start_with([turn1(), turn2()]).await;
    let seen = common::sdk_client(python, "bedrock_sdk.py", vec![sdk_server.url().to_string()]).await;
    assert_eq!(seen, json!({"answer": "one", "calls": ["echo"]}));

    let our_server = ModelServer::start_with([turn1(), turn2()]).await;
    ours(&our_server).await;
    assert_eq!((sdk_server.request_count(), our_server.request_count()), (2, 2));
    for turn in 0..2 {
        let (sdk, ours) = (sdk_server.request(turn), our_server.request(turn));
        assert_eq!(ours.path, sdk.path, "request #{turn}");
        assert_eq!(ours.path, "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse");
        assert_eq!(ours.header("content-type"), sdk.header("content-type"));
        assert_eq!(ours.header("x-amz-security-token"), sdk.header("x-amz-security-token"));
        assert_eq!(ours.body, sdk.body, "request #{turn}: ours vs the SDK's");
        assert_eq!(signed_headers(&ours), signed_headers(&sdk), "request #{turn}");
        assert_eq!(signed_headers(&sdk), ["content-type", "host", "x-amz-date", "x-amz-security-token"]);
        aws::assert_signed(&sdk, ACCESS_KEY, SECRET, REGION);
        aws::assert_signed(&ours, ACCESS_KEY, SECRET, REGION);
    }
    // The second request carries the signed reasoning back before the call.
    let assistant = &our_server.request(1).body["messages"][1];
    assert_eq!(assistant["content"][0]["reasoningContent"]["reasoningText"]["signature"], "RXFzaWduYXR1cmU=");
}

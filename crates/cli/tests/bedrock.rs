#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `--provider bedrock` end to end: the binary against a scripted local server answering
//! ConverseStream in the real event-stream framing (frames written by the provider's own
//! encoder over `aws-smithy-eventstream`). A run with `--base-url` and credentials from the
//! environment sends a SigV4-signed request (scope: the region of `AWS_REGION`, service
//! `bedrock`; the session token along) for the model id percent-encoded into the path, prints
//! the answer and prices it; a named provider of kind bedrock takes its region from its table
//! and its keys from the `default` profile under `HOME`; and no credentials at all is a
//! configuration error (exit 2) naming the sources of the chain.

mod common;

use common::{Env, stdout_json};
use recursive_llm::eventstream::encode;
use recursive_testkit::{ModelServer, RecordedRequest, Reply, Script};
use serde_json::{Value, json};

/// Every AWS variable a developer's shell might hold, removed so the test sees only its own.
const AWS_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "AWS_BEARER_TOKEN_BEDROCK",
];

fn cmd(env: &Env) -> std::process::Command {
    let mut c = env.cmd();
    for var in AWS_VARS {
        c.env_remove(var);
    }
    c
}

fn event(kind: &str, payload: Value) -> Vec<u8> {
    let headers = [(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")];
    encode(&headers, payload.to_string().as_bytes()).unwrap()
}

/// A streamed answer of `text`, with this usage.
fn answer(text: &str, input: u64, output: u64) -> Reply {
    let frames = [
        event("messageStart", json!({"role": "assistant"})),
        event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": text}})),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event("messageStop", json!({"stopReason": "end_turn"})),
        event(
            "metadata",
            json!({"usage": {"inputTokens": input, "outputTokens": output,
            "totalTokens": input + output}, "metrics": {"latencyMs": 100}}),
        ),
    ];
    Reply::raw(
        Script::sse(&frames.concat(), 23)
            .with_head("HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\nconnection: close"),
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `Credential=` scope of a SigV4 `Authorization` header: key, date, region, service.
fn scope(request: &RecordedRequest) -> Vec<String> {
    let auth = request.header("authorization").unwrap_or_default();
    let credential = auth.split("Credential=").nth(1).and_then(|c| c.split(',').next()).unwrap_or_default();
    credential.split('/').map(str::to_string).collect()
}

#[test]
fn run_with_provider_bedrock_sends_a_signed_converse_stream_request_and_prints_the_priced_answer() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start_with([answer("Hello from Bedrock.", 1000, 100)]));
    let model = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
    let out = cmd(&env)
        .env("AWS_ACCESS_KEY_ID", "ASIACLITEST")
        .env("AWS_SECRET_ACCESS_KEY", "cli/secret")
        .env("AWS_SESSION_TOKEN", "cli-session")
        .env("AWS_REGION", "us-east-2")
        .args(["run", "say hello", "--json", "--max-cost", "1", "--provider", "bedrock"])
        .args(["--base-url", server.url(), "--model", model])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json = stdout_json(&out);
    assert!(json.to_string().contains("Hello from Bedrock."), "{json}");
    // Claude Haiku 4.5 through a US profile: $1.10 input, $5.50 output per million tokens.
    let cost = json["cost_usd"].as_f64().unwrap();
    assert!((cost - (1000.0 * 1.10 + 100.0 * 5.50) / 1e6).abs() < 1e-12, "{cost}");

    let r = server.request(0);
    assert_eq!(r.path, "/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/converse-stream");
    assert_eq!(scope(&r)[0], "ASIACLITEST");
    assert_eq!(scope(&r)[2..], ["us-east-2", "bedrock", "aws4_request"]);
    assert_eq!(r.header("x-amz-security-token"), Some("cli-session"));
    assert!(r.header("x-amz-date").is_some());
    assert_eq!(r.body["messages"][0]["content"][0]["text"], "say hello");
    assert!(r.body["system"][0]["text"].is_string(), "the agent's system prompt: {}", r.body);
}

#[test]
fn a_named_bedrock_provider_takes_its_region_from_its_table_and_its_keys_from_the_profile() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start_with([answer("Named and signed.", 10, 5)]));
    let aws = env.path(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(aws.join("credentials"), "[default]\naws_access_key_id = AKIAPROFILE\naws_secret_access_key = p\n")
        .unwrap();
    let config = env.path("config/recursive");
    std::fs::create_dir_all(&config).unwrap();
    let table = format!(
        "[providers.aws]\nkind = \"bedrock\"\nregion = \"eu-west-1\"\nbase_url = \"{}\"\nmodel = \"eu.amazon.nova-lite-v1:0\"\n",
        server.url()
    );
    std::fs::write(config.join("recursive.toml"), table).unwrap();
    let out = cmd(&env).args(["run", "hi", "--json", "--provider", "aws"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout_json(&out).to_string().contains("Named and signed."));
    let r = server.request(0);
    assert_eq!(r.path, "/model/eu.amazon.nova-lite-v1%3A0/converse-stream");
    assert_eq!(scope(&r)[0], "AKIAPROFILE");
    assert_eq!(scope(&r)[2], "eu-west-1", "the table's region, not a default");
    assert!(r.header("x-amz-security-token").is_none());
}

#[test]
fn bedrock_without_credentials_is_a_configuration_error_naming_the_chain() {
    let env = Env::new();
    let out = cmd(&env).env("AWS_REGION", "us-east-1").args(["run", "hi", "--provider", "bedrock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    for source in ["AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_BEARER_TOKEN_BEDROCK"] {
        assert!(text.contains(source), "{source} is not named: {text}");
    }
}

#[test]
fn an_untrusted_project_file_cannot_move_bedrock_to_another_region_or_profile() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start_with([answer("Still in Ohio.", 10, 5)]));
    let project = "[provider]\nkind = \"bedrock\"\nregion = \"ap-south-1\"\nprofile = \"someone-else\"\n";
    std::fs::write(env.path("recursive.toml"), project).unwrap();
    let out = cmd(&env)
        .env("AWS_ACCESS_KEY_ID", "AKIAOWN")
        .env("AWS_SECRET_ACCESS_KEY", "own")
        .env("AWS_REGION", "us-east-2")
        .args(["run", "hi", "--json", "--provider", "bedrock", "--base-url", server.url()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains("[provider] region") && text.contains("[provider] profile"), "{text}");
    assert_eq!(scope(&server.request(0))[2], "us-east-2", "the project file's region was left out");
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Where `kind = "bedrock"` finds its region, endpoint and credentials — the standard AWS chain
//! — tested by building the provider from settings with an explicit environment (a map per
//! test, so no test touches the process environment and none races another) and checking the
//! requests a local server receives: signed (the signature recomputed independently) with the
//! environment's keys and session token; with a profile's keys and region from files named by
//! `AWS_CONFIG_FILE` / `AWS_SHARED_CREDENTIALS_FILE` and chosen by `AWS_PROFILE` (or the
//! `default` profile under `HOME`); with temporary credentials from a local STS serving a real
//! `AssumeRoleWithWebIdentity` answer (the token file read anew, the credentials kept until
//! shortly before they expire, then fetched again); a Bedrock API key as a bearer token; and
//! the configuration errors (no credentials, naming every source tried; no region; a missing
//! or unsupported profile). A named provider of kind bedrock takes its region and profile from
//! its table.

#[path = "common/aws.rs"]
mod aws;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use recursive_core::{ChatProvider, ChatRequest, Message};
use recursive_llm::config::{NamedProviderSettings, build_provider_with_env};
use recursive_llm::{LlmError, PriceTable, ProviderKind, ProviderSettings};
use recursive_testkit::ModelServer;
use serde_json::json;

fn ask() -> ChatRequest {
    ChatRequest { messages: vec![Message::user("hi")], ..Default::default() }
}

fn answer() -> recursive_testkit::Reply {
    let frames = vec![
        aws::event("messageStart", json!({"role": "assistant"})),
        aws::event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "ok"}})),
        aws::event("contentBlockStop", json!({"contentBlockIndex": 0})),
        aws::event("messageStop", json!({"stopReason": "end_turn"})),
        aws::event("metadata", json!({"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}})),
    ];
    aws::stream(frames, 40)
}

/// A server answering `n` calls.
async fn server(n: usize) -> ModelServer {
    ModelServer::start_with((0..n).map(|_| answer())).await
}

fn settings(server: &ModelServer) -> ProviderSettings {
    ProviderSettings::new(ProviderKind::Bedrock).with_base_url(server.url()).with_model("amazon.nova-lite-v1:0")
}

/// An environment lookup over these variables only.
fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| map.get(name).cloned()
}

fn build(settings: &ProviderSettings, env: &dyn Fn(&str) -> Option<String>) -> Arc<dyn ChatProvider> {
    build_provider_with_env(settings, &PriceTable::builtin(), env).unwrap_or_else(|e| panic!("{e}"))
}

fn build_err(settings: &ProviderSettings, env: &dyn Fn(&str) -> Option<String>) -> LlmError {
    match build_provider_with_env(settings, &PriceTable::builtin(), env) {
        Ok(_) => panic!("built without what it needs"),
        Err(e) => e,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn environment_keys_sign_the_request_and_the_session_token_goes_along() {
    let server = server(1).await;
    let env = env(&[
        ("AWS_ACCESS_KEY_ID", "ASIAENVKEY"),
        ("AWS_SECRET_ACCESS_KEY", "env/secret"),
        ("AWS_SESSION_TOKEN", "env-session-token"),
        ("AWS_REGION", "eu-central-1"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ]);
    let provider = build(&settings(&server), &env);
    assert_eq!(provider.complete(ask()).await.unwrap().message.content, "ok");
    let r = server.request(0);
    aws::assert_signed(&r, "ASIAENVKEY", "env/secret", "eu-central-1");
    assert_eq!(r.header("x-amz-security-token"), Some("env-session-token"));
    assert_eq!(r.path, "/model/amazon.nova-lite-v1%3A0/converse-stream");
}

#[tokio::test]
async fn a_profile_chosen_by_aws_profile_gives_its_keys_and_its_region() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        write(dir.path(), "config", "[default]\nregion = us-east-1\n\n[profile dev]\nregion = ap-southeast-2\n");
    let credentials = write(
        dir.path(),
        "credentials",
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = default-secret\n\n\
         # the dev account\n[dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = dev/secret+key\n",
    );
    let server = server(2).await;
    let chosen =
        env(&[("AWS_PROFILE", "dev"), ("AWS_CONFIG_FILE", &config), ("AWS_SHARED_CREDENTIALS_FILE", &credentials)]);
    build(&settings(&server), &chosen).complete(ask()).await.unwrap();
    let r = server.request(0);
    aws::assert_signed(&r, "AKIADEV", "dev/secret+key", "ap-southeast-2");
    assert!(r.header("x-amz-security-token").is_none());

    // Without AWS_PROFILE: the `default` profile of ~/.aws under HOME.
    let home = tempfile::tempdir().unwrap();
    write(home.path(), ".aws/config", "[default]\nregion = ca-central-1\n");
    write(home.path(), ".aws/credentials", "[default]\naws_access_key_id = AKIAHOME\naws_secret_access_key = home\n");
    let home_env = env(&[("HOME", home.path().to_str().unwrap())]);
    build(&settings(&server), &home_env).complete(ask()).await.unwrap();
    aws::assert_signed(&server.request(1), "AKIAHOME", "home", "ca-central-1");
}

#[tokio::test]
async fn web_identity_assumes_the_role_at_the_local_sts_and_keeps_the_credentials_until_near_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let token = write(dir.path(), "token", "eyJhbGciOiJSUzI1NiJ9.first-token.sig\n");
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let sts = ModelServer::start_with([aws::sts_answer("ASIASTS1", "sts/secret/1", "sts-token-1", &later)]).await;
    let server = server(2).await;
    let vars = env(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", &token),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/bedrock-caller"),
        ("AWS_ROLE_SESSION_NAME", "agent-session"),
        ("AWS_ENDPOINT_URL_STS", sts.url()),
        ("AWS_REGION", "us-east-1"),
    ]);
    let provider = build(&settings(&server), &vars);
    assert_eq!(sts.request_count(), 0, "the role is assumed when first needed, not when the provider is built");
    provider.complete(ask()).await.unwrap();
    provider.complete(ask()).await.unwrap();
    assert_eq!(sts.request_count(), 1, "credentials valid for an hour are kept");

    let call = sts.request(0);
    assert_eq!((call.method.as_str(), call.path.as_str()), ("POST", "/"));
    assert_eq!(call.header("content-type"), Some("application/x-www-form-urlencoded"));
    let form: BTreeMap<String, String> = form_urlencoded::parse(&call.raw_body).into_owned().collect();
    assert_eq!(form["Action"], "AssumeRoleWithWebIdentity");
    assert_eq!(form["Version"], "2011-06-15");
    assert_eq!(form["RoleArn"], "arn:aws:iam::123456789012:role/bedrock-caller");
    assert_eq!(form["RoleSessionName"], "agent-session");
    assert_eq!(form["WebIdentityToken"], "eyJhbGciOiJSUzI1NiJ9.first-token.sig");
    for r in server.requests() {
        aws::assert_signed(&r, "ASIASTS1", "sts/secret/1", "us-east-1");
        assert_eq!(r.header("x-amz-security-token"), Some("sts-token-1"));
    }
}

#[tokio::test]
async fn temporary_credentials_about_to_expire_are_fetched_again_with_the_current_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = write(dir.path(), "token", "token-one");
    let at = |minutes: i64| {
        (chrono::Utc::now() + chrono::Duration::minutes(minutes)).format("%Y-%m-%dT%H:%M:%SZ").to_string()
    };
    let sts = ModelServer::start_with([
        aws::sts_answer("ASIASOON", "soon-secret", "soon-token", &at(2)),
        aws::sts_answer("ASIALATER", "later-secret", "later-token", &at(60)),
    ])
    .await;
    let server = server(3).await;
    // AWS_ENDPOINT_URL reaches STS too when no STS-specific endpoint is set.
    let vars = env(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", &token),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r"),
        ("AWS_ENDPOINT_URL", sts.url()),
        ("AWS_REGION", "us-east-1"),
    ]);
    let provider = build(&settings(&server), &vars);
    provider.complete(ask()).await.unwrap();
    std::fs::write(&token, "token-two").unwrap();
    provider.complete(ask()).await.unwrap();
    provider.complete(ask()).await.unwrap();
    assert_eq!(sts.request_count(), 2, "credentials expiring within the margin are replaced, then kept");
    let tokens: Vec<String> = sts
        .requests()
        .iter()
        .map(|r| form_urlencoded::parse(&r.raw_body).find(|(k, _)| k == "WebIdentityToken").unwrap().1.into_owned())
        .collect();
    assert_eq!(tokens, ["token-one", "token-two"], "the token file is read at each refresh");
    let session = |i: usize| server.request(i).header("x-amz-security-token").map(str::to_string);
    assert_eq!(
        [session(0), session(1), session(2)],
        [Some("soon-token".into()), Some("later-token".into()), Some("later-token".into())]
    );
    aws::assert_signed(&server.request(2), "ASIALATER", "later-secret", "us-east-1");
}

#[tokio::test]
async fn an_sts_refusal_is_a_provider_error_quoting_sts() {
    let dir = tempfile::tempdir().unwrap();
    let token = write(dir.path(), "token", "expired-token");
    let refusal = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>ExpiredTokenException</Code><Message>Token expired: current date/time is after the token's expiry</Message></Error><RequestId>1</RequestId></ErrorResponse>"#;
    let sts = ModelServer::start_with([recursive_testkit::Reply::raw(
        recursive_testkit::Script::sse(refusal.as_bytes(), 4096)
            .with_head("HTTP/1.1 400 Bad Request\r\ncontent-type: text/xml\r\nconnection: close"),
    )])
    .await;
    let server = server(1).await;
    let vars = env(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", &token),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r"),
        ("AWS_ENDPOINT_URL_STS", sts.url()),
        ("AWS_REGION", "us-east-1"),
    ]);
    let mut s = settings(&server);
    s.max_retries = Some(0);
    let err = build(&s, &vars).complete(ask()).await.unwrap_err().to_string();
    assert!(err.contains("ExpiredTokenException") && err.contains("Token expired"), "{err}");
    assert_eq!(server.request_count(), 0, "nothing unsigned was sent");
}

#[tokio::test]
async fn a_bedrock_api_key_and_the_bedrock_endpoint_variable_need_no_aws_credentials() {
    let server = server(1).await;
    let vars = env(&[
        ("AWS_BEARER_TOKEN_BEDROCK", "ABSK-api-key"),
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", server.url()),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ]);
    let s = ProviderSettings::new(ProviderKind::Bedrock);
    build(&s, &vars).complete(ask()).await.unwrap();
    let r = server.request(0);
    assert_eq!(r.header("authorization"), Some("Bearer ABSK-api-key"));
    assert!(r.header("x-amz-date").is_none());
    assert!(r.path.starts_with("/model/global.anthropic.claude-sonnet-4-5"), "the default model: {}", r.path);
}

#[test]
fn no_credentials_for_aws_is_an_error_naming_every_source_tried() {
    let home = tempfile::tempdir().unwrap();
    let vars = env(&[("AWS_REGION", "us-east-1"), ("HOME", home.path().to_str().unwrap())]);
    let err = build_err(&ProviderSettings::new(ProviderKind::Bedrock), &vars);
    assert!(matches!(err, LlmError::MissingCredentials { .. }), "{err:?}");
    let text = err.to_string();
    for source in [
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "~/.aws/credentials",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_BEARER_TOKEN_BEDROCK",
    ] {
        assert!(text.contains(source), "{source} is not named: {text}");
    }
}

#[test]
fn no_region_is_an_error_saying_where_to_set_one() {
    let home = tempfile::tempdir().unwrap();
    let vars =
        env(&[("AWS_ACCESS_KEY_ID", "AKIA"), ("AWS_SECRET_ACCESS_KEY", "s"), ("HOME", home.path().to_str().unwrap())]);
    let err = build_err(&ProviderSettings::new(ProviderKind::Bedrock), &vars).to_string();
    assert!(err.contains("no AWS region") && err.contains("AWS_REGION") && err.contains("`region`"), "{err}");
}

#[test]
fn a_missing_named_profile_and_a_credential_process_profile_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        write(dir.path(), "config", "[profile sso]\ncredential_process = /usr/bin/get-creds\nregion = us-east-1\n");
    let files = [("AWS_CONFIG_FILE", config.as_str()), ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")];
    let s = ProviderSettings::new(ProviderKind::Bedrock);
    let missing = env(&[files[0], files[1], ("AWS_PROFILE", "nope")]);
    let err = build_err(&s, &missing).to_string();
    assert!(err.contains("profile `nope`") && err.contains("config"), "{err}");
    let process = env(&[files[0], files[1], ("AWS_PROFILE", "sso")]);
    let err = build_err(&s, &process).to_string();
    assert!(err.contains("credential_process") && err.contains("does not support"), "{err}");
}

#[tokio::test]
async fn a_named_bedrock_provider_takes_its_region_and_profile_from_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let credentials =
        write(dir.path(), "credentials", "[work]\naws_access_key_id = AKIAWORK\naws_secret_access_key = work-secret\n");
    let server = server(2).await;
    let table: NamedProviderSettings = toml::from_str(&format!(
        "kind = \"bedrock\"\nregion = \"eu-west-1\"\nprofile = \"work\"\nbase_url = \"{}\"\nmodel = \"eu.amazon.nova-pro-v1:0\"",
        server.url()
    ))
    .unwrap();
    let vars = env(&[("AWS_SHARED_CREDENTIALS_FILE", &credentials), ("AWS_REGION", "us-east-1")]);
    let s = table.settings("aws", &vars).unwrap();
    assert_eq!(
        (s.kind, s.region.as_deref(), s.profile.as_deref()),
        (ProviderKind::Bedrock, Some("eu-west-1"), Some("work"))
    );
    build(&s, &vars).complete(ask()).await.unwrap();
    let r = server.request(0);
    aws::assert_signed(&r, "AKIAWORK", "work-secret", "eu-west-1");
    assert_eq!(r.path, "/model/eu.amazon.nova-pro-v1%3A0/converse-stream");

    // `api_key_env` names the variable with a Bedrock API key.
    let keyed: NamedProviderSettings = toml::from_str(&format!(
        "kind = \"bedrock\"\napi_key_env = \"TEAM_BEDROCK_KEY\"\nbase_url = \"{}\"",
        server.url()
    ))
    .unwrap();
    let vars = env(&[("TEAM_BEDROCK_KEY", "ABSK-team")]);
    build(&keyed.settings("team", &vars).unwrap(), &vars).complete(ask()).await.unwrap();
    assert_eq!(server.request(1).header("authorization"), Some("Bearer ABSK-team"));
}

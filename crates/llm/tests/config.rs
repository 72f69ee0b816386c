//! Building providers from settings and detecting one from the environment (with an explicit
//! environment, so the tests do not depend on the machine's variables).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use recursive_core::{ChatRequest, Message};
use recursive_llm::config::{build_provider_with_env, detect_from};
use recursive_llm::{LlmError, PriceTable, ProviderKind, ProviderSettings};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Sync + use<> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| map.get(k).cloned()
}

fn closed_port_host() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { messages: vec![Message::user(text)], ..Default::default() }
}

#[tokio::test]
async fn an_anthropic_key_wins() {
    let found = detect_from(&env(&[("ANTHROPIC_API_KEY", "a"), ("OPENAI_API_KEY", "o")])).await.unwrap();
    assert_eq!(found.kind, ProviderKind::Anthropic);
    assert_eq!(found.resolved_model(), "claude-sonnet-4-5");
}

#[tokio::test]
async fn an_openai_key_is_used_with_its_base_url() {
    let found =
        detect_from(&env(&[("OPENAI_API_KEY", "o"), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")])).await.unwrap();
    assert_eq!(found.kind, ProviderKind::OpenAi);
    assert_eq!(found.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
    assert_eq!(found.resolved_model(), "gpt-4o-mini");
}

#[tokio::test]
async fn an_ollama_server_answering_is_detected() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/tags"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"models": [{"name": "qwen3:8b"}]})))
        .mount(&server)
        .await;
    let found = detect_from(&env(&[("OLLAMA_HOST", &server.uri())])).await.unwrap();
    assert_eq!(found.kind, ProviderKind::Ollama);
    assert_eq!(found.base_url, Some(format!("{}/v1", server.uri())));
    // The default model is not installed there, so the installed one is picked.
    assert_eq!(found.resolved_model(), "qwen3:8b");
}

#[tokio::test]
async fn the_default_ollama_model_is_kept_when_installed() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/tags"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"models": [{"name": "qwen3:8b"}, {"name": "llama3.2:latest"}]})),
        )
        .mount(&server)
        .await;
    let found = detect_from(&env(&[("OLLAMA_HOST", &server.uri())])).await.unwrap();
    assert_eq!(found.resolved_model(), "llama3.2");
}

#[tokio::test]
async fn nothing_is_detected_without_keys_or_server() {
    assert!(detect_from(&env(&[("OLLAMA_HOST", &closed_port_host()), ("OPENAI_API_KEY", " ")])).await.is_none());
}

#[test]
fn openai_without_a_key_is_a_clear_error() {
    let err = build_provider_with_env(&ProviderSettings::new(ProviderKind::OpenAi), &PriceTable::builtin(), &env(&[]))
        .err()
        .unwrap();
    assert!(matches!(err, LlmError::MissingApiKey { .. }));
    assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
}

#[test]
fn replay_without_a_cassette_is_a_clear_error() {
    let err = build_provider_with_env(&ProviderSettings::new(ProviderKind::Replay), &PriceTable::builtin(), &env(&[]))
        .err()
        .unwrap();
    assert!(err.to_string().contains("cassette"), "{err}");
}

#[tokio::test]
async fn the_mock_kind_echoes_and_records_to_a_cassette() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("mock.jsonl");
    let mut settings = ProviderSettings::new(ProviderKind::Mock);
    settings.record = Some(cassette.clone());
    let provider = build_provider_with_env(&settings, &PriceTable::builtin(), &env(&[])).unwrap();
    let response = provider.complete(ask("ping")).await.unwrap();
    assert!(response.message.content.contains("ping"), "{}", response.message.content);
    assert_eq!(std::fs::read_to_string(&cassette).unwrap().lines().count(), 1);

    let mut replay = ProviderSettings::new(ProviderKind::Replay);
    replay.replay = Some(cassette);
    let provider = build_provider_with_env(&replay, &PriceTable::builtin(), &env(&[])).unwrap();
    assert_eq!(provider.complete(ask("ping")).await.unwrap().message, response.message);
}

#[tokio::test]
async fn a_built_openai_provider_uses_the_env_key_retries_and_prices() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000000, "completion_tokens": 0}
        })))
        .mount(&server)
        .await;
    let settings: ProviderSettings = toml::from_str(&format!(
        "kind = \"openai\"\nbase_url = \"{}/v1\"\nstream = false\ntimeout = \"5s\"\n",
        server.uri()
    ))
    .unwrap();
    let provider =
        build_provider_with_env(&settings, &PriceTable::builtin(), &env(&[("OPENAI_API_KEY", "sk-env")])).unwrap();
    let response = provider.complete(ask("hi")).await.unwrap();
    assert_eq!(response.message.content, "hello");
    let expected = PriceTable::builtin().lookup("gpt-4o-mini").unwrap().input;
    assert_eq!(response.cost_usd, Some(expected));
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].headers.get("authorization").unwrap(), "Bearer sk-env");
}

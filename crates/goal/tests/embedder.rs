#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The OpenAI-compatible HTTP embedder against a local server on 127.0.0.1.

use recursive_goal::{EmbedError, Embedder, HttpEmbedder, cosine};
use serde_json::json;
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A client that ignores proxy settings of the environment: the server is local.
fn local() -> reqwest::Client {
    recursive_http::client_builder().no_proxy().build().unwrap()
}

#[tokio::test]
async fn sends_model_and_inputs_and_orders_vectors_by_index() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(header("authorization", "Bearer sk-test"))
        .and(body_json(json!({ "model": "embed-small", "input": ["first goal", "second goal"] })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "object": "list",
            "data": [
                { "object": "embedding", "index": 1, "embedding": [0.0, 1.0] },
                { "object": "embedding", "index": 0, "embedding": [1.0, 0.0] }
            ],
            "model": "embed-small",
            "usage": { "prompt_tokens": 4, "total_tokens": 4 }
        })))
        .expect(1)
        .mount(&server)
        .await;
    assert!(server.uri().starts_with("http://127.0.0.1:"));
    let embedder =
        HttpEmbedder::new(format!("{}/v1/", server.uri()), "embed-small").with_api_key("sk-test").with_client(local());

    let vectors = embedder.embed(&["first goal".into(), "second goal".into()]).await.unwrap();

    assert_eq!(vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    assert!(cosine(&vectors[0], &vectors[1]).abs() < 1e-9);
}

#[tokio::test]
async fn error_status_is_reported_with_the_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_string("{\"error\":\"bad key\"}"))
        .mount(&server)
        .await;
    let err = HttpEmbedder::new(format!("{}/v1", server.uri()), "m")
        .with_client(local())
        .embed(&["x".into()])
        .await
        .unwrap_err();
    match err {
        EmbedError::Status { status, body } => assert_eq!((status, body.contains("bad key")), (401, true)),
        other => panic!("expected a status error, got {other}"),
    }
}

#[tokio::test]
async fn wrong_number_of_vectors_is_malformed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "data": [{ "index": 0, "embedding": [1.0] }] })))
        .mount(&server)
        .await;
    let err = HttpEmbedder::new(format!("{}/v1", server.uri()), "m")
        .with_client(local())
        .embed(&["a".into(), "b".into()])
        .await
        .unwrap_err();
    assert!(matches!(err, EmbedError::Malformed(_)), "{err}");
}

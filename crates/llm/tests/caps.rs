//! Responses that never end or never break a line: the client stops reading at its caps with
//! a clear error instead of growing until the process dies. (The per-line cap is pinned by the
//! unit test in `http.rs`: reaching 8 MiB in one line through the SSE parser is slow in debug.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use recursive_core::{ChatProvider, ChatRequest, Message, ProviderError};
use recursive_llm::{OpenAiConfig, OpenAiProvider};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server that answers one request with `head` and then `piece` over and over, up to
/// `limit` bytes (bounded, so a client that keeps reading cannot make it run forever).
async fn endless(head: &'static str, piece: Vec<u8>, limit: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let _ = sock.read(&mut buf).await;
        let _ = sock.write_all(head.as_bytes()).await;
        let mut sent = 0;
        while sent < limit && sock.write_all(&piece).await.is_ok() {
            sent += piece.len();
        }
    });
    format!("http://{addr}/v1")
}

fn client(url: String) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig { base_url: url, api_key: Some("k".into()), ..Default::default() }).unwrap()
}

async fn outcome(url: String) -> Result<(), ProviderError> {
    let request = ChatRequest { messages: vec![Message::user("hi")], ..Default::default() };
    let mut stream = client(url).stream(request).await?;
    while let Some(event) = stream.next().await {
        event?;
    }
    Ok(())
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn an_endless_stream_of_deltas_stops_at_the_response_cap() {
    let delta =
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "x".repeat(16 * 1024));
    let url = endless(SSE_HEAD, delta.into_bytes(), 200 * 1024 * 1024).await;
    let e = outcome(url).await.unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}

#[tokio::test]
async fn a_huge_json_answer_stops_at_the_response_cap() {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
    let url = endless(head, vec![b' '; 1024 * 1024], 100 * 1024 * 1024).await;
    let e = outcome(url).await.unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}

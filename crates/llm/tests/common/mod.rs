//! Helpers shared by the integration tests: a raw HTTP server on 127.0.0.1 that answers every
//! request with scripted bytes written in separate pieces (so chunking is exact), and stream
//! collection.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use recursive_core::{ChatResponse, ChatStream, ProviderError, StreamEvent};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the raw server received.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Request line and headers.
    pub head: String,
    /// The body.
    pub body: Vec<u8>,
}

impl Captured {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// What the raw server sends back.
#[derive(Debug, Clone)]
pub struct Script {
    /// Status line and headers, without the final blank line.
    pub head: String,
    /// Body pieces, each written (and flushed) separately.
    pub pieces: Vec<Vec<u8>>,
    /// Pause after each piece (zero: yield to the scheduler only).
    pub pause: Duration,
    /// Keep the connection open without answering (to provoke timeouts).
    pub hang: bool,
}

impl Script {
    /// An SSE answer of `body` cut into pieces of `size` bytes, closed by ending the connection.
    pub fn sse(body: &[u8], size: usize) -> Self {
        Self::sse_pieces(body.chunks(size).map(<[u8]>::to_vec).collect())
    }

    /// An SSE answer made of exactly these pieces.
    pub fn sse_pieces(pieces: Vec<Vec<u8>>) -> Self {
        Self {
            head: "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close"
                .into(),
            pieces,
            pause: Duration::ZERO,
            hang: false,
        }
    }

    /// Pauses after each piece.
    pub fn with_pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }
}

/// A server on 127.0.0.1 answering every request with its script.
pub struct RawServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Requests received so far.
    pub requests: Arc<Mutex<Vec<Captured>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawServer {
    /// Starts serving `script`.
    pub async fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let script = script.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let _ = handle(socket, script, seen).await;
                });
            }
        });
        Self { url, requests, task }
    }

    /// Requests received so far.
    pub fn captured(&self) -> Vec<Captured> {
        self.requests.lock().unwrap().clone()
    }
}

async fn handle(mut socket: TcpStream, script: Script, seen: Arc<Mutex<Vec<Captured>>>) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    seen.lock().unwrap().push(Captured { head, body: buf[head_end..].to_vec() });
    if script.hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return Ok(());
    }
    socket.write_all(format!("{}\r\n\r\n", script.head).as_bytes()).await?;
    socket.flush().await?;
    for piece in &script.pieces {
        socket.write_all(piece).await?;
        socket.flush().await?;
        if script.pause.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(script.pause).await;
        }
    }
    socket.shutdown().await?;
    Ok(())
}

/// Everything a stream produced.
#[derive(Debug, Default)]
pub struct Collected {
    /// Text deltas in order.
    pub deltas: Vec<String>,
    /// Retry events `(attempt, delay_ms, reason)`.
    pub retries: Vec<(u32, u64, String)>,
    /// The final response, if the stream completed.
    pub response: Option<ChatResponse>,
    /// The error that ended the stream, if any.
    pub error: Option<ProviderError>,
}

/// Drains a stream.
pub async fn collect(mut stream: ChatStream) -> Collected {
    let mut out = Collected::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamEvent::TextDelta(d)) => out.deltas.push(d),
            Ok(StreamEvent::Retry { attempt, delay_ms, reason }) => out.retries.push((attempt, delay_ms, reason)),
            Ok(StreamEvent::Completed(r)) => out.response = Some(r),
            Ok(other) => panic!("unexpected event {other:?}"),
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out
}

/// Completes JSON cut off mid-way the way the official SDKs' partial parsers do: the text is
/// cut back to the last complete value (an unfinished string, number or key is dropped) and
/// the open arrays and objects are closed.
pub fn complete_partial_json(raw: &str) -> Option<Value> {
    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        Object { expect_key: bool },
        Array,
    }
    let mut stack: Vec<Ctx> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut string_is_key = false;
    let mut in_literal = false;
    let mut safe: Option<(usize, Vec<Ctx>)> = None;
    for (i, c) in raw.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
                if !string_is_key {
                    safe = Some((i + 1, stack.clone()));
                }
            }
            continue;
        }
        if in_literal && !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')) {
            in_literal = false;
            safe = Some((i, stack.clone()));
        }
        match c {
            '{' => {
                stack.push(Ctx::Object { expect_key: true });
                safe = Some((i + 1, stack.clone()));
            }
            '[' => {
                stack.push(Ctx::Array);
                safe = Some((i + 1, stack.clone()));
            }
            '}' | ']' => {
                stack.pop();
                safe = Some((i + 1, stack.clone()));
            }
            '"' => {
                in_string = true;
                string_is_key = matches!(stack.last(), Some(Ctx::Object { expect_key: true }));
            }
            ':' => {
                if let Some(Ctx::Object { expect_key }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            ',' => {
                if let Some(Ctx::Object { expect_key }) = stack.last_mut() {
                    *expect_key = true;
                }
            }
            c if c.is_whitespace() => {}
            _ => in_literal = true,
        }
    }
    let (cut, open) = safe?;
    let mut text = raw[..cut].to_string();
    for ctx in open.iter().rev() {
        text.push(match ctx {
            Ctx::Object { .. } => '}',
            Ctx::Array => ']',
        });
    }
    serde_json::from_str(&text).ok()
}

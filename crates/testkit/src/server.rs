//! The scripted model server: an HTTP/1.1 server on 127.0.0.1 that speaks OpenAI Chat
//! Completions (`POST …/chat/completions`) and Anthropic Messages (`POST …/messages`),
//! streaming or not, as each request asks. It answers from standing rules (matched by a
//! substring of the request's final user message, for concurrent sub-calls), then from a
//! script of replies in order, then from a fallback; and it records every request (method,
//! path, headers, JSON body) so a test can assert on the 2nd and 3rd request of a run.
//!
//! Every answer closes its connection, so each request is read and answered on its own
//! connection and [`Reply::raw`] bytes reach the client exactly as scripted.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::pairing::{Api, PairingError, check_pairing};
use crate::reply::{Reply, ReplyKind, Script};
use crate::sse::{self, Rendered};

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Its position among the server's requests, from 0.
    pub index: usize,
    /// `POST`, `GET`...
    pub method: String,
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers in arrival order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Null` when it is empty or not JSON (see `raw_body`).
    pub body: Value,
    /// The body's bytes.
    pub raw_body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of a header (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The protocol of the request, from its path.
    pub fn api(&self) -> Option<Api> {
        Api::from_path(&self.path)
    }

    /// The text of the request's final message when that message is the user's (not a tool
    /// result): what standing rules match against.
    pub fn last_user_text(&self) -> Option<String> {
        let last = self.body["messages"].as_array()?.last()?;
        if last["role"] != "user" {
            return None;
        }
        match &last["content"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(blocks) => {
                if blocks.iter().any(|b| b["type"] == "tool_result") {
                    return None;
                }
                Some(blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"))
            }
            _ => None,
        }
    }

    /// The pairing check on this request's body (see [`check_pairing`]).
    pub fn check_pairing(&self) -> Result<(), PairingError> {
        let api = self.api().ok_or_else(|| PairingError::Malformed {
            api: Api::OpenAi,
            detail: format!("{} is neither a chat-completions nor a messages path", self.path),
        })?;
        check_pairing(api, &self.body)
    }
}

/// A pairing violation found in a request while checking was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingViolation {
    /// The request's index.
    pub request: usize,
    /// What is wrong.
    pub error: PairingError,
}

impl fmt::Display for PairingViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request #{}: {}", self.request, self.error)
    }
}

/// Answers a request, or passes it on (`None`) to the rules and the script.
type Responder = Arc<dyn Fn(&RecordedRequest) -> Option<Reply> + Send + Sync>;

#[derive(Default)]
struct State {
    responder: Option<Responder>,
    rules: Vec<(String, Reply)>,
    queue: VecDeque<Reply>,
    fallback: Option<Reply>,
    requests: Vec<RecordedRequest>,
    check_pairing: bool,
    violations: Vec<PairingViolation>,
    unscripted: Vec<usize>,
    calls: usize,
}

/// The scripted model server; stops (closing open connections) when dropped.
pub struct ModelServer {
    url: String,
    state: Arc<Mutex<State>>,
    shutdown: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.accept.abort();
    }
}

impl fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelServer").field("url", &self.url).finish_non_exhaustive()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ModelServer {
    /// Starts a server with an empty script on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> Self {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("ModelServer: cannot bind 127.0.0.1: {e}"),
        };
        let url = match listener.local_addr() {
            Ok(addr) => format!("http://{addr}"),
            Err(e) => panic!("ModelServer: no local address: {e}"),
        };
        let state = Arc::new(Mutex::new(State::default()));
        let (shutdown, stopped) = watch::channel(false);
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let state = shared.clone();
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = serve(socket, state) => {}
                        _ = stopped.wait_for(|s| *s) => {}
                    }
                });
            }
        });
        Self { url, state, shutdown, accept }
    }

    /// Starts a server answering with these replies, in order.
    pub async fn start_with(replies: impl IntoIterator<Item = Reply>) -> Self {
        let server = Self::start().await;
        for r in replies {
            server.push(r);
        }
        server
    }

    /// Starts a server answering every request with `reply`.
    pub async fn serving(reply: Reply) -> Self {
        let server = Self::start().await;
        server.fallback(reply);
        server
    }

    /// `http://127.0.0.1:<port>` (the Anthropic base URL).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `http://127.0.0.1:<port>/v1` (the OpenAI base URL).
    pub fn openai_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// Appends a reply to the script; replies are used once, in order.
    pub fn push(&self, reply: Reply) -> &Self {
        lock(&self.state).queue.push_back(reply);
        self
    }

    /// A standing rule: every chat request whose final message is a user message containing
    /// `needle` gets `reply` (not consumed; rules are tried before the script, first added
    /// first). A request ending with tool results never matches a rule.
    pub fn when(&self, needle: impl Into<String>, reply: Reply) -> &Self {
        lock(&self.state).rules.push((needle.into(), reply));
        self
    }

    /// A function consulted first for every request (before rules and the script): a reply
    /// answers it, `None` passes it on. For servers that answer by what a request says.
    pub fn respond_with(&self, f: impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync + 'static) -> &Self {
        lock(&self.state).responder = Some(Arc::new(f));
        self
    }

    /// The answer to every request that no rule matches once the script is used up. Without
    /// one, such a request gets HTTP 400 with a message saying the script is used up.
    pub fn fallback(&self, reply: Reply) -> &Self {
        lock(&self.state).fallback = Some(reply);
        self
    }

    /// Checks the tool-call pairing of every chat request from now on (see
    /// [`pairing_violations`](Self::pairing_violations)).
    pub fn check_pairing(&self, on: bool) -> &Self {
        lock(&self.state).check_pairing = on;
        self
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }

    /// The request at `index` (from 0).
    ///
    /// # Panics
    /// When fewer requests arrived, with the number that did.
    #[track_caller]
    pub fn request(&self, index: usize) -> RecordedRequest {
        let state = lock(&self.state);
        match state.requests.get(index) {
            Some(r) => r.clone(),
            None => panic!("ModelServer: no request #{index}; {} arrived", state.requests.len()),
        }
    }

    /// Scripted replies not used yet.
    pub fn remaining(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// Indexes of the requests that found no reply (answered with HTTP 400).
    pub fn unscripted(&self) -> Vec<usize> {
        lock(&self.state).unscripted.clone()
    }

    /// The pairing violations found while checking was on.
    pub fn pairing_violations(&self) -> Vec<PairingViolation> {
        lock(&self.state).violations.clone()
    }

    /// Panics listing the pairing violations, if there are any.
    #[track_caller]
    pub fn assert_paired(&self) {
        let violations = self.pairing_violations();
        if !violations.is_empty() {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            panic!("tool calls and results are not paired:\n{}", list.join("\n"));
        }
    }
}

/// A request as read from the socket.
struct Incoming {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// What to send for one request.
enum Answer {
    Reply(Reply, Option<Vec<String>>),
    Unscripted(String),
}

async fn serve(mut socket: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let Some(incoming) = read_request(&mut socket).await? else { return Ok(()) };
    let (recorded, answer) = record_and_choose(&state, incoming);
    let (reply, call_ids) = match answer {
        Answer::Reply(reply, ids) => (reply, ids),
        Answer::Unscripted(message) => {
            let body = json!({"error": {"message": message, "type": "testkit_unscripted"}}).to_string();
            return write_simple(&mut socket, 400, "application/json", None, body.as_bytes()).await;
        }
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    match reply.kind {
        ReplyKind::Hang => {
            // Never answer; the server's shutdown ends the connection.
            std::future::pending::<()>().await;
            Ok(())
        }
        ReplyKind::Raw(script) => write_raw(&mut socket, &script).await,
        ReplyKind::Error { status, body, retry_after } => {
            let content_type =
                if serde_json::from_str::<Value>(&body).is_ok() { "application/json" } else { "text/plain" };
            write_simple(&mut socket, status, content_type, retry_after.as_deref(), body.as_bytes()).await
        }
        ReplyKind::Turn(turn) => {
            let Some(api) = recorded.api() else {
                let message = format!("ModelServer: {} {} is not a chat endpoint", recorded.method, recorded.path);
                return write_simple(&mut socket, 404, "text/plain", None, message.as_bytes()).await;
            };
            let model = recorded.body["model"].as_str().filter(|m| !m.is_empty()).unwrap_or("testkit-model");
            let ids = call_ids.unwrap_or_default();
            let rendered = sse::render(
                &turn,
                &sse::Request {
                    api,
                    model,
                    stream: recorded.body["stream"] == true,
                    include_usage: recorded.body["stream_options"]["include_usage"] == true,
                    serial: recorded.index,
                    call_ids: &ids,
                },
            );
            write_rendered(&mut socket, rendered).await
        }
    }
}

/// Records the request, checks its pairing when asked, and picks its reply (numbering the
/// reply's tool calls while the state is locked, so concurrent answers get distinct ids).
fn record_and_choose(state: &Mutex<State>, incoming: Incoming) -> (RecordedRequest, Answer) {
    let mut state = lock(state);
    let index = state.requests.len();
    let body = serde_json::from_slice(&incoming.body).unwrap_or(Value::Null);
    let recorded = RecordedRequest {
        index,
        method: incoming.method,
        path: incoming.path,
        headers: incoming.headers,
        body,
        raw_body: incoming.body,
    };
    state.requests.push(recorded.clone());
    let api = recorded.api();
    if state.check_pairing
        && api.is_some()
        && let Err(error) = recorded.check_pairing()
    {
        state.violations.push(PairingViolation { request: index, error });
    }
    let last_user = recorded.last_user_text();
    let responded = state.responder.as_ref().and_then(|f| f(&recorded));
    let ruled = last_user
        .as_deref()
        .and_then(|text| state.rules.iter().find(|(needle, _)| text.contains(needle.as_str())))
        .map(|(_, reply)| reply.clone());
    let reply = match responded.or(ruled).or_else(|| state.queue.pop_front()).or_else(|| state.fallback.clone()) {
        Some(r) => r,
        None => {
            state.unscripted.push(index);
            let about = last_user.map(|t| format!("; its last user message: {t:?}")).unwrap_or_default();
            return (
                recorded.clone(),
                Answer::Unscripted(format!(
                    "testkit ModelServer: the script is used up and no rule matches request #{index} ({} {}){about}",
                    recorded.method, recorded.path
                )),
            );
        }
    };
    let ids = match (&reply.kind, api) {
        (ReplyKind::Turn(turn), Some(api)) => Some(
            turn.calls
                .iter()
                .map(|c| match &c.id {
                    Some(id) => id.clone(),
                    None => {
                        state.calls += 1;
                        match api {
                            Api::OpenAi => format!("call_{}", state.calls),
                            Api::Anthropic => format!("toolu_{}", state.calls),
                        }
                    }
                })
                .collect(),
        ),
        _ => None,
    };
    (recorded, Answer::Reply(reply, ids))
}

/// Reads one request: the head, then a body framed by `content-length` or chunked. `None`
/// when the client closed the connection first.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<Option<Incoming>> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = socket.read(&mut tmp).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split_whitespace();
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let mut rest = buf[head_end..].to_vec();
    let chunked = header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        loop {
            if let Some(body) = decode_chunked(&rest) {
                break body;
            }
            let n = socket.read(&mut tmp).await?;
            if n == 0 {
                break decode_chunked(&rest).unwrap_or_default();
            }
            rest.extend_from_slice(&tmp[..n]);
        }
    } else {
        let length = header("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        while rest.len() < length {
            let n = socket.read(&mut tmp).await?;
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&tmp[..n]);
        }
        rest.truncate(length);
        rest
    };
    Ok(Some(Incoming { method, path, headers, body }))
}

/// The body of a complete chunked encoding, or `None` while it is incomplete.
fn decode_chunked(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if data.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

async fn write_simple(
    socket: &mut TcpStream,
    status: u16,
    content_type: &str,
    retry_after: Option<&str>,
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        reason(status),
        body.len()
    );
    if let Some(value) = retry_after {
        head.push_str(&format!("retry-after: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await?;
    socket.flush().await?;
    socket.shutdown().await
}

async fn write_rendered(socket: &mut TcpStream, rendered: Rendered) -> std::io::Result<()> {
    if rendered.content_type == "application/json" {
        let body = rendered.pieces.concat();
        return write_simple(socket, 200, rendered.content_type, None, &body).await;
    }
    let script = Script::sse_pieces(rendered.pieces);
    write_raw(socket, &script).await
}

async fn write_raw(socket: &mut TcpStream, script: &Script) -> std::io::Result<()> {
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
    socket.shutdown().await
}

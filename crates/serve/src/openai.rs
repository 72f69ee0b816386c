//! The OpenAI-compatible endpoints: `GET /v1/models` lists `agent` (the agent loop with the
//! server's tools) and `rlm` (a recursive language model); `POST /v1/chat/completions` runs one
//! of them on the conversation, streamed (`chat.completion.chunk` events, usage when asked with
//! `stream_options.include_usage`, then `[DONE]`) or not. Every such request is also a run of the
//! runs API, so its events can be followed there.
//!
//! How messages become a run: for `agent`, the last user message is the goal and the earlier
//! messages (system, user, assistant text) are the history. For `rlm`, the last user message
//! is read as parts: attached files (`type: "file"`, base64 `file_data`) are inputs named by their
//! file names and the text is the question; otherwise with several text parts the first is the
//! question and each further part an input (`input1`, `input2`…); with one part, that text is the
//! input `context` and the question asks to answer the request it contains. For `agent`, attached
//! files are appended to the goal as text.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::StreamExt;
use recursive_core::Message;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::runs::{RunKind, RunOutput, RunRecord, RunRequest};
use crate::server::{Busy, Server, busy, error, wait_finished};

/// The models this server offers.
pub const MODELS: [&str; 2] = ["agent", "rlm"];

/// The question an `rlm` run gets when the user's message is its only input.
const RLM_QUESTION: &str = "Carry out the request written in the input `context` and answer it.";

/// The question an `rlm` run gets when the user attached files and wrote nothing.
const RLM_FILES_QUESTION: &str = "Summarise the attached inputs.";

/// A chat completion request: the fields this server reads. Any other field of OpenAI's
/// request that would change the answer (sampling, `n`, client tools, `response_format`) is
/// refused with 400 naming it — never silently dropped.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// Every other field, checked by [`unsupported`].
    #[serde(flatten)]
    #[schema(ignore)]
    other: serde_json::Map<String, Value>,
}

/// Fields that change nothing about the answer: accepted and not used.
const HARMLESS: &[&str] =
    &["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier", "parallel_tool_calls"];

/// The first field of `other` this server would have to drop, with why it is refused.
fn unsupported(other: &serde_json::Map<String, Value>) -> Option<(String, String)> {
    let no_tools = other.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty));
    for (name, value) in other {
        let harmless = HARMLESS.contains(&name.as_str())
            || value.is_null()
            || match name.as_str() {
                "n" => value.as_u64() == Some(1),
                "tools" | "functions" => value.as_array().is_some_and(Vec::is_empty),
                "tool_choice" | "function_call" => no_tools && (value == "none" || value == "auto"),
                "response_format" => value["type"] == "text",
                _ => false,
            };
        if harmless {
            continue;
        }
        let why = match name.as_str() {
            "n" => "`n` above 1 is not supported: ask once for each completion".to_string(),
            "tools" | "functions" | "tool_choice" | "function_call" => {
                format!("`{name}`: client tools are not supported yet; the served agents use the server's tools")
            }
            "response_format" => "`response_format` (structured output) is not supported yet".to_string(),
            _ => format!(
                "`{name}` is not supported: a served agent's model settings come from the server's configuration; \
                 leave it out"
            ),
        };
        return Some((name.clone(), why));
    }
    None
}

/// Streaming options.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// A message: `role`, and `content` as a string or a list of parts (`text`, `file`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
}

impl ChatMessage {
    /// The text parts of the content (a string, or `[{type: "text", text}]`).
    fn parts(&self) -> Vec<String> {
        match &self.content {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(parts)) => parts.iter().filter_map(|p| p["text"].as_str().map(str::to_string)).collect(),
            _ => Vec::new(),
        }
    }

    fn text(&self) -> String {
        self.parts().join("\n")
    }

    /// Attached files (`{"type": "file", "file": {"filename", "file_data": "data:…;base64,…"}}`),
    /// by file-name stem, as text.
    fn files(&self) -> Result<Vec<(String, String)>, String> {
        let Some(Value::Array(parts)) = &self.content else { return Ok(Vec::new()) };
        let mut files = Vec::new();
        for (i, part) in parts.iter().filter(|p| p["type"] == "file").enumerate() {
            let file = &part["file"];
            let data = file["file_data"].as_str().ok_or("a file part needs `file_data` (a base64 data URL)")?;
            let encoded = data.split_once(";base64,").map_or(data, |(_, b64)| b64);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|e| format!("a file part's data is not base64: {e}"))?;
            let name = file["filename"]
                .as_str()
                .and_then(|f| std::path::Path::new(f).file_stem())
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| format!("file{}", i + 1));
            files.push((name, String::from_utf8_lossy(&bytes).into_owned()));
        }
        Ok(files)
    }
}

#[utoipa::path(get, path = "/v1/models",
    responses((status = 200, description = "The models: `agent`, `rlm` and the server's named agents"),
        (status = 401, body = crate::server::ErrorBody), (status = 403, body = crate::server::ErrorBody)))]
pub(crate) async fn models(State(server): State<Arc<Server>>) -> Json<Value> {
    let names = MODELS.iter().map(|m| m.to_string()).chain(server.runner.agents());
    let data: Vec<Value> =
        names.map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": "recursive"})).collect();
    Json(json!({"object": "list", "data": data}))
}

/// The run a chat request asks for.
fn run_request(request: &ChatRequest, agents: &[String]) -> Result<RunRequest, (StatusCode, String)> {
    let (kind, agent) = match request.model.as_str() {
        "agent" => (RunKind::Run, None),
        "rlm" => (RunKind::Rlm, None),
        named if agents.iter().any(|a| a == named) => (RunKind::Run, Some(named.to_string())),
        other => {
            let offered: Vec<String> = MODELS.iter().map(|m| m.to_string()).chain(agents.iter().cloned()).collect();
            let message = format!("The model `{other}` does not exist; this server offers {}", offered.join(", "));
            return Err((StatusCode::NOT_FOUND, message));
        }
    };
    let Some(last) = request.messages.iter().rposition(|m| m.role == "user") else {
        return Err((StatusCode::BAD_REQUEST, "`messages` needs a user message".into()));
    };
    let user = &request.messages[last];
    let files = user.files().map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    if kind == RunKind::Rlm {
        let mut parts = user.parts();
        let (input, inputs) = if !files.is_empty() {
            let question = if parts.is_empty() { RLM_FILES_QUESTION.to_string() } else { parts.join("\n") };
            (question, files.into_iter().collect())
        } else if parts.len() > 1 {
            let question = parts.remove(0);
            (question, parts.into_iter().enumerate().map(|(i, p)| (format!("input{}", i + 1), p)).collect())
        } else {
            (RLM_QUESTION.to_string(), [("context".to_string(), user.text())].into())
        };
        return Ok(RunRequest { kind, input, inputs, agent, history: Vec::new() });
    }
    let history = request.messages[..last]
        .iter()
        .filter_map(|m| match m.role.as_str() {
            "system" | "developer" => Some(Message::system(m.text())),
            "user" => Some(Message::user(m.text())),
            "assistant" => Some(Message::assistant(m.text())),
            _ => None,
        })
        .collect();
    let mut input = user.text();
    for (name, text) in files {
        input.push_str(&format!("\n\n[attached file `{name}`]\n{text}"));
    }
    Ok(RunRequest { kind, input, inputs: Default::default(), agent, history })
}

#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatRequest,
    responses((status = 200, description = "A `chat.completion`, or `chat.completion.chunk` events when `stream` is set"),
        (status = 400, body = crate::server::ErrorBody), (status = 401, body = crate::server::ErrorBody),
        (status = 403, body = crate::server::ErrorBody), (status = 404, body = crate::server::ErrorBody),
        (status = 413, body = crate::server::ErrorBody), (status = 415, body = crate::server::ErrorBody),
        (status = 422, body = crate::server::ErrorBody), (status = 429, body = crate::server::ErrorBody),
        (status = 500, body = crate::server::ErrorBody,
            description = "The run failed; `x-should-retry: false` (a retry would run it again)")))]
pub(crate) async fn chat_completions(State(server): State<Arc<Server>>, Json(request): Json<ChatRequest>) -> Response {
    if let Some((param, why)) = unsupported(&request.other) {
        return crate::server::unsupported_parameter(&param, &why);
    }
    let run_request = match run_request(&request, &server.runner.agents()) {
        Ok(r) => r,
        Err((status, message)) => return error(status, "invalid_request_error", &message),
    };
    let run = match server.start(run_request) {
        Ok(run) => run,
        Err(Busy) => return busy(),
    };
    let id = format!("chatcmpl-{}", run.id.trim_start_matches("run_"));
    if request.stream {
        let usage = request.stream_options.as_ref().is_some_and(|o| o.include_usage);
        return Sse::new(chunks(run, id, request.model, usage)).keep_alive(KeepAlive::default()).into_response();
    }
    let output = CancelOnDrop(run.clone()).wait().await;
    if !output.ok {
        return failure(&output);
    }
    Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": now(),
        "model": request.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": output.text}, "finish_reason": "stop", "logprobs": null}],
        "usage": usage(&output),
    }))
    .into_response()
}

/// Cancels the run if the client goes away before it has finished.
struct CancelOnDrop(Arc<RunRecord>);

impl CancelOnDrop {
    async fn wait(&self) -> RunOutput {
        wait_finished(&self.0).await
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.0.result().is_none() {
            self.0.cancel.cancel();
        }
    }
}

/// A run that ended without its answer: 500, marked not to be retried (`x-should-retry:
/// false`, which the OpenAI SDKs obey) — a retry would run the whole agent again, tools and all.
fn failure(output: &RunOutput) -> Response {
    let message = output.error.clone().unwrap_or_else(|| format!("the run ended {}", output.outcome));
    let mut response = error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", &message);
    response.headers_mut().insert("x-should-retry", axum::http::HeaderValue::from_static("false"));
    response
}

fn usage(output: &RunOutput) -> Value {
    json!({
        "prompt_tokens": output.input_tokens,
        "completion_tokens": output.output_tokens,
        "total_tokens": output.input_tokens + output.output_tokens,
    })
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> Event {
    let body = json!({
        "id": id, "object": "chat.completion.chunk", "created": now(), "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
    });
    Event::default().data(body.to_string())
}

/// The stream of a chat completion: the role, the root run's text as it streams (for `agent`;
/// an `rlm` answer arrives whole at the end), the finish, the usage when asked, `[DONE]`.
fn chunks(
    run: Arc<RunRecord>,
    id: String,
    model: String,
    with_usage: bool,
) -> impl futures::Stream<Item = Result<Event, std::convert::Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let guard = CancelOnDrop(run.clone());
        let mut changes = run.watch();
        let mut next = 0;
        let mut streamed = String::new();
        let send = |e: Event| {
            let tx = tx.clone();
            async move { tx.send(e).await.is_ok() }
        };
        if !send(chunk(&id, &model, json!({"role": "assistant", "content": ""}), None)).await {
            return;
        }
        let output = loop {
            let (events, _) = run.events_from(next);
            for (i, event) in events {
                next = i + 1;
                if event["type"] == "partial_text" && event["depth"] == 0 {
                    let delta = event["delta"].as_str().unwrap_or_default();
                    streamed.push_str(delta);
                    if !send(chunk(&id, &model, json!({"content": delta}), None)).await {
                        return;
                    }
                }
                if event["type"] == "tool_call" && event["depth"] == 0 {
                    // Another turn follows the tools: only the last turn's text is the answer.
                    streamed.clear();
                }
            }
            if let Some(output) = run.result() {
                break output;
            }
            if changes.changed().await.is_err() {
                return;
            }
        };
        if !output.ok {
            let message = output.error.clone().unwrap_or_else(|| format!("the run ended {}", output.outcome));
            let body = json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}});
            let _ = send(Event::default().data(body.to_string())).await;
            return;
        }
        // What the answer adds beyond the text already streamed (all of it for an RLM).
        let rest = output.text.strip_prefix(streamed.as_str()).unwrap_or(&output.text).to_string();
        if !rest.is_empty() && !send(chunk(&id, &model, json!({"content": rest}), None)).await {
            return;
        }
        if !send(chunk(&id, &model, json!({}), Some("stop"))).await {
            return;
        }
        if with_usage {
            let body = json!({"id": id, "object": "chat.completion.chunk", "created": now(), "model": model,
                "choices": [], "usage": usage(&output)});
            let _ = send(Event::default().data(body.to_string())).await;
        }
        let _ = send(Event::default().data("[DONE]")).await;
        drop(guard);
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

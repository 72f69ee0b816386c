//! The OpenAI-compatible endpoints: `GET /v1/models` lists `agent` (the agent loop with the
//! server's tools) and `rlm` (a recursive language model); `POST /v1/chat/completions` runs one
//! of them on the conversation, streamed (`chat.completion.chunk` events, usage when asked with
//! `stream_options.include_usage`, then `[DONE]`) or not. Every such request is also a run of the
//! runs API, so its events can be followed there.
//!
//! How messages become a run ([`crate::conversation`]): for `agent`, the last user message is
//! the goal and the earlier messages (system, user, assistant with its tool calls, tool results)
//! are the history; a conversation that ends with tool results continues the run that asked for
//! them. The client's `tools` are offered beside the server's: a call to one ends the run with
//! `finish_reason: "tool_calls"`. Sampling fields (`temperature`, `max_tokens`,
//! `max_completion_tokens`, `stop`, `reasoning_effort`), `tool_choice` and `response_format`
//! (the answer checked against the schema) are forwarded; anything else that would change the
//! answer is refused with 400. For `rlm`, the last user message
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
use recursive_core::{Asks, ChatOptions, ResponseFormat, ToolCall, ToolChoice, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::conversation::{MODELS, Refusal, Turn, input_name, run_request};
use crate::runs::{RunOutput, RunRecord, RunRequest};
use crate::server::{Busy, ErrorBody, ErrorDetail, Server, busy, error, unsupported_parameter, wait_finished};

/// A chat completion request: the fields this server reads. Any other field of OpenAI's
/// request that would change the answer is refused with 400 naming it — never silently dropped.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// Every other field: client tools, sampling, `response_format`, checked by [`chat_asks`].
    #[serde(flatten)]
    #[schema(ignore)]
    other: Map<String, Value>,
}

/// Fields that change nothing about the answer: accepted and not used.
pub(crate) const HARMLESS: &[&str] = &[
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "parallel_tool_calls",
    "truncation",
    "include",
    "background",
];

/// A refused field: its name and why.
pub(crate) type Unsupported = (String, String);

/// The client's asks of a chat request: its tools and the model settings it sets.
fn chat_asks(other: &Map<String, Value>) -> Result<Asks, Unsupported> {
    let mut asks = Asks::default();
    for (name, value) in other {
        if HARMLESS.contains(&name.as_str()) || value.is_null() {
            continue;
        }
        let refused = |why: &str| (name.clone(), why.to_string());
        match name.as_str() {
            "n" if value.as_u64() == Some(1) => {}
            "n" => return Err(refused("`n` above 1 is not supported: ask once for each completion")),
            "tools" => asks.tools = chat_tools(value).map_err(|why| refused(&why))?,
            "response_format" => {
                asks.options.response_format = chat_format(value).map_err(|why| refused(&why))?;
            }
            "functions" | "function_call" => {
                return Err(refused("the legacy `functions`/`function_call` are not supported: use `tools`"));
            }
            _ => sampling(name, value, &mut asks.options).map_err(|why| refused(&why))?,
        }
    }
    Ok(asks)
}

/// A model setting both endpoints take (`tool_choice` in either API's form), set on `options`.
pub(crate) fn sampling(name: &str, value: &Value, options: &mut ChatOptions) -> Result<(), String> {
    let number = || value.as_f64().ok_or(format!("`{name}` must be a number"));
    let count =
        || value.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or(format!("`{name}` must be a positive integer"));
    match name {
        "temperature" => options.temperature = Some(number()? as f32),
        "max_tokens" | "max_completion_tokens" | "max_output_tokens" => options.max_tokens = Some(count()?),
        "stop" => {
            options.stop = match value {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
                _ => return Err("`stop` must be a string or a list of strings".into()),
            }
        }
        "reasoning_effort" => options.reasoning_effort = value.as_str().map(str::to_string),
        "tool_choice" => options.tool_choice = Some(tool_choice(value)?),
        _ => {
            return Err(format!(
                "`{name}` is not supported: a served agent's other model settings come from the server's \
                 configuration; leave it out"
            ));
        }
    }
    Ok(())
}

/// `tool_choice`: `auto`, `none`, `required`, or a named function (either API's form).
fn tool_choice(value: &Value) -> Result<ToolChoice, String> {
    match value {
        Value::String(s) if s == "auto" => Ok(ToolChoice::Auto),
        Value::String(s) if s == "none" => Ok(ToolChoice::None),
        Value::String(s) if s == "required" => Ok(ToolChoice::Required),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("function").and_then(|f| f.get("name")).or_else(|| o.get("name"));
            name.and_then(Value::as_str)
                .map(|n| ToolChoice::Tool(n.to_string()))
                .ok_or_else(|| "a `tool_choice` function needs its `name`".to_string())
        }
        _ => Err("`tool_choice` must be `auto`, `none`, `required` or a function".into()),
    }
}

/// A tool definition as either API writes it (`function` nested or flat).
pub(crate) fn tool_spec(tool: &Value) -> Result<ToolSpec, String> {
    if tool.get("type").and_then(Value::as_str) != Some("function") {
        return Err(format!("only `function` tools are supported, not `{}`", tool["type"]));
    }
    let function = tool.get("function").unwrap_or(tool);
    let name = function.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let name = name.ok_or("a function tool needs a `name`")?;
    Ok(ToolSpec {
        name: name.to_string(),
        description: function.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
        parameters: function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
    })
}

fn chat_tools(value: &Value) -> Result<Vec<ToolSpec>, String> {
    value.as_array().ok_or("`tools` must be a list")?.iter().map(tool_spec).collect()
}

/// `response_format` of a chat request.
fn chat_format(value: &Value) -> Result<Option<ResponseFormat>, String> {
    match value["type"].as_str() {
        Some("json_schema") => format_of(&value["json_schema"]).map(Some),
        other => simple_format(other),
    }
}

/// `text` and `json_object` formats (`None` for free text).
pub(crate) fn simple_format(kind: Option<&str>) -> Result<Option<ResponseFormat>, String> {
    match kind {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        _ => Err("the format's `type` must be `text`, `json_object` or `json_schema`".into()),
    }
}

/// A JSON-schema format from its `name`, `schema` and `strict`.
pub(crate) fn format_of(spec: &Value) -> Result<ResponseFormat, String> {
    let schema = spec.get("schema").filter(|s| s.is_object()).ok_or("a `json_schema` format needs its `schema`")?;
    let format = ResponseFormat::JsonSchema {
        name: spec.get("name").and_then(Value::as_str).unwrap_or("answer").to_string(),
        schema: schema.clone(),
        strict: spec.get("strict").and_then(Value::as_bool).unwrap_or(false),
    };
    crate::answer::check_for(Some(&format))?;
    Ok(format)
}

/// Streaming options.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// A message: `role`, `content` as a string or a list of parts (`text`, `file`), an assistant's
/// `tool_calls`, a tool result's `tool_call_id`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

impl ChatMessage {
    /// The message as a turn of the conversation.
    fn turn(&self) -> Result<Turn, String> {
        let mut turn = Turn { role: self.role.clone(), tool_call_id: self.tool_call_id.clone(), ..Default::default() };
        match &self.content {
            Some(Value::String(s)) => turn.parts.push(s.clone()),
            Some(Value::Array(parts)) => {
                for part in parts {
                    match part["type"].as_str() {
                        Some("file") => {
                            let (name, text) = file_part(&part["file"], turn.files.len(), &turn.files)?;
                            turn.files.push((name, text));
                        }
                        _ => turn.parts.extend(part["text"].as_str().map(str::to_string)),
                    }
                }
            }
            _ => {}
        }
        for call in self.tool_calls.iter().flatten() {
            let function = &call["function"];
            turn.tool_calls.push(ToolCall {
                id: call["id"].as_str().ok_or("a tool call needs its `id`")?.to_string(),
                name: function["name"].as_str().ok_or("a tool call needs its function's `name`")?.to_string(),
                arguments: arguments(&function["arguments"]),
            });
        }
        if turn.role == "tool" && turn.tool_call_id.is_none() {
            return Err("a `tool` message needs its `tool_call_id`".into());
        }
        Ok(turn)
    }
}

/// A call's arguments as sent (a JSON text): parsed, or kept as the raw text.
pub(crate) fn arguments(value: &Value) -> Value {
    match value {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| value.clone()),
        Value::Null => json!({}),
        other => other.clone(),
    }
}

/// A call's arguments as the APIs send them: a JSON text.
pub(crate) fn arguments_text(call: &ToolCall) -> String {
    match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// An attached file (`{"filename", "file_data": "data:…;base64,…"}`): its input name and text.
pub(crate) fn file_part(file: &Value, index: usize, taken: &[(String, String)]) -> Result<(String, String), String> {
    let data = file["file_data"].as_str().ok_or("a file part needs `file_data` (a base64 data URL)")?;
    let encoded = data.split_once(";base64,").map_or(data, |(_, b64)| b64);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("a file part's data is not base64: {e}"))?;
    let name = input_name(file["filename"].as_str(), index, &|n: &str| taken.iter().any(|(t, _)| t == n));
    Ok((name, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Checks a request built from a conversation against what its model can honour, and starts it.
pub(crate) fn start_run(server: &Arc<Server>, request: RunRequest) -> Result<Arc<RunRecord>, Box<Response>> {
    if let Some(why) = request.refused_asks(server.runner.kind_of(&request)) {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, "invalid_request_error", &why)));
    }
    if let Some(why) = server.runner.tool_clash(&request) {
        return Err(Box::new(tool_clash(&why)));
    }
    server.start(request).map_err(|Busy| Box::new(busy()))
}

/// 400 for a client tool named like one of the server's (`param` `tools`).
pub(crate) fn tool_clash(message: &str) -> Response {
    let error = ErrorDetail {
        message: message.into(),
        kind: "invalid_request_error".into(),
        param: Some("tools".into()),
        code: Some("tool_name_clash".into()),
    };
    (StatusCode::BAD_REQUEST, Json(ErrorBody { error })).into_response()
}

/// A refusal as an OpenAI error.
pub(crate) fn refused((status, message): Refusal) -> Response {
    error(status, "invalid_request_error", &message)
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

#[utoipa::path(post, path = "/v1/chat/completions", request_body = ChatRequest,
    responses((status = 200, body = ChatCompletion,
            description = "A `chat.completion`, or `chat.completion.chunk` events when `stream` is set"),
        (status = 400, body = crate::server::ErrorBody), (status = 401, body = crate::server::ErrorBody),
        (status = 403, body = crate::server::ErrorBody), (status = 404, body = crate::server::ErrorBody),
        (status = 413, body = crate::server::ErrorBody), (status = 415, body = crate::server::ErrorBody),
        (status = 422, body = crate::server::ErrorBody,
            description = "The model's answer never fit `response_format` (`code: response_format_mismatch`)"),
        (status = 429, body = crate::server::ErrorBody),
        (status = 500, body = crate::server::ErrorBody,
            description = "The run failed; `x-should-retry: false` (a retry would run it again)")))]
pub(crate) async fn chat_completions(
    State(server): State<Arc<Server>>,
    crate::body::Body(request): crate::body::Body<ChatRequest>,
) -> Response {
    let asks = match chat_asks(&request.other) {
        Ok(asks) => asks,
        Err((param, why)) => return unsupported_parameter(&param, &why),
    };
    let turns = match request.messages.iter().map(ChatMessage::turn).collect::<Result<Vec<_>, _>>() {
        Ok(turns) => turns,
        Err(e) => return refused((StatusCode::BAD_REQUEST, e)),
    };
    let format = asks.options.response_format.clone();
    let agents = server.runner.agents();
    let run_request = match run_request(&request.model, turns, None, asks, &agents, &server.continuations) {
        Ok(r) => r,
        Err(refusal) => return refused(refusal),
    };
    let run = match start_run(&server, run_request) {
        Ok(run) => run,
        Err(response) => return *response,
    };
    let id = format!("chatcmpl-{}", run.id.trim_start_matches("run_"));
    if request.stream {
        let usage = request.stream_options.as_ref().is_some_and(|o| o.include_usage);
        return Sse::new(chunks(server, run, id, (request.model, format), usage))
            .keep_alive(KeepAlive::default())
            .into_response();
    }
    let mut output = CancelOnDrop(run.clone()).wait().await;
    if !output.ok {
        return failure(&output, format.as_ref());
    }
    server.continuations.settle(&mut output);
    let waiting = !output.tool_calls.is_empty();
    let message = AssistantMessage {
        role: "assistant".into(),
        content: Some(output.text.clone()).filter(|t| !(waiting && t.is_empty())),
        tool_calls: wire_calls(&output.tool_calls),
    };
    let finish = if waiting { "tool_calls" } else { "stop" };
    Json(ChatCompletion {
        id,
        object: "chat.completion".into(),
        created: now(),
        model: request.model,
        choices: vec![Choice { index: 0, message, finish_reason: finish.into(), logprobs: None }],
        usage: usage(&output),
    })
    .into_response()
}

/// A chat completion as this server answers it (not streamed).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ChatCompletion {
    id: String,
    /// Always `chat.completion`.
    object: String,
    /// Unix seconds.
    created: u64,
    model: String,
    /// One choice.
    choices: Vec<Choice>,
    usage: TokenUsage,
}

/// The one choice of a completion.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Choice {
    index: u32,
    message: AssistantMessage,
    /// `stop`, or `tool_calls` when the model called the client's tools.
    finish_reason: String,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    logprobs: Option<Value>,
}

/// The answer: its text, and the client's tool calls the run waits on.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AssistantMessage {
    /// Always `assistant`.
    role: String,
    /// The text (null when the model only called tools).
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall>,
}

/// A tool call as a chat message carries it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct WireCall {
    index: usize,
    id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    kind: String,
    function: WireFunction,
}

/// The function a call names, with its arguments as a JSON text.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct WireFunction {
    name: String,
    arguments: String,
}

/// Tokens of the whole run tree.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct TokenUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// Tool calls as a chat message carries them.
fn wire_calls(calls: &[ToolCall]) -> Vec<WireCall> {
    calls
        .iter()
        .enumerate()
        .map(|(index, c)| WireCall {
            index,
            id: c.id.clone(),
            kind: "function".into(),
            function: WireFunction { name: c.name.clone(), arguments: arguments_text(c) },
        })
        .collect()
}

/// Cancels the run if the client goes away before it has finished.
pub(crate) struct CancelOnDrop(pub(crate) Arc<RunRecord>);

impl CancelOnDrop {
    pub(crate) async fn wait(&self) -> RunOutput {
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

/// The longest account of why an answer missed its format that an error carries.
const MAX_MISMATCH_CHARS: usize = 1000;

/// Why a run that ended `no_answer` under a requested `response_format` has no answer: the
/// model's last answer checked again, the check's verdict in at most [`MAX_MISMATCH_CHARS`].
/// `None` for any other ending.
pub(crate) fn format_mismatch(output: &RunOutput, format: Option<&ResponseFormat>) -> Option<ErrorDetail> {
    let format = format.filter(|_| output.outcome == recursive_core::FinishReason::NoAnswer)?;
    let verdict =
        crate::answer::check_for(Some(format)).ok().flatten().and_then(|check| check.0.check(&output.text).err());
    let why = verdict.unwrap_or_else(|| "it was refused".to_string());
    let mut message = format!(
        "the model's answer did not match the requested `response_format`, also after it was asked to correct it: {why}"
    );
    if let Some((at, _)) = message.char_indices().nth(MAX_MISMATCH_CHARS) {
        message.truncate(at);
        message.push('…');
    }
    Some(ErrorDetail {
        message,
        kind: "invalid_request_error".into(),
        param: Some("response_format".into()),
        code: Some("response_format_mismatch".into()),
    })
}

/// A run that ended without its answer: 422 `response_format_mismatch` when its answer never
/// fit the requested format (see [`format_mismatch`]); else 500. Either is marked not to be
/// retried (`x-should-retry: false`, which the OpenAI SDKs obey) — a retry would run the whole
/// agent again, tools and all.
pub(crate) fn failure(output: &RunOutput, format: Option<&ResponseFormat>) -> Response {
    let mut response = match format_mismatch(output, format) {
        Some(error) => (StatusCode::UNPROCESSABLE_ENTITY, Json(ErrorBody { error })).into_response(),
        None => run_failed(output),
    };
    response.headers_mut().insert("x-should-retry", axum::http::HeaderValue::from_static("false"));
    response
}

/// 500 for a run that failed.
fn run_failed(output: &RunOutput) -> Response {
    let message = output.error.clone().unwrap_or_else(|| format!("the run ended {}", output.outcome));
    error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", &message)
}

fn usage(output: &RunOutput) -> TokenUsage {
    TokenUsage {
        prompt_tokens: output.input_tokens,
        completion_tokens: output.output_tokens,
        total_tokens: output.input_tokens + output.output_tokens,
    }
}

pub(crate) fn now() -> u64 {
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
    server: Arc<Server>,
    run: Arc<RunRecord>,
    id: String,
    (model, format): (String, Option<ResponseFormat>),
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
        let mut output = loop {
            let (events, _) = run.events_from(next);
            let full = events.len() == crate::runs::EVENT_PAGE;
            for (i, event) in events {
                let event = crate::runs::parse_event(&event);
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
            if full {
                continue;
            }
            if let Some(output) = run.result() {
                break output;
            }
            // A client that went away while nothing was sent is noticed here: the run is
            // cancelled (the guard) instead of going on calling the model for nobody.
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tx.closed() => return,
            }
        };
        if !output.ok {
            let _ = send(Event::default().data(stream_error(&output, format.as_ref()))).await;
            return;
        }
        // What the answer adds beyond the text already streamed (all of it for an RLM).
        let rest = output.text.strip_prefix(streamed.as_str()).unwrap_or(&output.text).to_string();
        if !rest.is_empty() && !send(chunk(&id, &model, json!({"content": rest}), None)).await {
            return;
        }
        server.continuations.settle(&mut output);
        let finish = match output.tool_calls.is_empty() {
            true => "stop",
            false => {
                if !send(chunk(&id, &model, json!({"tool_calls": wire_calls(&output.tool_calls)}), None)).await {
                    return;
                }
                "tool_calls"
            }
        };
        if !send(chunk(&id, &model, json!({}), Some(finish))).await {
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

/// The error event that ends the stream of a run without its answer.
fn stream_error(output: &RunOutput, format: Option<&ResponseFormat>) -> String {
    let error = format_mismatch(output, format).unwrap_or_else(|| ErrorDetail {
        message: output.error.clone().unwrap_or_else(|| format!("the run ended {}", output.outcome)),
        kind: "server_error".into(),
        param: None,
        code: None,
    });
    json!(ErrorBody { error }).to_string()
}

//! OpenAI's Responses API for the same models as the chat endpoint: `POST /v1/responses`,
//! streamed (typed events: `response.created`, `response.output_text.delta`,
//! `response.function_call_arguments.done`, `response.completed`…) or not.
//!
//! `input` is a text or a list of items (messages with `input_text`/`output_text`/`input_file`
//! parts, `function_call` and `function_call_output`); `instructions` become the system
//! message. Function `tools` are the client's own, as in chat; a call to one comes back as a
//! `function_call` output item, answered by a `function_call_output` item in the next request
//! (with or without `previous_response_id`). `previous_response_id` continues any response this
//! server still keeps (the last 1,024, in memory). `text.format` (JSON schema) is checked like
//! `response_format`, the sampling fields forwarded, anything else that would change the answer
//! refused with 400.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use recursive_core::{Asks, Message, ToolCall};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::conversation::{Turn, run_request};
use crate::openai::{
    CancelOnDrop, HARMLESS, Unsupported, arguments, arguments_text, failure, file_part, format_of, now, refused,
    sampling, simple_format, start_run, tool_spec,
};
use crate::runs::{RunOutput, RunRecord, RunRequest};
use crate::server::{Server, unsupported_parameter};

/// A Responses request: the fields this server reads; the rest is checked by [`asks`].
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct ResponsesRequest {
    model: String,
    /// A text, or a list of input items.
    #[schema(value_type = Object)]
    input: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(flatten)]
    #[schema(ignore)]
    other: Map<String, Value>,
}

/// The client's asks of a Responses request.
fn asks(other: &Map<String, Value>) -> Result<Asks, Unsupported> {
    let mut asks = Asks::default();
    for (name, value) in other {
        if HARMLESS.contains(&name.as_str()) || value.is_null() {
            continue;
        }
        let refused = |why: String| (name.clone(), why);
        match name.as_str() {
            "tools" => {
                let tools = value.as_array().ok_or("`tools` must be a list".to_string()).map_err(refused)?;
                asks.tools = tools.iter().map(tool_spec).collect::<Result<_, _>>().map_err(refused)?;
            }
            "text" => asks.options.response_format = text_format(value).map_err(refused)?,
            "reasoning" => asks.options.reasoning_effort = value["effort"].as_str().map(str::to_string),
            _ => sampling(name, value, &mut asks.options).map_err(refused)?,
        }
    }
    Ok(asks)
}

/// `text: {format: {type, name, schema, strict}}`.
fn text_format(value: &Value) -> Result<Option<recursive_core::ResponseFormat>, String> {
    let format = &value["format"];
    match format["type"].as_str() {
        None => Ok(None),
        Some("json_schema") => format_of(format).map(Some),
        other => simple_format(other),
    }
}

/// The input items as turns of a conversation (`instructions` first).
fn turns(input: &Value, instructions: Option<&str>) -> Result<Vec<Turn>, String> {
    let mut turns: Vec<Turn> = instructions
        .filter(|i| !i.is_empty())
        .map(|i| Turn { role: "system".into(), parts: vec![i.to_string()], ..Default::default() })
        .into_iter()
        .collect();
    match input {
        Value::String(text) => {
            turns.push(Turn { role: "user".into(), parts: vec![text.clone()], ..Default::default() })
        }
        Value::Array(items) => {
            for item in items {
                item_turn(item, &mut turns)?;
            }
        }
        _ => return Err("`input` must be a text or a list of items".into()),
    }
    Ok(turns)
}

/// Adds one input item to the conversation.
fn item_turn(item: &Value, turns: &mut Vec<Turn>) -> Result<(), String> {
    match item["type"].as_str() {
        None | Some("message") => turns.push(message_turn(item)?),
        Some("function_call") => {
            let call = ToolCall {
                id: item["call_id"].as_str().ok_or("a `function_call` item needs its `call_id`")?.to_string(),
                name: item["name"].as_str().ok_or("a `function_call` item needs its `name`")?.to_string(),
                arguments: arguments(&item["arguments"]),
            };
            match turns.last_mut().filter(|t| t.role == "assistant") {
                Some(assistant) => assistant.tool_calls.push(call),
                None => turns.push(Turn { role: "assistant".into(), tool_calls: vec![call], ..Default::default() }),
            }
        }
        Some("function_call_output") => {
            let id = item["call_id"].as_str().ok_or("a `function_call_output` item needs its `call_id`")?;
            let output = match &item["output"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
                other => other.to_string(),
            };
            turns.push(Turn {
                role: "tool".into(),
                parts: vec![output],
                tool_call_id: Some(id.into()),
                ..Default::default()
            });
        }
        Some("reasoning") => {}
        Some(other) => return Err(format!("input items of type `{other}` are not supported")),
    }
    Ok(())
}

/// A message item: `role` and `content` (a text, or `input_text`/`output_text`/`input_file` parts).
fn message_turn(item: &Value) -> Result<Turn, String> {
    let role = item["role"].as_str().ok_or("a message item needs its `role`")?;
    let mut turn = Turn { role: role.to_string(), ..Default::default() };
    match &item["content"] {
        Value::String(text) => turn.parts.push(text.clone()),
        Value::Array(parts) => {
            for part in parts {
                match part["type"].as_str() {
                    Some("input_text" | "output_text" | "text") => {
                        turn.parts.extend(part["text"].as_str().map(str::to_string));
                    }
                    Some("input_file") => {
                        let file = file_part(part, turn.files.len(), &turn.files)?;
                        turn.files.push(file);
                    }
                    Some(other) => return Err(format!("content parts of type `{other}` are not supported")),
                    None => return Err("a content part needs its `type`".into()),
                }
            }
        }
        _ => return Err("a message item needs its `content`".into()),
    }
    Ok(turn)
}

#[utoipa::path(post, path = "/v1/responses", request_body = ResponsesRequest,
    responses((status = 200, description = "A `response`, or its typed events when `stream` is set"),
        (status = 400, body = crate::server::ErrorBody), (status = 401, body = crate::server::ErrorBody),
        (status = 403, body = crate::server::ErrorBody), (status = 404, body = crate::server::ErrorBody),
        (status = 413, body = crate::server::ErrorBody), (status = 415, body = crate::server::ErrorBody),
        (status = 422, body = crate::server::ErrorBody,
            description = "The model's answer never fit `response_format` (`code: response_format_mismatch`)"),
        (status = 429, body = crate::server::ErrorBody),
        (status = 500, body = crate::server::ErrorBody,
            description = "The run failed; `x-should-retry: false` (a retry would run it again)")))]
pub(crate) async fn create_response(
    State(server): State<Arc<Server>>,
    crate::body::Body(request): crate::body::Body<ResponsesRequest>,
) -> Response {
    let asks = match asks(&request.other) {
        Ok(asks) => asks,
        Err((param, why)) => return unsupported_parameter(&param, &why),
    };
    let turns = match turns(&request.input, request.instructions.as_deref()) {
        Ok(turns) => turns,
        Err(e) => return refused((StatusCode::BAD_REQUEST, e)),
    };
    let prior = match &request.previous_response_id {
        None => None,
        Some(id) => match server.continuations.get(id) {
            Some(prior) => Some(prior),
            None => {
                let message = format!("the response `{id}` is not kept by this server (it keeps the latest 1,024)");
                return refused((StatusCode::NOT_FOUND, message));
            }
        },
    };
    let agents = server.runner.agents();
    let run_request = match run_request(&request.model, turns, prior, asks, &agents, &server.continuations) {
        Ok(r) => r,
        Err(refusal) => return refused(refusal),
    };
    let asked =
        Asked { request: run_request.clone(), model: request.model.clone(), previous: request.previous_response_id };
    let run = match start_run(&server, run_request) {
        Ok(run) => run,
        Err(response) => return *response,
    };
    let id = format!("resp_{}", run.id.trim_start_matches("run_"));
    if request.stream {
        return Sse::new(events(server, run, id, asked)).keep_alive(KeepAlive::default()).into_response();
    }
    let mut output = CancelOnDrop(run.clone()).wait().await;
    if !output.ok {
        return failure(&output, asked.request.options.response_format.as_ref());
    }
    keep(&server, &id, &asked.request, &mut output);
    let items = output_items(&id, &output.text, &output.tool_calls);
    Json(response_object(&id, &asked, "completed", items, Some(&output))).into_response()
}

/// What a response was asked, for the object that reports it.
struct Asked {
    request: RunRequest,
    model: String,
    previous: Option<String>,
}

/// Keeps the conversation of a finished response under its id (and its client calls' ids), so
/// `previous_response_id` and the client's tool results continue it.
fn keep(server: &Server, id: &str, request: &RunRequest, output: &mut RunOutput) {
    let conversation = server.continuations.settle(output).unwrap_or_else(|| {
        let mut messages = request.history.clone();
        if !request.input.is_empty() {
            messages.push(Message::user(request.input.clone()));
        }
        messages.push(Message::assistant(output.text.clone()));
        Arc::new(messages)
    });
    server.continuations.keep(id.to_string(), conversation);
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content: Vec<Value> = match status {
        "in_progress" => Vec::new(),
        _ => vec![text_part(text)],
    };
    json!({"type": "message", "id": format!("msg_{}", id.trim_start_matches("resp_")), "status": status,
        "role": "assistant", "content": content})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn call_item(call: &ToolCall, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", call.id.trim_start_matches("call_")), "call_id": call.id,
        "name": call.name, "arguments": arguments, "status": status})
}

/// The output items: the answer's message (when there is text), then the client's calls.
fn output_items(id: &str, text: &str, calls: &[ToolCall]) -> Vec<Value> {
    let message = (!text.is_empty()).then(|| message_item(id, text, "completed"));
    message.into_iter().chain(calls.iter().map(|c| call_item(c, &arguments_text(c), "completed"))).collect()
}

/// The `response` object.
fn response_object(id: &str, asked: &Asked, status: &str, output: Vec<Value>, done: Option<&RunOutput>) -> Value {
    let options = &asked.request.options;
    let usage = done.map(|o| {
        json!({"input_tokens": o.input_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": o.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": o.input_tokens + o.output_tokens})
    });
    let tools: Vec<Value> = asked
        .request
        .tools
        .iter()
        .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": false}))
        .collect();
    json!({
        "id": id, "object": "response", "created_at": now(), "status": status, "model": asked.model,
        "output": output, "usage": usage, "error": null, "incomplete_details": null,
        "instructions": null, "metadata": {}, "parallel_tool_calls": true,
        "previous_response_id": asked.previous, "temperature": options.temperature,
        "max_output_tokens": options.max_tokens, "tool_choice": "auto", "tools": tools, "top_p": null,
        "text": {"format": {"type": "text"}}, "truncation": "disabled", "store": true,
    })
}

/// Numbers and types the events of one stream.
struct Emitter {
    tx: tokio::sync::mpsc::Sender<Event>,
    sequence: u64,
}

impl Emitter {
    async fn send(&mut self, kind: &str, mut body: Value) -> bool {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.tx.send(Event::default().event(kind).data(body.to_string())).await.is_ok()
    }
}

/// The typed events of a streamed response: created, the answer's text as it streams (the
/// message item opened at its first delta), the client's calls, completed (or failed).
fn events(
    server: Arc<Server>,
    run: Arc<RunRecord>,
    id: String,
    asked: Asked,
) -> impl futures::Stream<Item = Result<Event, std::convert::Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let guard = CancelOnDrop(run.clone());
        let mut out = Emitter { tx, sequence: 0 };
        let started = response_object(&id, &asked, "in_progress", Vec::new(), None);
        if !out.send("response.created", json!({"response": started})).await
            || !out.send("response.in_progress", json!({"response": started})).await
        {
            return;
        }
        let Some((mut output, streamed)) = stream_text(&run, &id, &mut out).await else { return };
        if !output.ok {
            let format = asked.request.options.response_format.as_ref();
            let (code, message) = match crate::openai::format_mismatch(&output, format) {
                Some(mismatch) => ("response_format_mismatch".to_string(), mismatch.message),
                None => {
                    let message = output.error.clone().unwrap_or_else(|| format!("the run ended {}", output.outcome));
                    ("server_error".to_string(), message)
                }
            };
            let mut failed = response_object(&id, &asked, "failed", Vec::new(), Some(&output));
            failed["error"] = json!({"code": code, "message": message});
            let _ = out.send("response.failed", json!({"response": failed})).await;
            return;
        }
        keep(&server, &id, &asked.request, &mut output);
        let Some(items) = finish_items(&id, &output, streamed, &mut out).await else { return };
        let done = response_object(&id, &asked, "completed", items, Some(&output));
        let _ = out.send("response.completed", json!({"response": done})).await;
        drop(guard);
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// Streams the root run's text until the run ends: its output and the text streamed (`None`
/// when the client left).
async fn stream_text(run: &RunRecord, id: &str, out: &mut Emitter) -> Option<(RunOutput, Option<String>)> {
    let mut changes = run.watch();
    let (mut next, mut streamed) = (0, None::<String>);
    loop {
        let (events, _) = run.events_from(next);
        let full = events.len() == crate::runs::EVENT_PAGE;
        for (i, event) in events {
            let event = crate::runs::parse_event(&event);
            next = i + 1;
            let delta = event["delta"].as_str().unwrap_or_default();
            if event["type"] != "partial_text" || event["depth"] != 0 || delta.is_empty() {
                continue;
            }
            if streamed.is_none() && !open_message(id, out).await {
                return None;
            }
            streamed.get_or_insert_default().push_str(delta);
            if !text_delta(id, delta, out).await {
                return None;
            }
        }
        if full {
            continue;
        }
        if let Some(output) = run.result() {
            return Some((output, streamed));
        }
        // A client gone while nothing was sent is noticed here too (the run is then cancelled).
        tokio::select! {
            changed = changes.changed() => changed.ok()?,
            () = out.tx.closed() => return None,
        }
    }
}

async fn open_message(id: &str, out: &mut Emitter) -> bool {
    let item_id = format!("msg_{}", id.trim_start_matches("resp_"));
    out.send("response.output_item.added", json!({"output_index": 0, "item": message_item(id, "", "in_progress")}))
        .await
        && out
            .send(
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": text_part("")}),
            )
            .await
}

async fn text_delta(id: &str, delta: &str, out: &mut Emitter) -> bool {
    let item_id = format!("msg_{}", id.trim_start_matches("resp_"));
    let body = json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": delta, "logprobs": []});
    out.send("response.output_text.delta", body).await
}

/// Closes the message (with what the answer adds beyond the streamed text) and sends each
/// client call as an item; returns the output items.
async fn finish_items(id: &str, output: &RunOutput, streamed: Option<String>, out: &mut Emitter) -> Option<Vec<Value>> {
    let mut text = streamed.clone().unwrap_or_default();
    let rest = output.text.strip_prefix(text.as_str()).unwrap_or(&output.text).to_string();
    let mut items = Vec::new();
    if streamed.is_some() || !rest.is_empty() {
        if streamed.is_none() && !open_message(id, out).await {
            return None;
        }
        if !rest.is_empty() && !text_delta(id, &rest, out).await {
            return None;
        }
        text.push_str(&rest);
        let item_id = format!("msg_{}", id.trim_start_matches("resp_"));
        let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        let item = message_item(id, &text, "completed");
        let sent = out.send("response.output_text.done", merge(&at, json!({"text": text, "logprobs": []}))).await
            && out.send("response.content_part.done", merge(&at, json!({"part": text_part(&text)}))).await
            && out.send("response.output_item.done", json!({"output_index": 0, "item": item})).await;
        if !sent {
            return None;
        }
        items.push(item);
    }
    for call in &output.tool_calls {
        let index = items.len();
        let args = arguments_text(call);
        let item = call_item(call, &args, "completed");
        let at = json!({"item_id": item["id"], "output_index": index});
        let sent = out
            .send(
                "response.output_item.added",
                json!({"output_index": index, "item": call_item(call, "", "in_progress")}),
            )
            .await
            && out.send("response.function_call_arguments.delta", merge(&at, json!({"delta": args}))).await
            && out.send("response.function_call_arguments.done", merge(&at, json!({"arguments": args}))).await
            && out.send("response.output_item.done", json!({"output_index": index, "item": item})).await;
        if !sent {
            return None;
        }
        items.push(item);
    }
    Some(items)
}

/// `base` with the fields of `more`.
fn merge(base: &Value, more: Value) -> Value {
    let mut merged = base.clone();
    if let (Some(target), Value::Object(fields)) = (merged.as_object_mut(), more) {
        target.extend(fields);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_become_turns_with_calls_joined_to_their_message() {
        let input = json!([
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"},
            {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "rain"},
            {"type": "function_call_output", "call_id": "c2", "output": "sun"},
        ]);
        let turns = turns(&input, Some("Be brief.")).unwrap();
        let roles: Vec<&str> = turns.iter().map(|t| t.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        assert_eq!(turns[2].tool_calls.len(), 2);
        assert_eq!(turns[2].tool_calls[0].arguments, json!({"city": "Oslo"}));
    }

    #[test]
    fn unsupported_items_and_parts_are_refused() {
        assert!(turns(&json!([{"type": "web_search_call"}]), None).unwrap_err().contains("web_search_call"));
        let image = json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]);
        assert!(turns(&image, None).unwrap_err().contains("input_image"));
    }

    #[test]
    fn text_format_and_sampling_become_options() {
        let other = json!({"temperature": 0.3, "max_output_tokens": 50,
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}});
        let asks = asks(other.as_object().unwrap()).unwrap();
        assert_eq!(asks.options.temperature, Some(0.3));
        assert_eq!(asks.options.max_tokens, Some(50));
        assert!(asks.options.response_format.is_some());
        let (param, _) = super::asks(json!({"top_p": 0.5}).as_object().unwrap()).unwrap_err();
        assert_eq!(param, "top_p");
    }
}

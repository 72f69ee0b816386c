//! The server's other runnables as LangGraph assistants: `agent`, `rlm` and each named
//! runnable (`--agent NAME=FILE`), run stateless on a LangGraph `{"messages": [...]}` input —
//! the conversation read as the OpenAI endpoint reads it ([`crate::conversation`]), run as a
//! run of the runs API — and answered as `{"messages": [..., the answer]}`. They keep no
//! thread: a run on a thread names a graph.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Api, Refused, bad_request};
use crate::conversation::{MODELS, Turn};
use crate::runs::RunRecord;

/// The runnables offered as assistants besides the graphs (a graph's name wins).
pub(crate) fn names(api: &Api) -> Vec<String> {
    let graphs: Vec<String> =
        api.server.config.graphs.as_ref().map(|h| h.graphs()).unwrap_or_default().into_iter().map(|g| g.name).collect();
    MODELS.iter().map(|m| m.to_string()).chain(api.server.runner.agents()).filter(|n| !graphs.contains(n)).collect()
}

/// A runnable's assistant.
pub(crate) fn assistant(name: &str, at: &str) -> Value {
    let description = match name {
        "agent" => "The agent loop with the server's tools.".to_string(),
        "rlm" => "A recursive language model over the conversation.".to_string(),
        named => format!("The runnable `{named}`."),
    };
    json!({
        "assistant_id": name, "graph_id": name, "name": name, "description": description,
        "config": {}, "context": {}, "metadata": {"created_by": "system", "stateless": true},
        "version": 1, "created_at": at, "updated_at": at,
    })
}

/// A LangGraph message (`{"type": "human", "content"}` or `{"role": "user", "content"}`) as a
/// turn of a conversation; its LangGraph form kept for the answer.
fn turn(message: &Value) -> Result<Turn, Refused> {
    let kind = message.get("type").or_else(|| message.get("role")).and_then(Value::as_str).unwrap_or_default();
    let role = match kind {
        "human" | "user" => "user",
        "ai" | "assistant" => "assistant",
        "system" | "developer" => "system",
        other => {
            return Err(bad_request(&format!(
                "a message of type `{other}` is not served: send human, ai and system messages"
            )));
        }
    };
    let parts = match &message["content"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str().map(str::to_string)).collect(),
        _ => return Err(bad_request("a message's `content` must be text or text blocks")),
    };
    Ok(Turn { role: role.into(), parts, ..Turn::default() })
}

/// A message in LangGraph's (LangChain's) shape.
pub(crate) fn message(kind: &str, content: &str, id: &str) -> Value {
    json!({"type": kind, "content": content, "id": id, "additional_kwargs": {}, "response_metadata": {}, "name": null})
}

/// Starts runnable `name` on `input` (`{"messages": [...]}`): the run, and the input's messages.
pub(crate) fn start(api: &Api, name: &str, input: Option<Value>) -> Result<(Arc<RunRecord>, Vec<Value>), Refused> {
    let messages = match input {
        Some(Value::Object(mut input)) => match input.remove("messages") {
            Some(Value::Array(messages)) => messages,
            Some(Value::String(text)) => vec![json!({"type": "human", "content": text})],
            _ => return Err(bad_request("an assistant that is not a graph takes `input: {\"messages\": [...]}`")),
        },
        _ => return Err(bad_request("an assistant that is not a graph takes `input: {\"messages\": [...]}`")),
    };
    let turns = messages.iter().map(turn).collect::<Result<Vec<_>, _>>()?;
    let agents = api.server.runner.agents();
    let request =
        crate::conversation::run_request(name, turns, None, Default::default(), &agents, &api.server.continuations)
            .map_err(|(status, message)| {
                Refused::from(crate::server::error(status, "invalid_request_error", &message))
            })?;
    let record = api.server.start(request).map_err(|_| Refused::from(crate::server::busy()))?;
    let messages = messages
        .into_iter()
        .enumerate()
        .map(|(i, mut m)| {
            if let Some(m) = m.as_object_mut() {
                let kind = match m.get("type").or_else(|| m.get("role")).and_then(Value::as_str) {
                    Some("user") => "human",
                    Some("assistant") => "ai",
                    Some(other) => other,
                    None => "human",
                }
                .to_string();
                m.insert("type".into(), json!(kind));
                m.remove("role");
                m.entry("id").or_insert_with(|| json!(format!("{}-{i}", record.id)));
            }
            m
        })
        .collect();
    Ok((record, messages))
}

/// The values an agent's run ends with: its input's messages and the answer.
pub(crate) fn values(messages: &[Value], answer: &str, run: &str) -> Map<String, Value> {
    let mut all = messages.to_vec();
    all.push(message("ai", answer, &format!("run-{run}")));
    let mut values = Map::new();
    values.insert("messages".into(), Value::Array(all));
    values
}

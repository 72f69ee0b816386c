//! Rendering a scripted turn as the wire answer of each protocol: a JSON body, or SSE events
//! written one by one (text in word-sized deltas, tool arguments in two pieces, usage where the
//! protocol carries it).

use serde_json::{Value, json};

use crate::pairing::Api;
use crate::reply::Turn;

/// A rendered answer body.
pub(crate) struct Rendered {
    pub content_type: &'static str,
    /// Written and flushed one by one (one piece per SSE event).
    pub pieces: Vec<Vec<u8>>,
}

/// What the request asked for, and the ids to use.
pub(crate) struct Request<'a> {
    pub api: Api,
    pub model: &'a str,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// A number unique to this answer (message ids).
    pub serial: usize,
    /// The resolved id of each tool call of the turn.
    pub call_ids: &'a [String],
}

pub(crate) fn render(turn: &Turn, req: &Request<'_>) -> Rendered {
    match (req.api, req.stream) {
        (Api::OpenAi, false) => json_body(openai_json(turn, req)),
        (Api::Anthropic, false) => json_body(anthropic_json(turn, req)),
        (Api::OpenAi, true) => sse_body(openai_events(turn, req).into_iter().map(|e| format!("data: {e}\n\n")), true),
        (Api::Anthropic, true) => sse_body(
            anthropic_events(turn, req)
                .into_iter()
                .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default())),
            false,
        ),
    }
}

fn json_body(v: Value) -> Rendered {
    Rendered { content_type: "application/json", pieces: vec![v.to_string().into_bytes()] }
}

fn sse_body(events: impl Iterator<Item = String>, done: bool) -> Rendered {
    let mut pieces: Vec<Vec<u8>> = events.map(String::into_bytes).collect();
    if done {
        pieces.push(b"data: [DONE]\n\n".to_vec());
    }
    Rendered { content_type: "text/event-stream", pieces }
}

/// `text` in word-sized pieces, each starting with the whitespace before its word.
pub(crate) fn word_pieces(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut seen_word = false;
    for c in text.chars() {
        if c.is_whitespace() && seen_word {
            pieces.push(std::mem::take(&mut current));
            seen_word = false;
        }
        if !c.is_whitespace() {
            seen_word = true;
        }
        current.push(c);
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// `text` in two pieces (one when it is a single character).
fn halves(text: &str) -> Vec<String> {
    let count = text.chars().count();
    if count < 2 {
        return vec![text.to_string()];
    }
    let cut = text.char_indices().nth(count / 2).map(|(i, _)| i).unwrap_or(text.len());
    vec![text[..cut].to_string(), text[cut..].to_string()]
}

fn openai_finish(turn: &Turn) -> &'static str {
    if turn.max_tokens {
        "length"
    } else if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn anthropic_stop(turn: &Turn) -> &'static str {
    if turn.max_tokens {
        "max_tokens"
    } else if turn.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn openai_usage(turn: &Turn) -> Value {
    json!({
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens
    })
}

fn openai_json(turn: &Turn, req: &Request<'_>) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if turn.text.is_empty() && !turn.calls.is_empty() { Value::Null } else { json!(turn.text) }
    });
    if !turn.calls.is_empty() {
        let calls: Vec<Value> = turn
            .calls
            .iter()
            .zip(req.call_ids)
            .map(|(c, id)| {
                json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}})
            })
            .collect();
        message["tool_calls"] = json!(calls);
    }
    json!({
        "id": format!("chatcmpl-testkit-{}", req.serial),
        "object": "chat.completion",
        "created": 0,
        "model": req.model,
        "choices": [{"index": 0, "message": message, "finish_reason": openai_finish(turn)}],
        "usage": openai_usage(turn)
    })
}

fn openai_events(turn: &Turn, req: &Request<'_>) -> Vec<Value> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": format!("chatcmpl-testkit-{}", req.serial),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": req.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in word_pieces(&turn.text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, (call, id)) in turn.calls.iter().zip(req.call_ids).enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in halves(&call.arguments.to_string()) {
            events
                .push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null));
        }
    }
    events.push(chunk(json!({}), json!(openai_finish(turn))));
    if req.include_usage {
        events.push(json!({
            "id": format!("chatcmpl-testkit-{}", req.serial),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": req.model,
            "choices": [],
            "usage": openai_usage(turn)
        }));
    }
    events
}

fn anthropic_json(turn: &Turn, req: &Request<'_>) -> Value {
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.text}));
    }
    for (call, id) in turn.calls.iter().zip(req.call_ids) {
        content.push(json!({"type": "tool_use", "id": id, "name": call.name, "input": call.arguments}));
    }
    json!({
        "id": format!("msg_testkit_{}", req.serial),
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": content,
        "stop_reason": anthropic_stop(turn),
        "stop_sequence": null,
        "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens}
    })
}

fn anthropic_events(turn: &Turn, req: &Request<'_>) -> Vec<Value> {
    let mut events = vec![json!({
        "type": "message_start",
        "message": {
            "id": format!("msg_testkit_{}", req.serial), "type": "message", "role": "assistant",
            "model": req.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1}
        }
    })];
    let mut index = 0;
    if !turn.text.is_empty() {
        events.push(
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        );
        for piece in word_pieces(&turn.text) {
            events.push(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}}));
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    for (call, id) in turn.calls.iter().zip(req.call_ids) {
        events.push(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": call.name, "input": {}}}));
        for piece in halves(&call.arguments.to_string()) {
            events.push(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}}));
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    events.push(json!({
        "type": "message_delta",
        "delta": {"stop_reason": anthropic_stop(turn), "stop_sequence": null},
        "usage": {"output_tokens": turn.output_tokens}
    }));
    events.push(json!({"type": "message_stop"}));
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_into_word_pieces_that_join_back() {
        assert_eq!(word_pieces("It is  sunny."), vec!["It", " is", "  sunny."]);
        assert_eq!(word_pieces(" lead"), vec![" lead"]);
        assert!(word_pieces("").is_empty());
        assert_eq!(halves("{\"a\":1}").concat(), "{\"a\":1}");
        assert_eq!(halves("é").len(), 1);
    }
}

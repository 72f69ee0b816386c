//! The response transform of the Converse API: the events of a `ConverseStream` (one JSON
//! payload per event-stream message: `messageStart`, `contentBlockStart`, `contentBlockDelta`,
//! `contentBlockStop`, `messageStop`, `metadata`) or one `Converse` answer become a core
//! [`ChatResponse`] — answer text, `toolUse` calls (several for parallel calls), reasoning
//! (`reasoningText` with its signature, or `redactedContent`) kept as [`Reasoning`] entries the
//! way the Anthropic provider keeps Claude's thinking, the stop reason (`guardrail_intervened`
//! and `content_filtered` as provider stops with their reason) and the usage with cache reads
//! and writes.
//!
//! An exception message (`:message-type` `exception`, its kind in `:exception-type`) is a
//! provider error with the HTTP status the API gives that exception, so it is retried like the
//! same error sent as a response: throttling and unavailability are, validation is not.

use std::collections::BTreeMap;

use recursive_core::{ChatResponse, Message, ProviderError, Reasoning, StopReason, ToolCall, Usage};
use serde_json::Value;

use super::wire;
use crate::eventstream::EventMessage;
use crate::sse;

/// Maps wire usage (Bedrock's `inputTokens` already leaves out cache reads and writes).
pub fn usage(u: &wire::TokenUsage) -> Usage {
    Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_tokens: u.cache_read_input_tokens,
        cache_write_tokens: u.cache_write_input_tokens,
    }
}

/// Maps a `stopReason`.
pub fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "content_filtered" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

/// The HTTP status the API answers an exception with, so one sent inside a stream retries
/// like its HTTP equivalent.
pub fn exception_status(kind: &str) -> u16 {
    match kind.to_ascii_lowercase().trim_end_matches("exception") {
        "validation" => 400,
        "accessdenied" => 403,
        "resourcenotfound" => 404,
        "modeltimeout" => 408,
        "throttling" | "modelnotready" => 429,
        "modelerror" => 424,
        "serviceunavailable" => 503,
        // `modelStreamErrorException`: the model failed mid-stream; the API says to retry.
        "modelstreamerror" => 502,
        _ => 500,
    }
}

/// A provider error from an exception (or error) message of a stream.
pub(crate) fn stream_error(provider: &str, message: &EventMessage) -> ProviderError {
    let (kind, text) = if message.message_type() == "error" {
        let code = message.header(":error-code").unwrap_or("error").to_string();
        (code, message.header(":error-message").unwrap_or_default().to_string())
    } else {
        let kind = message.header(":exception-type").unwrap_or("exception").to_string();
        let parsed: wire::ApiError = serde_json::from_slice(&message.payload).unwrap_or_default();
        (kind, parsed.message)
    };
    ProviderError::Http {
        provider: provider.to_string(),
        status: exception_status(&kind),
        message: format!("{kind}: {text}"),
        retry_after_secs: None,
    }
}

/// An event's JSON payload as `T` (`what` names the event in the error).
fn decode<T: serde::de::DeserializeOwned>(provider: &str, what: &str, payload: &[u8]) -> Result<T, ProviderError> {
    serde_json::from_slice(payload).map_err(|e| sse::bad_json(provider, what, &String::from_utf8_lossy(payload), &e))
}

/// A content block being assembled.
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    ToolUse { id: String, name: String, json: String, input: Value },
    Reasoning { text: String, signature: String },
    Redacted(String),
}

/// Assembles a response from its stream events. A plain struct, fed with parsed events, so it
/// can be tested without HTTP.
#[derive(Debug, Default, Clone)]
pub struct ResponseAccumulator {
    blocks: BTreeMap<u32, Block>,
    stop: Option<String>,
    usage: Option<wire::TokenUsage>,
    metadata: bool,
    /// Reasoning text that arrived since [`ResponseAccumulator::take_reasoning`] was last called.
    reasoning: Vec<String>,
}

impl ResponseAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one message of the stream; returns the answer text that arrived with it. An
    /// exception is the provider's error.
    pub fn push(&mut self, provider: &str, message: &EventMessage) -> Result<Vec<String>, ProviderError> {
        if message.message_type() != "event" {
            return Err(stream_error(provider, message));
        }
        let event = message.header(":event-type").unwrap_or_default();
        let what = format!("the `{event}` event");
        let payload = message.payload.as_ref();
        match event {
            "contentBlockStart" => self.start(decode(provider, &what, payload)?),
            "contentBlockDelta" => return Ok(self.delta(decode(provider, &what, payload)?)),
            "messageStop" => {
                let stop: wire::MessageStop = decode(provider, &what, payload)?;
                self.stop = Some(stop.stop_reason);
            }
            "metadata" => {
                let metadata: wire::Metadata = decode(provider, &what, payload)?;
                self.usage = metadata.usage.or(self.usage);
                self.metadata = true;
            }
            // `messageStart` (the role) and `contentBlockStop` carry nothing to keep.
            _ => {}
        }
        Ok(Vec::new())
    }

    fn start(&mut self, start: wire::ContentBlockStart) {
        if let Some(call) = start.start.and_then(|s| s.tool_use) {
            let block =
                Block::ToolUse { id: call.tool_use_id, name: call.name, json: String::new(), input: call.input };
            self.blocks.insert(start.content_block_index, block);
        }
    }

    /// Takes in a delta; returns its answer text.
    fn delta(&mut self, delta: wire::ContentBlockDelta) -> Vec<String> {
        let index = delta.content_block_index;
        let delta = delta.delta;
        if let Some(text) = delta.text {
            if let Block::Text(t) = self.blocks.entry(index).or_insert_with(|| Block::Text(String::new())) {
                t.push_str(&text);
            }
            return vec![text];
        }
        if let Some(piece) = delta.tool_use {
            if let Some(Block::ToolUse { json, .. }) = self.blocks.get_mut(&index) {
                json.push_str(&piece.input);
            }
            return Vec::new();
        }
        if let Some(reasoning) = delta.reasoning_content {
            self.reasoning_delta(index, reasoning);
        }
        Vec::new()
    }

    fn reasoning_delta(&mut self, index: u32, delta: wire::ReasoningDelta) {
        if let Some(data) = delta.redacted_content {
            if let Block::Redacted(d) = self.blocks.entry(index).or_insert_with(|| Block::Redacted(String::new())) {
                d.push_str(&data);
            }
            return;
        }
        let block = self
            .blocks
            .entry(index)
            .or_insert_with(|| Block::Reasoning { text: String::new(), signature: String::new() });
        if let Block::Reasoning { text, signature } = block {
            if let Some(piece) = delta.text {
                text.push_str(&piece);
                self.reasoning.push(piece);
            }
            if let Some(s) = delta.signature {
                signature.push_str(&s);
            }
        }
    }

    /// The reasoning text that arrived since the last call, for streaming it.
    pub fn take_reasoning(&mut self) -> Vec<String> {
        std::mem::take(&mut self.reasoning)
    }

    /// Whether the stream is over: the stop reason and then the usage (`metadata`, the last
    /// event) arrived.
    pub fn is_done(&self) -> bool {
        self.stop.is_some() && self.metadata
    }

    /// Whether the answer ended (its stop reason arrived).
    pub fn is_finished(&self) -> bool {
        self.stop.is_some()
    }

    /// The assembled response (the model is filled in from the request).
    pub fn finish(&self) -> ChatResponse {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reasoning = Vec::new();
        for block in self.blocks.values() {
            match block {
                Block::Text(t) => text.push_str(t),
                Block::ToolUse { id, name, json, input } => calls.push(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: crate::anthropic::call_arguments(json, input),
                }),
                Block::Reasoning { text, signature } => {
                    reasoning.push(Reasoning { text: text.clone(), signature: signature.clone(), ..Default::default() })
                }
                Block::Redacted(data) => {
                    reasoning.push(Reasoning { text: data.clone(), redacted: true, ..Default::default() })
                }
            }
        }
        let stop_reason = match &self.stop {
            Some(reason) => stop_reason(reason),
            None if calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        let mut message = Message::assistant_with_tools(text, calls);
        message.reasoning = reasoning;
        sse::assembled(message, stop_reason, self.usage.as_ref().map(usage).unwrap_or_default(), "")
    }
}

/// Parses a complete (`Converse`) answer.
pub fn parse_response(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let response: wire::ConverseResponse = sse::parse_body(provider, "response", body)?;
    let Some(reason) = response.stop_reason else {
        return Err(sse::not_an_answer(provider, "the response has no stopReason, so it is no answer", body));
    };
    let mut acc = ResponseAccumulator::new();
    let content = response.output.and_then(|o| o.message).map(|m| m.content).unwrap_or_default();
    for (i, block) in content.into_iter().enumerate() {
        if let Some(b) = whole_block(block) {
            acc.blocks.insert(i as u32, b);
        }
    }
    acc.stop = Some(reason);
    acc.usage = response.usage;
    Ok(acc.finish())
}

/// A block of a complete answer.
fn whole_block(block: wire::ResponseBlock) -> Option<Block> {
    if let Some(text) = block.text {
        return Some(Block::Text(text));
    }
    if let Some(call) = block.tool_use {
        return Some(Block::ToolUse { id: call.tool_use_id, name: call.name, json: String::new(), input: call.input });
    }
    let reasoning = block.reasoning_content?;
    if let Some(data) = reasoning.redacted_content {
        return Some(Block::Redacted(data));
    }
    reasoning.reasoning_text.map(|r| Block::Reasoning { text: r.text, signature: r.signature.unwrap_or_default() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, payload: Value) -> EventMessage {
        EventMessage {
            headers: vec![
                (":event-type".into(), kind.into()),
                (":content-type".into(), "application/json".into()),
                (":message-type".into(), "event".into()),
            ],
            payload: payload.to_string().into_bytes().into(),
        }
    }

    #[test]
    fn reasoning_text_tool_input_and_usage_assemble_per_block() {
        let mut acc = ResponseAccumulator::new();
        let events = [
            event("messageStart", json!({"role": "assistant", "p": "abcd"})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Weigh "}}}),
            ),
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "it."}}})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig-1"}}}),
            ),
            event("contentBlockStop", json!({"contentBlockIndex": 0})),
            event("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"text": "Calling."}})),
            event(
                "contentBlockStart",
                json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}),
            ),
            event("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"x\":"}}})),
            event("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": " 2}"}}})),
            event("messageStop", json!({"stopReason": "tool_use"})),
            event(
                "metadata",
                json!({"usage": {"inputTokens": 10, "outputTokens": 9, "totalTokens": 25,
                "cacheReadInputTokens": 4, "cacheWriteInputTokens": 2}, "metrics": {"latencyMs": 100}}),
            ),
        ];
        let mut shown = Vec::new();
        for e in &events {
            shown.extend(acc.push("bedrock", e).unwrap());
        }
        assert_eq!(shown.concat(), "Calling.");
        assert_eq!(acc.take_reasoning().concat(), "Weigh it.");
        assert!(acc.is_done());
        let r = acc.finish();
        assert_eq!(
            r.message.tool_calls,
            vec![ToolCall { id: "t1".into(), name: "f".into(), arguments: json!({"x": 2}) }]
        );
        assert_eq!(
            r.message.reasoning,
            vec![Reasoning { text: "Weigh it.".into(), signature: "sig-1".into(), ..Default::default() }]
        );
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage, Usage { input_tokens: 10, output_tokens: 9, cache_read_tokens: 4, cache_write_tokens: 2 });
    }

    #[test]
    fn an_exception_message_is_an_error_retryable_by_its_kind() {
        let exception = |kind: &str| EventMessage {
            headers: vec![(":exception-type".into(), kind.into()), (":message-type".into(), "exception".into())],
            payload: br#"{"message":"slow down"}"#.to_vec().into(),
        };
        let mut acc = ResponseAccumulator::new();
        let throttled = acc.push("bedrock", &exception("throttlingException")).unwrap_err();
        assert!(
            matches!(&throttled, ProviderError::Http { status: 429, message, .. } if message.contains("slow down"))
        );
        assert!(throttled.is_retryable());
        assert!(!acc.push("bedrock", &exception("validationException")).unwrap_err().is_retryable());
        assert!(acc.push("bedrock", &exception("serviceUnavailableException")).unwrap_err().is_retryable());
        assert!(acc.push("bedrock", &exception("modelStreamErrorException")).unwrap_err().is_retryable());
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("stop_sequence"), StopReason::StopSequence);
        assert_eq!(stop_reason("content_filtered"), StopReason::ContentFilter);
        assert_eq!(stop_reason("guardrail_intervened"), StopReason::Other("guardrail_intervened".into()));
        assert_eq!(
            stop_reason("model_context_window_exceeded"),
            StopReason::Other("model_context_window_exceeded".into())
        );
    }

    #[test]
    fn a_complete_answer_parses_and_one_without_a_stop_reason_is_none() {
        let body = json!({"output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Plan.", "signature": "s"}}},
            {"reasoningContent": {"redactedContent": "b64"}},
            {"text": "ok"},
            {"toolUse": {"toolUseId": "t", "name": "f", "input": {"a": 1}}}]}},
            "stopReason": "tool_use", "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
            "metrics": {"latencyMs": 5}});
        let r = parse_response("bedrock", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.message.content, "ok");
        assert_eq!(r.message.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(r.message.reasoning[0].signature, "s");
        assert!(r.message.reasoning[1].redacted);
        assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (3, 4));
        let e = parse_response("bedrock", b"{}").unwrap_err();
        assert!(matches!(e, ProviderError::Malformed { .. }), "{e}");
    }
}

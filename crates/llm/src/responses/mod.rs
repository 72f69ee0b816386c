//! OpenAI's Responses API (`POST {base}/responses`), the API OpenAI serves its reasoning models
//! on: their reasoning items (summary, id, encrypted content) are kept on the assistant
//! message and sent back with the next turn of the tool loop, so a stateless run (`store:
//! false`) keeps the model's reasoning between tool calls.
//!
//! Two pure transforms around one HTTP call: [`ResponsesConfig::request_body`] (core request →
//! wire body, in [`request`]) and, back, [`ResponseAccumulator`] (stream events → response) or
//! [`parse_response`] (a complete response object → response), in [`response`].

pub mod request;
pub mod response;
pub mod wire;

use std::collections::BTreeMap;
use std::time::Duration;

use recursive_core::{ChatRequest, ChatResponse, ChatStream, ProviderError};

pub use response::{ResponseAccumulator, incomplete_reason, parse_response, usage};

use crate::http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, join_url};
use crate::shell::{self, ByteStream, HttpProvider, WireApi};
use crate::sse::{self, Decoder, SseFrame};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Default model.
pub const DEFAULT_MODEL: &str = "gpt-5-mini";

/// How to reach the Responses API.
#[derive(Clone, PartialEq)]
pub struct ResponsesConfig {
    /// Name in messages and events.
    pub name: String,
    /// Base URL up to and including the version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; `None` sends no `Authorization` header.
    pub api_key: Option<String>,
    /// Model used when a request names none.
    pub model: String,
    /// Stream the answer (SSE) or ask for one JSON response.
    pub stream: bool,
    /// Token cap (`max_output_tokens`) used when a request sets none.
    pub default_max_tokens: Option<u32>,
    /// Limit on a whole call, streaming included.
    pub timeout: Duration,
    /// Limit on connecting.
    pub connect_timeout: Duration,
    /// Extra headers sent with every request.
    pub headers: BTreeMap<String, String>,
}

shell::redacted_debug!(ResponsesConfig { default_max_tokens });

impl Default for ResponsesConfig {
    fn default() -> Self {
        Self {
            name: "openai-responses".into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            model: DEFAULT_MODEL.into(),
            stream: true,
            default_max_tokens: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            headers: BTreeMap::new(),
        }
    }
}

impl ResponsesConfig {
    /// A configuration for this base URL, with defaults for the rest.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self { base_url: base_url.into(), ..Self::default() }
    }

    /// The wire body for a request.
    pub fn request_body<'a>(&self, request: &'a ChatRequest) -> Result<wire::ResponsesRequest<'a>, ProviderError> {
        let defaults = request::Defaults {
            name: &self.name,
            model: &self.model,
            max_tokens: self.default_max_tokens,
            stream: self.stream,
        };
        request::request_body(&defaults, request)
    }
}

type EventDecoder = sse::Decoding<ResponseAccumulator>;

impl Decoder for EventDecoder {
    fn take_reasoning(&mut self) -> Vec<String> {
        self.acc.take_reasoning()
    }

    fn feed(&mut self, frame: &SseFrame) -> Result<Vec<String>, ProviderError> {
        if frame.data.trim() == "[DONE]" {
            return Ok(Vec::new());
        }
        match sse::frame_json::<wire::StreamEvent>(&self.provider, frame, &sse::frame_name(frame))? {
            Some(event) => self.acc.push(&self.provider, event),
            None => Ok(Vec::new()),
        }
    }

    fn is_done(&self) -> bool {
        self.acc.is_done()
    }

    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        let missing = "response.completed or response.incomplete";
        sse::finished(&self.provider, self.acc.is_done(), missing, &self.fallback_model, || self.acc.finish())
    }
}

/// A client of OpenAI's Responses API.
pub type ResponsesProvider = HttpProvider<ResponsesConfig>;

impl WireApi for ResponsesConfig {
    type Body<'a> = wire::ResponsesRequest<'a>;

    shell::common_fields!();

    fn auth_headers(&self) -> Vec<(String, String)> {
        shell::bearer(self.api_key.as_ref())
    }

    fn wire_body<'a>(&'a self, request: &'a ChatRequest) -> Result<(String, Self::Body<'a>), ProviderError> {
        let body = self.request_body(request)?;
        Ok((body.model.clone(), body))
    }

    fn endpoint(&self, _model: &str) -> String {
        join_url(&self.base_url, "responses")
    }

    fn decode(provider: &str, bytes: ByteStream, fallback_model: String) -> ChatStream {
        sse::decode::<ResponseAccumulator>(provider, bytes, fallback_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::StopReason;
    use serde_json::{Value, json};

    fn event(value: Value) -> wire::StreamEvent {
        serde_json::from_value(value).unwrap()
    }

    fn feed(acc: &mut ResponseAccumulator, events: Vec<Value>) -> Vec<String> {
        let mut shown = Vec::new();
        for e in events {
            shown.extend(acc.push("openai-responses", event(e)).unwrap());
        }
        shown
    }

    #[test]
    fn a_reasoning_item_and_a_call_assemble_from_their_events() {
        let mut acc = ResponseAccumulator::new();
        let shown = feed(
            &mut acc,
            vec![
                json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5", "output": []}}),
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
                json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0,
                    "item_id": "rs_1", "delta": "Plan"}),
                json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 1,
                    "item_id": "rs_1", "delta": "Act"}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning",
                    "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan"}, {"type": "summary_text", "text": "Act"}],
                    "encrypted_content": "enc"}}),
                json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call",
                    "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""}}),
                json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"a\""}),
                json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": ":1}"}),
            ],
        );
        assert!(shown.is_empty(), "neither reasoning nor calls are answer text");
        assert_eq!(acc.take_reasoning(), ["Plan", "\n\nAct"]);
        assert!(!acc.is_done());
        feed(
            &mut acc,
            vec![json!({"type": "response.completed", "response": {"model": "gpt-5", "status": "completed",
            "usage": {"input_tokens": 10, "output_tokens": 4}}})],
        );
        let r = acc.finish();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.message.tool_calls[0].id, "call_1");
        assert_eq!(r.message.tool_calls[0].arguments, json!({"a": 1}));
        let reasoning = &r.message.reasoning[0];
        assert_eq!((reasoning.id.as_str(), reasoning.signature.as_str()), ("rs_1", "enc"));
        assert_eq!(reasoning.text, "Plan\n\nAct");
    }

    #[test]
    fn two_messages_of_one_response_stay_two_paragraphs_streamed_and_assembled() {
        let mut acc = ResponseAccumulator::new();
        let shown = feed(
            &mut acc,
            vec![
                json!({"type": "response.output_text.delta", "output_index": 0, "delta": "I'll check."}),
                json!({"type": "response.output_text.delta", "output_index": 1, "delta": "Done"}),
                json!({"type": "response.output_text.delta", "output_index": 1, "delta": "."}),
                json!({"type": "response.completed", "response": {"status": "completed"}}),
            ],
        );
        assert_eq!(shown.concat(), "I'll check.\n\nDone.");
        assert_eq!(acc.finish().message.content, "I'll check.\n\nDone.");
    }

    #[test]
    fn a_messages_phase_is_kept() {
        let mut acc = ResponseAccumulator::new();
        let message = json!({"type": "message", "phase": "commentary",
            "content": [{"type": "output_text", "text": "Checking."}]});
        let call = json!({"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"});
        feed(
            &mut acc,
            vec![json!({"type": "response.completed", "response": {"status": "completed",
            "output": [message, call]}})],
        );
        let turn = acc.finish().message;
        assert_eq!(turn.phase.as_deref(), Some("commentary"));
        assert_eq!(turn.content, "Checking.");
        let mut acc = ResponseAccumulator::new();
        let commentary =
            json!({"type": "message", "phase": "commentary", "content": [{"type": "output_text", "text": "A."}]});
        let answer =
            json!({"type": "message", "phase": "final_answer", "content": [{"type": "output_text", "text": "B."}]});
        feed(
            &mut acc,
            vec![json!({"type": "response.completed", "response": {"status": "completed",
            "output": [commentary, answer]}})],
        );
        let joined = acc.finish().message;
        assert_eq!(
            (joined.content.as_str(), joined.phase),
            ("A.\n\nB.", None),
            "two phases joined are labelled neither"
        );
    }

    #[test]
    fn raw_reasoning_text_streams_as_reasoning_and_is_kept_where_no_summary_came() {
        let mut acc = ResponseAccumulator::new();
        let shown = feed(
            &mut acc,
            vec![
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
                json!({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0,
                    "item_id": "rs_1", "delta": "Think "}),
                json!({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0,
                    "item_id": "rs_1", "delta": "hard"}),
                json!({"type": "response.output_text.delta", "output_index": 1, "delta": "42"}),
            ],
        );
        assert_eq!(shown, ["42"]);
        assert_eq!(acc.take_reasoning(), ["Think ", "hard"]);
        let done = json!({"type": "reasoning", "id": "rs_1", "summary": [],
            "content": [{"type": "reasoning_text", "text": "Think hard"}]});
        feed(
            &mut acc,
            vec![json!({"type": "response.completed", "response": {"model": "gpt-oss", "status": "completed",
            "output": [done, {"type": "message", "content": [{"type": "output_text", "text": "42"}]}]}})],
        );
        let r = acc.finish();
        assert_eq!(r.message.content, "42");
        assert_eq!(r.message.reasoning[0].text, "Think hard");
    }

    #[test]
    fn parallel_calls_assemble_by_output_index_in_output_order() {
        let mut acc = ResponseAccumulator::new();
        let added = |i: u32, call: &str, name: &str| {
            json!({"type": "response.output_item.added", "output_index": i,
                "item": {"type": "function_call", "call_id": call, "name": name, "arguments": ""}})
        };
        let delta = |i: u32, piece: &str| json!({"type": "response.function_call_arguments.delta", "output_index": i, "delta": piece});
        feed(
            &mut acc,
            vec![
                added(0, "call_a", "one"),
                added(1, "call_b", "two"),
                delta(1, "{\"y\""),
                delta(0, "{\"x\":1}"),
                delta(1, ":2}"),
                json!({"type": "response.completed", "response": {"status": "completed"}}),
            ],
        );
        let r = acc.finish();
        let got: Vec<_> = r.message.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments)).collect();
        assert_eq!(got, vec![("call_a", "one", &json!({"x": 1})), ("call_b", "two", &json!({"y": 2}))]);
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn usage_counts_cached_input_as_cache_reads_and_reasoning_as_output() {
        let u: wire::ResponseUsage = serde_json::from_value(json!({"input_tokens": 1000,
            "input_tokens_details": {"cached_tokens": 600}, "output_tokens": 300,
            "output_tokens_details": {"reasoning_tokens": 200}, "total_tokens": 1300}))
        .unwrap();
        assert_eq!(
            usage(&u),
            recursive_core::Usage {
                input_tokens: 400,
                output_tokens: 300,
                cache_read_tokens: 600,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn incomplete_reasons_map_to_stop_reasons() {
        assert_eq!(incomplete_reason(Some("max_output_tokens")), StopReason::MaxTokens);
        assert_eq!(incomplete_reason(Some("content_filter")), StopReason::ContentFilter);
        assert_eq!(incomplete_reason(Some("steered")), StopReason::Other("steered".into()));
    }

    #[test]
    fn error_codes_keep_their_status_class() {
        let status = |code: &str| {
            let e = response::api_error("p", &wire::ApiError { code: Some(code.into()), message: "m".into() }, "x");
            match e {
                ProviderError::Http { status, .. } => status,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(status("rate_limit_exceeded"), 429);
        assert_eq!(status("server_error"), 500);
        assert_eq!(status("invalid_prompt"), 400);
        assert_eq!(status("bio_policy"), 400);
    }

    #[test]
    fn a_complete_response_object_parses() {
        let body = json!({"id": "resp_1", "object": "response", "model": "gpt-5", "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "42", "annotations": []}]}],
            "usage": {"input_tokens": 5, "output_tokens": 3}});
        let r = parse_response("p", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.message.content, "42");
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(r.message.reasoning[0].signature, "enc");
        assert_eq!(r.usage.output_tokens, 3);
    }

    #[test]
    fn a_failed_response_object_is_an_error() {
        let body = json!({"status": "failed", "output": [], "error": {"code": "server_error", "message": "boom"}});
        let err = parse_response("p", body.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(&err, ProviderError::Http { status: 500, message, .. } if message.contains("boom")),
            "{err:?}"
        );
        assert!(matches!(parse_response("p", b"{}").unwrap_err(), ProviderError::Malformed { .. }));
    }
}

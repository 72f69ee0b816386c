//! OpenAI Chat Completions, for OpenAI itself and every compatible server (Ollama, vLLM,
//! LM Studio, OpenRouter, DeepSeek...): the base URL is configurable and the key optional.
//!
//! The provider is two pure transforms around one HTTP call: [`OpenAiConfig::request_body`]
//! (core request → wire body) and, back, [`ChunkAccumulator`] (stream chunks → response) or
//! [`parse_response`] (a complete JSON answer → response).

pub mod wire;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use recursive_core::{
    ChatRequest, ChatResponse, ChatStream, Message, ProviderError, ResponseFormat, Role, StopReason, ToolCall,
    ToolChoice, Usage,
};
use serde_json::{Value, json};

use crate::http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, join_url};
use crate::shell::{self, ByteStream, HttpProvider, WireApi};
use crate::sse::{self, Decoder, SseFrame};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Default model.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// How to reach an OpenAI-compatible server.
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Name in messages and events (`openai`, `ollama`, `openrouter`...).
    pub name: String,
    /// Base URL up to and including the version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Bearer token; `None` sends no `Authorization` header.
    pub api_key: Option<String>,
    /// Model used when a request names none.
    pub model: String,
    /// Stream the answer (SSE) or ask for one JSON response.
    pub stream: bool,
    /// Send the token cap as `max_completion_tokens` (newer OpenAI models) instead of
    /// `max_tokens`; OpenAI's reasoning models (`o1`, `o3`, `o4-mini`, `gpt-5`…) always get it.
    pub use_max_completion_tokens: bool,
    /// Token cap used when a request sets none.
    pub default_max_tokens: Option<u32>,
    /// Limit on a whole call, streaming included.
    pub timeout: Duration,
    /// Limit on connecting.
    pub connect_timeout: Duration,
    /// Extra headers sent with every request.
    pub headers: BTreeMap<String, String>,
}

shell::redacted_debug!(OpenAiConfig { use_max_completion_tokens, default_max_tokens });

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            name: "openai".into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            model: DEFAULT_MODEL.into(),
            stream: true,
            use_max_completion_tokens: false,
            default_max_tokens: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            headers: BTreeMap::new(),
        }
    }
}

impl OpenAiConfig {
    /// A configuration for this base URL, with defaults for the rest.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self { base_url: base_url.into(), ..Self::default() }
    }

    /// The wire body for a request.
    pub fn request_body<'a>(&self, request: &'a ChatRequest) -> Result<wire::ChatCompletionRequest<'a>, ProviderError> {
        let opts = &request.options;
        let model = if opts.model.is_empty() { self.model.clone() } else { opts.model.clone() };
        if model.is_empty() {
            return Err(ProviderError::Invalid(format!(
                "{}: no model given and no default model configured",
                self.name
            )));
        }
        let max = opts.max_tokens.or(self.default_max_tokens);
        let completion_cap = self.use_max_completion_tokens || crate::models::is_reasoning_model(&model);
        let (max_tokens, max_completion_tokens) = if completion_cap { (None, max) } else { (max, None) };
        Ok(wire::ChatCompletionRequest {
            model,
            messages: request.messages.iter().map(request_message).collect(),
            tools: request
                .tools
                .iter()
                .map(|t| wire::ToolDefinition {
                    kind: "function",
                    function: wire::FunctionDefinition {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        parameters: t.parameters.clone(),
                    },
                })
                .collect(),
            tool_choice: opts.tool_choice.as_ref().filter(|_| !request.tools.is_empty()).map(tool_choice),
            temperature: opts.temperature,
            max_tokens,
            max_completion_tokens,
            stop: opts.stop.clone(),
            reasoning_effort: opts.reasoning_effort.clone(),
            response_format: opts.response_format.as_ref().and_then(response_format),
            stream: self.stream.then_some(true),
            stream_options: self.stream.then_some(wire::StreamOptions { include_usage: true }),
        })
    }
}

fn request_message(m: &Message) -> wire::RequestMessage<'_> {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let tool_calls: Vec<wire::ToolCall> = m
        .tool_calls
        .iter()
        .map(|c| wire::ToolCall {
            id: c.id.clone(),
            kind: "function".into(),
            function: wire::FunctionCall { name: c.name.clone(), arguments: arguments_text(&c.arguments) },
        })
        .collect();
    let content = if m.role == Role::Assistant && m.content.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(m.content.as_str())
    };
    wire::RequestMessage {
        role,
        content,
        tool_calls,
        tool_call_id: if m.role == Role::Tool { m.tool_call_id.as_deref() } else { None },
    }
}

/// Arguments as the JSON text the API expects; text kept from an unparseable call goes back
/// verbatim.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        Value::Null => "{}".into(),
        v => v.to_string(),
    }
}

/// `tool_choice` on the wire.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        _ => json!("auto"),
    }
}

fn response_format(format: &ResponseFormat) -> Option<Value> {
    match format {
        ResponseFormat::JsonObject => Some(json!({"type": "json_object"})),
        ResponseFormat::JsonSchema { name, schema, strict: false } => {
            Some(json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}}))
        }
        ResponseFormat::JsonSchema { name, schema, strict: true } => {
            Some(json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": true}}))
        }
        _ => None,
    }
}

/// Maps a `finish_reason`.
pub fn stop_reason(finish_reason: &str) -> StopReason {
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

/// Maps wire usage: cached prompt tokens become cache reads and are not counted as input.
pub fn usage(u: &wire::CompletionUsage) -> Usage {
    let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0);
    Usage {
        input_tokens: u.prompt_tokens.saturating_sub(cached),
        output_tokens: u.completion_tokens,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

/// Tool-call arguments from their text: `{}` when empty, the raw text as a JSON string when it
/// is not valid JSON.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// The parts of an answer, however they arrived.
struct Parts {
    text: String,
    refusal: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<wire::CompletionUsage>,
    model: String,
}

impl Parts {
    fn into_response(self) -> ChatResponse {
        let mut content = self.text;
        content.push_str(&self.refusal);
        let stop_reason = if !self.refusal.is_empty() {
            StopReason::Refusal
        } else {
            match self.finish_reason.as_deref() {
                Some(r) => stop_reason(r),
                None if !self.calls.is_empty() => StopReason::ToolUse,
                None => StopReason::EndTurn,
            }
        };
        let mut message = Message::assistant_with_tools(content, self.calls);
        if !self.reasoning.is_empty() {
            message.reasoning = vec![recursive_core::Reasoning { text: self.reasoning, ..Default::default() }];
        }
        sse::assembled(message, stop_reason, self.usage.as_ref().map(usage).unwrap_or_default(), &self.model)
    }
}

/// Parses a complete (non-streamed) JSON answer.
pub fn parse_response(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let completion: wire::ChatCompletion = sse::parse_body(provider, "chat.completion", body)?;
    let choice = completion.choices.into_iter().find(|c| c.index == 0).ok_or_else(|| ProviderError::Malformed {
        provider: provider.to_string(),
        message: "the response has no choice".into(),
    })?;
    let calls = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: if c.id.is_empty() { format!("call_{i}") } else { c.id },
            name: c.function.name,
            arguments: parse_arguments(&c.function.arguments),
        })
        .collect();
    Ok(Parts {
        text: choice.message.content.unwrap_or_default(),
        refusal: choice.message.refusal.unwrap_or_default(),
        reasoning: choice.message.reasoning_content.unwrap_or_default(),
        calls,
        finish_reason: choice.finish_reason,
        usage: completion.usage,
        model: completion.model,
    }
    .into_response())
}

#[derive(Debug, Default, Clone)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a streamed answer from its chunks: text, refusal, tool calls by index (parallel
/// calls interleave), finish reason and the usage of the last chunk. A plain struct, fed with
/// parsed chunks, so it can be tested without HTTP.
#[derive(Debug, Default, Clone)]
pub struct ChunkAccumulator {
    text: String,
    refusal: String,
    reasoning: String,
    /// Reasoning that arrived since [`ChunkAccumulator::take_reasoning`] was last called.
    new_reasoning: Vec<String>,
    calls: BTreeMap<u32, PartialCall>,
    last_index: Option<u32>,
    finish_reason: Option<String>,
    usage: Option<wire::CompletionUsage>,
    model: String,
    done: bool,
}

impl ChunkAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one chunk; returns the visible text that arrived with it (text and refusal).
    pub fn push(&mut self, chunk: wire::ChatCompletionChunk) -> Vec<String> {
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let mut out = Vec::new();
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(t) = delta.content.filter(|t| !t.is_empty()) {
                    self.text.push_str(&t);
                    out.push(t);
                }
                if let Some(r) = delta.refusal.filter(|r| !r.is_empty()) {
                    self.refusal.push_str(&r);
                    out.push(r);
                }
                if let Some(r) = delta.reasoning_content.filter(|r| !r.is_empty()) {
                    self.reasoning.push_str(&r);
                    self.new_reasoning.push(r);
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.push_call(call);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        out
    }

    fn push_call(&mut self, call: wire::ToolCallDelta) {
        // Servers that omit `index` start a new call with each new id.
        let index = match call.index {
            Some(i) => i,
            None => match (&call.id, self.last_index) {
                (Some(id), Some(last)) if self.calls.get(&last).is_some_and(|c| !c.id.is_empty() && &c.id != id) => {
                    last + 1
                }
                (_, Some(last)) => last,
                (_, None) => 0,
            },
        };
        self.last_index = Some(index);
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = call.id.filter(|id| !id.is_empty()) {
            entry.id = id;
        }
        if let Some(f) = call.function {
            // The name comes whole in the call's first piece; some compatible servers repeat
            // it in every piece, which must not double it.
            if let Some(name) = f.name.filter(|n| !n.is_empty())
                && name != entry.name
            {
                entry.name.push_str(&name);
            }
            if let Some(args) = f.arguments {
                entry.arguments.push_str(&args);
            }
        }
    }

    /// The reasoning that arrived since the last call, for streaming it.
    pub fn take_reasoning(&mut self) -> Vec<String> {
        std::mem::take(&mut self.new_reasoning)
    }

    /// Records the `[DONE]` marker.
    pub fn mark_done(&mut self) {
        self.done = true;
    }

    /// Whether `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether a finish reason arrived (the answer is whole even if `[DONE]` never comes).
    pub fn has_finish_reason(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// The assembled response. Arguments that are not valid JSON are kept as a JSON string.
    pub fn finish(&self) -> ChatResponse {
        let calls = self
            .calls
            .iter()
            .map(|(i, c)| ToolCall {
                id: if c.id.is_empty() { format!("call_{i}") } else { c.id.clone() },
                name: c.name.clone(),
                arguments: parse_arguments(&c.arguments),
            })
            .collect();
        Parts {
            text: self.text.clone(),
            refusal: self.refusal.clone(),
            reasoning: self.reasoning.clone(),
            calls,
            finish_reason: self.finish_reason.clone(),
            usage: self.usage,
            model: self.model.clone(),
        }
        .into_response()
    }
}

type ChunkDecoder = sse::Decoding<ChunkAccumulator>;

impl Decoder for ChunkDecoder {
    fn take_reasoning(&mut self) -> Vec<String> {
        self.acc.take_reasoning()
    }

    fn feed(&mut self, frame: &SseFrame) -> Result<Vec<String>, ProviderError> {
        if frame.data.trim() == "[DONE]" {
            self.acc.mark_done();
            return Ok(Vec::new());
        }
        let what = "chat.completion.chunk";
        let Some(chunk) = sse::frame_json::<wire::ChatCompletionChunk>(&self.provider, frame, what)? else {
            return Ok(Vec::new());
        };
        if let Some(error) = &chunk.error {
            return Err(stream_error(&self.provider, error));
        }
        Ok(self.acc.push(chunk))
    }

    fn is_done(&self) -> bool {
        self.acc.is_done()
    }

    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        let complete = self.acc.is_done() || self.acc.has_finish_reason();
        let missing = "a finish_reason or [DONE]";
        sse::finished(&self.provider, complete, missing, &self.fallback_model, || self.acc.finish())
    }
}

/// An error object sent inside the stream. Its status comes from a numeric `code`, else from
/// its `type`/`code` text (so a request error is not retried), else 500.
fn stream_error(provider: &str, error: &Value) -> ProviderError {
    let message = error["message"].as_str().map(str::to_string).unwrap_or_else(|| error.to_string());
    let by_kind = || {
        let kind = error["type"].as_str().or_else(|| error["code"].as_str())?;
        Some(match kind {
            "invalid_request_error" | "invalid_request" | "context_length_exceeded" => 400,
            "authentication_error" | "invalid_api_key" => 401,
            "permission_error" => 403,
            "not_found_error" | "model_not_found" => 404,
            k if k.contains("rate_limit") => 429,
            _ => return None,
        })
    };
    let status =
        error["code"].as_u64().and_then(|c| u16::try_from(c).ok()).filter(|c| (400..600).contains(c)).or_else(by_kind);
    ProviderError::Http {
        provider: provider.to_string(),
        status: status.unwrap_or(500),
        message: format!("{message} (error event in the stream)"),
        retry_after_secs: None,
    }
}

/// Decodes a Chat Completions SSE byte stream into text deltas and a final response.
pub fn stream_from_bytes<S>(provider: &str, bytes: S) -> ChatStream
where
    S: Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
{
    shell::stream_from_bytes::<OpenAiConfig, S>(provider, bytes)
}

/// A client of an OpenAI-compatible Chat Completions endpoint.
pub type OpenAiProvider = HttpProvider<OpenAiConfig>;

impl WireApi for OpenAiConfig {
    type Body<'a> = wire::ChatCompletionRequest<'a>;

    shell::common_fields!();

    fn auth_headers(&self) -> Vec<(String, String)> {
        shell::bearer(self.api_key.as_ref())
    }

    fn wire_body<'a>(&'a self, request: &'a ChatRequest) -> Result<(String, Self::Body<'a>), ProviderError> {
        let body = self.request_body(request)?;
        Ok((body.model.clone(), body))
    }

    fn endpoint(&self, _model: &str) -> String {
        join_url(&self.base_url, "chat/completions")
    }

    fn decode(provider: &str, bytes: ByteStream, fallback_model: String) -> ChatStream {
        sse::decode::<ChunkAccumulator>(provider, bytes, fallback_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{ChatOptions, ToolSpec};

    fn chunk(v: Value) -> wire::ChatCompletionChunk {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tool_results_and_calls_map_to_the_wire_roles() {
        let call = ToolCall { id: "c1".into(), name: "get_weather".into(), arguments: json!({"city": "Paris"}) };
        let req = ChatRequest {
            messages: vec![
                Message::system("be brief"),
                Message::user("weather?"),
                Message::assistant_with_tools("", vec![call]),
                Message::tool_result("c1", "sunny", false),
            ],
            tools: vec![ToolSpec { name: "get_weather".into(), description: "d".into(), parameters: json!({}) }],
            options: ChatOptions { max_tokens: Some(50), ..Default::default() },
        };
        let body = serde_json::to_value(OpenAiConfig::default().request_body(&req).unwrap()).unwrap();
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], r#"{"city":"Paris"}"#);
        assert_eq!(body["messages"][3], json!({"role": "tool", "content": "sunny", "tool_call_id": "c1"}));
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn max_completion_tokens_is_a_switch() {
        let config = OpenAiConfig { use_max_completion_tokens: true, stream: false, ..Default::default() };
        let req =
            ChatRequest { options: ChatOptions { max_tokens: Some(9), ..Default::default() }, ..Default::default() };
        let body = serde_json::to_value(config.request_body(&req).unwrap()).unwrap();
        assert_eq!(body["max_completion_tokens"], 9);
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("stream").is_none() && body.get("stream_options").is_none());
    }

    #[test]
    fn reasoning_models_get_max_completion_tokens() {
        let config = OpenAiConfig { stream: false, ..Default::default() };
        for (model, field) in
            [("o4-mini", "max_completion_tokens"), ("gpt-5", "max_completion_tokens"), ("gpt-4o", "max_tokens")]
        {
            let options = ChatOptions { model: model.into(), max_tokens: Some(7), ..Default::default() };
            let body =
                serde_json::to_value(config.request_body(&ChatRequest { options, ..Default::default() }).unwrap())
                    .unwrap();
            assert_eq!(body[field], 7, "{model}: {body}");
            let other = if field == "max_tokens" { "max_completion_tokens" } else { "max_tokens" };
            assert!(body.get(other).is_none(), "{model}: {body}");
        }
        let options = ChatOptions { model: "o3".into(), reasoning_effort: Some("high".into()), ..Default::default() };
        let body =
            serde_json::to_value(config.request_body(&ChatRequest { options, ..Default::default() }).unwrap()).unwrap();
        assert_eq!(body["reasoning_effort"], "high");
    }

    #[test]
    fn response_formats_map_to_the_wire() {
        let schema = json!({"type": "object"});
        assert_eq!(response_format(&ResponseFormat::JsonObject), Some(json!({"type": "json_object"})));
        assert_eq!(
            response_format(&ResponseFormat::JsonSchema { name: "out".into(), schema: schema.clone(), strict: false }),
            Some(json!({"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}))
        );
        assert_eq!(
            response_format(&ResponseFormat::JsonSchema { name: "out".into(), schema: schema.clone(), strict: true }),
            Some(json!({"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": true}}))
        );
        assert_eq!(response_format(&ResponseFormat::Text), None);
    }

    #[test]
    fn parallel_tool_call_deltas_assemble_by_index() {
        let mut acc = ChunkAccumulator::new();
        let call = |i: u32, id: Option<&str>, name: Option<&str>, args: &str| {
            chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": id, "function": {"name": name, "arguments": args}}]}}]}))
        };
        acc.push(call(0, Some("a"), Some("one"), ""));
        acc.push(call(1, Some("b"), Some("two"), "{\"y\""));
        acc.push(call(0, None, None, "{\"x\":1}"));
        acc.push(call(1, None, None, ":2}"));
        acc.push(chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})));
        let r = acc.finish();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        let got: Vec<_> = r.message.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments)).collect();
        assert_eq!(got, vec![("a", "one", &json!({"x": 1})), ("b", "two", &json!({"y": 2}))]);
    }

    #[test]
    fn a_tool_name_repeated_in_every_piece_is_not_doubled() {
        let mut acc = ChunkAccumulator::new();
        for args in ["{\"a\"", ":1}"] {
            acc.push(chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "c", "function": {"name": "lookup", "arguments": args}}]}}]})));
        }
        let r = acc.finish();
        assert_eq!(r.message.tool_calls[0].name, "lookup");
        assert_eq!(r.message.tool_calls[0].arguments, json!({"a": 1}));
    }

    #[test]
    fn an_error_in_the_stream_keeps_its_status_class() {
        let err = stream_error("p", &json!({"message": "bad schema", "type": "invalid_request_error"}));
        assert!(matches!(err, ProviderError::Http { status: 400, .. }), "{err:?}");
        assert!(!err.is_retryable());
        let err = stream_error("p", &json!({"message": "slow down", "code": "rate_limit_exceeded"}));
        assert!(matches!(err, ProviderError::Http { status: 429, .. }), "{err:?}");
        let err = stream_error("p", &json!({"message": "boom"}));
        assert!(err.is_retryable(), "{err:?}");
    }

    #[test]
    fn reasoning_content_of_compatible_servers_is_reasoning_not_text() {
        let mut acc = ChunkAccumulator::new();
        let visible = acc.push(chunk(json!({"choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]})));
        assert!(visible.is_empty(), "reasoning is not the answer's text");
        acc.push(chunk(json!({"choices": [{"index": 0, "delta": {"reasoning": "more"}}]})));
        assert_eq!(acc.take_reasoning(), ["think ", "more"]);
        acc.push(chunk(json!({"choices": [{"index": 0, "delta": {"content": "42"}, "finish_reason": "stop"}]})));
        let r = acc.finish();
        assert_eq!(r.message.content, "42");
        assert_eq!(r.message.reasoning[0].text, "think more");
        let whole = parse_response(
            "openai",
            json!({"model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "42", "reasoning_content": "because"}}]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(whole.message.reasoning[0].text, "because");
    }

    #[test]
    fn invalid_argument_json_is_kept_as_a_string() {
        let mut acc = ChunkAccumulator::new();
        acc.push(chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"x\": tru"}}]}, "finish_reason": "length"}]})));
        let r = acc.finish();
        assert_eq!(r.message.tool_calls[0].arguments, Value::String("{\"x\": tru".into()));
        assert_eq!(r.stop_reason, StopReason::MaxTokens);
    }

    #[test]
    fn usage_counts_cached_tokens_as_cache_reads() {
        let u: wire::CompletionUsage = serde_json::from_value(
            json!({"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 60}}),
        )
        .unwrap();
        assert_eq!(
            usage(&u),
            Usage { input_tokens: 40, output_tokens: 7, cache_read_tokens: 60, cache_write_tokens: 0 }
        );
    }

    #[test]
    fn a_refusal_becomes_the_text_with_stop_reason_refusal() {
        let body = json!({"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "refusal": "I can't."}, "finish_reason": "stop"}]});
        let r = parse_response("openai", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.message.content, "I can't.");
        assert_eq!(r.stop_reason, StopReason::Refusal);
    }

    #[test]
    fn a_complete_response_with_tool_calls_parses() {
        let body = json!({"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 3}});
        let r = parse_response("openai", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.message.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage.input_tokens, 5);
    }

    #[test]
    fn a_body_that_is_not_json_is_malformed() {
        let err = parse_response("openai", b"<html>").unwrap_err();
        assert!(matches!(err, ProviderError::Malformed { .. }), "{err:?}");
    }
}

//! Anthropic Messages API.
//!
//! Two pure transforms around one HTTP call: [`AnthropicConfig::request_body`] (core request →
//! wire body: system prompt at the top level, tool calls as `tool_use` blocks, consecutive tool
//! results merged into one user message of `tool_result` blocks) and, back,
//! [`MessageAccumulator`] (stream events → response) or [`parse_response`] (a complete JSON
//! answer → response).

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
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Default model.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// Token cap used when neither the request nor the configuration sets one (the API requires
/// a value).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How to reach the Messages API.
#[derive(Clone, PartialEq)]
pub struct AnthropicConfig {
    /// Name in messages and events.
    pub name: String,
    /// Base URL without the version path, e.g. `https://api.anthropic.com`.
    pub base_url: String,
    /// Sent as `x-api-key`; `None` sends no key (for local test servers).
    pub api_key: Option<String>,
    /// Model used when a request names none.
    pub model: String,
    /// Stream the answer (SSE) or ask for one JSON response.
    pub stream: bool,
    /// Token cap used when a request sets none.
    pub default_max_tokens: u32,
    /// Limit on a whole call, streaming included.
    pub timeout: Duration,
    /// Limit on connecting.
    pub connect_timeout: Duration,
    /// Extra headers sent with every request (e.g. `anthropic-beta`).
    pub headers: BTreeMap<String, String>,
    /// Mark prompt-cache breakpoints (`cache_control`) after the system prompt, the tools and
    /// the last message, so the growing conversation's prefix is read from Anthropic's cache.
    pub prompt_caching: bool,
}

shell::redacted_debug!(AnthropicConfig { default_max_tokens });

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            name: "anthropic".into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            model: DEFAULT_MODEL.into(),
            stream: true,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            headers: BTreeMap::new(),
            prompt_caching: true,
        }
    }
}

impl AnthropicConfig {
    /// A configuration for this base URL, with defaults for the rest.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self { base_url: base_url.into(), ..Self::default() }
    }

    /// The wire body for a request.
    ///
    /// The Messages API has no JSON mode; a requested [`ResponseFormat`] becomes an instruction
    /// at the end of the system prompt.
    pub fn request_body(&self, request: &ChatRequest) -> Result<wire::MessagesRequest, ProviderError> {
        let opts = &request.options;
        let model = if opts.model.is_empty() { self.model.clone() } else { opts.model.clone() };
        if model.is_empty() {
            return Err(ProviderError::Invalid(format!(
                "{}: no model given and no default model configured",
                self.name
            )));
        }
        let mut system: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System && !m.content.trim().is_empty())
            .map(|m| m.content.clone())
            .collect();
        if let Some(instruction) = opts.response_format.as_ref().and_then(format_instruction) {
            system.push(instruction);
        }
        let mut body = wire::MessagesRequest {
            model,
            max_tokens: opts.max_tokens.unwrap_or(self.default_max_tokens),
            system: (!system.is_empty()).then(|| wire::SystemPrompt::Text(system.join("\n\n"))),
            messages: request_messages(&request.messages),
            tools: request
                .tools
                .iter()
                .map(|t| wire::ToolDefinition {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.parameters.clone(),
                    cache_control: None,
                })
                .collect(),
            tool_choice: opts.tool_choice.as_ref().filter(|_| !request.tools.is_empty()).map(tool_choice),
            temperature: opts.temperature,
            stop_sequences: opts.stop.clone(),
            stream: self.stream.then_some(true),
            thinking: None,
        };
        let forced =
            body.tool_choice.as_ref().and_then(|c| c["type"].as_str()).is_some_and(|t| t == "any" || t == "tool");
        if let Some(budget) = opts
            .reasoning_effort
            .as_deref()
            .and_then(crate::models::thinking_budget)
            .filter(|_| thinking_allowed(&request.messages, forced))
        {
            body.thinking = Some(wire::ThinkingConfig { kind: "enabled", budget_tokens: budget });
            // The budget must stay below the token cap, and thinking takes no temperature.
            body.max_tokens = body.max_tokens.max(budget + 4096);
            body.temperature = None;
        }
        if self.prompt_caching {
            mark_cache_breakpoints(&mut body);
        }
        Ok(body)
    }
}

/// `tool_choice` on the wire.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        _ => json!({"type": "auto"}),
    }
}

/// Cache breakpoints after the system prompt, the last tool and the last message's last block:
/// the stable prefix and the conversation so far are cached, the next turn reads them.
fn mark_cache_breakpoints(body: &mut wire::MessagesRequest) {
    if let Some(wire::SystemPrompt::Text(text)) = body.system.take() {
        body.system = Some(wire::SystemPrompt::Blocks(vec![wire::SystemBlock {
            kind: "text",
            text,
            cache_control: Some(wire::CacheControl::EPHEMERAL),
        }]));
    }
    if let Some(tool) = body.tools.last_mut() {
        tool.cache_control = Some(wire::CacheControl::EPHEMERAL);
    }
    if let Some(last) = body.messages.last_mut() {
        let mut blocks = match std::mem::replace(&mut last.content, wire::RequestContent::Blocks(Vec::new())) {
            wire::RequestContent::Text(text) => vec![wire::Block::from(wire::RequestBlock::Text { text })],
            wire::RequestContent::Blocks(blocks) => blocks,
        };
        if let Some(block) = blocks.last_mut() {
            block.cache_control = Some(wire::CacheControl::EPHEMERAL);
        }
        last.content = wire::RequestContent::Blocks(blocks);
    }
}

fn format_instruction(format: &ResponseFormat) -> Option<String> {
    match format {
        ResponseFormat::JsonObject => Some("Answer with a single JSON object and nothing else.".into()),
        ResponseFormat::JsonSchema { name, schema, .. } => Some(format!(
            "Answer with a single JSON object (`{name}`) that matches this JSON Schema, and nothing else:\n{schema}"
        )),
        _ => None,
    }
}

/// Whether Claude takes thinking on this turn. Not when its tool choice `forced` a tool (the API
/// refuses both: the choice wins), nor when it continues a tool loop whose last assistant turn
/// made calls without a thinking block (with thinking on, the API wants that turn to start
/// with one) — as when an earlier turn was forced, or another provider made the calls.
pub(crate) fn thinking_allowed(messages: &[Message], forced: bool) -> bool {
    let Some(last) = messages.iter().rposition(|m| m.role == Role::Assistant) else { return !forced };
    let turn = &messages[last];
    let in_loop = !turn.tool_calls.is_empty() && messages[last + 1..].iter().all(|m| m.role == Role::Tool);
    let thought = turn.reasoning.iter().any(|r| r.id.is_empty());
    !forced && !(in_loop && !thought)
}

/// Converts the non-system messages: user and tool-result messages become user turns,
/// adjacent turns of one role are merged (so consecutive tool results share one user message).
fn request_messages(messages: &[Message]) -> Vec<wire::RequestMessage> {
    let mut turns: Vec<(&'static str, Vec<wire::RequestBlock>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(&m.content).into_iter().collect::<Vec<_>>()),
            Role::Tool => (
                "user",
                vec![wire::RequestBlock::ToolResult {
                    tool_use_id: m.tool_call_id.clone().unwrap_or_default(),
                    content: m.content.clone(),
                    is_error: m.is_error,
                }],
            ),
            Role::Assistant => {
                // Reasoning with an item id came from OpenAI's Responses API; it is no thinking block.
                let mut blocks: Vec<_> = m.reasoning.iter().filter(|r| r.id.is_empty()).map(reasoning_block).collect();
                blocks.extend(text_block(&m.content));
                blocks.extend(m.tool_calls.iter().map(|c| wire::RequestBlock::ToolUse {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    input: input_object(&c.arguments),
                }));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            let content = match blocks.as_slice() {
                [wire::RequestBlock::Text { .. }] => match blocks.remove(0) {
                    wire::RequestBlock::Text { text } => wire::RequestContent::Text(text),
                    other => wire::RequestContent::Blocks(vec![other.into()]),
                },
                _ => wire::RequestContent::Blocks(blocks.into_iter().map(wire::Block::from).collect()),
            };
            wire::RequestMessage { role, content }
        })
        .collect()
}

/// A reasoning block sent back as the API gave it.
fn reasoning_block(r: &recursive_core::Reasoning) -> wire::RequestBlock {
    if r.redacted {
        wire::RequestBlock::RedactedThinking { data: r.text.clone() }
    } else {
        wire::RequestBlock::Thinking { thinking: r.text.clone(), signature: r.signature.clone() }
    }
}

/// A text block, or none for blank text (the API refuses a text block without non-whitespace
/// text).
fn text_block(text: &str) -> Option<wire::RequestBlock> {
    (!text.trim().is_empty()).then(|| wire::RequestBlock::Text { text: text.to_string() })
}

/// A call's arguments from its streamed input JSON, or from the input it started with (a
/// complete answer's) when none streamed; text that is no JSON (cut off by `max_tokens`, say)
/// is kept as a string for the tool to refuse. Bedrock's `toolUse` follows the same rule.
pub(crate) fn call_arguments(json_text: &str, start_input: &Value) -> Value {
    if json_text.trim().is_empty() {
        return if start_input.is_null() { json!({}) } else { start_input.clone() };
    }
    serde_json::from_str(json_text).unwrap_or_else(|_| Value::String(json_text.to_string()))
}

/// `tool_use.input` must be an object: objects pass, text holding an object is parsed, and
/// anything else (arguments the model sent as broken JSON) is wrapped as `{"_raw": ...}`
/// (Bedrock's `toolUse.input` follows the same rule).
pub(crate) fn input_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::Null => json!({}),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({ "_raw": raw }),
        },
        other => json!({ "_raw": other }),
    }
}

/// A refusal's `stop_details` as one line: its category and explanation, where given.
fn refusal_explanation(details: &serde_json::Value) -> Option<String> {
    let field = |k: &str| details.get(k).and_then(serde_json::Value::as_str).filter(|s| !s.trim().is_empty());
    match (field("category"), field("explanation")) {
        (Some(c), Some(e)) => Some(format!("{c}: {e}")),
        (Some(one), None) | (None, Some(one)) => Some(one.to_string()),
        (None, None) => None,
    }
}

/// Maps a `stop_reason`.
pub fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_string()),
    }
}

/// Maps wire usage (Anthropic's `input_tokens` already excludes cache reads and writes).
pub fn usage(u: &wire::WireUsage) -> Usage {
    Usage {
        input_tokens: u.input_tokens.unwrap_or(0),
        output_tokens: u.output_tokens.unwrap_or(0),
        cache_read_tokens: u.cache_read_input_tokens.unwrap_or(0),
        cache_write_tokens: u.cache_creation_input_tokens.unwrap_or(0),
    }
}

/// The HTTP status Anthropic uses for an error type, so errors sent inside a stream retry
/// like their HTTP equivalents.
fn status_of_error_type(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Parses a complete (non-streamed) JSON answer.
pub fn parse_response(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let message: wire::MessageResponse = sse::parse_body(provider, "message", body)?;
    // A finished message always says why it stopped; without that (e.g. `{}`) it is no answer.
    if message.stop_reason.is_none() {
        let why = "the response has no stop_reason, so it is not a finished message";
        return Err(sse::not_an_answer(provider, why, body));
    }
    let mut acc = MessageAccumulator::new();
    acc.model = message.model;
    acc.usage = message.usage;
    acc.stop_reason = message.stop_reason;
    acc.stop_details = message.stop_details;
    for (i, block) in message.content.into_iter().enumerate() {
        let index = i as u32;
        acc.blocks.insert(index, Block::start(block));
    }
    Ok(acc.finish())
}

#[derive(Debug, Clone)]
enum Block {
    Text(String),
    ToolUse { id: String, name: String, json: String, start_input: Value },
    Thinking { text: String, signature: String },
    Redacted(String),
    Other,
}

impl Block {
    /// A block as it starts (a whole block in a non-streamed response).
    fn start(block: wire::ContentBlock) -> Block {
        match block {
            wire::ContentBlock::Text { text } => Block::Text(text),
            wire::ContentBlock::ToolUse { id, name, input } => {
                Block::ToolUse { id, name, json: String::new(), start_input: input }
            }
            wire::ContentBlock::Thinking { thinking, signature } => Block::Thinking { text: thinking, signature },
            wire::ContentBlock::RedactedThinking { data } => Block::Redacted(data),
            wire::ContentBlock::Other => Block::Other,
        }
    }
}

/// Assembles a streamed message from its events: text blocks, tool-use input JSON pieces per
/// block index, stop reason and usage. A plain struct, fed with parsed events, so it can be
/// tested without HTTP.
#[derive(Debug, Default, Clone)]
pub struct MessageAccumulator {
    /// Thinking that arrived since [`MessageAccumulator::take_reasoning`] was last called.
    reasoning: Vec<String>,
    model: String,
    blocks: BTreeMap<u32, Block>,
    stop_reason: Option<String>,
    stop_details: Option<serde_json::Value>,
    usage: wire::WireUsage,
    stopped: bool,
}

impl MessageAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event; returns the text that arrived with it. An `error` event becomes the
    /// server's error.
    pub fn push(&mut self, provider: &str, event: wire::StreamEvent) -> Result<Vec<String>, ProviderError> {
        use wire::StreamEvent as E;
        match event {
            E::MessageStart { message } => {
                self.model = message.model;
                self.usage = message.usage;
                Ok(Vec::new())
            }
            E::ContentBlockStart { index, content_block } => {
                let block = Block::start(content_block);
                let text = match &block {
                    Block::Text(t) => vec![t.clone()],
                    _ => Vec::new(),
                };
                self.blocks.insert(index, block);
                Ok(text)
            }
            E::ContentBlockDelta { index, delta } => match delta {
                wire::BlockDelta::TextDelta { text } => {
                    match self.blocks.entry(index).or_insert_with(|| Block::Text(String::new())) {
                        Block::Text(t) => t.push_str(&text),
                        _ => return Err(mismatch(provider, index, "text_delta")),
                    }
                    Ok(vec![text])
                }
                wire::BlockDelta::InputJsonDelta { partial_json } => {
                    match self.blocks.get_mut(&index) {
                        Some(Block::ToolUse { json, .. }) => json.push_str(&partial_json),
                        // The input of a server tool (`server_tool_use`: web search, code
                        // execution), which the server runs itself.
                        Some(Block::Other) => {}
                        _ => return Err(mismatch(provider, index, "input_json_delta")),
                    }
                    Ok(Vec::new())
                }
                wire::BlockDelta::ThinkingDelta { thinking } => {
                    match self
                        .blocks
                        .entry(index)
                        .or_insert_with(|| Block::Thinking { text: String::new(), signature: String::new() })
                    {
                        Block::Thinking { text, .. } => text.push_str(&thinking),
                        _ => return Err(mismatch(provider, index, "thinking_delta")),
                    }
                    self.reasoning.push(thinking);
                    Ok(Vec::new())
                }
                wire::BlockDelta::SignatureDelta { signature } => {
                    match self.blocks.get_mut(&index) {
                        Some(Block::Thinking { signature: s, .. }) => s.push_str(&signature),
                        _ => return Err(mismatch(provider, index, "signature_delta")),
                    }
                    Ok(Vec::new())
                }
                wire::BlockDelta::Other => Ok(Vec::new()),
            },
            E::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if delta.stop_details.is_some() {
                    self.stop_details = delta.stop_details;
                }
                if let Some(u) = usage {
                    let merge = |new: Option<u64>, old: Option<u64>| new.or(old);
                    self.usage = wire::WireUsage {
                        input_tokens: merge(u.input_tokens, self.usage.input_tokens),
                        output_tokens: merge(u.output_tokens, self.usage.output_tokens),
                        cache_creation_input_tokens: merge(
                            u.cache_creation_input_tokens,
                            self.usage.cache_creation_input_tokens,
                        ),
                        cache_read_input_tokens: merge(u.cache_read_input_tokens, self.usage.cache_read_input_tokens),
                    };
                }
                Ok(Vec::new())
            }
            E::MessageStop => {
                self.stopped = true;
                Ok(Vec::new())
            }
            E::Error { error } => Err(ProviderError::Http {
                provider: provider.to_string(),
                status: status_of_error_type(&error.kind),
                message: format!("{}: {} (error event in the stream)", error.kind, error.message),
                retry_after_secs: None,
            }),
            E::ContentBlockStop { .. } | E::Ping | E::Unknown => Ok(Vec::new()),
        }
    }

    /// The thinking that arrived since the last call, for streaming it.
    pub fn take_reasoning(&mut self) -> Vec<String> {
        std::mem::take(&mut self.reasoning)
    }

    /// Whether `message_stop` arrived.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether a stop reason arrived (the message is whole even if `message_stop` is missing).
    pub fn has_stop_reason(&self) -> bool {
        self.stop_reason.is_some()
    }

    /// The assembled response. Tool input JSON that does not parse (e.g. cut off by
    /// `max_tokens`) is kept as a JSON string.
    pub fn finish(&self) -> ChatResponse {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reasoning = Vec::new();
        for (index, block) in &self.blocks {
            match block {
                Block::Text(t) => text.push_str(t),
                Block::ToolUse { id, name, json, start_input } => calls.push(ToolCall {
                    id: if id.is_empty() { format!("toolu_{index}") } else { id.clone() },
                    name: name.clone(),
                    arguments: call_arguments(json, start_input),
                }),
                Block::Thinking { text, signature } => reasoning.push(recursive_core::Reasoning {
                    text: text.clone(),
                    signature: signature.clone(),
                    redacted: false,
                    id: String::new(),
                }),
                Block::Redacted(data) => reasoning.push(recursive_core::Reasoning {
                    text: data.clone(),
                    signature: String::new(),
                    redacted: true,
                    id: String::new(),
                }),
                Block::Other => {}
            }
        }
        let stop_reason = match &self.stop_reason {
            Some(r) => stop_reason(r),
            None if !calls.is_empty() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        if stop_reason == StopReason::Refusal
            && let Some(why) = self.stop_details.as_ref().and_then(refusal_explanation)
        {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&format!("[refused by the API: {why}]"));
        }
        let mut message = Message::assistant_with_tools(text, calls);
        message.reasoning = reasoning;
        sse::assembled(message, stop_reason, usage(&self.usage), &self.model)
    }
}

fn mismatch(provider: &str, index: u32, delta: &str) -> ProviderError {
    ProviderError::Malformed {
        provider: provider.to_string(),
        message: format!("{delta} for content block {index}, which is not a block of that kind"),
    }
}

type EventDecoder = sse::Decoding<MessageAccumulator>;

impl Decoder for EventDecoder {
    fn take_reasoning(&mut self) -> Vec<String> {
        self.acc.take_reasoning()
    }

    fn feed(&mut self, frame: &SseFrame) -> Result<Vec<String>, ProviderError> {
        match sse::frame_json::<wire::StreamEvent>(&self.provider, frame, &sse::frame_name(frame))? {
            Some(event) => self.acc.push(&self.provider, event),
            None => Ok(Vec::new()),
        }
    }

    fn is_done(&self) -> bool {
        self.acc.is_stopped()
    }

    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        let complete = self.acc.is_stopped() || self.acc.has_stop_reason();
        let missing = "message_delta / message_stop";
        sse::finished(&self.provider, complete, missing, &self.fallback_model, || self.acc.finish())
    }
}

/// Decodes a Messages API SSE byte stream into text deltas and a final response.
pub fn stream_from_bytes<S>(provider: &str, bytes: S) -> ChatStream
where
    S: Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
{
    shell::stream_from_bytes::<AnthropicConfig, S>(provider, bytes)
}

/// A client of the Anthropic Messages API.
pub type AnthropicProvider = HttpProvider<AnthropicConfig>;

impl WireApi for AnthropicConfig {
    type Body<'a> = wire::MessagesRequest;

    shell::common_fields!();

    /// `anthropic-version`, then the key as `x-api-key`.
    fn auth_headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![("anthropic-version".to_string(), API_VERSION.to_string())];
        if let Some(key) = self.api_key.as_ref().filter(|k| !k.is_empty()) {
            headers.push(("x-api-key".into(), key.clone()));
        }
        headers
    }

    /// The auth headers, `accept` when streaming, then the extra ones (e.g. `anthropic-beta`).
    fn headers(&self) -> Vec<(String, String)> {
        let mut headers = self.auth_headers();
        headers.extend(shell::accept(self.stream));
        headers.extend(shell::pairs(&self.headers));
        headers
    }

    fn wire_body<'a>(&'a self, request: &'a ChatRequest) -> Result<(String, Self::Body<'a>), ProviderError> {
        let body = self.request_body(request)?;
        Ok((body.model.clone(), body))
    }

    /// `{base}/v1/messages`, or `{base}/messages` when the base already ends with `/v1`.
    fn endpoint(&self, _model: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") { join_url(base, "messages") } else { join_url(base, "v1/messages") }
    }

    fn decode(provider: &str, bytes: ByteStream, fallback_model: String) -> ChatStream {
        sse::decode::<MessageAccumulator>(provider, bytes, fallback_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::ChatOptions;

    fn event(v: Value) -> wire::StreamEvent {
        serde_json::from_value(v).unwrap()
    }

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "f".into(), arguments: json!({"x": 1}) }
    }

    #[test]
    fn an_empty_object_is_not_an_answer() {
        let e = parse_response("anthropic", b"{}").unwrap_err();
        assert!(matches!(e, ProviderError::Malformed { .. }), "{e}");
    }

    #[test]
    fn consecutive_tool_results_merge_into_one_user_message() {
        let req = ChatRequest {
            messages: vec![
                Message::system("sys"),
                Message::user("go"),
                Message::assistant_with_tools("calling", vec![call("a"), call("b")]),
                Message::tool_result("a", "one", false),
                Message::tool_result("b", "boom", true),
            ],
            ..Default::default()
        };
        let plain = AnthropicConfig { prompt_caching: false, ..Default::default() };
        let body = serde_json::to_value(plain.request_body(&req).unwrap()).unwrap();
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0], json!({"role": "user", "content": "go"}));
        assert_eq!(messages[1]["content"][1], json!({"type": "tool_use", "id": "a", "name": "f", "input": {"x": 1}}));
        assert_eq!(
            messages[2],
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "one"},
                {"type": "tool_result", "tool_use_id": "b", "content": "boom", "is_error": true}]})
        );
    }

    #[test]
    fn unparseable_arguments_still_send_an_object() {
        assert_eq!(input_object(&Value::String("{\"a\":1}".into())), json!({"a": 1}));
        assert_eq!(input_object(&Value::String("{oops".into())), json!({"_raw": "{oops"}));
        assert_eq!(input_object(&Value::Null), json!({}));
    }

    #[test]
    fn a_json_format_becomes_a_system_instruction() {
        let req = ChatRequest {
            messages: vec![Message::user("x")],
            options: ChatOptions { response_format: Some(ResponseFormat::JsonObject), ..Default::default() },
            ..Default::default()
        };
        let body = serde_json::to_value(AnthropicConfig::default().request_body(&req).unwrap()).unwrap();
        assert!(body["system"][0]["text"].as_str().unwrap().contains("JSON object"), "{body}");
    }

    #[test]
    fn cache_breakpoints_follow_the_system_prompt_the_tools_and_the_last_message() {
        let tool = |name: &str| recursive_core::ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        };
        let req = ChatRequest {
            messages: vec![
                Message::system("sys"),
                Message::user("go"),
                Message::assistant_with_tools("calling", vec![call("a")]),
                Message::tool_result("a", "one", false),
            ],
            tools: vec![tool("f"), tool("g")],
            ..Default::default()
        };
        let body = serde_json::to_value(AnthropicConfig::default().request_body(&req).unwrap()).unwrap();
        let ephemeral = json!({"type": "ephemeral"});
        assert_eq!(body["system"], json!([{"type": "text", "text": "sys", "cache_control": ephemeral}]));
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"], ephemeral);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages[0], json!({"role": "user", "content": "go"}), "earlier messages are unchanged");
        assert_eq!(
            messages[2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "a", "content": "one", "cache_control": ephemeral}])
        );
        let breakpoints = body.to_string().matches("ephemeral").count();
        assert_eq!(breakpoints, 3, "within the API's limit of 4");
    }

    #[test]
    fn tool_input_pieces_assemble_per_block() {
        let mut acc = MessageAccumulator::new();
        let events = [
            json!({"type": "message_start", "message": {"model": "m", "content": [], "usage":
                {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"x\":"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": " 2}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let mut text = Vec::new();
        for e in events {
            text.extend(acc.push("anthropic", event(e)).unwrap());
        }
        let r = acc.finish();
        assert_eq!(text.concat(), "Hi");
        assert_eq!(
            r.message.tool_calls,
            vec![ToolCall { id: "t1".into(), name: "f".into(), arguments: json!({"x": 2}) }]
        );
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage, Usage { input_tokens: 10, output_tokens: 9, cache_read_tokens: 4, cache_write_tokens: 2 });
    }

    #[test]
    fn an_error_event_carries_the_server_message() {
        let mut acc = MessageAccumulator::new();
        let err = acc
            .push(
                "anthropic",
                event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
            )
            .unwrap_err();
        assert!(err.to_string().contains("Overloaded"), "{err}");
        assert!(err.is_retryable());
    }

    #[test]
    fn thinking_is_kept_with_its_signature_and_sent_back_first() {
        let mut acc = MessageAccumulator::new();
        let events = [
            json!({"type": "message_start", "message": {"model": "m", "content": [], "usage": {"input_tokens": 5}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Weigh "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "options."}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-abc"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "opaque"}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Calling."}}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"x\": 1}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let mut shown = Vec::new();
        for e in events {
            shown.extend(acc.push("anthropic", serde_json::from_value(e).unwrap()).unwrap());
        }
        assert_eq!(shown.concat(), "Calling.", "thinking is not part of the answer's text");
        let r = acc.finish();
        assert_eq!(
            r.message.reasoning,
            vec![
                recursive_core::Reasoning {
                    text: "Weigh options.".into(),
                    signature: "sig-abc".into(),
                    ..Default::default()
                },
                recursive_core::Reasoning { text: "opaque".into(), redacted: true, ..Default::default() },
            ]
        );
        let req = ChatRequest {
            messages: vec![Message::user("go"), r.message, Message::tool_result("t1", "one", false)],
            ..Default::default()
        };
        let plain = AnthropicConfig { prompt_caching: false, ..Default::default() };
        let body = serde_json::to_value(plain.request_body(&req).unwrap()).unwrap();
        assert_eq!(
            body["messages"][1]["content"],
            json!([
                {"type": "thinking", "thinking": "Weigh options.", "signature": "sig-abc"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}
            ])
        );
    }

    #[test]
    fn reasoning_items_of_the_responses_api_are_not_sent_as_thinking() {
        let mut turn = Message::assistant("Done.");
        turn.reasoning = vec![recursive_core::Reasoning {
            id: "rs_1".into(),
            text: "Plan.".into(),
            signature: "encrypted".into(),
            ..Default::default()
        }];
        let req =
            ChatRequest { messages: vec![Message::user("go"), turn, Message::user("next")], ..Default::default() };
        let plain = AnthropicConfig { prompt_caching: false, ..Default::default() };
        let body = serde_json::to_value(plain.request_body(&req).unwrap()).unwrap();
        assert_eq!(body["messages"][1], json!({"role": "assistant", "content": "Done."}));
    }

    #[test]
    fn a_reasoning_effort_turns_thinking_on_within_the_token_cap() {
        let options = ChatOptions {
            reasoning_effort: Some("low".into()),
            temperature: Some(0.2),
            max_tokens: Some(1000),
            ..Default::default()
        };
        let req = ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() };
        let body = serde_json::to_value(AnthropicConfig::default().request_body(&req).unwrap()).unwrap();
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        assert!(body["max_tokens"].as_u64().unwrap() > 2048);
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn a_tool_loop_whose_last_calls_came_without_thinking_goes_on_without_it() {
        let calls = Message::assistant_with_tools(
            "",
            vec![ToolCall { id: "a".into(), name: "f".into(), arguments: json!({}) }],
        );
        let mut thought = calls.clone();
        thought.reasoning =
            vec![recursive_core::Reasoning { text: "t".into(), signature: "s".into(), ..Default::default() }];
        let loop_of = |turn: Message| vec![Message::user("go"), turn, Message::tool_result("a", "one", false)];
        assert!(!thinking_allowed(&loop_of(calls.clone()), false));
        assert!(thinking_allowed(&loop_of(thought), false));
        let mut next_turn = loop_of(calls);
        next_turn.push(Message::assistant("done"));
        next_turn.push(Message::user("again"));
        assert!(thinking_allowed(&next_turn, false), "a new user turn starts afresh");
        assert!(!thinking_allowed(&[Message::user("go")], true));
    }

    #[test]
    fn blank_text_is_not_sent_as_a_block() {
        let req = ChatRequest {
            messages: vec![
                Message::system(" "),
                Message::user("go"),
                Message::assistant_with_tools(
                    "\n\n",
                    vec![ToolCall { id: "a".into(), name: "f".into(), arguments: json!({}) }],
                ),
            ],
            ..Default::default()
        };
        let body = serde_json::to_value(AnthropicConfig::default().request_body(&req).unwrap()).unwrap();
        assert!(body.get("system").is_none(), "{body}");
        let blocks = body["messages"][1]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 1, "{body}");
        assert_eq!(blocks[0]["type"], "tool_use");
    }

    #[test]
    fn a_forced_tool_choice_turns_thinking_off_for_that_turn() {
        let tool = recursive_core::ToolSpec {
            name: "f".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        };
        for (choice, thinks) in
            [(ToolChoice::Auto, true), (ToolChoice::Required, false), (ToolChoice::Tool("f".into()), false)]
        {
            let options = ChatOptions {
                reasoning_effort: Some("low".into()),
                tool_choice: Some(choice.clone()),
                ..Default::default()
            };
            let req = ChatRequest { messages: vec![Message::user("x")], tools: vec![tool.clone()], options };
            let body = serde_json::to_value(AnthropicConfig::default().request_body(&req).unwrap()).unwrap();
            assert_eq!(body.get("thinking").is_some(), thinks, "{choice:?}: {body}");
        }
    }

    #[test]
    fn server_tool_blocks_stream_without_failing_the_message() {
        let mut acc = MessageAccumulator::new();
        let events = [
            json!({"type": "message_start", "message": {"model": "m", "content": [], "usage": {"input_tokens": 5}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"x\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "found it"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_stop"}),
        ];
        for e in events {
            acc.push("anthropic", serde_json::from_value(e).unwrap()).unwrap();
        }
        let r = acc.finish();
        assert_eq!(r.message.content, "found it");
        assert!(r.message.tool_calls.is_empty(), "a server tool is not a call for the client");
    }

    #[test]
    fn a_refusal_carries_the_explanation_the_api_gives() {
        let body = json!({
            "model": "claude", "role": "assistant", "content": [{"type": "text", "text": "Hello.."}],
            "stop_reason": "refusal",
            "stop_details": {"type": "refusal", "category": "cyber", "explanation": "This looks like malware."},
            "usage": {"input_tokens": 5, "output_tokens": 2}
        });
        let r = parse_response("anthropic", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.stop_reason, StopReason::Refusal);
        assert_eq!(r.message.content, "Hello..\n\n[refused by the API: cyber: This looks like malware.]");
        let mut acc = MessageAccumulator::new();
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": "refusal",
            "stop_details": {"explanation": "Declined."}}, "usage": {"output_tokens": 1}});
        acc.push("anthropic", serde_json::from_value(delta).unwrap()).unwrap();
        assert_eq!(acc.finish().message.content, "[refused by the API: Declined.]");
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("stop_sequence"), StopReason::StopSequence);
        assert_eq!(stop_reason("refusal"), StopReason::Refusal);
        assert_eq!(stop_reason("pause_turn"), StopReason::Other("pause_turn".into()));
    }

    #[test]
    fn a_complete_response_parses() {
        let body = json!({"model": "m", "content": [{"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}], "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 4}});
        let r = parse_response("anthropic", body.to_string().as_bytes()).unwrap();
        assert_eq!(r.message.content, "ok");
        assert_eq!(r.message.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(r.usage.output_tokens, 4);
    }
}

//! Wire types of the Bedrock Runtime Converse API (`POST /model/{modelId}/converse` and
//! `/converse-stream`: the request body, the response, and the JSON payloads of the stream's
//! events), as plain serde structs with no behaviour. Field names are the API's camelCase;
//! unions (content blocks, deltas) are objects with one member set, which serde's externally
//! tagged enums write, and which responses read as structs of optional members so that a
//! member the client does not know is ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `Converse` / `ConverseStream` (the model is in the path).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseRequest {
    /// The conversation, alternating `user` and `assistant`.
    pub messages: Vec<Message>,
    /// The system prompt, with a cache point after it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<SystemBlock>,
    /// Token cap, sampling and stop sequences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference_config: Option<InferenceConfig>,
    /// Tools offered to the model and whether one must be called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig>,
    /// Fields passed to the model as they are (Claude's `thinking`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_model_request_fields: Option<Value>,
}

/// A prompt-cache checkpoint: the prefix up to it is cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CachePoint {
    /// Always `default`.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl CachePoint {
    /// The one cache point type.
    pub const DEFAULT: CachePoint = CachePoint { kind: "default" };
}

/// A block of the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SystemBlock {
    /// Text.
    Text(String),
    /// A cache point after the blocks before it.
    CachePoint(CachePoint),
}

/// One message of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// Its blocks, in order.
    pub content: Vec<ContentBlock>,
}

/// A content block of a request message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ContentBlock {
    /// Text.
    Text(String),
    /// A tool call the assistant made.
    ToolUse(ToolUse),
    /// The result of a call, in a user message.
    ToolResult(ToolResult),
    /// Reasoning the assistant did, sent back with its turn.
    ReasoningContent(ReasoningContent),
    /// A cache point after the blocks before it.
    CachePoint(CachePoint),
}

/// `toolUse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolUse {
    /// The call's id.
    pub tool_use_id: String,
    /// Tool name.
    pub name: String,
    /// Arguments (an object).
    pub input: Value,
}

/// `toolResult`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call it answers.
    pub tool_use_id: String,
    /// The output.
    pub content: Vec<ToolResultContent>,
    /// `error` for a failed call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
}

/// A block of a tool result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolResultContent {
    /// Text.
    Text(String),
    /// A JSON document.
    Json(Value),
}

/// `reasoningContent` of a request: the model's reasoning with its signature, or the opaque
/// redacted form.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReasoningContent {
    /// Reasoning text and its signature.
    ReasoningText(ReasoningText),
    /// Redacted reasoning (base64), sent back as received.
    RedactedContent(String),
}

/// `reasoningText`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasoningText {
    /// The reasoning.
    #[serde(default)]
    pub text: String,
    /// Its signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// `inferenceConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceConfig {
    /// Token cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
}

/// `toolConfig`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig {
    /// The tools, with a cache point after them.
    pub tools: Vec<Tool>,
    /// `{"auto": {}}`, `{"any": {}}` or `{"tool": {"name"}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
}

/// An entry of `toolConfig.tools`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Tool {
    /// A tool.
    ToolSpec(ToolSpec),
    /// A cache point after the tools before it.
    CachePoint(CachePoint),
}

/// `toolSpec`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// Name.
    pub name: String,
    /// What it does (left out when empty: the API refuses an empty one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `{"json": schema}`.
    pub input_schema: InputSchema,
}

/// `inputSchema`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputSchema {
    /// The JSON Schema of the arguments.
    pub json: Value,
}

/// A complete `Converse` answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverseResponse {
    /// The answer.
    #[serde(default)]
    pub output: Option<Output>,
    /// Why it stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
}

/// `output`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Output {
    /// The assistant's message.
    #[serde(default)]
    pub message: Option<ResponseMessage>,
}

/// The assistant's message of an answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResponseMessage {
    /// Its blocks.
    #[serde(default)]
    pub content: Vec<ResponseBlock>,
}

/// A content block of an answer (one member set).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseBlock {
    /// Text.
    #[serde(default)]
    pub text: Option<String>,
    /// A tool call.
    #[serde(default)]
    pub tool_use: Option<ResponseToolUse>,
    /// Reasoning.
    #[serde(default)]
    pub reasoning_content: Option<ResponseReasoning>,
}

/// `toolUse` of an answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseToolUse {
    /// The call's id.
    #[serde(default)]
    pub tool_use_id: String,
    /// Tool name.
    #[serde(default)]
    pub name: String,
    /// Arguments (an object; in a stream's `contentBlockStart`, absent).
    #[serde(default)]
    pub input: Value,
}

/// `reasoningContent` of an answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseReasoning {
    /// Reasoning text and signature.
    #[serde(default)]
    pub reasoning_text: Option<ReasoningText>,
    /// Redacted reasoning (base64).
    #[serde(default)]
    pub redacted_content: Option<String>,
}

/// `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Input tokens not read from or written to the cache.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the cache.
    #[serde(default)]
    pub cache_write_input_tokens: u64,
}

/// The payload of `contentBlockStart`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlockStart {
    /// The block's index.
    #[serde(default)]
    pub content_block_index: u32,
    /// What starts (a tool call's id and name).
    #[serde(default)]
    pub start: Option<BlockStart>,
}

/// `start` of `contentBlockStart`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockStart {
    /// A tool call begins.
    #[serde(default)]
    pub tool_use: Option<ResponseToolUse>,
}

/// The payload of `contentBlockDelta`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlockDelta {
    /// The block's index.
    #[serde(default)]
    pub content_block_index: u32,
    /// The piece.
    #[serde(default)]
    pub delta: Delta,
}

/// `delta` of `contentBlockDelta` (one member set).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delta {
    /// Text.
    #[serde(default)]
    pub text: Option<String>,
    /// A piece of a tool call's input JSON.
    #[serde(default)]
    pub tool_use: Option<ToolUseDelta>,
    /// A piece of reasoning: text, its signature, or redacted content.
    #[serde(default)]
    pub reasoning_content: Option<ReasoningDelta>,
}

/// `toolUse` of a delta.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ToolUseDelta {
    /// A piece of the input JSON text.
    #[serde(default)]
    pub input: String,
}

/// `reasoningContent` of a delta.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningDelta {
    /// A piece of reasoning text.
    #[serde(default)]
    pub text: Option<String>,
    /// The block's signature.
    #[serde(default)]
    pub signature: Option<String>,
    /// Redacted reasoning (base64).
    #[serde(default)]
    pub redacted_content: Option<String>,
}

/// The payload of `messageStop`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageStop {
    /// Why it stopped.
    #[serde(default)]
    pub stop_reason: String,
}

/// The payload of `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Metadata {
    /// Token counts of the call.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
}

/// The payload of an exception message, and the body of an error response.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ApiError {
    /// What went wrong.
    #[serde(default, alias = "Message")]
    pub message: String,
}

//! Wire types of the OpenAI Chat Completions API (request body, response, stream chunk), as
//! plain serde structs with no behaviour. Fields the client does not use are left out; unknown
//! fields in responses are ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /chat/completions`; its messages borrow the request's text (a sub-call's
/// prompt can be megabytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletionRequest<'a> {
    /// Model id.
    pub model: String,
    /// The conversation.
    pub messages: Vec<RequestMessage<'a>>,
    /// Tools offered to the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Whether and which tool the model must call (`"auto"`, `"none"`, `"required"` or
    /// `{"type": "function", "function": {"name"}}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Token cap (the classic name, understood by every compatible server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Token cap (the name newer OpenAI models require).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// How hard a reasoning model thinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Requested answer format (`{"type":"json_object"}`, `{"type":"json_schema",...}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// `true` for a streamed answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Streaming options (usage in the last chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

/// `stream_options` of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamOptions {
    /// Ask for a final chunk carrying the usage.
    pub include_usage: bool,
}

/// One message of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestMessage<'a> {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'static str,
    /// Text; `null` for an assistant turn made only of tool calls.
    pub content: Option<&'a str>,
    /// Tool calls of an assistant message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
}

/// A tool call in a request or a complete response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id.
    #[serde(default)]
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// Name and arguments.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

/// The function part of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    #[serde(default)]
    pub name: String,
    /// Arguments as a JSON text.
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function.
    pub function: FunctionDefinition,
}

/// Name, description and JSON Schema of a function tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDefinition {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// A complete (non-streamed) response.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatCompletion {
    /// Model that answered.
    #[serde(default)]
    pub model: String,
    /// Choices (the client asks for one).
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<CompletionUsage>,
}

/// One choice of a complete response.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Choice {
    /// Choice index.
    #[serde(default)]
    pub index: u32,
    /// The message.
    pub message: ResponseMessage,
    /// Why it stopped.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The assistant message of a complete response.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResponseMessage {
    /// Text.
    #[serde(default)]
    pub content: Option<String>,
    /// A refusal, instead of text.
    #[serde(default)]
    pub refusal: Option<String>,
    /// The reasoning some compatible servers return beside the text (DeepSeek, vLLM, llama.cpp:
    /// `reasoning_content`; OpenRouter: `reasoning`).
    #[serde(default, alias = "reasoning")]
    pub reasoning_content: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct CompletionUsage {
    /// Prompt tokens, cached ones included.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Breakdown of the prompt tokens.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// Breakdown of prompt tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the cache.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// One `chat.completion.chunk` of a stream.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatCompletionChunk {
    /// Model that answers.
    #[serde(default)]
    pub model: Option<String>,
    /// Choice deltas (empty in the usage chunk).
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Token counts (last chunk, when asked for).
    #[serde(default)]
    pub usage: Option<CompletionUsage>,
    /// An error reported inside the stream (some compatible servers do this).
    #[serde(default)]
    pub error: Option<Value>,
}

/// One choice delta of a chunk.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChunkChoice {
    /// Choice index.
    #[serde(default)]
    pub index: u32,
    /// What is new.
    #[serde(default)]
    pub delta: Option<Delta>,
    /// Set on the choice's last chunk.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// New content of a choice.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Delta {
    /// A piece of text.
    #[serde(default)]
    pub content: Option<String>,
    /// A piece of a refusal.
    #[serde(default)]
    pub refusal: Option<String>,
    /// A piece of reasoning (compatible servers: `reasoning_content`, or `reasoning`).
    #[serde(default, alias = "reasoning")]
    pub reasoning_content: Option<String>,
    /// Pieces of tool calls, by index.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A piece of one tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ToolCallDelta {
    /// Which call of the message (parallel calls interleave by index).
    #[serde(default)]
    pub index: Option<u32>,
    /// Call id (first piece).
    #[serde(default)]
    pub id: Option<String>,
    /// Name and a piece of the arguments.
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

/// A piece of a function call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FunctionDelta {
    /// Tool name (first piece).
    #[serde(default)]
    pub name: Option<String>,
    /// A piece of the arguments text.
    #[serde(default)]
    pub arguments: Option<String>,
}

//! Wire types of the Anthropic Messages API (request body, response, stream events), as plain
//! serde structs with no behaviour. Unknown block, delta and event types are accepted and
//! ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /v1/messages`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessagesRequest {
    /// Model id.
    pub model: String,
    /// Token cap (required by the API).
    pub max_tokens: u32,
    /// System prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemPrompt>,
    /// The conversation, alternating user and assistant.
    pub messages: Vec<RequestMessage>,
    /// Tools offered to the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Whether and which tool the model must call (`{"type": "auto" | "any" | "none"}` or
    /// `{"type": "tool", "name"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// `true` for a streamed answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Extended thinking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingConfig>,
}

/// `{"type": "enabled", "budget_tokens": N}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThinkingConfig {
    /// Always `enabled`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Tokens the model may think with (less than `max_tokens`).
    pub budget_tokens: u32,
}

/// A prompt-cache breakpoint: the prefix up to the marked block is cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheControl {
    /// Always `ephemeral`.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl CacheControl {
    /// The one cache type.
    pub const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };
}

/// The system prompt: plain text, or text blocks (to carry a cache breakpoint).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SystemPrompt {
    /// Plain text.
    Text(String),
    /// Text blocks.
    Blocks(Vec<SystemBlock>),
}

/// A text block of the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemBlock {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
    /// A cache breakpoint after this block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

/// One message of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestMessage {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// Plain text or content blocks.
    pub content: RequestContent,
}

/// The content of a request message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RequestContent {
    /// A single text.
    Text(String),
    /// Content blocks.
    Blocks(Vec<Block>),
}

/// A content block with an optional cache breakpoint after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// The block.
    #[serde(flatten)]
    pub block: RequestBlock,
    /// A cache breakpoint after this block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

impl From<RequestBlock> for Block {
    fn from(block: RequestBlock) -> Self {
        Block { block, cache_control: None }
    }
}

/// A content block of a request message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RequestBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call made by the assistant.
    ToolUse {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments object.
        input: Value,
    },
    /// Thinking the assistant did, sent back with its turn.
    Thinking {
        /// The reasoning.
        thinking: String,
        /// Its signature.
        signature: String,
    },
    /// Redacted thinking, sent back as received.
    RedactedThinking {
        /// The opaque data.
        data: String,
    },
    /// The result of a tool call, sent by the user side.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// The output text.
        content: String,
        /// Whether the tool failed.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: Value,
    /// A cache breakpoint after this tool (set on the last one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

/// A complete (non-streamed) response, also the `message` of `message_start`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MessageResponse {
    /// Model that answered.
    #[serde(default)]
    pub model: String,
    /// Content blocks.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Why it stopped (`null` in `message_start`).
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// What the API says about why it stopped (a refusal's category and explanation).
    #[serde(default)]
    pub stop_details: Option<serde_json::Value>,
    /// Token counts.
    #[serde(default)]
    pub usage: WireUsage,
}

/// A content block of a response.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        #[serde(default)]
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// Call id.
        #[serde(default)]
        id: String,
        /// Tool name.
        #[serde(default)]
        name: String,
        /// Arguments (empty in a stream's `content_block_start`).
        #[serde(default)]
        input: Value,
    },
    /// Extended thinking.
    Thinking {
        /// The reasoning (empty in a stream's `content_block_start`).
        #[serde(default)]
        thinking: String,
        /// Its signature.
        #[serde(default)]
        signature: String,
    },
    /// Thinking the API redacted: opaque data to send back as is.
    RedactedThinking {
        /// The data.
        #[serde(default)]
        data: String,
    },
    /// Anything else (server tools, their results...).
    #[serde(other)]
    Other,
}

/// Token counts. In `message_delta` every field is optional and cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct WireUsage {
    /// Input tokens not read from or written to the cache.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Input tokens written to the cache.
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

/// One event of a stream (the `data:` JSON, tagged by `type`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The message begins (model and input usage).
    MessageStart {
        /// The empty message.
        message: MessageResponse,
    },
    /// A content block begins.
    ContentBlockStart {
        /// Block index.
        index: u32,
        /// The block's start.
        content_block: ContentBlock,
    },
    /// A piece of a content block.
    ContentBlockDelta {
        /// Block index.
        index: u32,
        /// The piece.
        delta: BlockDelta,
    },
    /// A content block ends.
    ContentBlockStop {
        /// Block index.
        index: u32,
    },
    /// Top-level changes: stop reason and final usage.
    MessageDelta {
        /// Stop reason.
        delta: MessageDeltaBody,
        /// Cumulative usage.
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    /// The message ends.
    MessageStop,
    /// Keep-alive.
    Ping,
    /// The server failed mid-stream.
    Error {
        /// What went wrong.
        error: ApiError,
    },
    /// Anything else.
    #[serde(other)]
    Unknown,
}

/// A piece of a content block.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    /// Text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of a tool call's input JSON.
    InputJsonDelta {
        /// The piece.
        partial_json: String,
    },
    /// A piece of thinking.
    ThinkingDelta {
        /// The piece.
        thinking: String,
    },
    /// The signature of a thinking block.
    SignatureDelta {
        /// The signature.
        signature: String,
    },
    /// Anything else (citations...).
    #[serde(other)]
    Other,
}

/// The `delta` of `message_delta`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MessageDeltaBody {
    /// Why generation stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// What the API says about why it stopped (a refusal's category and explanation).
    #[serde(default)]
    pub stop_details: Option<serde_json::Value>,
}

/// An error object (`{"type": "...", "message": "..."}`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ApiError {
    /// Error type, e.g. `overloaded_error`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The message.
    #[serde(default)]
    pub message: String,
}

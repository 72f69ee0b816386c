//! Wire types of OpenAI's Responses API (`POST /responses`: the request body, the response
//! object, its output items and the stream events), as plain serde structs with no behaviour.
//! Fields the client does not use are left out; unknown item, content and event types are
//! accepted and ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /responses`; its input items borrow the request's text (a sub-call's
/// prompt can be megabytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponsesRequest<'a> {
    /// Model id.
    pub model: String,
    /// The system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The conversation as input items.
    pub input: Vec<InputItem<'a>>,
    /// Tools offered to the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<FunctionTool>,
    /// Whether and which tool the model must call (`"auto"`, `"none"`, `"required"` or
    /// `{"type": "function", "name"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Whether the model may call several tools in one turn (sent with tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature (reasoning models take none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Token cap, reasoning tokens included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Reasoning effort and summaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningConfig>,
    /// The answer's format (`{"format": {"type": "json_schema", ...}}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<Value>,
    /// Whether OpenAI keeps the response; always `false`, so each request carries its context.
    pub store: bool,
    /// Extra output to include: the encrypted reasoning, so it can be sent back statelessly.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<&'static str>,
    /// Routes calls that share a prefix to the same cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
    /// `true` for a streamed answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

/// `reasoning` of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasoningConfig {
    /// `minimal`, `low`, `medium` or `high`.
    pub effort: String,
    /// Ask for reasoning summaries (`auto`).
    pub summary: &'static str,
}

/// One input item of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputItem<'a> {
    /// A message: `user` or `developer` with text, or `assistant` with output text.
    Message {
        /// `user`, `developer` or `assistant`.
        role: &'static str,
        /// The text, or the assistant's output-text parts.
        content: MessageContent<'a>,
        /// An assistant message's `phase` (`commentary` or `final_answer`), as it came.
        #[serde(skip_serializing_if = "Option::is_none")]
        phase: Option<&'a str>,
    },
    /// A reasoning item the model produced, sent back as it came.
    Reasoning {
        /// Its id (`rs_…`).
        id: &'a str,
        /// Its summary parts.
        summary: Vec<SummaryPart>,
        /// The encrypted reasoning (stateless use).
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
    },
    /// A function call the model made.
    FunctionCall {
        /// The call id the output must echo.
        call_id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Arguments as JSON text.
        arguments: String,
    },
    /// The output of a function call.
    FunctionCallOutput {
        /// The call it answers.
        call_id: &'a str,
        /// The output text.
        output: &'a str,
    },
}

/// The content of an input message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MessageContent<'a> {
    /// Plain text (user and developer messages).
    Text(&'a str),
    /// Output-text parts (assistant messages).
    Parts(Vec<OutputText<'a>>),
}

/// `{"type": "output_text", "text"}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputText<'a> {
    /// Always `output_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: &'a str,
}

/// `{"type": "summary_text", "text"}` in a request or a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryPart {
    /// Always `summary_text`.
    #[serde(rename = "type", default = "summary_text")]
    pub kind: String,
    /// The summary text.
    #[serde(default)]
    pub text: String,
}

fn summary_text() -> String {
    "summary_text".into()
}

/// A function tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionTool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    /// Whether the arguments are guaranteed to match the schema (only where the schema allows).
    pub strict: bool,
}

/// A response object: the body of a non-streamed answer, and the `response` of the `created`,
/// `completed`, `incomplete` and `failed` events.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Response {
    /// Response id.
    #[serde(default)]
    pub id: String,
    /// Model that answered.
    #[serde(default)]
    pub model: String,
    /// `completed`, `incomplete`, `failed`, `in_progress`...
    #[serde(default)]
    pub status: Option<String>,
    /// The output items.
    #[serde(default)]
    pub output: Vec<OutputItem>,
    /// Why an incomplete response stopped.
    #[serde(default)]
    pub incomplete_details: Option<IncompleteDetails>,
    /// Why a failed response failed.
    #[serde(default)]
    pub error: Option<ApiError>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<ResponseUsage>,
}

/// `incomplete_details` of a response.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IncompleteDetails {
    /// `max_output_tokens`, `content_filter`...
    #[serde(default)]
    pub reason: Option<String>,
}

/// An error object (`{"code", "message"}`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ApiError {
    /// Error code, e.g. `server_error`, `rate_limit_exceeded`.
    #[serde(default)]
    pub code: Option<String>,
    /// The message.
    #[serde(default)]
    pub message: String,
}

/// Token counts of a response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct ResponseUsage {
    /// Input tokens, cached ones included.
    #[serde(default)]
    pub input_tokens: u64,
    /// Breakdown of the input tokens.
    #[serde(default)]
    pub input_tokens_details: Option<InputTokensDetails>,
    /// Output tokens, reasoning tokens included.
    #[serde(default)]
    pub output_tokens: u64,
    /// Breakdown of the output tokens.
    #[serde(default)]
    pub output_tokens_details: Option<OutputTokensDetails>,
}

/// Breakdown of input tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct InputTokensDetails {
    /// Input tokens served from the cache.
    #[serde(default)]
    pub cached_tokens: u64,
}

/// Breakdown of output tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct OutputTokensDetails {
    /// Output tokens spent reasoning (billed as output).
    #[serde(default)]
    pub reasoning_tokens: u64,
}

/// An output item of a response.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// An assistant message.
    Message {
        /// Its content parts.
        #[serde(default)]
        content: Vec<ContentPart>,
        /// `commentary` or `final_answer`, for the models that label their messages.
        #[serde(default)]
        phase: Option<String>,
    },
    /// A reasoning item.
    Reasoning {
        /// Its id (`rs_…`).
        #[serde(default)]
        id: String,
        /// Its summary parts.
        #[serde(default)]
        summary: Vec<SummaryPart>,
        /// The encrypted reasoning (complete in `output_item.done` and the final response).
        #[serde(default)]
        encrypted_content: Option<String>,
        /// The raw reasoning text (`reasoning_text` parts: open-weight models, and servers such
        /// as vLLM that speak the Responses API), where the model gives it rather than a summary.
        #[serde(default)]
        content: Vec<SummaryPart>,
    },
    /// A function call.
    FunctionCall {
        /// The call id the output must echo.
        #[serde(default)]
        call_id: String,
        /// Tool name.
        #[serde(default)]
        name: String,
        /// Arguments as JSON text (empty in `output_item.added`).
        #[serde(default)]
        arguments: String,
    },
    /// Anything else (server tools and their calls).
    #[serde(other)]
    Other,
}

/// A content part of an output message.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    OutputText {
        /// The text.
        #[serde(default)]
        text: String,
    },
    /// A refusal instead of an answer.
    Refusal {
        /// What the model said.
        #[serde(default)]
        refusal: String,
    },
    /// Anything else.
    #[serde(other)]
    Other,
}

/// One event of a stream (the `data:` JSON, tagged by `type`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type")]
pub enum StreamEvent {
    /// The response was created (model and id).
    #[serde(rename = "response.created", alias = "response.in_progress")]
    Created {
        /// The empty response.
        response: Response,
    },
    /// An output item begins.
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        /// Its place in the output.
        output_index: u32,
        /// The item as it starts.
        item: OutputItem,
    },
    /// An output item is complete.
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        /// Its place in the output.
        output_index: u32,
        /// The whole item.
        item: OutputItem,
    },
    /// A piece of output text.
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        /// The item it belongs to.
        output_index: u32,
        /// The piece.
        delta: String,
    },
    /// A piece of a refusal.
    #[serde(rename = "response.refusal.delta")]
    RefusalDelta {
        /// The item it belongs to.
        output_index: u32,
        /// The piece.
        delta: String,
    },
    /// A piece of a reasoning summary.
    #[serde(rename = "response.reasoning_summary_text.delta")]
    ReasoningSummaryDelta {
        /// The reasoning item.
        output_index: u32,
        /// Which summary part.
        #[serde(default)]
        summary_index: u32,
        /// The piece.
        delta: String,
    },
    /// A piece of raw reasoning text.
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta {
        /// The reasoning item.
        output_index: u32,
        /// Which content part.
        #[serde(default)]
        content_index: u32,
        /// The piece.
        delta: String,
    },
    /// A piece of a function call's arguments.
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        /// The function-call item.
        output_index: u32,
        /// The piece.
        delta: String,
    },
    /// A function call's whole arguments.
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        /// The function-call item.
        output_index: u32,
        /// The arguments.
        arguments: String,
    },
    /// The response finished.
    #[serde(rename = "response.completed")]
    Completed {
        /// The whole response.
        response: Response,
    },
    /// The response stopped early (`incomplete_details.reason`).
    #[serde(rename = "response.incomplete")]
    Incomplete {
        /// The response so far.
        response: Response,
    },
    /// The response failed (`error`).
    #[serde(rename = "response.failed")]
    Failed {
        /// The failed response.
        response: Response,
    },
    /// The server failed mid-stream.
    #[serde(rename = "error")]
    Error {
        /// Error code.
        #[serde(default)]
        code: Option<String>,
        /// The message.
        #[serde(default)]
        message: String,
        /// The same, nested (some servers send `{"type": "error", "error": {...}}`).
        #[serde(default)]
        error: Option<ApiError>,
    },
    /// Anything else (content parts, text done, keep-alives...).
    #[serde(other)]
    Unknown,
}

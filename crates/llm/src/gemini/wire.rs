//! Wire types of Google's Gemini API (`models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`: the request body, the response — one SSE chunk or the
//! whole answer — its candidates, parts, prompt feedback and usage), as plain serde structs
//! with no behaviour. Field names are the API's camelCase; fields the client does not use are
//! left out and unknown ones are ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `generateContent` / `streamGenerateContent` (the model is in the URL); its
/// parts borrow the request's text (a sub-call's prompt can be megabytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentRequest<'a> {
    /// The conversation, `user` and `model` turns.
    pub contents: Vec<Content<'a>>,
    /// The system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Content<'a>>,
    /// Tools offered to the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether and which function the model must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig>,
    /// Sampling, caps, answer format and thinking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<GenerationConfig>,
    /// The cached content (`cachedContents/{id}`) holding this request's system instruction,
    /// tools and tool config, which are then left out of the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_content: Option<String>,
}

/// The body of `POST cachedContents`: a request's shared prefix, stored for `ttl`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateCachedContent<'a, 'b> {
    /// `models/{model}`: a cache serves only the model it was made for.
    pub model: String,
    /// A label shown when caches are listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The prefix: system instruction, tools and tool config.
    #[serde(flatten)]
    pub prefix: &'b CachePrefix<'a>,
    /// How long it lives, e.g. `"600s"`.
    pub ttl: String,
}

/// What a cached content holds of a request: the parts a request naming the cache must leave
/// out (the API refuses a request with a cache and any of these).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachePrefix<'a> {
    /// The system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Content<'a>>,
    /// Tools offered to the model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether and which function the model must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfig>,
}

/// A cached content as the API describes it after creating it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContent {
    /// `cachedContents/{id}`, what a request names.
    #[serde(default)]
    pub name: String,
    /// When it expires (RFC 3339).
    #[serde(default)]
    pub expire_time: Option<String>,
}

/// One turn of the conversation (or the system instruction, which has no role).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Content<'a> {
    /// `user` or `model`; none for the system instruction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Its parts, in order.
    pub parts: Vec<Part<'a>>,
}

/// One part of a request turn: text (a thought when `thought`), a function call or a
/// function response, with the thought signature the model put on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Part<'a> {
    /// Text (answer text, or a thought summary when `thought`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<&'a str>,
    /// Whether the text is a thought.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub thought: bool,
    /// The opaque signature the model put on this part, sent back on the same part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<&'a str>,
    /// A call the model made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall<'a>>,
    /// The result of a call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_response: Option<FunctionResponse<'a>>,
}

/// `functionCall` of a request part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionCall<'a> {
    /// The call's id, when the model gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    /// Function name.
    pub name: &'a str,
    /// Arguments (an object).
    pub args: Value,
}

/// `functionResponse` of a request part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionResponse<'a> {
    /// The id of the call it answers, when the call had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    /// The name of the function called.
    pub name: &'a str,
    /// `{"output": ...}`, or `{"error": ...}` for a failed call.
    pub response: Value,
}

/// A tool: function declarations.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// The functions.
    pub function_declarations: Vec<FunctionDeclaration>,
}

/// One function the model may call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDeclaration {
    /// Name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Arguments in Gemini's schema subset; none for a function without arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Arguments as a plain JSON Schema, for a schema the subset cannot say (exclusive with
    /// `parameters`).
    #[serde(rename = "parametersJsonSchema", skip_serializing_if = "Option::is_none")]
    pub parameters_json_schema: Option<Value>,
}

/// `toolConfig`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfig {
    /// How functions are called.
    pub function_calling_config: FunctionCallingConfig,
}

/// `functionCallingConfig`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCallingConfig {
    /// `AUTO`, `ANY` (must call) or `NONE`.
    pub mode: &'static str,
    /// With `ANY`: the functions it may call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_function_names: Vec<String>,
}

/// `generationConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfig {
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Token cap (thinking tokens count against it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// `application/json` for a JSON answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_mime_type: Option<&'static str>,
    /// The answer's schema (Gemini's schema subset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// Thinking budget and whether thought summaries come back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_config: Option<ThinkingConfig>,
}

/// `thinkingConfig`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingConfig {
    /// Thinking tokens the model may spend.
    pub thinking_budget: u32,
    /// Return thought summaries as `thought` parts.
    pub include_thoughts: bool,
}

/// A response: one SSE chunk of a stream, or the whole answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateContentResponse {
    /// The candidates (one: the client asks for one).
    #[serde(default)]
    pub candidates: Vec<Candidate>,
    /// Why the prompt was blocked, if it was.
    #[serde(default)]
    pub prompt_feedback: Option<PromptFeedback>,
    /// Token counts so far (the last chunk's are the call's).
    #[serde(default)]
    pub usage_metadata: Option<UsageMetadata>,
    /// The model that answered.
    #[serde(default)]
    pub model_version: String,
    /// An error sent in place of a chunk.
    #[serde(default)]
    pub error: Option<ApiError>,
}

/// One candidate answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Its content (none when it was blocked before any).
    #[serde(default)]
    pub content: Option<ResponseContent>,
    /// `STOP`, `MAX_TOKENS`, `SAFETY`, `RECITATION`... (on the last chunk).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// What the finish reason means, in words, where the API gives it.
    #[serde(default)]
    pub finish_message: Option<String>,
}

/// The content of a candidate.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResponseContent {
    /// Its parts.
    #[serde(default)]
    pub parts: Vec<ResponsePart>,
}

/// One part of an answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponsePart {
    /// Text, or a thought summary when `thought`.
    #[serde(default)]
    pub text: Option<String>,
    /// Whether the text is a thought.
    #[serde(default)]
    pub thought: bool,
    /// The signature to send back on this part.
    #[serde(default)]
    pub thought_signature: Option<String>,
    /// A function call.
    #[serde(default)]
    pub function_call: Option<ResponseFunctionCall>,
}

/// `functionCall` of an answer part.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResponseFunctionCall {
    /// Its id, when the API gives one.
    #[serde(default)]
    pub id: Option<String>,
    /// Function name.
    #[serde(default)]
    pub name: String,
    /// Arguments (an object).
    #[serde(default)]
    pub args: Option<Value>,
}

/// `promptFeedback`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptFeedback {
    /// `SAFETY`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `OTHER`...
    #[serde(default)]
    pub block_reason: Option<String>,
    /// The reason in words.
    #[serde(default)]
    pub block_reason_message: Option<String>,
}

/// `usageMetadata`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    /// Prompt tokens, cached ones included.
    #[serde(default)]
    pub prompt_token_count: u64,
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cached_content_token_count: u64,
    /// Answer tokens.
    #[serde(default)]
    pub candidates_token_count: u64,
    /// Thinking tokens (billed as output).
    #[serde(default)]
    pub thoughts_token_count: u64,
    /// Prompt tokens of tool results run by the server (billed as input).
    #[serde(default)]
    pub tool_use_prompt_token_count: u64,
}

/// Google's error object (`{"error": {"code", "message", "status"}}`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ApiError {
    /// The HTTP status it stands for.
    #[serde(default)]
    pub code: Option<u16>,
    /// The message.
    #[serde(default)]
    pub message: String,
    /// `INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`...
    #[serde(default)]
    pub status: Option<String>,
}

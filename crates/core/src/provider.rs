//! The `ChatProvider` trait: one completion call, in a streaming form (text deltas as they
//! arrive, then the assembled response) and a collected form built on it.

use std::fmt;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Message, ToolSpec, Usage};

/// How the model should shape its answer, where the provider supports it natively.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// A short name for the schema.
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// Ask for the provider's strict mode (OpenAI `strict: true`): the output is guaranteed
        /// to match. The schema must then list every property as required and forbid others.
        #[serde(default)]
        strict: bool,
    },
}

/// Whether and which tool the model must call (OpenAI's `tool_choice`, Anthropic's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the default).
    Auto,
    /// No tool call.
    None,
    /// At least one tool call.
    Required,
    /// A call of this tool.
    Tool(String),
}

/// Options of one completion call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatOptions {
    /// Model name; empty means the provider's configured default.
    #[serde(default)]
    pub model: String,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Cap on generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Requested answer format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// How hard a reasoning model thinks (`minimal`, `low`, `medium`, `high`), where the
    /// provider supports it (OpenAI's `reasoning_effort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Whether and which tool the model must call (sent only with tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// A key that routes calls sharing a prompt prefix to the same provider cache (OpenAI's
    /// `prompt_cache_key`), e.g. one per run tree; providers without one ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
}

/// One completion request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far (system messages included).
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Call options.
    #[serde(default)]
    pub options: ChatOptions,
}

/// Why the provider stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The token cap was reached.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider filtered the content.
    ContentFilter,
    /// The model refused.
    Refusal,
    /// Anything else, verbatim.
    Other(String),
}

impl StopReason {
    /// Whether this is a normal end of turn (finished or asking for tools).
    pub fn is_natural(&self) -> bool {
        matches!(self, StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence)
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ContentFilter => "content_filter",
            StopReason::Refusal => "refusal",
            StopReason::Other(s) => s,
        };
        f.write_str(s)
    }
}

/// The assembled result of one completion call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message (text and tool calls).
    pub message: Message,
    /// Why generation stopped.
    pub stop_reason: StopReason,
    /// Tokens used by this call.
    pub usage: Usage,
    /// Cost of this call in USD, where the model's price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The model that answered, as reported by the provider.
    #[serde(default)]
    pub model: String,
}

/// One item of a streamed completion.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// A piece of assistant text, as it arrived.
    TextDelta(String),
    /// A piece of the model's reasoning (extended thinking), as it arrived; not answer text.
    ReasoningDelta(String),
    /// The call failed transiently and is about to be retried.
    Retry {
        /// 1-based number of the retry about to happen.
        attempt: u32,
        /// How long the client waits before it.
        delay_ms: u64,
        /// What went wrong.
        reason: String,
    },
    /// The stream ended; the assembled response.
    Completed(ChatResponse),
}

/// A streamed completion.
pub type ChatStream = BoxStream<'static, Result<StreamEvent, ProviderError>>;

/// A provider fault (after any retries). Limits and stop reasons are not errors.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider answered with an HTTP error status.
    #[error("{provider} returned HTTP {status}: {message}")]
    Http {
        /// Provider name.
        provider: String,
        /// HTTP status code.
        status: u16,
        /// The provider's own error message.
        message: String,
        /// Seconds the server asked us to wait, from `Retry-After`.
        retry_after_secs: Option<f64>,
    },
    /// The connection failed or dropped.
    #[error("{provider}: connection failed: {message}")]
    Connection {
        /// Provider name.
        provider: String,
        /// Details.
        message: String,
    },
    /// The request timed out.
    #[error("{provider}: request timed out after {secs:.1}s")]
    Timeout {
        /// Provider name.
        provider: String,
        /// The timeout.
        secs: f64,
    },
    /// The provider sent something that is not its protocol.
    #[error("{provider}: malformed response: {message}")]
    Malformed {
        /// Provider name.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// The stream ended before the response was complete.
    #[error("{provider}: stream ended early: {message}")]
    Truncated {
        /// Provider name.
        provider: String,
        /// What was missing.
        message: String,
    },
    /// The provider is misconfigured or the request cannot be served (e.g. replay mismatch).
    #[error("{0}")]
    Invalid(String),
    /// A USD cap applies and the model's price is unknown, so the call was not made.
    #[error(
        "model `{model}` has no known price, so a USD cap cannot count its cost and the call was not made; \
         price it with [pricing.\"{model}\"] (input and output USD per million tokens) in your recursive.toml"
    )]
    Unpriced {
        /// The model asked for.
        model: String,
    },
}

impl ProviderError {
    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => *status == 429 || *status == 408 || *status >= 500,
            ProviderError::Connection { .. } | ProviderError::Timeout { .. } | ProviderError::Truncated { .. } => true,
            ProviderError::Malformed { .. } | ProviderError::Invalid(_) | ProviderError::Unpriced { .. } => false,
        }
    }
}

/// A language-model backend.
///
/// Implementors provide [`ChatProvider::stream`]; [`ChatProvider::complete`] collects it.
#[async_trait]
pub trait ChatProvider: Send + Sync {
    /// A short name for messages and events (`openai`, `anthropic`, `mock`...).
    fn name(&self) -> &str;

    /// The model used when a request leaves `options.model` empty.
    fn default_model(&self) -> &str {
        ""
    }

    /// Starts a completion and streams its text deltas, ending with
    /// [`StreamEvent::Completed`].
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError>;

    /// What `request` may cost at most: the guarded model call holds an estimate against the
    /// tree's USD caps while the call runs, and refuses a call whose price is unknown while a
    /// USD cap applies. A provider that does not wrap a priced API (scripted, replayed, local)
    /// keeps the default, [`CallPrice::Free`].
    fn price(&self, _request: &ChatRequest) -> CallPrice {
        CallPrice::Free
    }

    /// Runs a completion to the end and returns the assembled response.
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, ProviderError> {
        let provider = self.name().to_string();
        let mut stream = self.stream(request).await?;
        while let Some(event) = stream.next().await {
            if let StreamEvent::Completed(response) = event? {
                return Ok(response);
            }
        }
        Err(ProviderError::Truncated { provider, message: "stream ended without a final response".into() })
    }
}

/// What a model call may cost, known before it is made ([`ChatProvider::price`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallPrice {
    /// The call costs nothing (a scripted, replayed or local model).
    Free,
    /// At most this many USD.
    Estimate(f64),
    /// The call costs money but this model's price is unknown.
    Unknown {
        /// The model whose price is unknown.
        model: String,
    },
}

/// Turns a finished response into a stream (for providers without incremental output).
pub fn response_stream(response: ChatResponse) -> ChatStream {
    let mut events = Vec::with_capacity(2);
    if !response.message.content.is_empty() {
        events.push(Ok(StreamEvent::TextDelta(response.message.content.clone())));
    }
    events.push(Ok(StreamEvent::Completed(response)));
    futures::stream::iter(events).boxed()
}

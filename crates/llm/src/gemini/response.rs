//! The response transform of the Gemini API: response chunks (SSE `data:` objects, or one
//! whole answer) become a core [`ChatResponse`] — answer text, thought parts as reasoning,
//! function calls (several in one turn for parallel calls; an id is made up where the API
//! gave none), each thought signature kept as a `gemini:` [`Reasoning`] entry naming the part
//! it came on, the finish reason (`STOP`, `MAX_TOKENS`; `SAFETY`, `RECITATION`, `BLOCKLIST`,
//! `PROHIBITED_CONTENT`... as provider stops with their reason; a blocked prompt too) and the
//! usage (cached prompt tokens as cache reads, thinking tokens as output). An error object in
//! place of a chunk is a provider error.

use recursive_core::{ChatResponse, Message, ProviderError, Reasoning, StopReason, ToolCall, Usage};

use super::{CALL_SIGNATURE_PREFIX, SYNTHETIC_CALL_PREFIX, TEXT_SIGNATURE_ID, THOUGHT_ID, wire};
use crate::sse;

/// Maps wire usage: cached prompt tokens become cache reads and are not counted as input;
/// thinking tokens are billed as output.
pub fn usage(u: &wire::UsageMetadata) -> Usage {
    let cached = u.cached_content_token_count.min(u.prompt_token_count);
    Usage {
        input_tokens: u.prompt_token_count - cached + u.tool_use_prompt_token_count,
        output_tokens: u.candidates_token_count + u.thoughts_token_count,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

/// The stop reason of a `finishReason`; `has_calls` tells a tool turn from the end of one.
pub fn finish_reason(reason: &str, has_calls: bool) -> StopReason {
    match reason {
        "STOP" | "FINISH_REASON_UNSPECIFIED" if has_calls => StopReason::ToolUse,
        "STOP" | "FINISH_REASON_UNSPECIFIED" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_ascii_lowercase()),
    }
}

/// The stop reason of a prompt the API blocked (`promptFeedback.blockReason`).
pub fn blocked_prompt(reason: &str) -> StopReason {
    StopReason::Other(format!("prompt_blocked_{}", reason.to_ascii_lowercase()))
}

/// A provider error from an error object sent in place of a response.
pub(crate) fn api_error(provider: &str, error: &wire::ApiError) -> ProviderError {
    let status = error.code.filter(|c| (400..600).contains(c)).unwrap_or(500);
    let what = error.status.as_deref().map(|s| format!("{s}: ")).unwrap_or_default();
    ProviderError::Http {
        provider: provider.to_string(),
        status,
        message: format!("{what}{}", error.message),
        retry_after_secs: None,
    }
}

/// A made-up call id, for a call the API gave none: unique, and never sent back.
fn synthetic_call_id() -> String {
    format!("{SYNTHETIC_CALL_PREFIX}{:016x}", rand::random::<u64>())
}

/// What the last part was, so streamed thought pieces join up.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
enum Last {
    #[default]
    Nothing,
    Thought,
    Other,
}

/// Assembles a response from its chunks. A plain struct, fed with parsed chunks, so it can be
/// tested without HTTP.
#[derive(Debug, Default, Clone)]
pub struct ResponseAccumulator {
    model: String,
    text: String,
    text_signature: Option<String>,
    thoughts: Vec<Reasoning>,
    calls: Vec<ToolCall>,
    call_signatures: Vec<Reasoning>,
    finish: Option<String>,
    blocked: Option<String>,
    usage: Option<wire::UsageMetadata>,
    last: Last,
    /// Thought text that arrived since [`ResponseAccumulator::take_reasoning`] was last called.
    reasoning: Vec<String>,
}

impl ResponseAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one chunk; returns the answer text that arrived with it. An error object becomes
    /// the provider's error.
    pub fn push(&mut self, provider: &str, chunk: wire::GenerateContentResponse) -> Result<Vec<String>, ProviderError> {
        if let Some(error) = &chunk.error {
            return Err(api_error(provider, error));
        }
        if !chunk.model_version.is_empty() {
            self.model = chunk.model_version;
        }
        if chunk.usage_metadata.is_some() {
            self.usage = chunk.usage_metadata;
        }
        if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
            self.blocked = Some(reason);
        }
        let mut shown = Vec::new();
        // One candidate is asked for; others (if a server sent them) are ignored.
        let Some(candidate) = chunk.candidates.into_iter().next() else { return Ok(shown) };
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(text) = self.push_part(part) {
                shown.push(text);
            }
        }
        if let Some(reason) = candidate.finish_reason {
            self.finish = Some(reason);
        }
        Ok(shown)
    }

    /// Takes in one part; returns its answer text.
    fn push_part(&mut self, part: wire::ResponsePart) -> Option<String> {
        let signature = part.thought_signature.filter(|s| !s.is_empty());
        if let Some(call) = part.function_call {
            let id = call.id.filter(|id| !id.is_empty()).unwrap_or_else(synthetic_call_id);
            if let Some(signature) = signature {
                self.call_signatures.push(Reasoning {
                    id: format!("{CALL_SIGNATURE_PREFIX}{id}"),
                    signature,
                    ..Default::default()
                });
            }
            let arguments = call.args.unwrap_or_else(|| serde_json::json!({}));
            self.calls.push(ToolCall { id, name: call.name, arguments });
            self.last = Last::Other;
            return None;
        }
        let text = part.text.unwrap_or_default();
        if part.thought {
            self.push_thought(text, signature);
            return None;
        }
        if signature.is_some() {
            self.text_signature = signature;
        }
        self.last = Last::Other;
        self.text.push_str(&text);
        Some(text)
    }

    /// A thought piece continues the thought before it unless that one is sealed by its
    /// signature or something else came between.
    fn push_thought(&mut self, text: String, signature: Option<String>) {
        let continues = self.last == Last::Thought && self.thoughts.last().is_some_and(|t| t.signature.is_empty());
        if !continues {
            if !self.thoughts.is_empty() && !text.is_empty() {
                self.reasoning.push("\n\n".into());
            }
            self.thoughts.push(Reasoning { id: THOUGHT_ID.into(), ..Default::default() });
        }
        if let Some(thought) = self.thoughts.last_mut() {
            thought.text.push_str(&text);
            if let Some(signature) = signature {
                thought.signature = signature;
            }
        }
        if !text.is_empty() {
            self.reasoning.push(text);
        }
        self.last = Last::Thought;
    }

    /// The thought text that arrived since the last call, for streaming it.
    pub fn take_reasoning(&mut self) -> Vec<String> {
        std::mem::take(&mut self.reasoning)
    }

    /// Whether the answer ended: a finish reason, or a blocked prompt.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some() || self.blocked.is_some()
    }

    /// The assembled response.
    pub fn finish(&self) -> ChatResponse {
        let stop_reason = match (&self.finish, &self.blocked) {
            (Some(reason), _) => finish_reason(reason, !self.calls.is_empty()),
            (None, Some(blocked)) => blocked_prompt(blocked),
            (None, None) if self.calls.is_empty() => StopReason::EndTurn,
            (None, None) => StopReason::ToolUse,
        };
        let mut message = Message::assistant_with_tools(self.text.clone(), self.calls.clone());
        message.reasoning = self.thoughts.clone();
        if let Some(signature) = &self.text_signature {
            message.reasoning.push(Reasoning {
                id: TEXT_SIGNATURE_ID.into(),
                signature: signature.clone(),
                ..Default::default()
            });
        }
        message.reasoning.extend(self.call_signatures.iter().cloned());
        sse::assembled(message, stop_reason, self.usage.as_ref().map(usage).unwrap_or_default(), &self.model)
    }
}

/// Parses a complete (non-streamed) answer.
pub fn parse_response(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let response: wire::GenerateContentResponse = sse::parse_body(provider, "response", body)?;
    let mut acc = ResponseAccumulator::new();
    acc.push(provider, response)?;
    if !acc.is_finished() && acc.calls.is_empty() && acc.text.is_empty() {
        return Err(sse::not_an_answer(provider, "the response has no candidate and no finish reason", body));
    }
    Ok(acc.finish())
}

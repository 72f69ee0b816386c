//! What a caller outside the run tree asks of one agent conversation beyond its input — the
//! client side of an OpenAI-compatible request: tools the client runs itself (a call to one
//! ends the run with the call handed back, [`FinishReason::ClientToolCalls`]), model settings
//! laid over the agent's own, and a check the final answer must pass (structured output), which
//! the model gets [`MAX_REPAIRS`] chances to meet.
//!
//! [`FinishReason::ClientToolCalls`]: crate::run::FinishReason::ClientToolCalls

use std::sync::Arc;

use crate::message::ToolSpec;
use crate::provider::ChatOptions;

/// How many times a final answer that fails its check is sent back to the model to be redone.
pub const MAX_REPAIRS: u32 = 2;

/// Judges a final answer (e.g. JSON against a schema): `Err` says what is wrong, for the model.
pub trait CheckAnswer: Send + Sync {
    /// Whether `text` is an acceptable final answer.
    fn check(&self, text: &str) -> Result<(), String>;
}

/// A shared [`CheckAnswer`].
#[derive(Clone)]
pub struct AnswerCheck(pub Arc<dyn CheckAnswer>);

impl std::fmt::Debug for AnswerCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnswerCheck")
    }
}

impl PartialEq for AnswerCheck {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The caller's asks of one run. Empty by default: the agent runs as configured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asks {
    /// Tools the caller runs itself: offered to the model beside the agent's own; the run ends
    /// when the model calls one, with the call pending in the transcript (the agent's own calls
    /// of that turn answered first).
    pub tools: Vec<ToolSpec>,
    /// Model settings over the agent's (an empty model, `None` or an empty list keep the
    /// agent's value).
    pub options: ChatOptions,
    /// A check the final answer must pass.
    pub check: Option<AnswerCheck>,
}

impl Asks {
    /// Whether nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.options == ChatOptions::default() && self.check.is_none()
    }

    /// Whether `name` is one of the caller's tools.
    pub fn is_client_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// The options of a model call: `base` with what the caller set laid over it.
    pub fn overlay(&self, base: &ChatOptions) -> ChatOptions {
        let over = &self.options;
        ChatOptions {
            model: if over.model.is_empty() { base.model.clone() } else { over.model.clone() },
            temperature: over.temperature.or(base.temperature),
            max_tokens: over.max_tokens.or(base.max_tokens),
            stop: if over.stop.is_empty() { base.stop.clone() } else { over.stop.clone() },
            response_format: over.response_format.clone().or_else(|| base.response_format.clone()),
            reasoning_effort: over.reasoning_effort.clone().or_else(|| base.reasoning_effort.clone()),
            tool_choice: over.tool_choice.clone().or_else(|| base.tool_choice.clone()),
            prompt_cache_key: over.prompt_cache_key.clone().or_else(|| base.prompt_cache_key.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_settings_lie_over_the_agents() {
        let base = ChatOptions {
            model: "m".into(),
            temperature: Some(0.2),
            max_tokens: Some(100),
            stop: vec!["END".into()],
            ..Default::default()
        };
        let asks = Asks {
            options: ChatOptions { temperature: Some(0.9), stop: vec!["STOP".into()], ..Default::default() },
            ..Default::default()
        };
        let options = asks.overlay(&base);
        assert_eq!(options.model, "m");
        assert_eq!(options.temperature, Some(0.9));
        assert_eq!(options.max_tokens, Some(100));
        assert_eq!(options.stop, vec!["STOP".to_string()]);
        assert!(!asks.is_empty());
        assert!(Asks::default().is_empty());
    }
}

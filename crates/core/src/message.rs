//! Conversation vocabulary shared by every provider and the agent loop: roles, messages,
//! tool calls, tool specs and token usage.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who authored a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions that frame the whole conversation.
    System,
    /// The human (or the caller standing in for one).
    User,
    /// The model.
    Assistant,
    /// The result of one tool call, answering an assistant's call by id.
    Tool,
}

/// A request from the model to run one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned id that the tool result must echo.
    pub id: String,
    /// Name of the tool in the registry.
    pub name: String,
    /// Arguments as JSON. When the model sent text that is not valid JSON, the raw text is
    /// kept as a JSON string so the loop can report the problem to the model.
    pub arguments: Value,
}

/// A block of a model's reasoning (Anthropic's extended thinking, an OpenAI Responses reasoning
/// item), kept in the transcript so it can be sent back with the turn it belongs to, as the API
/// requires during tool use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reasoning {
    /// The text of the reasoning (a Responses item: its summary); for a redacted block, its
    /// opaque data.
    pub text: String,
    /// The provider's signature over it (empty for a redacted block); for a Responses reasoning
    /// item, its `encrypted_content`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
    /// The provider's id of the item (OpenAI Responses: `rs_…`); empty for Anthropic thinking.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Whether the provider redacted it (its `text` is then opaque data).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author of the message.
    pub role: Role,
    /// Text content (may be empty for an assistant turn made only of tool calls).
    #[serde(default)]
    pub content: String,
    /// Tool calls requested by an assistant message, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool message: whether the tool reported an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// For an assistant message: the reasoning that came with it, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<Reasoning>,
    /// For an assistant message: the provider's label of what its text is, sent back as it came
    /// (OpenAI Responses' `phase`: `commentary` before tool calls, `final_answer`), which
    /// models that give one need again on later turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            reasoning: Vec::new(),
            phase: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// An assistant message carrying tool calls (and optional text).
    pub fn assistant_with_tools(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self { tool_calls, ..Self::new(Role::Assistant, content) }
    }

    /// The result of one tool call.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        Self { tool_call_id: Some(tool_call_id.into()), is_error, ..Self::new(Role::Tool, content) }
    }

    /// Rough size of the message in characters, used for transcript limits.
    pub fn size_chars(&self) -> usize {
        self.content.chars().count()
            + self.tool_calls.iter().map(|c| c.name.len() + c.arguments.to_string().len()).sum::<usize>()
    }
}

/// Description of a tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model uses to call the tool.
    pub name: String,
    /// What the tool does, written for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// Token counts reported by a provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (not counting cache reads and writes where the provider separates them).
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// All tokens counted by this usage.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.add(&rhs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_serializes_without_empty_fields() {
        let m = Message::user("hi");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v, serde_json::json!({"role": "user", "content": "hi"}));
    }

    #[test]
    fn usage_adds_every_counter() {
        let mut a = Usage { input_tokens: 1, output_tokens: 2, cache_read_tokens: 3, cache_write_tokens: 4 };
        a += Usage { input_tokens: 10, output_tokens: 20, cache_read_tokens: 30, cache_write_tokens: 40 };
        assert_eq!(a.total(), 110);
        assert_eq!(a.cache_write_tokens, 44);
    }
}

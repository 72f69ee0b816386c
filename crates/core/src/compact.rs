//! Compaction: keeping a growing conversation inside the model's context window.
//!
//! Before each model call of the agent loop the transcript's size is estimated (characters / 4,
//! plus a few tokens per message). Past [`CompactionConfig::threshold`] of the window:
//! 1. **micro-compaction**, no model call: tool results older than the last
//!    [`CompactionConfig::keep_tool_results`] are replaced by a one-line note of their size;
//! 2. if that is not enough, **a summary**: the conversation before the last
//!    [`CompactionConfig::keep_turns`] user turns is summarised by one model call (through the run's
//!    guarded model call, so budgets and events hold) and replaced by that summary, carried at the
//!    head of the first kept user message. System messages are always kept, and the cut is made
//!    at a user message, so every tool call keeps its result.
//!
//! 3. if what is kept is still too big (a huge result in the latest turn), **a cut**: the middle
//!    of the largest tool results is left out until the request fits.
//!
//! Each compaction is a `compacted` event and a line of the transcript log, which keeps the full
//! history before it; reading the log back continues from the last compaction.

use serde::{Deserialize, Serialize};

use crate::message::{Message, Role};

/// When and how to compact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionConfig {
    /// The model's context window, in tokens.
    pub context_window_tokens: usize,
    /// The share of the window past which the transcript is compacted (0..1).
    pub threshold: f64,
    /// Tool results kept whole by micro-compaction (the most recent ones).
    pub keep_tool_results: usize,
    /// User turns kept verbatim by a summary (the most recent ones).
    pub keep_turns: usize,
}

impl CompactionConfig {
    /// Compaction for a window of `tokens`, with the default threshold (75 %) and kept parts.
    pub fn for_window(tokens: usize) -> Self {
        CompactionConfig { context_window_tokens: tokens, threshold: 0.75, keep_tool_results: 4, keep_turns: 1 }
    }

    /// Tokens past which the transcript is compacted.
    pub fn limit(&self) -> usize {
        (self.context_window_tokens as f64 * self.threshold.clamp(0.05, 1.0)) as usize
    }
}

/// Estimated tokens of `messages` (4 characters a token, plus 4 a message and its calls' arguments).
pub fn estimate_tokens(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| {
            let calls: usize = m.tool_calls.iter().map(|c| c.name.len() + c.arguments.to_string().len()).sum();
            (m.content.len() + calls) / 4 + 4
        })
        .sum()
}

/// Results shorter than this are not worth eliding.
const ELIDE_MIN_CHARS: usize = 200;

/// Replaces the content of tool results older than the last `keep` with a note; returns how
/// many were elided.
pub fn micro_compact(messages: &mut [Message], keep: usize) -> usize {
    let tool_indices: Vec<usize> =
        messages.iter().enumerate().filter(|(_, m)| m.role == Role::Tool).map(|(i, _)| i).collect();
    let old = tool_indices.len().saturating_sub(keep);
    let mut elided = 0;
    for &i in &tool_indices[..old] {
        let m = &mut messages[i];
        if m.content.len() >= ELIDE_MIN_CHARS && !m.content.starts_with(ELIDED_PREFIX) {
            m.content = format!(
                "{ELIDED_PREFIX} {} characters, elided to save context; call the tool again if you need it]",
                m.content.len()
            );
            elided += 1;
        }
    }
    elided
}

const ELIDED_PREFIX: &str = "[earlier tool result of";

/// Tool results are never cut below this many characters.
const CUT_MIN_CHARS: usize = 400;

/// Cuts the middle out of the largest tool results until `messages` are estimated at no more
/// than `max_tokens` (or nothing more can be cut); returns how many were cut. The head and
/// tail of each stay, with a marker saying how much was cut.
pub fn cut_tool_results(messages: &mut [Message], max_tokens: usize) -> usize {
    let mut cut = 0;
    loop {
        let over = estimate_tokens(messages).saturating_sub(max_tokens);
        if over == 0 {
            return cut;
        }
        let largest = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::Tool && m.content.len() > CUT_MIN_CHARS)
            .max_by_key(|(_, m)| m.content.len())
            .map(|(i, _)| i);
        let Some(i) = largest else { return cut };
        let content = &messages[i].content;
        // Cut a little more than the overshoot (the marker takes a few dozen characters).
        let keep = content.chars().count().saturating_sub(over * 4 + 200).max(CUT_MIN_CHARS / 2);
        messages[i].content = crate::text::truncate_middle(content, keep);
        cut += 1;
    }
}

/// The head marker of a summary.
pub const SUMMARY_HEADING: &str = "[Summary of the earlier conversation]";

/// The conversation split for a summary: system messages, the part to summarise, the part kept.
pub struct Split {
    /// System messages (kept).
    pub system: Vec<Message>,
    /// What the summary replaces.
    pub old: Vec<Message>,
    /// The last `keep_turns` user turns, from a user message on.
    pub recent: Vec<Message>,
}

/// Splits `messages` before the `keep_turns`-th last user message; `None` when there is
/// nothing before it to summarise.
pub fn split(messages: &[Message], keep_turns: usize) -> Option<Split> {
    let system: Vec<Message> = messages.iter().filter(|m| m.role == Role::System).cloned().collect();
    let rest: Vec<Message> = messages.iter().filter(|m| m.role != Role::System).cloned().collect();
    let users: Vec<usize> = rest.iter().enumerate().filter(|(_, m)| m.role == Role::User).map(|(i, _)| i).collect();
    let cut = *users.get(users.len().checked_sub(keep_turns.max(1))?)?;
    if cut == 0 {
        return None;
    }
    Some(Split { system, old: rest[..cut].to_vec(), recent: rest[cut..].to_vec() })
}

/// Most characters of one message shown to the summariser.
const SUMMARY_INPUT_MESSAGE_CHARS: usize = 4_000;

/// Estimated tokens the tool specs of a request take (they are sent with every call).
pub fn estimate_spec_tokens(specs: &[crate::message::ToolSpec]) -> usize {
    specs.iter().map(|s| (s.name.len() + s.description.len() + s.parameters.to_string().len()) / 4 + 8).sum()
}

/// The request text asking for a summary of `old`, at most `max_chars` long: when the older
/// turns do not fit, the most recent of them are kept (a note says how many were left out).
pub fn summary_prompt(old: &[Message], max_chars: usize) -> String {
    let head = "Summarise the conversation below so that it can be continued from the summary alone: the user's goals, \
         decisions made, facts and results found (with file names, commands and values), what was changed, and \
         what is still open. Be complete and concise; write plain text.\n\n--- conversation ---\n";
    let mut budget = max_chars.saturating_sub(head.len() + 80);
    // Each message gets a fair share first (long ones shortened); then, if still too long, the
    // oldest are left out.
    let share = (budget / old.len().max(1)).clamp(120, SUMMARY_INPUT_MESSAGE_CHARS);
    let items: Vec<String> = old.iter().map(|m| summary_item(m, share)).collect();
    let mut kept: Vec<&String> = Vec::new();
    for item in items.iter().rev() {
        if item.len() > budget {
            break;
        }
        budget -= item.len();
        kept.push(item);
    }
    kept.reverse();
    let mut text = String::from(head);
    if kept.len() < items.len() {
        text.push_str(&format!(
            "[{} earlier message(s) left out to fit the context window]\n",
            items.len() - kept.len()
        ));
    }
    for item in kept {
        text.push_str(item);
    }
    text
}

/// One message as the summariser sees it.
fn summary_item(m: &Message, max_chars: usize) -> String {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool result",
    };
    let mut text = format!("{role}: {}\n", crate::text::clip_chars(&m.content, max_chars));
    for c in &m.tool_calls {
        text.push_str(&format!(
            "assistant calls {}({})\n",
            c.name,
            crate::text::clip_chars(&c.arguments.to_string(), max_chars.min(500))
        ));
    }
    text
}

/// The compacted conversation: the system messages, then the kept turns with the summary at the
/// head of their first user message.
pub fn rebuild(split: Split, summary: &str) -> Vec<Message> {
    let Split { system, recent, .. } = split;
    let mut out = system;
    let mut recent = recent.into_iter();
    if let Some(mut first) = recent.next() {
        first.content =
            format!("{SUMMARY_HEADING}\n{}\n\n[The conversation continues]\n{}", summary.trim(), first.content);
        out.push(first);
    }
    out.extend(recent);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_summary_request_fits_its_bound_keeping_the_latest_turns() {
        let old: Vec<Message> = (0..100).map(|i| Message::user(format!("turn {i}: {}", "x".repeat(1000)))).collect();
        let prompt = summary_prompt(&old, 20_000);
        assert!(prompt.len() <= 20_000, "{}", prompt.len());
        assert!(prompt.contains("turn 99") && !prompt.contains("turn 0:"), "the latest turns are kept");
        assert!(prompt.contains("earlier message(s) left out"));
    }

    use super::*;
    use crate::message::ToolCall;
    use crate::transcript::Transcript;

    fn conversation() -> Vec<Message> {
        let call = |id: &str| ToolCall { id: id.into(), name: "read_file".into(), arguments: json!({"path": "a"}) };
        vec![
            Message::system("sys"),
            Message::user("first goal"),
            Message::assistant_with_tools("", vec![call("c1")]),
            Message::tool_result("c1", "x".repeat(1000), false),
            Message::assistant("done one"),
            Message::user("second goal"),
            Message::assistant_with_tools("", vec![call("c2")]),
            Message::tool_result("c2", "y".repeat(1000), false),
        ]
    }

    #[test]
    fn micro_compaction_elides_old_tool_results_only() {
        let mut m = conversation();
        assert_eq!(micro_compact(&mut m, 1), 1);
        assert!(m[3].content.starts_with(ELIDED_PREFIX), "{}", m[3].content);
        assert_eq!(m[7].content.len(), 1000, "the latest result is kept");
        assert!(Transcript::from_messages(m).is_ok(), "pairing intact");
    }

    #[test]
    fn the_largest_tool_results_are_cut_to_fit_keeping_head_and_tail() {
        let mut m = conversation();
        m[7].content = format!("HEAD{}TAIL", "z".repeat(40_000));
        let cut = cut_tool_results(&mut m, 1_000);
        assert!(cut >= 1);
        assert!(estimate_tokens(&m) <= 1_000, "{}", estimate_tokens(&m));
        assert!(m[7].content.starts_with("HEAD") && m[7].content.ends_with("TAIL"), "{}", m[7].content);
        assert!(m[7].content.contains("chars truncated"));
        assert!(Transcript::from_messages(m.clone()).is_ok(), "pairing intact");
        assert_eq!(cut_tool_results(&mut m, 1_000), 0, "nothing more to cut once it fits");
    }

    #[test]
    fn a_summary_replaces_old_turns_and_keeps_pairing() {
        let messages = conversation();
        let s = split(&messages, 1).unwrap();
        assert_eq!(s.old.len(), 4);
        assert!(summary_prompt(&s.old, 100_000).contains("first goal"));
        let rebuilt = rebuild(s, "they read a");
        assert_eq!(rebuilt[0].content, "sys");
        assert!(rebuilt[1].content.starts_with(SUMMARY_HEADING) && rebuilt[1].content.ends_with("second goal"));
        assert_eq!(rebuilt.len(), 4);
        assert!(Transcript::from_messages(rebuilt).is_ok(), "pairing intact");
        assert!(split(&conversation()[..5], 1).is_none(), "one turn: nothing to summarise");
    }
}

//! Bounded results. An action's output longer than `result_chars` does not flow up the tree
//! as it is: it is cut into prompt-sized parts, the model writes what each part holds that
//! matters for the goal, and the joined digest (within `result_chars`) becomes the goal's
//! result. The raw output stays in the goal's `executed` log event, which the result's
//! evidence refers to. When the model cannot be asked (a limit, a fault), the output is
//! shortened visibly instead and the result says so.

use futures::StreamExt;
use recursive_core::{ChatOptions, ChatRequest, Message, ModelCall, RunScope};

use crate::assemble::shorten;
use crate::prompts;
use crate::pursuer::GoalPursuer;

/// Most parts of one output that are read; the middle of a longer output is left out, and
/// the result says so.
const MAX_PARTS: usize = 8;
/// Room in a part's prompt for everything but the part itself.
const PART_OVERHEAD: usize = 1_200;

/// An action's output as a goal's result.
pub(crate) struct Digest {
    /// The result text, at most `result_chars` long.
    pub(crate) text: String,
    /// Whether `text` differs from the raw output.
    pub(crate) digested: bool,
    /// What the result could not cover, if anything.
    pub(crate) limitation: Option<String>,
}

impl GoalPursuer {
    /// `output` within the result size: whole when it fits, else digested part by part.
    pub(crate) async fn digest(&self, goal: &str, output: &str, scope: &RunScope) -> Digest {
        let limit = self.config.result_chars;
        let total = output.chars().count();
        if total <= limit {
            return Digest { text: output.to_string(), digested: false, limitation: None };
        }
        let system = prompts::digest_system();
        let part_chars = self.user_budget(&system).saturating_sub(PART_OVERHEAD).max(1_000);
        let parts = split(output, part_chars);
        let count = parts.len();
        let read = read_parts(count);
        let left_out = count - read.len();
        let per_part = (limit / read.len().max(1)).saturating_sub(20).max(200);
        let calls: Vec<_> = read
            .iter()
            .copied()
            .map(|i| prompts::digest_part(goal, i + 1, count, total, &parts[i], per_part))
            .map(|user| self.digest_call(system.clone(), user, scope))
            .collect();
        let replies: Vec<Result<String, String>> =
            futures::stream::iter(calls).buffered(self.config.layer_concurrency.max(1)).collect().await;
        let mut texts = Vec::new();
        for reply in replies {
            match reply {
                Ok(text) => texts.push(text),
                Err(e) => {
                    let limitation = format!("the output ({total} characters) was shortened without a digest: {e}");
                    return Digest { text: shorten(output, limit), digested: true, limitation: Some(limitation) };
                }
            }
        }
        let joined = if texts.len() == 1 {
            texts.remove(0)
        } else {
            read.iter()
                .zip(&texts)
                .map(|(i, t)| format!("Part {} of {count}: {t}", i + 1))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let limitation = (left_out > 0).then(|| {
            format!("{left_out} of {count} parts of the output ({total} characters) were not read: only the first and last {} were", read.len() / 2)
        });
        Digest { text: shorten(&joined, limit), digested: true, limitation }
    }

    async fn digest_call(&self, system: String, user: String, scope: &RunScope) -> Result<String, String> {
        let options = ChatOptions { response_format: None, ..self.config.options.clone() };
        let request =
            ChatRequest { messages: vec![Message::system(system), Message::user(user)], tools: Vec::new(), options };
        let response = scope
            .call_model(self.provider.as_ref(), request, ModelCall::at(scope.next_step()))
            .await
            .map_err(|e| e.to_string())?;
        let text = response.message.content.trim().to_string();
        if text.is_empty() { Err("the model returned no digest".into()) } else { Ok(text) }
    }
}

/// Which parts are read: all when there are few, else the first and last halves of
/// [`MAX_PARTS`].
fn read_parts(count: usize) -> Vec<usize> {
    if count <= MAX_PARTS {
        return (0..count).collect();
    }
    let half = MAX_PARTS / 2;
    (0..half).chain(count - half..count).collect()
}

/// `text` in parts of at most `size` characters, each ending at a line break where one falls
/// in its last fifth.
fn split(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let mut end = (start + size).min(chars.len());
        if end < chars.len()
            && let Some(nl) = chars[start + size * 4 / 5..end].iter().rposition(|&c| c == '\n')
        {
            end = start + size * 4 / 5 + nl + 1;
        }
        parts.push(chars[start..end].iter().collect());
        start = end;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_the_text_in_parts_ending_at_line_breaks() {
        let text = (0..100).map(|i| format!("line {i}\n")).collect::<String>();
        let parts = split(&text, 100);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.chars().count() <= 100));
        assert!(parts[..parts.len() - 1].iter().all(|p| p.ends_with('\n')), "{parts:?}");
    }

    #[test]
    fn a_long_output_reads_its_first_and_last_parts() {
        assert_eq!(read_parts(3), vec![0, 1, 2]);
        assert_eq!(read_parts(20), vec![0, 1, 2, 3, 16, 17, 18, 19]);
    }
}

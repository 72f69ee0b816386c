//! A client's conversation, as both OpenAI-style endpoints (Chat Completions and Responses)
//! send it, turned into one run request: which runnable, the goal, the history, attached
//! files, and the client's asks (its own tools and model settings).
//!
//! Client tools round trip: a run that stops on client tool calls keeps its conversation here
//! (bounded, newest kept) under fresh call ids and, for the Responses API, its response id; the
//! client's next request, carrying the results, continues that conversation — with the server's
//! own tool calls and results of the turn — or, when it is no longer kept (or never was), the
//! conversation as the client sent it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use recursive_core::{Asks, Message, Role, ToolCall, Transcript};

use crate::runs::{RunKind, RunOutput, RunRequest};

/// The models this server offers besides its named runnables.
pub const MODELS: [&str; 2] = ["agent", "rlm"];

/// The question an `rlm` run gets when the user's message is its only input.
const RLM_QUESTION: &str = "Carry out the request written in the input `context` and answer it.";

/// The question an `rlm` run gets when the user attached files and wrote nothing.
const RLM_FILES_QUESTION: &str = "Summarise the attached inputs.";

/// How many conversations waiting on the client are kept, and at most how many characters
/// they hold together (the oldest go first past either).
const KEPT: usize = 1024;
const KEPT_CHARS: usize = 64 << 20;

/// A client's error: the status and what to tell it.
pub(crate) type Refusal = (StatusCode, String);

/// One message of a client's conversation.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text parts.
    pub parts: Vec<String>,
    /// Attached files: file name and text.
    pub files: Vec<(String, String)>,
    /// An assistant turn's tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// A tool turn's call id.
    pub tool_call_id: Option<String>,
}

impl Turn {
    fn text(&self) -> String {
        self.parts.join("\n")
    }

    /// The turn as a message of the history.
    fn message(&self) -> Option<Message> {
        Some(match self.role.as_str() {
            "system" | "developer" => Message::system(self.text()),
            "user" => Message::user(with_files(self.text(), &self.files)),
            "assistant" => Message::assistant_with_tools(self.text(), self.tool_calls.clone()),
            "tool" => Message::tool_result(self.tool_call_id.clone()?, self.text(), false),
            _ => return None,
        })
    }
}

/// The run a conversation asks of `model`, continuing a kept conversation (`prior`: the one a
/// Responses request names) or one waiting on the client's tool results.
pub(crate) fn run_request(
    model: &str,
    turns: Vec<Turn>,
    prior: Option<Arc<Vec<Message>>>,
    asks: Asks,
    agents: &[String],
    kept: &Continuations,
) -> Result<RunRequest, Refusal> {
    let (kind, agent) = match model {
        "agent" => (RunKind::Run, None),
        "rlm" => (RunKind::Rlm, None),
        named if agents.iter().any(|a| a == named) => (RunKind::Run, Some(named.to_string())),
        other => {
            let offered: Vec<String> = MODELS.iter().map(|m| m.to_string()).chain(agents.iter().cloned()).collect();
            let message = format!("The model `{other}` does not exist; this server offers {}", offered.join(", "));
            return Err((StatusCode::NOT_FOUND, message));
        }
    };
    let request = RunRequest { kind, agent, tools: asks.tools, options: asks.options, ..RunRequest::new(kind, "") };
    if kind == RunKind::Rlm {
        return rlm_request(request, &turns);
    }
    if turns.last().is_some_and(|t| t.role == "tool") {
        let history = paired(continued(prior, &turns, kept))?;
        return Ok(RunRequest { history, ..request });
    }
    let Some(last) = turns.iter().rposition(|t| t.role == "user") else {
        return Err((StatusCode::BAD_REQUEST, "the conversation needs a user message".into()));
    };
    let mut history: Vec<Message> = prior.map(|p| p.to_vec()).unwrap_or_default();
    history.extend(turns[..last].iter().filter_map(Turn::message));
    let input = with_files(turns[last].text(), &turns[last].files);
    Ok(RunRequest { input, history: paired(history)?, ..request })
}

/// An `rlm` run: the last user message read as parts (see the module docs of `openai`).
fn rlm_request(request: RunRequest, turns: &[Turn]) -> Result<RunRequest, Refusal> {
    let Some(user) = turns.iter().rfind(|t| t.role == "user") else {
        return Err((StatusCode::BAD_REQUEST, "the conversation needs a user message".into()));
    };
    let mut parts = user.parts.clone();
    let (input, inputs) = if !user.files.is_empty() {
        let question = if parts.is_empty() { RLM_FILES_QUESTION.to_string() } else { parts.join("\n") };
        (question, user.files.iter().cloned().collect())
    } else if parts.len() > 1 {
        let question = parts.remove(0);
        (question, parts.into_iter().enumerate().map(|(i, p)| (format!("input{}", i + 1), p)).collect())
    } else {
        (RLM_QUESTION.to_string(), [("context".to_string(), user.text())].into())
    };
    Ok(RunRequest { input, inputs, ..request })
}

/// The text of a user turn with its attached files appended.
fn with_files(mut text: String, files: &[(String, String)]) -> String {
    for (name, content) in files {
        text.push_str(&format!("\n\n[attached file `{name}`]\n{content}"));
    }
    text
}

/// The history of a conversation that ends with the client's tool results: the kept one the
/// results answer, when it is still kept, else the client's own.
fn continued(prior: Option<Arc<Vec<Message>>>, turns: &[Turn], kept: &Continuations) -> Vec<Message> {
    let results = turns.iter().rev().take_while(|t| t.role == "tool").count();
    let (asked, answers) = turns.split_at(turns.len() - results);
    let first_call = asked.last().filter(|t| t.role == "assistant").and_then(|t| t.tool_calls.first());
    let waiting = first_call.and_then(|c| kept.get(&c.id)).or_else(|| prior.clone().filter(|_| asked.is_empty()));
    match waiting {
        Some(conversation) => conversation.iter().cloned().chain(answers.iter().filter_map(Turn::message)).collect(),
        None => prior
            .map(|p| p.to_vec())
            .unwrap_or_default()
            .into_iter()
            .chain(turns.iter().filter_map(Turn::message))
            .collect(),
    }
}

/// The history with each batch of tool results in the order of its calls, checked against the
/// pairing contract (every call answered once, nothing answered twice).
fn paired(messages: Vec<Message>) -> Result<Vec<Message>, Refusal> {
    let mut ordered: Vec<Message> = Vec::with_capacity(messages.len());
    let mut rest = messages.into_iter().peekable();
    while let Some(message) = rest.next() {
        let calls: Vec<String> = message.tool_calls.iter().map(|c| c.id.clone()).collect();
        ordered.push(message);
        let mut results = Vec::new();
        while let Some(result) = rest.next_if(|m| m.role == Role::Tool) {
            results.push(result);
        }
        results.sort_by_key(|r| calls.iter().position(|c| Some(c) == r.tool_call_id.as_ref()).unwrap_or(usize::MAX));
        ordered.extend(results);
    }
    let transcript = Transcript::from_messages(ordered).map_err(|e| {
        (StatusCode::BAD_REQUEST, format!("the conversation's tool calls and results do not pair: {e}"))
    })?;
    if let Some(next) = transcript.pending_calls().next() {
        return Err((StatusCode::BAD_REQUEST, format!("the tool call `{next}` has no result in the conversation")));
    }
    Ok(transcript.into_messages())
}

/// Conversations that wait on the client's tool results (and Responses by id), newest kept.
#[derive(Default)]
pub struct Continuations {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    entries: VecDeque<(String, Arc<Vec<Message>>, usize)>,
    chars: usize,
}

impl Continuations {
    /// Keeps `conversation` under `key`, forgetting the oldest past the caps.
    pub(crate) fn keep(&self, key: String, conversation: Arc<Vec<Message>>) {
        let size = conversation.iter().map(Message::size_chars).sum::<usize>();
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        while !kept.entries.is_empty() && (kept.entries.len() >= KEPT || kept.chars + size > KEPT_CHARS) {
            if let Some((_, _, gone)) = kept.entries.pop_front() {
                kept.chars -= gone;
            }
        }
        kept.chars += size;
        kept.entries.push_back((key, conversation, size));
    }

    /// The conversation kept under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Vec<Message>>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.entries.iter().rev().find(|(k, _, _)| k == key).map(|(_, c, _)| c.clone())
    }

    /// Gives the client's pending calls of `output` fresh ids (a provider's may be guessable, and
    /// a kept conversation is found by them) and keeps the conversation under each.
    pub(crate) fn settle(&self, output: &mut RunOutput) -> Option<Arc<Vec<Message>>> {
        if output.tool_calls.is_empty() {
            return None;
        }
        let mut messages = std::mem::take(&mut output.messages);
        let assistant = messages.iter_mut().rev().find(|m| m.role == Role::Assistant)?;
        for call in &mut output.tool_calls {
            let fresh = format!("call_{}", uuid::Uuid::new_v4().simple());
            if let Some(own) = assistant.tool_calls.iter_mut().find(|c| c.id == call.id) {
                own.id = fresh.clone();
            }
            call.id = fresh;
        }
        let conversation = Arc::new(messages);
        for call in &output.tool_calls {
            self.keep(call.id.clone(), conversation.clone());
        }
        Some(conversation)
    }
}

/// A file's name as an input name: its stem, unless an earlier file took it (then the whole
/// name with `_` for the dot, then a number).
pub(crate) fn input_name(filename: Option<&str>, index: usize, taken: &dyn Fn(&str) -> bool) -> String {
    let free = |name: &str| !taken(name);
    let Some(filename) = filename.filter(|f| !f.is_empty()) else { return format!("file{}", index + 1) };
    let path = std::path::Path::new(filename);
    let stem =
        path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| format!("file{}", index + 1));
    if free(&stem) {
        return stem;
    }
    let whole = path.file_name().map(|s| s.to_string_lossy().replace('.', "_")).unwrap_or_else(|| stem.clone());
    if free(&whole) {
        return whole;
    }
    (2..).map(|n| format!("{whole}_{n}")).find(|n| free(n)).unwrap_or(whole)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn turn(role: &str, text: &str) -> Turn {
        Turn { role: role.into(), parts: vec![text.into()], ..Default::default() }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "weather".into(), arguments: json!({}) }
    }

    #[test]
    fn kept_conversations_are_bounded_by_count() {
        let kept = Continuations::default();
        for i in 0..KEPT + 5 {
            kept.keep(format!("k{i}"), Arc::new(vec![Message::user("q")]));
        }
        assert!(kept.get("k0").is_none(), "the oldest went first");
        assert!(kept.get(&format!("k{}", KEPT + 4)).is_some());
        assert_eq!(kept.kept.lock().unwrap().entries.len(), KEPT);
    }

    #[test]
    fn files_sharing_a_stem_get_distinct_names() {
        let mut files = Vec::new();
        for name in ["data.csv", "data.json", "data.json", ""] {
            let named = input_name(Some(name), files.len(), &|n: &str| files.iter().any(|(t, _)| t == n));
            files.push((named, String::new()));
        }
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["data", "data_json", "data_json_2", "file4"]);
    }

    #[test]
    fn results_are_put_in_call_order_and_a_missing_one_is_refused() {
        let assistant = Message::assistant_with_tools("", vec![call("a"), call("b")]);
        let history = vec![
            Message::user("q"),
            assistant.clone(),
            Message::tool_result("b", "2", false),
            Message::tool_result("a", "1", false),
        ];
        let ordered = paired(history).unwrap();
        assert_eq!(ordered[2].tool_call_id.as_deref(), Some("a"));
        let missing = paired(vec![Message::user("q"), assistant, Message::tool_result("a", "1", false)]);
        assert_eq!(missing.unwrap_err().0, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn a_kept_conversation_is_continued_with_the_clients_results() {
        let kept = Continuations::default();
        let server_side = vec![
            Message::user("q"),
            Message::assistant_with_tools("", vec![call("own"), call("call_x")]),
            Message::tool_result("own", "server result", false),
        ];
        kept.keep("call_x".into(), Arc::new(server_side));
        let turns = vec![
            turn("user", "q"),
            Turn { role: "assistant".into(), tool_calls: vec![call("call_x")], ..Default::default() },
            Turn {
                role: "tool".into(),
                parts: vec!["sunny".into()],
                tool_call_id: Some("call_x".into()),
                ..Default::default()
            },
        ];
        let request = run_request("agent", turns, None, Asks::default(), &[], &kept).unwrap();
        assert_eq!(request.input, "");
        let contents: Vec<&str> = request.history.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["q", "", "server result", "sunny"]);
    }

    #[test]
    fn a_forgotten_conversation_is_continued_as_the_client_sent_it() {
        let turns = vec![
            turn("user", "q"),
            Turn { role: "assistant".into(), tool_calls: vec![call("call_y")], ..Default::default() },
            Turn {
                role: "tool".into(),
                parts: vec!["sunny".into()],
                tool_call_id: Some("call_y".into()),
                ..Default::default()
            },
        ];
        let request = run_request("agent", turns, None, Asks::default(), &[], &Continuations::default()).unwrap();
        assert_eq!(request.history.len(), 3);
        assert_eq!(request.history[2].content, "sunny");
    }
}

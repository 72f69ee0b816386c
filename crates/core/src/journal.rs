//! A durable run's journal: what its finished model calls answered and its finished tool calls
//! returned, recorded in its spend ledger ([`crate::spend`]) beside the holds, so a run killed
//! anywhere in its tree resumes without asking again what it already has. A resume runs the
//! tree again from its last checkpoints; wherever a node asks the same request (a model call)
//! or makes the same call (a tool, which includes a child run called as a tool) as the killed
//! run did, the answer is read back from the journal instead of being sent or run again — as a
//! durable-execution engine memoises a finished step. Only calls that were in flight at the kill
//! (or that the resumed run asks differently) are made anew.
//!
//! A call is known by its content, not by a counter: a request by its messages, tools and
//! options (not the per-process prompt-cache key), a tool call by its name and arguments. A
//! node resumed from a checkpoint skips what came before it, so counters would shift; content
//! does not. The same content asked several times is answered in the order recorded.
//!
//! The journal lives on the [`crate::RunScope`] of the durable run and every node under it:
//! the guarded model call ([`crate::RunScope::call_model`]) and the one tool executor
//! ([`crate::ToolInvoker`]) consult it, so every runnable of any kind, at any depth, is
//! journaled by construction. A durable run nested in another (a graph thread run by a tool of
//! a journaled run) keeps the enclosing journal: one run tree, one record.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::invoke::ToolOutcome;
use crate::message::ToolCall;
use crate::provider::{ChatRequest, ChatResponse};
use crate::spend::{SPEND_FORMAT, SpendLedger, SpendRecord};

/// What a journaled tool call returned (see [`SpendRecord::Tool`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTool {
    /// What the model was given.
    pub output: String,
    /// Whether the output is an error.
    pub is_error: bool,
    /// Whether the permission gate refused the call.
    pub denied: bool,
}

/// How many calls of this process were answered from the journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Model calls read back instead of sent.
    pub model_calls: usize,
    /// Tool calls read back instead of run.
    pub tool_calls: usize,
}

#[derive(Debug, Default)]
struct Record {
    answers: HashMap<String, VecDeque<ChatResponse>>,
    tools: HashMap<String, VecDeque<RecordedTool>>,
    replayed: Replayed,
}

/// A durable run's journal (see the module docs).
#[derive(Debug)]
pub struct RunJournal {
    ledger: Arc<dyn SpendLedger>,
    record: Mutex<Record>,
}

impl RunJournal {
    /// A journal writing to `ledger`, answering from `earlier`: the records of the run being
    /// resumed (those after the ledger's last end record; none for a new run).
    pub fn new(ledger: Arc<dyn SpendLedger>, earlier: &[SpendRecord]) -> Self {
        let mut record = Record::default();
        for r in earlier {
            match r {
                SpendRecord::Answer { key, response, .. } => {
                    record.answers.entry(key.clone()).or_default().push_back((**response).clone());
                }
                SpendRecord::Tool { key, output, is_error, denied, .. } => {
                    let tool = RecordedTool { output: output.clone(), is_error: *is_error, denied: *denied };
                    record.tools.entry(key.clone()).or_default().push_back(tool);
                }
                _ => {}
            }
        }
        Self { ledger, record: Mutex::new(record) }
    }

    /// The ledger the journal writes to (also the run's spend ledger).
    pub fn ledger(&self) -> Arc<dyn SpendLedger> {
        self.ledger.clone()
    }

    /// The recorded answer to `key`, taken (each recorded answer answers once).
    pub fn replay_answer(&self, key: &str) -> Option<ChatResponse> {
        let mut record = self.record.lock().ok()?;
        let answer = record.answers.get_mut(key)?.pop_front()?;
        record.replayed.model_calls += 1;
        Some(answer)
    }

    /// Records the answer to `key`.
    pub async fn record_answer(&self, key: &str, response: &ChatResponse) -> std::io::Result<()> {
        let record =
            SpendRecord::Answer { v: SPEND_FORMAT, key: key.to_string(), response: Box::new(response.clone()) };
        self.ledger.record(&record).await
    }

    /// The recorded result of the call `key`, taken.
    pub fn replay_tool(&self, key: &str) -> Option<RecordedTool> {
        let mut record = self.record.lock().ok()?;
        let tool = record.tools.get_mut(key)?.pop_front()?;
        record.replayed.tool_calls += 1;
        Some(tool)
    }

    /// Records the result of the call `key`.
    pub async fn record_tool(&self, key: &str, outcome: &ToolOutcome) -> std::io::Result<()> {
        let record = SpendRecord::Tool {
            v: SPEND_FORMAT,
            key: key.to_string(),
            output: outcome.output.clone(),
            is_error: outcome.is_error,
            denied: outcome.denied,
        };
        self.ledger.record(&record).await
    }

    /// How many calls were answered from the journal so far.
    pub fn replayed(&self) -> Replayed {
        self.record.lock().map(|r| r.replayed).unwrap_or_default()
    }
}

/// A run made durable: its scope journaled, what its killed processes spent restored. The one
/// way a host opens a durable run's journal, whatever keeps it (a local store, a store
/// shared by several machines).
#[derive(Debug)]
pub struct DurableRun {
    /// The run's scope: journaled, with what its killed processes spent restored.
    pub scope: crate::RunScope,
    /// What the killed processes of this run spent (nothing for a new run, or when nested).
    pub restored: crate::SpendTotal,
    journal: Option<Arc<RunJournal>>,
}

impl DurableRun {
    /// Opens the run whose journal is kept in `ledger` and holds `records` (read back from it)
    /// in `scope`. The records after the last end mark are the run a kill cut off: its spend is
    /// restored and its finished calls answer again. In a scope already journaled (a durable
    /// run nested in another), the enclosing journal keeps everything and nothing is opened.
    pub fn open(scope: &crate::RunScope, ledger: Arc<dyn SpendLedger>, records: &[SpendRecord]) -> Self {
        if scope.journal().is_some() {
            return Self::nested(scope);
        }
        let earlier = crate::spend::after_last_end(records);
        let journal = Arc::new(RunJournal::new(ledger, earlier));
        let scope = scope.clone().with_journal(journal.clone());
        let restored = crate::SpendTotal::of(earlier);
        if !restored.is_empty() {
            scope.restore_spend(&restored);
        }
        Self { scope, restored, journal: Some(journal) }
    }

    /// A run inside a journaled scope: recorded in the enclosing run's journal.
    pub fn nested(scope: &crate::RunScope) -> Self {
        Self { scope: scope.clone(), restored: crate::SpendTotal::default(), journal: None }
    }

    /// Whether this run continues one that did not end whole (a process of it was killed).
    pub fn resumed(&self) -> bool {
        !self.restored.is_empty()
    }

    /// `scope` (a node made after this run was opened, e.g. a chat turn's) recording in this
    /// run's journal.
    pub fn attach(&self, scope: crate::RunScope) -> crate::RunScope {
        match &self.journal {
            Some(journal) if scope.journal().is_none() => scope.with_journal(journal.clone()),
            _ => scope,
        }
    }

    /// Marks the run whole: a later run under the same key starts afresh. A nested run leaves
    /// that to the enclosing run.
    pub async fn end(&self) -> Result<(), String> {
        match &self.journal {
            Some(journal) => {
                journal.ledger.record(&SpendRecord::ended()).await.map_err(|e| format!("the run's journal: {e}"))
            }
            None => Ok(()),
        }
    }
}

/// The key of a model request: a digest of its messages, tools and options, without the
/// prompt-cache key (which names the process's run tree).
pub fn request_key(request: &ChatRequest) -> String {
    let mut keyed = request.clone();
    keyed.options.prompt_cache_key = None;
    digest(&serde_json::to_vec(&keyed).unwrap_or_default())
}

/// The key of a tool call: a digest of its name and arguments (not its id).
pub fn tool_key(call: &ToolCall) -> String {
    let arguments = serde_json::to_vec(&call.arguments).unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(call.name.as_bytes());
    hasher.update([0]);
    hasher.update(&arguments);
    hex(&hasher.finalize())
}

fn digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, Usage};
    use crate::provider::StopReason;
    use crate::spend::MemorySpendLedger;
    use serde_json::json;

    fn answer(text: &str) -> ChatResponse {
        ChatResponse {
            message: Message::assistant(text),
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            cost_usd: None,
            model: "m".into(),
        }
    }

    #[test]
    fn a_request_is_keyed_by_its_content_not_its_cache_key() {
        let mut a = ChatRequest { messages: vec![Message::user("hi")], ..Default::default() };
        let b = a.clone();
        a.options.prompt_cache_key = Some("run-1".into());
        assert_eq!(request_key(&a), request_key(&b));
        let c = ChatRequest { messages: vec![Message::user("hi!")], ..Default::default() };
        assert_ne!(request_key(&b), request_key(&c));
    }

    #[test]
    fn a_tool_call_is_keyed_by_name_and_arguments_not_id() {
        let call = |id: &str, args| ToolCall { id: id.into(), name: "read".into(), arguments: args };
        assert_eq!(tool_key(&call("a", json!({"p": 1}))), tool_key(&call("b", json!({"p": 1}))));
        assert_ne!(tool_key(&call("a", json!({"p": 1}))), tool_key(&call("a", json!({"p": 2}))));
    }

    #[tokio::test]
    async fn recorded_answers_come_back_once_each_in_the_order_recorded() {
        let ledger = Arc::new(MemorySpendLedger::default());
        let first = RunJournal::new(ledger.clone(), &[]);
        first.record_answer("k", &answer("one")).await.unwrap();
        first.record_answer("k", &answer("two")).await.unwrap();
        assert_eq!(first.replay_answer("k"), None, "a new run answers nothing from its own records");
        let resumed = RunJournal::new(ledger.clone(), &ledger.records());
        assert_eq!(resumed.replay_answer("k").unwrap().message.content, "one");
        assert_eq!(resumed.replay_answer("k").unwrap().message.content, "two");
        assert_eq!(resumed.replay_answer("k"), None);
        assert_eq!(resumed.replayed(), Replayed { model_calls: 2, tool_calls: 0 });
    }

    #[tokio::test]
    async fn a_recorded_tool_result_comes_back_with_its_flags() {
        let ledger = Arc::new(MemorySpendLedger::default());
        let outcome = ToolOutcome {
            id: "c1".into(),
            name: "run_shell".into(),
            output: "permission denied: no".into(),
            is_error: true,
            denied: true,
            duration_ms: 3,
            stop: None,
        };
        RunJournal::new(ledger.clone(), &[]).record_tool("k", &outcome).await.unwrap();
        let resumed = RunJournal::new(ledger.clone(), &ledger.records());
        let back = resumed.replay_tool("k").unwrap();
        assert_eq!(back, RecordedTool { output: outcome.output, is_error: true, denied: true });
    }
}

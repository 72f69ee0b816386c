//! The transcript of a run: an ordered list of messages that enforces the pairing contract
//! (every assistant tool call gets exactly one tool result, in call order), and an
//! append-only JSONL file that mirrors it as the run goes.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::jsonl::{CutRecord, JsonlFile, JsonlReadError, JsonlRecords, StoredRecords, read_jsonl_records};
use crate::message::{Message, Role};

/// A violation of the transcript's pairing contract.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum TranscriptError {
    /// A tool result arrived while no tool call was waiting for one.
    #[error("tool result for `{0}` answers no pending tool call")]
    UnexpectedToolResult(String),
    /// A tool result arrived out of call order.
    #[error("tool result for `{got}` arrived while `{expected}` is the next call awaiting its result")]
    OutOfOrder {
        /// The call id that must be answered next.
        expected: String,
        /// The call id that was answered.
        got: String,
    },
    /// A non-tool message arrived while tool calls still wait for results.
    #[error("{count} tool call(s) still await results (next: `{next}`); a {role:?} message cannot come first")]
    ResultsPending {
        /// How many calls are unanswered.
        count: usize,
        /// The next unanswered call id.
        next: String,
        /// The role of the rejected message.
        role: Role,
    },
    /// A tool message without a `tool_call_id`.
    #[error("tool message without tool_call_id")]
    MissingToolCallId,
}

/// Ordered messages of one conversation, kept consistent with the pairing contract.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    messages: Vec<Message>,
    #[serde(skip)]
    pending: VecDeque<String>,
}

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a transcript from messages, checking the pairing contract on each.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Result<Self, TranscriptError> {
        let mut t = Self::new();
        for m in messages {
            t.push(m)?;
        }
        Ok(t)
    }

    /// Appends a message if it keeps the pairing contract.
    pub fn push(&mut self, message: Message) -> Result<(), TranscriptError> {
        match message.role {
            Role::Tool => {
                let id = message.tool_call_id.clone().ok_or(TranscriptError::MissingToolCallId)?;
                match self.pending.front() {
                    None => return Err(TranscriptError::UnexpectedToolResult(id)),
                    Some(expected) if *expected != id => {
                        return Err(TranscriptError::OutOfOrder { expected: expected.clone(), got: id });
                    }
                    Some(_) => {
                        self.pending.pop_front();
                    }
                }
            }
            role => {
                if let Some(next) = self.pending.front() {
                    return Err(TranscriptError::ResultsPending {
                        count: self.pending.len(),
                        next: next.clone(),
                        role,
                    });
                }
                if role == Role::Assistant {
                    self.pending.extend(message.tool_calls.iter().map(|c| c.id.clone()));
                }
            }
        }
        self.messages.push(message);
        Ok(())
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Consumes the transcript, returning its messages.
    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }

    /// Ids of tool calls that still await a result, in call order.
    pub fn pending_calls(&self) -> impl Iterator<Item = &str> {
        self.pending.iter().map(String::as_str)
    }

    /// Whether every tool call has its result.
    pub fn is_balanced(&self) -> bool {
        self.pending.is_empty()
    }

    /// Total size of the transcript in characters.
    pub fn size_chars(&self) -> usize {
        self.messages.iter().map(Message::size_chars).sum()
    }

    /// The text of the last assistant message, if any.
    pub fn last_assistant_text(&self) -> Option<&str> {
        self.messages.iter().rev().find(|m| m.role == Role::Assistant).map(|m| m.content.as_str())
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are no messages.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

/// An append-only transcript, one message per record, written as the run goes so a crash
/// loses at most the message in flight: a JSONL file (flushed after every message), or a slot
/// of a store ([`StoredRecords`]) with the JSONL file as its export for people and `trace`.
#[derive(Debug)]
pub struct TranscriptLog {
    file: Option<JsonlFile>,
    store: Option<Arc<dyn StoredRecords>>,
}

impl TranscriptLog {
    /// Opens (creating, appending) the log at `path`, creating parent directories.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self { file: Some(JsonlFile::append_to(path)?), store: None })
    }

    /// The log kept in `store` (what a resume reads, [`TranscriptLog::from_records`]), each
    /// record also appended to the JSONL file `export` when given.
    pub fn kept(store: Arc<dyn StoredRecords>, export: Option<&Path>) -> std::io::Result<Self> {
        let file = export.map(JsonlFile::append_to).transpose()?;
        Ok(Self { file, store: Some(store) })
    }

    /// Appends one message (committed to the store first, then a JSON line flushed to the file).
    pub fn append(&mut self, message: &Message) -> std::io::Result<()> {
        self.write(message)
    }

    /// Records that the conversation was compacted to `messages`: a record of its own (the full
    /// history before it stays), from which reading continues, so a process resuming the
    /// conversation does not summarise it again.
    pub fn append_compacted(&mut self, messages: &[Message]) -> std::io::Result<()> {
        self.write(&CompactedLine { compacted: messages.to_vec() })
    }

    fn write<T: Serialize>(&mut self, record: &T) -> std::io::Result<()> {
        if let Some(store) = &self.store {
            store.append(&serde_json::to_string(record).map_err(std::io::Error::other)?)?;
        }
        match &mut self.file {
            Some(file) => file.write(record),
            None => Ok(()),
        }
    }

    /// Where the log's JSONL file is written, if it has one.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(JsonlFile::path)
    }

    /// The conversation of a log kept in a store ([`TranscriptLog::kept`]), checking the pairing
    /// contract; it continues from the last compaction recorded. A record that is not a message
    /// is an error naming its number.
    pub fn from_records(records: &[String]) -> Result<Transcript, TranscriptReadError> {
        let mut lines = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            let line: LogLine = serde_json::from_str(record)
                .map_err(|e| JsonlReadError::Json { line: i + 1, message: e.to_string() })?;
            lines.push((i + 1, line));
        }
        replay(lines)
    }

    /// Reads a transcript log back, checking the pairing contract; the conversation is the one
    /// after the last compaction recorded in it. Every line must be whole (a reader that goes
    /// on from the log uses [`TranscriptLog::recover`]).
    pub fn read(path: impl AsRef<Path>) -> Result<Transcript, TranscriptReadError> {
        let (transcript, end) = read_lines(path.as_ref())?;
        match end.cut {
            Some(cut) => Err(TranscriptReadError::Read(JsonlReadError::Cut(cut))),
            None => Ok(transcript),
        }
    }

    /// Reads a transcript log back to go on from it (a resumed session): as
    /// [`TranscriptLog::read`], except that a last line cut short by a kill is skipped, cut off
    /// the file (so the next message is appended after whole lines) and returned for the
    /// caller to report. A damaged line before the last is still an error.
    pub fn recover(path: impl AsRef<Path>) -> Result<Recovered, TranscriptReadError> {
        let path = path.as_ref();
        let (transcript, end) = read_lines(path)?;
        end.repair(path)?;
        Ok(Recovered { transcript, cut: end.cut })
    }
}

/// A transcript read back to go on from ([`TranscriptLog::recover`]).
#[derive(Debug)]
pub struct Recovered {
    /// The conversation.
    pub transcript: Transcript,
    /// The last line, when a kill cut it short: skipped and cut off the file.
    pub cut: Option<CutRecord>,
}

/// The conversation of a log, and how the file ends (its cut last line, if any).
fn read_lines(path: &Path) -> Result<(Transcript, JsonlRecords<()>), TranscriptReadError> {
    let mut read = read_jsonl_records::<LogLine>(path)?;
    let t = replay(std::mem::take(&mut read.records))?;
    Ok((t, JsonlRecords { records: Vec::new(), cut: read.cut, unterminated: read.unterminated }))
}

/// The conversation of a log's records, numbered: each message in turn, a compaction starting
/// it afresh.
fn replay(records: Vec<(usize, LogLine)>) -> Result<Transcript, TranscriptReadError> {
    let mut t = Transcript::new();
    for (line, entry) in records {
        let pairing = |e| TranscriptReadError::Pairing { line, source: e };
        match entry {
            LogLine::Compacted(c) => t = Transcript::from_messages(c.compacted).map_err(pairing)?,
            LogLine::Message(m) => t.push(m).map_err(pairing)?,
        }
    }
    Ok(t)
}

/// The line recording a compaction: the whole conversation as it continues.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactedLine {
    compacted: Vec<Message>,
}

/// A line of a transcript log.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum LogLine {
    Compacted(CompactedLine),
    Message(Message),
}

/// Failure reading a transcript log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TranscriptReadError {
    /// The file could not be read, or a line is not a message.
    #[error(transparent)]
    Read(#[from] JsonlReadError),
    /// The file could not be repaired.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A line breaks the pairing contract.
    #[error("line {line}: {source}")]
    Pairing {
        /// 1-based line number.
        line: usize,
        /// The violation.
        source: TranscriptError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "t".into(), arguments: json!({}) }
    }

    #[test]
    fn accepts_results_in_call_order() {
        let mut t = Transcript::new();
        t.push(Message::user("go")).unwrap();
        t.push(Message::assistant_with_tools("", vec![call("a"), call("b")])).unwrap();
        assert!(!t.is_balanced());
        t.push(Message::tool_result("a", "1", false)).unwrap();
        t.push(Message::tool_result("b", "2", false)).unwrap();
        assert!(t.is_balanced());
    }

    #[test]
    fn rejects_result_out_of_order() {
        let mut t = Transcript::new();
        t.push(Message::assistant_with_tools("", vec![call("a"), call("b")])).unwrap();
        let err = t.push(Message::tool_result("b", "2", false)).unwrap_err();
        assert_eq!(err, TranscriptError::OutOfOrder { expected: "a".into(), got: "b".into() });
    }

    #[test]
    fn rejects_user_message_while_results_pending() {
        let mut t = Transcript::new();
        t.push(Message::assistant_with_tools("", vec![call("a")])).unwrap();
        assert!(matches!(t.push(Message::user("x")), Err(TranscriptError::ResultsPending { .. })));
    }

    #[test]
    fn rejects_duplicate_result() {
        let mut t = Transcript::new();
        t.push(Message::assistant_with_tools("", vec![call("a")])).unwrap();
        t.push(Message::tool_result("a", "1", false)).unwrap();
        assert_eq!(
            t.push(Message::tool_result("a", "1", false)).unwrap_err(),
            TranscriptError::UnexpectedToolResult("a".into())
        );
    }

    #[test]
    fn a_log_kept_in_a_store_reads_back_from_it_and_exports_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("t.jsonl");
        let store = Arc::new(crate::jsonl::MemoryRecords::default());
        let mut log = TranscriptLog::kept(store.clone(), Some(&export)).unwrap();
        log.append(&Message::user("one")).unwrap();
        log.append(&Message::assistant("two")).unwrap();
        log.append_compacted(&[Message::user("summary")]).unwrap();
        log.append(&Message::assistant("three")).unwrap();
        let records = store.records().unwrap();
        assert_eq!(records.len(), 4);
        let t = TranscriptLog::from_records(&records).unwrap();
        let contents: Vec<&str> = t.messages().iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["summary", "three"], "read from the last compaction");
        assert_eq!(TranscriptLog::read(&export).unwrap().len(), 2, "the export holds the same");
        let bad = TranscriptLog::from_records(&["{\"role\": 7}".to_string()]).unwrap_err().to_string();
        assert!(bad.contains("line 1"), "{bad}");
    }

    #[test]
    fn a_recorded_compaction_is_where_reading_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut log = TranscriptLog::open(&path).unwrap();
        for m in [Message::system("s"), Message::user("old"), Message::assistant("old answer"), Message::user("new")] {
            log.append(&m).unwrap();
        }
        log.append_compacted(&[Message::system("s"), Message::user("[summary] new")]).unwrap();
        log.append(&Message::assistant("new answer")).unwrap();
        let t = TranscriptLog::read(&path).unwrap().into_messages();
        let contents: Vec<&str> = t.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["s", "[summary] new", "new answer"]);
        let raw = std::fs::read_to_string(&path).unwrap();
        assert!(raw.contains("old answer"), "the full history stays on disk");
    }

    #[test]
    fn a_log_whose_last_line_a_kill_cut_is_recovered_with_the_cut_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut log = TranscriptLog::open(&path).unwrap();
        log.append(&Message::user("go")).unwrap();
        log.append(&Message::assistant("done")).unwrap();
        let whole = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{whole}{{\"role\":\"user\",\"content\":\"and th")).unwrap();
        assert!(TranscriptLog::read(&path).is_err(), "reading every line whole refuses it");

        let recovered = TranscriptLog::recover(&path).unwrap();
        assert_eq!(recovered.transcript.len(), 2);
        let cut = recovered.cut.unwrap();
        assert_eq!(cut.line, 3);
        assert!(cut.to_string().contains("and th"), "the warning says what was dropped: {cut}");
        TranscriptLog::open(&path).unwrap().append(&Message::user("next")).unwrap();
        assert_eq!(TranscriptLog::read(&path).unwrap().len(), 3, "the next message follows whole lines");
    }

    #[test]
    fn a_damaged_line_before_the_last_is_still_an_error_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let user = serde_json::to_string(&Message::user("go")).unwrap();
        std::fs::write(&path, format!("{user}\n{{\"role\":\"us\n{user}\n")).unwrap();
        let err = TranscriptLog::recover(&path).unwrap_err().to_string();
        assert!(err.starts_with("line 2:"), "{err}");
    }

    #[test]
    fn log_round_trips_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/t.jsonl");
        {
            let mut log = TranscriptLog::open(&path).unwrap();
            log.append(&Message::user("go")).unwrap();
            log.append(&Message::assistant_with_tools("", vec![call("a")])).unwrap();
        }
        let mut log = TranscriptLog::open(&path).unwrap();
        log.append(&Message::tool_result("a", "ok", false)).unwrap();
        let t = TranscriptLog::read(&path).unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.is_balanced());
    }
}

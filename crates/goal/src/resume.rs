//! Resuming a pursuit from its execution log. The log is written one flushed line per event,
//! so it survives a crash (even `kill -9`) intact up to the last event — at worst with a torn
//! final line, which is skipped, named ([`ResumeLog::cuts`]) and cut off. From it a resumed
//! pursuit takes the objective and the goal ids, the outcome of every goal that finished
//! (restored with its sub-tree, no model call), and the assessment and plans of goals that were
//! under way (reused, so finished sub-goals still fit their parent's plan). Goals that failed
//! or were cut short are pursued anew.
//!
//! What earlier attempts spent comes from the spend ledger beside the log
//! ([`recursive_core::spend`], `<log>.spend.jsonl`): every model call's hold, written before
//! the call, and its settlement — so calls in flight at a kill count too, at their hold.

use std::path::{Path, PathBuf};

use recursive_core::jsonl::{CutRecord, JsonlReadError, read_jsonl_records};
use recursive_core::spend::{SpendRecord, SpendTotal, ledger_path_beside, read_ledger};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::log::{GoalEvent, GoalEventKind};
use crate::outcome::{GoalOutcome, GoalResult};
use crate::structured::{ActionPlan, Assessment, Decomposition};

/// The data key of the pursuit's running token total, in every logged event.
pub(crate) const PURSUIT_TOKENS: &str = "pursuit_tokens";
/// The data key of the pursuit's running USD total, in every logged event.
pub(crate) const PURSUIT_COST: &str = "pursuit_cost_usd";

/// What an interrupted pursuit's log says.
#[derive(Debug, Clone)]
pub struct ResumeLog {
    path: PathBuf,
    events: Vec<GoalEvent>,
    /// Last records cut short by a kill (the log's, the ledger's), skipped.
    cuts: Vec<CutRecord>,
    /// What the spend ledger beside the log says earlier attempts spent.
    ledger: SpendTotal,
    /// The ledger's records: the journal the resumed pursuit answers from.
    records: Vec<SpendRecord>,
}

/// A log that cannot be resumed from.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// It could not be read or repaired.
    #[error("{path}: {source}")]
    Io {
        /// The log.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line other than the last is not a record of the log (or of its spend ledger).
    #[error("{path}:{line}: not a goal log record: {message}")]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// The line number (from 1).
        line: usize,
        /// The parse error.
        message: String,
    },
}

impl ResumeLog {
    /// Reads a log and the spend ledger beside it. A torn last line (a write cut short by a
    /// kill) is skipped and cut off the file, so the resumed pursuit appends after whole lines;
    /// any other unreadable line is an error with its number.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ResumeError> {
        let path = path.as_ref().to_path_buf();
        let ledger_path = ledger_path_beside(&path);
        let ledger = read_ledger(&ledger_path).map_err(|e| read_error(&ledger_path, e))?;
        let mut log = Self::open_with_journal(&path, ledger.records)?;
        log.cuts.extend(ledger.cut);
        Ok(log)
    }

    /// Reads a log whose spend journal is kept elsewhere (a store: see
    /// [`crate::GoalPursuer::with_journal`]) and holds `records`. A torn last line of the log is
    /// skipped and cut off, as [`ResumeLog::open`] does.
    pub fn open_with_journal(path: impl AsRef<Path>, records: Vec<SpendRecord>) -> Result<Self, ResumeError> {
        let path = path.as_ref().to_path_buf();
        let read = read_jsonl_records::<GoalEvent>(&path).map_err(|e| read_error(&path, e))?;
        read.repair(&path).map_err(|source| ResumeError::Io { path: path.clone(), source })?;
        let cuts = read.cut.into_iter().collect();
        let events = read.records.into_iter().map(|(_, e)| e).collect();
        Ok(Self { path, events, cuts, ledger: SpendTotal::of(&records), records })
    }

    /// A log kept in a store's slot ([`crate::ExecutionLog::kept`]) whose records are
    /// `records` (its export at `path`, for messages), its spend journal holding `journal`. A
    /// record that is not an event is an error naming its number.
    pub fn from_records(
        path: impl Into<PathBuf>,
        records: &[String],
        journal: Vec<SpendRecord>,
    ) -> Result<Self, ResumeError> {
        let path = path.into();
        let mut events = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            let event = serde_json::from_str(record).map_err(|e| ResumeError::Corrupt {
                path: path.clone(),
                line: i + 1,
                message: format!("(record {} of the log kept in the store) {e}", i + 1),
            })?;
            events.push(event);
        }
        Ok(Self { path, events, cuts: Vec::new(), ledger: SpendTotal::of(&journal), records: journal })
    }

    /// A log from events already in memory (e.g. [`crate::ExecutionLog::events`]).
    pub fn from_events(path: impl Into<PathBuf>, events: Vec<GoalEvent>) -> Self {
        Self { path: path.into(), events, cuts: Vec::new(), ledger: SpendTotal::default(), records: Vec::new() }
    }

    /// The spend ledger's records ([`recursive_core::journal`]): what the earlier attempts'
    /// finished calls answered.
    pub fn journal_records(&self) -> &[SpendRecord] {
        &self.records
    }

    /// Whether a torn last line was cut off (the log's or its ledger's).
    pub fn was_torn(&self) -> bool {
        !self.cuts.is_empty()
    }

    /// The torn last lines skipped (the log's, its ledger's): each names its file, its line
    /// and what was dropped, for a warning.
    pub fn cuts(&self) -> &[CutRecord] {
        &self.cuts
    }

    /// What the earlier attempts of the pursuit of root goal `root` spent, that a resumed one
    /// starts from: the spend ledger's total (settled calls, and calls in flight at a kill at
    /// their hold) — or the running totals the log's events carry where they say more (a log
    /// begun before the ledger was kept).
    pub fn earlier_spend(&self, root: &str) -> SpendTotal {
        let (tokens, cost) = self.spent(root);
        let mut total = self.ledger.clone();
        total.settled_usd += (cost - total.usd()).max(0.0);
        total.usage.input_tokens += tokens.saturating_sub(total.usage.total());
        total
    }

    /// Its events, in order.
    pub fn events(&self) -> &[GoalEvent] {
        &self.events
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The objective's goal id and text: the root goal the log started last (a log appended to
    /// by several pursuits resumes the latest).
    pub fn objective(&self) -> Option<(String, String)> {
        self.events
            .iter()
            .rev()
            .find(|e| e.event == GoalEventKind::Started && e.parent_goal_id.is_none())
            .map(|e| (e.goal_id.clone(), e.goal.clone()))
    }

    /// What the pursuit of root goal `root` had spent by its last logged event, over every
    /// attempt the log holds: tokens and USD (each event carries the pursuit's running totals;
    /// calls after the last event are not in them — [`ResumeLog::earlier_spend`] counts those).
    pub fn spent(&self, root: &str) -> (u64, f64) {
        let nested = format!("{root}.");
        self.events.iter().filter(|e| e.goal_id == root || e.goal_id.starts_with(&nested)).fold(
            (0, 0.0),
            |(tokens, cost), e| {
                let t = e.data.get(PURSUIT_TOKENS).and_then(Value::as_u64).unwrap_or(0);
                let c = e.data.get(PURSUIT_COST).and_then(Value::as_f64).unwrap_or(0.0);
                (tokens.max(t), cost.max(c))
            },
        )
    }

    /// How many goals the log shows finished with a result.
    pub fn finished_count(&self) -> usize {
        let mut ids: Vec<&str> = self
            .events
            .iter()
            .filter(|e| e.status.is_some_and(|s| s.has_result()))
            .map(|e| e.goal_id.as_str())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// The outcome of goal `id` if the log shows it finished with a result (its sub-tree
    /// restored too); `None` when it did not finish, ended without a result, or the log's
    /// goal of that id is another.
    pub(crate) fn finished(&self, id: &str, goal: &str) -> Option<GoalOutcome> {
        let last = self.last_status(id)?;
        (last.goal == goal && last.status.is_some_and(|s| s.has_result())).then(|| self.restore(id))?
    }

    /// The assessment of goal `id`, when the log recorded one.
    pub(crate) fn assessment(&self, id: &str, goal: &str) -> Option<Assessment> {
        self.last_data(id, goal, GoalEventKind::Assessed, |_| true)
    }

    /// The decomposition of goal `id` in round `round`, when the log recorded one.
    pub(crate) fn plan(&self, id: &str, goal: &str, round: u32) -> Option<Decomposition> {
        self.last_data(id, goal, GoalEventKind::Decomposed, |d| {
            d.get("round").and_then(Value::as_u64).unwrap_or(0) == u64::from(round)
        })
    }

    fn last_data<T: DeserializeOwned>(
        &self,
        id: &str,
        goal: &str,
        kind: GoalEventKind,
        wanted: impl Fn(&Value) -> bool,
    ) -> Option<T> {
        let e = self.events.iter().rev().find(|e| e.goal_id == id && e.event == kind && wanted(&e.data))?;
        if e.goal != goal {
            return None;
        }
        serde_json::from_value(e.data.clone()).ok()
    }

    fn last_status(&self, id: &str) -> Option<&GoalEvent> {
        self.events.iter().rev().find(|e| e.goal_id == id && e.status.is_some())
    }

    /// Goal `id` as the log last left it, with its sub-goals.
    fn restore(&self, id: &str) -> Option<GoalOutcome> {
        let last = self.last_status(id)?;
        let status = last.status?;
        let data = &last.data;
        let reason = data.get("reason").and_then(Value::as_str).map(str::to_string);
        let result: GoalResult = data
            .get("result")
            .and_then(|r| serde_json::from_value(r.clone()).ok())
            .unwrap_or_else(|| GoalResult { summary: reason.clone().unwrap_or_default(), ..Default::default() });
        let action: Option<ActionPlan> = data.get("action").and_then(|a| serde_json::from_value(a.clone()).ok());
        let started: DateTime<Utc> = self
            .events
            .iter()
            .find(|e| e.goal_id == id && e.event == GoalEventKind::Started)
            .map_or(last.timestamp, |e| e.timestamp);
        Some(GoalOutcome {
            goal_id: id.to_string(),
            goal: last.goal.clone(),
            depth: last.depth,
            status,
            reason: if status.is_success() { None } else { reason },
            action,
            result,
            children: self.children(id),
            started_at: started,
            duration_ms: (last.timestamp - started).num_milliseconds().max(0) as u64,
            usage: data.get("usage_total").and_then(|u| serde_json::from_value(u.clone()).ok()).unwrap_or_default(),
            cost_usd: data.get("cost_total_usd").and_then(Value::as_f64).unwrap_or(0.0),
            run_id: last.run_id.clone(),
            fault: None,
        })
    }

    fn children(&self, id: &str) -> Vec<GoalOutcome> {
        let mut ids: Vec<&str> = self
            .events
            .iter()
            .filter(|e| e.parent_goal_id.as_deref() == Some(id))
            .map(|e| e.goal_id.as_str())
            .collect();
        ids.sort_by_key(|c| c.rsplit('.').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(u64::MAX));
        ids.dedup();
        ids.into_iter().filter_map(|c| self.restore(c)).collect()
    }
}

/// A read failure of the log or its ledger, said with the file and the line.
fn read_error(path: &Path, e: JsonlReadError) -> ResumeError {
    match e {
        JsonlReadError::Io(source) => ResumeError::Io { path: path.to_path_buf(), source },
        JsonlReadError::Json { line, message } => ResumeError::Corrupt { path: path.to_path_buf(), line, message },
        other => ResumeError::Io { path: path.to_path_buf(), source: std::io::Error::other(other.to_string()) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::GoalStatus;
    use serde_json::json;

    fn event(id: &str, goal: &str, kind: GoalEventKind, status: Option<GoalStatus>, data: Value) -> String {
        let parent = id.rsplit_once('.').map(|(p, _)| p.to_string());
        let e = GoalEvent {
            timestamp: Utc::now(),
            event: kind,
            goal_id: id.into(),
            goal: goal.into(),
            depth: id.matches('.').count() as u32,
            parent_goal_id: parent,
            parent_goal: None,
            status,
            run_id: None,
            data,
        };
        format!("{}\n", serde_json::to_string(&e).unwrap())
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_finished_goals_are_restored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.jsonl");
        let done = json!({"result": {"summary": "read it", "key_findings": [], "confidence": null,
                                      "limitations": [], "evidence": []}});
        let whole = [
            event("1", "objective", GoalEventKind::Started, None, json!({})),
            event("1.1", "read a", GoalEventKind::Started, None, json!({})),
            event("1.1", "read a", GoalEventKind::Executed, Some(GoalStatus::Completed), done),
            event("1.2", "read b", GoalEventKind::Started, None, json!({})),
        ]
        .concat();
        std::fs::write(&path, format!("{whole}{{\"timestamp\": \"2026-")).unwrap();

        let log = ResumeLog::open(&path).unwrap();

        assert!(log.was_torn());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole, "the torn line is cut off the file");
        assert_eq!(log.objective(), Some(("1".into(), "objective".into())));
        let a = log.finished("1.1", "read a").unwrap();
        assert_eq!((a.status, a.result.summary.as_str()), (GoalStatus::Completed, "read it"));
        assert!(log.finished("1.1", "another goal").is_none(), "an id with another goal is not restored");
        assert!(log.finished("1.2", "read b").is_none(), "an unfinished goal is pursued again");
        assert_eq!(log.finished_count(), 1);
    }

    #[test]
    fn a_log_kept_in_a_store_resumes_from_its_records_and_exports_each_event() {
        use recursive_core::StoredRecords;
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("g.jsonl");
        let store = std::sync::Arc::new(recursive_core::MemoryRecords::default());
        let log = crate::ExecutionLog::kept(store.clone(), &export).unwrap();
        for line in [
            event("1", "objective", GoalEventKind::Started, None, json!({})),
            event("1.1", "read a", GoalEventKind::Started, None, json!({})),
        ] {
            log.record(&serde_json::from_str(&line).unwrap()).unwrap();
        }
        let records = store.records().unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(std::fs::read_to_string(&export).unwrap().lines().count(), 2, "exported as it goes");
        let resumed = ResumeLog::from_records(&export, &records, Vec::new()).unwrap();
        assert_eq!(resumed.objective(), Some(("1".into(), "objective".into())));
        let bad = ResumeLog::from_records(&export, &["{}".to_string()], Vec::new()).unwrap_err().to_string();
        assert!(bad.contains(":1:") && bad.contains("record 1 of the log kept in the store"), "{bad}");
    }

    #[tokio::test]
    async fn earlier_spend_is_the_ledgers_total_or_the_events_running_totals_where_they_say_more() {
        use recursive_core::spend::{JsonlSpendLedger, SpendLedger, SpendRecord};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.jsonl");
        let logged = json!({ PURSUIT_TOKENS: 100, PURSUIT_COST: 0.25 });
        std::fs::write(&path, event("1", "objective", GoalEventKind::Started, None, logged)).unwrap();
        let before_the_ledger = ResumeLog::open(&path).unwrap().earlier_spend("1");
        assert_eq!((before_the_ledger.usd(), before_the_ledger.usage.total()), (0.25, 100));

        let ledger = JsonlSpendLedger::open(dir.path().join("g.spend.jsonl")).unwrap();
        ledger.record(&SpendRecord::hold("a", 0.5)).await.unwrap();
        let with_a_call_in_flight = ResumeLog::open(&path).unwrap().earlier_spend("1");
        assert_eq!(with_a_call_in_flight.usd(), 0.5, "the hold of the call in flight counts");
    }

    #[test]
    fn a_corrupt_line_before_the_end_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.jsonl");
        let ok = event("1", "objective", GoalEventKind::Started, None, json!({}));
        std::fs::write(&path, format!("{ok}not json\n{ok}")).unwrap();
        let err = ResumeLog::open(&path).unwrap_err().to_string();
        assert!(err.contains(":2: not a goal log record"), "{err}");
    }
}

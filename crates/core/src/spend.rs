//! Spend written ahead: a [`SpendLedger`] is where a durable run records what its model calls
//! cost, so the spend survives a kill (and, for a journaled run, what its finished calls
//! returned: [`crate::journal`]). The guarded model call ([`crate::RunScope::call_model`])
//! writes a [`SpendRecord::Hold`] (the call's estimated cost) to every ledger of its budget
//! tree before the request goes out, and a [`SpendRecord::Settle`] (its real usage and cost)
//! after. A resumed run starts its budget from [`SpendTotal`]: what settled, plus the holds of
//! calls that never settled (in flight at a kill), counted at their hold — so a USD cap holds
//! across any number of kills.
//!
//! A durable host attaches the ledger to its node of the budget tree
//! ([`crate::Budget::child_with_ledger`], [`crate::RunScope::with_ledger`]); [`JsonlSpendLedger`]
//! keeps the records in a JSONL file, [`MemorySpendLedger`] in memory (tests).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::jsonl::{CutRecord, JsonlFile, JsonlReadError, read_jsonl_records};
use crate::message::Usage;

/// The format version every spend record carries.
pub const SPEND_FORMAT: u32 = 1;

/// One record of a spend ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "spend", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SpendRecord {
    /// Written before a model call's request is sent: the USD it may cost.
    Hold {
        /// The record's format version ([`SPEND_FORMAT`]).
        v: u32,
        /// The call's id (unique in the ledger).
        call: String,
        /// The estimated cost held against the USD caps (0 for a call priced as free).
        usd: f64,
    },
    /// Written after the call: what it really cost (0 for a call that failed or was cut off,
    /// as the budget counts it).
    Settle {
        /// The record's format version ([`SPEND_FORMAT`]).
        v: u32,
        /// The id of the call its hold named.
        call: String,
        /// The call's cost.
        usd: f64,
        /// The call's usage.
        #[serde(default)]
        usage: Usage,
    },
    /// Written when a run of a ledger that several runs share (a graph thread's, resumed after
    /// each pause) ended whole: what came before is that run's, so a later run's resume starts
    /// after it ([`SpendTotal::since_last_end`]).
    Ended {
        /// The record's format version ([`SPEND_FORMAT`]).
        v: u32,
    },
    /// Written after a model call of a journaled run answered ([`crate::journal`]): the answer,
    /// under the key of the request, so a resume that asks the same again reads it back.
    Answer {
        /// The record's format version ([`SPEND_FORMAT`]).
        v: u32,
        /// The request's key ([`crate::journal::request_key`]).
        key: String,
        /// The answer.
        response: Box<crate::provider::ChatResponse>,
    },
    /// Written after a tool call of a journaled run finished: its result, under the key of the
    /// call, so a resume that makes the same call again reads it back instead of running it.
    Tool {
        /// The record's format version ([`SPEND_FORMAT`]).
        v: u32,
        /// The call's key ([`crate::journal::tool_key`]).
        key: String,
        /// What the model was given.
        output: String,
        /// Whether the output is an error.
        #[serde(default)]
        is_error: bool,
        /// Whether the permission gate refused the call.
        #[serde(default)]
        denied: bool,
    },
}

impl SpendRecord {
    /// The end of a whole run.
    pub fn ended() -> Self {
        SpendRecord::Ended { v: SPEND_FORMAT }
    }

    /// The hold of call `call`, `usd` estimated.
    pub fn hold(call: &str, usd: f64) -> Self {
        SpendRecord::Hold { v: SPEND_FORMAT, call: call.to_string(), usd: finite(usd) }
    }

    /// The settlement of call `call`.
    pub fn settle(call: &str, usd: f64, usage: Usage) -> Self {
        SpendRecord::Settle { v: SPEND_FORMAT, call: call.to_string(), usd: finite(usd), usage }
    }
}

fn finite(usd: f64) -> f64 {
    if usd.is_finite() { usd.max(0.0) } else { 0.0 }
}

/// Where a durable run records its model calls' spend, ahead of each call and after it (and,
/// journaled, what they answered). A write that fails before a call keeps the call from being
/// made. A file ([`JsonlSpendLedger`]) or a store shared by several machines keeps it.
#[async_trait::async_trait]
pub trait SpendLedger: Send + Sync + std::fmt::Debug {
    /// Records one record durably (flushed, or committed, before it returns).
    async fn record(&self, record: &SpendRecord) -> std::io::Result<()>;
}

/// What a ledger's records add up to: the spend a resumed run starts from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpendTotal {
    /// USD of the calls that settled.
    pub settled_usd: f64,
    /// Usage of the calls that settled.
    pub usage: Usage,
    /// USD held by calls that never settled (in flight when the process ended).
    pub unsettled_usd: f64,
    /// How many calls never settled.
    pub unsettled_calls: usize,
    /// How many calls settled.
    pub settled_calls: usize,
}

impl SpendTotal {
    /// Adds up records in the order written: a settlement closes its call's hold; a hold never
    /// closed counts at its amount.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a SpendRecord>) -> Self {
        let mut open: HashMap<&str, f64> = HashMap::new();
        let mut total = SpendTotal::default();
        for record in records {
            match record {
                SpendRecord::Hold { call, usd, .. } => {
                    open.insert(call, *usd);
                }
                SpendRecord::Settle { call, usd, usage, .. } => {
                    open.remove(call.as_str());
                    total.settled_usd += usd;
                    total.usage.add(usage);
                    total.settled_calls += 1;
                }
                SpendRecord::Ended { .. } | SpendRecord::Answer { .. } | SpendRecord::Tool { .. } => {}
            }
        }
        total.unsettled_calls = open.len();
        total.unsettled_usd = open.values().sum();
        total
    }

    /// What the records after the last [`SpendRecord::Ended`] add up to: the spend of a run that
    /// did not end whole (killed), for its resume.
    pub fn since_last_end(records: &[SpendRecord]) -> Self {
        Self::of(after_last_end(records))
    }

    /// USD spent: settled plus unsettled holds.
    pub fn usd(&self) -> f64 {
        self.settled_usd + self.unsettled_usd
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.settled_calls == 0 && self.unsettled_calls == 0
    }
}

/// The records after the last [`SpendRecord::Ended`]: those of a run that did not end whole.
pub fn after_last_end(records: &[SpendRecord]) -> &[SpendRecord] {
    let start = records.iter().rposition(|r| matches!(r, SpendRecord::Ended { .. })).map_or(0, |i| i + 1);
    &records[start..]
}

/// A spend ledger in a JSONL file, one flushed line per record.
#[derive(Debug)]
pub struct JsonlSpendLedger {
    file: JsonlFile,
}

impl JsonlSpendLedger {
    /// Opens (creating, appending) the ledger at `path`.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self { file: JsonlFile::append_to(path)? })
    }

    /// Where the ledger is.
    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

#[async_trait::async_trait]
impl SpendLedger for JsonlSpendLedger {
    async fn record(&self, record: &SpendRecord) -> std::io::Result<()> {
        self.file.write(record)
    }
}

/// A spend ledger in stored records ([`crate::jsonl::StoredRecords`]: a local store's rows),
/// each record committed as the call that writes it waits — without giving way to the other
/// tasks of the run, as a file's write does not, so runs scripted in call order stay in it.
#[derive(Debug, Clone)]
pub struct RecordsLedger {
    records: std::sync::Arc<dyn crate::jsonl::StoredRecords>,
}

impl RecordsLedger {
    /// The ledger kept in `records`.
    pub fn new(records: std::sync::Arc<dyn crate::jsonl::StoredRecords>) -> Self {
        Self { records }
    }
}

#[async_trait::async_trait]
impl SpendLedger for RecordsLedger {
    async fn record(&self, record: &SpendRecord) -> std::io::Result<()> {
        self.records.append(&serde_json::to_string(record).map_err(std::io::Error::other)?)
    }
}

/// A spend ledger file read back for a resume.
#[derive(Debug, Clone, Default)]
pub struct LedgerRead {
    /// Its whole records, in order.
    pub records: Vec<SpendRecord>,
    /// What they add up to.
    pub total: SpendTotal,
    /// A last record a kill cut short: skipped (a hold cut short was never followed by its
    /// request), and cut off the file so appending goes on after whole records.
    pub cut: Option<CutRecord>,
}

/// Reads the ledger at `path` for a resume (a missing file holds nothing) and repairs its end
/// (see [`crate::jsonl::JsonlRecords::repair`]).
pub fn read_ledger(path: &Path) -> Result<LedgerRead, JsonlReadError> {
    if !path.exists() {
        return Ok(LedgerRead::default());
    }
    let read = read_jsonl_records::<SpendRecord>(path)?;
    read.repair(path)?;
    let records: Vec<SpendRecord> = read.records.into_iter().map(|(_, r)| r).collect();
    Ok(LedgerRead { total: SpendTotal::of(&records), records, cut: read.cut })
}

/// The spend ledger kept beside a durable run's JSONL record: `run.jsonl` → `run.spend.jsonl`.
pub fn ledger_path_beside(record: &Path) -> PathBuf {
    let stem = match record.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => record.with_extension(""),
        _ => record.to_path_buf(),
    };
    let mut name = stem.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".spend.jsonl");
    stem.with_file_name(name)
}

/// A spend ledger in memory.
#[derive(Debug, Default)]
pub struct MemorySpendLedger {
    records: Mutex<Vec<SpendRecord>>,
}

impl MemorySpendLedger {
    /// Every record so far, in order.
    pub fn records(&self) -> Vec<SpendRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// What the records add up to.
    pub fn total(&self) -> SpendTotal {
        SpendTotal::of(&self.records())
    }
}

#[async_trait::async_trait]
impl SpendLedger for MemorySpendLedger {
    async fn record(&self, record: &SpendRecord) -> std::io::Result<()> {
        self.records.lock().map_err(|_| std::io::Error::other("spend ledger lock poisoned"))?.push(record.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage { input_tokens: input, output_tokens: output, ..Default::default() }
    }

    #[test]
    fn a_resume_counts_only_what_the_run_after_the_last_whole_end_spent() {
        let records = [
            SpendRecord::hold("a", 0.05),
            SpendRecord::settle("a", 0.02, usage(10, 5)),
            SpendRecord::ended(),
            SpendRecord::hold("b", 0.04),
            SpendRecord::settle("b", 0.03, usage(1, 1)),
            SpendRecord::hold("c", 0.06),
        ];
        let total = SpendTotal::since_last_end(&records);
        assert!((total.usd() - (0.03 + 0.06)).abs() < 1e-12, "{total:?}");
        assert_eq!((total.settled_calls, total.unsettled_calls), (1, 1));
        assert!(SpendTotal::since_last_end(&records[..3]).is_empty(), "a run that ended whole leaves nothing");
        assert!((SpendTotal::of(&records).usd() - (0.02 + 0.03 + 0.06)).abs() < 1e-12, "of counts every run");
    }

    #[test]
    fn a_total_counts_settled_calls_at_their_cost_and_unsettled_ones_at_their_hold() {
        let records = [
            SpendRecord::hold("a", 0.05),
            SpendRecord::settle("a", 0.02, usage(10, 5)),
            SpendRecord::hold("b", 0.04),
            SpendRecord::hold("c", 0.03),
            SpendRecord::settle("c", 0.01, usage(1, 1)),
        ];
        let total = SpendTotal::of(&records);
        assert_eq!((total.settled_calls, total.unsettled_calls), (2, 1));
        assert!((total.usd() - (0.02 + 0.01 + 0.04)).abs() < 1e-12, "{total:?}");
        assert_eq!(total.usage.total(), 17);
    }

    #[tokio::test]
    async fn a_records_ledger_keeps_each_record_in_its_stored_records() {
        use crate::jsonl::StoredRecords;
        let records = std::sync::Arc::new(crate::jsonl::MemoryRecords::default());
        let ledger = RecordsLedger::new(records.clone());
        ledger.record(&SpendRecord::hold("c1", 0.5)).await.unwrap();
        ledger.record(&SpendRecord::settle("c1", 0.25, Usage::default())).await.unwrap();
        let read: Vec<SpendRecord> =
            records.records().unwrap().iter().map(|r| serde_json::from_str(r).unwrap()).collect();
        assert_eq!(read, [SpendRecord::hold("c1", 0.5), SpendRecord::settle("c1", 0.25, Usage::default())]);
    }

    #[tokio::test]
    async fn a_ledger_file_reads_back_across_reopens_with_a_cut_last_record_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.spend.jsonl");
        JsonlSpendLedger::open(&path).unwrap().record(&SpendRecord::hold("a", 0.5)).await.unwrap();
        JsonlSpendLedger::open(&path).unwrap().record(&SpendRecord::settle("a", 0.25, usage(3, 4))).await.unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(br#"{"spend":"hold","v":1,"call":"b","u"#);
        std::fs::write(&path, bytes).unwrap();
        let read = read_ledger(&path).unwrap();
        assert_eq!(read.cut.map(|c| c.line), Some(3));
        assert_eq!((read.total.settled_usd, read.total.unsettled_calls), (0.25, 0));
        JsonlSpendLedger::open(&path).unwrap().record(&SpendRecord::hold("c", 0.125)).await.unwrap();
        let again = read_ledger(&path).unwrap();
        assert!(again.cut.is_none(), "the cut record was cut off the file");
        assert_eq!(again.total.usd(), 0.375);
    }

    #[test]
    fn every_record_carries_its_format_version() {
        let line = serde_json::to_value(SpendRecord::hold("a", 0.1)).unwrap();
        assert_eq!((line["spend"].as_str(), line["v"].as_u64()), (Some("hold"), Some(u64::from(SPEND_FORMAT))));
    }

    #[test]
    fn the_ledger_beside_a_record_keeps_its_name() {
        assert_eq!(ledger_path_beside(Path::new("/g/survey.jsonl")), Path::new("/g/survey.spend.jsonl"));
        assert_eq!(ledger_path_beside(Path::new("log")), Path::new("log.spend.jsonl"));
    }
}

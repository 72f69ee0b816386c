//! A durable run's record in the workspace: `.recursive/runs/NAME.spend.jsonl`, its spend
//! ledger and journal ([`recursive_core::journal`]) — the one place a host makes a run durable
//! (the `rlm` command, graph threads, `run` and `chat` sessions). Opening it restores what the
//! run's killed processes spent and answers, from their records, every call they finished;
//! ending it marks the run whole, so the next run under the name starts afresh. A run nested
//! in a durable run is recorded in the enclosing run's journal, not in one of its own (one run
//! tree, one record: its spend is restored once).

use std::sync::Arc;

use recursive_core::RunScope;
use recursive_core::journal::RunJournal;
use recursive_core::spend::{
    JsonlSpendLedger, LedgerRead, SpendLedger, SpendRecord, SpendTotal, after_last_end, read_ledger,
};

use crate::Harness;

/// A run made durable ([`Harness::durable`]).
#[derive(Debug)]
pub struct Durable {
    /// The run's scope: journaled, with what its killed processes spent restored.
    pub scope: RunScope,
    /// What the killed processes of this run spent (nothing for a new run, or when nested).
    pub restored: SpendTotal,
    ledger: Option<Arc<JsonlSpendLedger>>,
    journal: Option<Arc<RunJournal>>,
}

impl Durable {
    /// Whether this run continues one that did not end whole (a process of it was killed).
    pub fn resumed(&self) -> bool {
        !self.restored.is_empty()
    }

    /// `scope` (a node made after this run was opened, e.g. a chat turn's) recording in this
    /// run's journal.
    pub fn attach(&self, scope: RunScope) -> RunScope {
        match &self.journal {
            Some(journal) if scope.journal().is_none() => scope.with_journal(journal.clone()),
            _ => scope,
        }
    }

    /// Marks the run whole: a later run under the same name starts afresh. A run nested in
    /// another leaves that to the enclosing run.
    pub fn end(&self) -> Result<(), String> {
        match &self.ledger {
            Some(ledger) => ledger.record(&SpendRecord::ended()).map_err(|e| format!("the run's journal: {e}")),
            None => Ok(()),
        }
    }
}

impl Harness {
    /// The run `name` made durable in `scope` (see the module docs).
    pub fn durable(&self, name: &str, scope: &RunScope) -> Result<Durable, String> {
        if scope.journal().is_some() {
            let restored = SpendTotal::default();
            return Ok(Durable { scope: scope.clone(), restored, ledger: None, journal: None });
        }
        let (ledger, read) = self.run_ledger(name)?;
        let earlier = after_last_end(&read.records);
        let journal = Arc::new(RunJournal::new(ledger.clone(), earlier));
        let scope = scope.clone().with_journal(journal.clone());
        let restored = SpendTotal::of(earlier);
        if !restored.is_empty() {
            scope.restore_spend(&restored);
        }
        Ok(Durable { scope, restored, ledger: Some(ledger), journal: Some(journal) })
    }

    /// The spend ledger of the run `name` and what it held before this process.
    fn run_ledger(&self, name: &str) -> Result<(Arc<JsonlSpendLedger>, LedgerRead), String> {
        let path = self.setup.workspace.state_path(&format!("runs/{name}.spend.jsonl")).map_err(|e| e.to_string())?;
        let shown = path.display();
        let read = read_ledger(&path).map_err(|e| format!("cannot read the spend ledger {shown}: {e}"))?;
        if let Some(cut) = &read.cut {
            eprintln!("warning: {cut}");
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let ledger = JsonlSpendLedger::open(&path).map_err(|e| format!("cannot open the spend ledger {shown}: {e}"))?;
        Ok((Arc::new(ledger), read))
    }
}

//! A durable run's journal in the workspace: `.recursive/runs/NAME.spend.jsonl`, its spend
//! ledger and journal ([`recursive_core::journal`]), for the runs that have no store (`run` and
//! `chat` sessions). Runs kept in a store (graph threads, RLM runs, served runs) keep their
//! journal there ([`recursive_store::journal`]). Either way the run opens as a
//! [`DurableRun`]: what its killed processes spent is restored and every call they finished
//! answers from their records.

use std::sync::Arc;

use recursive_core::RunScope;
use recursive_core::journal::DurableRun;
use recursive_core::spend::{JsonlSpendLedger, LedgerRead, read_ledger};

use crate::Harness;

impl Harness {
    /// The run `name` made durable in `scope`, journaled in the workspace (see the module docs).
    pub fn durable(&self, name: &str, scope: &RunScope) -> Result<DurableRun, String> {
        if scope.journal().is_some() {
            return Ok(DurableRun::nested(scope));
        }
        let (ledger, read) = self.run_ledger(name)?;
        Ok(DurableRun::open(scope, ledger, &read.records))
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

//! A durable run's spend ledger in the workspace: `.recursive/runs/NAME.spend.jsonl`, read back
//! for a resume (a record cut by a kill skipped with a warning) and opened to append — the one
//! place the `rlm` command and graph threads get theirs.

use std::sync::Arc;

use recursive_core::spend::{JsonlSpendLedger, LedgerRead, read_ledger};

use crate::Harness;

impl Harness {
    /// The spend ledger of the run `name` and what it held before this process.
    pub fn run_ledger(&self, name: &str) -> Result<(Arc<JsonlSpendLedger>, LedgerRead), String> {
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

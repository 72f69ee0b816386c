//! Where a run sits among the RLM levels ([`Node`]) and what every run of one invocation tree
//! shares ([`Tree`]): the budget node sub-calls are charged to and the sub-call limiter.

use std::sync::Arc;

use recursive_core::{FinishReason, RunScope};
use tokio::sync::Semaphore;

/// Shared by every run of one invocation tree.
pub(crate) struct Tree {
    /// Sub-model calls in flight at once.
    pub(crate) semaphore: Arc<Semaphore>,
}

/// Where a run sits among the RLM levels.
#[derive(Clone)]
pub(crate) struct Node {
    /// 0 for the top-level run.
    pub(crate) rlm_depth: u32,
    /// The scope sub-calls and child runs are made in: this run's node of the run tree, with
    /// the budget node they are charged to (the sub-call budget, or a child run's own node
    /// under it).
    pub(crate) sub_scope: RunScope,
    /// The run's first primary call was reserved by the `rlm_query` that started it.
    pub(crate) first_reserved: bool,
}

impl Node {
    /// Reserves `n` sub-calls, or says why not (nothing is spent then).
    pub(crate) fn reserve(&self, total: u32, n: u64) -> Result<(), String> {
        let budget = self.sub_scope.budget();
        budget.reserve_calls(n).map_err(|reason| match reason {
            FinishReason::CallBudgetExceeded => format!(
                "the sub-call budget is spent: {n} call(s) needed, {} of {} left",
                budget.calls_left().unwrap_or(0),
                total
            ),
            other => format!("the run must stop: {other}"),
        })
    }

    /// Model calls charged under this node.
    pub(crate) fn calls(&self) -> u64 {
        self.sub_scope.budget().calls_used()
    }

    pub(crate) fn calls_left(&self) -> Option<u64> {
        self.sub_scope.budget().calls_left()
    }
}

//! A person's REPL on an RLM's sandbox: the same interpreter, inputs, host functions (sub-model
//! calls, host tools, the run tree's runnables) and limits as an RLM run, fed cells by a person
//! instead of a model. Every cell is a step of the session's run: its code and observation are
//! `rlm_snippet` / `rlm_observation` events, and its model calls, tools and child runs land in
//! the run tree like an RLM's.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use monty::{ReplContinuationMode, detect_repl_continuation_mode};

use recursive_core::RunScope;
use tokio_util::sync::CancellationToken;

use crate::error::RlmError;
use crate::events::RlmEvent;
use crate::inputs::Inputs;
use crate::prompt::{snippet_observation, truncate_middle};
use crate::repl::Repl;
use crate::rlm::{Rlm, RunHost, stopped_by_tree};
use crate::sandbox::SnippetOutcome;

/// A live sandbox session (see the module docs).
pub struct RlmSession {
    repl: Box<dyn Repl>,
    host: Arc<RunHost>,
    scope: RunScope,
    observation_max_chars: usize,
}

impl std::fmt::Debug for RlmSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlmSession").field("run_id", &self.scope.ids().run_id).finish()
    }
}

impl Rlm {
    /// Starts a session over `inputs` in `scope`: its sub-calls are charged to a node of
    /// `max_llm_calls` under the scope's budget, as an RLM run's are.
    pub async fn session(&self, inputs: Inputs, scope: &RunScope) -> Result<RlmSession, RlmError> {
        let repl = self.start_repl(inputs).await?;
        let (tree, node) = self.top_node(scope);
        let schema = self.schema().clone();
        let host = Arc::new(RunHost::new(Arc::new(self.clone()), tree, scope, &node, schema));
        Ok(RlmSession { repl, host, scope: scope.clone(), observation_max_chars: self.config().observation_max_chars })
    }
}

impl RlmSession {
    /// Runs one cell: `interrupt` stops it (the session goes on); the scope's cancellation or
    /// deadline ends it. A `submit(...)` ends the cell with its payload in
    /// [`SnippetOutcome::finished`].
    pub async fn run_cell(&self, code: &str, interrupt: &CancellationToken) -> SnippetOutcome {
        let cell = self.host.step.fetch_add(1, Ordering::SeqCst) + 1;
        self.scope.emit(cell, RlmEvent::RlmSnippet { iteration: cell, block: 1, code: code.to_string() }.into_kind());
        let stop = self.scope.stop_token();
        let mut outcome = self.repl.run_cell(code, self.host.clone(), &stop, interrupt).await;
        stopped_by_tree(&mut outcome, &self.scope);
        let observation = truncate_middle(&snippet_observation(&outcome), self.observation_max_chars);
        self.scope.emit(
            cell,
            RlmEvent::RlmObservation {
                iteration: cell,
                block: 1,
                observation,
                error: outcome.error.as_ref().map(|e| e.kind),
                submitted: outcome.finished.is_some(),
                duration_ms: outcome.duration_ms,
                host_calls: outcome.host_calls,
            }
            .into_kind(),
        );
        outcome
    }

    /// Cells run so far.
    pub fn cells(&self) -> u32 {
        self.host.step.load(Ordering::SeqCst)
    }

    /// The session's run scope.
    pub fn scope(&self) -> &RunScope {
        &self.scope
    }
}

/// Whether a cell typed at a prompt goes on (as CPython's interactive prompt decides, by
/// Monty's parser): an open bracket, string or decorator continues; a cell whose first
/// statement opens a block (`for …:`, `def …:`) goes on until a blank line ends it.
pub fn needs_more_input(cell: &str) -> bool {
    let first = cell.lines().next().unwrap_or_default();
    let block = detect_repl_continuation_mode(first) == ReplContinuationMode::IncompleteBlock;
    match detect_repl_continuation_mode(cell) {
        ReplContinuationMode::IncompleteImplicit => true,
        ReplContinuationMode::IncompleteBlock => !cell.ends_with('\n'),
        ReplContinuationMode::Complete => block && !cell.ends_with('\n'),
    }
}

#[cfg(test)]
mod tests {
    use super::needs_more_input;

    #[test]
    fn a_plain_statement_is_complete() {
        assert!(!needs_more_input("x = 1"));
        assert!(!needs_more_input("d = {'a': 1}"));
        assert!(!needs_more_input("print('a:')"));
    }

    #[test]
    fn a_block_goes_on_until_an_empty_line() {
        assert!(needs_more_input("for i in range(3):"));
        assert!(needs_more_input("for i in range(3):\n    print(i)"));
        assert!(needs_more_input("for i in range(3):\n    a = i\n    print(a)"));
        assert!(!needs_more_input("for i in range(3):\n    print(i)\n"));
    }

    #[test]
    fn open_brackets_and_triple_quotes_go_on() {
        assert!(needs_more_input("xs = [1,\n 2,"));
        assert!(!needs_more_input("xs = [1,\n 2]"));
        assert!(needs_more_input("s = \'\'\'a\nb"));
        assert!(!needs_more_input("s = \'\'\'a\nb\'\'\'"));
    }

    #[test]
    fn colons_in_comments_and_strings_do_not_open_blocks() {
        assert!(!needs_more_input("x = 1  # note:"));
        assert!(!needs_more_input("s = 'if x:'"));
    }
}

//! A person's REPL on an RLM's sandbox: the same interpreter, inputs, host functions (sub-model
//! calls, host tools, the run tree's runnables) and limits as an RLM run, fed cells by a person
//! instead of a model. Every cell is a step of the session's run: its code and observation are
//! `rlm_snippet` / `rlm_observation` events, and its model calls, tools and child runs land in
//! the run tree like an RLM's.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use monty::{ReplContinuationMode, detect_repl_continuation_mode};
use ruff_python_ast::StringFlags;
use ruff_python_ast::token::TokenKind;
use ruff_python_parser::{Mode, ParseOptions, parse_unchecked};

use recursive_core::RunScope;
use tokio_util::sync::CancellationToken;

use crate::error::RlmError;
use crate::events::RlmEvent;
use crate::host::{RunHost, stopped_by_tree};
use crate::inputs::Inputs;
use crate::prompt::{snippet_observation, truncate_middle};
use crate::repl::Repl;
use crate::rlm::Rlm;
use crate::sandbox::{SnippetErrorKind, SnippetOutcome};

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
        if let Some(error) = outcome.error.as_mut()
            && error.kind == SnippetErrorKind::Syntax
            && let Some(named) = name_unclosed_bracket(code, &error.message)
        {
            error.message = named;
        }
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

/// A syntax error that Monty's parser reports where it gave up — the line after a bracket that
/// is never closed — said as CPython says it: the line of the bracket left open, and "'(' was
/// never closed". `None` when the error is another one (every bracket of `code` is closed, or
/// the open one is on the reported line).
fn name_unclosed_bracket(code: &str, message: &str) -> Option<String> {
    let (file, reported) = message.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("File \"")?;
        let (file, rest) = rest.split_once("\", line ")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some((file.to_string(), digits.parse::<usize>().ok()?))
    })?;
    let (bracket, line, column) = unclosed_brackets(code)?.pop()?;
    if line >= reported {
        return None;
    }
    let text = code.lines().nth(line - 1).unwrap_or_default();
    Some(format!(
        "Traceback (most recent call last):\n  File \"{file}\", line {line}\n    {text}\n    {}~\nSyntaxError: '{bracket}' was never closed",
        " ".repeat(column)
    ))
}

/// The brackets of `code` still open at its end, outermost first, with their line (from 1) and
/// column (in characters), read from ruff's tokens (so strings and comments do not count).
/// `None` when a bracket is closed by the wrong one or a one-line string is never closed (the
/// parser's message is the better one then).
fn unclosed_brackets(code: &str) -> Option<Vec<(char, usize, usize)>> {
    let parsed = parse_unchecked(code, ParseOptions::from(Mode::Module));
    let mut open = Vec::new();
    // The f-strings (and t-strings) being read, whether each is triple-quoted.
    let mut strings: Vec<bool> = Vec::new();
    for token in parsed.tokens().iter() {
        let (kind, range) = token.as_tuple();
        let flags = token.string_flags();
        match kind {
            TokenKind::FStringStart | TokenKind::TStringStart => {
                strings.push(flags.is_some_and(|f| f.is_triple_quoted()));
            }
            TokenKind::FStringEnd | TokenKind::TStringEnd => {
                strings.pop();
            }
            _ if !strings.is_empty() => {}
            TokenKind::String if flags.is_some_and(|f| f.is_unclosed() && !f.is_triple_quoted()) => return None,
            TokenKind::Lpar | TokenKind::Lsqb | TokenKind::Lbrace => {
                let at = usize::from(range.start());
                let before = code.get(..at).unwrap_or_default();
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().unwrap_or_default().chars().count();
                let bracket = match kind {
                    TokenKind::Lpar => '(',
                    TokenKind::Lsqb => '[',
                    _ => '{',
                };
                open.push((bracket, line, column));
            }
            TokenKind::Rpar | TokenKind::Rsqb | TokenKind::Rbrace => {
                let want = match kind {
                    TokenKind::Rpar => '(',
                    TokenKind::Rsqb => '[',
                    _ => '{',
                };
                match open.pop() {
                    Some((o, ..)) if o == want => {}
                    _ => return None,
                }
            }
            _ => {}
        }
    }
    // An f-string left open on its line: the parser says so itself.
    if strings.iter().any(|triple| !triple) {
        return None;
    }
    Some(open)
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
    use super::{name_unclosed_bracket, needs_more_input, unclosed_brackets};

    /// Monty's message for `print(x` on line 2 of a script, naming line 3 where it gave up.
    const MONTY_SAID: &str = "Traceback (most recent call last):\n  File \"<python-input-1>\", line 3\n    z = 3\n    \
                              ~\nSyntaxError: Expected `,`, found name";

    #[test]
    fn a_bracket_never_closed_is_named_on_its_own_line() {
        let named = name_unclosed_bracket("x = 1\nprint(x\nz = 3\n", MONTY_SAID).unwrap();
        assert!(named.contains("File \"<python-input-1>\", line 2\n    print(x\n         ~\n"), "{named}");
        assert!(named.ends_with("SyntaxError: '(' was never closed"), "{named}");
    }

    #[test]
    fn other_syntax_errors_keep_the_parsers_message() {
        // Every bracket is closed: the error is where the parser said.
        assert_eq!(name_unclosed_bracket("x = [1,\n 2 +* 3]\nz = 3\n", MONTY_SAID), None);
        // The open bracket is on the reported line itself.
        assert_eq!(name_unclosed_bracket("x = 1\ny = 2\nz = (3\n", MONTY_SAID), None);
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let code = "s = '('  # [\nt = \"\"\"\n{ \\\"x\"\"\"\nu = f(\"a)\", [\n1]\nv = {\n";
        assert_eq!(unclosed_brackets(code), Some(vec![('(', 4, 5), ('{', 6, 4)]));
        assert_eq!(unclosed_brackets("a = (1]"), None);
        assert_eq!(unclosed_brackets("s = 'open\nx = (1\n"), None);
        assert_eq!(unclosed_brackets("s = f'{x}\nx = (1\n"), None);
        assert_eq!(unclosed_brackets("x = [f'{ {1: 2}[1] }', (\n"), Some(vec![('[', 1, 4), ('(', 1, 23)]));
        assert_eq!(unclosed_brackets("x = (1,\n  \"\"\"open\n"), Some(vec![('(', 1, 4)]));
    }

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

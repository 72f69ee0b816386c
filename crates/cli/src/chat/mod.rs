//! The conversation of `recursive chat`, shared by its two faces: the terminal UI ([`tui`]) and
//! the plain line mode ([`plain`], when stdin or stdout is not a terminal). A [`Chat`] holds the
//! session, its history and the tools; it parses what a person types ([`Input`]), answers the
//! slash commands, and prepares and finishes turns — which run as tasks of their own so a turn
//! can be interrupted without ending the chat.

pub mod plain;
pub mod tui;

use std::time::Duration;

use recursive_core::{Agent, Message, Role, RunResult, RunScope, Usage};
use recursive_harness::Harness;
use tokio::task::JoinHandle;

use crate::sessions::Session;

/// How long the first turn waits for MCP servers to start; slower ones join later.
pub const MCP_START_GRACE: Duration = Duration::from_secs(3);

/// The slash commands, as `/help` lists them.
pub const HELP: &str = "\
/help            this list
/model [NAME]    list the known models, or switch to NAME
/cost            tokens and cost of this session
/compact         summarise the conversation so far to free context
/undo            take back the file edits (write_file, apply_patch) of the last turn
/rewind [N]      list this chat's prompts, or go back to before prompt N: the conversation
                 and the file edits since (Esc Esc at an empty box lists them too)
/diff            the file edits of this chat so far, as a unified diff per file
/session         this session's id and how to resume it
/rename TITLE    name this session (shown by `recursive sessions` and `chat --resume`)
/mode [NAME]     switch how much is asked: ask, accept-edits, plan, auto (Shift-Tab cycles them)
/approve         carry out the plan a plan-mode turn proposed (the mode goes back to ask)
/tree            the run tree pane: shown, every call, hidden (as Ctrl-T; terminal UI)
/exit            leave (the session is saved)
@path            in a message: attach that workspace file";

/// What a person typed.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// `/exit`, `/quit`.
    Exit,
    /// `/help`.
    Help,
    /// `/cost`.
    Cost,
    /// `/model` with or without a name.
    Model(Option<String>),
    /// `/session`.
    Session,
    /// `/compact`.
    Compact,
    /// `/undo`.
    Undo,
    /// `/tree`.
    Tree,
    /// `/rewind` with or without the number of a prompt.
    Rewind(Option<String>),
    /// `/diff`.
    Diff,
    /// `/rename` with the new title (empty: none given).
    Rename(String),
    /// `/mode` with or without a name.
    Mode(Option<String>),
    /// `/approve`.
    Approve,
    /// An unknown command.
    Unknown(String),
    /// A message for the model.
    Message(String),
}

/// Reads what a person typed; `None` for blank input. A message may span lines.
pub fn parse(text: &str) -> Option<Input> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    let command = match trimmed.strip_prefix('/') {
        Some(c) if !trimmed.contains('\n') => c,
        _ => return Some(Input::Message(text.trim_end().to_string())),
    };
    let (name, rest) = command.split_once(' ').unwrap_or((command, ""));
    let rest = rest.trim();
    Some(match name {
        "exit" | "quit" => Input::Exit,
        "help" | "?" => Input::Help,
        "cost" => Input::Cost,
        "session" => Input::Session,
        "compact" => Input::Compact,
        "undo" => Input::Undo,
        "tree" => Input::Tree,
        "rewind" => Input::Rewind((!rest.is_empty()).then(|| rest.to_string())),
        "diff" => Input::Diff,
        "rename" => Input::Rename(rest.to_string()),
        "mode" => Input::Mode((!rest.is_empty()).then(|| rest.to_string())),
        "approve" => Input::Approve,
        "model" => Input::Model((!rest.is_empty()).then(|| rest.to_string())),
        other => Input::Unknown(other.to_string()),
    })
}

/// `/diff` when no file was edited.
pub const NO_CHANGES: &str =
    "no file edits in this chat yet (write_file, apply_patch; changes made by shell commands are not tracked)";

/// Said when a plan-mode turn ends with its plan.
pub const PLAN_READY: &str = "plan ready: /approve carries it out (the mode goes back to ask); or say what to change";

/// What a mode means, in a line.
pub fn mode_help(mode: recursive_tools::Mode) -> &'static str {
    use recursive_tools::Mode;
    match mode {
        Mode::Ask => "the rules decide; what they ask about is asked",
        Mode::AcceptEdits => "file edits are approved without asking; commands still ask",
        Mode::Plan => "read-only: the model looks around and proposes a plan; /approve carries it out",
        Mode::Auto => "everything that would ask is approved (deny rules still hold)",
    }
}

/// The tools of a chat: the built-in ones and the runnables, and the configured MCP servers'
/// as they become ready.
struct ChatTools {
    tools: recursive_core::ToolRegistry,
    late: recursive_core::LateTools,
    /// Messages steered into the running turn, taken before its next model call.
    inbox: recursive_core::Inbox,
}

/// A chat: the harness, the session and its conversation, the tools and the root run scope
/// every turn runs under.
pub struct Chat {
    /// The harness the chat was built with.
    pub harness: Harness,
    tools: ChatTools,
    system: String,
    /// The model of the next turn.
    pub model: String,
    /// The session being continued.
    pub session: Session,
    /// The conversation so far (a resumed one without its old system prompt: the first turn
    /// puts this process's first).
    pub history: Vec<Message>,
    /// The root scope: its budget and totals span every turn.
    pub scope: RunScope,
    context_window: Option<usize>,
    /// A first message given on the command line, sent before anything is read.
    pub first: Option<String>,
    starting: Option<JoinHandle<recursive_tools::McpTools>>,
    started: Option<recursive_tools::McpTools>,
    /// The prompts of the conversation, oldest first, for `/rewind`: those of earlier
    /// processes (a resumed session), then this process's turns.
    marks: Vec<TurnMark>,
    /// The session's journal ([`Turn::run`] makes each turn a durable run of it).
    durable: std::sync::Arc<recursive_core::journal::DurableRun>,
    /// This process's hold on the session (its lease in the run store) while the chat lasts.
    _held: recursive_store::HeldRun,
}

/// Where a prompt began: the prompt, the conversation before it (the first `len` messages of
/// `history`) and, for a turn of this process, the edit journal's checkpoint of its file changes.
struct TurnMark {
    prompt: String,
    history: std::sync::Arc<Vec<Message>>,
    len: usize,
    checkpoint: Option<u64>,
}

/// The prompts a person typed in `history`, each with where it stands (for `/rewind`).
fn earlier_marks(history: &[Message]) -> Vec<TurnMark> {
    let shared = std::sync::Arc::new(history.to_vec());
    history
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::User && !m.content.starts_with("[The user "))
        .map(|(len, m)| TurnMark {
            prompt: m.content.split("\n\n[Attached file: ").next().unwrap_or_default().to_string(),
            history: shared.clone(),
            len,
            checkpoint: None,
        })
        .collect()
}

/// What `/rewind N` did.
pub struct Rewind {
    /// What was undone, for the person.
    pub summary: String,
    /// The prompt rewound to, to edit and send again.
    pub prompt: String,
}

/// A turn ready to run: its agent, the conversation it continues and the message.
pub struct Turn {
    agent: Agent,
    history: Vec<Message>,
    input: String,
    /// The session's journal: each turn a durable run of it (killed, its spend comes back with
    /// the session).
    durable: std::sync::Arc<recursive_core::journal::DurableRun>,
}

/// How a turn ended.
pub struct TurnEnd {
    /// What the turn produced (partial after a fault).
    pub result: RunResult,
    /// The fault that ended it, if one did.
    pub error: Option<String>,
}

impl Turn {
    /// Runs the turn under `scope`.
    pub async fn run(self, scope: RunScope) -> TurnEnd {
        let scope = self.durable.attach(scope);
        let mut end = match self.agent.continue_in(self.history, &self.input, &scope).await {
            Ok(result) => TurnEnd { result, error: None },
            Err(e) => TurnEnd { result: *e.partial, error: Some(format!("{:#}", anyhow::Error::new(e.error))) },
        };
        if let Err(e) = self.durable.end().await {
            end.error.get_or_insert(e);
        }
        end
    }
}

/// The parts a chat is built from.
pub struct ChatParts {
    /// The harness.
    pub harness: Harness,
    /// The session.
    pub session: Session,
    /// Its conversation so far.
    pub history: Vec<Message>,
    /// The root scope.
    pub scope: RunScope,
    /// `--system`.
    pub system: Option<String>,
    /// `--append-system`.
    pub append_system: Option<String>,
    /// `--context-window`.
    pub context_window: Option<usize>,
}

impl Chat {
    /// A chat over `parts`; the configured MCP servers start in the background.
    pub async fn new(parts: ChatParts) -> anyhow::Result<Self> {
        let ChatParts { harness, mut session, history, scope, system, append_system, context_window } = parts;
        let marks = earlier_marks(&history);
        let tools = harness.tools();
        let system = harness.setup.system_prompt(&tools, system.as_deref(), append_system.as_deref());
        let (late, starting) = harness.spawn_mcp(&scope)?.into_parts();
        // The status line counts the whole session, also what earlier processes spent.
        let m = &session.meta;
        let usage = Usage { input_tokens: m.input_tokens, output_tokens: m.output_tokens, ..Default::default() };
        if m.cost_usd > 0.0 || usage.total() > 0 {
            scope.restore_spend(&recursive_core::SpendTotal { settled_usd: m.cost_usd, usage, ..Default::default() });
        }
        // The session's journal, opened once: a turn a kill cut off before this process left its
        // spend there, restored now into the session's totals.
        let held = session.open_journal(&scope).await?;
        let durable = held.journal();
        if durable.resumed() {
            session.add_spend(&durable.restored.usage, durable.restored.usd())?;
            // Counted in the session now: a later process must not restore it again.
            durable.end().await.map_err(anyhow::Error::msg)?;
        }
        let model = harness.provider.model();
        Ok(Chat {
            harness,
            tools: ChatTools { tools, late, inbox: recursive_core::Inbox::new() },
            system,
            model,
            session,
            history,
            scope,
            context_window,
            first: None,
            starting: Some(starting),
            started: None,
            marks,
            durable,
            _held: held,
        })
    }

    /// The agent of the next turn.
    fn agent(&self) -> anyhow::Result<Agent> {
        let mut config = self.harness.agent_config("chat", Some(self.system.clone()));
        config.options.model = self.model.clone();
        config.transcript_path = Some(self.session.meta.transcript.clone());
        config.transcript_store = Some(self.session.transcript_store());
        config.plan_mode = self.mode() == recursive_tools::Mode::Plan;
        config.compaction = crate::commands::compaction(self.context_window, &self.model)?;
        Ok(self
            .harness
            .agent_from(self.tools.tools.clone(), config)
            .with_late_tools(self.tools.late.clone())
            .with_inbox(self.tools.inbox.clone()))
    }

    /// Waits (at most [`MCP_START_GRACE`]) for the MCP servers still starting, so quick ones
    /// are there for the first turn.
    async fn await_servers(&mut self) {
        let Some(starting) = self.starting.as_mut() else { return };
        if let Ok(done) = tokio::time::timeout(MCP_START_GRACE, starting).await {
            self.started = done.ok();
            self.starting = None;
        }
    }

    /// Prepares a turn for `text`: `@path` mentions attached, a checkpoint begun for `/undo`.
    /// Returns the turn and notes for the person (files attached or not).
    pub async fn prepare(&mut self, text: &str) -> anyhow::Result<(Turn, Vec<String>)> {
        self.await_servers().await;
        let (input, notes) = attach_mentions(&self.harness.setup.workspace, text);
        if self.session.meta.title.is_empty() {
            self.session.retitle(text)?;
        }
        let checkpoint = self.harness.setup.workspace.journal().begin();
        self.marks.push(TurnMark {
            prompt: text.to_string(),
            len: self.history.len(),
            history: std::sync::Arc::new(self.history.clone()),
            checkpoint: Some(checkpoint),
        });
        let history = std::mem::take(&mut self.history);
        let turn = Turn { agent: self.agent()?, history, input, durable: self.durable.clone() };
        Ok((turn, notes))
    }

    /// Steers the running turn: `text` (its `@path` mentions attached) joins the conversation
    /// before the turn's next model call. Returns notes for the person.
    pub fn steer(&self, text: &str) -> Vec<String> {
        let (input, notes) = attach_mentions(&self.harness.setup.workspace, text);
        self.tools.inbox.push(input);
        notes
    }

    /// Empties the steering inbox after a turn ended: how many messages it never took.
    pub fn unsteered(&self) -> usize {
        self.tools.inbox.take().len()
    }

    /// Takes a finished turn into the conversation and the session; `interrupted` carries the
    /// text streamed before the person interrupted it. Returns a warning to show, if any.
    pub fn finish(&mut self, end: &TurnEnd, before: (Usage, f64), interrupted: Option<&str>) -> Option<String> {
        let mut turn = end.result.clone();
        let mut warning = None;
        if let Some(partial) = interrupted {
            let closing = close_interrupted(&mut turn.messages, partial);
            if let Err(e) = self.session.append(&closing) {
                warning = Some(format!("the session could not be updated: {e:#}"));
            }
        }
        // The system prompt stays at the head: later turns do not log it again.
        self.history = turn.messages.clone();
        turn.usage = usage_since(self.scope.usage(), before.0);
        turn.cost_usd = (self.scope.cost_usd() - before.1).max(0.0);
        if let Err(e) = self.session.record(&self.model, &turn) {
            warning = Some(format!("the session could not be updated: {e:#}"));
        }
        warning
    }

    /// The totals a turn is measured from.
    pub fn totals(&self) -> (Usage, f64) {
        (self.scope.usage(), self.scope.cost_usd())
    }

    /// `/cost`.
    pub fn cost_line(&self) -> String {
        let m = &self.session.meta;
        format!("{} turn(s), {} tokens in, {} out, ${:.4}", m.turns, m.input_tokens, m.output_tokens, m.cost_usd)
    }

    /// The approval mode in force.
    pub fn mode(&self) -> recursive_tools::Mode {
        self.harness.setup.mode.get()
    }

    /// `/mode [NAME]`, or the key that cycles the modes (no name): the mode now in force.
    pub fn switch_mode(&mut self, name: Option<&str>) -> String {
        let switch = &self.harness.setup.mode;
        match name.map(recursive_tools::Mode::parse) {
            None => drop(switch.cycle()),
            Some(Ok(mode)) => switch.set(mode),
            Some(Err(e)) => return e,
        }
        format!("mode: {} — {}", switch.get(), mode_help(switch.get()))
    }

    /// `/approve`: a pending plan is carried out — the mode leaves plan (back to ask) and the
    /// model is told to go ahead. The message to send, or why there is none.
    pub fn approve_plan(&mut self) -> Result<String, String> {
        if self.mode() != recursive_tools::Mode::Plan {
            return Err("no plan is pending (the mode is not plan)".into());
        }
        self.harness.setup.mode.set(recursive_tools::Mode::Ask);
        Ok(crate::commands::PLAN_APPROVED.to_string())
    }

    /// `/rename TITLE`.
    pub fn rename(&mut self, title: &str) -> String {
        if title.trim().is_empty() {
            return format!("/rename needs a title; this session is \"{}\"", self.session.meta.title);
        }
        match self.session.retitle(title) {
            Ok(()) => format!("session {} is now \"{}\"", self.session.meta.id, self.session.meta.title),
            Err(e) => format!("the session could not be renamed: {e:#}"),
        }
    }

    /// `/session`.
    pub fn session_line(&self) -> String {
        format!("session {} — continue it with `recursive chat --resume {0}`", self.session.meta.id)
    }

    /// `/model` without a name: the models this program knows, the current one marked.
    pub fn models_text(&self) -> String {
        let mut text = format!("model: {} (switch with /model NAME; any name the provider serves works)\n", self.model);
        text.push_str("known models:");
        for name in recursive_llm::models::known_models() {
            let mark = if name == self.model { " ← current" } else { "" };
            text.push_str(&format!("\n  {name}{mark}"));
        }
        text
    }

    /// `/compact`: the conversation summarised now, the result saved in the session.
    pub async fn compact(&mut self) -> String {
        let agent = match self.agent() {
            Ok(a) => a,
            Err(e) => return format!("error: {e:#}"),
        };
        let before = self.history.len();
        match agent.compact_now(std::mem::take(&mut self.history), &self.scope).await {
            Ok(compacted) => {
                let mut text = format!("compacted: {before} → {} message(s)", compacted.len());
                if let Err(e) = self.session.save_compacted(&compacted) {
                    text.push_str(&format!("\nwarning: the compaction could not be saved in the session: {e:#}"));
                }
                self.history = compacted;
                text
            }
            Err(e) => format!("error: could not compact: {e}"),
        }
    }

    /// `/undo`: the file edits of the last turn that made any, taken back.
    pub fn undo(&mut self) -> String {
        let ws = &self.harness.setup.workspace;
        let Some(undone) = ws.journal().undo() else {
            return "nothing to undo: no turn of this chat changed files with write_file or apply_patch".into();
        };
        let mut lines = Vec::new();
        for p in &undone.restored {
            lines.push(format!("restored {}", ws.display_relative(p)));
        }
        for p in &undone.removed {
            lines.push(format!("removed {} (the turn created it)", ws.display_relative(p)));
        }
        for (p, why) in &undone.failed {
            lines.push(format!("could not restore {}: {why}", ws.display_relative(p)));
        }
        lines.push("changes made by shell commands are not undone".into());
        // The model is told at the start of the next turn.
        self.history.push(Message::user(
            "[The user undid the file changes of your last turn: ".to_string() + &lines.join("; ") + "]",
        ));
        self.history.push(Message::assistant("Understood; those file changes were taken back."));
        if let Err(e) = self.session.append(&self.history[self.history.len() - 2..]) {
            lines.push(format!("warning: the session could not be updated: {e:#}"));
        }
        lines.join("\n")
    }

    /// `/rewind` without a number: this chat's prompts, numbered.
    pub fn rewind_list(&self) -> String {
        if self.marks.is_empty() {
            return "nothing to rewind to: no prompt was sent in this chat yet".into();
        }
        let mut text = String::from("prompts of this chat (/rewind N goes back to before prompt N, files too):");
        let earlier = self.earlier_prompts();
        if earlier > 0 {
            text = format!(
                "prompts of this session (/rewind N goes back to before prompt N; the file edits of this run of the chat \
                 are taken back, those of its first {earlier}, sent before it was resumed, are not):"
            );
        }
        for (i, mark) in self.marks.iter().enumerate() {
            text.push_str(&format!("\n  {}. {}", i + 1, recursive_core::text::one_line(mark.prompt.trim(), 80)));
        }
        text
    }

    /// `/rewind N`: the conversation as it was before prompt `n` (1-based) and the file edits
    /// made since taken back; the session continues from there.
    pub fn rewind(&mut self, n: &str) -> Result<Rewind, String> {
        let count = self.marks.len();
        let index = match n.trim().parse::<usize>() {
            Ok(i) if (1..=count).contains(&i) => i - 1,
            _ if count == 0 => return Err("nothing to rewind to: no prompt was sent in this chat yet".into()),
            _ => return Err(format!("/rewind takes a prompt's number, 1 to {count}; /rewind lists them")),
        };
        let ws = &self.harness.setup.workspace;
        let mut lines = Vec::new();
        let marks = self.marks.split_off(index);
        // A prompt of an earlier process: this process's edits all go (from its first turn's
        // checkpoint on), the earlier process's stay.
        let checkpoint = marks.iter().find_map(|m| m.checkpoint);
        if marks.first().is_some_and(|m| m.checkpoint.is_none()) {
            lines.push("file edits made before this chat was resumed are not undone".to_string());
        }
        let Some(mark) = marks.into_iter().next() else { return Err("nothing to rewind to".into()) };
        match checkpoint.and_then(|c| ws.journal().rewind(c)) {
            None => lines.push("no file edits to take back".to_string()),
            Some(rewound) => {
                let undone = &rewound.undone;
                lines.extend(undone.restored.iter().map(|p| format!("restored {}", ws.display_relative(p))));
                lines.extend(
                    undone.removed.iter().map(|p| format!("removed {} (created since)", ws.display_relative(p))),
                );
                lines.extend(
                    undone.failed.iter().map(|(p, why)| format!("could not restore {}: {why}", ws.display_relative(p))),
                );
                if !rewound.complete {
                    lines.push("some older edits were no longer kept and stay as they are".into());
                }
            }
        }
        lines.push("changes made by shell commands are not undone".into());
        let dropped = self.history.len().saturating_sub(mark.len);
        self.history = mark.history.get(..mark.len).unwrap_or_default().to_vec();
        if let Err(e) = self.session.save_compacted(&self.history) {
            lines.push(format!("warning: the session could not be updated: {e:#}"));
        }
        let summary = format!(
            "rewound to before prompt {} ({} later message(s) dropped):\n{}",
            index + 1,
            dropped,
            lines.join("\n")
        );
        Ok(Rewind { summary, prompt: mark.prompt })
    }

    /// How many of the prompts `/rewind` lists were sent before this process resumed the session.
    pub fn earlier_prompts(&self) -> usize {
        self.marks.iter().filter(|m| m.checkpoint.is_none()).count()
    }

    /// `/diff`: the file edits of this chat so far, a unified diff per file (empty: none).
    pub fn diff(&self) -> String {
        let ws = &self.harness.setup.workspace;
        let mut out = String::new();
        for (path, before) in ws.journal().changes() {
            let name = ws.display_relative(&path);
            out.push_str(&file_diff(&name, &before, &path));
        }
        out
    }

    /// Estimated tokens of the next request (conversation, system prompt, tool specs) and the
    /// model's window when known.
    pub fn context_use(&self) -> (usize, Option<usize>) {
        let unsent_system = if self.history.iter().any(|m| m.role == Role::System) { 0 } else { self.system.len() / 4 };
        let used = recursive_core::compact::estimate_tokens(&self.history)
            + unsent_system
            + recursive_core::compact::estimate_spec_tokens(&self.tools.tools.specs());
        let window =
            self.context_window.or_else(|| recursive_llm::models::context_window(&self.model).map(|w| w as usize));
        (used, window)
    }

    /// Ends the chat: MCP servers shut down (those still starting are abandoned).
    pub async fn close(mut self) {
        if let Some(starting) = self.starting.take() {
            if starting.is_finished() {
                self.started = starting.await.ok();
            } else {
                starting.abort();
            }
        }
        if let Some(mcp) = self.started.take() {
            mcp.shutdown().await;
        }
    }
}

/// Most bytes of a file compared by `/diff`.
const MAX_DIFF_BYTES: u64 = 2 * 1024 * 1024;

/// The unified diff of the file at `path` (shown as `name`) from `before` to now.
fn file_diff(name: &str, before: &recursive_tools::journal::Saved, path: &std::path::Path) -> String {
    use recursive_tools::journal::Saved;
    let now = match std::fs::metadata(path) {
        Err(_) => None,
        Ok(m) if !m.is_file() || m.len() > MAX_DIFF_BYTES => {
            return format!("*** {name}: changed (not a regular file, or too large to compare)\n");
        }
        Ok(_) => match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) => return format!("*** {name}: changed (it cannot be read: {e})\n"),
        },
    };
    let old = match before {
        Saved::Bytes(bytes) => Some(bytes.as_slice()),
        Saved::Absent => None,
        Saved::NotKept(why) => return format!("*** {name}: changed (its earlier content was not kept: {why})\n"),
    };
    if old == now.as_deref() {
        return String::new();
    }
    let (Ok(old_text), Ok(new_text)) =
        (std::str::from_utf8(old.unwrap_or_default()), std::str::from_utf8(now.as_deref().unwrap_or_default()))
    else {
        return format!("*** {name}: changed (binary)\n");
    };
    let header = match (old, &now) {
        (None, _) => format!("*** created {name}\n"),
        (_, None) => format!("*** deleted {name}\n"),
        _ => format!("*** changed {name}\n"),
    };
    let diff = similar::TextDiff::from_lines(old_text, new_text);
    header + &diff.unified_diff().context_radius(3).header(&format!("a/{name}"), &format!("b/{name}")).to_string()
}

/// What a turn added to the chat's usage.
fn usage_since(after: Usage, before: Usage) -> Usage {
    Usage {
        input_tokens: after.input_tokens.saturating_sub(before.input_tokens),
        output_tokens: after.output_tokens.saturating_sub(before.output_tokens),
        cache_read_tokens: after.cache_read_tokens.saturating_sub(before.cache_read_tokens),
        cache_write_tokens: after.cache_write_tokens.saturating_sub(before.cache_write_tokens),
    }
}

/// The note closing an answer the person interrupted.
pub const INTERRUPTED_NOTE: &str = "[interrupted by the user]";

/// Closes a conversation whose turn was interrupted so the next request is well formed: calls
/// still awaiting results get one saying so, and an answer cut short (or never begun) ends with
/// what was streamed and a note. Returns the messages added.
fn close_interrupted(messages: &mut Vec<Message>, partial: &str) -> Vec<Message> {
    let mut added = Vec::new();
    if let Ok(t) = recursive_core::Transcript::from_messages(messages.clone()) {
        for id in t.pending_calls() {
            added.push(Message::tool_result(id, "interrupted by the user before this call finished", true));
        }
    }
    if added.is_empty() && messages.last().is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_empty()) {
        return added;
    }
    let text = if partial.trim().is_empty() {
        INTERRUPTED_NOTE.to_string()
    } else {
        format!("{}\n\n{INTERRUPTED_NOTE}", partial.trim_end())
    };
    added.push(Message::assistant(text));
    messages.extend(added.iter().cloned());
    added
}

/// Most bytes of one attached file.
const MAX_ATTACHED_BYTES: u64 = 256 * 1024;

/// `@path` words of `text` that name workspace files, attached after the message; returns the
/// message and a note per mention (attached, or why not).
pub fn attach_mentions(ws: &recursive_tools::Workspace, text: &str) -> (String, Vec<String>) {
    let mut message = text.to_string();
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    for word in text.split_whitespace() {
        let Some(path) = word.strip_prefix('@') else { continue };
        let path = path.trim_end_matches([',', '.', ';', ':', ')', '!', '?', '"', '\'']);
        if path.is_empty() || seen.contains(&path) {
            continue;
        }
        seen.push(path);
        match read_attachment(ws, path) {
            Ok(content) => {
                message.push_str(&format!("\n\n[Attached file: {path}]\n```\n{}\n```", content.trim_end()));
                notes.push(format!("attached {path} ({} bytes)", content.len()));
            }
            Err(why) => notes.push(format!("could not attach @{path}: {why}")),
        }
    }
    (message, notes)
}

/// A workspace file's text, when it is a regular UTF-8 file of a sensible size.
fn read_attachment(ws: &recursive_tools::Workspace, path: &str) -> Result<String, String> {
    let real = ws.resolve(path).map_err(|e| e.to_string())?;
    let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_ATTACHED_BYTES {
        return Err(format!("larger than {MAX_ATTACHED_BYTES} bytes; ask the model to read it instead"));
    }
    let bytes = std::fs::read(&real).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// The sink that hands a chat's events to whoever draws them.
pub struct ChannelSink(pub tokio::sync::mpsc::UnboundedSender<recursive_core::AgentEvent>);

impl recursive_core::EventSink for ChannelSink {
    fn emit(&self, event: &recursive_core::AgentEvent) {
        let _ = self.0.send(event.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_text_becomes_messages_and_commands() {
        assert!(parse("  ").is_none());
        assert_eq!(parse("hello"), Some(Input::Message("hello".into())));
        assert_eq!(parse("/exit"), Some(Input::Exit));
        assert_eq!(parse("/model gpt-4o"), Some(Input::Model(Some("gpt-4o".into()))));
        assert_eq!(parse("/model"), Some(Input::Model(None)));
        assert_eq!(parse("/undo"), Some(Input::Undo));
        assert_eq!(parse("/what"), Some(Input::Unknown("what".into())));
        assert_eq!(parse("/rewind"), Some(Input::Rewind(None)));
        assert_eq!(parse("/rewind 2"), Some(Input::Rewind(Some("2".into()))));
        assert_eq!(parse("/diff"), Some(Input::Diff));
        assert_eq!(
            parse("/etc/passwd is a path\nsecond line"),
            Some(Input::Message("/etc/passwd is a path\nsecond line".into()))
        );
    }

    #[test]
    fn mentions_attach_workspace_files_and_say_why_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.md"), "remember the milk\n").unwrap();
        let ws = recursive_tools::Workspace::new(dir.path()).unwrap();
        let (message, notes) = attach_mentions(&ws, "summarise @notes.md, and @missing.txt");
        assert!(message.starts_with("summarise @notes.md, and @missing.txt"));
        assert!(message.contains("[Attached file: notes.md]\n```\nremember the milk\n```"), "{message}");
        assert_eq!(notes.len(), 2);
        assert!(notes[1].starts_with("could not attach @missing.txt"), "{notes:?}");
        let (_, notes) = attach_mentions(&ws, "see @../../etc/passwd");
        assert!(notes[0].starts_with("could not attach"), "{notes:?}");
    }

    #[test]
    fn a_file_diff_shows_the_change_from_its_first_content() {
        use recursive_tools::journal::Saved;
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        std::fs::write(&a, "one\nTWO\n").unwrap();
        let diff = file_diff("a.txt", &Saved::Bytes(b"one\ntwo\n".to_vec()), &a);
        assert!(diff.starts_with("*** changed a.txt\n--- a/a.txt\n+++ b/a.txt\n"), "{diff}");
        assert!(diff.contains("-two\n+TWO\n"), "{diff}");
        assert!(file_diff("a.txt", &Saved::Bytes(b"one\nTWO\n".to_vec()), &a).is_empty());
        assert!(file_diff("a.txt", &Saved::Absent, &a).starts_with("*** created a.txt"));
        assert!(
            file_diff("b.txt", &Saved::Bytes(b"x\n".to_vec()), &dir.path().join("b.txt")).starts_with("*** deleted")
        );
    }

    #[test]
    fn an_interrupted_turn_is_closed_so_the_next_request_is_well_formed() {
        let call =
            recursive_core::ToolCall { id: "c1".into(), name: "run_shell".into(), arguments: serde_json::json!({}) };
        let mut m = vec![Message::user("go"), Message::assistant_with_tools("", vec![call])];
        let added = close_interrupted(&mut m, "");
        assert_eq!(added.len(), 2);
        assert!(recursive_core::Transcript::from_messages(m.clone()).unwrap().is_balanced());
        assert_eq!(m.last().unwrap().content, INTERRUPTED_NOTE);
        let mut m = vec![Message::user("tell me a story")];
        close_interrupted(&mut m, "Once upon");
        assert_eq!(m.last().unwrap().content, format!("Once upon\n\n{INTERRUPTED_NOTE}"));
    }
}

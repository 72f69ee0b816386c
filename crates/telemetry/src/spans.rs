//! The run tree's events as spans: one span per run node (agent, sub-agent, RLM, goal, graph),
//! per RLM iteration, goal and graph node, per model call (a GenAI client span: operation,
//! provider, request and response model, token usage, finish reasons) and per tool call (with
//! its permission decision). Ids are derived from the run ids, so the same events give the same
//! tree live and after the fact, and a child finds its parent without shared state.
//!
//! Core's events are drawn here; every other crate's events say themselves what they do to the
//! spans ([`recursive_core::ExtensionEvent::span_ops`]), so this module knows no engine.
//!
//! The model is fed events in order ([`SpanModel::push`]) and hands back each span once it has
//! ended; [`SpanModel::finish`] ends what is still open (a killed run) at the last event's time.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use recursive_core::event::{SpanAttr, SpanOn, SpanOp};
use recursive_core::{AgentEvent, Decision, EventKind, FinishReason, RunnableKind};

/// A span's attribute value (core's, so every crate can describe its events' spans).
pub type Attr = recursive_core::event::SpanValue;

/// Client (a call out: model) or internal (everything else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Work inside the program.
    Internal,
    /// A call to another service.
    Client,
}

/// A timestamped note on a span (code run, a goal's decision, a completion with content on).
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// What it is.
    pub name: String,
    /// When.
    pub at: SystemTime,
    /// Its attributes.
    pub attrs: Vec<(String, Attr)>,
}

/// One ended span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The trace (one per root run).
    pub trace_id: u128,
    /// This span.
    pub span_id: u64,
    /// Its parent, if any.
    pub parent: Option<u64>,
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Start.
    pub start: SystemTime,
    /// End.
    pub end: SystemTime,
    /// Attributes.
    pub attrs: Vec<(String, Attr)>,
    /// Notes in time order.
    pub notes: Vec<Note>,
    /// `Some(message)` when it failed or was cut short.
    pub error: Option<String>,
}

/// What the model keeps beyond structure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Prompts, completions, inputs, goals' objectives, tool outputs and code (off by default:
    /// they may hold secrets). Without it a span carries structure, names, counts and usage only.
    pub content: bool,
}

/// Events in, ended spans out (see the module docs).
#[derive(Debug, Default)]
pub struct SpanModel {
    options: Options,
    open: HashMap<String, Span>,
    /// Open keys in order of opening, to end them deterministically.
    order: Vec<String>,
    /// A child run's runnable kind and name, from its parent's `sub_agent_started`.
    children: HashMap<String, (RunnableKind, String)>,
    /// The open step of each run (an RLM iteration: [`SpanOp::Step`]).
    iteration: HashMap<String, String>,
    /// Permission decisions by tool call id.
    decisions: HashMap<String, Decision>,
    /// Runs whose span has ended, most recent last (later events of theirs open nothing new);
    /// at most [`ENDED_KEPT`], so a long-lived sink (`serve`) stays bounded.
    ended: std::collections::VecDeque<String>,
    last: Option<SystemTime>,
}

/// Ended runs remembered (their late events are dropped rather than opening a span again).
const ENDED_KEPT: usize = 256;

/// At most this many characters of one content attribute.
const CONTENT_CHARS: usize = 4000;

impl SpanModel {
    /// A model keeping what `options` say.
    pub fn new(options: Options) -> Self {
        Self { options, ..Default::default() }
    }

    /// Takes one event; returns the spans it ended.
    pub fn push(&mut self, event: &AgentEvent) -> Vec<Span> {
        let at = SystemTime::from(event.timestamp);
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
        let run = event.ids.run_id.clone();
        let mut ended = Vec::new();
        if !self.open.contains_key(&run_key(&run)) && !self.ended.contains(&run) {
            self.open_run(event, at);
        }
        match &event.kind {
            EventKind::RunStarted { goal } if self.options.content => {
                self.set(&run_key(&run), "recursive.input", Attr::Str(clip(goal)));
            }
            EventKind::SubAgentStarted { agent, kind, child_run_id, .. } => {
                self.children.insert(child_run_id.clone(), (*kind, agent.clone()));
            }
            EventKind::Usage { usage, cost_usd, model, call: Some(call) } => {
                let start = at.checked_sub(Duration::from_millis(call.duration_ms)).unwrap_or(at);
                let mut attrs = vec![
                    attr("gen_ai.operation.name", "chat"),
                    attr("gen_ai.provider.name", &call.provider),
                    attr("gen_ai.system", &call.provider),
                    attr("gen_ai.request.model", &call.request_model),
                    attr("gen_ai.response.model", model),
                    int("gen_ai.usage.input_tokens", usage.input_tokens),
                    int("gen_ai.usage.output_tokens", usage.output_tokens),
                    ("gen_ai.response.finish_reasons".into(), Attr::Strs(vec![call.stop_reason.clone()])),
                ];
                if let Some(cost) = cost_usd {
                    attrs.push(("recursive.cost_usd".into(), Attr::Float(*cost)));
                }
                let shown = if call.request_model.is_empty() { model } else { &call.request_model };
                let key = format!("chat:{run}:{}", event.step);
                let parent = self.innermost(&run);
                ended.push(self.whole(&key, &run, parent, format!("chat {shown}"), Kind::Client, start, at, attrs));
            }
            EventKind::AssistantText { text } if self.options.content => {
                let parent = self.innermost(&run);
                self.note(&parent, "gen_ai.choice", at, vec![attr("gen_ai.completion", &clip(text))]);
            }
            EventKind::Permission { id, decision, .. } => {
                self.decisions.insert(id.clone(), *decision);
            }
            EventKind::ToolResult { id, name, is_error, duration_ms, output } => {
                let start = at.checked_sub(Duration::from_millis(*duration_ms)).unwrap_or(at);
                let mut attrs = vec![
                    attr("gen_ai.operation.name", "execute_tool"),
                    attr("gen_ai.tool.name", name),
                    attr("gen_ai.tool.call.id", id),
                ];
                if let Some(d) = self.decisions.remove(id) {
                    attrs.push(attr("recursive.permission", if d == Decision::Allow { "allow" } else { "deny" }));
                }
                let parent = self.innermost(&run);
                let mut span = self.whole(
                    &format!("tool:{run}:{id}"),
                    &run,
                    parent,
                    format!("execute_tool {name}"),
                    Kind::Internal,
                    start,
                    at,
                    attrs,
                );
                if *is_error {
                    span.error = Some(if self.options.content { clip(output) } else { "the tool failed".into() });
                }
                ended.push(span);
            }
            EventKind::RunFinished { finish_reason, error, usage, cost_usd } => {
                ended.extend(self.end_iteration(&run, at));
                let key = run_key(&run);
                self.set(&key, "recursive.finish_reason", Attr::Str(finish_reason.to_string()));
                self.set(&key, "gen_ai.usage.input_tokens", Attr::Int(to_i64(usage.input_tokens)));
                self.set(&key, "gen_ai.usage.output_tokens", Attr::Int(to_i64(usage.output_tokens)));
                self.set(&key, "recursive.cost_usd", Attr::Float(*cost_usd));
                self.children.remove(&run);
                if self.ended.len() >= ENDED_KEPT {
                    self.ended.pop_front();
                }
                self.ended.push_back(run.clone());
                if !finish_reason.is_success() || error.is_some() {
                    let why = match (finish_reason, error) {
                        (_, Some(e)) => format!("{finish_reason}: {e}"),
                        (FinishReason::Cancelled, None) => "cancelled".to_string(),
                        (other, None) => other.to_string(),
                    };
                    self.fail(&key, why);
                }
                ended.extend(self.end(&key, at));
            }
            EventKind::Extension(ext) => ended.extend(self.extension(event, ext, at)),
            _ => {}
        }
        ended
    }

    /// Ends every span still open at the last event's time (marked unfinished).
    pub fn finish(&mut self) -> Vec<Span> {
        let at = self.last.unwrap_or_else(SystemTime::now);
        let keys: Vec<String> = self.order.iter().rev().cloned().collect();
        let mut ended = Vec::new();
        for key in keys {
            self.set(&key, "recursive.unfinished", Attr::Bool(true));
            ended.extend(self.end(&key, at));
        }
        ended
    }

    /// An extension event's spans, as its own crate describes them ([`SpanOp`]).
    fn extension(&mut self, event: &AgentEvent, ext: &recursive_core::Extension, at: SystemTime) -> Vec<Span> {
        let run = event.ids.run_id.clone();
        let mut ended = Vec::new();
        for op in ext.span_ops() {
            match op {
                SpanOp::Claim(kind) => self.claim(&run, kind),
                SpanOp::Open { key, name, parent, attrs } => {
                    let key = ext_key(&run, &key);
                    if !self.open.contains_key(&key) {
                        let parent = match parent.map(|p| ext_key(&run, &p)) {
                            Some(p) if self.open.contains_key(&p) => p,
                            _ => run_key(&run),
                        };
                        let attrs = self.kept(attrs);
                        self.start(&key, &run, &parent, name, at, attrs);
                    }
                }
                SpanOp::Step { key, name, attrs } => {
                    ended.extend(self.end_iteration(&run, at));
                    let key = ext_key(&run, &key);
                    let attrs = self.kept(attrs);
                    self.start(&key, &run, &run_key(&run), name, at, attrs);
                    self.iteration.insert(run.clone(), key);
                }
                SpanOp::EndStep => ended.extend(self.end_iteration(&run, at)),
                SpanOp::Note { on, name, attrs } => {
                    let key = self.target(&run, on);
                    let attrs = self.kept(attrs);
                    self.note(&key, &name, at, attrs);
                }
                SpanOp::Set { on, attrs } => {
                    let key = self.target(&run, on);
                    for (name, value) in self.kept(attrs) {
                        self.set(&key, &name, value);
                    }
                }
                SpanOp::End { key, error } => {
                    let key = ext_key(&run, &key);
                    if let Some(why) = error {
                        self.fail(&key, clip(&why));
                    }
                    ended.extend(self.end(&key, at));
                }
            }
        }
        ended
    }

    /// The key of the span `on` names in `run`.
    fn target(&self, run: &str, on: SpanOn) -> String {
        match on {
            SpanOn::Run => run_key(run),
            SpanOn::Current => self.innermost(run),
            SpanOn::Key(key) => ext_key(run, &key),
        }
    }

    /// The attributes exported under the options: content only when asked for, texts clipped.
    fn kept(&self, attrs: Vec<SpanAttr>) -> Vec<(String, Attr)> {
        attrs
            .into_iter()
            .filter(|a| self.options.content || !a.content)
            .map(|a| {
                let value = match a.value {
                    Attr::Str(text) => Attr::Str(clip(&text)),
                    other => other,
                };
                (a.key, value)
            })
            .collect()
    }

    fn open_run(&mut self, event: &AgentEvent, at: SystemTime) {
        let run = &event.ids.run_id;
        let parent = event.ids.parent_run_id.as_deref().map(run_key);
        // A runnable's run (started by its parent, or a command's root) invokes an agent in
        // GenAI terms; any other node of the tree (a graph node's own scope) is just a run.
        let runnable = match self.children.get(run).cloned() {
            Some(known) => Some(known),
            None if parent.is_none() => {
                let name = base_name(&event.ids.name);
                Some((root_kind(&name), name))
            }
            None => None,
        };
        let mut attrs = vec![attr("recursive.run_id", run), int("recursive.depth", u64::from(event.ids.depth))];
        let name = match &runnable {
            Some((kind, name)) => {
                attrs.push(attr("gen_ai.operation.name", "invoke_agent"));
                attrs.push(attr("gen_ai.agent.name", name));
                attrs.push(attr("recursive.kind", kind.as_str()));
                format!("invoke_agent {name}")
            }
            None => format!("run {}", base_name(&event.ids.name)),
        };
        let span = Span {
            trace_id: trace_id(&event.ids.root_run_id),
            span_id: span_id(&run_key(run)),
            parent: parent.as_deref().map(span_id),
            name,
            kind: Kind::Internal,
            start: at,
            end: at,
            attrs,
            notes: Vec::new(),
            error: None,
        };
        self.insert(run_key(run), span);
    }

    /// Makes a run whose kind was not known (its parent started no runnable for it) an
    /// invocation of the kind its own events show.
    fn claim(&mut self, run: &str, kind: RunnableKind) {
        let Some(span) = self.open.get_mut(&run_key(run)) else { return };
        if span.attrs.iter().any(|(k, _)| k == "recursive.kind") {
            return;
        }
        let name = span.name.strip_prefix("run ").unwrap_or(&span.name).to_string();
        span.name = format!("invoke_agent {name}");
        span.attrs.push(attr("gen_ai.operation.name", "invoke_agent"));
        span.attrs.push(attr("gen_ai.agent.name", &name));
        span.attrs.push(attr("recursive.kind", kind.as_str()));
    }

    fn start(&mut self, key: &str, run: &str, parent: &str, name: String, at: SystemTime, attrs: Vec<(String, Attr)>) {
        let span = self.whole(key, run, parent.to_string(), name, Kind::Internal, at, at, attrs);
        self.insert(key.to_string(), span);
    }

    /// A span of `run`'s trace under `parent` (its end is set when it ends).
    #[allow(clippy::too_many_arguments)]
    fn whole(
        &self,
        key: &str,
        run: &str,
        parent: String,
        name: String,
        kind: Kind,
        start: SystemTime,
        end: SystemTime,
        attrs: Vec<(String, Attr)>,
    ) -> Span {
        Span {
            trace_id: self.open.get(&run_key(run)).map(|s| s.trace_id).unwrap_or_default(),
            span_id: span_id(key),
            parent: Some(span_id(&parent)),
            name,
            kind,
            start,
            end,
            attrs,
            notes: Vec::new(),
            error: None,
        }
    }

    fn insert(&mut self, key: String, span: Span) {
        if self.open.insert(key.clone(), span).is_none() {
            self.order.push(key);
        }
    }

    /// The span new work of `run` belongs under: its open step, else the run.
    fn innermost(&self, run: &str) -> String {
        self.iteration.get(run).cloned().unwrap_or_else(|| run_key(run))
    }

    fn end_iteration(&mut self, run: &str, at: SystemTime) -> Vec<Span> {
        match self.iteration.remove(run) {
            Some(key) => self.end(&key, at),
            None => Vec::new(),
        }
    }

    fn end(&mut self, key: &str, at: SystemTime) -> Vec<Span> {
        self.order.retain(|k| k != key);
        match self.open.remove(key) {
            Some(mut span) => {
                span.end = at.max(span.start);
                vec![span]
            }
            None => Vec::new(),
        }
    }

    fn set(&mut self, key: &str, name: &str, value: Attr) {
        if let Some(span) = self.open.get_mut(key) {
            span.attrs.retain(|(k, _)| k != name);
            span.attrs.push((name.to_string(), value));
        }
    }

    fn fail(&mut self, key: &str, why: String) {
        if let Some(span) = self.open.get_mut(key) {
            span.error = Some(why);
        }
    }

    fn note(&mut self, key: &str, name: &str, at: SystemTime, attrs: Vec<(String, Attr)>) {
        if let Some(span) = self.open.get_mut(key) {
            span.notes.push(Note { name: name.to_string(), at, attrs });
        }
    }
}

fn run_key(run: &str) -> String {
    format!("run:{run}")
}

/// The key of an extension event's span `key` in `run`.
fn ext_key(run: &str, key: &str) -> String {
    format!("ext:{run}:{key}")
}

/// A run's name without its depth suffix (`reader-d1` → `reader`).
fn base_name(name: &str) -> String {
    match name.rsplit_once("-d") {
        Some((base, depth)) if !base.is_empty() && depth.chars().all(|c| c.is_ascii_digit()) => base.to_string(),
        _ => name.to_string(),
    }
}

/// The kind of a root run, from the command that started it.
fn root_kind(name: &str) -> RunnableKind {
    match name {
        "rlm" | "repl" => RunnableKind::Rlm,
        "goal" => RunnableKind::Goal,
        "graph" | "graph-new" => RunnableKind::Graph,
        _ => RunnableKind::Agent,
    }
}

fn hash(text: &str, salt: u8) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    salt.hash(&mut h);
    text.hash(&mut h);
    h.finish().max(1)
}

/// The trace of a root run.
fn trace_id(root_run_id: &str) -> u128 {
    (u128::from(hash(root_run_id, 1)) << 64) | u128::from(hash(root_run_id, 2))
}

/// The span of a key.
fn span_id(key: &str) -> u64 {
    hash(key, 3)
}

fn attr(name: &str, value: &str) -> (String, Attr) {
    (name.to_string(), Attr::Str(value.to_string()))
}

fn int(name: &str, value: u64) -> (String, Attr) {
    (name.to_string(), Attr::Int(to_i64(value)))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn clip(text: &str) -> String {
    recursive_core::text::clip_chars(text, CONTENT_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{Extension, ExtensionEvent, RunIds};
    use serde::{Deserialize, Serialize};

    const OBJECTIVE: &str = "wire 4471 dollars to account 99";

    /// An engine's event as telemetry sees it: only through its span operations.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Task {
        #[serde(rename = "task_started")]
        Started { id: String, parent: Option<String>, objective: String },
        #[serde(rename = "task_ended")]
        Ended { id: String, ok: bool },
        #[serde(rename = "task_step")]
        Step { n: u64 },
    }

    impl ExtensionEvent for Task {
        fn to_json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or_default()
        }
        fn render(&self) -> Option<String> {
            None
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn span_ops(&self) -> Vec<SpanOp> {
            match self {
                Task::Started { id, parent, objective } => vec![
                    SpanOp::Claim(RunnableKind::Goal),
                    SpanOp::Open {
                        key: id.clone(),
                        name: format!("task {id}"),
                        parent: parent.clone(),
                        attrs: vec![
                            SpanAttr::new("task.id", id.as_str()),
                            SpanAttr::content("task.objective", objective.as_str()),
                        ],
                    },
                ],
                Task::Ended { id, ok } => {
                    vec![SpanOp::End { key: id.clone(), error: (!ok).then(|| "failed".to_string()) }]
                }
                Task::Step { n } => vec![SpanOp::Step {
                    key: format!("step:{n}"),
                    name: format!("step {n}"),
                    attrs: vec![SpanAttr::new("task.step", *n)],
                }],
            }
        }
    }

    fn event(kind: EventKind) -> AgentEvent {
        // A child whose parent did not say what it runs: its events say it.
        let parent_run_id = Some("r0".into());
        let ids = RunIds { run_id: "r1".into(), parent_run_id, root_run_id: "r0".into(), depth: 1, name: "run".into() };
        AgentEvent { timestamp: chrono::Utc::now(), ids, step: 0, kind }
    }

    fn task(t: Task) -> AgentEvent {
        event(EventKind::Extension(Extension::new(t)))
    }

    fn started(id: &str, parent: Option<&str>) -> AgentEvent {
        task(Task::Started { id: id.into(), parent: parent.map(Into::into), objective: OBJECTIVE.into() })
    }

    fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name}: {spans:#?}"))
    }

    /// Every span of a task run, under `options`.
    fn task_spans(options: Options) -> Vec<Span> {
        let mut model = SpanModel::new(options);
        let mut spans = model.push(&event(EventKind::RunStarted { goal: OBJECTIVE.into() }));
        spans.extend(model.push(&started("1", None)));
        spans.extend(model.push(&started("1.1", Some("1"))));
        spans.extend(model.push(&task(Task::Ended { id: "1.1".into(), ok: false })));
        spans.extend(model.push(&task(Task::Ended { id: "1".into(), ok: true })));
        spans.extend(model.finish());
        spans
    }

    #[test]
    fn an_engines_spans_are_drawn_as_its_events_describe_them() {
        let spans = task_spans(Options { content: false });
        let (run, outer, inner) =
            (named(&spans, "invoke_agent run"), named(&spans, "task 1"), named(&spans, "task 1.1"));
        assert!(run.attrs.contains(&attr("recursive.kind", "goal")), "the run claimed as a goal: {run:?}");
        assert_eq!(outer.parent, Some(run.span_id));
        assert_eq!(inner.parent, Some(outer.span_id), "a task under its parent task");
        assert_eq!(inner.error.as_deref(), Some("failed"));
        assert!(outer.error.is_none() && outer.attrs.contains(&attr("task.id", "1")));
    }

    #[test]
    fn an_engines_content_attributes_are_exported_only_with_content_on() {
        assert!(!format!("{:?}", task_spans(Options { content: false })).contains(OBJECTIVE));
        assert!(format!("{:?}", task_spans(Options { content: true })).contains(OBJECTIVE));
    }

    #[test]
    fn a_step_holds_the_runs_model_calls_until_the_next_step() {
        let mut model = SpanModel::new(Options::default());
        model.push(&event(EventKind::RunStarted { goal: "x".into() }));
        model.push(&task(Task::Step { n: 1 }));
        let result = |id: &str| EventKind::ToolResult {
            id: id.into(),
            name: "read_file".into(),
            is_error: false,
            duration_ms: 1,
            output: String::new(),
        };
        let mut spans = model.push(&event(result("c1")));
        spans.extend(model.push(&task(Task::Step { n: 2 })));
        spans.extend(model.finish());
        let (tool, first) = (named(&spans, "execute_tool read_file"), named(&spans, "step 1"));
        assert_eq!(tool.parent, Some(first.span_id), "the tool call sits in step 1");
        assert!(first.attrs.contains(&int("task.step", 1)));
        assert_eq!(named(&spans, "step 2").parent, Some(named(&spans, "run run").span_id));
    }

    #[test]
    fn a_recorded_event_draws_nothing_until_revived() {
        let recorded: Extension = serde_json::from_value(Task::Step { n: 1 }.to_json()).unwrap();
        assert!(recorded.span_ops().is_empty());
        assert_eq!(recorded.revived::<Task>().map(|e| e.span_ops().len()), Some(1));
    }

    #[test]
    fn a_failed_tools_output_is_exported_only_with_content_on() {
        let failed = |content: bool| {
            let mut model = SpanModel::new(Options { content });
            model.push(&event(EventKind::RunStarted { goal: "x".into() }));
            let result = EventKind::ToolResult {
                id: "c1".into(),
                name: "read_file".into(),
                is_error: true,
                duration_ms: 1,
                output: OBJECTIVE.into(),
            };
            let spans = model.push(&event(result));
            spans.into_iter().find(|s| s.name == "execute_tool read_file").and_then(|s| s.error).unwrap_or_default()
        };
        assert!(!failed(false).contains(OBJECTIVE) && !failed(false).is_empty());
        assert!(failed(true).contains(OBJECTIVE));
    }
}

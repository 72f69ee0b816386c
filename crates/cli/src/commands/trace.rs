//! `recursive trace`: rebuilds the tree of a run from its JSONL events (from `run`, `rlm`,
//! `goal` or `graph` with `--events`, or a goal execution log from `goal --log`) and prints nesting,
//! status, timing, tokens and cost per node.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;
use recursive_core::{AgentEvent, EventKind, Usage};
use recursive_goal::{GoalEvent, GoalRunEvent};
use recursive_graph::GraphEvent;
use recursive_rlm::RlmEvent;
use serde_json::Value;

/// Arguments of `trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// A JSONL events file or goal log.
    pub path: PathBuf,
    /// Only the subtree(s) whose goal contains this text (case-insensitive).
    #[arg(long)]
    pub goal: Option<String>,
    /// Print the tree as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Under each goal of a goal log, print the raw output of its action (what its result
    /// digests; the log keeps it whole).
    #[arg(long)]
    pub raw: bool,
    /// Write the run tree as one self-contained HTML page (to `-o`, else stdout).
    #[arg(long, conflicts_with_all = ["json", "otlp"])]
    pub html: bool,
    /// Where `--html` writes the page.
    #[arg(short = 'o', long = "output", value_name = "PATH", requires = "html")]
    pub output: Option<PathBuf>,
    /// Export the run's spans to this OTLP endpoint (`http://host:4318` for HTTP/protobuf,
    /// `http://host:4317` with `--otlp-protocol grpc`) instead of printing the tree.
    #[arg(long, value_name = "ENDPOINT")]
    pub otlp: Option<String>,
    /// The OTLP transport: http/protobuf (default) or grpc.
    #[arg(long, value_name = "PROTOCOL", default_value = "http/protobuf", requires = "otlp")]
    pub otlp_protocol: String,
    /// Put prompts, completions, inputs and code in the exported spans.
    #[arg(long, requires = "otlp")]
    pub otel_content: bool,
}

/// One node of the printed tree.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Node {
    /// Node id (run id or goal key).
    pub id: String,
    /// Parent id.
    pub parent: Option<String>,
    /// Readable name.
    pub name: String,
    /// Depth in the tree.
    pub depth: u32,
    /// The goal, question or input.
    pub goal: String,
    /// Finish reason or goal status.
    pub status: String,
    /// First event time.
    pub started: Option<DateTime<Utc>>,
    /// Last event time.
    pub ended: Option<DateTime<Utc>>,
    /// Tokens used by this node itself.
    pub own_usage: Usage,
    /// USD of this node itself.
    pub own_cost: f64,
    /// Children ids in order of appearance.
    pub children: Vec<String>,
    /// Usage and cost including descendants, when the log states them.
    pub reported_total: Option<(Usage, f64)>,
    /// The status came from a goal status or an RLM outcome, which say more than the run's
    /// finish reason.
    #[serde(skip)]
    pub settled: bool,
    /// The raw output of a goal's action, from its `executed` log event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// A tree of nodes keyed by id, with roots in order of appearance.
#[derive(Debug, Default)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
    order: Vec<String>,
    /// Print raw action outputs under their goals.
    pub show_raw: bool,
}

impl Tree {
    fn node(&mut self, id: &str) -> &mut Node {
        if !self.nodes.contains_key(id) {
            self.order.push(id.to_string());
        }
        self.nodes.entry(id.to_string()).or_insert_with(|| Node { id: id.to_string(), ..Default::default() })
    }

    fn touch(&mut self, id: &str, at: DateTime<Utc>) {
        let n = self.node(id);
        n.started = Some(n.started.map_or(at, |s| s.min(at)));
        n.ended = Some(n.ended.map_or(at, |e| e.max(at)));
    }

    /// Adds one agent event.
    pub fn add_event(&mut self, e: &AgentEvent) {
        let id = e.ids.run_id.clone();
        self.touch(&id, e.timestamp);
        {
            let n = self.node(&id);
            n.name = e.ids.name.clone();
            n.depth = e.ids.depth;
            n.parent = e.ids.parent_run_id.clone();
            if n.status.is_empty() {
                n.status = "running".into();
            }
        }
        match &e.kind {
            EventKind::RunStarted { goal } => {
                let n = self.node(&id);
                if n.goal.is_empty() {
                    n.goal = goal.clone();
                }
            }
            EventKind::Usage { usage, cost_usd, .. } => {
                let n = self.node(&id);
                n.own_usage.add(usage);
                n.own_cost += cost_usd.unwrap_or(0.0);
            }
            EventKind::RunFinished { finish_reason, .. } => {
                let n = self.node(&id);
                if !n.settled {
                    n.status = finish_reason.to_string();
                }
            }
            EventKind::Extension(ext) => {
                if let Some(GoalRunEvent::Goal { goal, status, event, .. }) = ext.get::<GoalRunEvent>() {
                    let n = self.node(&id);
                    if n.goal.is_empty() {
                        n.goal = goal;
                    }
                    n.settled = status.is_some();
                    n.status = status.map(|s| s.to_string()).unwrap_or_else(|| event.as_str().to_string());
                } else if let Some(RlmEvent::RlmFinished { outcome }) = ext.get::<RlmEvent>() {
                    let n = self.node(&id);
                    n.status = outcome.as_str().to_string();
                    n.settled = true;
                } else if let Some(event) = ext.get::<GraphEvent>() {
                    self.add_graph_event(&id, event);
                }
            }
            _ => {}
        }
    }

    /// A graph node's kind and outcome, a graph run's finish.
    fn add_graph_event(&mut self, id: &str, event: GraphEvent) {
        let n = self.node(id);
        match event {
            GraphEvent::GraphNodeStarted { node, kind } => n.goal = format!("{kind} node `{node}`"),
            GraphEvent::GraphNodeFinished { outcome, .. } => {
                n.status =
                    if outcome == recursive_graph::NodeOutcome::Ok { "done".into() } else { outcome.as_str().into() };
                n.settled = true;
            }
            GraphEvent::GraphFinished { finish, .. } if n.parent.is_none() => {
                n.status = finish.split(':').next().unwrap_or_default().to_string();
                n.settled = true;
            }
            _ => {}
        }
    }

    /// Adds one line of a goal execution log.
    pub fn add_goal_log(&mut self, e: &GoalEvent) {
        let id = e.goal_id.clone();
        self.touch(&id, e.timestamp);
        let n = self.node(&id);
        n.name = format!("goal-d{}", e.depth);
        n.goal = e.goal.clone();
        n.depth = e.depth;
        n.parent = e.parent_goal_id.clone();
        n.status = e.status.map(|s| s.to_string()).unwrap_or_else(|| e.event.as_str().to_string());
        if e.event == recursive_goal::GoalEventKind::Executed
            && let Some(output) = e.data.get("output").and_then(Value::as_str)
        {
            n.raw = Some(output.to_string());
        }
        if let Some(u) = e.data.get("usage_total").and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok()) {
            let cost = e.data.get("cost_total_usd").and_then(Value::as_f64).unwrap_or(0.0);
            n.reported_total = Some((u, cost));
        }
    }

    fn link(&mut self) {
        let pairs: Vec<(String, String)> =
            self.order.iter().filter_map(|id| self.nodes[id].parent.clone().map(|p| (p, id.clone()))).collect();
        for (parent, child) in pairs {
            if self.nodes.contains_key(&parent) && parent != child {
                let p = self.node(&parent);
                if !p.children.contains(&child) {
                    p.children.push(child);
                }
            }
        }
    }

    /// Roots: nodes whose parent is not in the tree.
    pub fn roots(&self) -> Vec<&Node> {
        self.order
            .iter()
            .map(|id| &self.nodes[id])
            .filter(|n| n.parent.as_ref().is_none_or(|p| !self.nodes.contains_key(p) || p == &n.id))
            .collect()
    }

    /// Usage and cost of a node including its descendants.
    pub fn totals(&self, id: &str) -> (Usage, f64) {
        let Some(n) = self.nodes.get(id) else { return (Usage::default(), 0.0) };
        if let Some(total) = n.reported_total {
            return total;
        }
        let mut usage = n.own_usage;
        let mut cost = n.own_cost;
        for c in &n.children {
            let (u, k) = self.totals(c);
            usage.add(&u);
            cost += k;
        }
        (usage, cost)
    }

    fn render(&self, id: &str, indent: usize, out: &mut String) {
        let Some(n) = self.nodes.get(id) else { return };
        let (usage, cost) = self.totals(id);
        let secs = match (n.started, n.ended) {
            (Some(s), Some(e)) => (e - s).num_milliseconds() as f64 / 1000.0,
            _ => 0.0,
        };
        out.push_str(&format!(
            "{}{} [{}] {:.2}s {} tok ${:.4}  {}\n",
            "  ".repeat(indent),
            n.name,
            n.status,
            secs,
            usage.total(),
            cost,
            recursive_core::event::clip(&n.goal, 100)
        ));
        if let (true, Some(raw)) = (self.show_raw, &n.raw) {
            let pad = "  ".repeat(indent + 2);
            for line in raw.lines() {
                out.push_str(&format!("{pad}{line}\n"));
            }
        }
        for c in &n.children {
            self.render(c, indent + 1, out);
        }
    }

    /// The tree as indented text, optionally only the subtrees whose goal contains `filter`.
    pub fn to_text(&self, filter: Option<&str>) -> String {
        let mut out = String::new();
        let starts: Vec<&Node> = match filter {
            None => self.roots(),
            Some(f) => {
                let f = f.to_lowercase();
                let mut hits: Vec<&Node> = Vec::new();
                for id in &self.order {
                    let n = &self.nodes[id];
                    let under_hit = hits.iter().any(|h| self.is_descendant(&n.id, &h.id));
                    if n.goal.to_lowercase().contains(&f) && !under_hit {
                        hits.push(n);
                    }
                }
                hits
            }
        };
        for n in starts {
            self.render(&n.id, 0, &mut out);
        }
        out
    }

    fn is_descendant(&self, id: &str, ancestor: &str) -> bool {
        let mut cur = self.nodes.get(id).and_then(|n| n.parent.clone());
        let mut guard = 0;
        while let Some(p) = cur {
            if p == ancestor {
                return true;
            }
            guard += 1;
            if guard > 10_000 {
                return false;
            }
            cur = self.nodes.get(&p).and_then(|n| n.parent.clone());
        }
        false
    }
}

/// The lines of a JSONL log; a last line cut by a kill is skipped with a warning (the run it
/// records was interrupted, and everything before it still reads).
fn read_lines(path: &std::path::Path) -> anyhow::Result<Vec<(usize, Value)>> {
    let read =
        recursive_core::jsonl::read_jsonl_records(path).with_context(|| format!("cannot read {}", path.display()))?;
    if let Some(cut) = &read.cut {
        eprintln!("warning: {cut}");
    }
    Ok(read.records)
}

/// Reads a JSONL file of agent events or goal-log lines into a tree.
pub fn read_tree(path: &std::path::Path) -> anyhow::Result<Tree> {
    let lines = read_lines(path)?;
    let mut tree = Tree::default();
    for (line, v) in lines {
        if v.get("goal_id").is_some() && v.get("event").is_some() {
            let e: GoalEvent =
                serde_json::from_value(v).with_context(|| format!("{}:{line}: not a goal log line", path.display()))?;
            tree.add_goal_log(&e);
        } else if v.get("run_id").is_some() {
            let e: AgentEvent = serde_json::from_value(v)
                .with_context(|| format!("{}:{line}: not a Recursive event", path.display()))?;
            tree.add_event(&e);
        } else {
            anyhow::bail!("{}:{line}: neither a run event nor a goal log line", path.display());
        }
    }
    tree.link();
    Ok(tree)
}

/// Prints the tree (or writes its page, or exports its spans).
pub fn execute(args: TraceArgs) -> anyhow::Result<u8> {
    if let Some(endpoint) = &args.otlp {
        return export(&args, endpoint);
    }
    if args.html {
        return write_html(&args);
    }
    let mut tree = read_tree(&args.path)?;
    tree.show_raw = args.raw;
    if args.json {
        let nodes: Vec<&Node> = tree.order.iter().map(|id| &tree.nodes[id]).collect();
        println!("{}", serde_json::to_string_pretty(&nodes)?);
    } else {
        let text = tree.to_text(args.goal.as_deref());
        if text.is_empty() {
            anyhow::bail!("no matching nodes in {}", args.path.display());
        }
        print!("{text}");
    }
    Ok(0)
}

/// The events of a `--events` file, in order.
fn read_events(path: &std::path::Path) -> anyhow::Result<Vec<Value>> {
    Ok(read_lines(path)?.into_iter().map(|(_, v)| v).collect())
}

/// `--html`: the page of the run tree.
fn write_html(args: &TraceArgs) -> anyhow::Result<u8> {
    let events = read_events(&args.path)?;
    if !events.iter().any(|e| e.get("run_id").is_some()) {
        anyhow::bail!("{} holds no run events (write them with --events)", args.path.display());
    }
    let title = format!("recursive trace — {}", args.path.display());
    let page = recursive_trace_view::render(&events, &title);
    match &args.output {
        Some(path) => std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{page}"),
    }
    Ok(0)
}

/// A recorded engine event read back as its type, so it says what it means for the spans.
fn revive(kind: &mut EventKind) {
    if let EventKind::Extension(ext) = kind {
        let live =
            ext.revived::<RlmEvent>().or_else(|| ext.revived::<GoalRunEvent>()).or_else(|| ext.revived::<GraphEvent>());
        if let Some(live) = live {
            *ext = live;
        }
    }
}

/// `--otlp`: the run's spans sent to a collector; exit 1 when it did not take them all.
fn export(args: &TraceArgs, endpoint: &str) -> anyhow::Result<u8> {
    use std::sync::atomic::Ordering;
    let transport = recursive_telemetry::Transport::parse(&args.otlp_protocol).map_err(crate::ConfigError)?;
    let events = read_events(&args.path)?;
    let settings = recursive_telemetry::Settings {
        endpoint: recursive_telemetry::signal_endpoint(endpoint, transport),
        transport,
        service_name: "recursive".into(),
        options: recursive_telemetry::Options { content: args.otel_content },
    };
    let sink = recursive_telemetry::OtlpSink::start(settings)?;
    let mut runs = 0;
    for (line, v) in events.into_iter().enumerate() {
        if v.get("run_id").is_none() {
            continue;
        }
        let mut e: AgentEvent = serde_json::from_value(v)
            .with_context(|| format!("{}:{}: not a Recursive event", args.path.display(), line + 1))?;
        revive(&mut e.kind);
        runs += usize::from(matches!(e.kind, EventKind::RunStarted { .. }));
        sink.send(&e);
    }
    let counts = sink.shutdown(std::time::Duration::from_secs(30));
    let exported = counts.exported.load(Ordering::Relaxed);
    eprintln!("exported {exported} span(s) of {runs} run(s) to {endpoint}");
    if let Some(loss) = counts.loss() {
        eprintln!("error: {loss}");
        return Ok(crate::EXIT_ERROR);
    }
    Ok(0)
}

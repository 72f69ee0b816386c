//! The run tree of the current turn, built from its events: every run (the chat's agent,
//! sub-agents, RLMs, goals, graphs) with its parent, kind and state, and for each what it is
//! doing now (a model call, a tool, an engine's step), its step, tokens, cost and time, and
//! its own model and tool calls. A run under the root shows its latest calls as detail lines
//! (a finished one with runs under it folds them into a count); the open view
//! ([`RunTree::lines`] with `open`) shows every call of every run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use recursive_core::{AgentEvent, EventKind};

/// Calls shown under a run in the folded view.
const LATEST_CALLS: usize = 3;

/// Characters of a call's arguments shown.
const ARGUMENT_CHARS: usize = 40;

/// One model or tool call of a run.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    /// The tool call's id (empty for a model call).
    id: String,
    /// What is shown: the tool and its arguments, or the model.
    text: String,
    /// `None` while it runs; whether it failed once it ended.
    failed: Option<bool>,
    /// What it cost once it ended (tokens, USD) or how long a tool took.
    detail: String,
}

/// One run.
#[derive(Debug, Clone)]
struct Node {
    name: String,
    parent: Option<String>,
    kind: Option<String>,
    /// The finish reason once it ended, and whether it is a success.
    finished: Option<(String, bool)>,
    order: usize,
    started: Instant,
    ended: Option<Instant>,
    step: u32,
    /// What it does now.
    doing: String,
    /// Tokens and USD of its own model calls.
    tokens: u64,
    cost: f64,
    /// Tokens and USD with its descendants, once it ended.
    total: Option<(u64, f64)>,
    calls: Vec<Call>,
    model_calls: usize,
    tool_calls: usize,
}

impl Node {
    fn new(name: String, parent: Option<String>, order: usize, now: Instant) -> Self {
        Self {
            name,
            parent,
            kind: None,
            finished: None,
            order,
            started: now,
            ended: None,
            step: 0,
            doing: "starting".into(),
            tokens: 0,
            cost: 0.0,
            total: None,
            calls: Vec::new(),
            model_calls: 0,
            tool_calls: 0,
        }
    }
}

/// The runs of a turn.
#[derive(Debug, Default)]
pub struct RunTree {
    nodes: BTreeMap<String, Node>,
    next: usize,
}

impl RunTree {
    /// Forgets the runs of earlier turns.
    pub fn clear(&mut self) {
        self.nodes.clear();
    }

    /// Takes an event in.
    pub fn observe(&mut self, event: &AgentEvent) {
        self.observe_at(event, Instant::now());
    }

    fn node(&mut self, id: &str, name: &str, parent: Option<&String>, now: Instant) -> &mut Node {
        let next = &mut self.next;
        self.nodes.entry(id.to_string()).or_insert_with(|| {
            *next += 1;
            Node::new(name.to_string(), parent.cloned(), *next, now)
        })
    }

    /// Takes an event in that arrived at `now`.
    pub fn observe_at(&mut self, event: &AgentEvent, now: Instant) {
        let ids = &event.ids;
        if let EventKind::SubAgentStarted { agent, kind, child_run_id, .. } = &event.kind {
            let node = self.node(child_run_id, agent, Some(&ids.run_id), now);
            node.kind = Some(kind.as_str().to_string());
            node.name = agent.clone();
            return;
        }
        let node = self.node(&ids.run_id, &ids.name, ids.parent_run_id.as_ref(), now);
        node.step = node.step.max(event.step);
        match &event.kind {
            EventKind::RunStarted { .. } => {
                node.finished = None;
                node.ended = None;
                node.doing = "calling the model".into();
            }
            EventKind::PartialText { .. } => node.doing = "answering".into(),
            EventKind::PartialReasoning { .. } => node.doing = "reasoning".into(),
            EventKind::Usage { usage, cost_usd, model, .. } => {
                let cost = cost_usd.unwrap_or(0.0);
                node.tokens += usage.total();
                node.cost += cost;
                node.model_calls += 1;
                node.calls.push(Call {
                    id: String::new(),
                    text: format!("model {model}"),
                    failed: Some(false),
                    detail: format!("{} · ${cost:.4}", tokens(usage.total())),
                });
                node.doing = "thinking".into();
            }
            EventKind::ToolCall { call } => {
                node.tool_calls += 1;
                let args = recursive_core::text::one_line(&call.arguments.to_string(), ARGUMENT_CHARS);
                node.calls.push(Call {
                    id: call.id.clone(),
                    text: format!("{}({args})", call.name),
                    failed: None,
                    detail: String::new(),
                });
                node.doing = format!("running {}", call.name);
            }
            EventKind::ToolResult { id, is_error, duration_ms, .. } => {
                if let Some(call) = node.calls.iter_mut().rev().find(|c| &c.id == id) {
                    call.failed = Some(*is_error);
                    call.detail = seconds(Duration::from_millis(*duration_ms));
                }
                node.doing = if node.calls.iter().any(|c| c.failed.is_none()) {
                    let running: Vec<&str> = node
                        .calls
                        .iter()
                        .filter(|c| c.failed.is_none())
                        .map(|c| c.text.split('(').next().unwrap_or(""))
                        .collect();
                    format!("running {}", running.join(", "))
                } else {
                    "calling the model".into()
                };
            }
            EventKind::Ask { name, .. } => node.doing = format!("asking about {name}"),
            EventKind::Retry { attempt, .. } => node.doing = format!("retry {attempt}"),
            EventKind::Compacted { .. } => node.doing = "compacted".into(),
            EventKind::Extension(e) => {
                if let Some(text) = e.render() {
                    node.doing = recursive_core::text::one_line(text.trim(), 60);
                }
            }
            EventKind::RunFinished { finish_reason, usage, cost_usd, .. } => {
                node.finished = Some((finish_reason.as_str().to_string(), finish_reason.is_success()));
                node.ended = Some(now);
                node.total = Some((usage.total(), *cost_usd));
                node.doing.clear();
            }
            _ => {}
        }
    }

    /// How many runs it holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The tree as lines at `now`; `open` shows every call of every run.
    pub fn lines(&self, now: Instant, open: bool) -> Vec<Line<'static>> {
        let mut out = Vec::new();
        let mut roots: Vec<(&String, &Node)> =
            self.nodes.iter().filter(|(_, n)| n.parent.as_ref().is_none_or(|p| !self.nodes.contains_key(p))).collect();
        roots.sort_by_key(|(_, n)| n.order);
        for (id, node) in roots {
            self.branch(id, node, 0, now, open, &mut out);
        }
        out
    }

    fn children(&self, id: &str) -> Vec<(&String, &Node)> {
        let mut c: Vec<(&String, &Node)> = self.nodes.iter().filter(|(_, n)| n.parent.as_deref() == Some(id)).collect();
        c.sort_by_key(|(_, n)| n.order);
        c
    }

    fn descendants(&self, id: &str) -> usize {
        self.children(id).iter().map(|(cid, _)| 1 + self.descendants(cid)).sum()
    }

    /// Tokens and USD of a run with its descendants: as it reported at its end, or summed so far.
    fn spent(&self, id: &str, node: &Node) -> (u64, f64) {
        if let Some(total) = node.total {
            return total;
        }
        self.children(id).iter().fold((node.tokens, node.cost), |(t, c), (cid, child)| {
            let (ct, cc) = self.spent(cid, child);
            (t + ct, c + cc)
        })
    }

    fn branch(&self, id: &str, node: &Node, depth: usize, now: Instant, open: bool, out: &mut Vec<Line<'static>>) {
        let dim = Style::new().fg(Color::DarkGray);
        let (mark, style) = match &node.finished {
            None => ("▸", Style::new().fg(Color::Yellow)),
            Some((_, true)) => ("✓", Style::new().fg(Color::Green)),
            Some((_, false)) => ("✗", Style::new().fg(Color::Red)),
        };
        let indent = "  ".repeat(depth);
        let mut spans = vec![Span::raw(indent.clone()), Span::styled(format!("{mark} "), style)];
        if let Some(kind) = &node.kind {
            spans.push(Span::styled(format!("{kind} "), dim));
        }
        spans.push(Span::raw(node.name.clone()));
        match &node.finished {
            Some((reason, _)) => spans.push(Span::styled(format!(" ({reason})"), dim)),
            None if !node.doing.is_empty() => {
                spans.push(Span::styled(format!(" · {}", node.doing), Style::new().fg(Color::Yellow)))
            }
            None => {}
        }
        out.push(Line::from(spans));
        let (tokens_spent, usd) = self.spent(id, node);
        let elapsed = node.ended.unwrap_or(now).saturating_duration_since(node.started);
        let mut stats = format!("step {} · {} · ${usd:.4} · {}", node.step, tokens(tokens_spent), seconds(elapsed));
        if node.model_calls + node.tool_calls > 0 {
            stats.push_str(&format!(" · {} model, {} tool", node.model_calls, node.tool_calls));
        }
        out.push(Line::styled(format!("{indent}    {stats}"), dim));
        // The root's calls are in the conversation already; the folded view shows the latest
        // calls of the runs under it.
        let shown = match (open, depth) {
            (true, _) => node.calls.len(),
            (false, 0) => 0,
            (false, _) => LATEST_CALLS,
        };
        let skipped = node.calls.len().saturating_sub(shown);
        if skipped > 0 && shown > 0 {
            out.push(Line::styled(format!("{indent}    … {skipped} earlier call(s) (Ctrl-T opens all)"), dim));
        }
        for call in &node.calls[skipped..] {
            let (mark, style) = match call.failed {
                None => ("·", Style::new().fg(Color::Yellow)),
                Some(false) => ("·", dim),
                Some(true) => ("✗", Style::new().fg(Color::Red)),
            };
            let detail = if call.detail.is_empty() { String::new() } else { format!(" · {}", call.detail) };
            out.push(Line::from(vec![
                Span::raw(format!("{indent}    ")),
                Span::styled(format!("{mark} "), style),
                Span::raw(call.text.clone()),
                Span::styled(detail, dim),
            ]));
        }
        let children = self.children(id);
        // A finished branch under the root folds into a count, but in the open view.
        if !open && depth > 0 && node.finished.is_some() && !children.is_empty() {
            let below = self.descendants(id);
            out.push(Line::styled(format!("{indent}    [+{below} run(s) under it]"), dim));
            return;
        }
        for (cid, child) in children {
            self.branch(cid, child, depth + 1, now, open, out);
        }
    }
}

/// A token count, short.
fn tokens(n: u64) -> String {
    if n >= 10_000 {
        format!("{}k tok", n / 1000)
    } else if n >= 1000 {
        format!("{:.1}k tok", n as f64 / 1000.0)
    } else {
        format!("{n} tok")
    }
}

/// A duration in seconds with a tenth.
fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn event(run: &str, parent: Option<&str>, depth: u32, step: u32, kind: Value) -> AgentEvent {
        let mut v = json!({"timestamp": "2026-01-01T00:00:00Z", "run_id": run, "parent_run_id": parent,
            "root_run_id": "root", "depth": depth, "run_name": format!("{run}-d{depth}"), "step": step});
        if let (Some(v), Some(kind)) = (v.as_object_mut(), kind.as_object()) {
            v.extend(kind.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    fn text(lines: &[Line<'static>]) -> String {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect::<String>() + "\n").collect()
    }

    #[test]
    fn a_sub_agents_calls_tokens_cost_and_time_show_under_it() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut tree = RunTree::default();
        let usage = |input, cost| json!({"type": "usage", "usage": {"input_tokens": input, "output_tokens": 10}, "cost_usd": cost, "model": "m"});
        tree.observe_at(&event("root", None, 0, 0, json!({"type": "run_started", "goal": "g"})), at(0));
        tree.observe_at(&event("root", None, 0, 1, usage(100, 0.001)), at(100));
        tree.observe_at(
            &event("root", None, 0, 1, json!({"type": "sub_agent_started", "agent": "helper", "kind": "agent", "input": "x", "child_run_id": "kid"})),
            at(200),
        );
        tree.observe_at(&event("kid", Some("root"), 1, 0, json!({"type": "run_started", "goal": "x"})), at(200));
        tree.observe_at(&event("kid", Some("root"), 1, 1, usage(50, 0.002)), at(300));
        let call =
            json!({"type": "tool_call", "call": {"id": "c1", "name": "read_file", "arguments": {"path": "a.txt"}}});
        tree.observe_at(&event("kid", Some("root"), 1, 1, call), at(300));
        let shown = text(&tree.lines(at(1300), false));
        assert!(shown.contains("▸ agent helper · running read_file"), "{shown}");
        assert!(shown.contains("step 1 · 60 tok · $0.0020 · 1.1s · 1 model, 1 tool"), "{shown}");
        assert!(shown.contains("· read_file({\"path\":\"a.txt\"})"), "{shown}");
        // The root counts its descendants.
        assert!(shown.contains("step 1 · 170 tok · $0.0030 · 1.3s"), "{shown}");
        let result = json!({"type": "tool_result", "id": "c1", "name": "read_file", "output": "hi", "is_error": false, "duration_ms": 20});
        tree.observe_at(&event("kid", Some("root"), 1, 1, result), at(400));
        let finished = json!({"type": "run_finished", "finish_reason": {"kind": "no_more_tool_calls"}, "usage": {"input_tokens": 90, "output_tokens": 30}, "cost_usd": 0.005});
        tree.observe_at(&event("kid", Some("root"), 1, 2, finished), at(500));
        let shown = text(&tree.lines(at(2000), false));
        assert!(shown.contains("✓ agent helper (no_more_tool_calls)"), "{shown}");
        assert!(shown.contains("step 2 · 120 tok · $0.0050 · 0.3s"), "{shown}");
        assert!(shown.contains("read_file({\"path\":\"a.txt\"}) · 0.0s"), "{shown}");
        // A finished branch folds into a count.
        let grandchild = json!({"type": "sub_agent_started", "agent": "inner", "kind": "rlm", "input": "x", "child_run_id": "grandkid"});
        tree.observe_at(&event("kid", Some("root"), 1, 2, grandchild), at(450));
        let shown = text(&tree.lines(at(2000), false));
        assert!(shown.contains("[+1 run(s) under it]") && !shown.contains("rlm inner"), "{shown}");
        assert!(text(&tree.lines(at(2000), true)).contains("rlm inner"));
        // The root's own calls show in the open view only.
        assert!(!shown.contains("model m · 110 tok"), "{shown}");
        assert!(text(&tree.lines(at(2000), true)).contains("model m · 110 tok · $0.0010"));
    }
}

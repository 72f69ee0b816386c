//! The run tree of the current turn, built from its events: every run (the chat's agent,
//! sub-agents, RLMs, goals, graphs) with its parent, kind and state. Running branches are
//! shown open; a finished branch folds into one line with the count of runs under it.

use std::collections::BTreeMap;

use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use recursive_core::{AgentEvent, EventKind};

/// One run.
#[derive(Debug, Clone)]
struct Node {
    name: String,
    parent: Option<String>,
    kind: Option<String>,
    /// The finish reason once it ended.
    finished: Option<(String, bool)>,
    order: usize,
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
        let ids = &event.ids;
        match &event.kind {
            EventKind::RunStarted { .. } => {
                self.next += 1;
                let order = self.next;
                let node = self.nodes.entry(ids.run_id.clone()).or_insert_with(|| Node {
                    name: ids.name.clone(),
                    parent: ids.parent_run_id.clone(),
                    kind: None,
                    finished: None,
                    order,
                });
                node.finished = None;
            }
            EventKind::SubAgentStarted { agent, kind, child_run_id, .. } => {
                self.next += 1;
                let order = self.next;
                let node = self.nodes.entry(child_run_id.clone()).or_insert_with(|| Node {
                    name: agent.clone(),
                    parent: Some(ids.run_id.clone()),
                    kind: None,
                    finished: None,
                    order,
                });
                node.kind = Some(format!("{kind:?}").to_lowercase());
                node.name = agent.clone();
            }
            EventKind::RunFinished { finish_reason, .. } => {
                if let Some(node) = self.nodes.get_mut(&ids.run_id) {
                    node.finished = Some((finish_reason.as_str().to_string(), finish_reason.is_success()));
                }
            }
            _ => {}
        }
    }

    /// How many runs it holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The tree as lines.
    pub fn lines(&self) -> Vec<Line<'static>> {
        let mut out = Vec::new();
        let mut roots: Vec<(&String, &Node)> =
            self.nodes.iter().filter(|(_, n)| n.parent.as_ref().is_none_or(|p| !self.nodes.contains_key(p))).collect();
        roots.sort_by_key(|(_, n)| n.order);
        for (id, node) in roots {
            self.branch(id, node, 0, &mut out);
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

    fn branch(&self, id: &str, node: &Node, depth: usize, out: &mut Vec<Line<'static>>) {
        let (mark, style) = match &node.finished {
            None => ("▸", Style::new().fg(Color::Yellow)),
            Some((_, true)) => ("✓", Style::new().fg(Color::Green)),
            Some((_, false)) => ("✗", Style::new().fg(Color::Red)),
        };
        let mut spans = vec![Span::raw("  ".repeat(depth)), Span::styled(format!("{mark} "), style)];
        if let Some(kind) = &node.kind {
            spans.push(Span::styled(format!("{kind} "), Style::new().fg(Color::DarkGray)));
        }
        spans.push(Span::raw(node.name.clone()));
        if let Some((reason, _)) = &node.finished {
            spans.push(Span::styled(format!(" ({reason})"), Style::new().fg(Color::DarkGray)));
        }
        let below = self.descendants(id);
        if node.finished.is_some() && below > 0 && depth > 0 {
            spans.push(Span::styled(format!(" [+{below}]"), Style::new().fg(Color::DarkGray)));
            out.push(Line::from(spans));
            return;
        }
        out.push(Line::from(spans));
        for (cid, child) in self.children(id) {
            self.branch(cid, child, depth + 1, out);
        }
    }
}

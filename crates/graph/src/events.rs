//! The graph runtime's events, in the run tree's one stream: a run of a graph starting and
//! finishing, each superstep, each node, each checkpoint. As spans: a run starting a graph
//! invokes one, each node is a span of its own run, each superstep a note.

use std::any::Any;

use recursive_core::event::{SpanAttr, SpanOn, SpanOp};
use recursive_core::{ExtensionEvent, RunnableKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the graph runtime reports.
/// How a graph node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeOutcome {
    /// It wrote its update.
    Ok,
    /// It asked for a value.
    Interrupt,
    /// The run tree or a recursion limit stopped it.
    Stopped,
    /// It failed.
    Failed,
}

impl NodeOutcome {
    /// Snake-case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeOutcome::Ok => "ok",
            NodeOutcome::Interrupt => "interrupt",
            NodeOutcome::Stopped => "stopped",
            NodeOutcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GraphEvent {
    /// A graph run began (or resumed) on a thread.
    GraphStarted {
        /// The graph.
        graph: String,
        /// The thread.
        thread: String,
        /// The sub-graph namespace (empty at the top).
        ns: String,
        /// The checkpoint it starts from.
        checkpoint: String,
        /// Whether it continues from a checkpoint rather than from new input.
        resumed: bool,
    },
    /// A superstep began.
    GraphSuperstep {
        /// Its number (0-based on this branch).
        step: u64,
        /// The nodes it runs.
        nodes: Vec<String>,
        /// Nodes whose result was kept from before a crash (not run again).
        reused: Vec<String>,
    },
    /// A node began (emitted in the node's own run).
    GraphNodeStarted {
        /// The node.
        node: String,
        /// Its kind.
        kind: String,
    },
    /// A node ended (emitted in the node's own run, after its write is stored).
    GraphNodeFinished {
        /// The node.
        node: String,
        /// How it ended.
        outcome: NodeOutcome,
        /// The update's channels, the question or the failure.
        detail: Value,
    },
    /// A checkpoint was written.
    GraphCheckpoint {
        /// Its id.
        checkpoint: String,
        /// Supersteps completed.
        step: u64,
        /// The nodes the next superstep runs.
        next: Vec<String>,
    },
    /// A graph run ended.
    GraphFinished {
        /// The graph.
        graph: String,
        /// The thread.
        thread: String,
        /// How it ended (`done`, `interrupted`, a limit...).
        finish: String,
        /// The last checkpoint.
        checkpoint: String,
    },
}

impl ExtensionEvent for GraphEvent {
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn render(&self) -> Option<String> {
        Some(match self {
            GraphEvent::GraphStarted { graph, thread, resumed, ns, .. } => {
                let verb = if *resumed { "resumed" } else { "started" };
                let ns = if ns.is_empty() { String::new() } else { format!(" [{ns}]") };
                format!("graph {graph} {verb} on thread {thread}{ns}")
            }
            GraphEvent::GraphSuperstep { step, nodes, reused } if reused.is_empty() => {
                format!("step {step}: {}", nodes.join(", "))
            }
            GraphEvent::GraphSuperstep { step, nodes, reused } => {
                format!("step {step}: {} (kept from before: {})", nodes.join(", "), reused.join(", "))
            }
            GraphEvent::GraphNodeStarted { .. } | GraphEvent::GraphCheckpoint { .. } => return None,
            GraphEvent::GraphNodeFinished { node, outcome, detail } => match outcome {
                NodeOutcome::Ok => format!("node {node} done"),
                _ => format!("node {node} {}: {}", outcome.as_str(), short(detail)),
            },
            GraphEvent::GraphFinished { graph, finish, .. } => format!("graph {graph} finished: {finish}"),
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn span_ops(&self) -> Vec<SpanOp> {
        match self {
            GraphEvent::GraphStarted { graph, thread, .. } => vec![
                SpanOp::Claim(RunnableKind::Graph),
                SpanOp::Set {
                    on: SpanOn::Run,
                    attrs: vec![
                        SpanAttr::new("recursive.graph", graph.as_str()),
                        SpanAttr::new("recursive.graph.thread", thread.as_str()),
                    ],
                },
            ],
            GraphEvent::GraphNodeStarted { node, kind } => vec![SpanOp::Open {
                key: node_key(node),
                name: format!("graph node {node}"),
                parent: None,
                attrs: vec![
                    SpanAttr::new("recursive.graph.node", node.as_str()),
                    SpanAttr::new("recursive.graph.node_kind", kind.as_str()),
                ],
            }],
            GraphEvent::GraphNodeFinished { node, outcome, .. } => vec![
                SpanOp::Set {
                    on: SpanOn::Key(node_key(node)),
                    attrs: vec![SpanAttr::new("recursive.graph.outcome", outcome.as_str())],
                },
                SpanOp::End {
                    key: node_key(node),
                    error: (*outcome != NodeOutcome::Ok).then(|| outcome.as_str().to_string()),
                },
            ],
            GraphEvent::GraphSuperstep { step, nodes, .. } => vec![SpanOp::Note {
                on: SpanOn::Run,
                name: "graph.superstep".into(),
                attrs: vec![
                    SpanAttr::new("recursive.graph.step", *step),
                    SpanAttr::new("recursive.graph.nodes", nodes.clone()),
                ],
            }],
            _ => Vec::new(),
        }
    }
}

/// A node's span key.
fn node_key(node: &str) -> String {
    format!("graph-node:{node}")
}

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    recursive_core::text::truncate_middle(&s, 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_run_claims_its_run_and_names_graph_and_thread() {
        let started = GraphEvent::GraphStarted {
            graph: "plan".into(),
            thread: "t1".into(),
            ns: String::new(),
            checkpoint: "c0".into(),
            resumed: false,
        };
        let ops = started.span_ops();
        assert_eq!(ops[0], SpanOp::Claim(RunnableKind::Graph));
        let attrs = vec![SpanAttr::new("recursive.graph", "plan"), SpanAttr::new("recursive.graph.thread", "t1")];
        assert_eq!(ops[1], SpanOp::Set { on: SpanOn::Run, attrs });
    }

    #[test]
    fn a_node_is_a_span_that_fails_unless_it_ends_ok() {
        let started = GraphEvent::GraphNodeStarted { node: "pursue".into(), kind: "goal".into() }.span_ops();
        assert!(matches!(&started[..], [SpanOp::Open { key, name, parent: None, attrs }]
            if key == "graph-node:pursue" && name == "graph node pursue" && attrs.len() == 2 && attrs.iter().all(|a| !a.content)));
        let finished = |outcome| GraphEvent::GraphNodeFinished { node: "pursue".into(), outcome, detail: Value::Null };
        assert_eq!(
            finished(NodeOutcome::Ok).span_ops()[1],
            SpanOp::End { key: "graph-node:pursue".into(), error: None }
        );
        assert_eq!(
            finished(NodeOutcome::Failed).span_ops()[1],
            SpanOp::End { key: "graph-node:pursue".into(), error: Some("failed".into()) }
        );
    }

    #[test]
    fn a_superstep_is_a_note_on_the_run_naming_its_nodes() {
        let ops = GraphEvent::GraphSuperstep { step: 3, nodes: vec!["a".into()], reused: vec![] }.span_ops();
        let attrs = vec![
            SpanAttr::new("recursive.graph.step", 3u64),
            SpanAttr::new("recursive.graph.nodes", vec!["a".to_string()]),
        ];
        assert_eq!(ops, [SpanOp::Note { on: SpanOn::Run, name: "graph.superstep".into(), attrs }]);
    }
}

//! The graph runtime's events, in the run tree's one stream: a run of a graph starting and
//! finishing, each superstep, each node, each checkpoint.

use std::any::Any;

use recursive_core::ExtensionEvent;
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
}

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    recursive_core::text::truncate_middle(&s, 200)
}

//! The node contract: a node reads a snapshot of the state and returns an update; it runs as
//! a child run of the graph's run (its own events, usage and cost, the tree's budget and
//! cancellation). A node may also stop the run to ask for a value ([`NodeError::Interrupt`]),
//! and is given that value when the thread is resumed.

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{FinishReason, RunScope};
use recursive_store::checkpoint::Checkpointer;
use recursive_store::slot::StoreSlot;
use serde_json::Value;

use crate::exec::Finish;
use crate::state::{State, Update};

/// Where a node that runs a graph keeps that graph's checkpoints: the embedding thread, under
/// a namespace of its own.
#[derive(Clone)]
pub struct Nested {
    /// The store.
    pub store: Arc<dyn Checkpointer>,
    /// The thread.
    pub thread: String,
    /// The namespace for this invocation: unique per node and parent checkpoint, so a step run
    /// again from an earlier checkpoint (time travel, a fork) starts a run of its own.
    pub ns: String,
    /// When the namespace is new but the node asked at the checkpoint this step was copied
    /// from (time travel back to a question): the nested run's checkpoint where it asked, in
    /// the earlier namespace, to continue from there.
    pub resume_from: Option<String>,
    /// The step is a raise of the limits: a nested run found in the namespace continues with
    /// its limits counted afresh too.
    pub raise: bool,
}

/// What a node's run slot adds to the node's nested namespace.
pub(crate) const RUN_SUFFIX: &str = "#run";

impl Nested {
    /// The checkpoint slot of a run made by this invocation of the node (an RLM's): its
    /// namespace in the graph's thread, so a node killed mid-run resumes.
    pub fn run_slot(&self) -> StoreSlot {
        StoreSlot::in_thread(self.store.clone(), &self.thread, &format!("{}{RUN_SUFFIX}", self.ns))
    }
}

/// What a node is given.
pub struct NodeContext<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The superstep it runs in (its model and tool calls carry it as their step).
    pub step: u32,
    /// The state as it was when the superstep began.
    pub state: &'a State,
    /// The node's run (a child of the graph's run).
    pub scope: &'a RunScope,
    /// The value the thread was resumed with, when this node had asked for one.
    pub resume: Option<&'a Value>,
    /// Where a nested graph run keeps its checkpoints.
    pub nested: Nested,
}

/// Why a node produced no update.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The node asks for a value; the run stops until the thread is resumed with one.
    #[error("waiting for input: {payload}")]
    Interrupt {
        /// What is asked (shown to the person).
        payload: Value,
        /// The nodes of nested graphs the question comes from, outermost first.
        path: Vec<String>,
    },
    /// The run tree must stop (cancellation, a budget, the wall clock).
    #[error("stopped: {0}")]
    Stopped(FinishReason),
    /// A nested graph ended at a limit of its recursion policy.
    #[error("a nested graph stopped: {0}")]
    Limit(Finish),
    /// The node failed; the thread can be resumed to try it again.
    #[error("{0}")]
    Failed(String),
}

impl NodeError {
    /// A question for the person running the graph.
    pub fn ask(payload: Value) -> Self {
        NodeError::Interrupt { payload, path: Vec::new() }
    }
}

/// A node of a graph.
#[async_trait]
pub trait Node: Send + Sync {
    /// Its kind, for events and diagrams (`model`, `agent`, `tool`, `function`...).
    fn kind(&self) -> &'static str;

    /// Whether the node may ask for a value and be run again with it on resume (a question
    /// for a person, a sub-graph that holds one).
    fn resumable(&self) -> bool {
        false
    }

    /// Runs on the state snapshot and returns an update.
    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError>;
}

/// A node made of a library function of the state. It runs on a blocking thread, so the
/// graph's run ends at cancellation or the tree's deadline even while the function runs (the
/// function's result is then dropped).
pub struct FnNode<F> {
    f: Arc<F>,
}

impl<F> FnNode<F>
where
    F: Fn(&State) -> Result<Update, String> + Send + Sync + 'static,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self { f: Arc::new(f) }
    }
}

#[async_trait]
impl<F> Node for FnNode<F>
where
    F: Fn(&State) -> Result<Update, String> + Send + Sync + 'static,
{
    fn kind(&self) -> &'static str {
        "function"
    }

    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError> {
        let f = self.f.clone();
        let state = ctx.state.clone();
        match tokio::task::spawn_blocking(move || f(&state)).await {
            Ok(result) => result.map_err(NodeError::Failed),
            Err(e) => Err(NodeError::Failed(format!("the function failed: {e}"))),
        }
    }
}

/// A node from a function of the state.
pub fn func<F>(f: F) -> Arc<dyn Node>
where
    F: Fn(&State) -> Result<Update, String> + Send + Sync + 'static,
{
    Arc::new(FnNode::new(f))
}

//! A bound graph as a [`Runnable`]: the input's data (and its text, into an `input` channel
//! when the graph has one) are the initial state; the final state is the structured result and
//! the `output` channel (when the graph has one) its text. Each run is a thread of its own in
//! the given store, named after the run, so its checkpoints can be read back (`graph history`),
//! run as the store runs every durable run (its lease held, journaled unless its parent is).

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{Outcome, RunInput, RunScope, Runnable, RunnableKind};
use recursive_store::checkpoint::{Checkpointer, MemoryCheckpointer, ThreadInfo};
use recursive_store::durable::{DurableKey, HeldRun, run_durable};
use serde_json::Value;

use crate::exec::{Finish, Start, Thread};
use crate::graph::Graph;

/// A graph that runs as a child of any run (a tool, a delegate, a sandbox function...).
pub struct GraphRunnable {
    graph: Arc<Graph>,
    store: Arc<dyn Checkpointer>,
    name: String,
    description: String,
    source: Option<crate::blueprint::Source>,
    subgraphs: std::collections::BTreeMap<String, crate::blueprint::Source>,
}

impl GraphRunnable {
    /// Runs `graph` under its own name with its checkpoints in memory.
    pub fn new(graph: Arc<Graph>) -> Self {
        let name = graph.name().to_string();
        let description = format!("The graph `{name}`: give it its input; it runs its nodes and returns its output.");
        Self {
            graph,
            store: Arc::new(MemoryCheckpointer::new()),
            name,
            description,
            source: None,
            subgraphs: Default::default(),
        }
    }

    /// Records the blueprint with each thread it starts, so the thread can be resumed (`graph
    /// resume`) without the file.
    pub fn with_source(mut self, source: crate::blueprint::Source) -> Self {
        self.source = Some(source);
        self
    }

    /// The sub-graph blueprints the graph was bound with (see
    /// [`Allowlist::reachable_graphs`](crate::blueprint::Allowlist::reachable_graphs)), recorded
    /// with each thread next to its blueprint.
    pub fn with_subgraphs(mut self, subgraphs: std::collections::BTreeMap<String, crate::blueprint::Source>) -> Self {
        self.subgraphs = subgraphs;
        self
    }

    /// The thread a run in `scope` uses.
    pub fn thread_of(&self, scope: &RunScope) -> String {
        format!("{}-{}", self.name, scope.ids().run_id)
    }

    /// Keeps the checkpoints of its threads in `store`.
    pub fn with_store(mut self, store: Arc<dyn Checkpointer>) -> Self {
        self.store = store;
        self
    }

    /// Offers it under `name`, described for a model.
    pub fn with_identity(mut self, name: impl Into<String>, description: Option<String>) -> Self {
        self.name = name.into();
        if let Some(d) = description {
            self.description = d;
        }
        self
    }

    /// Runs on `thread`, held by this run ([`recursive_store::durable`]).
    async fn run_held(&self, input: RunInput, thread: Thread, scope: &RunScope) -> Outcome {
        if let Some(source) = &self.source {
            let info = ThreadInfo {
                thread: thread.id.clone(),
                graph: self.graph.name().to_string(),
                blueprint: Some(source.text.clone()),
                origin: Some(source.origin.clone()),
                subgraphs: Some(self.subgraphs.clone()),
                created_at: chrono::Utc::now(),
            };
            if let Err(e) = thread.store.put_thread(&info).await {
                return Outcome::fault(format!("the checkpoint store: {e}"), scope);
            }
        }
        let start = Start::Input(self.initial_state(input));
        match self.graph.run(start, &thread, scope).await {
            Err(e) => Outcome::fault(e.to_string(), scope),
            Ok(outcome) => {
                let text = match outcome.state.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None if matches!(outcome.finish, Finish::Done) => String::new(),
                    None => outcome.finish.to_string(),
                };
                let mut o = Outcome::new(outcome.finish.finish_reason(), text, scope);
                o.output = Value::Object(outcome.state);
                o.steps = u32::try_from(outcome.step).unwrap_or(u32::MAX);
                o
            }
        }
    }

    fn initial_state(&self, input: RunInput) -> Value {
        let mut state = input.data;
        if !input.text.is_empty() && self.graph.schema().channels().any(|(n, _)| n == "input") {
            state.entry("input").or_insert(Value::String(input.text));
        }
        Value::Object(state)
    }
}

#[async_trait]
impl Runnable for GraphRunnable {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> RunnableKind {
        RunnableKind::Graph
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome {
        let thread = self.thread_of(scope);
        let key = DurableKey::thread(&thread);
        let ran = run_durable(self.store.clone(), &key, scope, async |held: &HeldRun| {
            let outcome = self.run_held(input, Thread::new(held.store(), thread.clone()), held.scope()).await;
            let ended = outcome.finish_reason != recursive_core::FinishReason::Fault;
            (outcome, ended)
        })
        .await;
        ran.unwrap_or_else(|e| Outcome::fault(format!("the checkpoint store: {e}"), scope))
    }
}

//! The superstep executor. A run goes from checkpoint to checkpoint: the active nodes of a
//! step run concurrently on a snapshot of the state, each in its own child run; each stores
//! its update as a pending write the moment it finishes; when all have finished, the updates
//! are folded in declaration order, the next active set is routed from the new state, and a
//! checkpoint is written. A crash loses at most the nodes still running: on resume, the
//! pending writes of the unfinished step are reused and only the other nodes run.
//!
//! The recursion policy (supersteps, visits per node, depth) and the tree's stop signals are
//! checked before any node of a step runs, and end the run with a typed [`Finish`].

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;
use futures::future::join_all;
use recursive_core::{Extension, FinishReason, RunScope};
use recursive_store::checkpoint::{Checkpoint, Checkpointer, Pause, PendingWrite, Source, StoreError, When, Write};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::events::GraphEvent;
use crate::events::NodeOutcome;
use crate::graph::{Graph, START};
use crate::node::{Nested, NodeContext, NodeError};
use crate::state::{State, StateError, Update};

/// Why a run of a graph ended. Limits are data, not errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Finish {
    /// No node is left to run.
    Done,
    /// The run waits for `resume` (a pause before/after a node, or a node asking for a value).
    Interrupted(Interruption),
    /// `max_supersteps` was reached.
    SuperstepLimit {
        /// The limit.
        max: u32,
    },
    /// A node would run more than `max_visits` times.
    VisitLimit {
        /// The node.
        node: String,
        /// The limit.
        max: u32,
    },
    /// A node would run deeper in the run tree than `max_depth`.
    DepthLimit {
        /// The node.
        node: String,
        /// The limit.
        max: u32,
    },
    /// The run tree stopped it (cancellation, a budget, the wall clock).
    Stopped {
        /// Why.
        reason: FinishReason,
    },
}

impl Finish {
    /// Snake-case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Finish::Done => "done",
            Finish::Interrupted(_) => "interrupted",
            Finish::SuperstepLimit { .. } => "superstep_limit",
            Finish::VisitLimit { .. } => "visit_limit",
            Finish::DepthLimit { .. } => "depth_limit",
            Finish::Stopped { .. } => "stopped",
        }
    }

    /// The run tree's finish reason for it (for exit statuses).
    pub fn finish_reason(&self) -> FinishReason {
        match self {
            Finish::Done => FinishReason::Completed,
            Finish::Interrupted(_) => FinishReason::Interrupted,
            Finish::SuperstepLimit { .. } | Finish::VisitLimit { .. } | Finish::DepthLimit { .. } => {
                FinishReason::RecursionLimit
            }
            Finish::Stopped { reason } => reason.clone(),
        }
    }
}

impl std::fmt::Display for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finish::Done => f.write_str("done"),
            Finish::Interrupted(i) => write!(f, "interrupted {} {}", i.when, i.at()),
            Finish::SuperstepLimit { max } => write!(f, "superstep_limit: {max} supersteps reached"),
            Finish::VisitLimit { node, max } => write!(f, "visit_limit: node `{node}` would run more than {max} times"),
            Finish::DepthLimit { node, max } => {
                write!(f, "depth_limit: node `{node}` would run deeper than depth {max}")
            }
            Finish::Stopped { reason } => write!(f, "stopped: {reason}"),
        }
    }
}

/// Where and why a run waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interruption {
    /// Before or after named nodes (a pause), or a node asking for a value.
    pub when: When,
    /// The nodes, outermost graph's first: a node inside a sub-graph is reached through the
    /// sub-graph's node.
    pub path: Vec<String>,
    /// What is asked (for `ask`), or the paused nodes.
    pub payload: Value,
}

impl Interruption {
    /// `a/b/c` for a nested node.
    pub fn at(&self) -> String {
        self.path.join("/")
    }
}

/// How a run starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// New input (an object of channel values), on a new thread or one whose run finished.
    Input(Value),
    /// Continue the thread from its latest checkpoint: after a crash, a pause, or with the
    /// value a node asked for.
    Resume(Option<Value>),
    /// Continue from the latest checkpoint with the limits counted afresh from it (visits per
    /// node and supersteps): a thread that stopped on `[limits]` goes on.
    RaiseLimits(Option<Value>),
    /// Run again from an earlier checkpoint (time travel); the thread's history branches.
    From {
        /// The checkpoint.
        checkpoint: String,
        /// The value for a node that asked at that checkpoint, if any.
        value: Option<Value>,
    },
}

/// A thread of a checkpoint store (and the namespace within it: empty at the top).
#[derive(Clone)]
pub struct Thread {
    /// The store.
    pub store: Arc<dyn Checkpointer>,
    /// The thread's id.
    pub id: String,
    /// The namespace (sub-graph runs have their own).
    pub ns: String,
}

impl Thread {
    /// The top namespace of thread `id`.
    pub fn new(store: Arc<dyn Checkpointer>, id: impl Into<String>) -> Self {
        Self { store, id: id.into(), ns: String::new() }
    }
}

/// What a run of a graph ends with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphOutcome {
    /// How it ended.
    pub finish: Finish,
    /// The state at its last checkpoint (with a failed or interrupted step: before that step).
    pub state: State,
    /// The last checkpoint.
    pub checkpoint: String,
    /// Supersteps completed on this branch.
    pub step: u64,
    /// The thread.
    pub thread: String,
}

/// A run that could not go on (its thread stays resumable).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The checkpoint store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Nothing is stored for the thread.
    #[error("thread `{0}` has no checkpoints")]
    NoThread(String),
    /// New input for a thread whose run has not finished.
    #[error("thread `{0}` has an unfinished run: resume it, or start a new thread")]
    Unfinished(String),
    /// A value was given but no node asks for one.
    #[error("thread `{0}` does not wait for a value: resume it without one")]
    NothingAsks(String),
    /// No such checkpoint on the thread.
    #[error("thread `{thread}` has no checkpoint `{checkpoint}`")]
    NoCheckpoint {
        /// The thread.
        thread: String,
        /// The id asked for.
        checkpoint: String,
    },
    /// The input does not fit the state.
    #[error("input: {0}")]
    Input(String),
    /// A node failed (the step's other results are kept; resume runs it again).
    #[error("node `{node}` failed: {message}")]
    Node {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
}

/// What became of one node of a step.
enum Ran {
    Update(Update),
    Asked { payload: Value, path: Vec<String> },
    Stopped(FinishReason),
    Limit(Finish),
    Failed(String),
}

impl Graph {
    /// Runs the graph on `thread` until no node is left, it is interrupted, or a limit or the
    /// run tree stops it. Nodes run as children of `scope`.
    pub async fn run(&self, start: Start, thread: &Thread, scope: &RunScope) -> Result<GraphOutcome, GraphError> {
        let (mut cp, mut value, resumed) = self.begin(start, thread).await?;
        scope.emit(
            0,
            event(GraphEvent::GraphStarted {
                graph: self.name.clone(),
                thread: thread.id.clone(),
                ns: thread.ns.clone(),
                checkpoint: cp.id.clone(),
                resumed,
            }),
        );
        let mut resuming = resumed;
        let finish = loop {
            if let Some(finish) = self.must_stop(&cp, resuming, scope) {
                break finish;
            }
            match self.superstep(&cp, value.take(), resuming, thread, scope).await? {
                Ok(next) => cp = next,
                Err(finish) => break finish,
            }
            resuming = false;
        };
        scope.emit(
            cp.step as u32,
            event(GraphEvent::GraphFinished {
                graph: self.name.clone(),
                thread: thread.id.clone(),
                finish: finish.to_string(),
                checkpoint: cp.id.clone(),
            }),
        );
        Ok(GraphOutcome { finish, state: cp.state, checkpoint: cp.id, step: cp.step, thread: thread.id.clone() })
    }

    /// The checkpoint a run starts from, the value to give, and whether it resumes.
    async fn begin(&self, start: Start, thread: &Thread) -> Result<(Checkpoint, Option<Value>, bool), GraphError> {
        let store = &thread.store;
        match start {
            Start::Input(input) => {
                let latest = store.latest(&thread.id, &thread.ns).await?;
                if latest.as_ref().is_some_and(|l| !l.is_done()) {
                    return Err(GraphError::Unfinished(thread.id.clone()));
                }
                let Value::Object(update) = input else {
                    return Err(GraphError::Input(format!("expected an object of channel values, got {input}")));
                };
                let mut state = latest.as_ref().map(|l| l.state.clone()).unwrap_or_else(|| self.schema.empty_state());
                self.schema.apply(&mut state, &update).map_err(|e| GraphError::Input(e.to_string()))?;
                let next = self.route(&[START.to_string()], &state);
                let step = latest.as_ref().map(|l| l.step).unwrap_or(0);
                let cp = Checkpoint {
                    id: Checkpoint::new_id(),
                    thread: thread.id.clone(),
                    ns: thread.ns.clone(),
                    parent: latest.as_ref().map(|l| l.id.clone()),
                    step,
                    base_step: step,
                    pause: self.pause(&[], &next),
                    state,
                    next,
                    visits: BTreeMap::new(),
                    source: Source::Input,
                    created_at: Utc::now(),
                };
                store.put(&cp).await?;
                Ok((cp, None, false))
            }
            Start::Resume(value) => {
                let cp = store.latest(&thread.id, &thread.ns).await?.ok_or(GraphError::NoThread(thread.id.clone()))?;
                if value.is_some() && cp.is_done() {
                    return Err(GraphError::NothingAsks(thread.id.clone()));
                }
                Ok((cp, value, true))
            }
            Start::RaiseLimits(value) => {
                let cp = store.latest(&thread.id, &thread.ns).await?.ok_or(GraphError::NoThread(thread.id.clone()))?;
                if cp.is_done() {
                    return Ok((cp, value, true));
                }
                let mut raised = branch(&cp, Source::Raise, cp.state.clone());
                raised.visits = BTreeMap::new();
                raised.base_step = raised.step;
                raised.pause = cp.pause.clone();
                store.put(&raised).await?;
                // The step's finished nodes and questions stay with the copy.
                for w in store.writes(&thread.id, &cp.id).await? {
                    store.put_write(&thread.id, &raised.id, &w).await?;
                }
                Ok((raised, value, true))
            }
            Start::From { checkpoint, value } => {
                // At the top, only the top graph's checkpoints (a sub-graph continues from one of
                // an earlier run of its node, in another namespace).
                let from = store
                    .get(&thread.id, &checkpoint)
                    .await?
                    .filter(|c| !thread.ns.is_empty() || c.ns.is_empty())
                    .ok_or_else(|| GraphError::NoCheckpoint {
                        thread: thread.id.clone(),
                        checkpoint: checkpoint.clone(),
                    })?;
                let mut replay = branch(&from, Source::Replay, from.state.clone());
                // A sub-graph's run continues from a checkpoint of an earlier run of its node.
                replay.ns = thread.ns.clone();
                store.put(&replay).await?;
                // What nodes asked at the original checkpoint, they ask again at the copy (a
                // sub-graph that asked and then finished, from where it asked).
                for w in store.writes(&thread.id, &from.id).await? {
                    if let Some(asked) = asked_again(w) {
                        store.put_write(&thread.id, &replay.id, &asked).await?;
                    }
                }
                Ok((replay, value, true))
            }
        }
    }

    /// A finish that applies before the step at `cp` runs: done, paused, a limit, a stop.
    fn must_stop(&self, cp: &Checkpoint, resuming: bool, scope: &RunScope) -> Option<Finish> {
        if cp.is_done() {
            return Some(Finish::Done);
        }
        if let Some(pause) = cp.pause.as_ref().filter(|_| !resuming) {
            return Some(Finish::Interrupted(Interruption {
                when: pause.when,
                path: pause.nodes.iter().take(1).cloned().collect(),
                payload: json!({ "paused": pause.when, "nodes": pause.nodes }),
            }));
        }
        if let Some(reason) = scope.stop_reason() {
            return Some(Finish::Stopped { reason });
        }
        let policy = &self.policy;
        if cp.step.saturating_sub(cp.base_step) >= u64::from(policy.max_supersteps) {
            return Some(Finish::SuperstepLimit { max: policy.max_supersteps });
        }
        if let Some(node) = cp.next.iter().find(|n| cp.visits.get(*n).copied().unwrap_or(0) >= policy.max_visits) {
            return Some(Finish::VisitLimit { node: node.clone(), max: policy.max_visits });
        }
        if scope.depth() + 1 > policy.max_depth {
            return Some(Finish::DepthLimit { node: cp.next[0].clone(), max: policy.max_depth });
        }
        None
    }

    /// Runs the step that starts at `cp`: the next checkpoint, or how the run ends.
    async fn superstep(
        &self,
        cp: &Checkpoint,
        value: Option<Value>,
        resuming: bool,
        thread: &Thread,
        scope: &RunScope,
    ) -> Result<Result<Checkpoint, Finish>, GraphError> {
        let store = &thread.store;
        let writes = store.writes(&thread.id, &cp.id).await?;
        let mut done: BTreeMap<String, Update> = BTreeMap::new();
        // The nodes that asked, and where their nested runs asked (a sub-graph's checkpoint).
        let mut asked: BTreeMap<String, Option<String>> = BTreeMap::new();
        for w in writes {
            match w.write {
                Write::Update { update } => {
                    done.insert(w.node, update);
                }
                Write::Interrupt { .. } => {
                    asked.insert(w.node, w.asked_at);
                }
            }
        }
        // The value goes to the first node (in declaration order) that asked; replaying from
        // an earlier checkpoint, to the first that can ask.
        let can_ask = |n: &&String| self.node(n).is_some_and(|node| node.resumable());
        let answered = cp
            .next
            .iter()
            .find(|n| asked.contains_key(*n))
            .or_else(|| cp.next.iter().filter(|n| !done.contains_key(*n)).find(can_ask))
            .filter(|_| resuming)
            .cloned();
        if value.is_some() && answered.is_none() {
            return Err(GraphError::NothingAsks(thread.id.clone()));
        }
        let reused: Vec<String> = cp.next.iter().filter(|n| done.contains_key(*n)).cloned().collect();
        scope.emit(
            cp.step as u32,
            event(GraphEvent::GraphSuperstep { step: cp.step, nodes: cp.next.clone(), reused: reused.clone() }),
        );
        let to_run: Vec<&String> = cp.next.iter().filter(|n| !done.contains_key(*n)).collect();
        let runs = to_run.iter().map(|node| {
            let given = if answered.as_deref() == Some(node.as_str()) { value.as_ref() } else { None };
            let resume_from = asked.get(*node).cloned().flatten();
            let resumed = Resumed { value: given, from: resume_from, legacy: resuming };
            self.run_node(node, cp, resumed, thread, scope)
        });
        let results = join_all(runs).await;
        // The first node (in declaration order) that stopped decides how the run ends.
        let mut stop = None;
        for (node, ran) in to_run.into_iter().zip(results) {
            let finish = match ran? {
                Ran::Update(update) => {
                    done.insert(node.clone(), update);
                    continue;
                }
                Ran::Failed(message) => return Err(GraphError::Node { node: node.clone(), message }),
                Ran::Asked { payload, path } => Finish::Interrupted(Interruption {
                    when: When::Ask,
                    path: std::iter::once(node.clone()).chain(path).collect(),
                    payload,
                }),
                Ran::Stopped(reason) => Finish::Stopped { reason },
                Ran::Limit(finish) => finish,
            };
            stop = stop.or(Some(finish));
        }
        match stop {
            Some(finish) => Ok(Err(finish)),
            None => self.fold(cp, done, thread, scope).await.map(Ok),
        }
    }

    /// Folds the step's updates in declaration order and writes the next checkpoint.
    async fn fold(
        &self,
        cp: &Checkpoint,
        mut done: BTreeMap<String, Update>,
        thread: &Thread,
        scope: &RunScope,
    ) -> Result<Checkpoint, GraphError> {
        let mut state = cp.state.clone();
        let mut visits = cp.visits.clone();
        for node in &cp.next {
            let update = done.remove(node).unwrap_or_default();
            self.schema
                .apply(&mut state, &update)
                .map_err(|e: StateError| GraphError::Node { node: node.clone(), message: e.to_string() })?;
            *visits.entry(node.clone()).or_insert(0) += 1;
        }
        let next = self.route(&cp.next, &state);
        let new = Checkpoint {
            id: Checkpoint::new_id(),
            thread: cp.thread.clone(),
            ns: cp.ns.clone(),
            parent: Some(cp.id.clone()),
            step: cp.step + 1,
            state,
            visits: self.live_visits(visits, &next),
            pause: self.pause(&cp.next, &next),
            next,
            base_step: cp.base_step,
            source: Source::Step,
            created_at: Utc::now(),
        };
        thread.store.put(&new).await?;
        scope.emit(
            new.step as u32,
            event(GraphEvent::GraphCheckpoint { checkpoint: new.id.clone(), step: new.step, next: new.next.clone() }),
        );
        Ok(new)
    }

    /// The visit counts a checkpoint before `next` keeps: those of nodes that may still run. A
    /// node ranked below every node of `next` cannot be reached again in this run (see
    /// [`crate::index`]), so a long chain's checkpoints do not carry every node it passed.
    fn live_visits(&self, mut visits: BTreeMap<String, u32>, next: &[String]) -> BTreeMap<String, u32> {
        let Some(floor) = next.iter().filter_map(|n| self.index.rank(n)).min() else {
            return BTreeMap::new();
        };
        visits.retain(|node, _| self.index.rank(node).is_some_and(|rank| rank >= floor));
        visits
    }

    /// The pause of a checkpoint after `ran`, before `next`.
    fn pause(&self, ran: &[String], next: &[String]) -> Option<Pause> {
        let after: Vec<String> = ran.iter().filter(|n| self.interrupt_after.contains(*n)).cloned().collect();
        if !after.is_empty() && !next.is_empty() {
            return Some(Pause { when: When::After, nodes: after });
        }
        let before: Vec<String> = next.iter().filter(|n| self.interrupt_before.contains(*n)).cloned().collect();
        (!before.is_empty()).then_some(Pause { when: When::Before, nodes: before })
    }

    /// Runs one node in a child run and stores its pending write as soon as it has one.
    async fn run_node(
        &self,
        name: &str,
        cp: &Checkpoint,
        resume: Resumed<'_>,
        thread: &Thread,
        scope: &RunScope,
    ) -> Result<Ran, GraphError> {
        let step = cp.step as u32;
        let Some(node) = self.node(name) else {
            return Ok(Ran::Failed(format!("the graph has no node `{name}`")));
        };
        let child = match scope.child(name) {
            Ok(child) => child,
            Err(e) => return Ok(Ran::Limit(Finish::DepthLimit { node: name.to_string(), max: e.max_depth })),
        };
        child.emit(step, event(GraphEvent::GraphNodeStarted { node: name.into(), kind: node.kind().into() }));
        let mut ns = nested_ns(&thread.ns, name, &runs_key(thread, cp).await?, cp.step);
        if resume.legacy
            && let Some(legacy) = legacy_ns(thread, name, cp).await?
        {
            ns = legacy;
        }
        let nested = Nested {
            store: thread.store.clone(),
            thread: thread.id.clone(),
            ns,
            resume_from: resume.from,
            raise: cp.source == Source::Raise,
        };
        let nested_ns = nested.ns.clone();
        let first_asked = nested.resume_from.clone();
        let ctx = NodeContext { node: name, step, state: &cp.state, scope: &child, resume: resume.value, nested };
        // Cancellation and the tree's deadline end any node, also one that only computes; a
        // node that ends as the run is stopped (within STOP_GRACE) keeps its result.
        let stop = child.stop_token();
        let run = node.run(ctx);
        tokio::pin!(run);
        let result = tokio::select! {
            biased;
            r = &mut run => r,
            _ = stop.cancelled() => match tokio::time::timeout(STOP_GRACE, &mut run).await {
                Ok(r) => r,
                Err(_) => Err(NodeError::Stopped(child.stop_reason().unwrap_or(FinishReason::Cancelled))),
            },
        };
        let (ran, write) = match result {
            Ok(update) => match self.schema.check(&update) {
                Ok(()) => (Ran::Update(update.clone()), Some(Write::Update { update })),
                Err(e) => (Ran::Failed(e.to_string()), None),
            },
            Err(NodeError::Interrupt { payload, path }) => {
                (Ran::Asked { payload: payload.clone(), path }, Some(Write::Interrupt { payload }))
            }
            Err(NodeError::Stopped(reason)) => (Ran::Stopped(reason), None),
            Err(NodeError::Limit(finish)) => (Ran::Limit(finish), None),
            Err(NodeError::Failed(message)) => (Ran::Failed(message), None),
        };
        if let Some(write) = write {
            let asked_at = match (&write, first_asked) {
                (_, Some(first)) => Some(first),
                (Write::Interrupt { .. }, None) => asked_at(thread, &nested_ns).await?,
                (Write::Update { .. }, None) => None,
            };
            let pending = PendingWrite { node: name.to_string(), write, asked_at };
            thread.store.put_write(&thread.id, &cp.id, &pending).await?;
        }
        child.emit(step, event(finished(name, &ran)));
        Ok(ran)
    }
}

/// What a node is resumed with: the value it asked for, and where its nested run asked.
struct Resumed<'a> {
    value: Option<&'a Value>,
    from: Option<String>,
    /// The first step of a resumed run: a nested run may sit in a namespace of the old form.
    legacy: bool,
}

/// The namespace of a nested run of node `name` in the step `step` that starts at checkpoint
/// `key`: keyed by the checkpoint, so a step run again from a copy (time travel, a fork) never
/// finds a run made under another checkpoint, while a resume of the same step finds its own.
fn nested_ns(ns: &str, name: &str, key: &str, step: u64) -> String {
    let sep = if ns.is_empty() { "" } else { "/" };
    format!("{ns}{sep}{name}:{step}@{key}")
}

/// The checkpoint whose nested runs the step at `cp` continues: its own, or for a raise of the
/// limits (a copy of the step as it stands) the checkpoint it was raised from.
async fn runs_key(thread: &Thread, cp: &Checkpoint) -> Result<String, GraphError> {
    let (mut id, mut source, mut parent) = (cp.id.clone(), cp.source, cp.parent.clone());
    while source == Source::Raise
        && let Some(from) = parent.take()
        && let Some(raised_from) = thread.store.get(&thread.id, &from).await?
    {
        (id, source, parent) = (raised_from.id, raised_from.source, raised_from.parent);
    }
    Ok(id)
}

/// A write at a checkpoint as copied for time travel back to it: a question asked again, and
/// a sub-graph that asked and then finished asks again from where it asked; nothing else.
fn asked_again(w: PendingWrite) -> Option<PendingWrite> {
    match w.write {
        Write::Interrupt { .. } => Some(w),
        Write::Update { .. } => w.asked_at.map(|at| PendingWrite {
            node: w.node,
            write: Write::Interrupt { payload: json!({ "asked_at": at }) },
            asked_at: Some(at),
        }),
    }
}

/// Threads stored before nested runs were keyed by checkpoint kept them under `node:step`: a
/// run found there that started under `cp` (no earlier than it) is continued where it is.
async fn legacy_ns(thread: &Thread, name: &str, cp: &Checkpoint) -> Result<Option<String>, GraphError> {
    let sep = if thread.ns.is_empty() { "" } else { "/" };
    let ns = format!("{}{sep}{name}:{}", thread.ns, cp.step);
    for slot in [ns.clone(), format!("{ns}{}", crate::node::RUN_SUFFIX)] {
        let latest = thread.store.latest(&thread.id, &slot).await?;
        if latest.is_some_and(|l| l.created_at >= cp.created_at) {
            return Ok(Some(ns));
        }
    }
    Ok(None)
}

/// Where a node's nested run (a sub-graph) stands as the node asks: its latest checkpoint.
async fn asked_at(thread: &Thread, ns: &str) -> Result<Option<String>, GraphError> {
    Ok(thread.store.latest(&thread.id, ns).await?.map(|c| c.id))
}

/// How long a node may still take to end once its run is stopped (a node that handles the stop
/// itself ends at once; a function still computing is abandoned after it).
const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

fn finished(node: &str, ran: &Ran) -> GraphEvent {
    let (outcome, detail) = match ran {
        Ran::Update(u) => (NodeOutcome::Ok, json!(u.keys().collect::<Vec<_>>())),
        Ran::Asked { payload, .. } => (NodeOutcome::Interrupt, payload.clone()),
        Ran::Stopped(r) => (NodeOutcome::Stopped, json!(r.as_str())),
        Ran::Limit(f) => (NodeOutcome::Stopped, json!(f.to_string())),
        Ran::Failed(m) => (NodeOutcome::Failed, json!(m)),
    };
    GraphEvent::GraphNodeFinished { node: node.into(), outcome, detail }
}

/// A new checkpoint that follows `from` with `state` (same step, next and visits).
fn branch(from: &Checkpoint, source: Source, state: State) -> Checkpoint {
    Checkpoint {
        id: Checkpoint::new_id(),
        thread: from.thread.clone(),
        ns: from.ns.clone(),
        parent: Some(from.id.clone()),
        step: from.step,
        state,
        next: from.next.clone(),
        visits: from.visits.clone(),
        base_step: from.base_step,
        pause: None,
        source,
        created_at: Utc::now(),
    }
}

/// Writes a copy of checkpoint `id` of `thread` with `edits` (channel → value, replacing) to
/// thread `into` (the same thread, or a new one): a fork of the history that `resume`
/// continues from. Returns the new checkpoint.
pub async fn fork(
    schema: &crate::state::Schema,
    store: &Arc<dyn Checkpointer>,
    thread: &str,
    id: &str,
    edits: &Update,
    into: &str,
) -> Result<Checkpoint, GraphError> {
    let from = store
        .get(thread, id)
        .await?
        .ok_or_else(|| GraphError::NoCheckpoint { thread: thread.into(), checkpoint: id.into() })?;
    let mut state = from.state.clone();
    for (name, value) in edits {
        let channel = schema.channel(name).ok_or_else(|| GraphError::Input(format!("no channel `{name}`")))?;
        if !channel.kind.accepts(value) {
            return Err(GraphError::Input(format!(
                "channel `{name}` holds a {}, not {}",
                channel.kind.as_str(),
                crate::state::type_of(value)
            )));
        }
        state.insert(name.clone(), value.clone());
    }
    let mut fork = branch(&from, Source::Fork, state);
    fork.thread = into.to_string();
    fork.ns = String::new();
    // A fork is a new run of its own: its limits count from here.
    fork.visits = BTreeMap::new();
    fork.base_step = fork.step;
    store.put(&fork).await?;
    Ok(fork)
}

fn event(e: GraphEvent) -> recursive_core::EventKind {
    recursive_core::EventKind::Extension(Extension::new(e))
}

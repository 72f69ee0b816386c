//! The graph threads `serve --graphs DIR` offers: every blueprint in DIR by its file stem (the
//! only names a request can give — never a path), bound with this program's harness and run
//! through [`Harness::run_thread`] on the server's store, as the `graph` command runs them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::RunScope;
use recursive_graph::blueprint::{self, Source};
use recursive_graph::{Finish, GraphOutcome, Schema, Start};
use recursive_harness::{Harness, SubGraphs, ThreadError};
use recursive_serve::RunOutput;
use recursive_serve::threads::{ForkRequest, GraphHost, GraphInfo, HostError, ThreadRunRequest, ThreadView};
use recursive_store::{Checkpointer, ThreadInfo, ThreadStatus, Write};
use serde_json::{Value, json};

use crate::ConfigError;

/// The graphs of a directory, on a store.
pub struct ServedGraphs {
    harness: Arc<Harness>,
    store: Arc<dyn Checkpointer>,
    dir: PathBuf,
    offered: Vec<(GraphInfo, Source)>,
}

impl ServedGraphs {
    /// Every blueprint in `dir`, each checked to bind now (a broken one is named, exit 2).
    pub fn load(harness: Arc<Harness>, store: Arc<dyn Checkpointer>, dir: &Path) -> Result<Self, ConfigError> {
        let dir = std::fs::canonicalize(dir).map_err(|e| ConfigError(format!("--graphs {}: {e}", dir.display())))?;
        let sources = SubGraphs::Files(Some(dir.clone()), Vec::new()).sources();
        if sources.is_empty() {
            return Err(ConfigError(format!("--graphs {}: no blueprint (*.toml) in it", dir.display())));
        }
        let allow = harness.allowlist(sources.clone())?;
        let mut offered = Vec::new();
        for (name, source) in sources {
            blueprint::load(&source, &allow).map_err(|d| ConfigError(format!("--graphs: {d}")))?;
            let bp = blueprint::compile(&source.text, &source.origin).map_err(|d| ConfigError(d.to_string()))?;
            let info = GraphInfo { name, description: bp.description.clone(), mermaid: blueprint::mermaid(&bp) };
            offered.push((info, source));
        }
        Ok(Self { harness, store, dir, offered })
    }

    fn failed(e: impl std::fmt::Display) -> HostError {
        HostError::Failed(e.to_string())
    }

    /// A thread's view from its record and latest checkpoint; its status by the one rule
    /// ([`ThreadStatus::of`]), and what an interrupted one waits for.
    async fn view(&self, info: &ThreadInfo) -> Result<ThreadView, HostError> {
        let (status, latest, writes) =
            ThreadStatus::read(self.store.as_ref(), &info.thread).await.map_err(Self::failed)?;
        let mut view = ThreadView {
            thread_id: info.thread.clone(),
            graph: info.graph.clone(),
            created_at: info.created_at.to_rfc3339(),
            status,
            checkpoint: None,
            step: 0,
            next: Vec::new(),
            values: json!({}),
            interrupt: None,
        };
        let Some(cp) = latest else { return Ok(view) };
        if status == ThreadStatus::Interrupted {
            let asked = writes.iter().find_map(|w| match &w.write {
                Write::Interrupt { payload } => Some(json!({"when": "ask", "node": w.node, "payload": payload})),
                Write::Update { .. } => None,
            });
            let paused = cp.pause.as_ref().map(|p| json!({"when": p.when, "nodes": p.nodes}));
            view.interrupt = asked.or(paused);
        }
        view.values = serde_json::to_value(&cp.state).map_err(Self::failed)?;
        (view.checkpoint, view.step, view.next) = (Some(cp.id.clone()), cp.step, cp.next.clone());
        Ok(view)
    }

    async fn info(&self, thread: &str) -> Result<ThreadInfo, HostError> {
        let info = self
            .store
            .thread(thread)
            .await
            .map_err(Self::failed)?
            .ok_or_else(|| HostError::NotFound(format!("no thread `{thread}`")))?;
        self.offered_thread(info)
    }

    /// `info` when its blueprint is one this server offers (the same file, or the same text);
    /// a thread of another blueprint in the same store (one `graph run` made) is not served.
    fn offered_thread(&self, info: ThreadInfo) -> Result<ThreadInfo, HostError> {
        let offered = self.offered.iter().any(|(_, source)| {
            info.origin.as_deref() == Some(source.origin.as_str()) || info.blueprint.as_deref() == Some(&source.text)
        });
        if offered {
            return Ok(info);
        }
        Err(HostError::NotFound(format!(
            "thread `{}` runs the graph `{}`, which this server does not offer (see GET /v1/graphs)",
            info.thread, info.graph
        )))
    }
}

/// How a request starts a thread's run.
fn start_of(request: ThreadRunRequest) -> Start {
    match request {
        ThreadRunRequest { input: Some(input), .. } => Start::Input(Value::Object(input)),
        ThreadRunRequest { checkpoint: Some(checkpoint), resume, .. } => Start::From { checkpoint, value: resume },
        ThreadRunRequest { raise_limits: true, resume, .. } => Start::RaiseLimits(resume),
        ThreadRunRequest { resume, .. } => Start::Resume(resume),
    }
}

/// A thread run's outcome as the runs API reports it.
fn output_of(outcome: &GraphOutcome, scope: &RunScope) -> RunOutput {
    let finish = outcome.finish.finish_reason();
    let interrupt = match &outcome.finish {
        Finish::Interrupted(i) => json!({"when": i.when, "at": i.at(), "payload": i.payload}),
        _ => Value::Null,
    };
    RunOutput {
        ok: finish.is_success(),
        text: format!("thread {}: {}", outcome.thread, outcome.finish),
        output: json!({
            "thread": outcome.thread, "finish": outcome.finish.as_str(), "state": outcome.state,
            "checkpoint": outcome.checkpoint, "step": outcome.step, "interrupt": interrupt,
        }),
        error: None,
        input_tokens: scope.usage().input_tokens,
        output_tokens: scope.usage().output_tokens,
        cost_usd: Some(scope.cost_usd()),
        outcome: finish,
        ..RunOutput::failed("")
    }
}

/// Why a thread did not run, as the runs API reports it.
fn failure_of(e: &ThreadError, thread: &str) -> String {
    match e {
        ThreadError::Graph(recursive_graph::GraphError::Unfinished(_)) => format!(
            "thread `{thread}` has an unfinished run: continue it (`resume`, or `raise_limits` if it stopped on its \
             [limits]) or start a new thread"
        ),
        ThreadError::Graph(recursive_graph::GraphError::NothingAsks(_)) => {
            format!("thread `{thread}` does not wait for a value: resume it without one")
        }
        other => other.to_string(),
    }
}

#[async_trait]
impl GraphHost for ServedGraphs {
    fn graphs(&self) -> Vec<GraphInfo> {
        self.offered.iter().map(|(info, _)| info.clone()).collect()
    }

    async fn create(&self, graph: &str) -> Result<ThreadView, HostError> {
        let Some((_, source)) = self.offered.iter().find(|(info, _)| info.name == graph) else {
            let names: Vec<&str> = self.offered.iter().map(|(i, _)| i.name.as_str()).collect();
            return Err(HostError::NotFound(format!("no graph `{graph}`; this server offers {}", names.join(", "))));
        };
        let allow = self
            .harness
            .allowlist(SubGraphs::Files(Some(self.dir.clone()), Vec::new()).sources())
            .map_err(Self::failed)?;
        let bound = blueprint::load(source, &allow).map_err(|d| HostError::Invalid(d.to_string()))?;
        let info = ThreadInfo {
            thread: crate::sessions::new_id(),
            graph: bound.name().to_string(),
            blueprint: Some(source.text.clone()),
            origin: Some(source.origin.clone()),
            subgraphs: Some(allow.reachable_graphs(source)),
            created_at: chrono::Utc::now(),
        };
        self.store.put_thread(&info).await.map_err(Self::failed)?;
        self.view(&info).await
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadView>, HostError> {
        match self.store.thread(thread).await.map_err(Self::failed)? {
            Some(info) => self.view(&self.offered_thread(info)?).await.map(Some),
            None => Ok(None),
        }
    }

    async fn history(&self, thread: &str) -> Result<Vec<Value>, HostError> {
        self.info(thread).await?;
        let list = self.store.list(thread, "").await.map_err(Self::failed)?;
        list.iter().map(|c| serde_json::to_value(c).map_err(Self::failed)).collect()
    }

    async fn fork(&self, thread: &str, fork: ForkRequest) -> Result<ThreadView, HostError> {
        let info = self.info(thread).await?;
        let text = info.blueprint.clone().unwrap_or_default();
        let bp = blueprint::compile(&text, info.origin.as_deref().unwrap_or_default())
            .map_err(|d| HostError::Failed(d.to_string()))?;
        let schema = blueprint::compile::channels(&bp).into_iter().fold(Schema::new(), |s, (n, c)| s.with(n, c));
        let from = match fork.checkpoint {
            Some(id) => id,
            None => self.store.latest(thread, "").await.map_err(Self::failed)?.map(|c| c.id).unwrap_or_default(),
        };
        let into = crate::sessions::new_id();
        let edits = fork.set.unwrap_or_default();
        recursive_graph::fork(&schema, &self.store, thread, &from, &edits, &into)
            .await
            .map_err(|e| HostError::Invalid(e.to_string()))?;
        let forked = ThreadInfo { thread: into, created_at: chrono::Utc::now(), ..info };
        self.store.put_thread(&forked).await.map_err(Self::failed)?;
        self.view(&forked).await
    }

    async fn run(&self, thread: &str, request: ThreadRunRequest, scope: RunScope) -> RunOutput {
        let mut mermaid = None;
        let outcome = match Harness::stored_thread(self.store.as_ref(), thread, start_of(request)).await {
            Ok(Some(run)) => {
                mermaid =
                    blueprint::compile(&run.source.text, &run.source.origin).ok().map(|bp| blueprint::mermaid(&bp));
                self.harness.run_thread(self.store.clone(), run, &scope).await
            }
            Ok(None) => Err(ThreadError::Bind(format!("no thread `{thread}`"))),
            Err(e) => Err(e),
        };
        match &outcome {
            Ok(o) => {
                let mut output = output_of(o, &scope);
                // The web view draws the graph from it.
                output.output["mermaid"] = mermaid.map_or(Value::Null, Value::String);
                output
            }
            Err(e) => RunOutput { cost_usd: Some(scope.cost_usd()), ..RunOutput::failed(failure_of(e, thread)) },
        }
    }
}

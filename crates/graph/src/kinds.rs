//! The node kinds: a model call, a tool call, any registered runnable (an agent run, an RLM,
//! a goal pursuit, a graph), a question for a person, and a sub-graph. Each does its work through the spine —
//! the guarded model call, the tool executor, the budget tree — in the node's child run; none
//! brings its own copy of those.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    ChatOptions, ChatProvider, ChatRequest, FinishReason, Message, ModelCall, ModelCallError, RunInput, Runnable,
    ToolCall, ToolInvoker,
};
use serde_json::{Map, Value, json};

use crate::exec::{Finish, Start, Thread};
use crate::graph::Graph;
use crate::node::{Node, NodeContext, NodeError};
use crate::state::Update;
use crate::template::{Template, render_json};

fn one(channel: &str, value: Value) -> Update {
    let mut m = Map::new();
    m.insert(channel.to_string(), value);
    m
}

/// How a node's child run ended: a stop of the run tree stops the graph too; any other
/// unsuccessful end fails the node with `failure`.
fn settle(finish: FinishReason, succeeded: bool, failure: impl FnOnce() -> String) -> Result<(), NodeError> {
    if finish.is_tree_stop() {
        return Err(NodeError::Stopped(finish));
    }
    if !succeeded {
        return Err(NodeError::Failed(failure()));
    }
    Ok(())
}

fn stopped(e: ModelCallError) -> NodeError {
    match e {
        ModelCallError::Stopped(reason) => NodeError::Stopped(reason),
        ModelCallError::Provider(p) => NodeError::Failed(p.to_string()),
    }
}

/// One model call: the rendered prompt (and optional system text) in, the answer's text out.
pub struct ModelNode {
    /// The model.
    pub provider: Arc<dyn ChatProvider>,
    /// Call options (the model name, temperature...).
    pub options: ChatOptions,
    /// System text.
    pub system: Option<Template>,
    /// The prompt.
    pub prompt: Template,
    /// The channel the answer goes to.
    pub output: String,
}

#[async_trait]
impl Node for ModelNode {
    fn kind(&self) -> &'static str {
        "model"
    }

    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError> {
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(Message::system(system.render(ctx.state)));
        }
        messages.push(Message::user(self.prompt.render(ctx.state)));
        let request = ChatRequest { messages, tools: Vec::new(), options: self.options.clone() };
        let response =
            ctx.scope.call_model(self.provider.as_ref(), request, ModelCall::at(ctx.step)).await.map_err(stopped)?;
        Ok(one(&self.output, Value::String(response.message.content)))
    }
}

/// Any registered [`Runnable`] (an agent, an RLM, a goal pursuit, a graph) run as the node:
/// the rendered input is its text, the named channels are its data (an RLM's input
/// variables), and its result goes to the output channel.
pub struct RunnableNode {
    /// What runs.
    pub runnable: Arc<dyn Runnable>,
    /// Its input text.
    pub input: Template,
    /// Channels given as named data.
    pub data: Vec<String>,
    /// The channel the result goes to.
    pub output: String,
}

#[async_trait]
impl Node for RunnableNode {
    fn kind(&self) -> &'static str {
        self.runnable.kind().as_str()
    }

    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError> {
        let mut input = RunInput::text(self.input.render(ctx.state));
        for name in &self.data {
            input.data.insert(name.clone(), ctx.state.get(name).cloned().unwrap_or(Value::Null));
        }
        // A runnable that can resume (an RLM) keeps checkpoints for this invocation of the node.
        input.checkpoint = Some(recursive_core::CheckpointHandle(Arc::new(ctx.nested.run_slot())));
        let outcome = self.runnable.run(input, ctx.scope).await;
        settle(outcome.finish_reason.clone(), outcome.is_success(), || {
            outcome.report(self.runnable.name(), self.runnable.kind())
        })?;
        Ok(one(&self.output, outcome.value(self.runnable.kind())))
    }
}

/// One tool call through the tool executor (permission gate, timeout, output cap, events).
pub struct ToolNode {
    /// The executor holding the tool.
    pub invoker: ToolInvoker,
    /// The tool's name.
    pub tool: String,
    /// Its arguments; every string inside is a template.
    pub args: Value,
    /// The channel the result goes to.
    pub output: String,
}

#[async_trait]
impl Node for ToolNode {
    fn kind(&self) -> &'static str {
        "tool"
    }

    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError> {
        let arguments = render_json(&self.args, ctx.state).map_err(|e| NodeError::Failed(e.to_string()))?;
        let call = ToolCall { id: format!("{}-call", ctx.node), name: self.tool.clone(), arguments };
        let outcome = self.invoker.invoke(call, ctx.scope, ctx.step, None).await;
        if let Some(reason) = outcome.stop {
            return Err(NodeError::Stopped(reason));
        }
        if outcome.is_error {
            return Err(NodeError::Failed(format!("tool `{}`: {}", self.tool, outcome.output)));
        }
        Ok(one(&self.output, Value::String(outcome.output)))
    }
}

/// Asks a person for a value: the run stops until the thread is resumed with one, which
/// goes to the output channel.
pub struct AskNode {
    /// The question.
    pub question: Template,
    /// The channel the answer goes to.
    pub output: String,
}

#[async_trait]
impl Node for AskNode {
    fn kind(&self) -> &'static str {
        "ask"
    }

    fn resumable(&self) -> bool {
        true
    }

    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError> {
        match ctx.resume {
            Some(value) => Ok(one(&self.output, value.clone())),
            None => Err(NodeError::ask(json!({ "question": self.question.render(ctx.state) }))),
        }
    }
}

/// Runs a compiled graph as one node. Without mappings the two graphs share the channels
/// they both have; with them, `inputs` maps child channel ← parent channel and `outputs`
/// parent channel ← child channel. Its checkpoints live in the embedding thread under this
/// node's namespace, so a crash or an interrupt inside it resumes into it.
pub struct SubgraphNode {
    /// The graph.
    pub graph: Arc<Graph>,
    /// Child channel ← parent channel (`None`: shared names).
    pub inputs: Option<BTreeMap<String, String>>,
    /// Parent channel ← child channel (`None`: shared names).
    pub outputs: Option<BTreeMap<String, String>>,
}

impl SubgraphNode {
    fn input(&self, ctx: &NodeContext<'_>) -> Update {
        let pairs: Vec<(String, String)> = match &self.inputs {
            Some(map) => map.iter().map(|(c, p)| (c.clone(), p.clone())).collect(),
            None => self.graph.schema().channels().map(|(n, _)| (n.to_string(), n.to_string())).collect(),
        };
        pairs.into_iter().filter_map(|(c, p)| ctx.state.get(&p).map(|v| (c, v.clone()))).collect()
    }

    fn output(&self, child: &crate::state::State, parent_has: impl Fn(&str) -> bool) -> Update {
        match &self.outputs {
            Some(map) => map.iter().filter_map(|(p, c)| child.get(c).map(|v| (p.clone(), v.clone()))).collect(),
            None => child.iter().filter(|(n, _)| parent_has(n)).map(|(n, v)| (n.clone(), v.clone())).collect(),
        }
    }
}

#[async_trait]
impl Node for SubgraphNode {
    fn kind(&self) -> &'static str {
        "graph"
    }

    fn resumable(&self) -> bool {
        true
    }

    async fn run(&self, ctx: NodeContext<'_>) -> Result<Update, NodeError> {
        let thread =
            Thread { store: ctx.nested.store.clone(), id: ctx.nested.thread.clone(), ns: ctx.nested.ns.clone() };
        let started =
            thread.store.latest(&thread.id, &thread.ns).await.map_err(|e| NodeError::Failed(e.to_string()))?.is_some();
        let parent_keys: Vec<String> = ctx.state.keys().cloned().collect();
        // A run under this checkpoint resumes (its limits raised with the parent's); time
        // travel back to a question inside it continues from where it asked; anything else
        // starts on the input.
        let start = match (&ctx.nested.resume_from, started) {
            (_, true) if ctx.nested.raise => Start::RaiseLimits(ctx.resume.cloned()),
            (_, true) => Start::Resume(ctx.resume.cloned()),
            (Some(from), false) => Start::From { checkpoint: from.clone(), value: ctx.resume.cloned() },
            (None, false) => Start::Input(Value::Object(self.input(&ctx))),
        };
        let outcome = self.graph.run(start, &thread, ctx.scope).await.map_err(|e| NodeError::Failed(e.to_string()))?;
        match outcome.finish {
            Finish::Done => Ok(self.output(&outcome.state, |n| parent_keys.iter().any(|k| k == n))),
            Finish::Interrupted(i) => Err(NodeError::Interrupt { payload: i.payload, path: i.path }),
            Finish::Stopped { reason } => Err(NodeError::Stopped(reason)),
            limit => Err(NodeError::Limit(limit)),
        }
    }
}

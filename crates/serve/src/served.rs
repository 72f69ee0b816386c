//! The served role of any [`Runnable`]: [`Served`] is the [`Runner`] that runs a request with
//! the runnable it names — the default agent, RLM or goal pursuer of its kind, or a named one
//! (any kind, graphs included) — so everything registered is a runs-API kind, a model of the
//! OpenAI-compatible endpoint and an MCP tool, without code of its own.

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    Asks, FinishReason, Message, Outcome, Role, RunInput, RunScope, Runnable, RunnableKind, Runnables, ToolCall,
};
use serde_json::Value;

use crate::runs::{RunKind, RunOutput, RunRequest, Runner};

/// Runs requests with registered runnables.
pub struct Served {
    agent: Arc<dyn Runnable>,
    rlm: Arc<dyn Runnable>,
    goal: Arc<dyn Runnable>,
    named: Runnables,
    max_depth: u32,
    /// The names of the default agent's own tools (a client tool may not take one).
    own_tools: Vec<String>,
}

impl Served {
    /// The defaults of the `run`, `rlm` and `goal` kinds, and the named runnables.
    pub fn new(agent: Arc<dyn Runnable>, rlm: Arc<dyn Runnable>, goal: Arc<dyn Runnable>, named: Runnables) -> Self {
        Self { agent, rlm, goal, named, max_depth: recursive_core::run::DEFAULT_MAX_DEPTH, own_tools: Vec::new() }
    }

    /// Names the default agent's own tools, so a client tool named like one is refused before
    /// its run starts (400) rather than failing it.
    pub fn with_own_tools(mut self, names: Vec<String>) -> Self {
        self.own_tools = names;
        self
    }

    /// Caps the depth of every run tree.
    pub fn with_max_depth(mut self, max_depth: u32) -> Self {
        self.max_depth = max_depth;
        self
    }

    fn pick(&self, request: &RunRequest) -> Result<Arc<dyn Runnable>, String> {
        if let Some(name) = &request.agent {
            let runnable = self.named.get(name).ok_or_else(|| format!("no runnable `{name}` on this server"))?;
            return match (request.kind, runnable.kind()) {
                (RunKind::Graph, RunnableKind::Graph) | (RunKind::Run, _) => Ok(runnable.clone()),
                (RunKind::Rlm, RunnableKind::Rlm) | (RunKind::Goal, RunnableKind::Goal) => Ok(runnable.clone()),
                (kind, actual) => Err(format!("`{name}` is a {actual}, not a {}", kind.as_str())),
            };
        }
        match request.kind {
            RunKind::Run => Ok(self.agent.clone()),
            RunKind::Rlm => Ok(self.rlm.clone()),
            RunKind::Goal => Ok(self.goal.clone()),
            RunKind::Graph => {
                let graphs: Vec<&Arc<dyn Runnable>> =
                    self.named.iter().filter(|r| r.kind() == RunnableKind::Graph).collect();
                match graphs.as_slice() {
                    [one] => Ok((*one).clone()),
                    [] => Err("this server offers no graph".into()),
                    _ => Err(format!(
                        "name the graph in `agent`: {}",
                        graphs.iter().map(|g| g.name()).collect::<Vec<_>>().join(", ")
                    )),
                }
            }
        }
    }
}

#[async_trait]
impl Runner for Served {
    async fn run(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        let runnable = match self.pick(&request) {
            Ok(r) => r,
            Err(e) => return RunOutput::failed(e),
        };
        let scope = scope.with_max_depth(self.max_depth);
        let check = match crate::answer::check_for(request.options.response_format.as_ref()) {
            Ok(check) => check,
            Err(e) => return RunOutput::failed(e),
        };
        if let Some(why) = request.refused_asks(Some(runnable.kind())) {
            return RunOutput::failed(format!("`{}`: {why}", runnable.name()));
        }
        let asks = Asks { tools: request.tools, options: request.options, check };
        let input = RunInput {
            text: request.input,
            data: request.inputs.into_iter().map(|(k, v)| (k, Value::String(v))).collect(),
            history: request.history,
            checkpoint: None,
            asks,
        };
        output(runnable.run(input, &scope).await)
    }

    fn kind_of(&self, request: &RunRequest) -> Option<RunnableKind> {
        self.pick(request).ok().map(|r| r.kind())
    }

    fn tool_clash(&self, request: &RunRequest) -> Option<String> {
        if request.kind != RunKind::Run || request.agent.is_some() {
            return None;
        }
        let clash = request.tools.iter().find(|t| self.own_tools.contains(&t.name))?;
        Some(format!("the client tool `{}` has the name of one of the served agent's own tools; rename it", clash.name))
    }

    fn agents(&self) -> Vec<String> {
        self.named.names()
    }

    fn offered(&self) -> Vec<recursive_core::ToolSpec> {
        self.named.iter().map(|r| recursive_core::runnable_spec(r.as_ref())).collect()
    }
}

/// A run's outcome as the API reports it.
pub fn output(outcome: Outcome) -> RunOutput {
    let failed = outcome.error.is_some() || outcome.finish_reason == FinishReason::Fault;
    let waiting = outcome.finish_reason == FinishReason::ClientToolCalls;
    RunOutput {
        ok: outcome.is_success(),
        outcome: if failed { FinishReason::Fault } else { outcome.finish_reason },
        text: outcome.text,
        output: outcome.output,
        error: outcome.error,
        input_tokens: outcome.usage.input_tokens,
        output_tokens: outcome.usage.output_tokens,
        cost_usd: Some(outcome.cost_usd),
        tool_calls: if waiting { pending_calls(&outcome.messages) } else { Vec::new() },
        messages: if waiting { outcome.messages } else { Vec::new() },
    }
}

/// The calls of the last assistant message that no tool result answers yet.
fn pending_calls(messages: &[Message]) -> Vec<ToolCall> {
    let Some(at) = messages.iter().rposition(|m| m.role == Role::Assistant) else { return Vec::new() };
    let answered: Vec<&str> = messages[at..].iter().filter_map(|m| m.tool_call_id.as_deref()).collect();
    messages[at].tool_calls.iter().filter(|c| !answered.contains(&c.id.as_str())).cloned().collect()
}

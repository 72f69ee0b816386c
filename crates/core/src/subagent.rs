//! Agents as runnables: an [`Agent`] is a [`Runnable`] (the tool loop run in the scope it is
//! given), a [`SubAgent`] is an agent under a name and a description written for a parent
//! model, and a [`SubAgentSession`] keeps a sub-agent's transcript across invocations so a
//! follow-up turn sees the earlier ones. Offered to a parent model through the one generic
//! adapter, [`crate::runnable::RunnableTool`].
//!
//! Depth is checked before anything runs (a refused call makes no model request), the child's
//! own events reach the tree's sink tagged with its ids, usage and cost roll up to every
//! ancestor, and the tree's budget stops every node that is still running.

use std::sync::Arc;

use async_trait::async_trait;

use crate::event::EventKind;
use crate::message::Message;
use crate::run::{DepthError, RunScope};
use crate::runnable::{Outcome, RunInput, Runnable, RunnableKind, run_as, run_child};
use crate::runtime::{Agent, RunError, RunResult};

/// The outcome of an agent run, or of a fault with its partial result.
pub fn agent_outcome(result: Result<RunResult, RunError>) -> Outcome {
    let (run, error) = match result {
        Ok(r) => (r, None),
        Err(e) => {
            let message = e.to_string();
            (*e.partial, Some(message))
        }
    };
    Outcome {
        finish_reason: if error.is_some() { crate::run::FinishReason::Fault } else { run.finish_reason },
        text: run.output,
        output: serde_json::Value::Null,
        usage: run.usage,
        cost_usd: run.cost_usd,
        steps: run.steps,
        run_id: run.run_id,
        error,
        messages: run.messages,
    }
}

/// Whether every tool of `agent` only reads.
fn reads_only(agent: &Agent) -> bool {
    let tools = agent.tools();
    tools.names().iter().all(|n| tools.get(n).is_some_and(|t| t.read_only()))
}

#[async_trait]
impl Runnable for Agent {
    fn name(&self) -> &str {
        &self.config().name
    }

    fn kind(&self) -> RunnableKind {
        RunnableKind::Agent
    }

    fn description(&self) -> String {
        format!("The agent `{}`: give it a task; it works with its tools and answers.", self.config().name)
    }

    /// An agent only reads when every tool it can call only reads.
    fn read_only(&self) -> bool {
        reads_only(self)
    }

    async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome {
        let message = input.message();
        agent_outcome(self.continue_with(input.history, &message, &input.asks, scope).await)
    }
}

/// A named agent (its own provider, model, system prompt and tools) that a parent can invoke
/// with a task.
#[derive(Clone)]
pub struct SubAgent {
    name: String,
    description: String,
    agent: Agent,
}

impl std::fmt::Debug for SubAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgent").field("name", &self.name).field("description", &self.description).finish()
    }
}

impl SubAgent {
    /// Wraps an agent under a name and a description written for the parent model. The
    /// agent's configured name is set to `name`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, mut agent: Agent) -> Self {
        let name = name.into();
        agent.config_mut().name = name.clone();
        Self { name, description: description.into(), agent }
    }

    /// The wrapped agent.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Runs the sub-agent on `input` as a child of `parent` (named `{name}-d{depth}`).
    ///
    /// The depth cap is checked first: a refused call returns the [`DepthError`] without any
    /// model call. A run stopped by a limit or a fault is an outcome carrying its reason.
    pub async fn invoke(&self, input: &str, parent: &RunScope) -> Result<Outcome, DepthError> {
        run_child(self, RunInput::text(input), parent, 0).await
    }

    /// A session over this sub-agent: each turn continues the previous transcript.
    pub fn session(self: Arc<Self>) -> SubAgentSession {
        SubAgentSession::new(self)
    }
}

#[async_trait]
impl Runnable for SubAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> RunnableKind {
        RunnableKind::Agent
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    fn read_only(&self) -> bool {
        reads_only(&self.agent)
    }

    async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome {
        Runnable::run(&self.agent, input, scope).await
    }
}

/// Keeps one sub-agent's transcript across several invocations (human-in-the-loop follow-ups):
/// turn 2 sees turn 1. Turns run one at a time. As a [`Runnable`] (e.g. offered as a tool),
/// every run is the session's next turn.
pub struct SubAgentSession {
    agent: Arc<SubAgent>,
    state: tokio::sync::Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    history: Vec<Message>,
    turns: u32,
}

impl std::fmt::Debug for SubAgentSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgentSession").field("agent", &self.agent.name).finish()
    }
}

impl SubAgentSession {
    /// A session with an empty transcript.
    pub fn new(agent: Arc<SubAgent>) -> Self {
        Self { agent, state: tokio::sync::Mutex::new(SessionState::default()) }
    }

    /// The sub-agent.
    pub fn agent(&self) -> &Arc<SubAgent> {
        &self.agent
    }

    /// Runs the next turn as a child of `parent`, named `{name}-t{turn}-d{depth}`, with the
    /// transcript of every earlier turn. From turn 2 on, `SubAgentReused` is emitted on the
    /// parent scope. The transcript is kept whatever the finish reason; a refused depth or a
    /// fault leaves it unchanged.
    pub async fn send(&self, input: &str, parent: &RunScope) -> Result<Outcome, DepthError> {
        let turn = self.state.lock().await.turns + 1;
        let depth = parent.depth() + 1;
        let child = parent.child_named(format!("{}-t{turn}-d{depth}", self.agent.name))?;
        Ok(run_as(self, RunInput::text(input), parent, &child, 0).await)
    }

    /// Turns completed so far.
    pub async fn turns(&self) -> u32 {
        self.state.lock().await.turns
    }

    /// The transcript so far.
    pub async fn history(&self) -> Vec<Message> {
        self.state.lock().await.history.clone()
    }

    /// Forgets the transcript; the next turn starts fresh as turn 1.
    pub async fn reset(&self) {
        *self.state.lock().await = SessionState::default();
    }
}

#[async_trait]
impl Runnable for SubAgentSession {
    fn name(&self) -> &str {
        &self.agent.name
    }

    fn kind(&self) -> RunnableKind {
        RunnableKind::Agent
    }

    fn description(&self) -> String {
        self.agent.description.clone()
    }

    fn read_only(&self) -> bool {
        self.agent.read_only()
    }

    /// The next turn of the session, run in `scope`; from turn 2 on, `SubAgentReused` is
    /// emitted first, on the caller's node (`scope`'s parent).
    async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome {
        let mut state = self.state.lock().await;
        let turn = state.turns + 1;
        if turn > 1 {
            scope.parent().unwrap_or(scope).emit(
                0,
                EventKind::SubAgentReused { agent: self.agent.name.clone(), turn, messages: state.history.len() },
            );
        }
        let mut input = input;
        input.history = state.history.clone();
        let outcome = Runnable::run(self.agent.as_ref(), input, scope).await;
        if outcome.error.is_none() {
            state.history = outcome.messages.clone();
            state.turns = turn;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolSpec;
    use crate::mock::{MockProvider, MockReply};
    use crate::run::FinishReason;
    use crate::runnable::RunnableTool;
    use crate::tool::{Tool, ToolContext, ToolError};
    use serde_json::Value;

    #[test]
    fn tool_spec_is_named_after_the_sub_agent_and_takes_input() {
        let agent = Agent::new(Arc::new(MockProvider::default()));
        let tool = RunnableTool::new(Arc::new(SubAgent::new("researcher", "Finds facts.", agent)));
        let spec = tool.spec();
        assert_eq!(spec.name, "researcher");
        assert_eq!(spec.description, "Finds facts.");
        assert_eq!(spec.parameters["properties"]["input"]["type"], "string");
    }

    struct Writer;

    #[async_trait]
    impl Tool for Writer {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "write".into(),
                description: "Writes.".into(),
                parameters: serde_json::json!({"type": "object"}),
            }
        }
        async fn call(&self, _a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }

    #[test]
    fn sub_agent_is_read_only_only_when_all_its_tools_are() {
        let reader =
            RunnableTool::new(Arc::new(SubAgent::new("r", "d", Agent::new(Arc::new(MockProvider::default())))));
        assert!(reader.read_only(), "no tools: nothing to write with");
        let mut tools = crate::tool::ToolRegistry::new();
        tools.register(Arc::new(Writer));
        let writer = SubAgent::new("w", "d", Agent::new(Arc::new(MockProvider::default())).with_tools(tools));
        assert!(!RunnableTool::new(Arc::new(writer)).read_only());
    }

    #[tokio::test]
    async fn invoke_names_the_child_run_after_the_agent_and_depth() {
        let provider = MockProvider::new([MockReply::text("done")]);
        let sub = SubAgent::new("helper", "helps", Agent::new(Arc::new(provider)));
        let root = RunScope::detached("main");
        let out = sub.invoke("go", &root).await.unwrap();
        assert_eq!(out.text, "done");
        assert_eq!(out.finish_reason, FinishReason::NoMoreToolCalls);
        assert_ne!(out.run_id, root.ids().run_id);
    }
}

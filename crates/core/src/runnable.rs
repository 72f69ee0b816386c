//! One contract for every recursive thing: a [`Runnable`] (an agent, an RLM, a goal pursuit,
//! a graph) runs an input in a scope of the run tree and returns an [`Outcome`]. Cancellation,
//! the budget, the depth cap, the wall clock and the event sink all come from the scope, so any
//! runnable nests in any other. Each *role* a runnable can play is one generic adapter over the
//! trait: [`RunnableTool`] here (for agents, and as a function in the RLM sandbox through its
//! host tools), the goal delegate action, the graph node and the served run in the crates above.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::event::EventKind;
use crate::message::{Message, ToolSpec, Usage};
use crate::run::{DepthError, FinishReason, RunScope};
use crate::tool::{Tool, ToolContext, ToolError, ToolOrigin};

/// What kind of recursive thing a runnable is (for events, traces and listings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunnableKind {
    /// The tool loop.
    #[default]
    Agent,
    /// A recursive language model.
    Rlm,
    /// A goal pursuit.
    Goal,
    /// A durable graph.
    Graph,
}

impl RunnableKind {
    /// Snake-case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunnableKind::Agent => "agent",
            RunnableKind::Rlm => "rlm",
            RunnableKind::Goal => "goal",
            RunnableKind::Graph => "graph",
        }
    }
}

impl std::fmt::Display for RunnableKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a runnable is given: the task as text, named data (an RLM's input variables, a graph's
/// initial channels, a tool call's further arguments), and earlier conversation (agents).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInput {
    /// The task, question, objective or prompt.
    pub text: String,
    /// Named values beside the text.
    #[serde(default)]
    pub data: Map<String, Value>,
    /// Earlier turns of a conversation this run continues.
    #[serde(default)]
    pub history: Vec<Message>,
    /// Where a runnable that can resume (an RLM) keeps its checkpoints for this invocation: a
    /// graph gives each node's run one, so a node killed mid-run resumes.
    #[serde(skip)]
    pub checkpoint: Option<CheckpointHandle>,
    /// What the caller asks beyond the input (client tools, model settings, a checked answer):
    /// agents honour it; a server refuses it for other kinds rather than drop it.
    #[serde(skip)]
    pub asks: crate::asks::Asks,
}

/// A place for one run's checkpoints: the latest saved value is what a resumed run loads.
#[async_trait]
pub trait CheckpointSlot: Send + Sync {
    /// How the slot is named to people (a run key, a thread and namespace).
    fn name(&self) -> String;
    /// Saves `value` as the latest checkpoint.
    async fn save(&self, value: &Value) -> Result<(), String>;
    /// The latest checkpoint, if one was saved.
    async fn load(&self) -> Result<Option<Value>, String>;
}

/// A shared [`CheckpointSlot`] (compared by identity).
#[derive(Clone)]
pub struct CheckpointHandle(pub Arc<dyn CheckpointSlot>);

impl std::fmt::Debug for CheckpointHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CheckpointHandle").field(&self.0.name()).finish()
    }
}

impl PartialEq for CheckpointHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl RunInput {
    /// Just a text.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Default::default() }
    }

    /// The input as one message for a model: the text, then each named value on a line of its
    /// own (`name: value`; strings as they are, anything else as JSON), so a caller's further
    /// arguments reach an agent instead of being dropped.
    pub fn message(&self) -> String {
        let mut message = self.text.clone();
        for (name, value) in &self.data {
            if !message.is_empty() {
                message.push('\n');
            }
            match value {
                Value::String(s) => message.push_str(&format!("{name}: {s}")),
                other => message.push_str(&format!("{name}: {other}")),
            }
        }
        message
    }

    /// Adds a named value.
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Self {
        self.data.insert(name.into(), value);
        self
    }

    /// The input of a tool call: its `input` argument is the text, every other argument is
    /// data. Arguments that are not an object are refused.
    pub fn from_arguments(tool: &str, arguments: Value) -> Result<Self, ToolError> {
        let Value::Object(mut data) = arguments else {
            return Err(ToolError::InvalidArguments { tool: tool.into(), message: "expected an object".into() });
        };
        let text = match data.remove("input") {
            Some(Value::String(s)) => s,
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        Ok(Self { text, data, ..Default::default() })
    }
}

/// How a run of a runnable ended. A limit is data (its finish reason); a fault is
/// [`FinishReason::Fault`] with `error`, and everything gathered before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Why the run ended.
    pub finish_reason: FinishReason,
    /// The answer as text (partial when the run stopped early).
    pub text: String,
    /// The structured result (an RLM's submitted value, a graph's final state, a goal's tree);
    /// `null` when the runnable has none beyond its text.
    pub output: Value,
    /// Usage of the run including its descendants.
    pub usage: Usage,
    /// USD cost of the run including its descendants.
    pub cost_usd: f64,
    /// Model turns, iterations or supersteps taken.
    pub steps: u32,
    /// The run's id in the tree.
    pub run_id: String,
    /// The fault that ended the run, if one did.
    pub error: Option<String>,
    /// The conversation of the run, for runnables that have one (agents).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
}

impl Outcome {
    /// An outcome with just a finish reason and a text, the rest from the scope it ran in.
    pub fn new(finish_reason: FinishReason, text: impl Into<String>, scope: &RunScope) -> Self {
        Self {
            finish_reason,
            text: text.into(),
            output: Value::Null,
            usage: scope.usage(),
            cost_usd: scope.cost_usd(),
            steps: 0,
            run_id: scope.ids().run_id.clone(),
            error: None,
            messages: Vec::new(),
        }
    }

    /// A fault that ended the run in `scope`.
    pub fn fault(error: impl Into<String>, scope: &RunScope) -> Self {
        Self { error: Some(error.into()), ..Self::new(FinishReason::Fault, String::new(), scope) }
    }

    /// Whether the run did what was asked.
    pub fn is_success(&self) -> bool {
        self.finish_reason.is_success() && self.error.is_none()
    }

    /// The result as one value (for a graph channel): for the kinds whose result is
    /// structured (RLM, graph) the output when it is more than a single text field; otherwise
    /// the text (an agent's answer, a goal's result — whose output is a report about the run).
    pub fn value(&self, kind: RunnableKind) -> Value {
        if !matches!(kind, RunnableKind::Rlm | RunnableKind::Graph) {
            return Value::String(self.text.clone());
        }
        match &self.output {
            Value::Null => Value::String(self.text.clone()),
            Value::Object(m) if m.len() == 1 && m.values().all(Value::is_string) => Value::String(self.text.clone()),
            other => other.clone(),
        }
    }

    /// What a caller that wants text (a parent model, a goal, a served client) sees: the text
    /// when the run succeeded, otherwise what stopped it and the partial text.
    pub fn report(&self, name: &str, kind: RunnableKind) -> String {
        if self.is_success() {
            return self.text.clone();
        }
        let partial = if self.text.is_empty() { "(none)" } else { self.text.as_str() };
        let why = match &self.error {
            Some(e) => format!("{}: {e}", self.finish_reason),
            None => self.finish_reason.to_string(),
        };
        format!("{kind} `{name}` stopped early: {why} after {} step(s). Partial result:\n{partial}", self.steps)
    }
}

/// The input schema of a runnable that takes one text: `{"input": string}`.
pub fn text_input_schema(description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { "input": { "type": "string", "description": description } },
        "required": ["input"],
        "additionalProperties": false
    })
}

/// A recursive thing that runs as a node of the run tree.
#[async_trait]
pub trait Runnable: Send + Sync {
    /// Its name (a tool name, a sandbox function, a graph node's capability, a served model).
    fn name(&self) -> &str;

    /// What it is.
    fn kind(&self) -> RunnableKind;

    /// What it does, for a model choosing it.
    fn description(&self) -> String;

    /// JSON Schema of its input as tool arguments: `input` is the text, every other property
    /// goes into [`RunInput::data`].
    fn input_schema(&self) -> Value {
        text_input_schema("The task, with everything needed to carry it out.")
    }

    /// Whether a run can only read (it may then run beside other read-only tool calls).
    fn read_only(&self) -> bool {
        false
    }

    /// Runs `input` in `scope` (the node this run is; see [`run_child`] to make one).
    async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome;
}

/// A runnable as a tool's spec: its name, description and input schema.
pub fn runnable_spec(runnable: &dyn Runnable) -> ToolSpec {
    ToolSpec {
        name: runnable.name().to_string(),
        description: runnable.description(),
        parameters: runnable.input_schema(),
    }
}

/// Runs `runnable` as a child of `parent`, one level deeper: the depth cap is checked before
/// anything runs, and the start and the end are events of the parent (`step` is the caller's).
pub async fn run_child(
    runnable: &dyn Runnable,
    input: RunInput,
    parent: &RunScope,
    step: u32,
) -> Result<Outcome, DepthError> {
    let child = parent.child(runnable.name())?;
    Ok(run_as(runnable, input, parent, &child, step).await)
}

/// Runs `runnable` in `child` (already made from `parent`), with the start and end events on
/// `parent`.
pub async fn run_as(
    runnable: &dyn Runnable,
    input: RunInput,
    parent: &RunScope,
    child: &RunScope,
    step: u32,
) -> Outcome {
    let name = runnable.name().to_string();
    let kind = runnable.kind();
    let child_run_id = child.ids().run_id.clone();
    parent.emit(
        step,
        EventKind::SubAgentStarted {
            agent: name.clone(),
            kind,
            input: input.text.clone(),
            child_run_id: child_run_id.clone(),
        },
    );
    let outcome = runnable.run(input, child).await;
    parent.emit(
        step,
        EventKind::SubAgentCompleted {
            agent: name,
            kind,
            child_run_id,
            finish_reason: outcome.finish_reason.clone(),
            error: outcome.error.clone(),
            usage: child.usage(),
            cost_usd: child.cost_usd(),
        },
    );
    outcome
}

/// A runnable with named data bound to every run (e.g. an RLM over files given once): the
/// caller's text and data go in as well; the caller's data win over the bound ones.
pub struct WithData {
    inner: Arc<dyn Runnable>,
    data: Map<String, Value>,
    description: Option<String>,
}

impl WithData {
    /// Binds `data` to every run of `inner`.
    pub fn new(inner: Arc<dyn Runnable>, data: Map<String, Value>) -> Self {
        Self { inner, data, description: None }
    }

    /// Describes it for a model (default: the inner runnable's description).
    pub fn described(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

#[async_trait]
impl Runnable for WithData {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn kind(&self) -> RunnableKind {
        self.inner.kind()
    }

    fn description(&self) -> String {
        self.description.clone().unwrap_or_else(|| self.inner.description())
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    async fn run(&self, mut input: RunInput, scope: &RunScope) -> Outcome {
        for (name, value) in &self.data {
            input.data.entry(name.clone()).or_insert_with(|| value.clone());
        }
        self.inner.run(input, scope).await
    }
}

/// Runnables by name: what a run may nest (offered as tools, sandbox functions, delegates,
/// graph nodes, served models).
#[derive(Clone, Default)]
pub struct Runnables {
    by_name: BTreeMap<String, Arc<dyn Runnable>>,
}

impl std::fmt::Debug for Runnables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.by_name.iter().map(|(n, r)| (n, r.kind()))).finish()
    }
}

impl Runnables {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a runnable under its name.
    pub fn register(&mut self, runnable: Arc<dyn Runnable>) {
        self.by_name.insert(runnable.name().to_string(), runnable);
    }

    /// With a runnable added.
    pub fn with(mut self, runnable: Arc<dyn Runnable>) -> Self {
        self.register(runnable);
        self
    }

    /// The runnable named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Runnable>> {
        self.by_name.get(name)
    }

    /// Names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    /// Every runnable, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Runnable>> {
        self.by_name.values()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Each as a tool.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.iter().map(|r| Arc::new(RunnableTool::new(r.clone())) as Arc<dyn Tool>).collect()
    }
}

/// Any runnable as one tool named after it: its input schema is the tool's parameters, a call
/// runs it as a child of the caller's run. A refused depth is a `denied` result; a run that
/// did not succeed is an error result naming why, with the partial text.
pub struct RunnableTool {
    runnable: Arc<dyn Runnable>,
}

impl RunnableTool {
    /// Wraps a runnable.
    pub fn new(runnable: Arc<dyn Runnable>) -> Self {
        Self { runnable }
    }

    /// The runnable.
    pub fn runnable(&self) -> &Arc<dyn Runnable> {
        &self.runnable
    }
}

#[async_trait]
impl Tool for RunnableTool {
    fn spec(&self) -> ToolSpec {
        runnable_spec(self.runnable.as_ref())
    }

    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Agent
    }

    async fn call(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let input = RunInput::from_arguments(self.runnable.name(), arguments)?;
        match run_child(self.runnable.as_ref(), input, &ctx.scope, ctx.step).await {
            Ok(o) if o.is_success() => Ok(o.text),
            Ok(o) => Err(ToolError::Failed(o.report(self.runnable.name(), self.runnable.kind()))),
            Err(e) => Err(ToolError::Denied(e.to_string())),
        }
    }

    fn read_only(&self) -> bool {
        self.runnable.read_only()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_inputs_further_arguments_are_part_of_its_message() {
        let input = RunInput::text("greet them").with("message", json!("hello")).with("times", json!(2));
        assert_eq!(input.message(), "greet them\nmessage: hello\ntimes: 2");
        assert_eq!(RunInput::text("just this").message(), "just this");
        assert_eq!(RunInput::default().with("message", json!("hi")).message(), "message: hi");
    }

    use super::*;

    struct Echo;

    #[async_trait]
    impl Runnable for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn kind(&self) -> RunnableKind {
            RunnableKind::Agent
        }
        fn description(&self) -> String {
            "Echoes.".into()
        }
        async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome {
            let mut o = Outcome::new(FinishReason::Completed, input.text, scope);
            o.output = Value::Object(input.data);
            o
        }
    }

    #[test]
    fn tool_arguments_split_into_text_and_data() {
        let input = RunInput::from_arguments("t", json!({"input": "go", "question": "why"})).unwrap();
        assert_eq!(input.text, "go");
        assert_eq!(input.data["question"], "why");
        assert!(RunInput::from_arguments("t", json!("go")).is_err());
    }

    #[tokio::test]
    async fn a_runnable_tool_runs_one_level_deeper_and_returns_the_text() {
        let tool = RunnableTool::new(Arc::new(Echo));
        let root = RunScope::detached("main");
        let ctx = ToolContext { scope: root.clone(), step: 3, call_id: "c".into(), screen: None };
        assert_eq!(tool.call(json!({"input": "hi"}), &ctx).await.unwrap(), "hi");
        assert_eq!(tool.spec().name, "echo");
        assert_eq!(tool.spec().parameters["required"][0], "input");
    }

    #[tokio::test]
    async fn a_runnable_tool_past_the_depth_cap_is_denied() {
        let tool = RunnableTool::new(Arc::new(Echo));
        let root = RunScope::detached("main").with_max_depth(0);
        let ctx = ToolContext { scope: root, step: 0, call_id: "c".into(), screen: None };
        assert!(matches!(tool.call(json!({"input": "hi"}), &ctx).await, Err(ToolError::Denied(_))));
    }

    #[test]
    fn a_stopped_outcome_reports_its_reason_and_partial_text() {
        let root = RunScope::detached("m");
        let mut o = Outcome::new(FinishReason::TokenBudgetExceeded, "half done", &root);
        o.steps = 2;
        let text = o.report("a", RunnableKind::Rlm);
        assert!(text.contains("rlm `a` stopped early: token_budget_exceeded after 2 step(s)"), "{text}");
        assert!(text.contains("half done"), "{text}");
    }
}

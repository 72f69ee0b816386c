//! Action types an atomic goal can be executed with. Each is an [`ActionExecutor`] registered
//! by name in an [`ActionRegistry`], so new types plug in without touching the pursuit loop.
//! Built in: `tool` (one call through the run tree's [`ToolInvoker`], so permission rules,
//! timeouts and output caps apply as in the agent loop), `analyze` and `synthesize` (a guarded
//! model call over the evidence) and `delegate` (a task handed to any named [`Runnable`] — an
//! agent, an RLM, another goal pursuit, a graph — run as a child of the goal's run).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use recursive_core::{
    ChatOptions, ChatProvider, ChatRequest, FinishReason, Message, ModelCall, ModelCallError, Outcome, RunInput,
    RunScope, Runnable, ToolCall, ToolInvoker, ToolSpec, run_child,
};
use serde_json::Value;

use crate::context::GoalContext;
use crate::structured::ActionPlan;

/// Why an action produced no output.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// The action ran and failed, or its input was unusable.
    #[error("{0}")]
    Failed(String),
    /// A limit (depth, budget, wall clock, cancellation) stopped it; the goal ends
    /// `constrained`.
    #[error("{0}")]
    Constrained(String),
    /// The provider failed after its retries; the goal ends `failed` with the fault recorded.
    #[error("{0}")]
    Fault(String),
}

impl From<ModelCallError> for ActionError {
    fn from(e: ModelCallError) -> Self {
        match e {
            ModelCallError::Stopped(r) => ActionError::Constrained(r.to_string()),
            ModelCallError::Provider(e) => ActionError::Fault(e.to_string()),
        }
    }
}

/// What an action is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct ActionRequest<'a> {
    /// The goal being executed.
    pub goal: &'a str,
    /// The action the model chose.
    pub plan: &'a ActionPlan,
    /// The goal's context (objective, stack, evidence...).
    pub context: &'a GoalContext,
    /// The goal's run-tree node: nested runs attach here, model calls record usage here.
    pub scope: &'a RunScope,
    /// Characters a prompt of the action may have (the pursuit's prompt budget).
    pub prompt_chars: usize,
}

/// What an action produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionOutput {
    /// The result text, which becomes the goal's summary and evidence.
    pub content: String,
    /// Structured data worth logging, if any.
    pub data: Option<Value>,
}

impl ActionOutput {
    /// Output with text only.
    pub fn text(content: impl Into<String>) -> Self {
        Self { content: content.into(), data: None }
    }
}

/// One action type.
#[async_trait]
pub trait ActionExecutor: Send + Sync {
    /// The action type's name (what the model writes as `type`).
    fn name(&self) -> &str;

    /// What it does and how to fill `target` and `input`, for the model, in a line or two.
    fn description(&self) -> String;

    /// Its targets (tools, delegates), each as `(name, one compact line for the model)`.
    fn targets(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Checks a planned action before it is accepted (unknown tool, bad arguments...). The
    /// message goes back to the model, which is asked once more.
    fn check(&self, _plan: &ActionPlan) -> Result<(), String> {
        Ok(())
    }

    /// Runs the action.
    async fn execute(&self, request: ActionRequest<'_>) -> Result<ActionOutput, ActionError>;
}

/// The action types available to a pursuit, by name.
#[derive(Clone, Default)]
pub struct ActionRegistry {
    actions: BTreeMap<String, Arc<dyn ActionExecutor>>,
}

impl std::fmt::Debug for ActionRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.actions.keys()).finish()
    }
}

impl ActionRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// `tool` (when there are tools), `analyze` and `synthesize`.
    pub fn standard(provider: Arc<dyn ChatProvider>, tools: ToolInvoker, options: ChatOptions) -> Self {
        let mut r = Self::new();
        if !tools.tools().is_empty() {
            r.register(Arc::new(ToolAction::new(tools)));
        }
        r.register(Arc::new(ModelAction::analyze(provider.clone(), options.clone())));
        r.register(Arc::new(ModelAction::synthesize(provider, options)));
        r
    }

    /// Adds (or replaces) an action type under its name.
    pub fn register(&mut self, action: Arc<dyn ActionExecutor>) -> &mut Self {
        self.actions.insert(action.name().to_string(), action);
        self
    }

    /// Builder form of [`ActionRegistry::register`].
    pub fn with(mut self, action: Arc<dyn ActionExecutor>) -> Self {
        self.register(action);
        self
    }

    /// The action type with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn ActionExecutor>> {
        self.actions.get(name)
    }

    /// Names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.actions.keys().cloned().collect()
    }

    /// One line per action type, `name: description`, then one per target
    /// (`tool read_file(path: string): …`), as shown to the model when it chooses an action.
    pub fn capabilities(&self) -> Vec<String> {
        let types = self.actions.iter().map(|(n, a)| format!("{n}: {}", a.description()));
        let targets =
            self.actions.iter().flat_map(|(n, a)| a.targets().into_iter().map(move |(_, line)| format!("{n} {line}")));
        types.chain(targets).collect()
    }

    /// The action types in one line, with the names of their targets, e.g.
    /// `tool (read_file, search_files), analyze, synthesize`.
    pub fn overview(&self) -> String {
        self.actions
            .iter()
            .map(|(n, a)| {
                let targets: Vec<String> = a.targets().into_iter().map(|(t, _)| t).collect();
                if targets.is_empty() { n.clone() } else { format!("{n} ({})", targets.join(", ")) }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Checks a planned action: a known type whose own check passes.
    pub fn check(&self, plan: &ActionPlan) -> Result<(), String> {
        let action = self.actions.get(&plan.kind).ok_or_else(|| {
            format!("unknown action type `{}`; available action types: {}", plan.kind, self.names().join(", "))
        })?;
        action.check(plan)
    }

    /// Number of action types.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// `tool`: one call through a [`ToolInvoker`]; `target` is the tool name and `input` its JSON
/// arguments object.
pub struct ToolAction {
    tools: ToolInvoker,
    next_id: AtomicU64,
}

impl ToolAction {
    /// An action over these tools.
    pub fn new(tools: ToolInvoker) -> Self {
        Self { tools, next_id: AtomicU64::new(1) }
    }

    fn arguments(plan: &ActionPlan) -> Result<Value, String> {
        let text = plan.input.trim();
        if text.is_empty() {
            return Ok(Value::Object(Default::default()));
        }
        match serde_json::from_str::<Value>(text) {
            Ok(v) if v.is_object() => Ok(v),
            Ok(_) => Err(format!("input for tool `{}` must be a JSON object of arguments", plan.target)),
            Err(e) => Err(format!("input for tool `{}` is not valid JSON: {e}", plan.target)),
        }
    }
}

#[async_trait]
impl ActionExecutor for ToolAction {
    fn name(&self) -> &str {
        "tool"
    }

    fn description(&self) -> String {
        "call one tool. `target` = the tool name, `input` = its arguments as a JSON object (`?` marks an optional \
         argument)."
            .into()
    }

    fn targets(&self) -> Vec<(String, String)> {
        self.tools.tools().specs().iter().map(|spec| (spec.name.clone(), compact_tool(spec))).collect()
    }

    fn check(&self, plan: &ActionPlan) -> Result<(), String> {
        let tools = self.tools.tools();
        if tools.get(&plan.target).is_none() {
            return Err(format!("unknown tool `{}`; available tools: {}", plan.target, tools.names().join(", ")));
        }
        Self::arguments(plan).map(|_| ())
    }

    async fn execute(&self, request: ActionRequest<'_>) -> Result<ActionOutput, ActionError> {
        let plan = request.plan;
        let arguments = Self::arguments(plan).map_err(ActionError::Failed)?;
        if let Some(reason) = request.scope.stop_reason() {
            return Err(ActionError::Constrained(reason.to_string()));
        }
        let call = ToolCall {
            id: format!("goal_call_{}", self.next_id.fetch_add(1, Ordering::Relaxed)),
            name: plan.target.clone(),
            arguments,
        };
        let outcome = self.tools.invoke(call, request.scope, request.scope.next_step(), None).await;
        match outcome.stop {
            Some(reason) => Err(ActionError::Constrained(reason.to_string())),
            None if outcome.is_error => {
                Err(ActionError::Failed(format!("tool `{}`: {}", outcome.name, outcome.output)))
            }
            None => Ok(ActionOutput::text(outcome.output)),
        }
    }
}

/// `analyze` or `synthesize`: one model call over the goal's context and evidence, following
/// the instructions in `input`.
pub struct ModelAction {
    name: String,
    description: String,
    instruction: String,
    provider: Arc<dyn ChatProvider>,
    options: ChatOptions,
}

impl ModelAction {
    /// `analyze`: reason over the evidence to answer the goal.
    pub fn analyze(provider: Arc<dyn ChatProvider>, options: ChatOptions) -> Self {
        Self {
            name: "analyze".into(),
            description: "think it through with the model over the evidence so far; `input` = what to analyze and \
                          how. Use when reasoning alone (no new data) accomplishes the goal."
                .into(),
            instruction:
                "Action: analyze. Accomplish the current goal by careful analysis of the evidence and your own \
                          knowledge. Answer with the result itself, concisely, stating any uncertainty."
                    .into(),
            provider,
            options,
        }
    }

    /// `synthesize`: combine the evidence into a result.
    pub fn synthesize(provider: Arc<dyn ChatProvider>, options: ChatOptions) -> Self {
        Self {
            name: "synthesize".into(),
            description: "combine the evidence gathered so far into a result with the model; `input` = what to \
                          produce. Use when the evidence already holds what the goal needs."
                .into(),
            instruction: "Action: synthesize. Accomplish the current goal by combining the evidence into one coherent \
                          result. Do not invent facts the evidence does not support; say what is missing."
                .into(),
            provider,
            options,
        }
    }
}

#[async_trait]
impl ActionExecutor for ModelAction {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    async fn execute(&self, request: ActionRequest<'_>) -> Result<ActionOutput, ActionError> {
        let mut prompt = request.context.prompt(request.goal);
        if !request.plan.input.trim().is_empty() {
            prompt.text(format!("\nInstructions: {}\n", request.plan.input));
        }
        let user = prompt.render(request.prompt_chars.saturating_sub(self.instruction.chars().count()));
        let options = ChatOptions { response_format: None, ..self.options.clone() };
        let req = ChatRequest {
            messages: vec![Message::system(self.instruction.clone()), Message::user(user)],
            tools: Vec::new(),
            options,
        };
        let response =
            request.scope.call_model(self.provider.as_ref(), req, ModelCall::at(request.scope.next_step())).await?;
        if response.message.content.trim().is_empty() {
            return Err(ActionError::Failed(format!("{}: the model returned no text", self.name)));
        }
        Ok(ActionOutput::text(response.message.content))
    }
}

/// What a delegated run's outcome means for the goal: its text when it succeeded; a stop of
/// the run tree makes the goal `constrained`, a fault is a fault, anything else a failure.
fn delegated(name: &str, runnable: &dyn Runnable, outcome: Outcome) -> Result<String, ActionError> {
    if outcome.is_success() {
        return Ok(outcome.text);
    }
    let report = outcome.report(name, runnable.kind());
    match outcome.finish_reason {
        FinishReason::Fault => Err(ActionError::Fault(report)),
        reason if reason.is_tree_stop() => Err(ActionError::Constrained(report)),
        _ => Err(ActionError::Failed(report)),
    }
}

/// `delegate`: hands the task in `input` to the delegate named in `target`.
#[derive(Default, Clone)]
pub struct DelegateAction {
    delegates: BTreeMap<String, Arc<dyn Runnable>>,
}

impl DelegateAction {
    /// No delegates yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a runnable under its own name.
    pub fn with(mut self, runnable: Arc<dyn Runnable>) -> Self {
        self.delegates.insert(runnable.name().to_string(), runnable);
        self
    }

    /// Delegate names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.delegates.keys().cloned().collect()
    }

    fn pick(&self, target: &str) -> Result<(&String, &Arc<dyn Runnable>), String> {
        if target.trim().is_empty() && self.delegates.len() == 1 {
            return self.delegates.iter().next().ok_or_else(|| "no delegates".to_string());
        }
        self.delegates
            .get_key_value(target)
            .ok_or_else(|| format!("unknown delegate `{target}`; available delegates: {}", self.names().join(", ")))
    }
}

#[async_trait]
impl ActionExecutor for DelegateAction {
    fn name(&self) -> &str {
        "delegate"
    }

    fn description(&self) -> String {
        "hand the whole task to a delegate. `target` = its name, `input` = the task, with everything it needs to \
         know."
            .into()
    }

    fn targets(&self) -> Vec<(String, String)> {
        self.delegates.iter().map(|(n, d)| (n.clone(), format!("{n}: {}", d.description()))).collect()
    }

    fn check(&self, plan: &ActionPlan) -> Result<(), String> {
        self.pick(&plan.target)?;
        if plan.input.trim().is_empty() {
            return Err("a delegate needs the task in `input`".into());
        }
        Ok(())
    }

    async fn execute(&self, request: ActionRequest<'_>) -> Result<ActionOutput, ActionError> {
        let (name, delegate) = self.pick(&request.plan.target).map_err(ActionError::Failed)?;
        let task = if request.plan.input.trim().is_empty() { request.goal } else { request.plan.input.as_str() };
        let step = request.scope.next_step();
        let outcome = run_child(delegate.as_ref(), RunInput::text(task), request.scope, step)
            .await
            .map_err(|e| ActionError::Constrained(e.to_string()))?;
        delegated(name, delegate.as_ref(), outcome).map(ActionOutput::text)
    }
}

/// A tool as one compact line: `name(arg: type, opt?: type): the description's first
/// sentence` — what a model needs to choose it and fill its arguments, at a fraction of the
/// JSON Schema's size.
pub fn compact_tool(spec: &ToolSpec) -> String {
    let props = spec.parameters.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = spec
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let args: Vec<String> = props
        .map(|p| {
            p.iter()
                .map(|(name, schema)| {
                    let mark = if required.contains(&name.as_str()) { "" } else { "?" };
                    format!("{name}{mark}: {}", type_of(schema))
                })
                .collect()
        })
        .unwrap_or_default();
    let description = first_sentence(&spec.description);
    format!("{}({}): {description}", spec.name, args.join(", "))
}

fn type_of(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(Value::to_string).collect::<Vec<_>>().join("|");
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "array" => match schema.get("items") {
            Some(items) => format!("{}[]", type_of(items)),
            None => "array".into(),
        },
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("|"),
        _ => "any".into(),
    }
}

fn first_sentence(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let end = line.find(". ").map(|i| i + 1).unwrap_or(line.len());
    recursive_core::text::clip_chars(&line[..end], 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_is_shown_as_a_compact_signature() {
        let spec = ToolSpec {
            name: "read_file".into(),
            description: "Read a text file. Paths are relative to the workspace.\nMore.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "long text"},
                    "limit": {"type": ["integer", "null"]},
                    "mode": {"enum": ["a", "b"]},
                    "globs": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["path"]
            }),
        };
        assert_eq!(
            compact_tool(&spec),
            r#"read_file(path: string, limit?: integer|null, mode?: "a"|"b", globs?: string[]): Read a text file."#
        );
    }
}

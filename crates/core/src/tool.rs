//! Tools: the [`Tool`] trait, typed tools whose JSON Schema is derived from their argument
//! type, the [`ToolRegistry`], and the [`ToolGate`] hook that permission policies implement.
//! A tool declares what a policy needs to know about it — whether it only reads, where it
//! comes from ([`ToolOrigin`]) and which of a call's arguments are paths — so no policy code
//! knows tool names.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::event::Decision;
use crate::message::{ToolCall, ToolSpec};
use crate::run::RunScope;

/// Why a tool call produced no normal output. The loop turns it into an error result that
/// the model sees.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments did not match the tool's schema.
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What was wrong.
        message: String,
    },
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The call was refused (permissions, sandbox, depth).
    #[error("denied: {0}")]
    Denied(String),
    /// The tool did not finish in time.
    #[error("timed out after {0:.1}s")]
    Timeout(f64),
}

impl ToolError {
    /// A failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }
}

/// What a tool call runs with: the run it belongs to (ids, sink, budget, cancellation), so a
/// tool that starts a nested run can attach it to the tree.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The calling run.
    pub scope: RunScope,
    /// The step of the calling run.
    pub step: u32,
    /// The call id.
    pub call_id: String,
    /// Paths this call may not show (from the gate's path rules), for tools that come across
    /// paths they were not given: search hits, directory entries.
    pub screen: Option<Arc<dyn PathScreen>>,
}

impl ToolContext {
    /// A context for calling a tool outside any agent run.
    pub fn detached() -> Self {
        Self { scope: RunScope::detached("tool"), step: 0, call_id: String::new(), screen: None }
    }

    /// Whether a path the tool came across (relative to the workspace, as it would show it)
    /// must be left out of its result.
    pub fn hides(&self, path: &str) -> bool {
        self.screen.as_ref().is_some_and(|s| s.hides(path))
    }
}

/// Hides the paths a gate denies to one call, from the results of tools that list or search.
pub trait PathScreen: Send + Sync + std::fmt::Debug {
    /// Whether `path` (relative to the workspace) must not be shown.
    fn hides(&self, path: &str) -> bool;
}

/// Where a tool comes from (permission defaults differ by origin).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolOrigin {
    /// Built into the program or registered by a library caller.
    Local,
    /// A tool of an MCP server.
    Mcp {
        /// The server's configured name.
        server: String,
    },
    /// A whole agent offered as a tool.
    Agent,
}

/// Something the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and argument schema as offered to the model.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool with raw JSON arguments.
    async fn call(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError>;

    /// Whether the tool only reads (the permission defaults allow read-only tools).
    fn read_only(&self) -> bool {
        false
    }

    /// Where the tool comes from.
    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Local
    }

    /// Whether the tool reaches hosts on the network (its permission default is then the one
    /// for network tools, whatever it reads or writes).
    fn reaches_network(&self) -> bool {
        false
    }

    /// The paths a call with these arguments reaches, as written; `None` when the tool takes
    /// no path (path rules then never match it).
    fn paths(&self, _arguments: &Map<String, Value>) -> Option<Vec<String>> {
        None
    }

    /// How a call will run when that is worth telling the user before approving it (e.g.
    /// "runs confined (OS sandbox: …)" or "runs UNCONFINED (…)"); shown in permission prompts.
    fn confinement(&self) -> Option<String> {
        None
    }
}

/// The string values of the named arguments, for [`Tool::paths`]: each argument may be a
/// string or an array of strings; `default` stands in when none is given.
pub fn path_arguments(arguments: &Map<String, Value>, names: &[&str], default: Option<&str>) -> Option<Vec<String>> {
    let mut paths = Vec::new();
    for name in names {
        match arguments.get(*name) {
            Some(Value::String(p)) => paths.push(p.clone()),
            Some(Value::Array(items)) => paths.extend(items.iter().filter_map(Value::as_str).map(str::to_string)),
            _ => {}
        }
    }
    if paths.is_empty() {
        return default.map(|d| vec![d.to_string()]);
    }
    Some(paths)
}

/// A tool with typed arguments; wrap it with [`typed`] (or register it with
/// [`ToolRegistry::register_typed`]) to get a [`Tool`].
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The argument type; its JSON Schema is derived with `schemars`.
    type Args: DeserializeOwned + JsonSchema + Send;

    /// The tool's name.
    fn name(&self) -> &str;

    /// What the tool does, written for the model.
    fn description(&self) -> String;

    /// Whether the tool only reads.
    fn read_only(&self) -> bool {
        false
    }

    /// Whether the tool reaches hosts on the network (see [`Tool::reaches_network`]).
    fn reaches_network(&self) -> bool {
        false
    }

    /// Runs the tool.
    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<String, ToolError>;

    /// The paths a call reaches (see [`Tool::paths`]).
    fn paths(&self, _arguments: &Map<String, Value>) -> Option<Vec<String>> {
        None
    }

    /// How a call will run (see [`Tool::confinement`]).
    fn confinement(&self) -> Option<String> {
        None
    }
}

/// Adapts a [`TypedTool`] to [`Tool`]: derives the schema, deserializes the arguments and
/// turns bad arguments into [`ToolError::InvalidArguments`].
pub struct Typed<T>(pub T);

/// Wraps a typed tool as a shareable [`Tool`].
pub fn typed<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    Arc::new(Typed(tool))
}

/// The JSON Schema of `T`, as an object schema suitable for tool parameters.
pub fn schema_for<T: JsonSchema>() -> Value {
    let schema = schemars::schema_for!(T);
    let mut v = serde_json::to_value(schema).unwrap_or_else(|_| serde_json::json!({"type": "object"}));
    if let Some(obj) = v.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        if !obj.contains_key("properties") && obj.get("type") == Some(&Value::String("object".into())) {
            obj.insert("properties".into(), serde_json::json!({}));
        }
    }
    v
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.0.name().to_string(),
            description: self.0.description(),
            parameters: schema_for::<T::Args>(),
        }
    }

    async fn call(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: T::Args = serde_json::from_value(arguments)
            .map_err(|e| ToolError::InvalidArguments { tool: self.0.name().to_string(), message: e.to_string() })?;
        self.0.run(args, ctx).await
    }

    fn read_only(&self) -> bool {
        self.0.read_only()
    }

    fn reaches_network(&self) -> bool {
        self.0.reaches_network()
    }

    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        self.0.paths(arguments)
    }

    fn confinement(&self) -> Option<String> {
        self.0.confinement()
    }
}

/// The tools available to a run, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

/// A tool that changes things, in a run that plans: it refuses to run.
struct Planning(Arc<dyn Tool>);

#[async_trait]
impl Tool for Planning {
    fn spec(&self) -> ToolSpec {
        self.0.spec()
    }

    async fn call(&self, _arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::failed(format!(
            "not run: plan mode — `{}` would change things, and nothing changes until the plan is approved; look \
             around with the read-only tools and answer with the plan",
            self.0.spec().name
        )))
    }

    fn origin(&self) -> ToolOrigin {
        self.0.origin()
    }

    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        self.0.paths(arguments)
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a tool under its spec's name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> &mut Self {
        self.tools.insert(tool.spec().name, tool);
        self
    }

    /// Adds a typed tool.
    pub fn register_typed<T: TypedTool>(&mut self, tool: T) -> &mut Self {
        self.register(typed(tool))
    }

    /// Adds every tool of another registry.
    pub fn extend(&mut self, other: &ToolRegistry) -> &mut Self {
        for (k, v) in &other.tools {
            self.tools.insert(k.clone(), v.clone());
        }
        self
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Specs of every tool, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// Names of every tool, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// A registry with only the named tools (unknown names are reported).
    pub fn subset(&self, names: &[String]) -> Result<ToolRegistry, String> {
        let mut out = ToolRegistry::new();
        for n in names {
            let t =
                self.tools.get(n).ok_or_else(|| format!("unknown tool `{n}` (known: {})", self.names().join(", ")))?;
            out.tools.insert(n.clone(), t.clone());
        }
        Ok(out)
    }

    /// A registry with only the tools that change nothing ([`Tool::read_only`]): what a plan may
    /// use to look around.
    pub fn read_only(&self) -> ToolRegistry {
        let tools = self.tools.iter().filter(|(_, t)| t.read_only()).map(|(k, v)| (k.clone(), v.clone())).collect();
        ToolRegistry { tools }
    }

    /// This registry for a run that plans: the read-only tools as they are, every other tool
    /// refusing to run with a message saying why (plan mode changes nothing), so a call the
    /// model makes to a tool it was not offered is answered clearly.
    pub fn planning(&self) -> ToolRegistry {
        let tools = self
            .tools
            .iter()
            .map(|(k, t)| {
                let tool: Arc<dyn Tool> = if t.read_only() { t.clone() } else { Arc::new(Planning(t.clone())) };
                (k.clone(), tool)
            })
            .collect();
        ToolRegistry { tools }
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Calls a tool by name with raw arguments; unknown tools and invalid argument JSON are
    /// errors the model can read. This is the bare call: the run tree's guarantees
    /// (permissions, timeout, cancellation, output cap, events) are added by
    /// [`crate::ToolInvoker`], which every path of the tree uses.
    pub async fn call(&self, call: &ToolCall, ctx: &ToolContext) -> Result<String, ToolError> {
        let tool = self.tools.get(&call.name).ok_or_else(|| {
            ToolError::failed(format!("unknown tool `{}`; available tools: {}", call.name, self.names().join(", ")))
        })?;
        tool.call(Value::Object(call_arguments(call)?), ctx).await
    }
}

/// A call's arguments as an object: raw JSON text is parsed, null is an empty object; anything
/// else is an [`ToolError::InvalidArguments`].
pub fn call_arguments(call: &ToolCall) -> Result<Map<String, Value>, ToolError> {
    let invalid = |message: String| ToolError::InvalidArguments { tool: call.name.clone(), message };
    match &call.arguments {
        Value::Object(m) => Ok(m.clone()),
        Value::Null => Ok(Map::new()),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(invalid(format!("arguments must be a JSON object, got text: {raw}"))),
        },
        other => Err(invalid(format!("arguments must be a JSON object, got: {other}"))),
    }
}

/// The verdict of a [`ToolGate`] on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateVerdict {
    /// Allow or deny.
    pub decision: Decision,
    /// Why, for the event log and (on denial) for the model.
    pub reason: String,
}

impl GateVerdict {
    /// Allowed, with a reason.
    pub fn allow(reason: impl Into<String>) -> Self {
        Self { decision: Decision::Allow, reason: reason.into() }
    }

    /// Denied, with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self { decision: Decision::Deny, reason: reason.into() }
    }
}

/// Decides whether a tool call may run (permission policies implement this).
#[async_trait]
pub trait ToolGate: Send + Sync {
    /// Decides on one call. `tool` is `None` for a call to an unknown tool.
    async fn check(&self, call: &ToolCall, tool: Option<&Arc<dyn Tool>>) -> GateVerdict;

    /// [`check`](Self::check) for a call of the run `scope` at `step` (what the tool loop calls):
    /// a gate that asks someone may ask through the run (its events).
    async fn check_in(
        &self,
        call: &ToolCall,
        tool: Option<&Arc<dyn Tool>>,
        _scope: &RunScope,
        _step: u32,
    ) -> GateVerdict {
        self.check(call, tool).await
    }

    /// The paths an allowed call may not show in its results; `None` hides nothing.
    fn screen(&self, _call: &ToolCall, _tool: &Arc<dyn Tool>) -> Option<Arc<dyn PathScreen>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    struct AddArgs {
        /// First addend.
        a: i64,
        /// Second addend.
        b: i64,
    }

    struct Add;

    #[async_trait]
    impl TypedTool for Add {
        type Args = AddArgs;
        fn name(&self) -> &str {
            "add"
        }
        fn description(&self) -> String {
            "Adds two integers.".into()
        }
        async fn run(&self, args: AddArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
            Ok((args.a + args.b).to_string())
        }
    }

    fn registry() -> ToolRegistry {
        let mut r = ToolRegistry::new();
        r.register_typed(Add);
        r
    }

    fn call(args: Value) -> ToolCall {
        ToolCall { id: "1".into(), name: "add".into(), arguments: args }
    }

    #[test]
    fn typed_tool_schema_lists_its_fields() {
        let spec = registry().specs().remove(0);
        assert_eq!(spec.parameters["type"], "object");
        assert!(spec.parameters["properties"]["a"].is_object());
        assert_eq!(spec.parameters["required"], json!(["a", "b"]));
    }

    #[tokio::test]
    async fn typed_tool_runs_with_valid_arguments() {
        let out = registry().call(&call(json!({"a": 2, "b": 3})), &ToolContext::detached()).await.unwrap();
        assert_eq!(out, "5");
    }

    #[tokio::test]
    async fn bad_arguments_become_an_error_not_a_panic() {
        let err = registry().call(&call(json!({"a": "x"})), &ToolContext::detached()).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn unparseable_argument_text_is_reported() {
        let err = registry().call(&call(Value::String("{oops".into())), &ToolContext::detached()).await.unwrap_err();
        assert!(err.to_string().contains("must be a JSON object"), "{err}");
    }

    #[tokio::test]
    async fn unknown_tool_names_the_available_ones() {
        let mut c = call(json!({}));
        c.name = "nope".into();
        let err = registry().call(&c, &ToolContext::detached()).await.unwrap_err();
        assert!(err.to_string().contains("available tools: add"), "{err}");
    }
}

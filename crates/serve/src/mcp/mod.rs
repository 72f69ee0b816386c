//! The MCP server: tools `run`, `rlm` and `goal` and one per named runnable, each starting a run
//! of the server (so it is also visible in the runs API), sending a progress notification per
//! event of its run tree when the client asked for progress, and cancelling the run when the
//! client cancels the request. Besides tools it offers resources (the runnables and the runs,
//! [`resources`]), prompts (one per runnable, [`prompts`]), completion of their arguments,
//! logging of the run events a call follows ([`logging`]), and elicitation: a permission ask of
//! such a run is put to the person behind the client ([`elicit`]).
//! Served over stdio (`recursive mcp`) and over streamable HTTP at `/mcp` under `serve`.

// MCP's next protocol version drops logging and resources/subscribe; the versions clients speak
// today have them.
#![allow(deprecated)]

pub mod elicit;
pub mod fixtures;
pub mod logging;
pub mod prompts;
pub mod resources;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, CompletionInfo,
    ContentBlock, CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, Reference, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool, ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use recursive_core::RunInput;

use crate::runs::{RunKind, RunRecord, RunRequest};
use crate::server::{Busy, Server, wait_finished};

/// Arguments of the `run` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunArgs {
    /// The goal for the agent (it has the server's tools, under the server's permission rules).
    pub goal: String,
}

/// Arguments of the `rlm` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RlmArgs {
    /// The question to answer over the inputs.
    pub question: String,
    /// Named inputs (text), read by the model through a Python REPL rather than its context.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
}

/// Arguments of the `goal` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GoalArgs {
    /// The objective to pursue by recursive decomposition.
    pub objective: String,
}

/// The MCP face of a [`Server`], one per client session.
#[derive(Clone)]
pub struct McpServer {
    server: Arc<Server>,
    session: Arc<Session>,
    /// Whether the conformance suite's fixtures are offered (see [`fixtures`]).
    fixtures: bool,
}

/// What one client session has set.
#[derive(Default)]
struct Session {
    /// The level it logs at.
    level: logging::LogLevel,
    /// Its subscriptions, by URI: cancelling one ends it.
    subscriptions: Mutex<HashMap<String, CancellationToken>>,
}

impl Session {
    fn subscriptions(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.subscriptions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for stop in self.subscriptions().values() {
            stop.cancel();
        }
    }
}

impl McpServer {
    /// The MCP server over `server`'s runs (with the conformance fixtures when
    /// [`fixtures::ENV`] is `1`).
    pub fn new(server: Arc<Server>) -> Self {
        McpServer { server, session: Arc::default(), fixtures: fixtures::enabled() }
    }
}

fn schema<T: JsonSchema>() -> Arc<Map<String, Value>> {
    let value = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    let mut object = match value {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    object.remove("$schema");
    object.remove("title");
    Arc::new(plain_formats(object))
}

/// A schema without the number formats schemars names (`uint64`, `int32`, `double`…): they are
/// not JSON Schema formats, and MCP clients validating with a standard validator warn about each
/// on every call. The range they imply stays as `minimum` where schemars gave one.
fn plain_formats(mut object: Map<String, Value>) -> Map<String, Value> {
    let numeric = |f: &str| {
        matches!(f, "float" | "double")
            || f.strip_prefix("uint")
                .or_else(|| f.strip_prefix("int"))
                .is_some_and(|bits| bits.chars().all(|c| c.is_ascii_digit()))
    };
    if object.get("format").and_then(Value::as_str).is_some_and(numeric) {
        object.remove("format");
    }
    for value in object.values_mut() {
        plain_values(value);
    }
    object
}

fn plain_values(value: &mut Value) {
    match value {
        Value::Object(o) => *o = plain_formats(std::mem::take(o)),
        Value::Array(items) => items.iter_mut().for_each(plain_values),
        _ => {}
    }
}

/// What a client is told of every tool: a title; each runs a model with the server's tools under
/// its permission rules, so none is read-only, and each reaches an open world (a model API).
fn annotated(mut tool: Tool, title: &str) -> Tool {
    tool.annotations = Some(ToolAnnotations::with_title(title).read_only(false).open_world(true));
    tool
}

/// The tools offered: `run`, `rlm`, `goal`, and every runnable the server names (with its
/// own input schema).
pub fn tools(offered: &[recursive_core::ToolSpec]) -> Vec<Tool> {
    let mut tools = builtin_tools();
    for spec in offered.iter().filter(|s| !BUILTIN.contains(&s.name.as_str())) {
        let schema = match &spec.parameters {
            Value::Object(o) => o.clone(),
            _ => Map::new(),
        };
        let tool = Tool::new(spec.name.clone(), spec.description.clone(), Arc::new(plain_formats(schema)));
        tools.push(annotated(tool, &spec.name));
    }
    // Every tool's result carries the run's output as structured content.
    let output = schema::<crate::runs::RunOutput>();
    for tool in &mut tools {
        tool.output_schema = Some(output.clone());
    }
    tools
}

/// The tools every server has.
const BUILTIN: &[&str] = &["run", "rlm", "goal"];

fn builtin_tools() -> Vec<Tool> {
    vec![
        annotated(
            Tool::new(
                "run",
                "Run the agent loop on a goal with the server's tools; returns its answer.",
                schema::<RunArgs>(),
            ),
            "Run an agent",
        ),
        annotated(
            Tool::new(
                "rlm",
                "Answer a question over long inputs with a recursive language model (the inputs live in a \
                 Python REPL; the model reads them in pieces and calls sub-models).",
                schema::<RlmArgs>(),
            ),
            "Ask a recursive language model",
        ),
        annotated(
            Tool::new(
                "goal",
                "Pursue an objective by recursive goal decomposition; returns the synthesis.",
                schema::<GoalArgs>(),
            ),
            "Pursue a goal",
        ),
    ]
}

fn request(params: &CallToolRequestParams, offered: &[String]) -> Result<RunRequest, String> {
    let args = Value::Object(params.arguments.clone().unwrap_or_default());
    if !BUILTIN.contains(&params.name.as_ref()) && offered.iter().any(|n| n == params.name.as_ref()) {
        return named_request(&params.name, args);
    }
    let bad = |e: serde_json::Error| format!("invalid arguments for `{}`: {e}", params.name);
    Ok(match params.name.as_ref() {
        "run" => {
            let a: RunArgs = serde_json::from_value(args).map_err(bad)?;
            RunRequest::new(RunKind::Run, a.goal)
        }
        "rlm" => {
            let a: RlmArgs = serde_json::from_value(args).map_err(bad)?;
            RunRequest { inputs: a.inputs, ..RunRequest::new(RunKind::Rlm, a.question) }
        }
        "goal" => {
            let a: GoalArgs = serde_json::from_value(args).map_err(bad)?;
            RunRequest::new(RunKind::Goal, a.objective)
        }
        other => {
            let mut names: Vec<String> = BUILTIN.iter().map(|n| n.to_string()).collect();
            names.extend(offered.iter().cloned());
            return Err(format!("no tool `{other}`; the tools are {}", names.join(", ")));
        }
    })
}

/// A call of a named runnable's tool: its `input` is the text, other string arguments its
/// named inputs.
fn named_request(name: &str, args: Value) -> Result<RunRequest, String> {
    let RunInput { text: input, data, .. } = RunInput::from_arguments(name, args).map_err(|e| e.to_string())?;
    let inputs = data.into_iter().map(|(k, v)| (k, if let Value::String(s) = v { s } else { v.to_string() })).collect();
    Ok(RunRequest { inputs, agent: Some(name.to_string()), ..RunRequest::new(RunKind::Run, input) })
}

/// A one-line description of an event, for a progress message.
fn describe(event: &Value) -> String {
    let kind = event["type"].as_str().unwrap_or("event");
    let name = event["run_name"].as_str().unwrap_or_default();
    let detail = ["name", "goal", "text", "delta"].iter().find_map(|k| event[*k].as_str()).unwrap_or_default();
    let detail: String = detail.chars().take(120).collect();
    format!("{name}: {kind} {detail}").trim_end().to_string()
}

/// Follows `run` to its end, cancelling it with the request: sends a progress notification per
/// event when the client asked for progress, a log message per event at the session's level, and
/// puts each permission ask to the person when the client can be asked (see [`elicit`]).
async fn follow(run: &Arc<RunRecord>, context: &RequestContext<RoleServer>, server: &Server, session: &Session) {
    let token = context.meta.get_progress_token();
    let board = server.config.answers.clone().filter(|_| elicit::client_can_elicit(&context.peer));
    let mut changes = run.watch();
    let mut next = 0;
    loop {
        let (events, finished) = run.events_from(next);
        let full = events.len() == crate::runs::EVENT_PAGE;
        for (i, event) in events {
            next = i + 1;
            if let Some(token) = &token {
                let message = describe(&crate::runs::parse_event(&event));
                let param = ProgressNotificationParam::new(token.clone(), next as f64).with_message(message);
                let _ = context.peer.notify_progress(param).await;
            }
            if let Some(message) = logging::message(&session.level, &run.id, &event) {
                logging::send(&context.peer, message).await;
            }
            if let (Some(board), Some(ask)) = (&board, elicit::ask_of(&event)) {
                tokio::spawn(elicit::put(context.peer.clone(), board.clone(), run.id.clone(), ask));
            }
        }
        if full {
            continue;
        }
        if finished {
            return;
        }
        tokio::select! {
            _ = context.ct.cancelled(), if !run.cancel.is_cancelled() => run.cancel.cancel(),
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

/// The capabilities declared: tools, resources (with subscriptions), prompts, completion and
/// logging.
fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_logging()
        .enable_completions()
        .enable_prompts()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_tools()
        .build()
}

/// Completion values as MCP wants them (at most [`CompletionInfo::MAX_VALUES`], with the total).
fn completion(mut values: Vec<String>) -> CompleteResult {
    let total = u32::try_from(values.len()).unwrap_or(u32::MAX);
    let more = values.len() > CompletionInfo::MAX_VALUES;
    values.truncate(CompletionInfo::MAX_VALUES);
    let mut info = CompletionInfo::new(values).unwrap_or_default();
    info.total = Some(total);
    info.has_more = Some(more);
    CompleteResult::new(info)
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(capabilities()).with_instructions(
            "Recursive: run an agent, a recursive language model, a goal pursuit or a named runnable; read \
             the runnables and the runs as resources (recursive://runnables/{name}, recursive://runs/{id}).",
        );
        info.server_info = Implementation::new("recursive", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = tools(&self.server.runner.offered());
        if self.fixtures {
            tools.extend(fixtures::tools());
        }
        Ok(ListToolsResult { tools, ..Default::default() })
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.fixtures
            && let Some(result) = fixtures::call(&params, &context).await
        {
            return Ok(CallToolResponse::Complete(result));
        }
        let failed =
            |text: String| Ok(CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(text)])));
        let request = match request(&params, &self.server.runner.agents()) {
            Ok(r) => r,
            Err(e) => return failed(e),
        };
        let run = match self.server.start(request) {
            Ok(run) => run,
            Err(Busy) => return failed("every run slot and queue place is taken; retry later".into()),
        };
        follow(&run, &context, &self.server, &self.session).await;
        let output = wait_finished(&run).await;
        if !output.ok {
            let why = output.error.clone().unwrap_or_else(|| format!("the run ended {}", output.outcome));
            return failed(format!("{why} (run {})", run.id));
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(output.text.clone())]);
        result.structured_content = serde_json::to_value(&output).ok();
        Ok(CallToolResponse::Complete(result))
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let cursor = request.and_then(|r| r.cursor);
        let mut result = resources::list(&self.server, cursor.clone()).await?;
        if self.fixtures && cursor.is_none() {
            result.resources.extend(fixtures::resources());
        }
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut templates = resources::templates(&self.server);
        if self.fixtures {
            templates.extend(fixtures::templates());
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if self.fixtures
            && let Some(result) = fixtures::read(&request.uri)
        {
            return Ok(result.into());
        }
        Ok(resources::read(&self.server, &request.uri).await?.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if self.fixtures && fixtures::subscribable(&request.uri) {
            return Ok(());
        }
        let Some(run) = resources::subscribable(&self.server, &request.uri).await? else {
            return Ok(());
        };
        let stop = CancellationToken::new();
        if let Some(earlier) = self.session.subscriptions().insert(request.uri.clone(), stop.clone()) {
            earlier.cancel();
        }
        tokio::spawn(resources::follow(context.peer.clone(), request.uri, run, stop));
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if let Some(stop) = self.session.subscriptions().remove(&request.uri) {
            stop.cancel();
        }
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let mut prompts = prompts::list(&self.server);
        if self.fixtures {
            prompts.extend(fixtures::prompts());
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if self.fixtures
            && let Some(result) = fixtures::prompt(&request.name, request.arguments.as_ref())
        {
            return Ok(result.into());
        }
        Ok(prompts::get(&self.server, &request.name, request.arguments.as_ref())?.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let (argument, value) = (&request.argument.name, &request.argument.value);
        let values = match &request.r#ref {
            Reference::Prompt(prompt) if self.fixtures && fixtures::is_prompt(&prompt.name) => {
                fixtures::complete(argument, value)
            }
            Reference::Prompt(prompt) => prompts::complete(&self.server, &prompt.name, argument, value)?,
            Reference::Resource(template) => resources::complete(&self.server, &template.uri, argument, value).await,
            _ => Vec::new(),
        };
        Ok(completion(values))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.level.set(request.level);
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        // A `logging/setLevel` whose level is none of MCP's does not parse as one.
        if request.method == "logging/setLevel" {
            let level = request.params.as_ref().and_then(|p| p.get("level")).cloned().unwrap_or_default();
            let message = format!(
                "no logging level {level}; the levels are debug, info, notice, warning, error, critical, alert, \
                 emergency"
            );
            return Err(McpError::invalid_params(message, None));
        }
        Err(McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, request.method, None))
    }
}

/// Serves the MCP server on this process's stdin and stdout until the client closes them.
pub async fn serve_stdio(server: Arc<Server>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let running = McpServer::new(server).serve(rmcp::transport::stdio()).await.map_err(|e| e.to_string())?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    fn formats(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(o) => {
                if let Some(f) = o.get("format").and_then(Value::as_str) {
                    out.push(f.to_string());
                }
                o.values().for_each(|v| formats(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| formats(v, out)),
            _ => {}
        }
    }

    #[test]
    fn tools_carry_annotations_and_no_number_formats_a_standard_validator_warns_about() {
        let offered = recursive_core::ToolSpec {
            name: "reader".into(),
            description: "Reads.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {
                "input": {"type": "string"},
                "pages": {"type": "integer", "format": "uint64", "minimum": 0},
                "when": {"type": "string", "format": "date-time"}
            }}),
        };
        let tools = tools(&[offered]);
        assert_eq!(tools.len(), 4);
        for tool in &tools {
            let value = serde_json::to_value(tool).unwrap();
            let mut found = Vec::new();
            formats(&value["inputSchema"], &mut found);
            formats(&value["outputSchema"], &mut found);
            assert!(found.iter().all(|f| f == "date-time"), "{}: {found:?}", tool.name);
            assert_eq!(value["annotations"]["readOnlyHint"], false, "{value}");
            assert_eq!(value["annotations"]["openWorldHint"], true, "{value}");
            assert!(value["annotations"]["title"].is_string(), "{value}");
        }
        let reader = serde_json::to_value(&tools[3]).unwrap();
        assert_eq!(reader["inputSchema"]["properties"]["pages"]["minimum"], 0, "the range stays");
        let usage = serde_json::to_string(&tools[0].output_schema).unwrap();
        assert!(!usage.contains("uint"), "{usage}");
    }
}

//! The host side of a run's sandbox ([`RunHost`]): what a snippet's calls of the primitives
//! (`llm_query`, `llm_query_batched`, `rlm_query`, `submit`, the run tree's runnables) and of
//! the host tools do. It serves the loop of [`crate::rlm`] through the [`Engine`] the loop
//! implements, and never reaches back up into it.
//!
//! - [`node`]: where a run sits among the RLM levels and its share of the sub-call budget;
//! - [`sub_call`]: sub-model calls, concurrency-limited and observable;
//! - [`child`]: `rlm_query`, a child run (or a plain sub-call past the depth limit);
//! - [`names`]: which names host tools may take.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::future::BoxFuture;
use monty_types::{ExcType, MontyException, MontyObject};
use recursive_core::{ChatProvider, FinishReason, RunInput, RunScope, RunnableKind, ToolCall, ToolInvoker, run_child};
use serde_json::{Map, Value, json};

use crate::config::RlmConfig;
use crate::convert::{dict_pairs, json_to_monty, monty_to_json, prompt_text, prompt_texts};
use crate::dialect::{Dialect, FINISHERS};
use crate::error::RlmRunError;
use crate::events::RlmEvent;
use crate::inputs::Inputs;
use crate::prompt::{argument_order, truncate_middle};
use crate::reach::{Extra, Reach, split_args, text_arg};
use crate::result::RlmResult;
use crate::sandbox::{HostCall, HostReply, SandboxHost, SnippetErrorKind};
use crate::schema::OutputSchema;

pub(crate) mod child;
pub(crate) mod names;
pub(crate) mod node;
pub(crate) mod sub_call;

pub(crate) use child::task_question;
pub(crate) use node::{Node, Tree};
use sub_call::{SubCaller, model_name};

/// Names of the sandbox primitives (with the run tree's functions of [`crate::reach`]); host
/// tools cannot use them.
pub const PRIMITIVES: [&str; 12] = [
    "llm_query",
    "llm_query_batched",
    "rlm_query",
    "submit",
    "SUBMIT",
    "FINAL",
    "FINAL_VAR",
    "model_query",
    "tool_call",
    "agent_query",
    "goal_query",
    "graph_run",
];

/// What the host functions need of the engine whose run they serve: its configuration, the
/// sub-model, the host tools, the runnables in reach, and child runs for `rlm_query`. The
/// loop ([`crate::Rlm`]) implements it.
pub(crate) trait Engine: Send + Sync + 'static {
    /// The run's configuration.
    fn config(&self) -> &RlmConfig;
    /// The sub-model `llm_query` asks.
    fn sub_model(&self) -> &dyn ChatProvider;
    /// The host tools, called through the run's tool executor.
    fn tools(&self) -> &ToolInvoker;
    /// The runnables a snippet may start.
    fn reach(&self) -> &Reach;
    /// Runs a child RLM (`rlm_query`) as `node`, in `scope`, to its end.
    fn run_child(
        self: Arc<Self>,
        question: String,
        inputs: Inputs,
        scope: RunScope,
        tree: Arc<Tree>,
        node: Node,
    ) -> BoxFuture<'static, Result<RlmResult, RlmRunError>>;
}

/// The host side of one run's sandbox: the primitives and the host tools.
pub(crate) struct RunHost {
    engine: Arc<dyn Engine>,
    tree: Arc<Tree>,
    scope: RunScope,
    node: Node,
    schema: Arc<OutputSchema>,
    /// The iteration (a REPL's cell) the calls belong to.
    pub(crate) step: AtomicU32,
    tool_calls: AtomicU32,
}

fn type_error(msg: impl Into<String>) -> HostReply {
    HostReply::Raise(MontyException::new(ExcType::TypeError, Some(msg.into())))
}

fn error_value(msg: impl Into<String>) -> HostReply {
    HostReply::Value(json_to_monty(&json!({ "error": msg.into() })))
}

/// A sub-call's answer in the dialect's shape: `{"result": ...}` / `{"error": ...}`, or the text
/// itself with errors as `"[error] Type: message"`.
fn shaped(dialect: Dialect, result: Result<Value, (&str, String)>) -> Value {
    match (dialect.wraps_results(), result) {
        (true, Ok(v)) => json!({ "result": v }),
        (true, Err((_, message))) => json!({ "error": message }),
        (false, Ok(v)) => v,
        (false, Err((kind, message))) => Value::String(format!("[error] {kind}: {message}")),
    }
}

/// Binds a call's arguments to `params` (the first `required` of them required), as Python
/// would; a wrong call is the `TypeError` Python raises.
fn bind_args<'a>(
    func: &str,
    params: &[&str],
    call: &'a HostCall,
    required: usize,
) -> Result<Vec<Option<&'a MontyObject>>, HostReply> {
    split_args(func, params, &call.args, &call.kwargs, required, Extra::Refused).map(|s| s.bound).map_err(type_error)
}

impl SandboxHost for RunHost {
    fn is_host_function(&self, name: &str) -> bool {
        PRIMITIVES.contains(&name) || self.engine.tools().tools().get(name).is_some()
    }

    fn call(&self, call: HostCall) -> HostReply {
        match call.name.as_str() {
            "llm_query" | "model_query" => self.llm_query(&call),
            "llm_query_batched" => self.llm_query_batched(&call),
            "rlm_query" => self.rlm_query(&call),
            "tool_call" => self.tool_call(&call),
            "agent_query" => self.runnable_query(RunnableKind::Agent, &["task", "name"], 0, &call),
            "goal_query" => self.runnable_query(RunnableKind::Goal, &["objective", "name"], 0, &call),
            "graph_run" => self.runnable_query(RunnableKind::Graph, &["name", "input"], 1, &call),
            name if FINISHERS.contains(&name) => self.submit(&call),
            _ => self.host_tool(&call),
        }
    }
}

impl RunHost {
    pub(crate) fn new(
        engine: Arc<dyn Engine>,
        tree: Arc<Tree>,
        scope: &RunScope,
        node: &Node,
        schema: Arc<OutputSchema>,
    ) -> Self {
        Self {
            engine,
            tree,
            scope: scope.clone(),
            node: node.clone(),
            schema,
            step: AtomicU32::new(0),
            tool_calls: AtomicU32::new(0),
        }
    }

    fn step(&self) -> u32 {
        self.step.load(Ordering::SeqCst)
    }

    fn stopped(&self) -> Option<String> {
        self.scope.stop_reason().map(|r| format!("the run must stop: {r}"))
    }

    fn sub_caller(&self) -> SubCaller {
        SubCaller {
            engine: self.engine.clone(),
            tree: self.tree.clone(),
            scope: self.node.sub_scope.clone(),
            step: self.step(),
            model: None,
        }
    }

    fn llm_query(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("llm_query", &["prompt", "model"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompt = bound[0].map(prompt_text).unwrap_or_default();
        let dialect = self.engine.config().dialect;
        if let Some(msg) = self.stopped() {
            return self.failed("Stopped", msg);
        }
        if let Err(e) = self.node.reserve(self.engine.config().max_llm_calls, 1) {
            return self.failed("BudgetExceeded", e);
        }
        let caller = self.sub_caller().with_model(model_name(bound[1]));
        HostReply::Pending(Box::pin(async move {
            Ok(match caller.query(prompt, "llm_query").await {
                Ok(text) => shaped(dialect, Ok(Value::String(text))),
                Err(e) => shaped(dialect, Err((e.kind, e.message))),
            })
        }))
    }

    fn llm_query_batched(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("llm_query_batched", &["prompts", "model"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompts: Vec<String> = match bound[0].filter(|o| matches!(o.type_name(), "list" | "tuple")) {
            Some(list) => prompt_texts(list).unwrap_or_default(),
            None => {
                return type_error("llm_query_batched() expects a list of prompts, e.g. llm_query_batched([p1, p2])");
            }
        };
        let dialect = self.engine.config().dialect;
        let n = prompts.len();
        if let Some(msg) = self.stopped() {
            return self.batch_failed(n, "Stopped", msg);
        }
        if let Err(e) = self.node.reserve(self.engine.config().max_llm_calls, n as u64) {
            let msg = format!(
                "{e}; nothing was sent. Send a smaller batch (at most {} prompts) or finish.",
                self.node.calls_left().unwrap_or(0)
            );
            return self.batch_failed(n, "BudgetExceeded", msg);
        }
        let caller = self.sub_caller().with_model(model_name(bound[1]));
        HostReply::Pending(Box::pin(async move {
            let results = caller.query_all(prompts, "llm_query_batched").await;
            let items: Vec<Value> = results
                .into_iter()
                .map(|r| match r {
                    Ok(text) => Value::String(text),
                    Err(e) => Value::String(format!("[error] {}: {}", e.kind, e.message)),
                })
                .collect();
            Ok(shaped(dialect, Ok(Value::Array(items))))
        }))
    }

    /// A failed call in the dialect's shape.
    fn failed(&self, kind: &str, message: String) -> HostReply {
        HostReply::Value(json_to_monty(&shaped(self.engine.config().dialect, Err((kind, message)))))
    }

    /// A batch that sent nothing: `{"error": ...}`, or one error string per prompt.
    fn batch_failed(&self, n: usize, kind: &str, message: String) -> HostReply {
        if self.engine.config().dialect.wraps_results() {
            return error_value(message);
        }
        let each = Value::String(format!("[error] {kind}: {message}"));
        HostReply::Value(json_to_monty(&Value::Array(vec![each; n])))
    }

    /// `submit`, `SUBMIT`, `FINAL` and `FINAL_VAR` (its variable already read by the rewrite):
    /// validates the result and ends the run with it.
    fn submit(&self, call: &HostCall) -> HostReply {
        let name = call.name.as_str();
        let payload = match (call.args.as_slice(), call.kwargs.is_empty()) {
            ([one], true) => monty_to_json(one),
            ([], false) => Value::Object(call.kwargs.iter().map(|(k, v)| (k.clone(), monty_to_json(v))).collect()),
            ([], true) => return type_error(format!("{name}() needs the result, e.g. {name}(answer)")),
            _ => return type_error(format!("{name}() takes one result value, or keyword arguments for its fields")),
        };
        let payload = self.schema.normalize(payload);
        let verdict = self.schema.validate(&payload);
        self.scope.emit(
            self.step(),
            RlmEvent::RlmSubmit {
                valid: verdict.is_ok(),
                errors: verdict.as_ref().err().cloned(),
                output: payload.clone(),
            }
            .into_kind(),
        );
        match verdict {
            Ok(()) => HostReply::Finish(payload),
            Err(errors) => {
                let shown = truncate_middle(&payload.to_string(), 500);
                HostReply::Raise(MontyException::new(
                    ExcType::ValueError,
                    Some(format!(
                        "{name}: the result does not match the output schema:\n- {}\nsubmitted: {shown}\nFix the \
                         result and call {name} again.",
                        errors.join("\n- ")
                    )),
                ))
            }
        }
    }

    /// `tool_call(name, **args)` (or `tool_call(name, {args})`): one of the session's tools by
    /// name, as a host tool call.
    fn tool_call(&self, call: &HostCall) -> HostReply {
        let name = match (call.args.first(), call.kwargs.iter().find(|(k, _)| k == "name")) {
            (Some(n), None) => n.as_ref().as_str().map(str::to_string),
            (None, Some((_, n))) => n.as_ref().as_str().map(str::to_string),
            _ => None,
        };
        let Some(name) = name else {
            return type_error(
                "tool_call() needs the tool's name as a str, e.g. tool_call(\"read_file\", path=\"a.txt\")",
            );
        };
        let mut kwargs: Vec<(String, MontyObject)> = call.kwargs.iter().filter(|(k, _)| k != "name").cloned().collect();
        match call.args.get(1..).unwrap_or_default() {
            [] => {}
            [dict] => match dict_pairs(dict) {
                Some(pairs) => kwargs.extend(pairs.into_iter().map(|(k, v)| (prompt_text(&k), v))),
                None => return type_error("tool_call() takes the tool's arguments as keywords or one dict"),
            },
            _ => return type_error("tool_call() takes the tool's arguments as keywords or one dict"),
        }
        if self.engine.tools().tools().get(&name).is_none() {
            let mut names = self.engine.tools().tools().names();
            names.sort();
            return HostReply::Raise(MontyException::new(
                ExcType::ValueError,
                Some(format!("tool_call(): no tool `{name}` here (tools: {})", names.join(", "))),
            ));
        }
        self.host_tool(&HostCall { name, args: Vec::new(), kwargs, awaited: call.awaited })
    }

    /// `agent_query`, `goal_query` and `graph_run`: the text and the runnable's name from
    /// `params` (the text at `text_at`), further keywords as data.
    fn runnable_query(&self, kind: RunnableKind, params: &[&str], text_at: usize, call: &HostCall) -> HostReply {
        let split = match split_args(&call.name, params, &call.args, &call.kwargs, 1, Extra::Data) {
            Ok(s) => s,
            Err(e) => return type_error(e),
        };
        let text = text_arg(split.bound[text_at]).unwrap_or_default();
        let name = text_arg(split.bound[1 - text_at]);
        self.start_runnable(kind, name, RunInput { text, data: split.data, ..Default::default() })
    }

    /// Runs a runnable of the session's reach as a child of this run; its result comes back
    /// like a sub-call's (the dialect's shape), a failed run as an error with its partial text.
    fn start_runnable(&self, kind: RunnableKind, name: Option<String>, input: RunInput) -> HostReply {
        if let Some(msg) = self.stopped() {
            return self.failed("Stopped", msg);
        }
        let runnable = match self.engine.reach().find(kind, name.as_deref()) {
            Ok(r) => r,
            Err(e) => return HostReply::Raise(MontyException::new(ExcType::ValueError, Some(e))),
        };
        let scope = self.node.sub_scope.clone();
        let step = self.step();
        let dialect = self.engine.config().dialect;
        HostReply::Pending(Box::pin(async move {
            let outcome = match run_child(runnable.as_ref(), input, &scope, step).await {
                Ok(o) => o,
                Err(e) => return Ok(shaped(dialect, Err(("DepthError", e.to_string())))),
            };
            Ok(if outcome.is_success() {
                shaped(dialect, Ok(outcome.value(kind)))
            } else {
                shaped(dialect, Err(("RunFailed", outcome.report(runnable.name(), kind))))
            })
        }))
    }

    /// A host tool: through the run's tool executor (permission gate, timeout, output cap,
    /// `tool_call`/`tool_result` events), like a tool call of the agent loop. A denied or failed
    /// call answers `{"error": ...}`.
    fn host_tool(&self, call: &HostCall) -> HostReply {
        let Some(tool) = self.engine.tools().tools().get(&call.name).cloned() else {
            return HostReply::Raise(MontyException::new(
                ExcType::NameError,
                Some(format!("name '{}' is not defined", call.name)),
            ));
        };
        let spec = tool.spec();
        let order = argument_order(&spec.parameters);
        if call.args.len() > order.len() {
            return type_error(format!(
                "{}() takes at most {} positional argument(s) ({}) but {} were given",
                call.name,
                order.len(),
                order.join(", "),
                call.args.len()
            ));
        }
        let mut args = Map::new();
        for (name, v) in order.iter().zip(&call.args) {
            args.insert(name.clone(), monty_to_json(v));
        }
        for (k, v) in &call.kwargs {
            if args.contains_key(k) {
                return type_error(format!("{}() got multiple values for argument '{k}'", call.name));
            }
            args.insert(k.clone(), monty_to_json(v));
        }
        let n = self.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let step = self.step();
        let tool_call =
            ToolCall { id: format!("rlm-{step}-{n}"), name: call.name.clone(), arguments: Value::Object(args) };
        let invoker = self.engine.tools().clone();
        let scope = self.scope.clone();
        let dialect = self.engine.config().dialect;
        HostReply::Pending(Box::pin(async move {
            let outcome = invoker.invoke(tool_call, &scope, step, None).await;
            Ok(if outcome.is_error {
                let message = outcome.output.strip_prefix("error: ").unwrap_or(&outcome.output);
                if dialect.wraps_results() {
                    json!({ "error": message })
                } else {
                    Value::String(format!("[error] ToolError: {message}"))
                }
            } else {
                Value::String(outcome.output)
            })
        }))
    }
}

/// Says why a snippet the run tree stopped was stopped: the stop token fires at cancellation
/// and at the tree's deadline alike, and the sandbox only knows it was cancelled.
pub(crate) fn stopped_by_tree(outcome: &mut crate::sandbox::SnippetOutcome, scope: &RunScope) {
    let Some(error) = outcome.error.as_mut() else { return };
    match scope.stop_reason() {
        Some(reason) if error.kind == SnippetErrorKind::Cancelled && reason != FinishReason::Cancelled => {
            error.message = format!("KeyboardInterrupt: the run tree stopped this snippet: {reason}");
        }
        _ => {}
    }
}

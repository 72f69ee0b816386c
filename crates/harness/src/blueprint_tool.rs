//! The `blueprint` tool: a model writes a graph and runs it inside the run it stands in. The
//! text is compiled (every problem comes back as `file:line:column` diagnostics, so the model
//! can repair it and call again), bound against the run's own allowlist — its model, the tools
//! it is offered and its runnables, never more — with its `[limits]` capped at the run's own
//! (a blueprint can only narrow them), saved under the workspace
//! (`.recursive/blueprints/NAME.toml`, so `recursive graph run` can run it again), and run as a
//! child graph of the run: the same budget, deadline, events and cancellation, checkpointed in
//! the workspace's graph store (`.recursive/graphs.db`) with its blueprint, so the thread can be
//! resumed like any other.
//!
//! Saving meets the path rules `write_file` meets (the permission gate's path rules, for this
//! tool and for `write_file`), never follows a link (see its `save` module), and keeps a different
//! blueprint of the same name unless the model asks to replace it.

mod save;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    ChatOptions, ChatProvider, Decision, RunInput, RunScope, Runnables, Tool, ToolCall, ToolContext, ToolError,
    ToolInvoker, ToolSpec, run_child,
};
use recursive_graph::blueprint::{self, Allowlist, Source};
use recursive_graph::{Graph, GraphRunnable, RecursionPolicy};
use serde_json::{Map, Value, json};

use save::{SaveError, Saved};

/// Most characters of one blueprint.
const MAX_BLUEPRINT_CHARS: usize = 256 * 1024;

/// Where blueprints are saved, under the workspace.
const BLUEPRINT_DIRS: [&str; 2] = [".recursive", "blueprints"];

/// What a blueprint written in a run may use: exactly what the run may.
#[derive(Clone)]
pub struct RunCapabilities {
    /// The run's model (a blueprint's `model = "default"`).
    pub provider: Arc<dyn ChatProvider>,
    /// Its call options.
    pub options: ChatOptions,
    /// The run's tools, under its policy (a blueprint's `tool = "NAME"`).
    pub tools: ToolInvoker,
    /// The run's runnables (a blueprint's `agent`/`rlm`/`goal`/`graph = "NAME"`).
    pub runnables: Runnables,
}

impl RunCapabilities {
    fn allowlist(&self, cap: RecursionPolicy) -> Allowlist {
        let names = self.tools.tools().names();
        Allowlist::new()
            .model("default", self.provider.clone(), self.options.clone())
            .tools(self.tools.clone(), names)
            .runnables(&self.runnables)
            .limits(cap)
    }
}

/// The `blueprint` tool (see the module docs).
pub struct BlueprintTool {
    capabilities: RunCapabilities,
    workspace: PathBuf,
    /// Only check and save; never run (`recursive graph new`).
    check_only: bool,
    /// The superstep, visit and depth limits of the run this tool serves; a blueprint's own
    /// can only be narrower (its depth is also capped by the run tree's).
    limits: RecursionPolicy,
    /// The blueprint saved last.
    saved: std::sync::Mutex<Option<PathBuf>>,
    /// The workspace's graph store, opened at the first run.
    store: tokio::sync::OnceCell<Arc<dyn recursive_store::Checkpointer>>,
}

/// The arguments of one call.
struct Args {
    text: String,
    data: Map<String, Value>,
    replace: bool,
}

impl Args {
    fn parse(arguments: &Value) -> Result<Self, ToolError> {
        let invalid = |message: String| ToolError::InvalidArguments { tool: "blueprint".into(), message };
        let text = arguments
            .get("blueprint")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("`blueprint` (text) is required".into()))?;
        if text.chars().count() > MAX_BLUEPRINT_CHARS {
            return Err(invalid(format!("the blueprint is longer than {MAX_BLUEPRINT_CHARS} characters")));
        }
        let data = match arguments.get("input") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(invalid("`input` must be an object of channel values".into())),
        };
        let replace = match arguments.get("replace") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(invalid("`replace` must be true or false".into())),
        };
        Ok(Self { text: text.to_string(), data, replace })
    }
}

impl BlueprintTool {
    /// A tool writing under `workspace` and running with `capabilities`, for a run with a
    /// graph's default limits (see [`BlueprintTool::with_limits`]).
    pub fn new(capabilities: RunCapabilities, workspace: PathBuf) -> Self {
        Self {
            capabilities,
            workspace,
            check_only: false,
            limits: RecursionPolicy::default(),
            saved: std::sync::Mutex::new(None),
            store: tokio::sync::OnceCell::new(),
        }
    }

    /// Checks, binds and saves, but does not run.
    pub fn check_only(mut self) -> Self {
        self.check_only = true;
        self
    }

    /// The limits of the run this tool serves: a blueprint's `[limits]` above them is refused,
    /// and a limit it leaves out is at most these.
    pub fn with_limits(mut self, limits: RecursionPolicy) -> Self {
        self.limits = limits;
        self
    }

    /// The blueprint this tool saved last, if any.
    pub fn last_saved(&self) -> Option<PathBuf> {
        self.saved.lock().ok().and_then(|s| s.clone())
    }

    /// Where a blueprint named `name` is saved, relative to the workspace.
    pub fn relative_path_of(name: &str) -> PathBuf {
        BLUEPRINT_DIRS.iter().collect::<PathBuf>().join(format!("{name}.toml"))
    }

    /// The limits a blueprint run under `scope` may have.
    fn cap_in(&self, scope: &RunScope) -> RecursionPolicy {
        RecursionPolicy { max_depth: self.limits.max_depth.min(scope.max_depth()), ..self.limits }
    }

    fn workspace(&self) -> Result<recursive_tools::Workspace, ToolError> {
        recursive_tools::Workspace::new(&self.workspace).map_err(|e| ToolError::failed(format!("the workspace: {e}")))
    }

    /// The state file `name` under the workspace's `.recursive/`, refused when that place leads
    /// outside the workspace.
    fn state_path(&self, name: &str) -> Result<PathBuf, ToolError> {
        self.workspace()?.state_path(name).map_err(|e| ToolError::failed(format!("the workspace's state: {e}")))
    }

    /// The path rules `write_file` meets, for the file this call saves. The gate already
    /// decided the call itself with that path (see [`Tool::paths`]); here the rules for
    /// `write_file` that cover the path (its screen) are put to the gate as a `write_file` call:
    /// a deny refuses, an ask asks. A path no such rule covers is not asked about again.
    async fn check_path_rules(&self, shown: &str, ctx: &ToolContext) -> Result<(), ToolError> {
        let Some(gate) = self.capabilities.tools.gate() else { return Ok(()) };
        let write_file = match self.capabilities.tools.tools().get("write_file") {
            Some(tool) => tool.clone(),
            None => recursive_core::typed(recursive_tools::WriteFile::new(self.workspace()?)),
        };
        let call = ToolCall {
            id: ctx.call_id.clone(),
            name: "write_file".into(),
            arguments: json!({ "path": shown, "content": "" }),
        };
        if !gate.screen(&call, &write_file).is_some_and(|screen| screen.hides(shown)) {
            return Ok(());
        }
        let verdict = gate.check_in(&call, Some(&write_file), &ctx.scope, ctx.step).await;
        match verdict.decision {
            Decision::Deny => Err(ToolError::Denied(format!(
                "writing `{shown}` is refused as it would be for write_file ({}); the blueprint was not saved",
                verdict.reason
            ))),
            _ => Ok(()),
        }
    }

    fn save(&self, name: &str, text: &str, replace: bool) -> Result<(PathBuf, Saved), ToolError> {
        let shown = Self::relative_path_of(name).display().to_string();
        let root = self.workspace()?.root().to_path_buf();
        let saved =
            save::save(&root, &BLUEPRINT_DIRS, &format!("{name}.toml"), text, replace).map_err(|e| match e {
                SaveError::Exists(_) => ToolError::failed(format!(
                    "a different blueprint named `{name}` is already saved as {shown}; give this one another `name`, \
                 or call again with `\"replace\": true` to overwrite it"
                )),
                SaveError::NotFollowed(..) => ToolError::Denied(format!("{e}; the blueprint was not saved")),
                SaveError::Io(..) => ToolError::failed(format!("cannot save the blueprint: {e}")),
            })?;
        let path = root.join(&shown);
        if let Ok(mut last) = self.saved.lock() {
            *last = Some(path.clone());
        }
        Ok((path, saved))
    }

    async fn store(&self) -> Result<Arc<dyn recursive_store::Checkpointer>, ToolError> {
        let store = self
            .store
            .get_or_try_init(|| async {
                let path =
                    self.state_path("graphs.db").map_err(|e| recursive_store::StoreError::Backend(e.to_string()))?;
                recursive_store::open(&path.display().to_string()).await
            })
            .await
            .map_err(|e| ToolError::failed(format!("the graph store: {e}")))?;
        Ok(store.clone())
    }

    /// Runs the bound graph as a child of the calling run and reports its outcome.
    async fn run(
        &self,
        graph: Graph,
        kept: Source,
        data: Map<String, Value>,
        saved: Saved,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let name = graph.name().to_string();
        let limits = *graph.policy();
        let runnable = GraphRunnable::new(Arc::new(graph)).with_store(self.store().await?).with_source(kept);
        let outcome = run_child(&runnable, RunInput { data, ..Default::default() }, &ctx.scope, ctx.step)
            .await
            .map_err(|e| ToolError::Denied(e.to_string()))?;
        // The thread's id is in the run's `graph_started` event (`recursive graph history`).
        let report = json!({
            "graph": name,
            "saved": Self::relative_path_of(&name),
            "file": saved_word(saved),
            "limits": limits,
            "finish": outcome.finish_reason.as_str(),
            "error": outcome.error,
            "state": outcome.output,
        });
        if outcome.is_success() { Ok(report.to_string()) } else { Err(ToolError::failed(report.to_string())) }
    }
}

/// A graph name usable as a file name.
fn file_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn saved_word(saved: Saved) -> &'static str {
    match saved {
        Saved::Created => "created",
        Saved::Replaced => "replaced",
        Saved::Unchanged => "unchanged",
    }
}

#[async_trait]
impl Tool for BlueprintTool {
    fn spec(&self) -> ToolSpec {
        let what = if self.check_only { "checks and saves it" } else { "checks, saves and runs it" };
        let RecursionPolicy { max_supersteps, max_visits, max_depth } = self.limits;
        ToolSpec {
            name: "blueprint".into(),
            description: format!(
                "Write a graph as a TOML blueprint; this tool {what}. A blueprint has `name`, `[state]` (channel = \
                 \"string\" | \"number\" | \"integer\" | \"boolean\" | \"list\" | \"object\"), `[[nodes]]` (each with \
                 `name`, one of `model = \"default\"` + `prompt`, `tool = \"NAME\"` + `args`, `agent`/`goal = \"NAME\"` \
                 + `input`/`objective`, `rlm = \"NAME\"` + `question`, and `output` = a channel; `{{channel}}` in text \
                 is replaced by its value), `[[edges]]` (`from`, `to`, optional `when = {{ channel, equals | \
                 contains }}`; START and END) and optional `[limits]`, which can only narrow this run's: \
                 `max_supersteps` at most {max_supersteps}, `max_visits` (per node) at most {max_visits}, \
                 `max_depth` at most {max_depth}. Problems come back with line:column so you can fix them and call \
                 again. It is saved as .recursive/blueprints/NAME.toml; a different blueprint already saved under \
                 that name is kept unless you pass `replace: true`. Only this run's model, tools ({}) and runnables \
                 ({}) can be used.",
                self.capabilities.tools.tools().names().join(", "),
                self.capabilities.runnables.names().join(", ")
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "blueprint": {"type": "string", "description": "The blueprint's TOML text."},
                    "input": {"type": "object", "description": "Initial values of channels."},
                    "replace": {
                        "type": "boolean",
                        "description": "Overwrite a different blueprint saved under the same name (default false)."
                    }
                },
                "required": ["blueprint"],
                "additionalProperties": false
            }),
        }
    }

    /// The file a call saves, so the permission gate's path rules see it.
    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        let text = arguments.get("blueprint")?.as_str()?;
        if text.chars().count() > MAX_BLUEPRINT_CHARS {
            return None;
        }
        let bp = blueprint::parse(text, "blueprint.toml").ok()?;
        let name = bp.name.get();
        file_name_ok(name).then(|| vec![Self::relative_path_of(name).display().to_string()])
    }

    async fn call(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let Args { text, data, replace } = Args::parse(&arguments)?;
        let compiled = blueprint::compile(&text, "blueprint.toml")
            .map_err(|d| ToolError::failed(format!("the blueprint has problems; fix them and call again:\n{d}")))?;
        let name = compiled.name.get().clone();
        if !file_name_ok(&name) {
            return Err(ToolError::failed(format!(
                "the blueprint's name `{name}` must be letters, digits, `-` and `_` (at most 64)"
            )));
        }
        // The model sees paths relative to the workspace (so a recorded run replays anywhere);
        // the thread keeps the absolute one.
        let shown = Self::relative_path_of(&name).display().to_string();
        let source = Source { origin: shown.clone(), text };
        let graph = blueprint::load(&source, &self.capabilities.allowlist(self.cap_in(&ctx.scope))).map_err(|d| {
            ToolError::failed(format!(
                "the blueprint uses what this run may not; use only what is allowed and call again:\n{d}"
            ))
        })?;
        self.check_path_rules(&shown, ctx).await?;
        let (path, saved) = self.save(&name, &source.text, replace)?;
        if self.check_only {
            return Ok(match saved {
                Saved::Created => format!("The blueprint `{name}` is valid and saved as {shown}."),
                Saved::Replaced => format!("The blueprint `{name}` is valid and replaced the one saved as {shown}."),
                Saved::Unchanged => format!("The blueprint `{name}` is valid and already saved as {shown}."),
            });
        }
        let kept = Source { origin: path.display().to_string(), text: source.text };
        self.run(graph, kept, data, saved, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_names_must_be_file_names() {
        assert!(file_name_ok("triage-v2"));
        assert!(!file_name_ok("../etc"));
        assert!(!file_name_ok(""));
    }
}

//! The `blueprint` tool: a model writes a graph and runs it inside the run it stands in. The
//! text is compiled (every problem comes back as `file:line:column` diagnostics, so the model
//! can repair it and call again), bound against the run's own allowlist — its model, the tools
//! it is offered and its runnables, never more — saved under the workspace
//! (`.recursive/blueprints/NAME.toml`, so `recursive graph run` can run it again), and run as a
//! child graph of the run: the same budget, events and cancellation, checkpointed in the
//! workspace's graph store (`.recursive/graphs.db`) with its blueprint, so the thread can be
//! resumed like any other.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    ChatOptions, ChatProvider, RunInput, Runnables, Tool, ToolContext, ToolError, ToolInvoker, ToolSpec, run_child,
};
use recursive_graph::GraphRunnable;
use recursive_graph::blueprint::{self, Allowlist, Source};
use serde_json::{Value, json};

/// Most characters of one blueprint.
const MAX_BLUEPRINT_CHARS: usize = 256 * 1024;

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
    fn allowlist(&self) -> Allowlist {
        let names = self.tools.tools().names();
        Allowlist::new()
            .model("default", self.provider.clone(), self.options.clone())
            .tools(self.tools.clone(), names)
            .runnables(&self.runnables)
    }
}

/// The `blueprint` tool (see the module docs).
pub struct BlueprintTool {
    capabilities: RunCapabilities,
    workspace: PathBuf,
    /// Only check and save; never run (`recursive graph new`).
    check_only: bool,
    /// The blueprint saved last.
    saved: std::sync::Mutex<Option<PathBuf>>,
    /// The workspace's graph store, opened at the first run.
    store: tokio::sync::OnceCell<Arc<dyn recursive_graph::Checkpointer>>,
}

impl BlueprintTool {
    /// A tool writing under `workspace` and running with `capabilities`.
    pub fn new(capabilities: RunCapabilities, workspace: PathBuf) -> Self {
        Self {
            capabilities,
            workspace,
            check_only: false,
            saved: std::sync::Mutex::new(None),
            store: tokio::sync::OnceCell::new(),
        }
    }

    /// Checks, binds and saves, but does not run.
    pub fn check_only(mut self) -> Self {
        self.check_only = true;
        self
    }

    /// The blueprint this tool saved last, if any.
    pub fn last_saved(&self) -> Option<PathBuf> {
        self.saved.lock().ok().and_then(|s| s.clone())
    }

    /// Where a blueprint named `name` is saved, relative to the workspace.
    pub fn relative_path_of(name: &str) -> PathBuf {
        PathBuf::from(".recursive").join("blueprints").join(format!("{name}.toml"))
    }

    /// The state file `name` under the workspace's `.recursive/`, refused when that place leads
    /// outside the workspace.
    fn state_path(&self, name: &str) -> Result<PathBuf, ToolError> {
        recursive_tools::Workspace::new(&self.workspace)
            .and_then(|ws| ws.state_path(name))
            .map_err(|e| ToolError::failed(format!("the workspace's state: {e}")))
    }

    fn save(&self, name: &str, text: &str) -> Result<PathBuf, ToolError> {
        let path = self.state_path(&format!("blueprints/{name}.toml"))?;
        let dir = path.parent().ok_or_else(|| ToolError::failed("no directory for blueprints"))?;
        std::fs::create_dir_all(dir).map_err(|e| ToolError::failed(format!("cannot create {}: {e}", dir.display())))?;
        std::fs::write(&path, text).map_err(|e| ToolError::failed(format!("cannot write {}: {e}", path.display())))?;
        if let Ok(mut saved) = self.saved.lock() {
            *saved = Some(path.clone());
        }
        Ok(path)
    }
}

/// A graph name usable as a file name.
fn file_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[async_trait]
impl Tool for BlueprintTool {
    fn spec(&self) -> ToolSpec {
        let what = if self.check_only { "checks and saves it" } else { "checks, saves and runs it" };
        ToolSpec {
            name: "blueprint".into(),
            description: format!(
                "Write a graph as a TOML blueprint; this tool {what}. A blueprint has `name`, `[state]` (channel = \
                 \"string\" | \"number\" | \"integer\" | \"boolean\" | \"list\" | \"object\"), `[[nodes]]` (each with \
                 `name`, one of `model = \"default\"` + `prompt`, `tool = \"NAME\"` + `args`, `agent`/`goal = \"NAME\"` \
                 + `input`/`objective`, `rlm = \"NAME\"` + `question`, and `output` = a channel; `{{channel}}` in text \
                 is replaced by its value) and `[[edges]]` (`from`, `to`, optional `when = {{ channel, equals | \
                 contains }}`; START and END). Problems come back with line:column so you can fix them and call again. \
                 Only this run's model, tools ({}) and runnables ({}) can be used.",
                self.capabilities.tools.tools().names().join(", "),
                self.capabilities.runnables.names().join(", ")
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "blueprint": {"type": "string", "description": "The blueprint's TOML text."},
                    "input": {"type": "object", "description": "Initial values of channels."}
                },
                "required": ["blueprint"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let invalid = |message: String| ToolError::InvalidArguments { tool: "blueprint".into(), message };
        let text = arguments
            .get("blueprint")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("`blueprint` (text) is required".into()))?;
        if text.chars().count() > MAX_BLUEPRINT_CHARS {
            return Err(invalid(format!("the blueprint is longer than {MAX_BLUEPRINT_CHARS} characters")));
        }
        let data = match arguments.get("input") {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(invalid("`input` must be an object of channel values".into())),
        };
        let compiled = blueprint::compile(text, "blueprint.toml")
            .map_err(|d| ToolError::failed(format!("the blueprint has problems; fix them and call again:\n{d}")))?;
        let name = compiled.name.get().clone();
        if !file_name_ok(&name) {
            return Err(ToolError::failed(format!(
                "the blueprint's name `{name}` must be letters, digits, `-` and `_` (at most 64)"
            )));
        }
        // The model sees paths relative to the workspace (so a recorded run replays anywhere);
        // the thread keeps the absolute one.
        let shown = Self::relative_path_of(&name);
        let source = Source { origin: shown.display().to_string(), text: text.to_string() };
        let graph = blueprint::load(&source, &self.capabilities.allowlist()).map_err(|d| {
            ToolError::failed(format!(
                "the blueprint uses what this run may not; use only what is allowed and call again:\n{d}"
            ))
        })?;
        let path = self.save(&name, text)?;
        if self.check_only {
            return Ok(format!("The blueprint `{name}` is valid and saved as {}.", shown.display()));
        }
        let store = self
            .store
            .get_or_try_init(|| async {
                let path = self
                    .state_path("graphs.db")
                    .map_err(|e| recursive_graph::checkpoint::StoreError::Backend(e.to_string()))?;
                recursive_graph::checkpoint::open(&path.display().to_string()).await
            })
            .await
            .map_err(|e| ToolError::failed(format!("the graph store: {e}")))?
            .clone();
        let kept = Source { origin: path.display().to_string(), text: source.text };
        let runnable = GraphRunnable::new(Arc::new(graph)).with_store(store).with_source(kept);
        let outcome = run_child(&runnable, RunInput { data, ..Default::default() }, &ctx.scope, ctx.step)
            .await
            .map_err(|e| ToolError::Denied(e.to_string()))?;
        // The thread's id is in the run's `graph_started` event (`recursive graph history`).
        let report = json!({
            "graph": name,
            "saved": shown,
            "finish": outcome.finish_reason.as_str(),
            "error": outcome.error,
            "state": outcome.output,
        });
        if outcome.is_success() { Ok(report.to_string()) } else { Err(ToolError::failed(report.to_string())) }
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

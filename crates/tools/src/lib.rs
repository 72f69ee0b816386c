//! Built-in tools for Recursive agents, the workspace sandbox they run in, the permission
//! policy that gates them, and a client for tools served over MCP.
//!
//! - [`Workspace`] resolves every path a tool receives inside one root directory.
//! - [`builtin_tools`] gives every built-in tool; [`read_only_tools`] the ones without side
//!   effects on the workspace.
//! - [`PermissionPolicy`] implements the agent loop's [`recursive_core::ToolGate`] from the
//!   `[permissions]` table of `recursive.toml`.
//! - [`mcp`] starts MCP servers from the `[mcp]` table and exposes their tools.

use std::sync::Arc;

use recursive_core::{ToolRegistry, typed};

pub mod apply_patch;
pub mod command;
pub mod config;
pub mod fs;
pub mod html;
pub mod journal;
pub mod mcp;
pub mod memory;
pub mod mode;
pub mod patch;
pub mod permissions;
mod process;
pub mod sandbox;
pub mod search;
pub mod shell;
pub mod truncate;
pub mod web;

pub use config::{ListConfig, ReadConfig, SearchConfig, ShellConfig, ToolsConfig, WebConfig};
pub use fs::{ListDir, ReadFile, WriteFile};
pub use journal::{EditJournal, Undone};
pub use mcp::{
    McpConfig, McpEvent, McpServerConfig, McpServerStatus, McpStatus, McpTools, spawn_servers, start_servers,
};
pub use memory::{MemoryEntry, MemoryError, MemoryStore, Recall, Remember};
pub use mode::{Mode, ModeSwitch};
pub use patch::ApplyPatch;
pub use permissions::{
    Action, Approval, ApprovalHandler, ClientApprover, FixedApprover, NO_TERMINAL_REASON, PermissionPolicy,
    PermissionRule, PermissionsConfig, PermissionsError, SERVER_ASK_REASON, ServerApprover, TerminalApprover,
    approver_for_flags,
};
pub use process::kill_running_commands;
pub use sandbox::{SandboxError, Workspace};
pub use search::SearchFiles;
pub use shell::RunShell;
pub use web::WebFetch;

/// Names of the tools [`read_only_tools`] returns.
pub const READ_ONLY_TOOL_NAMES: &[&str] = &["list_dir", "read_file", "recall", "search_files", "web_fetch"];

/// The memory store the built-in tools use: `config.memory_path` (relative to the workspace
/// root) or `<workspace>/.recursive/memory.db`.
pub fn memory_store(workspace: &Workspace, config: &ToolsConfig) -> Arc<MemoryStore> {
    Arc::new(match &config.memory_path {
        Some(p) if p.is_absolute() => MemoryStore::new(p.clone()),
        Some(p) => MemoryStore::new(workspace.root().join(p)),
        None => MemoryStore::in_workspace(workspace),
    })
}

/// Every built-in tool: `read_file`, `write_file`, `list_dir`, `apply_patch`, `run_shell`,
/// `search_files`, `web_fetch`, `remember` and `recall`.
pub fn builtin_tools(workspace: &Workspace, config: &ToolsConfig) -> ToolRegistry {
    let memory = memory_store(workspace, config);
    let mut tools = read_only_with(workspace, config, memory.clone());
    tools
        .register(typed(WriteFile::new(workspace.clone())))
        .register(typed(ApplyPatch::new(workspace.clone())))
        .register(typed(RunShell::new(workspace.clone(), config.shell.clone())))
        .register(typed(Remember::new(memory)));
    tools
}

/// The built-in tools without side effects on the workspace: `read_file`, `list_dir`,
/// `search_files`, `recall` and `web_fetch`. `web_fetch` reaches the network (it only reads,
/// but what it requests is visible to the server); leave it out with
/// [`ToolRegistry::subset`] where that matters.
pub fn read_only_tools(workspace: &Workspace, config: &ToolsConfig) -> ToolRegistry {
    read_only_with(workspace, config, memory_store(workspace, config))
}

fn read_only_with(workspace: &Workspace, config: &ToolsConfig, memory: Arc<MemoryStore>) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools
        .register(typed(ReadFile::new(workspace.clone(), config.read.clone())))
        .register(typed(ListDir::new(workspace.clone(), config.list.clone())))
        .register(typed(SearchFiles::new(workspace.clone(), config.search.clone())))
        .register(typed(Recall::new(memory)))
        .register(typed(WebFetch::new(config.web.clone())));
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_tools_has_every_tool_with_a_schema_and_description() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let tools = builtin_tools(&ws, &ToolsConfig::default());
        assert_eq!(
            tools.names(),
            [
                "apply_patch",
                "list_dir",
                "read_file",
                "recall",
                "remember",
                "run_shell",
                "search_files",
                "web_fetch",
                "write_file"
            ]
        );
        for spec in tools.specs() {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(spec.parameters["properties"].is_object(), "{}", spec.name);
            assert!(spec.description.len() > 40, "{}", spec.name);
        }
    }

    #[test]
    fn read_only_tools_are_exactly_the_tools_marked_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let all = builtin_tools(&ws, &ToolsConfig::default());
        let marked: Vec<String> =
            all.names().into_iter().filter(|n| all.get(n).is_some_and(|t| t.read_only())).collect();
        let ro = read_only_tools(&ws, &ToolsConfig::default());
        assert_eq!(ro.names(), marked);
        assert_eq!(ro.names(), READ_ONLY_TOOL_NAMES);
    }

    #[test]
    fn building_the_tools_creates_nothing_in_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let _ = builtin_tools(&ws, &ToolsConfig::default());
        assert_eq!(std::fs::read_dir(ws.root()).unwrap().count(), 0);
    }
}

//! The configured MCP servers (`[mcp.servers.*]`) of one command: started once through the
//! harness, their tools offered to what the harness builds (under the permission policy, whose
//! `default_mcp` asks), shut down when the command ends.
//!
//! Two ways to start them: [`Harness::start_mcp`] waits for them, and every agent, runnable
//! file, goal pursuer and graph allowlist built afterwards offers their tools (`serve`,
//! `worker`, `goal`, `graph`, `rlm`); [`Harness::spawn_mcp`] starts them in the background for
//! an agent that takes them as they become ready (`run`, `chat`).

use std::time::Duration;

use recursive_core::{LateTools, RunScope};
use recursive_tools::{McpConfig, McpTools};
use tokio::task::JoinHandle;

use crate::{ConfigError, Harness};

/// Servers started by [`Harness::start_mcp`]; [`McpServers::shutdown`] stops them.
#[derive(Debug, Default)]
pub struct McpServers(Option<McpTools>);

impl McpServers {
    /// Closes the connections and stops the servers' processes.
    pub async fn shutdown(self) {
        if let Some(tools) = self.0 {
            tools.shutdown().await;
        }
    }
}

/// Servers starting in the background ([`Harness::spawn_mcp`]): their tools join `late` as
/// they become ready.
pub struct StartingMcp {
    late: LateTools,
    starting: JoinHandle<McpTools>,
    started: Option<McpTools>,
}

impl std::fmt::Debug for StartingMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartingMcp").field("started", &self.started).finish()
    }
}

impl StartingMcp {
    /// Where the servers' tools join: give it to the agent ([`recursive_core::Agent::with_late_tools`]).
    pub fn late(&self) -> LateTools {
        self.late.clone()
    }

    /// The tools' set and the start-up task, for a caller that keeps them itself.
    pub fn into_parts(self) -> (LateTools, JoinHandle<McpTools>) {
        (self.late, self.starting)
    }

    /// Waits at most `grace` (or until `scope` is cancelled) for the servers, so that quick
    /// ones are there for the first model call.
    pub async fn wait(&mut self, grace: Duration, scope: &RunScope) {
        if self.started.is_some() {
            return;
        }
        tokio::select! {
            done = &mut self.starting => self.started = Some(done.unwrap_or_default()),
            _ = tokio::time::sleep(grace) => {}
            _ = scope.cancel_token().cancelled() => {}
        }
    }

    /// Stops the servers; those still starting are abandoned (their processes are killed as
    /// they are dropped).
    pub async fn shutdown(self) {
        let started = match self.started {
            Some(started) => Some(started),
            None if self.starting.is_finished() => self.starting.await.ok(),
            None => {
                self.starting.abort();
                None
            }
        };
        if let Some(tools) = started {
            tools.shutdown().await;
        }
    }
}

impl Harness {
    /// `[mcp]` of the configuration.
    pub fn mcp_config(&self) -> Result<McpConfig, ConfigError> {
        self.config.section(&self.config.file.mcp, "mcp")
    }

    /// Whether `name` may be the tool of a configured MCP server (`server__tool`) not started yet.
    pub(crate) fn may_be_mcp_tool(&self, name: &str) -> bool {
        let Some((server, _)) = name.split_once(recursive_tools::mcp::NAME_SEPARATOR) else { return false };
        self.mcp_config().is_ok_and(|c| c.servers.get(server).is_some_and(|s| s.enabled))
    }

    /// Starts the configured MCP servers and waits for them (each under its start-up timeout;
    /// one `mcp_server` event each on `scope`). Their tools join the harness's tools: every
    /// agent, RLM, goal pursuer and allowlist built from now on offers them, and the runnable
    /// files are built again so that those naming them get them.
    pub async fn start_mcp(&mut self, scope: &RunScope) -> Result<McpServers, ConfigError> {
        let config = self.mcp_config()?;
        if !config.servers.values().any(|s| s.enabled) {
            return Ok(McpServers::default());
        }
        let tools = recursive_tools::start_servers(&config, scope).await;
        self.setup.builtin.extend(tools.registry());
        self.mcp_tools.extend(tools.registry());
        if let Err(e) = self.rebuild_runnables() {
            tools.shutdown().await;
            return Err(e);
        }
        Ok(McpServers(Some(tools)))
    }

    /// Starts the configured MCP servers in the background (one `mcp_server` event each on
    /// `scope`): an agent given [`StartingMcp::late`] offers their tools as they become ready,
    /// as do the runnable-file agents that name one.
    pub fn spawn_mcp(&self, scope: &RunScope) -> Result<StartingMcp, ConfigError> {
        let config = self.mcp_config()?;
        let late = self.mcp_late.clone();
        let starting = {
            let (late, scope) = (late.clone(), scope.clone());
            tokio::spawn(async move {
                let mcp = recursive_tools::start_servers(&config, &scope).await;
                late.add(mcp.registry().clone());
                mcp
            })
        };
        Ok(StartingMcp { late, starting, started: None })
    }
}

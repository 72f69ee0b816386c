//! MCP client: starts the servers of the `[mcp]` table of `recursive.toml` and offers each of
//! their tools to the agent as a tool named `server__tool`.
//!
//! ```toml
//! [mcp.servers.fs]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/x"]
//! env = { FOO = "bar" }
//! startup_timeout_secs = 20
//!
//! [mcp.servers.remote]
//! url = "http://127.0.0.1:8000/mcp"
//! bearer_token_env = "REMOTE_MCP_TOKEN"
//! ```
//!
//! A server is either a child process spoken to over stdio (`command`) or a streamable-HTTP
//! endpoint (`url`). [`start_servers`] starts every enabled server at once, each under its own
//! start-up timeout (connect, initialize, list tools), and returns when all have either become
//! ready, failed or timed out: a slow server delays the run by at most its timeout, and a
//! server that fails leaves the run without its tools but does not stop it. Each outcome is
//! reported as a `mcp_server` custom event with `{server, status: "ready" | "failed" |
//! "timeout", tools, error}`. Callers that want the model to start before the servers are
//! ready can use [`spawn_servers`] and add the tools when the handle resolves.
//!
//! Calling a tool sends `tools/call`. Text content comes back as it is (several blocks
//! joined by newlines), images, audio and binary resources are summarised (e.g.
//! `[image image/png, 1234 bytes base64]`), and a result flagged `isError` becomes a tool
//! error. One message from a server may be at most [`MAX_MESSAGE_BYTES`]: a longer answer
//! fails its call with an error saying so (the connection goes on), and the text a model sees
//! is further capped by the tool executor. A child process runs in its own process group:
//! [`McpTools::shutdown`] closes its stdin, waits two seconds, sends SIGTERM to the group,
//! waits two more, then kills it; dropping the last handle kills the group at once.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::config_trust::KeyClass;
use recursive_core::env::ChildEnv;
use recursive_core::{
    EventKind, Extension, ExtensionEvent, RunScope, Tool, ToolContext, ToolError, ToolOrigin, ToolRegistry, ToolSpec,
    path_arguments,
};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock, Implementation,
    ResourceContents,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

mod stdio;

pub use stdio::MAX_MESSAGE_BYTES;

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 20;

/// Separator between server and tool in a tool's name.
pub const NAME_SEPARATOR: &str = "__";

/// The `[mcp]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Servers by name; the name prefixes their tools (`name__tool`).
    #[schemars(extend("x-trust" = KeyClass::loosening("MCP servers start commands or receive calls")))]
    pub servers: BTreeMap<String, McpServerConfig>,
}

fn default_startup_timeout() -> u64 {
    20
}

fn yes() -> bool {
    true
}

/// One `[mcp.servers.<name>]` table: either `command` (stdio) or `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Program to start (looked up on `PATH`).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables of this process passed to the server besides the default allowlist
    /// (`PATH`, `HOME`, locale…; never credentials): globs over names, e.g. `["GITHUB_TOKEN"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_pass: Vec<String>,
    /// Variables set for the server, with these values.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of the process.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Streamable-HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Environment variable holding a bearer token sent to `url`.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Seconds to connect, initialize and list tools. Default: 20.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_secs: u64,
    /// Seconds one tool call may take (none: only the agent's own tool timeout applies).
    #[serde(default)]
    pub tool_timeout_secs: Option<u64>,
    /// Set to false to keep the server configured but not started. Default: true.
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl McpServerConfig {
    /// A stdio server running `command args...`.
    pub fn stdio(command: impl Into<String>, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            command: Some(command.into()),
            args: args.into_iter().map(Into::into).collect(),
            env_pass: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            bearer_token_env: None,
            startup_timeout_secs: default_startup_timeout(),
            tool_timeout_secs: None,
            enabled: true,
        }
    }

    /// A streamable-HTTP server at `url`.
    pub fn http(url: impl Into<String>) -> Self {
        Self { command: None, url: Some(url.into()), ..Self::stdio("", Vec::<String>::new()) }
    }

    /// Sets the start-up timeout.
    pub fn with_startup_timeout(mut self, secs: u64) -> Self {
        self.startup_timeout_secs = secs;
        self
    }
}

/// How a server's start-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum McpStatus {
    /// Connected; its tools are available.
    Ready,
    /// It could not be started or did not speak MCP.
    Failed,
    /// It did not become ready within its start-up timeout.
    Timeout,
}

/// The start-up outcome of one server (also the data of its `mcp_server` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    /// The server's name.
    pub server: String,
    /// How start-up ended.
    pub status: McpStatus,
    /// The names of its tools as offered to the model (`server__tool`).
    pub tools: Vec<String>,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

/// The run-tree events of MCP servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum McpEvent {
    /// A server's start-up ended (once per server).
    McpServer(McpServerStatus),
}

impl ExtensionEvent for McpEvent {
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn render(&self) -> Option<String> {
        match self {
            McpEvent::McpServer(s) => Some(format!(
                "mcp server {}: {}{}",
                s.server,
                serde_json::to_value(s.status).ok()?.as_str()?,
                s.error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
            )),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Argument names an MCP tool's schema may use for paths; permission path rules apply to them.
const PATH_ARGUMENT_NAMES: &[&str] =
    &["path", "paths", "file", "file_path", "filepath", "filename", "directory", "dir", "source", "destination"];

type Client = RunningService<RoleClient, ClientConfig>;

/// A connection to one server: the client and, for a stdio server, its process (whose group
/// is killed when the connection is dropped).
struct Connection {
    client: Client,
    process: tokio::sync::Mutex<Option<stdio::ServerProcess>>,
}

impl Connection {
    /// Closes the connection and stops the server's process.
    async fn close(&self) {
        self.client.cancellation_token().cancel();
        if let Some(process) = self.process.lock().await.take() {
            process.stop().await;
        }
    }
}

/// The servers that started and their tools.
#[derive(Default)]
pub struct McpTools {
    registry: ToolRegistry,
    statuses: Vec<McpServerStatus>,
    connections: Vec<Arc<Connection>>,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools").field("tools", &self.registry).field("statuses", &self.statuses).finish()
    }
}

impl McpTools {
    /// The tools of every ready server.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The start-up outcome of every configured, enabled server, in name order.
    pub fn statuses(&self) -> &[McpServerStatus] {
        &self.statuses
    }

    /// Closes every connection and stops the child processes: each gets a moment to exit once
    /// its stdin is closed, then its process group is terminated, then killed. Tools still held
    /// elsewhere fail from then on.
    pub async fn shutdown(self) {
        futures::future::join_all(self.connections.iter().map(|c| c.close())).await;
    }
}

/// Starts every enabled server concurrently (each under its own start-up timeout), emits one
/// `mcp_server` event per server on `scope`, and returns the tools of those that are ready.
pub async fn start_servers(config: &McpConfig, scope: &RunScope) -> McpTools {
    // Names already offered, shared by the servers so two of them never offer the same one.
    let taken = Arc::new(Mutex::new(HashSet::new()));
    let starts = config.servers.iter().filter(|(_, c)| c.enabled).map(|(name, server)| {
        let taken = taken.clone();
        async move {
            let (status, ready) = start_server(name, server, &taken).await;
            scope.emit(0, EventKind::Extension(Extension::new(McpEvent::McpServer(status.clone()))));
            (status, ready)
        }
    });
    let mut out = McpTools::default();
    for (status, ready) in futures::future::join_all(starts).await {
        if let Some((client, tools)) = ready {
            for tool in tools {
                out.registry.register(tool);
            }
            out.connections.push(client);
        }
        out.statuses.push(status);
    }
    out
}

/// Starts the servers in the background; await the handle (or check it between turns) to get
/// the tools. Events are emitted as each server finishes starting.
pub fn spawn_servers(config: McpConfig, scope: RunScope) -> tokio::task::JoinHandle<McpTools> {
    tokio::spawn(async move { start_servers(&config, &scope).await })
}

type Started = (Arc<Connection>, Vec<Arc<dyn Tool>>);

async fn start_server(
    name: &str,
    config: &McpServerConfig,
    taken: &Mutex<HashSet<String>>,
) -> (McpServerStatus, Option<Started>) {
    let secs = config.startup_timeout_secs.max(1);
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let outcome =
        tokio::time::timeout(Duration::from_secs(secs), connect(name, config, stderr_tail.clone(), taken)).await;
    let status = |status, tools, error| McpServerStatus { server: name.to_string(), status, tools, error };
    match outcome {
        Ok(Ok((client, tools))) => {
            let names = tools.iter().map(|t| t.spec().name).collect();
            (status(McpStatus::Ready, names, None), Some((client, tools)))
        }
        Ok(Err(e)) => {
            let error = with_stderr(format!("MCP server `{name}`: {e}"), &stderr_tail);
            tracing::warn!("{error}");
            (status(McpStatus::Failed, Vec::new(), Some(error)), None)
        }
        Err(_) => {
            let error = with_stderr(format!("MCP server `{name}` did not start within {secs}s"), &stderr_tail);
            tracing::warn!("{error}");
            (status(McpStatus::Timeout, Vec::new(), Some(error)), None)
        }
    }
}

fn with_stderr(message: String, tail: &Mutex<VecDeque<String>>) -> String {
    let lines: Vec<String> = tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    if lines.is_empty() { message } else { format!("{message}\nserver stderr:\n{}", lines.join("\n")) }
}

fn client_info() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("recursive", env!("CARGO_PKG_VERSION")))
}

/// Redirects an MCP HTTP client follows for one request at most.
const MCP_MAX_REDIRECTS: usize = 10;

/// The HTTP client of a streamable-HTTP server: the workspace's TLS set-up, with what rmcp's
/// own default client does — no idle connection pooling (a reused connection whose previous
/// body was not read stalls on delayed ACKs), and only same-origin 307/308 redirects followed
/// (they keep the method and body; others would drop the JSON-RPC message or replay the
/// session id and headers to another host).
fn mcp_http_client() -> Result<reqwest::Client, String> {
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MCP_MAX_REDIRECTS {
            attempt.error(format!("more than {MCP_MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    recursive_http::client_builder()
        .pool_max_idle_per_host(0)
        .redirect(redirects)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

async fn connect(
    name: &str,
    config: &McpServerConfig,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    taken: &Mutex<HashSet<String>>,
) -> Result<Started, String> {
    let (client, process) = match (&config.command, &config.url) {
        (Some(command), None) => {
            let mut cmd = tokio::process::Command::new(command);
            let env = ChildEnv::new(&config.env_pass, &config.env).map_err(|e| e.to_string())?;
            env.apply_tokio(&mut cmd);
            cmd.args(&config.args);
            if let Some(cwd) = &config.cwd {
                cmd.current_dir(cwd);
            }
            let started = stdio::spawn(cmd).map_err(|e| format!("could not start `{command}`: {e}"))?;
            if let Some(stderr) = started.stderr {
                let server = name.to_string();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %server, "{line}");
                        if let Ok(mut tail) = stderr_tail.lock() {
                            if tail.len() >= STDERR_LINES {
                                tail.pop_front();
                            }
                            tail.push_back(line);
                        }
                    }
                });
            }
            // Dropped on failure, which kills the process group.
            let process = started.process;
            let client = client_info()
                .serve((started.stdout, started.stdin))
                .await
                .map_err(|e| format!("initialization failed: {e}"))?;
            (client, Some(process))
        }
        (None, Some(url)) => {
            let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(var) = &config.bearer_token_env {
                let token = recursive_core::env::var(var)
                    .ok_or(())
                    .map_err(|_| format!("environment variable `{var}` is not set"))?;
                transport_config = transport_config.auth_header(token);
            }
            transport_config.max_sse_event_size = MAX_MESSAGE_BYTES;
            let transport = StreamableHttpClientTransport::with_client(mcp_http_client()?, transport_config);
            let client =
                client_info().serve(transport).await.map_err(|e| format!("initialization failed at {url}: {e}"))?;
            (client, None)
        }
        (Some(_), Some(_)) => return Err("set either `command` or `url`, not both".into()),
        (None, None) => return Err("set `command` (stdio server) or `url` (HTTP server)".into()),
    };
    let listed = client.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
    let client = Arc::new(Connection { client, process: tokio::sync::Mutex::new(process) });
    let timeout = config.tool_timeout_secs.map(Duration::from_secs);
    let mut taken = taken.lock().map_err(|_| "tool name table poisoned".to_string())?;
    let tools = listed
        .into_iter()
        .map(|t| {
            let exposed = unique_name(tool_name(name, &t.name), &mut taken);
            let description = t
                .description
                .as_deref()
                .filter(|d| !d.trim().is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("Tool `{}` of the MCP server `{name}`.", t.name));
            let mut parameters = Value::Object((*t.input_schema).clone());
            if let Some(obj) = parameters.as_object_mut() {
                obj.entry("type").or_insert_with(|| json!("object"));
            }
            Arc::new(McpTool {
                spec: ToolSpec { name: exposed, description, parameters },
                server: name.to_string(),
                remote_name: t.name.to_string(),
                connection: client.clone(),
                timeout,
            }) as Arc<dyn Tool>
        })
        .collect();
    Ok((client, tools))
}

/// The longest tool name model APIs accept (OpenAI: `^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// The name a server's tool is offered under: `server__tool`, with characters other than
/// ASCII letters, digits, `_` and `-` replaced by `_` (the set model APIs accept). A name
/// longer than [`MAX_TOOL_NAME_LEN`] is cut and ends with a hash of the full original names,
/// so two long names that share a prefix stay apart.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    };
    let full = format!("{}{NAME_SEPARATOR}{}", clean(server), clean(tool));
    if full.len() <= MAX_TOOL_NAME_LEN {
        return full;
    }
    let suffix = format!("_{:08x}", fnv1a(&[server.as_bytes(), b"\0", tool.as_bytes()]));
    // `full` is ASCII, so any byte index is a character boundary.
    format!("{}{suffix}", &full[..MAX_TOOL_NAME_LEN - suffix.len()])
}

/// `base`, or `base` with a `_2`, `_3`... suffix (kept within [`MAX_TOOL_NAME_LEN`]) when a
/// tool already took it; the chosen name is added to `taken`.
fn unique_name(base: String, taken: &mut HashSet<String>) -> String {
    if taken.insert(base.clone()) {
        return base;
    }
    let mut n = 2u32;
    loop {
        let suffix = format!("_{n}");
        let keep = base.len().min(MAX_TOOL_NAME_LEN.saturating_sub(suffix.len()));
        let candidate = format!("{}{suffix}", &base[..keep]);
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        n += 1;
    }
}

/// 32-bit FNV-1a over some byte strings: a short, stable fingerprint for cut names.
fn fnv1a(parts: &[&[u8]]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// One tool of an MCP server.
pub struct McpTool {
    spec: ToolSpec,
    server: String,
    remote_name: String,
    connection: Arc<Connection>,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool").field("name", &self.spec.name).field("server", &self.server).finish()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Mcp { server: self.server.clone() }
    }

    /// The arguments its input schema declares under a path-like name (`path`, `paths`,
    /// `source`, `destination`...).
    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        let declared = self.spec.parameters.get("properties").and_then(Value::as_object)?;
        let names: Vec<&str> = PATH_ARGUMENT_NAMES.iter().copied().filter(|n| declared.contains_key(*n)).collect();
        if names.is_empty() {
            return None;
        }
        path_arguments(arguments, &names, None)
    }

    async fn call(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let mut params = CallToolRequestParams::new(self.remote_name.clone());
        match arguments {
            Value::Object(map) => params = params.with_arguments(map),
            Value::Null => {}
            other => {
                return Err(ToolError::InvalidArguments {
                    tool: self.spec.name.clone(),
                    message: format!("arguments must be a JSON object, got {other}"),
                });
            }
        }
        let call = self.connection.client.call_tool(params);
        let result = match self.timeout {
            Some(t) => tokio::time::timeout(t, call).await.map_err(|_| ToolError::Timeout(t.as_secs_f64()))?,
            None => call.await,
        }
        .map_err(|e| ToolError::failed(format!("MCP server `{}`: {e}", self.server)))?;
        let text = render_result(&result);
        if result.is_error == Some(true) { Err(ToolError::Failed(text)) } else { Ok(text) }
    }
}

/// The text the model sees for a `tools/call` result.
pub fn render_result(result: &CallToolResult) -> String {
    let parts: Vec<String> = result.content.iter().map(render_block).collect();
    if !parts.is_empty() {
        return parts.join("\n");
    }
    match &result.structured_content {
        Some(v) => v.to_string(),
        None => "(no content)".into(),
    }
}

fn render_block(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!("[image {}, {} bytes base64]", i.mime_type, i.data.len()),
        ContentBlock::Audio(a) => format!("[audio {}, {} bytes base64]", a.mime_type, a.data.len()),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => format!(
                "[resource {uri}, {}, {} bytes base64]",
                mime_type.as_deref().unwrap_or("unknown type"),
                blob.len()
            ),
            other => format!("[resource: {}]", serde_json::to_string(other).unwrap_or_default()),
        },
        ContentBlock::ResourceLink(r) => format!("[resource link {} ({})]", r.uri, r.name),
        other => {
            let kind = serde_json::to_value(other).ok().and_then(|v| v["type"].as_str().map(str::to_string));
            format!("[{} content]", kind.as_deref().unwrap_or("unknown"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parses_stdio_and_http_servers() {
        let text = r#"
            [mcp.servers.fs]
            command = "npx"
            args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/x"]
            env = { FOO = "bar" }
            startup_timeout_secs = 20
            [mcp.servers.remote]
            url = "http://127.0.0.1:8000/mcp"
        "#;
        #[derive(Deserialize)]
        struct File {
            mcp: McpConfig,
        }
        let c = toml::from_str::<File>(text).unwrap().mcp;
        let fs = &c.servers["fs"];
        assert_eq!(fs.command.as_deref(), Some("npx"));
        assert_eq!(fs.args.len(), 3);
        assert_eq!(fs.env["FOO"], "bar");
        assert!(fs.enabled);
        let remote = &c.servers["remote"];
        assert_eq!(remote.url.as_deref(), Some("http://127.0.0.1:8000/mcp"));
        assert_eq!(remote.startup_timeout_secs, 20);
    }

    #[test]
    fn tool_names_are_prefixed_and_cleaned() {
        assert_eq!(tool_name("fs", "read_file"), "fs__read_file");
        assert_eq!(tool_name("my server", "get.weather/now"), "my_server__get_weather_now");
    }

    fn is_valid_api_name(name: &str) -> bool {
        (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn over_long_tool_names_are_cut_to_64_and_stay_distinct() {
        let long = "x".repeat(80);
        let a = tool_name("server", &format!("{long}.alpha"));
        let b = tool_name("server", &format!("{long}.beta"));
        assert!(is_valid_api_name(&a) && is_valid_api_name(&b), "{a} / {b}");
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(a.starts_with("server__xxx"), "{a}");
    }

    #[test]
    fn tool_names_that_clean_to_the_same_text_are_made_unique() {
        let mut taken = HashSet::new();
        let first = unique_name(tool_name("s", "get.weather"), &mut taken);
        let second = unique_name(tool_name("s", "get weather"), &mut taken);
        let third = unique_name(tool_name("s", "get_weather"), &mut taken);
        assert_eq!(first, "s__get_weather");
        assert_eq!(second, "s__get_weather_2");
        assert_eq!(third, "s__get_weather_3");
        let long = tool_name("s", &"y".repeat(100));
        let again = unique_name(long.clone(), &mut taken);
        let clash = unique_name(long, &mut taken);
        assert!(is_valid_api_name(&again) && is_valid_api_name(&clash), "{clash}");
        assert_ne!(again, clash);
    }

    #[test]
    fn results_render_text_and_summarise_binary() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/zip", "blob": "AAAAAA=="}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"}
            ]
        }))
        .unwrap();
        assert_eq!(
            render_result(&result),
            "hello\n[image image/png, 8 bytes base64]\n[audio audio/wav, 4 bytes base64]\n\
             [resource file:///a.txt]\ninside\n[resource file:///b.bin, application/zip, 8 bytes base64]\n\
             [resource link file:///c (c)]"
        );
    }

    #[test]
    fn structured_content_is_used_when_there_is_no_content() {
        let result: CallToolResult =
            serde_json::from_value(json!({"content": [], "structuredContent": {"n": 1}})).unwrap();
        assert_eq!(render_result(&result), "{\"n\":1}");
    }

    #[tokio::test]
    async fn server_without_command_or_url_fails_clearly() {
        let mut config = McpConfig::default();
        config.servers.insert("broken".into(), McpServerConfig { command: None, ..McpServerConfig::http("x") });
        config.servers.get_mut("broken").unwrap().url = None;
        let tools = start_servers(&config, &RunScope::detached("t")).await;
        assert_eq!(tools.statuses()[0].status, McpStatus::Failed);
        assert!(tools.statuses()[0].error.as_deref().unwrap().contains("set `command`"), "{:?}", tools.statuses());
    }

    #[tokio::test]
    async fn disabled_servers_are_not_started() {
        let mut config = McpConfig::default();
        let mut server = McpServerConfig::stdio("/definitely/not/a/program", Vec::<String>::new());
        server.enabled = false;
        config.servers.insert("off".into(), server);
        let tools = start_servers(&config, &RunScope::detached("t")).await;
        assert!(tools.statuses().is_empty());
        assert!(tools.registry().is_empty());
    }
}

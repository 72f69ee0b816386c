//! MCP resources: what the server offers and what it ran, by URI.
//!
//! - `recursive://runnables/{name}`: a served runnable (`run`, `rlm`, `goal` and every named one)
//!   — its name, description and input schema, as JSON;
//! - `recursive://runs/{id}`: a run as the runs API shows it (status, result), as JSON;
//! - `recursive://runs/{id}/events`: the events of its run tree, one JSON object a line (at most
//!   [`MAX_EVENTS`]);
//! - on a server of graph threads (`serve --graphs`): `recursive://graphs/{name}` (a blueprint
//!   offered: its description and its Mermaid chart), `recursive://threads/{id}` (a thread's state)
//!   and `recursive://threads/{id}/history` (its checkpoints, newest first).
//!
//! `resources/list` gives the runnables, the graphs and the newest runs (a page at a time, newest
//! first); every shape is also a template, whose `{name}` and run `{id}` complete. A client may
//! subscribe to a run: it is told `notifications/resources/updated` as the run goes on, until it
//! ends or the client unsubscribes.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runs::{RunFilter, RunRecord};
use crate::server::Server;

/// The scheme of every resource.
pub const SCHEME: &str = "recursive://";

/// The most events one read of `…/events` returns.
pub const MAX_EVENTS: usize = 2_048;

/// Runs per page of `resources/list`.
const RUNS_PER_PAGE: usize = 50;

/// The least time between two update notifications of one subscription.
const UPDATE_EVERY: Duration = Duration::from_millis(200);

/// What a resource URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A served runnable, by name.
    Runnable(String),
    /// A run, by id.
    Run(String),
    /// A run's events, by the run's id.
    Events(String),
    /// A graph offered, by name.
    Graph(String),
    /// A graph thread's state, by id.
    Thread(String),
    /// A graph thread's checkpoints, by the thread's id.
    History(String),
}

impl Target {
    /// What `uri` names, if it is one of this server's URIs.
    pub fn parse(uri: &str) -> Option<Target> {
        let path = uri.strip_prefix(SCHEME)?;
        let segments: Vec<&str> = path.split('/').collect();
        let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        match segments.as_slice() {
            ["runnables", name] if ok(name) => Some(Target::Runnable(name.to_string())),
            ["runs", id] if ok(id) => Some(Target::Run(id.to_string())),
            ["runs", id, "events"] if ok(id) => Some(Target::Events(id.to_string())),
            ["graphs", name] if ok(name) => Some(Target::Graph(name.to_string())),
            ["threads", id] if ok(id) => Some(Target::Thread(id.to_string())),
            ["threads", id, "history"] if ok(id) => Some(Target::History(id.to_string())),
            _ => None,
        }
    }

    /// Its URI.
    pub fn uri(&self) -> String {
        match self {
            Target::Runnable(name) => format!("{SCHEME}runnables/{name}"),
            Target::Run(id) => format!("{SCHEME}runs/{id}"),
            Target::Events(id) => format!("{SCHEME}runs/{id}/events"),
            Target::Graph(name) => format!("{SCHEME}graphs/{name}"),
            Target::Thread(id) => format!("{SCHEME}threads/{id}"),
            Target::History(id) => format!("{SCHEME}threads/{id}/history"),
        }
    }
}

/// The resource templates (those of graph threads on a server of graphs).
pub fn templates(server: &Server) -> Vec<ResourceTemplate> {
    let mut templates = vec![
        ResourceTemplate::new(format!("{SCHEME}runnables/{{name}}"), "runnable")
            .with_title("A served runnable")
            .with_description("A runnable this server offers: its name, description and input schema.")
            .with_mime_type("application/json"),
        ResourceTemplate::new(format!("{SCHEME}runs/{{id}}"), "run")
            .with_title("A run")
            .with_description("A run of this server: its status and, once it ended, its result.")
            .with_mime_type("application/json"),
        ResourceTemplate::new(format!("{SCHEME}runs/{{id}}/events"), "run-events")
            .with_title("A run's events")
            .with_description("Every event of a run's tree, one JSON object a line.")
            .with_mime_type("application/jsonl"),
    ];
    if server.config.graphs.is_some() {
        templates.extend([
            ResourceTemplate::new(format!("{SCHEME}graphs/{{name}}"), "graph")
                .with_title("A graph offered")
                .with_description("A blueprint this server runs threads of: its description and its Mermaid chart.")
                .with_mime_type("application/json"),
            ResourceTemplate::new(format!("{SCHEME}threads/{{id}}"), "thread")
                .with_title("A graph thread")
                .with_description("A thread's state: status, step, next nodes, channel values, what it waits for.")
                .with_mime_type("application/json"),
            ResourceTemplate::new(format!("{SCHEME}threads/{{id}}/history"), "thread-history")
                .with_title("A graph thread's checkpoints")
                .with_description("The thread's checkpoints, newest first.")
                .with_mime_type("application/json"),
        ]);
    }
    templates
}

/// The graphs offered as resources (none without graph threads).
fn graph_resources(server: &Server) -> Vec<Resource> {
    let Some(graphs) = &server.config.graphs else { return Vec::new() };
    graphs
        .graphs()
        .into_iter()
        .map(|graph| {
            let resource = Resource::new(Target::Graph(graph.name.clone()).uri(), graph.name.clone())
                .with_mime_type("application/json");
            match graph.description {
                Some(description) => resource.with_description(description),
                None => resource,
            }
        })
        .collect()
}

/// The runnables as resources.
fn runnable_resources(server: &Server) -> Vec<Resource> {
    super::tools(&server.runner.offered())
        .into_iter()
        .map(|tool| {
            let mut resource = Resource::new(Target::Runnable(tool.name.to_string()).uri(), tool.name.to_string())
                .with_mime_type("application/json");
            if let Some(title) = tool.annotations.as_ref().and_then(|a| a.title.clone()) {
                resource = resource.with_title(title);
            }
            if let Some(description) = &tool.description {
                resource = resource.with_description(description.to_string());
            }
            resource
        })
        .collect()
}

/// A page of resources: the runnables and the newest runs on the first page (`cursor` none),
/// then runs older than the run named by `cursor`.
pub async fn list(server: &Server, cursor: Option<String>) -> Result<ListResourcesResult, McpError> {
    let mut resources = Vec::new();
    if cursor.is_none() {
        resources.extend(runnable_resources(server));
        resources.extend(graph_resources(server));
    }
    let filter = RunFilter { limit: Some(RUNS_PER_PAGE), before: cursor, ..Default::default() };
    let page = server.store.list(&filter).await.map_err(|e| {
        if e.starts_with("no run") {
            McpError::invalid_params(format!("the cursor is not a run of this server: {e}"), None)
        } else {
            McpError::internal_error(format!("the run store failed: {e}"), None)
        }
    })?;
    let next = if page.more { page.runs.last().map(|r| r.id.clone()) } else { None };
    for run in page.runs {
        let title = if run.title.is_empty() { run.id.clone() } else { run.title.clone() };
        let status = serde_json::to_value(run.status).ok().and_then(|s| s.as_str().map(str::to_string));
        resources.push(
            Resource::new(Target::Run(run.id.clone()).uri(), run.id.clone())
                .with_title(title)
                .with_description(format!("A {} run, {}.", run.kind.as_str(), status.unwrap_or_default()))
                .with_mime_type("application/json"),
        );
    }
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = next;
    Ok(result)
}

fn not_found(uri: &str, why: &str) -> McpError {
    McpError::resource_not_found(format!("no resource `{uri}`: {why}"), Some(json!({"uri": uri})))
}

/// Reads the resource at `uri`.
pub async fn read(server: &Server, uri: &str) -> Result<ReadResourceResult, McpError> {
    let Some(target) = Target::parse(uri) else {
        return Err(not_found(
            uri,
            "this server's resources are recursive://runnables/{name} and recursive://runs/{id}",
        ));
    };
    let text = match &target {
        Target::Runnable(name) => {
            let tools = super::tools(&server.runner.offered());
            let tool =
                tools.iter().find(|t| t.name == name.as_str()).ok_or_else(|| not_found(uri, "no such runnable"))?;
            let body = json!({"name": tool.name, "description": tool.description, "input_schema": *tool.input_schema});
            serde_json::to_string_pretty(&body).unwrap_or_default()
        }
        Target::Run(id) => {
            let view =
                server.store.view(id).await.map_err(store_failed)?.ok_or_else(|| not_found(uri, "no such run"))?;
            serde_json::to_string_pretty(&view).unwrap_or_default()
        }
        Target::Events(id) => events(server, id).await?.ok_or_else(|| not_found(uri, "no such run"))?,
        Target::Graph(name) => {
            let graphs = server.config.graphs.as_ref().ok_or_else(|| not_found(uri, NO_GRAPHS))?;
            let graph = graphs.graphs().into_iter().find(|g| &g.name == name);
            serde_json::to_string_pretty(&graph.ok_or_else(|| not_found(uri, "no such graph"))?).unwrap_or_default()
        }
        Target::Thread(id) => {
            let graphs = server.config.graphs.as_ref().ok_or_else(|| not_found(uri, NO_GRAPHS))?;
            let thread = graphs.thread(id).await.map_err(|e| host_failed(uri, e))?;
            serde_json::to_string_pretty(&thread.ok_or_else(|| not_found(uri, "no such thread"))?).unwrap_or_default()
        }
        Target::History(id) => {
            let graphs = server.config.graphs.as_ref().ok_or_else(|| not_found(uri, NO_GRAPHS))?;
            if graphs.thread(id).await.map_err(|e| host_failed(uri, e))?.is_none() {
                return Err(not_found(uri, "no such thread"));
            }
            let history = graphs.history(id).await.map_err(|e| host_failed(uri, e))?;
            serde_json::to_string_pretty(&history).unwrap_or_default()
        }
    };
    let mime = if matches!(target, Target::Events(_)) { "application/jsonl" } else { "application/json" };
    Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type(mime)]))
}

/// Why a graph resource cannot be read on a server without graphs.
const NO_GRAPHS: &str = "this server runs no graph threads (serve --graphs DIR)";

fn host_failed(uri: &str, e: crate::threads::HostError) -> McpError {
    match e {
        crate::threads::HostError::NotFound(why) => not_found(uri, &why),
        crate::threads::HostError::Invalid(why) => McpError::invalid_params(why, None),
        crate::threads::HostError::Failed(why) => {
            McpError::internal_error(format!("the graph store failed: {why}"), None)
        }
    }
}

fn store_failed(e: String) -> McpError {
    McpError::internal_error(format!("the run store failed: {e}"), None)
}

/// The first [`MAX_EVENTS`] events of run `id`, one a line; `None` when there is no such run.
async fn events(server: &Server, id: &str) -> Result<Option<String>, McpError> {
    let mut lines: Vec<Arc<str>> = Vec::new();
    if let Some(run) = server.store.live(id) {
        let mut next = run.base();
        if next > 0 {
            // Events of earlier attempts are in the archive.
            lines.extend(archived(server, id, 0, next.min(MAX_EVENTS)).await?);
        }
        while lines.len() < MAX_EVENTS {
            let (page, _) = run.events_from(next);
            let Some((last, _)) = page.last() else { break };
            next = last + 1;
            lines.extend(page.into_iter().map(|(_, e)| e));
        }
    } else {
        if server.store.view(id).await.map_err(store_failed)?.is_none() {
            return Ok(None);
        }
        lines = archived(server, id, 0, MAX_EVENTS).await?;
    }
    lines.truncate(MAX_EVENTS);
    Ok(Some(lines.iter().map(|l| format!("{l}\n")).collect()))
}

/// Archived events of run `id` from `from`, at most `limit`.
async fn archived(server: &Server, id: &str, mut from: usize, limit: usize) -> Result<Vec<Arc<str>>, McpError> {
    let mut out = Vec::new();
    while out.len() < limit {
        let page = server.store.archived_events(id, from).await.map_err(store_failed)?;
        let last = page.len() < crate::runs::EVENT_PAGE;
        from += page.len();
        out.extend(page);
        if last {
            break;
        }
    }
    out.truncate(limit);
    Ok(out)
}

/// The run a subscription to `uri` follows: `Ok(Some)` for a run in flight, `Ok(None)` for a
/// resource that exists and will not change (a runnable, a run that ended), an error for a URI
/// that names nothing.
pub async fn subscribable(server: &Server, uri: &str) -> Result<Option<Arc<RunRecord>>, McpError> {
    match Target::parse(uri) {
        Some(Target::Run(id) | Target::Events(id)) => {
            if let Some(run) = server.store.live(&id) {
                return Ok(Some(run));
            }
            match server.store.view(&id).await.map_err(store_failed)? {
                Some(_) => Ok(None),
                None => Err(not_found(uri, "no such run")),
            }
        }
        Some(Target::Runnable(name)) => {
            if super::tools(&server.runner.offered()).iter().any(|t| t.name == name.as_str()) {
                Ok(None)
            } else {
                Err(not_found(uri, "no such runnable"))
            }
        }
        Some(Target::Graph(_) | Target::Thread(_) | Target::History(_)) => {
            // Readable means it exists; a thread's changes are not followed (yet).
            read(server, uri).await.map(|_| None)
        }
        None => Err(not_found(uri, "not a resource of this server")),
    }
}

/// Tells the client `uri` changed as `run` goes on (at most every `UPDATE_EVERY`), and once
/// more when it ends, until `stop` is cancelled.
pub async fn follow(peer: Peer<RoleServer>, uri: String, run: Arc<RunRecord>, stop: CancellationToken) {
    let mut changes = run.watch();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
        if peer.notify_resource_updated(param).await.is_err() || run.result().is_some() {
            return;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(UPDATE_EVERY) => {}
        }
    }
}

/// Completions of a resource template's argument: run ids or runnable names that start with
/// `value`.
pub async fn complete(server: &Server, template: &str, argument: &str, value: &str) -> Vec<String> {
    let runs = format!("{SCHEME}runs/{{id}}");
    let mut values: Vec<String> = if template.starts_with(&runs) && argument == "id" {
        let filter = RunFilter { limit: Some(crate::runs::PAGE.1), ..Default::default() };
        match server.store.list(&filter).await {
            Ok(page) => page.runs.into_iter().map(|r| r.id).collect(),
            Err(_) => Vec::new(),
        }
    } else if template == format!("{SCHEME}runnables/{{name}}") && argument == "name" {
        super::tools(&server.runner.offered()).into_iter().map(|t| t.name.to_string()).collect()
    } else if template == format!("{SCHEME}graphs/{{name}}") && argument == "name" {
        server.config.graphs.iter().flat_map(|g| g.graphs()).map(|g| g.name).collect()
    } else {
        Vec::new()
    };
    values.retain(|v| v.starts_with(value));
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_runnables_runs_and_their_events_and_nothing_else() {
        assert_eq!(Target::parse("recursive://runnables/rlm"), Some(Target::Runnable("rlm".into())));
        assert_eq!(Target::parse("recursive://runs/run_1"), Some(Target::Run("run_1".into())));
        assert_eq!(Target::parse("recursive://runs/run_1/events"), Some(Target::Events("run_1".into())));
        assert_eq!(Target::parse("recursive://threads/t1/history"), Some(Target::History("t1".into())));
        for bad in ["recursive://runs/", "recursive://runs/a/b", "file:///etc/passwd", "recursive://runs/../x", "x"] {
            assert_eq!(Target::parse(bad), None, "{bad}");
        }
        let all = [
            Target::Runnable("a".into()),
            Target::Run("b".into()),
            Target::Events("c".into()),
            Target::Graph("d".into()),
            Target::Thread("e".into()),
            Target::History("f".into()),
        ];
        for target in all {
            assert_eq!(Target::parse(&target.uri()), Some(target));
        }
    }
}

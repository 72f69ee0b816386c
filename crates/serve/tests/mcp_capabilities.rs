#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The MCP server's capabilities beyond tools, spoken to in raw JSON-RPC over an in-process
//! stream (so every message is the wire's): resources (the runnables and the runs, read by URI,
//! templates, subscriptions), prompts (one per runnable), completion, logging of run events at the
//! level set, and elicitation of a run's permission asks — with the protocol errors a client gets
//! for an unknown URI, an unknown prompt or argument, and a level that does not exist.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{AnswerBoard, ClientAnswer, EventKind, RunScope, ToolCall, ToolSpec};
use recursive_serve::mcp::McpServer;
use recursive_serve::threads::{ForkRequest, GraphHost, GraphInfo, HostError, ThreadRunRequest, ThreadView};
use recursive_serve::{RunOutput, RunRequest, Runner, ServeConfig, Server};
use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf};

/// A runner whose input says what its run does: `ask` asks permission for a write and answers
/// with what it was told, `events` emits a tool call, a failed tool result and a delta, `slow`
/// streams deltas until its ask is answered; anything else answers `ok: INPUT`.
struct Scripted {
    board: Arc<AnswerBoard>,
}

#[async_trait]
impl Runner for Scripted {
    async fn run(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        let text = match request.input.as_str() {
            "ask" => {
                let question = self.board.open();
                scope.emit(
                    1,
                    EventKind::Ask {
                        ask: question.id.clone(),
                        id: "call_1".into(),
                        name: "write_file".into(),
                        arguments: json!({"path": "notes.txt", "content": "x"}),
                        reason: "writes ask".into(),
                        timeout_ms: 5_000,
                    },
                );
                match question.wait(Duration::from_secs(5)).await {
                    Some(ClientAnswer { allow: true, .. }) => "allowed".to_string(),
                    Some(ClientAnswer { reason, .. }) => format!("denied: {}", reason.unwrap_or_default()),
                    None => "unanswered".to_string(),
                }
            }
            "events" => {
                let call = ToolCall { id: "c1".into(), name: "read_file".into(), arguments: json!({"path": "x"}) };
                scope.emit(1, EventKind::ToolCall { call });
                let output = "no such file".to_string();
                let (id, name) = ("c1".to_string(), "read_file".to_string());
                scope.emit(1, EventKind::ToolResult { id, name, output, is_error: true, duration_ms: 1 });
                scope.emit(1, EventKind::PartialText { delta: "do".into() });
                "done".to_string()
            }
            "slow" => {
                // Streams a delta every 100 ms until its ask is answered (at most a minute).
                let question = self.board.open();
                scope.emit(
                    1,
                    EventKind::Ask {
                        ask: question.id.clone(),
                        id: "call_1".into(),
                        name: "stop".into(),
                        arguments: json!({}),
                        reason: "say when to stop".into(),
                        timeout_ms: 60_000,
                    },
                );
                let ticking = scope.clone();
                let ticker = tokio::spawn(async move {
                    for i in 0.. {
                        ticking.emit(1, EventKind::PartialText { delta: format!("{i} ") });
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
                let stopped = question.wait(Duration::from_secs(60)).await;
                ticker.abort();
                if stopped.is_some() { "slept" } else { "nobody said stop" }.to_string()
            }
            other => {
                let text = format!("ok: {other}");
                scope.emit(1, EventKind::AssistantText { text: text.clone() });
                text
            }
        };
        RunOutput { ok: true, outcome: recursive_core::FinishReason::NoMoreToolCalls, text, ..RunOutput::failed("") }
    }

    fn offered(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "picker".into(),
            description: "Picks a colour.".into(),
            parameters: json!({"type": "object", "properties": {
                "input": {"type": "string", "description": "What to pick for."},
                "colour": {"type": "string", "enum": ["red", "green", "blue"]}
            }, "required": ["input"]}),
        }]
    }
}

/// One graph, `triage`, with one thread, `t1`, interrupted at its second step.
struct Graphs;

#[async_trait]
impl GraphHost for Graphs {
    fn graphs(&self) -> Vec<GraphInfo> {
        vec![GraphInfo {
            name: "triage".into(),
            description: Some("Sorts tickets.".into()),
            mermaid: "flowchart TD\n  a --> b".into(),
        }]
    }

    async fn create(&self, _graph: &str) -> Result<ThreadView, HostError> {
        Err(HostError::Invalid("not here".into()))
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadView>, HostError> {
        Ok((thread == "t1").then(|| ThreadView {
            thread_id: "t1".into(),
            graph: "triage".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            status: recursive_store::ThreadStatus::Interrupted,
            checkpoint: Some("cp2".into()),
            step: 2,
            next: vec!["b".into()],
            values: json!({"ticket": "printer on fire"}),
            interrupt: Some(json!({"question": "urgent?"})),
        }))
    }

    async fn history(&self, _thread: &str) -> Result<Vec<Value>, HostError> {
        Ok(vec![json!({"checkpoint": "cp2", "step": 2}), json!({"checkpoint": "cp1", "step": 1})])
    }

    async fn fork(&self, _thread: &str, _fork: ForkRequest) -> Result<ThreadView, HostError> {
        Err(HostError::Invalid("not here".into()))
    }

    async fn run(&self, _thread: &str, _request: ThreadRunRequest, _scope: RunScope) -> RunOutput {
        RunOutput::failed("not here")
    }
}

/// A JSON-RPC client on one side of the stream: keeps the notifications it gets, and answers
/// the server's requests from `answers` (in order), recording them.
struct Client {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    write: WriteHalf<DuplexStream>,
    next: u64,
    notifications: Vec<Value>,
    server_requests: Vec<Value>,
    answers: VecDeque<Value>,
    responses: HashMap<u64, Value>,
}

impl Client {
    async fn send(&mut self, message: Value) {
        self.write.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    }

    /// Sends a request; its id.
    async fn start(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    /// Reads messages until the response to `id` and returns it (`result` or `error`).
    async fn response(&mut self, id: u64) -> Value {
        loop {
            if let Some(response) = self.responses.remove(&id) {
                return response;
            }
            let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
                .await
                .expect("the server answers within 10 s")
                .unwrap()
                .expect("the server keeps the stream open");
            let message: Value = serde_json::from_str(&line).unwrap();
            match (message.get("method"), message.get("id")) {
                (Some(_), Some(request_id)) => {
                    self.server_requests.push(message.clone());
                    let result = self.answers.pop_front().unwrap_or(json!({}));
                    self.send(json!({"jsonrpc": "2.0", "id": request_id, "result": result})).await;
                }
                (Some(_), None) => self.notifications.push(message),
                (None, Some(response_id)) => {
                    self.responses.insert(response_id.as_u64().unwrap(), message);
                }
                _ => panic!("not JSON-RPC: {message}"),
            }
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.start(method, params).await;
        self.response(id).await
    }

    async fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    async fn error_code(&mut self, method: &str, params: Value) -> i64 {
        let response = self.call(method, params).await;
        response["error"]["code"].as_i64().unwrap_or_else(|| panic!("{method} did not fail: {response}"))
    }

    fn logged(&self) -> Vec<&Value> {
        self.notifications.iter().filter(|n| n["method"] == "notifications/message").collect()
    }
}

/// A server over [`Scripted`] whose asks wait on a board, and a client that initialized with
/// `capabilities`.
async fn connect(capabilities: Value) -> (Client, Arc<Server>, Arc<AnswerBoard>) {
    connect_with(capabilities, None).await
}

/// [`connect`] to a server of graph threads when `graphs` is given.
async fn connect_with(
    capabilities: Value,
    graphs: Option<Arc<dyn GraphHost>>,
) -> (Client, Arc<Server>, Arc<AnswerBoard>) {
    let board = Arc::new(AnswerBoard::default());
    let config = ServeConfig { answers: Some(board.clone()), graphs, ..Default::default() };
    let server = Server::new(Arc::new(Scripted { board: board.clone() }), config);
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let mcp = McpServer::new(server.clone());
    tokio::spawn(async move {
        if let Ok(running) = mcp.serve(theirs).await {
            let _ = running.waiting().await;
        }
    });
    let (read, write) = tokio::io::split(ours);
    let mut client = Client {
        lines: BufReader::new(read).lines(),
        write,
        next: 0,
        notifications: Vec::new(),
        server_requests: Vec::new(),
        answers: VecDeque::new(),
        responses: HashMap::new(),
    };
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
        "clientInfo": {"name": "test", "version": "1"}});
    let info = client.result("initialize", init).await;
    assert_eq!(info["serverInfo"]["name"], "recursive", "{info}");
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    (client, server, board)
}

/// The id of the newest run, read from `resources/list` (waiting for it to be listed).
async fn newest_run(client: &mut Client) -> String {
    for _ in 0..200 {
        let list = client.result("resources/list", json!({})).await;
        let newest = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|r| r["uri"].as_str().and_then(|u| u.strip_prefix("recursive://runs/")).map(str::to_string));
        if let Some(id) = newest {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no run was listed");
}

async fn call_tool(client: &mut Client, name: &str, arguments: Value) -> Value {
    client.result("tools/call", json!({"name": name, "arguments": arguments})).await
}

#[tokio::test]
async fn the_server_declares_logging_completion_prompts_resources_with_subscriptions_and_tools() {
    let board = Arc::new(AnswerBoard::default());
    let server = Server::new(Arc::new(Scripted { board }), ServeConfig::default());
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = McpServer::new(server).serve(theirs).await {
            let _ = running.waiting().await;
        }
    });
    let (read, mut write) = tokio::io::split(ours);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}});
    write.write_all(format!("{init}\n").as_bytes()).await.unwrap();
    let line = BufReader::new(read).lines().next_line().await.unwrap().unwrap();
    let capabilities = serde_json::from_str::<Value>(&line).unwrap()["result"]["capabilities"].clone();
    for declared in ["logging", "completions", "prompts", "resources", "tools"] {
        assert!(capabilities[declared].is_object(), "{declared}: {capabilities}");
    }
    assert_eq!(capabilities["resources"]["subscribe"], true, "{capabilities}");
}

#[tokio::test]
async fn each_runnable_is_a_prompt_whose_arguments_are_its_input_and_an_unknown_prompt_is_invalid_params() {
    let (mut client, _server, _board) = connect(json!({})).await;
    let list = client.result("prompts/list", json!({})).await;
    let names: Vec<&str> = list["prompts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["run", "rlm", "goal", "picker"], "{list}");
    let picker = &list["prompts"][3];
    assert_eq!(picker["description"], "Picks a colour.");
    let input = picker["arguments"].as_array().unwrap().iter().find(|a| a["name"] == "input").unwrap();
    assert_eq!(input["required"], true, "{picker}");
    let run = &list["prompts"][0];
    assert!(run["arguments"].as_array().unwrap().iter().any(|a| a["name"] == "goal" && a["required"] == true), "{run}");

    let got = client
        .result("prompts/get", json!({"name": "picker", "arguments": {"input": "a door", "colour": "red"}}))
        .await;
    let message = &got["messages"][0];
    assert_eq!(message["role"], "user");
    let text = message["content"]["text"].as_str().unwrap();
    assert!(text.starts_with("a door") && text.contains("colour:\nred"), "{text}");

    assert_eq!(client.error_code("prompts/get", json!({"name": "nope"})).await, -32602, "an unknown prompt");
    let missing = json!({"name": "picker", "arguments": {"colour": "red"}});
    assert_eq!(client.error_code("prompts/get", missing).await, -32602, "a required argument missing");
    let unknown = json!({"name": "picker", "arguments": {"input": "x", "size": "big"}});
    assert_eq!(client.error_code("prompts/get", unknown).await, -32602, "an argument the prompt does not have");
}

#[tokio::test]
async fn runs_and_runnables_are_resources_read_by_uri_and_an_unknown_uri_is_resource_not_found() {
    let (mut client, server, _board) = connect(json!({})).await;
    let done = call_tool(&mut client, "run", json!({"goal": "hello"})).await;
    assert_eq!(done["content"][0]["text"], "ok: hello", "{done}");
    server.store_flush().await;

    let list = client.result("resources/list", json!({})).await;
    let uris: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    for runnable in ["run", "rlm", "goal", "picker"] {
        assert!(uris.contains(&format!("recursive://runnables/{runnable}").as_str()), "{uris:?}");
    }
    let run_uri = *uris.iter().find(|u| u.starts_with("recursive://runs/")).expect("the run is listed");
    let run_id = run_uri.strip_prefix("recursive://runs/").unwrap().to_string();

    let read = client.result("resources/read", json!({"uri": run_uri})).await;
    let contents = &read["contents"][0];
    assert_eq!(contents["uri"], run_uri);
    assert_eq!(contents["mimeType"], "application/json");
    let view: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!((view["id"].as_str(), &view["status"]), (Some(run_id.as_str()), &json!("finished")), "{view}");
    assert_eq!(view["result"]["text"], "ok: hello");

    let events = client.result("resources/read", json!({"uri": format!("{run_uri}/events")})).await;
    let lines = events["contents"][0]["text"].as_str().unwrap();
    let events: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 1, "{lines}");
    assert_eq!((&events[0]["type"], &events[0]["text"]), (&json!("assistant_text"), &json!("ok: hello")));

    let picker = client.result("resources/read", json!({"uri": "recursive://runnables/picker"})).await;
    let body: Value = serde_json::from_str(picker["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["input_schema"]["properties"]["colour"]["enum"][1], "green", "{body}");

    let templates = client.result("resources/templates/list", json!({})).await;
    let shapes: Vec<&str> =
        templates["resourceTemplates"].as_array().unwrap().iter().map(|t| t["uriTemplate"].as_str().unwrap()).collect();
    assert!(
        shapes.contains(&"recursive://runs/{id}") && shapes.contains(&"recursive://runnables/{name}"),
        "{shapes:?}"
    );

    for unknown in ["recursive://runs/run_nope", "recursive://runnables/nope", "file:///etc/passwd", "recursive://x"] {
        assert_eq!(client.error_code("resources/read", json!({"uri": unknown})).await, -32002, "{unknown}");
    }
    assert_eq!(client.error_code("resources/list", json!({"cursor": "run_nope"})).await, -32602, "a bad cursor");
}

#[tokio::test]
async fn completion_offers_run_ids_runnable_names_and_the_values_a_schema_names() {
    let (mut client, _server, _board) = connect(json!({})).await;
    call_tool(&mut client, "run", json!({"goal": "one"})).await;
    let run_id = newest_run(&mut client).await;

    let complete = |r: Value, name: &str, value: &str| json!({"ref": r, "argument": {"name": name, "value": value}});
    let runs = json!({"type": "ref/resource", "uri": "recursive://runs/{id}"});
    let got = client.result("completion/complete", complete(runs.clone(), "id", &run_id[..6])).await;
    assert_eq!(got["completion"]["values"], json!([run_id]), "{got}");
    let none = client.result("completion/complete", complete(runs, "id", "zzz")).await;
    assert_eq!(none["completion"]["values"], json!([]), "{none}");

    let runnables = json!({"type": "ref/resource", "uri": "recursive://runnables/{name}"});
    let got = client.result("completion/complete", complete(runnables, "name", "pi")).await;
    assert_eq!(got["completion"]["values"], json!(["picker"]), "{got}");

    let prompt = json!({"type": "ref/prompt", "name": "picker"});
    let got = client.result("completion/complete", complete(prompt.clone(), "colour", "g")).await;
    assert_eq!(got["completion"]["values"], json!(["green"]), "{got}");
    let free_text = client.result("completion/complete", complete(prompt.clone(), "input", "a")).await;
    assert_eq!(free_text["completion"]["values"], json!([]), "a free-text argument has no known values");

    let unknown = json!({"type": "ref/prompt", "name": "nope"});
    assert_eq!(client.error_code("completion/complete", complete(unknown, "input", "")).await, -32602);
    assert_eq!(client.error_code("completion/complete", complete(prompt, "size", "")).await, -32602);
}

#[tokio::test]
async fn run_events_are_logged_at_the_level_set_and_a_level_that_does_not_exist_is_refused() {
    let (mut client, _server, _board) = connect(json!({})).await;
    call_tool(&mut client, "run", json!({"goal": "events"})).await;
    assert!(client.logged().is_empty(), "nothing is logged before a level is set");

    assert_eq!(client.result("logging/setLevel", json!({"level": "warning"})).await, json!({}));
    call_tool(&mut client, "run", json!({"goal": "events"})).await;
    let logged = client.logged();
    assert!(!logged.is_empty(), "the failed tool result is a warning");
    for message in &logged {
        assert!(["warning", "error"].contains(&message["params"]["level"].as_str().unwrap()), "{message}");
        assert!(message["params"]["data"]["run"].as_str().unwrap().starts_with("run_"), "{message}");
    }
    assert!(logged.iter().any(|m| m["params"]["data"]["type"] == "tool_result"), "{logged:?}");

    client.notifications.clear();
    client.result("logging/setLevel", json!({"level": "debug"})).await;
    call_tool(&mut client, "run", json!({"goal": "events"})).await;
    let levels: Vec<&str> = client.logged().iter().map(|m| m["params"]["level"].as_str().unwrap()).collect();
    assert!(levels.contains(&"debug") && levels.contains(&"info") && levels.contains(&"warning"), "{levels:?}");

    assert_eq!(client.error_code("logging/setLevel", json!({"level": "loud"})).await, -32602);
}

#[tokio::test]
async fn a_permission_ask_is_put_to_a_client_that_can_elicit_and_its_answer_is_the_persons() {
    let (mut client, _server, _board) = connect(json!({"elicitation": {}})).await;
    client.answers.push_back(json!({"action": "accept", "content": {"allow": true}}));
    let allowed = call_tool(&mut client, "run", json!({"goal": "ask"})).await;
    assert_eq!(allowed["content"][0]["text"], "allowed", "{allowed}");
    let asked = &client.server_requests[0];
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let message = asked["params"]["message"].as_str().unwrap();
    assert!(message.contains("`write_file`") && message.contains("notes.txt"), "{message}");
    assert_eq!(asked["params"]["requestedSchema"]["properties"]["allow"]["type"], "boolean", "{asked}");

    client.answers.push_back(json!({"action": "accept", "content": {"allow": false, "reason": "not that file"}}));
    let denied = call_tool(&mut client, "run", json!({"goal": "ask"})).await;
    assert_eq!(denied["content"][0]["text"], "denied: not that file", "{denied}");

    client.answers.push_back(json!({"action": "decline"}));
    let declined = call_tool(&mut client, "run", json!({"goal": "ask"})).await;
    assert_eq!(declined["content"][0]["text"], "denied: declined by the person", "{declined}");

    client.answers.push_back(json!({"action": "cancel"}));
    let cancelled = call_tool(&mut client, "run", json!({"goal": "ask"})).await;
    assert!(cancelled["content"][0]["text"].as_str().unwrap().starts_with("denied: the person dismissed"));
    assert_eq!(client.server_requests.len(), 4);
}

#[tokio::test]
async fn a_client_without_elicitation_is_not_asked_and_the_ask_waits_for_an_answer_over_http() {
    let (mut client, _server, board) = connect(json!({})).await;
    let call = client.start("tools/call", json!({"name": "run", "arguments": {"goal": "ask"}})).await;
    let run = newest_run(&mut client).await;
    let events = format!("recursive://runs/{run}/events");
    // The ask is open on the server's board: answer it there, as `POST /v1/runs/{id}/asks/{ask}` does.
    let mut ask = None;
    for _ in 0..200 {
        let read = client.result("resources/read", json!({"uri": events})).await;
        let text = read["contents"][0]["text"].as_str().unwrap().to_string();
        ask = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|e| e["type"] == "ask");
        if ask.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ask = ask.expect("the run's ask is recorded")["ask"].as_str().unwrap().to_string();
    assert!(board.answer(&ask, ClientAnswer { allow: true, reason: None }));
    let response = client.response(call).await;
    assert_eq!(response["result"]["content"][0]["text"], "allowed", "{response}");
    assert!(client.server_requests.is_empty(), "no elicitation: {:?}", client.server_requests);
}

#[tokio::test]
async fn a_subscription_to_a_running_run_is_told_of_its_updates_and_an_unknown_run_is_refused() {
    let (mut client, _server, board) = connect(json!({})).await;
    let call = client.start("tools/call", json!({"name": "run", "arguments": {"goal": "slow"}})).await;
    let uri = format!("recursive://runs/{}", newest_run(&mut client).await);
    assert_eq!(client.result("resources/subscribe", json!({"uri": uri})).await, json!({}));
    // Reading the run's events until its ask shows and two updates were told, then stopping it.
    let events = format!("{uri}/events");
    let told = |client: &Client| {
        let uri = uri.as_str();
        client
            .notifications
            .iter()
            .filter(|n| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == uri)
            .count()
    };
    let mut ask = None;
    for _ in 0..500 {
        let read = client.result("resources/read", json!({"uri": events})).await;
        let text = read["contents"][0]["text"].as_str().unwrap().to_string();
        ask = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|e| e["type"] == "ask");
        if ask.is_some() && told(&client) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ask = ask.expect("the run's ask is recorded")["ask"].as_str().unwrap().to_string();
    assert!(board.answer(&ask, ClientAnswer { allow: true, reason: None }));
    let done = client.response(call).await;
    assert_eq!(done["result"]["content"][0]["text"], "slept", "{done}");
    let updates = client
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/resources/updated" && n["params"]["uri"] == uri)
        .count();
    assert!(updates >= 2, "told of the run's updates while it ran: {updates}");
    assert_eq!(client.result("resources/unsubscribe", json!({"uri": uri})).await, json!({}));

    let unknown = json!({"uri": "recursive://runs/run_nope"});
    assert_eq!(client.error_code("resources/subscribe", unknown).await, -32002);
    assert_eq!(client.error_code("resources/subscribe", json!({"uri": "file:///x"})).await, -32002);
}

#[tokio::test]
async fn graphs_and_threads_are_resources_on_a_server_of_graph_threads_and_not_otherwise() {
    let (mut client, _server, _board) = connect_with(json!({}), Some(Arc::new(Graphs))).await;
    let list = client.result("resources/list", json!({})).await;
    let graph = list["resources"].as_array().unwrap().iter().find(|r| r["uri"] == "recursive://graphs/triage").cloned();
    assert_eq!(graph.expect("the graph is listed")["description"], "Sorts tickets.", "{list}");
    let read = client.result("resources/read", json!({"uri": "recursive://graphs/triage"})).await;
    let body: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert!(body["mermaid"].as_str().unwrap().starts_with("flowchart"), "{body}");

    let read = client.result("resources/read", json!({"uri": "recursive://threads/t1"})).await;
    let thread: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!((&thread["status"], &thread["interrupt"]["question"]), (&json!("interrupted"), &json!("urgent?")));
    let read = client.result("resources/read", json!({"uri": "recursive://threads/t1/history"})).await;
    let history: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(history[0]["checkpoint"], "cp2", "newest first: {history}");
    for unknown in ["recursive://threads/t9", "recursive://threads/t9/history", "recursive://graphs/nope"] {
        assert_eq!(client.error_code("resources/read", json!({"uri": unknown})).await, -32002, "{unknown}");
    }

    let templates = client.result("resources/templates/list", json!({})).await;
    assert!(templates.to_string().contains("recursive://threads/{id}"), "{templates}");
    let names = json!({"ref": {"type": "ref/resource", "uri": "recursive://graphs/{name}"},
        "argument": {"name": "name", "value": "tr"}});
    assert_eq!(client.result("completion/complete", names).await["completion"]["values"], json!(["triage"]));

    let (mut plain, _server, _board) = connect(json!({})).await;
    let templates = plain.result("resources/templates/list", json!({})).await;
    assert!(!templates.to_string().contains("threads"), "no graph templates without graphs: {templates}");
    let response = plain.call("resources/read", json!({"uri": "recursive://graphs/triage"})).await;
    assert_eq!(response["error"]["code"], -32002, "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("--graphs"), "{response}");
}

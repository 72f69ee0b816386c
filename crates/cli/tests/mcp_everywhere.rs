#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The configured MCP servers start for every command that runs agents, not only `run`, `chat`
//! and `rlm`: an agent served by `serve`, one a `recursive worker` runs from the PostgreSQL
//! queue, a `graph run` tool node and a goal's tool action each call the reference MCP server's `echo` tool
//! (`@modelcontextprotocol/server-everything`, at `MCP_EVERYTHING_SERVER`). The scripted model
//! server's requests show the tool offered and its result coming back.

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::{Env, Served, http, terminate, wait_for};
use recursive_testkit::postgres::TestSchema;
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

const TOOL: &str = "everything__echo";

/// A model that calls the MCP tool with `echo <question>` and then answers with what came back.
fn model(runtime: &tokio::runtime::Runtime) -> ModelServer {
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(|r| match tool_results(r).last() {
        Some(result) => Some(Reply::text(format!("done: {result}"))),
        None => {
            let question = r.last_user_text().unwrap_or_default();
            Some(Reply::tool_call(TOOL, json!({"message": format!("echo {question}")})))
        }
    });
    server
}

/// The tool results a request carries back to the model.
fn tool_results(r: &RecordedRequest) -> Vec<String> {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].to_string()).collect()
}

/// The tool names a request offers.
fn offered(r: &RecordedRequest) -> Vec<String> {
    let tools = r.body["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["function"]["name"].as_str().map(String::from)).collect()
}

/// Asserts that the model was offered the MCP tool and got the echo of `marker` back.
fn assert_echoed(model: &ModelServer, marker: &str) {
    let requests = model.requests();
    assert!(requests.iter().any(|r| offered(r).iter().any(|n| n == TOOL)), "the MCP tool was offered");
    let back: Vec<String> = requests.iter().flat_map(tool_results).collect();
    assert!(back.iter().any(|t| t.contains(&format!("echo {marker}"))), "the echo came back: {back:?}");
    assert!(!back.iter().any(|t| t.contains("unknown tool") || t.contains("denied")), "{back:?}");
}

/// A workspace whose configuration starts the reference server and lets its tools run.
fn env_with_server() -> Option<Env> {
    let entry = recursive_testkit::require_env("MCP_EVERYTHING_SERVER")?;
    let env = Env::new();
    let config = format!(
        "[permissions]\ndefault_mcp = \"allow\"\n\n[mcp.servers.everything]\ncommand = \"node\"\nargs = [{entry:?}]\n\
         startup_timeout_secs = 60\n"
    );
    std::fs::write(env.path("recursive.toml"), config).unwrap();
    Some(env)
}

fn provider(model: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini", "--trust"]
        .map(String::from)
        .to_vec()
}

fn serve(env: &Env, model: &ModelServer, more: &[&str]) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q"])
        .args(more)
        .args(provider(model))
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

fn post_run(server: &Served, input: &str) -> String {
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": input})));
    assert_eq!(status, 202, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string()
}

/// The run once it finished.
fn finished(server: &Served, id: &str) -> Value {
    let mut view = Value::Null;
    wait_for("the run to finish", Duration::from_secs(90), || {
        let (_, _, body) = http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[], None);
        view = serde_json::from_str(&body).unwrap_or(Value::Null);
        view["status"] == "finished"
    });
    view
}

#[test]
fn a_served_agent_calls_a_configured_mcp_servers_tool() {
    let Some(env) = env_with_server() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = model(&runtime);
    let server = serve(&env, &model, &[]);
    let id = post_run(&server, "served");
    let view = finished(&server, &id);
    assert_eq!(view["result"]["ok"], true, "{view}");
    assert!(view["result"]["text"].as_str().unwrap().contains("Echo: echo served"), "{view}");
    assert_echoed(&model, "served");
}

fn worker(env: &Env, model: &ModelServer, url: &str) -> Child {
    let log = std::fs::File::create(env.path("worker.log")).unwrap();
    env.cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["worker", "--store", url, "--poll", "0.1", "--drain-timeout", "0.5"])
        .args(provider(model))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[test]
fn a_worker_agent_calls_a_configured_mcp_servers_tool() {
    let Some(env) = env_with_server() else { return };
    let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create(&url, "mcp_worker")).unwrap();
    let model = model(&runtime);
    let server = serve(&env, &model, &["--store", &schema.url, "--enqueue"]);
    let id = post_run(&server, "queued");
    let worker = worker(&env, &model, &schema.url);
    let view = finished(&server, &id);
    terminate(worker, "worker");
    let log = std::fs::read_to_string(env.path("worker.log")).unwrap_or_default();
    assert_eq!(view["result"]["ok"], true, "{view}\n{log}");
    assert!(view["result"]["text"].as_str().unwrap().contains("Echo: echo queued"), "{view}");
    assert!(log.contains("mcp server everything: ready"), "{log}");
    assert_echoed(&model, "queued");
}

const ECHO_GRAPH: &str = r#"name = "echo"

[state]
topic = "string"
echoed = "string"
said = "string"

[[nodes]]
name = "echo"
tool = "everything__echo"
args = { message = "echo {topic}" }
output = "echoed"

[[nodes]]
name = "say"
model = "default"
prompt = "Say: {echoed}"
output = "said"

[[edges]]
from = "START"
to = "echo"

[[edges]]
from = "echo"
to = "say"

[[edges]]
from = "say"
to = "END"
"#;

#[test]
fn a_graphs_tool_node_calls_a_configured_mcp_servers_tool() {
    let Some(env) = env_with_server() else { return };
    std::fs::write(env.path("echo.toml"), ECHO_GRAPH).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(ModelServer::start());
    model.respond_with(|r| Some(Reply::text(format!("said: {}", r.last_user_text().unwrap_or_default()))));
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "run", "echo.toml", "--thread", "t1", "--input", r#"{"topic": "graphed"}"#])
        .args(provider(&model))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let asked: Vec<String> = model.requests().iter().filter_map(RecordedRequest::last_user_text).collect();
    assert!(asked.iter().any(|t| t.contains("Say: Echo: echo graphed")), "the echo came back: {asked:?}");
}

#[test]
fn a_runnable_file_agent_naming_an_mcp_tool_gets_it_in_a_run() {
    let Some(env) = env_with_server() else { return };
    let helper =
        format!("kind = \"agent\"\ndescription = \"Echoes.\"\nsystem_prompt = \"HELPER\"\ntools = [\"{TOOL}\"]\n");
    std::fs::write(env.path("helper.toml"), helper).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(ModelServer::start());
    model.respond_with(|r| {
        let helper = r.body["messages"][0]["content"].as_str().is_some_and(|s| s.contains("HELPER"));
        Some(match (tool_results(r).last(), helper) {
            (Some(result), _) => Reply::text(format!("done: {result}")),
            (None, true) => Reply::tool_call(TOOL, json!({"message": "echo helped"})),
            (None, false) => Reply::tool_call("helper", json!({"input": "echo it"})),
        })
    });
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "go", "--agent", "helper=helper.toml", "--json"])
        .args(provider(&model))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let helped: Vec<RecordedRequest> = model
        .requests()
        .into_iter()
        .filter(|r| r.body["messages"][0]["content"].as_str().is_some_and(|s| s.contains("HELPER")))
        .collect();
    assert!(helped.iter().any(|r| offered(r).iter().any(|n| n == TOOL)), "the helper was offered the MCP tool");
    assert_echoed(&model, "helped");
}

#[test]
fn a_goals_tool_action_calls_a_configured_mcp_servers_tool() {
    let Some(env) = env_with_server() else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(ModelServer::start());
    model.respond_with(|r| {
        let (step, _) = common::goal_phase(r);
        let reply = match step.as_str() {
            "assess" => json!({
                "reasoning": "one call", "executable": true, "why_decompose": "",
                "action": {"type": "tool", "target": TOOL, "input": json!({"message": "echo goal-marker"}).to_string()}
            }),
            "check" => json!({ "reasoning": "seen", "achieved": true, "confidence": 0.9, "remaining_gaps": [] }),
            "synthesize" => json!({
                "summary": "echoed", "key_findings": [], "confidence": 0.9, "limitations": [], "contradictions": []
            }),
            _ => return Some(Reply::text("noted")),
        };
        Some(Reply::text(reply.to_string()))
    });
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["goal", "echo something", "--json"])
        .args(provider(&model))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let offered = model.requests()[0].body.to_string();
    assert!(offered.contains(&format!("tool {TOOL}(")), "the goal's capabilities list the MCP tool");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Echo: echo goal-marker"), "the tool's result is the goal's: {stdout}");
}

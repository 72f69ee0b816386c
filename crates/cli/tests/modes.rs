#![allow(clippy::unwrap_used, clippy::expect_used)]
//! How much a session asks, through the `recursive` binary against a scripted OpenAI-compatible
//! server on 127.0.0.1: a chat switched to plan mode (`/mode plan`) offers only the read-only
//! tools and ends its turn with the plan; `/approve` carries it out back in ask mode (where an
//! edit, with no terminal to ask, is refused); in accept-edits mode a file edit runs without
//! asking while a command still asks. `run --mode plan` plans with read-only tools; an
//! untrusted project may switch to plan but not to auto.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::{Env, s};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

fn provider(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

fn offered(r: &RecordedRequest) -> Vec<String> {
    let tools = r.body["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["function"]["name"].as_str().map(String::from)).collect()
}

fn last_tool_result(r: &RecordedRequest) -> String {
    let messages = r.body["messages"].as_array().unwrap();
    let last = messages.iter().rev().find(|m| m["role"] == "tool").unwrap();
    last["content"].as_str().unwrap_or_default().to_string()
}

fn write_a() -> Reply {
    Reply::tool_call("write_file", json!({"path": "a.txt", "content": "x"}))
}

#[test]
fn chat_modes_plan_approve_and_accept_edits_change_what_runs_without_asking() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        write_a(),
        Reply::text("1. write a.txt"),
        write_a(),
        Reply::text("could not write"),
        write_a(),
        Reply::tool_call("run_shell", json!({"command": "echo hi"})),
        Reply::text("done"),
    ]));
    let mut chat = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["chat", "-q"])
        .args(provider(&server))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = b"/mode plan\nfix it\n/approve\n/mode accept-edits\nagain\n";
    chat.stdin.take().unwrap().write_all(script).unwrap();
    let out = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    let plan = server.request(0);
    let tools = offered(&plan);
    assert!(tools.contains(&"read_file".to_string()), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "write_file" || t == "run_shell"), "plan mode offers only reading: {tools:?}");
    let refused = last_tool_result(&server.request(1));
    assert!(refused.contains("mode plan: nothing changes until the plan is approved"), "{refused}");
    assert!(stderr.contains("mode: plan") && stderr.contains("plan ready: /approve"), "{stderr}");

    let approved = server.request(2);
    let said: Vec<&str> =
        approved.body["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(said.iter().any(|t| t.contains("The plan is approved")), "{said:?}");
    assert!(offered(&approved).contains(&"write_file".to_string()), "out of plan mode the tools are back");
    let refused = last_tool_result(&server.request(3));
    assert!(refused.contains("permission denied") && refused.contains("no terminal"), "ask mode asks: {refused}");

    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "x", "accept-edits wrote without asking");
    let shell = last_tool_result(&server.request(6));
    assert!(shell.contains("permission denied"), "a command still asks in accept-edits: {shell}");
}

#[test]
fn run_mode_plan_looks_around_read_only_and_stops_with_the_plan_pending() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::tool_call("read_file", json!({"path": "notes.txt"})),
        Reply::text("1. append a line"),
    ]));
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "extend the notes", "--mode", "plan", "--json"])
        .args(provider(&server))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "the plan is pending: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!offered(&server.request(0)).iter().any(|t| t == "write_file"));
    assert!(last_tool_result(&server.request(1)).contains("hello world"), "the read-only call ran");
}

#[test]
fn an_untrusted_project_may_switch_to_plan_but_not_to_auto() {
    let env = Env::new();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]}, "done"]),
    );
    std::fs::write(env.path("recursive.toml"), "[permissions]\nmode = \"auto\"\n").unwrap();
    let out = env.run(&["run", "write", "--mock-script", s(&script), "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[permissions] mode"), "named in the warning: {stderr}");
    assert!(!env.path("out.txt").exists(), "auto was left out: the write asked and was refused");

    std::fs::write(env.path("recursive.toml"), "[permissions]\nmode = \"plan\"\n").unwrap();
    let out = env.run(&["run", "write", "--mock-script", s(&script), "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["finish_reason"], "plan_pending", "a stricter mode is kept: {v}");
    assert!(!env.path("out.txt").exists());
}

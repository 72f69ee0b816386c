#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/diff` and `/rewind` in the chat's line mode (stdin piped) against a scripted server on
//! 127.0.0.1: the diff shows a turn's edit, `/rewind` lists the prompts, `/rewind 1` restores
//! the file and the conversation, after which `/diff` has nothing to show and the next request
//! starts afresh.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::Env;
use recursive_testkit::{ModelServer, Reply};
use serde_json::json;

#[test]
fn diff_and_rewind_work_in_the_line_mode() {
    let env = Env::new();
    std::fs::write(env.path("a.txt"), "one\n").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::tool_call("write_file", json!({"path": "a.txt", "content": "two\n"})),
        Reply::text("edited"),
        Reply::text("fresh"),
    ]));
    let mut chat = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["chat", "--yes", "--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    chat.stdin
        .take()
        .unwrap()
        .write_all(b"edit a.txt\n/diff\n/rewind\n/rewind 1\n/diff\nsomething else\n/exit\n")
        .unwrap();
    let out = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("*** changed a.txt\n--- a/a.txt\n+++ b/a.txt"), "{stderr}");
    assert!(stderr.contains("-one\n+two"), "{stderr}");
    assert!(stderr.contains("  1. edit a.txt"), "{stderr}");
    assert!(stderr.contains("rewound to before prompt 1") && stderr.contains("restored a.txt"), "{stderr}");
    assert!(stderr.contains("no file edits in this chat yet"), "{stderr}");
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "one\n");
    let last = server.request(server.request_count() - 1);
    let users: Vec<&str> = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["something else"]);
}

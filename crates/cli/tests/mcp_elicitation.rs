#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A served run's permission ask answered by the person behind an MCP client, through the
//! official MCP Python SDK (`SERVE_TEST_PYTHON`): under `serve --client-asks`, an agent called as
//! an MCP tool wants to write a file; the SDK's elicitation callback is asked — accepted, the
//! write happens; declined, it does not and the model reads why. The same client sees the run
//! events as log messages at the level it set, the runs as resources and the agent as a prompt.

mod common;

use common::{Env, Served};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

/// A model that has the `saver` agent write `first.txt` or `second.txt` as it is told, and a
/// workspace with the agent's file.
fn saver(rt: &tokio::runtime::Runtime) -> (ModelServer, Env, std::path::PathBuf) {
    let model = rt.block_on(ModelServer::start());
    model.respond_with(|request| {
        let last = request.body["messages"].as_array()?.last()?.clone();
        if last["role"] == "tool" {
            return Some(Reply::text(format!("done: {}", last["content"].as_str().unwrap_or_default())));
        }
        let text = request.body.to_string();
        let file = ["first", "second"].into_iter().find(|f| text.contains(&format!("save the {f}")))?;
        Some(Reply::tool_call("write_file", json!({"path": format!("{file}.txt"), "content": file})))
    });
    let env = Env::new();
    let saver = env.path("saver.toml");
    std::fs::write(&saver, "description = \"Saves what it is given.\"\ntools = [\"write_file\"]\n").unwrap();
    (model, env, saver)
}

#[test]
fn the_official_mcp_sdk_answers_a_runs_permission_ask_by_elicitation() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (model, env, saver) = saver(&rt);
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--client-asks", "20"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .args(["--agent", &format!("saver={}", saver.display())])
        .env("OPENAI_API_KEY", "sk-test");
    let server = Served::spawn(cmd);

    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/mcp_elicit.py");
    let out = std::process::Command::new(python).args([client, &server.url()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    // Accepted: the write ran. Declined: it did not, and the model read why.
    assert_eq!(std::fs::read_to_string(env.path("first.txt")).unwrap(), "first");
    assert!(!env.path("second.txt").exists());
    assert!(seen["first"].as_str().unwrap().starts_with("done: "), "{seen}");
    assert!(seen["second"].as_str().unwrap().contains("declined by the person"), "{seen}");
    let asked = seen["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{seen}");
    for (question, file) in asked.iter().zip(["first.txt", "second.txt"]) {
        let message = question["message"].as_str().unwrap();
        assert!(message.contains("`write_file`") && message.contains(file), "{message}");
        assert_eq!(question["fields"], json!(["allow", "reason"]), "{question}");
    }

    // Logged at `info` and above: the ask is a notice; nothing below info came.
    let levels: Vec<&str> = seen["log_levels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(levels.contains(&"notice") && levels.contains(&"info") && !levels.contains(&"debug"), "{levels:?}");
    assert!(seen["log_types"].as_array().unwrap().contains(&json!("ask")), "{seen}");

    // The runs are resources, the agent a resource and a prompt.
    let uris: Vec<&str> = seen["uris"].as_array().unwrap().iter().map(|u| u.as_str().unwrap()).collect();
    assert!(uris.contains(&"recursive://runnables/saver"), "{uris:?}");
    assert_eq!(uris.iter().filter(|u| u.starts_with("recursive://runs/")).count(), 2, "{uris:?}");
    assert_eq!(seen["run"]["status"], "finished", "{seen}");
    assert_eq!(seen["prompts"], json!(["goal", "rlm", "run", "saver"]), "{seen}");
    assert_eq!(seen["prompt_text"], "keep this", "{seen}");
    assert_eq!(seen["completion"], json!([]), "a free-text input has no known values: {seen}");
}

#[test]
fn over_stdio_recursive_mcp_client_asks_puts_a_runs_permission_ask_to_the_client() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (model, env, saver) = saver(&rt);
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/mcp_stdio_elicit.py");
    let agent = format!("saver={}", saver.display());
    let out = std::process::Command::new(python)
        .args([client, &env.dir.path().display().to_string(), env!("CARGO_BIN_EXE_recursive")])
        .args(["mcp", "--client-asks", "20", "--agent", &agent])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("HOME", env.dir.path())
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env("OLLAMA_HOST", "127.0.0.1:9")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(std::fs::read_to_string(env.path("first.txt")).unwrap(), "first", "accepted: written");
    assert!(!env.path("second.txt").exists(), "declined: not written");
    assert!(seen["second"].as_str().unwrap().contains("declined by the person"), "{seen}");
    assert_eq!(seen["asked"].as_array().unwrap().len(), 2, "{seen}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, at `MCP_CONFORMANCE`,
//! run with `node`) against `recursive serve`'s `/mcp`: every active server scenario but
//! sampling passes (the server does not ask its clients to sample).
//!
//! What the suite calls by name is served for real where it can be: `test_simple_text`,
//! `test_tool_with_logging`, `test_tool_with_progress` and `test_elicitation` are agents of a
//! scripted model, so their text, their log messages and progress come from real runs, and
//! `test_elicitation`'s agent writes a file under `serve --client-asks`: its permission ask reaches
//! the suite's client as an elicitation, whose acceptance lets the write happen. The static
//! fixtures (images, audio, `test://` resources, the suite's prompts and elicitation forms) are
//! the server's conformance fixtures, offered only with `RECURSIVE_MCP_CONFORMANCE_FIXTURES=1`.

mod common;

use std::collections::BTreeMap;

use common::{Env, Served};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

/// The agents standing for the suite's tools that run, and the one that asks to write.
const AGENTS: &[&str] = &["test_simple_text", "test_tool_with_logging", "test_tool_with_progress", "test_elicitation"];

/// Every scenario of the suite's active server suite and whether it passes here.
fn expected() -> BTreeMap<&'static str, bool> {
    let failing = ["tools-call-sampling"];
    [
        "server-initialize",
        "logging-set-level",
        "ping",
        "completion-complete",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-with-logging",
        "tools-call-error",
        "tools-call-with-progress",
        "tools-call-sampling",
        "tools-call-elicitation",
        "elicitation-sep1034-defaults",
        "server-sse-multiple-streams",
        "elicitation-sep1330-enums",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "resources-subscribe",
        "resources-unsubscribe",
        "prompts-list",
        "prompts-get-simple",
        "prompts-get-with-args",
        "prompts-get-embedded-resource",
        "prompts-get-with-image",
        "dns-rebinding-protection",
    ]
    .into_iter()
    .map(|s| (s, !failing.contains(&s)))
    .collect()
}

/// Each scenario the suite ran and whether all its checks passed, from its results folder
/// (`server-<scenario>-<time>/checks.json`; a folder of a scenario not in `known` by its name).
fn outcomes(results: &std::path::Path, known: &[&str]) -> BTreeMap<String, bool> {
    let mut seen = BTreeMap::new();
    for entry in std::fs::read_dir(results).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let scenario =
            known.iter().find(|k| name.starts_with(&format!("server-{k}-20"))).map_or(name.clone(), |k| k.to_string());
        let checks: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("checks.json")).unwrap()).unwrap();
        let passed = checks.iter().all(|c| c["status"] != "FAILURE") && checks.iter().any(|c| c["status"] == "SUCCESS");
        seen.insert(scenario, passed);
    }
    seen
}

#[test]
fn the_official_conformance_suite_passes_every_server_scenario_but_sampling() {
    let Some(suite) = recursive_testkit::require_env("MCP_CONFORMANCE") else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.respond_with(|request| {
        let body = request.body.to_string();
        let last = request.body["messages"].as_array()?.last()?.clone();
        Some(match (body.contains("You save what you are given."), last["role"] == "tool") {
            (true, false) => Reply::tool_call("write_file", json!({"path": "info.txt", "content": "testuser"})),
            (true, true) => Reply::text(format!("saved: {}", last["content"].as_str().unwrap_or_default())),
            (false, _) => Reply::text("This is a simple text response for testing."),
        })
    });
    let env = Env::new();
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--client-asks", "20"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("RECURSIVE_MCP_CONFORMANCE_FIXTURES", "1");
    for agent in AGENTS {
        let file = env.path(&format!("{agent}.toml"));
        let body = match *agent {
            "test_elicitation" => {
                "description = \"Saves what it is given.\"\nsystem_prompt = \"You save what you are given.\"\n\
                 tools = [\"write_file\"]\n"
                    .to_string()
            }
            other => format!("description = \"Answers the conformance suite's `{other}`.\"\n"),
        };
        std::fs::write(&file, body).unwrap();
        cmd.args(["--agent", &format!("{agent}={}", file.display())]);
    }
    let server = Served::spawn(cmd);

    let results = env.path("conformance-results");
    let out = std::process::Command::new("node")
        .args([suite.as_str(), "server", "--url", &format!("{}/mcp", server.url()), "-o"])
        .arg(&results)
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let known: Vec<&str> = expected().into_keys().collect();
    let seen = outcomes(&results, &known);
    let expected: BTreeMap<String, bool> = expected().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(seen, expected, "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let passing = seen.values().filter(|p| **p).count();
    assert_eq!(passing, 29, "{stdout}");

    // The elicitation the suite answered was the run's permission ask: accepted, the write ran.
    assert_eq!(std::fs::read_to_string(env.path("info.txt")).unwrap(), "testuser");
    let answered = model.requests().into_iter().any(|r| {
        let last = &r.body["messages"].as_array().unwrap().last().unwrap().clone();
        last["role"] == "tool" && !last["content"].as_str().unwrap_or_default().contains("not approved")
    });
    assert!(answered, "the write's result went back to the model");
}

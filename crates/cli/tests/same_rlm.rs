#![allow(clippy::unwrap_used, clippy::expect_used)]
//! One configuration, one RLM: with `[rlm]` settings (dialect, host tools, snippet limits,
//! concurrency) in recursive.toml, `rlm`, `goal --input`, a `graph run` RLM node and a served
//! `rlm` run all build the same RLM — the system prompt each sends its model, which states the
//! dialect, the host functions and every limit, is the same byte for byte (recorded with
//! `--record`).

mod common;

use std::time::Duration;

use common::{Env, http, s, serve};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[rlm]
dialect = "rlm"
tools = ["list_dir", "search_files"]
snippet_timeout_secs = 17
concurrency = 5
recursion_limit = 321
"#;

/// The RLM system prompts of a cassette.
fn rlm_prompts(cassette: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(cassette)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v["request"]["messages"][0]["content"].as_str().map(str::to_string))
        .filter(|system| system.starts_with("You answer a question about inputs"))
        .collect()
}

fn script(env: &Env) -> std::path::PathBuf {
    let assess = json!({
        "executable": true,
        "reasoning": "the RLM reads it",
        "action": {"type": "delegate", "target": "rlm", "input": "What does it say?"}
    });
    env.script(
        "s.json",
        json!([
            {"when": "Inputs (read them", "text": "```repl\nFINAL('ok')\n```"},
            {"when": "Current goal", "text": assess.to_string()}
        ]),
    )
}

#[test]
fn rlm_goal_graph_and_serve_build_the_same_rlm_from_one_configuration() {
    let env = Env::new();
    std::fs::write(env.path("recursive.toml"), CONFIG).unwrap();
    std::fs::write(
        env.path("flow.toml"),
        "name = \"flow\"\n[state]\ncontext = \"string\"\nanswer = \"string\"\n[[nodes]]\nname = \"read\"\nrlm = \"default\"\n\
         question = \"What does it say?\"\ninputs = [\"context\"]\noutput = \"answer\"\n[[edges]]\nfrom = \"START\"\nto = \"read\"\n",
    )
    .unwrap();
    let script = script(&env);
    let config = env.path("recursive.toml");
    let common = |cassette: &str| -> Vec<String> {
        vec![
            "--mock-script".into(),
            s(&script).into(),
            "--config".into(),
            s(&config).into(),
            "--record".into(),
            s(&env.path(cassette)).into(),
        ]
    };
    let run = |args: Vec<String>| {
        let out = env.cmd().args(&args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };

    let mut args = vec!["rlm".to_string(), "What does it say?".into(), "--input".into(), "notes.txt".into()];
    args.extend(common("rlm.jsonl"));
    let (code, err) = run(args);
    assert_eq!(code, Some(0), "{err}");

    let mut args =
        vec!["goal".to_string(), "Find out what notes.txt says".into(), "--input".into(), "notes.txt".into()];
    args.extend(common("goal.jsonl"));
    run(args);

    let mut args = vec![
        "graph".to_string(),
        "run".into(),
        "flow.toml".into(),
        "--input".into(),
        r#"{"context": "hello world\n"}"#.into(),
        "--store".into(),
        s(&env.path("g.db")).into(),
    ];
    args.extend(common("graph.jsonl"));
    let (code, err) = run(args);
    assert_eq!(code, Some(0), "{err}");

    let served = serve(&env, &common("serve.jsonl").iter().map(String::as_str).collect::<Vec<_>>());
    let start = json!({"kind": "rlm", "input": "What does it say?", "inputs": {"context": "hello world\n"}});
    let (status, _, body) = http(&served.addr, "POST", "/v1/runs", &[], Some(&start));
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    common::wait_for("the served run", Duration::from_secs(30), || {
        let (_, _, body) = http(&served.addr, "GET", &format!("/v1/runs/{id}"), &[], None);
        serde_json::from_str::<Value>(&body).unwrap()["status"] == "finished"
    });
    drop(served);

    let prompts: Vec<(&str, Vec<String>)> =
        ["rlm", "goal", "graph", "serve"].iter().map(|c| (*c, rlm_prompts(&env.path(&format!("{c}.jsonl"))))).collect();
    let (_, first) = &prompts[0];
    assert_eq!(first.len(), 1, "one RLM turn under rlm");
    let prompt = &first[0];
    for needle in ["list_dir(", "search_files(", "FINAL", "17", "321"] {
        assert!(prompt.contains(needle), "the [rlm] settings reach the prompt ({needle}):\n{prompt}");
    }
    assert!(!prompt.contains("read_file("), "only the named host tools:\n{prompt}");
    for (command, seen) in &prompts[1..] {
        assert!(!seen.is_empty(), "{command} ran no RLM");
        assert_eq!(&seen[0], prompt, "{command} built another RLM");
    }
}

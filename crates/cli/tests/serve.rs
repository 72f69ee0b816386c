#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `recursive serve` end to end: a live server on 127.0.0.1 driven by the official OpenAI Python
//! SDK (chat completions against `agent` and `rlm`, streamed and not, models, errors) and by an
//! SSE client reading a run's events to its final event and resuming them; then the server's
//! own guarantees: bearer token, 429 with Retry-After past the queue, and a SIGTERM that
//! cancels the running run and lets its final events out.
//!
//! The Python with the `openai` SDK comes from `SERVE_TEST_PYTHON` (`./scripts/test` makes a
//! virtualenv); without it the SDK test fails unless `RECURSIVE_ALLOW_SKIP=1`.

mod common;

use std::time::Duration;

use common::{Env, Served, http, s, signal};
use serde_json::{Value, json};

fn script(env: &Env) -> std::path::PathBuf {
    env.script(
        "serve.json",
        json!([
            {"when": "say hello", "text": "hello there"},
            {"when": "How many words", "text": "```python\nsubmit({'answer': str(len(inputs['input1'].split()))})\n```"},
            {"when": "Carry out the request", "text": "```python\nsubmit({'answer': context.upper()})\n```"},
            {"when": "Count the words of", "text": "```python\nname = sorted(inputs)[0]\nsubmit({'answer': name + ':' + str(len(inputs[name].split()))})\n```"},
            {"when": "Name the inputs", "text": "```python\nsubmit({'answer': ','.join(sorted(inputs))})\n```"},
            {"when": "sleep please", "tool_calls": [{"name": "run_shell", "arguments": {"command": "sleep 30"}}]},
            {"when": "write please", "tool_calls": [{"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}]}
        ]),
    )
}

#[test]
fn the_official_openai_sdk_and_an_sse_client_work_against_the_server() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let env = Env::new();
    let script = script(&env);
    let server = Served::start(&env, &["--mock-script", s(&script)], Some("sekrit"));
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/openai_client.py");
    let out = std::process::Command::new(python).args([client, &server.url(), "sekrit"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(seen["models"], json!(["agent", "rlm"]));
    assert_eq!(seen["agent"], json!({"content": "hello there", "finish_reason": "stop", "total_tokens": 15}));
    assert_eq!(seen["agent_stream"]["content"], "hello there");
    assert_eq!(seen["agent_stream"]["finish_reason"], "stop");
    assert_eq!(seen["agent_stream"]["usage"], 15);
    assert!(seen["agent_stream"]["chunks"].as_u64().unwrap() > 2, "the text arrived in pieces: {seen}");
    assert_eq!(seen["rlm"], "4");
    assert_eq!(seen["rlm_stream"], "ALPHA BETA GAMMA DELTA");
    assert_eq!(seen["rlm_file"], "notes:3", "an attached file is an input named after it");
    assert_eq!(seen["upload"], "report:5", "an uploaded file is an input named after it");
    assert!(seen["unknown_model"].as_str().unwrap().contains("does not exist"), "{seen}");

    let events: Vec<&str> = seen["events"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(events.first(), Some(&"run_started"), "{events:?}");
    assert_eq!(&events[events.len() - 2..], ["run_finished", "end"], "{events:?}");
    assert_eq!(seen["end"]["ok"], true);
    assert_eq!(seen["end"]["text"], "hello there");
    let resumed = seen["resumed_ids"].as_array().unwrap();
    assert!(!resumed.is_empty() && resumed.iter().all(|i| i.as_u64().unwrap() >= 2), "{resumed:?}");
    assert_eq!(seen["status"], "finished");

    // Without the token, nothing but /health answers.
    let (status, _, body) = http(&server.addr, "GET", "/v1/models", &[], None);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"error\""), "{body}");
    assert_eq!(http(&server.addr, "GET", "/health", &[], None).0, 200);
    let (status, _, body) = http(&server.addr, "GET", "/openapi.json", &[("authorization", "Bearer sekrit")], None);
    assert_eq!(status, 200);
    assert!(body.contains("/v1/chat/completions") && body.contains("RunRequest"), "{body}");
}

#[test]
fn listening_off_loopback_without_a_token_is_refused() {
    let env = Env::new();
    let out = env.run(&["serve", "--listen", "0.0.0.0:0", "--mock-script", s(&script(&env))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without a bearer token"));
}

#[test]
fn past_the_queue_a_run_gets_429_and_sigterm_stops_the_running_one_for_the_next_server() {
    let env = Env::new();
    let config = env.path("serve.toml");
    std::fs::write(&config, "[[permissions.rules]]\ntool = \"run_shell\"\naction = \"allow\"\n").unwrap();
    let script = script(&env);
    let args =
        ["--mock-script", s(&script), "--config", s(&config), "--max-concurrent-runs", "1", "--max-queued-runs", "0"];
    let mut server = Served::start(&env, &args, None);
    let start = json!({"kind": "run", "input": "sleep please"});
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &[], Some(&start));
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    // Wait until the command runs, then ask for a second run.
    common::wait_for("the first run's command", Duration::from_secs(30), || {
        let (_, _, body) = http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[], None);
        serde_json::from_str::<Value>(&body).unwrap()["events"].as_u64().unwrap_or(0) >= 4
    });
    let (status, head, body) = http(&server.addr, "POST", "/v1/runs", &[], Some(&start));
    assert_eq!(status, 429, "{body}");
    assert!(head.contains("retry-after: 1"), "{head}");

    // Follow the first run's events (the stream has begun: its head arrived) while the server is
    // told to stop.
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!("GET /v1/runs/{id}/events HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n", server.addr);
    std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
    let mut stream = std::io::BufReader::new(stream);
    let mut status_line = String::new();
    std::io::BufRead::read_line(&mut stream, &mut status_line).unwrap();
    assert!(status_line.contains(" 200 "), "{status_line}");
    let reader = std::thread::spawn(move || std::io::read_to_string(stream).unwrap());
    signal(server.child.id(), "TERM");
    let events = reader.join().unwrap();
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(events.contains("event: run_finished"), "{events}");
    assert!(events.contains("\"kind\":\"cancelled\""), "the run was cancelled: {events}");
    assert!(events.contains("event: end"), "{events}");
    assert!(events.contains("resumes when a server starts again"), "left for the next server: {events}");
}

#[test]
fn the_official_mcp_sdk_calls_rlm_over_stdio_and_http_with_progress() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let env = Env::new();
    let script = script(&env);
    std::fs::write(env.path("helper.toml"), "description = \"Greets.\"\n").unwrap();
    let agent = format!("helper={}", s(&env.path("helper.toml")));
    let server = Served::start(&env, &["--mock-script", s(&script), "--agent", &agent], Some("sekrit"));
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/mcp_client.py");
    let mut cmd = env.cmd();
    let out = std::process::Command::new(python)
        .args([client, env!("CARGO_BIN_EXE_recursive"), s(&script), &server.url(), "sekrit", &agent])
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))))
        .current_dir(env.dir.path())
        .output()
        .unwrap();
    let _ = cmd.output();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    for transport in ["stdio", "http"] {
        let t = &seen[transport];
        assert_eq!(t["tools"], json!(["goal", "helper", "rlm", "run"]), "{transport}: {t}");
        assert_eq!(t["helper_text"], "hello there", "an --agent runnable is an MCP tool: {transport}: {t}");
        assert_eq!(t["helper_schema"], json!(["input"]), "{transport}: {t}");
        assert_eq!(t["rlm_schema"], json!(["inputs", "question"]), "{transport}: {t}");
        // One outputSchema for every tool, which the SDK checked each result against.
        let fields = "cost_usd,error,input_tokens,ok,outcome,output,output_tokens,text,tool_calls";
        assert_eq!(t["output_schemas"], json!([fields]), "{transport}: {t}");
        assert_eq!(t["structured_ok"], true, "{transport}: {t}");
        assert_eq!(t["text"], "4", "{transport}: {t}");
        assert_eq!(t["is_error"], false, "{transport}: {t}");
        let progress: Vec<&str> = t["progress"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(progress.iter().any(|m| m.contains("rlm_iteration")), "{transport}: {progress:?}");
        assert!(progress.iter().any(|m| m.contains("run_finished")), "{transport}: {progress:?}");
        assert_eq!(t["bad_is_error"], true, "{transport}: {t}");
        assert!(t["bad_text"].as_str().unwrap().contains("invalid arguments for `run`"), "{transport}: {t}");
    }
}

#[test]
fn a_tool_call_that_would_ask_is_denied_with_how_to_allow_it() {
    let env = Env::new();
    let script = script(&env);
    let server = Served::start(&env, &["--mock-script", s(&script)], None);
    let (status, _, body) =
        http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": "write please"})));
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let events = http(&server.addr, "GET", &format!("/v1/runs/{id}/events"), &[], None).2;
    assert!(events.contains("the server cannot ask anyone"), "{events}");
    assert!(!env.path("x.txt").exists());
}

#[test]
fn named_agents_are_models_and_a_cancelled_run_ends_cancelled() {
    let env = Env::new();
    let script = script(&env);
    let def = env.path("reviewer.toml");
    std::fs::write(&def, "description = \"Reviews.\"\nsystem_prompt = \"You review.\"\ntools = [\"read_file\"]\n")
        .unwrap();
    let config = env.path("serve.toml");
    std::fs::write(&config, "[[permissions.rules]]\ntool = \"run_shell\"\naction = \"allow\"\n").unwrap();
    let agent = format!("reviewer={}", def.display());
    let server = Served::start(&env, &["--mock-script", s(&script), "--config", s(&config), "--agent", &agent], None);

    let (_, _, body) = http(&server.addr, "GET", "/v1/models", &[], None);
    let ids: Vec<String> = serde_json::from_str::<Value>(&body).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["agent", "rlm", "reviewer"]);
    let chat = json!({"model": "reviewer", "messages": [{"role": "user", "content": "say hello"}]});
    let (status, _, body) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&chat));
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["choices"][0]["message"]["content"], "hello there");

    // A run cancelled through the API ends cancelled, with its final events.
    let (_, _, body) =
        http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": "sleep please"})));
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    // Cancelled once its command runs.
    common::wait_for("the run's command", Duration::from_secs(30), || {
        let (_, _, body) = http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[], None);
        serde_json::from_str::<Value>(&body).unwrap()["events"].as_u64().unwrap_or(0) >= 4
    });
    let (status, _, _) = http(&server.addr, "POST", &format!("/v1/runs/{id}/cancel"), &[], None);
    assert_eq!(status, 202);
    let events = http(&server.addr, "GET", &format!("/v1/runs/{id}/events"), &[], None).2;
    assert!(events.contains("\"kind\":\"cancelled\"") && events.contains("event: end"), "{events}");
    let (_, _, body) = http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[], None);
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["status"], "finished");
    assert_eq!(view["result"]["ok"], false);
    assert_eq!(view["result"]["outcome"], "cancelled");
}

#[test]
fn uploaded_files_sharing_a_stem_are_distinct_inputs() {
    let env = Env::new();
    let server = Served::start(&env, &["--mock-script", s(&script(&env))], None);
    let boundary = "xyzzy";
    let part = |disposition: &str, body: &str| {
        format!("--{boundary}\r\nContent-Disposition: form-data; {disposition}\r\n\r\n{body}\r\n")
    };
    let body = [
        part("name=\"kind\"", "rlm"),
        part("name=\"input\"", "Name the inputs"),
        part("name=\"file\"; filename=\"data.csv\"", "a,b"),
        part("name=\"file\"; filename=\"data.json\"", "{}"),
        format!("--{boundary}--\r\n"),
    ]
    .concat();
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-type: multipart/form-data; boundary={boundary}\r\ncontent-length: {}\r\n\r\n",
        server.addr,
        body.len()
    );
    std::io::Write::write_all(&mut stream, (head + &body).as_bytes()).unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 202"), "{response}");
    let created: Value = serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap();
    let id = created["id"].as_str().unwrap();
    let mut view = Value::Null;
    common::wait_for("the run", Duration::from_secs(30), || {
        view = serde_json::from_str(&http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[], None).2).unwrap();
        view["status"] == "finished"
    });
    assert_eq!(view["result"]["text"], "data,data_json", "{view}");
}

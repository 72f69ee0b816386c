//! The `recursive` binary end to end: provider selection, the `--json` contract, exit
//! statuses, permissions, sub-agents, record/replay, trace, and the `rlm` and `goal` commands,
//! all driven by scripted model replies (`--provider mock --mock-script`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

mod common;

use common::{Env, s, stdout_json};

#[test]
fn no_provider_exits_two_with_instructions() {
    let env = Env::new();
    let out = env.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for hint in ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "Ollama", "recursive.toml", "--provider"] {
        assert!(err.contains(hint), "missing {hint} in: {err}");
    }
}

#[test]
fn json_output_is_one_object_with_the_documented_shape() {
    let env = Env::new();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}, "It says hello world."]),
    );
    let out = env.run(&["run", "read the notes", "--mock-script", s(&script), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["finish_reason"], "no_more_tool_calls");
    assert_eq!(v["output"], "It says hello world.");
    assert_eq!(v["usage"]["input_tokens"], 20);
    assert_eq!(v["usage"]["output_tokens"], 10);
    assert!(v["cost_usd"].is_number());
    let messages = v["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    let call = &messages[2]["tool_calls"][0];
    assert_eq!(call["name"], "read_file");
    assert_eq!(call["arguments"], json!({"path": "notes.txt"}));
    assert_eq!(messages[3]["tool_call_id"], call["id"]);
    assert!(messages[3]["content"].as_str().unwrap().contains("hello world"));
    for m in messages {
        for key in ["role", "content", "tool_calls", "tool_call_id"] {
            assert!(m.get(key).is_some(), "message lacks {key}: {m}");
        }
    }
}

#[test]
fn step_limit_exits_with_its_own_status() {
    let env = Env::new();
    let call = json!({"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]});
    let script = env.script("s.json", json!([call, call, call]));
    let out = env.run(&["run", "loop", "--mock-script", s(&script), "--max-steps", "1", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout_json(&out)["finish_reason"], "budget_exceeded");
}

#[test]
fn writes_are_denied_without_a_terminal_and_the_denial_limit_ends_the_run() {
    let env = Env::new();
    let write = |n: u32| json!({"tool_calls": [{"name": "write_file", "arguments": {"path": format!("out{n}.txt"), "content": "x"}}]});
    let script = env.script("s.json", json!([write(1), write(2), write(3), "never"]));
    let out = env.run(&["run", "write", "--mock-script", s(&script), "--json"]);
    assert_eq!(out.status.code(), Some(9), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["finish_reason"], "permission_denial_limit");
    assert!(v["messages"][3]["content"].as_str().unwrap().contains("denied"));
    assert!(!env.path("out1.txt").exists(), "nothing was written");
}

#[test]
fn yes_flag_approves_writes() {
    let env = Env::new();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "write_file", "arguments": {"path": "sub/out.txt", "content": "made"}}]}, "done"]),
    );
    let out = env.run(&["run", "write", "--mock-script", s(&script), "--yes", "-q"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(env.path("sub/out.txt")).unwrap(), "made");
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let env = Env::new();
    let ws = env.path("ws");
    std::fs::create_dir(&ws).unwrap();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "read_file", "arguments": {"path": "../notes.txt"}}]}, "ok"]),
    );
    let out = env.run(&["run", "peek", "--mock-script", s(&script), "--workspace", s(&ws), "--json"]);
    let v = stdout_json(&out);
    let result = v["messages"][3]["content"].as_str().unwrap();
    assert!(!result.contains("hello world"), "{result}");
    assert!(result.to_lowercase().contains("outside"), "{result}");
}

#[test]
fn sub_agent_from_a_definition_file_runs_nested_and_shows_in_trace() {
    let env = Env::new();
    std::fs::write(
        env.path("reader.toml"),
        "description = \"Reads files and reports.\"\nsystem_prompt = \"You read files.\"\ntools = [\"read_file\"]\n",
    )
    .unwrap();
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [{"name": "reader", "arguments": {"input": "what is in notes.txt?"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
            "notes.txt says hello world",
            "The reader reports: hello world."
        ]),
    );
    let events = env.path("events.jsonl");
    let agent = format!("reader={}", s(&env.path("reader.toml")));
    let out = env.run(&[
        "run",
        "ask the reader",
        "--mock-script",
        s(&script),
        "--agent",
        &agent,
        "--events",
        s(&events),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["output"], "The reader reports: hello world.");
    assert!(v["messages"][3]["content"].as_str().unwrap().contains("notes.txt says hello world"));
    assert_eq!(v["usage"]["input_tokens"], 40, "the sub-agent's usage rolls up");

    let trace = env.run(&["trace", s(&events)]);
    assert_eq!(trace.status.code(), Some(0));
    let text = String::from_utf8_lossy(&trace.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("main-d0 [no_more_tool_calls]"), "{text}");
    assert!(lines[1].starts_with("  reader-d1 [no_more_tool_calls]"), "{text}");
    assert!(lines[0].contains("40 tok") || lines[0].contains("60 tok"), "{text}");

    let filtered = env.run(&["trace", s(&events), "--goal", "NOTES.TXT"]);
    let text = String::from_utf8_lossy(&filtered.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.starts_with("reader-d1"), "{text}");
}

#[test]
fn recorded_run_replays_offline_and_a_different_request_fails_clearly() {
    let env = Env::new();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}, "It says hello world."]),
    );
    let cassette = env.path("run.cassette.jsonl");
    let rec = env.run(&["run", "read the notes", "--mock-script", s(&script), "--record", s(&cassette), "--json"]);
    assert_eq!(rec.status.code(), Some(0));
    let replay = env.run(&["run", "read the notes", "--replay", s(&cassette), "--json"]);
    assert_eq!(replay.status.code(), Some(0), "{}", String::from_utf8_lossy(&replay.stderr));
    assert_eq!(stdout_json(&replay)["output"], stdout_json(&rec)["output"]);

    let other = env.run(&["run", "something else", "--replay", s(&cassette), "--json"]);
    assert_eq!(other.status.code(), Some(1));
    // The fault is reported once on stderr, and --json still prints what was gathered.
    let v = stdout_json(&other);
    assert_eq!(v["outcome"], "error");
    assert!(v["error"].as_str().unwrap().contains("no recorded interaction"), "{v}");
    assert_eq!(v["messages"][1]["content"], "something else");
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(err.matches("no recorded interaction").count(), 1, "{err}");
}

#[test]
fn rlm_command_runs_model_code_in_the_sandbox() {
    let env = Env::new();
    let doc: String =
        (0..2000).map(|i| if i == 1234 { "the code is 7731\n".to_string() } else { format!("line {i}\n") }).collect();
    std::fs::write(env.path("doc.txt"), doc).unwrap();
    let script = env.script(
        "s.json",
        json!([
            "```python\nhits = [l for l in context.splitlines() if 'code' in l]\nprint(hits)\n```",
            "```python\nsubmit({'answer': hits[0].split()[-1]})\n```"
        ]),
    );
    let out = env.run(&["rlm", "What is the code?", "--input", "doc.txt", "--mock-script", s(&script), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["output"], json!({"answer": "7731"}));
    assert_eq!(v["submitted"], true);
    assert_eq!(v["iterations"], 2);
    assert!(v["trajectory"].is_array());
}

#[test]
fn rlm_memory_limit_flag_stops_a_snippet_and_the_run_goes_on() {
    let env = Env::new();
    std::fs::write(env.path("doc.txt"), "short").unwrap();
    let script = env.script(
        "s.json",
        json!(["```python\nwords = ('a ' * 30_000_000).split()\n```", "```python\nsubmit('recovered')\n```"]),
    );
    let out =
        env.run(&["rlm", "q", "--input", "doc.txt", "--mock-script", s(&script), "--memory-limit", "64", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["output"], json!({"answer": "recovered"}));
    let first = v["trajectory"][0]["snippets"][0]["observation"].as_str().unwrap();
    assert!(first.contains("MemoryError") && first.contains("64.0 MiB"), "{first}");
}

#[test]
fn rlm_limit_flags_out_of_range_are_usage_errors() {
    let env = Env::new();
    std::fs::write(env.path("doc.txt"), "short").unwrap();
    for args in [["--recursion-limit", "0"], ["--recursion-limit", "100000"], ["--memory-limit", "-1"]] {
        let mut all = vec!["rlm", "q", "--input", "doc.txt", "--provider", "mock"];
        all.extend(args);
        let out = env.run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn rlm_rejects_an_invalid_json_input_clearly() {
    let env = Env::new();
    std::fs::write(env.path("bad.json"), "{not json").unwrap();
    let out = env.run(&["rlm", "q", "--input", "bad.json", "--provider", "mock"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.json is not valid JSON"));
}

#[test]
fn goal_command_decomposes_logs_and_traces_the_tree() {
    let env = Env::new();
    let script = env.script(
        "g.json",
        json!([
            "{\"executable\": false, \"reasoning\": \"two parts\"}",
            "{\"sub_goals\": [{\"goal\": \"Read notes.txt\", \"rationale\": \"need the text\", \"depends_on\": [], \"complexity\": \"low\"}, {\"goal\": \"Summarize what the notes say\", \"rationale\": \"the answer\", \"depends_on\": [0], \"complexity\": \"low\"}]}",
            "{\"executable\": true, \"reasoning\": \"one read\", \"action\": {\"type\": \"tool\", \"target\": \"read_file\", \"input\": \"{\\\"path\\\": \\\"notes.txt\\\"}\"}}",
            "{\"achieved\": false, \"confidence\": 0.2, \"gaps\": [\"no summary yet\"], \"reasoning\": \"only read\"}",
            "{\"executable\": true, \"reasoning\": \"analysis\", \"action\": {\"type\": \"analyze\", \"target\": \"\", \"input\": \"summarize the notes\"}}",
            "The notes greet the world.",
            "{\"reasoning\": \"both done\", \"achieved\": true, \"confidence\": 0.9, \"remaining_gaps\": []}",
            "{\"summary\": \"The notes say hello world.\", \"key_findings\": [\"greeting\"], \"confidence\": 0.9, \"limitations\": []}"
        ]),
    );
    let log = env.path("goal.jsonl");
    let out = env.run(&["goal", "Summarize the notes", "--mock-script", s(&script), "--log", s(&log), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["status"], "achieved");
    assert_eq!(v["result"]["summary"], "The notes say hello world.");
    assert_eq!(v["children"].as_array().unwrap().len(), 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\n    [completed] Read notes.txt\n"), "live tree on stderr: {stderr}");
    assert_eq!(v["outcome"], "completed");

    let trace = env.run(&["trace", s(&log)]);
    let text = String::from_utf8_lossy(&trace.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("goal-d0 [achieved]") && lines[0].contains("120 tok"), "{text}");
    assert!(lines[1].starts_with("  goal-d1 [completed]") && lines[1].ends_with("Read notes.txt"), "{text}");
    assert!(lines[2].contains("30 tok") && lines[2].ends_with("Summarize what the notes say"), "{text}");

    // The raw output behind a goal's result is in the log, and `--raw` shows it under the goal.
    let raw = env.run(&["trace", s(&log), "--goal", "Read notes", "--raw"]);
    let text = String::from_utf8_lossy(&raw.stdout);
    let notes = std::fs::read_to_string(env.path("notes.txt")).unwrap();
    assert!(text.lines().nth(1).is_some_and(|l| l.ends_with(notes.lines().next().unwrap())), "{text}");
}

#[test]
fn plan_mode_stops_pending_without_a_terminal_and_yes_carries_it_out() {
    let env = Env::new();
    let plan = "1. read notes.txt\n2. report";
    let script = env.script("p.json", json!([plan]));
    let out = env.run(&["run", "report the notes", "--mock-script", s(&script), "--plan", "--json"]);
    assert_eq!(out.status.code(), Some(7));
    let v = stdout_json(&out);
    assert_eq!(v["finish_reason"], "plan_pending");
    assert_eq!(v["output"], plan);

    let script = env.script(
        "p2.json",
        json!([plan, {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}, "It says hello world."]),
    );
    let out = env.run(&["run", "report the notes", "--mock-script", s(&script), "--plan", "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["output"], "It says hello world.");
    let contents: Vec<&str> =
        v["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert!(contents.contains(&plan) && contents.iter().any(|c| c.contains("plan is approved")), "{contents:?}");
    assert_eq!(v["messages"][0]["role"], "system");
    assert!(!contents[0].contains("do not call any tools"), "the approved plan runs under a prompt allowing tools");
}

#[test]
fn a_cassette_recorded_with_a_model_replays_without_naming_it() {
    let env = Env::new();
    let script = env.script("s.json", json!(["recorded answer"]));
    let cassette = env.path("model.cassette.jsonl");
    let rec = env.run(&[
        "run",
        "q",
        "--mock-script",
        s(&script),
        "--model",
        "m-recorded",
        "--record",
        s(&cassette),
        "--json",
    ]);
    assert_eq!(rec.status.code(), Some(0), "{}", String::from_utf8_lossy(&rec.stderr));
    let replay = env.run(&["run", "q", "--replay", s(&cassette), "--json"]);
    assert_eq!(replay.status.code(), Some(0), "{}", String::from_utf8_lossy(&replay.stderr));
    assert_eq!(stdout_json(&replay)["output"], "recorded answer");
    // Naming another model is a different request.
    let other = env.run(&["run", "q", "--replay", s(&cassette), "--model", "m-other", "--json"]);
    assert_eq!(other.status.code(), Some(1));
}

#[test]
fn trace_reads_an_event_log_whose_last_line_a_kill_cut_and_says_so() {
    let env = Env::new();
    let script = env.script("s.json", json!(["the answer"]));
    let events = env.path("events.jsonl");
    let out = env.run(&["run", "hello", "--mock-script", s(&script), "--events", s(&events)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut log = std::fs::OpenOptions::new().append(true).open(&events).unwrap();
    std::io::Write::write_all(&mut log, br#"{"run_id":"x","kind":{"type":"usa"#).unwrap();
    let trace = env.run(&["trace", s(&events)]);
    let stderr = String::from_utf8_lossy(&trace.stderr);
    assert_eq!(trace.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning:") && stderr.contains("cut short"), "{stderr}");
    assert!(String::from_utf8_lossy(&trace.stdout).contains("main-d0"), "the tree before the cut is shown");

    // A damaged line that is not the last is still an error naming it.
    let text = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, format!("{{broken\n{text}")).unwrap();
    let trace = env.run(&["trace", s(&events)]);
    assert_ne!(trace.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&trace.stderr).contains("line 1:"), "{}", String::from_utf8_lossy(&trace.stderr));
}

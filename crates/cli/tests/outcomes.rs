//! Honest outcomes, the same for `run`, `rlm` and `goal`: cancellation (Ctrl-C, SIGTERM) exits 8
//! with a final event and the partial result; a provider fault exits 1 with one error line, a
//! final `run_finished` event carrying the error, the transcript kept and `--json` saying what
//! happened; an RLM without a valid answer exits 14; and `[permissions]` rules hold for the RLM's
//! host tools and goal tool actions as for `run`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::{Env, alive, events, runs, s, signal, stdout_json, wait_for};
use serde_json::{Value, json};

fn spawn(env: &Env, args: &[&str]) -> Child {
    env.cmd().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Starts the command with `--json --events`, waits for an event of type `started`, sends
/// `sig`, and checks the run ended cancelled (exit 8, `outcome`, and a final `run_finished`
/// event saying so). Returns the `--json` object.
fn interrupt(env: &Env, args: &[&str], started: &str, sig: &str) -> Value {
    let ev = env.path("events.jsonl");
    let mut all = args.to_vec();
    all.extend(["--json", "--events", s(&ev)]);
    let child = spawn(env, &all);
    wait_for(&format!("a {started} event"), Duration::from_secs(20), || has_event(&ev, started));
    signal(child.id(), sig);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(8), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["outcome"], "cancelled");
    let last = last_event(&ev);
    assert_eq!(
        (last["type"].as_str(), last["finish_reason"]["kind"].as_str()),
        (Some("run_finished"), Some("cancelled"))
    );
    v
}

fn last_event(path: &std::path::Path) -> Value {
    events(path).pop().expect("no events")
}

fn has_event(path: &std::path::Path, ty: &str) -> bool {
    events(path).iter().any(|e| e["type"] == ty)
}

#[test]
fn sigterm_cancels_a_run_kills_its_shell_commands_and_exits_8() {
    let env = Env::new();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "run_shell", "arguments": {"command": "echo $$ > shell.pid; exec sleep 3131"}}]}]),
    );
    let pid_file = env.path("shell.pid");
    let ev = env.path("events.jsonl");
    let child = spawn(&env, &["run", "sleep", "--mock-script", s(&script), "--yes", "--json", "--events", s(&ev)]);
    wait_for("the shell command to start", Duration::from_secs(20), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.trim().parse::<i32>().is_ok())
    });
    signal(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(8), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["outcome"], "cancelled");
    assert_eq!(v["messages"].as_array().unwrap().last().unwrap()["role"], "tool", "every call got its result");
    assert_eq!(last_event(&ev)["finish_reason"]["kind"], "cancelled");
    // The command may run in the OS sandbox, with pids of its own: it is found by its command line.
    wait_for("the shell command to be killed", Duration::from_secs(5), || !runs(&["sleep", "3131"]));
}

#[test]
fn ctrl_c_on_an_rlm_exits_8_with_the_partial_trajectory() {
    let env = Env::new();
    let script = env.script("r.json", json!(["```python\nwhile True:\n    pass\n```"]));
    let v =
        interrupt(&env, &["rlm", "spin", "--input", "notes.txt", "--mock-script", s(&script)], "rlm_snippet", "INT");
    assert_eq!(v["output"], Value::Null);
    assert_eq!(v["trajectory"].as_array().unwrap().len(), 1, "the interrupted iteration is kept");
}

/// The children of a process (all its threads').
fn children_of(pid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(list.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    out
}

#[test]
fn ctrl_c_stops_native_maths_at_once_and_leaves_no_sandbox_worker() {
    let env = Env::new();
    let script = env.script("r.json", json!(["```python\nwhile True:\n    x = 7 ** (3 ** 16)\n```"]));
    let ev = env.path("events.jsonl");
    let child = spawn(
        &env,
        &["rlm", "maths", "--input", "notes.txt", "--mock-script", s(&script), "--json", "--events", s(&ev)],
    );
    wait_for("the snippet to start", Duration::from_secs(20), || has_event(&ev, "rlm_snippet"));
    let workers = children_of(child.id());
    assert!(!workers.is_empty(), "the sandbox worker runs as a child process");
    let asked = std::time::Instant::now();
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    // The maths would run for minutes: well under that is the interrupt's doing.
    assert!(asked.elapsed() < Duration::from_secs(15), "took {:?} to stop", asked.elapsed());
    assert_eq!(out.status.code(), Some(8), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["outcome"], "cancelled");
    for w in workers {
        wait_for("the sandbox worker to be gone", Duration::from_secs(10), || !alive(w));
    }
}

#[test]
fn sigterm_on_a_goal_exits_8_never_completed() {
    // A server that accepts and never answers keeps the goal's web_fetch waiting.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let _server = std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().take(4).collect();
        std::thread::sleep(Duration::from_secs(60));
        drop(held);
    });
    let env = Env::new();
    let input = json!({ "url": url }).to_string();
    let assess = json!({
        "reasoning": "one fetch",
        "executable": true,
        "action": {"type": "tool", "target": "web_fetch", "input": input}
    });
    let script = env.script("g.json", json!([assess.to_string()]));
    // The server is on loopback, which web_fetch refuses unless allowed; network tools ask.
    let config = env.path("fetch.toml");
    std::fs::write(&config, "[tools.web]\nallow_hosts = [\"127.0.0.1\"]\n[permissions]\ndefault_network = \"allow\"\n")
        .unwrap();
    let args = ["goal", "fetch the page", "--mock-script", s(&script), "--config", s(&config)];
    let v = interrupt(&env, &args, "tool_call", "TERM");
    assert_ne!(v["status"], "completed");
}

/// Runs the command against a provider on a closed port (no retries) with `--json`, checks the
/// fault's exit status 1 and the `outcome`/`error` fields, and returns the output and the object.
fn against_unreachable_provider(env: &Env, args: &[&str]) -> (std::process::Output, Value) {
    std::fs::write(
        env.path("recursive.toml"),
        "[provider]\nkind = \"openai\"\nmodel = \"gpt-4o-mini\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n",
    )
    .unwrap();
    // `--trust`: the project file's base_url would otherwise be left out.
    let out = env.cmd().env("OPENAI_API_KEY", "k").args(args).args(["--json", "--trust"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["outcome"], "error");
    assert!(v["error"].as_str().unwrap().contains("connection failed"), "{v}");
    (out, v)
}

#[test]
fn provider_fault_in_run_exits_1_once_with_the_partial_result_and_a_final_event() {
    let env = Env::new();
    let ev = env.path("events.jsonl");
    let transcript = env.path("t.jsonl");
    let (out, v) =
        against_unreachable_provider(&env, &["run", "hello there", "--events", s(&ev), "--transcript", s(&transcript)]);
    assert_eq!(v["messages"][1]["content"], "hello there", "after the system prompt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("connection failed").count(), 1, "one error line: {stderr}");
    let last = last_event(&ev);
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["finish_reason"]["kind"], "error");
    assert!(last["error"].as_str().unwrap().contains("connection failed"));
    assert!(std::fs::read_to_string(&transcript).unwrap().contains("hello there"), "the transcript is kept");

    let trace = env.run(&["trace", s(&ev)]);
    let text = String::from_utf8_lossy(&trace.stdout);
    assert!(text.contains("[error]") && !text.contains("[running]"), "{text}");
}

#[test]
fn provider_fault_in_rlm_exits_1_and_keeps_what_was_gathered() {
    let env = Env::new();
    let ev = env.path("events.jsonl");
    let (_, v) = against_unreachable_provider(&env, &["rlm", "q", "--input", "notes.txt", "--events", s(&ev)]);
    assert_eq!(v["rlm_outcome"]["kind"], "failed");
    assert_eq!(last_event(&ev)["finish_reason"]["kind"], "error");
}

#[test]
fn provider_fault_in_goal_exits_1() {
    let env = Env::new();
    let (_, v) = against_unreachable_provider(&env, &["goal", "anything"]);
    assert_eq!(v["status"], "failed");
}

#[test]
fn rlm_extraction_that_fails_the_schema_exits_14() {
    let env = Env::new();
    let schema = env.path("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}"#,
    )
    .unwrap();
    let script = env.script("r.json", json!(["I will think about it.", "many"]));
    let out = env.run(&[
        "rlm",
        "how many?",
        "--input",
        "notes.txt",
        "--schema",
        s(&schema),
        "--max-iterations",
        "1",
        "--mock-script",
        s(&script),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(14), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["outcome"], "no_answer");
    assert_eq!(v["rlm_outcome"]["kind"], "extraction_failed");
}

/// Deny rules for secrets and for web_fetch.
fn deny_rules(env: &Env) {
    std::fs::create_dir_all(env.path("secrets")).unwrap();
    std::fs::write(env.path("secrets/key.txt"), "TOP-SECRET-VALUE\n").unwrap();
    std::fs::write(
        env.path("recursive.toml"),
        "[[permissions.rules]]\ntool = \"read_file\"\npath = \"secrets/**\"\naction = \"deny\"\n\n\
         [[permissions.rules]]\ntool = \"web_fetch\"\naction = \"deny\"\n",
    )
    .unwrap();
}

#[test]
fn permission_rules_hold_for_rlm_host_tools() {
    let env = Env::new();
    deny_rules(&env);
    let code = "```python\nprint(read_file(path='secrets/key.txt'))\nprint(web_fetch(url='http://127.0.0.1:9/'))\nprint(read_file(path='notes.txt'))\n```";
    let script = env.script("r.json", json!([code, "```python\nsubmit('done')\n```"]));
    // `web_fetch` is only in the sandbox when named.
    let out = env.run(&[
        "rlm",
        "read",
        "--input",
        "notes.txt",
        "--mock-script",
        s(&script),
        "--provider",
        "mock",
        "--tool",
        "read_file",
        "--tool",
        "web_fetch",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let observation = v["trajectory"][0]["observation"].as_str().unwrap();
    assert!(!observation.contains("TOP-SECRET-VALUE"), "{observation}");
    assert_eq!(observation.matches("permission denied").count(), 2, "{observation}");
    assert!(observation.contains("hello world"), "allowed reads still work: {observation}");
}

#[test]
fn permission_rules_hold_for_goal_tool_actions() {
    let env = Env::new();
    deny_rules(&env);
    let script = env.script(
        "g.json",
        json!([
            "{\"reasoning\": \"one read\", \"executable\": true, \"action\": {\"type\": \"tool\", \"target\": \"read_file\", \"input\": \"{\\\"path\\\": \\\"secrets/key.txt\\\"}\"}}",
        ]),
    );
    let log = env.path("goal.jsonl");
    let out = env.run(&["goal", "read the key", "--mock-script", s(&script), "--log", s(&log), "--json"]);
    assert_eq!(out.status.code(), Some(13), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("TOP-SECRET-VALUE"), "{text}");
    let v = stdout_json(&out);
    assert_eq!(v["status"], "failed");
    assert!(v["reason"].as_str().unwrap().contains("permission denied"), "{v}");
}

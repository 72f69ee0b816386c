#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Sessions across processes: a `run` is a session; `run --continue` and `chat --resume` in
//! new processes send the earlier conversation to the model (read from the request bodies a
//! scripted server on 127.0.0.1 recorded), and `recursive sessions` lists what each cost.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::{Env, stdout_json};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

fn provider_args(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

/// `recursive chat` with `args`, every stream piped (against `server` when given).
fn spawn_chat(env: &Env, args: &[&str], server: Option<&ModelServer>) -> std::process::Child {
    let mut cmd = env.cmd();
    cmd.arg("chat").args(args);
    if let Some(server) = server {
        cmd.env("OPENAI_API_KEY", "sk-test").args(provider_args(server));
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn contents(body: &Value) -> Vec<String> {
    body["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap_or("").to_string()).collect()
}

#[test]
fn a_session_continues_in_other_processes_with_its_history() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server =
        runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("41"), Reply::text("still 41")]));
    let run = |args: &[&str]| {
        env.cmd().env("OPENAI_API_KEY", "sk-test").args(args).args(provider_args(&server)).output().unwrap()
    };

    let first = run(&["run", "remember the number 41", "--json"]);
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let id = stdout_json(&first)["session"].as_str().unwrap().to_string();

    let second = run(&["run", "which number?", "--continue", "--json"]);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    assert_eq!(stdout_json(&second)["session"], id.as_str(), "--continue picks the workspace's latest session");
    let sent = contents(&server.request(1).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?"], "{sent:?}");
    assert_eq!(server.request(1).body["messages"][0]["role"], "system");

    // A third process: chat, resuming by id, fed from a pipe.
    let mut chat = spawn_chat(&env, &["--resume", &id, "-q"], Some(&server));
    chat.stdin.take().unwrap().write_all(b"and now?\n/cost\n/exit\n").unwrap();
    let out = chat.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("still 41"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 turn(s)"), "{}", String::from_utf8_lossy(&out.stderr));
    let sent = contents(&server.request(2).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?", "41", "and now?"], "{sent:?}");

    let list = env.run(&["sessions", "--json"]);
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(sessions[0]["id"], id.as_str());
    assert_eq!(sessions[0]["turns"], 3);
    assert_eq!(sessions[0]["title"], "remember the number 41");
    assert!(sessions[0]["input_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn an_unknown_session_is_a_usage_error() {
    let env = Env::new();
    let script = env.script("s.json", serde_json::json!(["x"]));
    for args in [
        vec!["run", "x", "--resume", "20990101-000000-abcdef"],
        vec!["run", "x", "--continue"],
        vec!["chat", "--resume", "../etc"],
    ] {
        let out = env.cmd().args(&args).args(["--mock-script", common::s(&script)]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn a_long_session_is_compacted_under_a_small_context_window_with_pairing_intact() {
    let env = Env::new();
    std::fs::write(env.path("big.txt"), "lorem ipsum dolor sit amet ".repeat(120)).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::tool_call("read_file", serde_json::json!({"path": "big.txt"})),
        Reply::text("first answer"),
        Reply::text("second answer"),
    ]));
    server.when("Summarise the conversation", Reply::text("SUMMARY: big.txt was read; it is lorem ipsum."));
    let events = env.path("events.jsonl");
    let run = |args: &[&str]| {
        env.cmd()
            .env("OPENAI_API_KEY", "sk-test")
            .args(args)
            .args(["--system", "Be terse.", "--context-window", "300", "--yes", "--json"])
            .args(provider_args(&server))
            .output()
            .unwrap()
    };
    let first = run(&["run", "read big.txt"]);
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let second = run(&["run", "what was in it?", "--continue", "--events", common::s(&events)]);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    assert_eq!(stdout_json(&second)["output"], "second answer");

    let requests = server.requests();
    assert_eq!(requests.len(), 4, "two calls, a summary, the continued call");
    assert!(requests[2].last_user_text().unwrap().contains("Summarise the conversation"));
    assert!(requests[2].last_user_text().unwrap().contains("read big.txt"), "the summary sees the old turn");
    let sent = &requests[3].body["messages"];
    assert_eq!(sent[0]["role"], "system");
    assert_eq!(sent[0]["content"], "Be terse.");
    let head = sent[1]["content"].as_str().unwrap();
    assert!(head.starts_with("[Summary of the earlier conversation]") && head.contains("lorem ipsum."), "{head}");
    assert!(head.ends_with("what was in it?"), "{head}");
    assert_eq!(sent.as_array().unwrap().len(), 2, "the old turn with its long tool result is gone: {sent}");
    for r in &requests {
        r.check_pairing().unwrap();
    }
    let log = std::fs::read_to_string(&events).unwrap();
    assert!(log.contains("\"type\":\"compacted\"") && log.contains("\"method\":\"summary\""), "{log}");

    // The summary was saved with the session: a third process continues from it, no new summary.
    server.push(Reply::text("third answer"));
    let third = run(&["run", "and then?", "--continue"]);
    assert_eq!(third.status.code(), Some(0), "{}", String::from_utf8_lossy(&third.stderr));
    let requests = server.requests();
    let last = requests.last().unwrap();
    assert!(last.last_user_text().unwrap().ends_with("and then?"));
    let head = last.body["messages"][1]["content"].as_str().unwrap();
    assert!(head.starts_with("[Summary of the earlier conversation]"), "{head}");
    for r in &requests[4..] {
        let body = r.body.to_string();
        assert!(!body.contains("amet lorem ipsum"), "the resumed process saw the uncompacted history: {body}");
    }
}

/// Tokens a request takes as the compaction estimate counts them: its messages' text and tool
/// calls, and the tool specs, four characters a token.
fn request_tokens(body: &Value) -> usize {
    let messages: usize = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").len() + m.get("tool_calls").map_or(0, |c| c.to_string().len()))
        .sum();
    (messages + body.get("tools").map_or(0, |t| t.to_string().len())) / 4
}

#[test]
fn no_request_exceeds_the_context_window_even_within_one_turn() {
    let env = Env::new();
    let lines: String = (0..3000).map(|i| format!("line {i:05} of a long file\n")).collect();
    std::fs::write(env.path("big.txt"), lines).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::tool_call("read_file", serde_json::json!({"path": "big.txt"})),
        Reply::tool_call("read_file", serde_json::json!({"path": "big.txt", "offset": 1000})),
        Reply::text("read it"),
    ]));
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "read big.txt twice", "--context-window", "4000", "--yes", "--json"])
        .args(provider_args(&server))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        r.check_pairing().unwrap();
        assert!(request_tokens(&r.body) <= 4000, "a request of {} tokens", request_tokens(&r.body));
    }
    let last = requests[2].body["messages"].to_string();
    assert!(last.contains("line 00000") && last.contains("chars truncated"), "the head stays, the middle is cut");
}

#[test]
fn chat_compacts_on_request() {
    let env = Env::new();
    let script = env.script(
        "chat.json",
        serde_json::json!([{"when": "Summarise the conversation", "text": "SUM of the first turn"}, "A", "B", "C"]),
    );
    let mut chat = spawn_chat(&env, &["--mock-script", common::s(&script), "-q"], None);
    chat.stdin.take().unwrap().write_all(b"first\nsecond\n/compact\nthird\n/exit\n").unwrap();
    let out = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("compacted: 5 → 3 message(s)"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains('A') && stdout.contains('B') && stdout.contains('C'), "{stdout}");
}

#[test]
fn ctrl_c_at_the_chat_prompt_ends_the_chat_with_8() {
    let env = Env::new();
    let script = env.script("chat.json", serde_json::json!(["unused"]));
    let mut chat = spawn_chat(&env, &["--mock-script", common::s(&script), "-q"], None);
    let _stdin = chat.stdin.take();
    common::wait_for("the chat prompt", std::time::Duration::from_secs(20), || {
        std::fs::read_dir(env.path(".local/share/recursive/sessions")).is_ok_and(|mut d| d.next().is_some())
    });
    common::signal(chat.id(), "INT");
    let out = chat.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(8), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_session_killed_during_a_tool_call_resumes_with_the_call_marked_interrupted() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::tool_call("run_shell", serde_json::json!({"command": "sleep 30"})),
        Reply::text("resumed fine"),
    ]));
    let child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "wait a while", "--yes", "--json"])
        .args(provider_args(&server))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sessions = env.path(".local/share/recursive/sessions");
    let transcript = || {
        std::fs::read_dir(&sessions)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path().join("transcript.jsonl"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    common::wait_for("the tool call in the transcript", std::time::Duration::from_secs(30), || {
        transcript().contains("sleep 30")
    });
    common::signal(child.id(), "KILL");
    let _ = child.wait_with_output();
    let id = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().file_name().into_string().unwrap();

    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "go on", "--resume", &id, "--json"])
        .args(provider_args(&server))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["output"], "resumed fine");
    let sent = &server.request(1).body["messages"];
    let tool = sent.as_array().unwrap().iter().find(|m| m["role"] == "tool").expect("the call got a result");
    assert!(tool["content"].as_str().unwrap().starts_with("interrupted"), "{tool}");
}

#[test]
fn chat_counts_each_turns_usage_once() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::text("one").with_usage(1000, 10),
        Reply::text("two").with_usage(1000, 10),
        Reply::text("three").with_usage(1000, 10),
    ]));
    let mut chat = spawn_chat(&env, &["-q"], Some(&server));
    chat.stdin.take().unwrap().write_all(b"first\nsecond\nthird\n/cost\n").unwrap();
    let out = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3 turn(s), 3000 tokens in, 30 out"), "{stderr}");
}

#[test]
fn a_second_process_on_one_session_is_refused() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("again")]));
    let first = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "remember 41", "--json"])
        .args(provider_args(&server))
        .output()
        .unwrap();
    let id = stdout_json(&first)["session"].as_str().unwrap().to_string();
    // A chat holds the session while it waits for input.
    let mut chat = spawn_chat(&env, &["--resume", &id, "-q"], Some(&server));
    // Its banner comes once it holds the session.
    let mut banner = String::new();
    let mut chat_stderr = std::io::BufReader::new(chat.stderr.take().unwrap());
    std::io::BufRead::read_line(&mut chat_stderr, &mut banner).unwrap();
    assert!(banner.contains(&id), "{banner}");
    let second = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "and now?", "--resume", &id])
        .args(provider_args(&server))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(String::from_utf8_lossy(&second.stderr).contains("in use by another process"));
    drop(chat.stdin.take());
    let _ = chat.wait();
    drop(chat_stderr);
    // Once the chat has ended, the session is free again.
    let third = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "and now?", "--resume", &id, "--json"])
        .args(provider_args(&server))
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(0), "{}", String::from_utf8_lossy(&third.stderr));
}

#[test]
fn a_resumed_session_gets_the_system_prompt_of_the_process_continuing_it() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("one"), Reply::text("two")]));
    let run = |args: &[&str]| {
        env.cmd().env("OPENAI_API_KEY", "sk-test").args(args).args(provider_args(&server)).output().unwrap()
    };
    let first = run(&["run", "hello", "--system", "You are ALPHA.", "--json"]);
    let id = stdout_json(&first)["session"].as_str().unwrap().to_string();
    let second = run(&["run", "again", "--resume", &id, "--system", "You are BETA.", "--json"]);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    let messages = server.request(1).body["messages"].as_array().unwrap().clone();
    let systems: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "system").filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(systems, ["You are BETA."], "{messages:?}");
    assert_eq!(contents(&server.request(1).body)[1..], ["hello", "one", "again"]);
}

#[test]
fn chat_offers_the_configured_mcp_servers_tools() {
    let Some(entry) = recursive_testkit::require_env("MCP_EVERYTHING_SERVER") else { return };
    let env = Env::new();
    std::fs::write(
        env.path("recursive.toml"),
        format!("[mcp.servers.everything]\ncommand = \"node\"\nargs = [{entry:?}]\nstartup_timeout_secs = 60\n"),
    )
    .unwrap();
    let script = env.script(
        "s.json",
        serde_json::json!([
            {"tool_calls": [{"name": "everything__echo", "arguments": {"message": "hello from chat"}}]},
            "echoed"
        ]),
    );
    // The servers start in the background: the first message waits until the server is ready.
    let mut chat =
        spawn_chat(&env, &["--provider", "mock", "--mock-script", common::s(&script), "--trust", "--yes"], None);
    let mut stdin = chat.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(chat.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("mcp server everything: ready")) {
        seen.push(rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the server is ready"));
    }
    stdin.write_all(b"echo something\n").unwrap();
    drop(stdin);
    let _ = chat.wait_with_output().unwrap();
    seen.extend(rx.iter());
    let stderr = seen.join("\n");
    assert!(stderr.contains("hello from chat"), "the MCP tool ran: {stderr}");
    assert!(!stderr.contains("unknown tool"), "{stderr}");
}

/// The binary with its data directory at `<env>/data`; its sessions are under
/// `<env>/data/recursive/sessions`.
fn in_data(env: &Env) -> std::process::Command {
    let mut cmd = env.cmd();
    cmd.env("XDG_DATA_HOME", env.path("data"));
    cmd
}

/// A finished `run` session with the mock provider; its directory.
fn mock_session(env: &Env) -> std::path::PathBuf {
    let script = env.script("first.json", serde_json::json!(["noted"]));
    let out =
        in_data(env).args(["run", "remember 41", "--json", "--mock-script", common::s(&script)]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let id = stdout_json(&out)["session"].as_str().unwrap().to_string();
    let dir = env.path("data/recursive/sessions").join(&id);
    assert!(dir.join("session.json").is_file(), "{}", dir.display());
    dir
}

/// Runs `cmd` to its end (killed after 30 s so that a hang fails the test rather than stalls it).
fn bounded(mut cmd: std::process::Command, what: &str) -> std::process::Output {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if rx.recv_timeout(std::time::Duration::from_secs(30)).is_err() {
            common::signal(pid, "KILL");
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    assert!(out.status.code().is_some(), "{what} hung and was killed");
    out
}

#[test]
fn a_fifo_planted_as_session_json_hangs_neither_sessions_nor_continue() {
    let env = Env::new();
    let dir = mock_session(&env);
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::remove_file(dir.join("session.json")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(dir.join("session.json")).status().unwrap();
    assert!(made.success());

    let mut cmd = in_data(&env);
    cmd.args(["sessions"]);
    let listed = bounded(cmd, "sessions");
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("warning: session {id} skipped")) && stderr.contains("not a regular file"),
        "{stderr}"
    );

    let script = env.script("again.json", serde_json::json!(["again"]));
    let mut cmd = in_data(&env);
    cmd.args(["run", "and now?", "--continue", "--mock-script", common::s(&script)]);
    let continued = bounded(cmd, "run --continue");
    assert_eq!(continued.status.code(), Some(2), "{}", String::from_utf8_lossy(&continued.stderr));
    assert!(String::from_utf8_lossy(&continued.stderr).contains("skipped"));

    let mut cmd = in_data(&env);
    cmd.args(["run", "and now?", "--resume", &id, "--mock-script", common::s(&script)]);
    let resumed = bounded(cmd, "run --resume");
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
}

#[test]
fn chat_starts_with_a_prompt_titles_the_session_by_it_and_continue_and_rename_find_it() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([
        Reply::text("first answer").with_usage(1000, 10),
        Reply::text("second answer").with_usage(1000, 10),
    ]));
    let mut first = spawn_chat(&env, &["-q", "fix the flaky parser test"], Some(&server));
    drop(first.stdin.take());
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("first answer"), "the prompt was sent first");
    let list: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    assert_eq!(list[0]["title"], "fix the flaky parser test", "{list}");

    let mut again = spawn_chat(&env, &["-q", "--continue"], Some(&server));
    again.stdin.take().unwrap().write_all(b"and now?\n/rename parser work\n/cost\n").unwrap();
    let out = again.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("is now \"parser work\""), "{stderr}");
    assert!(stderr.contains("2 turn(s), 2000 tokens in"), "the session's totals span both processes: {stderr}");
    assert_eq!(contents(&server.request(1).body)[1..], ["fix the flaky parser test", "first answer", "and now?"]);
    let list: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    assert_eq!((list.as_array().unwrap().len(), &list[0]["title"]), (1, &json!("parser work")));

    let mut pick = env.cmd();
    pick.env("OPENAI_API_KEY", "sk-test").args(["chat", "--resume"]).args(provider_args(&server));
    let picked = pick.stdin(Stdio::null()).output().unwrap();
    assert_eq!(picked.status.code(), Some(2), "no terminal to pick on");
    assert!(String::from_utf8_lossy(&picked.stderr).contains("give the id"), "{picked:?}");
}

#[test]
fn a_journal_an_earlier_version_kept_in_the_session_directory_moves_into_the_run_store_with_its_spend() {
    let env = Env::new();
    let dir = mock_session(&env);
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    // A turn of an earlier version killed mid-call: its hold, with no settle.
    std::fs::write(dir.join("journal.jsonl"), "{\"spend\":\"hold\",\"v\":1,\"call\":\"c1\",\"usd\":0.25}\n").unwrap();
    let script = env.script("again.json", serde_json::json!(["again"]));
    let mut cmd = in_data(&env);
    cmd.args(["run", "and now?", "--resume", &id, "--json", "--mock-script", common::s(&script)]);
    let out = bounded(cmd, "run --resume");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join("journal.jsonl").exists(), "the file was moved");
    assert!(dir.join("journal.jsonl.imported").is_file());
    let records = common::store_journal(&env.path("data/recursive/runs.db"), &format!("session-{id}"));
    assert!(records.iter().any(|r| r["call"] == "c1"), "the earlier record is in the store: {records:?}");
    let session: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap();
    assert!(session["cost_usd"].as_f64().unwrap() >= 0.25, "the killed turn's hold counts: {session}");
}

/// A two-turn session against `server` in `env`: its id, after the first turn.
fn first_turn(env: &Env, server: &ModelServer) -> String {
    let first = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "remember the number 41", "--json"])
        .args(provider_args(server))
        .output()
        .unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    stdout_json(&first)["session"].as_str().unwrap().to_string()
}

fn second_turn(env: &Env, server: &ModelServer, id: &str) -> std::process::Output {
    env.cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "which number?", "--resume", id, "--json"])
        .args(provider_args(server))
        .output()
        .unwrap()
}

#[test]
fn a_session_goes_on_from_the_run_store_its_jsonl_file_only_an_export() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("41")]));
    let id = first_turn(&env, &server);
    let export = env.path(&format!(".local/share/recursive/sessions/{id}/transcript.jsonl"));
    assert!(std::fs::read_to_string(&export).unwrap().contains("remember the number 41"), "exported as it goes");
    std::fs::remove_file(&export).unwrap();

    let second = second_turn(&env, &server, &id);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    let sent = contents(&server.request(1).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?"], "read from the store: {sent:?}");
    let records =
        common::store_journal(&env.path(".local/share/recursive/runs.db"), &format!("transcript-session-{id}"));
    assert!(records.iter().any(|r| r["content"] == "41"), "the new turn is kept in the store: {records:?}");
}

#[test]
fn a_session_an_earlier_version_kept_in_its_jsonl_file_alone_moves_into_the_run_store() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("41")]));
    let id = first_turn(&env, &server);
    // As an earlier version left it: the conversation in the file, nothing in the store.
    let db = rusqlite::Connection::open(env.path(".local/share/recursive/runs.db")).unwrap();
    db.execute("DELETE FROM run_journal WHERE key = ?1", [format!("transcript-session-{id}")]).unwrap();
    drop(db);

    let second = second_turn(&env, &server, &id);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    let sent = contents(&server.request(1).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?"], "moved in from the file: {sent:?}");
}

#[test]
fn a_damaged_run_store_is_a_clear_error_and_moved_aside_the_session_goes_on_from_its_export() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("41")]));
    let id = first_turn(&env, &server);
    let db = env.path(".local/share/recursive/runs.db");
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", db.display()));
    }
    std::fs::write(&db, "not a database").unwrap();

    let refused = second_turn(&env, &server, &id);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("runs.db") && stderr.contains("move it aside"), "{stderr}");
    assert_eq!(server.requests().len(), 1, "nothing was sent");

    std::fs::rename(&db, env.path("runs.db.damaged")).unwrap();
    let second = second_turn(&env, &server, &id);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    let sent = contents(&server.request(1).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?"], "read from the export: {sent:?}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `recursive graph` across processes. A graph run killed with SIGKILL in the middle of a
//! superstep (a real child process against a scripted model server on 127.0.0.1) resumes
//! from its checkpoint store — SQLite and PostgreSQL — and the server's request log shows no
//! finished node ran again, and the result equals an uninterrupted run's. Offline (mock
//! model): check diagnostics, an approval that interrupts and resumes, history, state, time
//! travel, fork, and the Mermaid diagram.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Env, s, signal, stdout_json, wait_for};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

const SURVEY: &str = r#"
name = "survey"

[state]
topic = "string"
api = "string"
db = "string"
cache = "string"
report = "string"

[[nodes]]
name = "api"
model = "default"
prompt = "Summarise the api log about {topic}."
output = "api"

[[nodes]]
name = "db"
model = "default"
prompt = "Summarise the db log about {topic}."
output = "db"

[[nodes]]
name = "cache"
model = "default"
prompt = "Summarise the cache log about {topic}."
output = "cache"

[[nodes]]
name = "report"
model = "default"
prompt = "Report on: {api} | {db} | {cache}"
output = "report"

[[edges]]
from = "START"
to = ["api", "db", "cache"]

[[edges]]
from = "api"
to = "report"

[[edges]]
from = "db"
to = "report"

[[edges]]
from = "cache"
to = "report"

[[edges]]
from = "report"
to = "END"
"#;

/// The user prompt of a request.
fn prompt(r: &RecordedRequest) -> String {
    r.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The node a request comes from.
fn node_of(r: &RecordedRequest) -> String {
    let p = prompt(r);
    ["api", "db", "cache"]
        .into_iter()
        .find(|n| p.starts_with(&format!("Summarise the {n} log")))
        .map(String::from)
        .unwrap_or_else(|| if p.starts_with("Report on:") { "report".into() } else { p })
}

fn answer(r: &RecordedRequest) -> Reply {
    let p = prompt(r);
    match node_of(r).as_str() {
        "report" => Reply::text(format!("REPORT[{}]", p.trim_start_matches("Report on: "))),
        node => Reply::text(format!("{node}: quiet night")),
    }
}

fn graph_args(server: &ModelServer, store: &str) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini", "--store", store, "--json"]
        .map(String::from)
        .to_vec()
}

/// A workspace with the survey blueprint and a model server on which `cache` hangs until the
/// flag is cleared (the runtime keeps the server alive).
fn survey_with_hanging_cache() -> (Env, tokio::runtime::Runtime, ModelServer, Arc<AtomicBool>) {
    let env = Env::new();
    std::fs::write(env.path("survey.toml"), SURVEY).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    let hang = Arc::new(AtomicBool::new(true));
    let hanging = hang.clone();
    server.respond_with(move |r| {
        if hanging.load(Ordering::SeqCst) && node_of(r) == "cache" {
            return Some(Reply::hang());
        }
        Some(answer(r))
    });
    (env, runtime, server, hang)
}

/// Kills a run while `cache` hangs (after `api` and `db` stored their writes), resumes it,
/// and compares with an uninterrupted run on another thread of the same store.
fn killed_run_resumes_without_rerunning_finished_nodes(store: &str, thread_prefix: &str) {
    let (env, _runtime, server, hang) = survey_with_hanging_cache();
    let thread = format!("{thread_prefix}-killed");
    let events = env.path("events.jsonl");
    let child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "run", "survey.toml", "--thread", &thread, "--input", r#"{"topic": "the outage"}"#])
        .args(["--events", s(&events)])
        .args(graph_args(&server, store))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("api and db to finish while cache hangs", Duration::from_secs(30), || {
        let finished = std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"graph_node_finished\""))
            .count();
        finished >= 2 && server.requests().iter().any(|r| node_of(r) == "cache")
    });
    signal(child.id(), "KILL");
    let killed = child.wait_with_output().unwrap();
    assert_eq!(killed.status.code(), None, "killed by a signal");
    let before = server.request_count();

    hang.store(false, Ordering::SeqCst);
    // The killed runner is seen dead: its lease is taken over at once.
    let resumed = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "resume", "--thread", &thread, "--wait"])
        .args(graph_args(&server, store))
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let after: Vec<String> = server.requests()[before..].iter().map(node_of).collect();
    assert_eq!(after, ["cache", "report"], "only the unfinished node and its successor ran");

    let whole = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "run", "survey.toml", "--thread", &format!("{thread_prefix}-whole")])
        .args(["--input", r#"{"topic": "the outage"}"#])
        .args(graph_args(&server, store))
        .output()
        .unwrap();
    assert_eq!(whole.status.code(), Some(0), "{}", String::from_utf8_lossy(&whole.stderr));
    let (resumed, whole) = (stdout_json(&resumed), stdout_json(&whole));
    assert_eq!(resumed["finish"], "done");
    assert_eq!(resumed["state"], whole["state"]);
    assert_eq!(resumed["state"]["report"], "REPORT[api: quiet night | db: quiet night | cache: quiet night]");
}

/// One runner per thread: while a run holds the thread, a second runner exits 2; after the
/// holder is SIGKILLed, `resume --wait` waits for its lease to expire, takes it over and
/// finishes the thread without re-running finished nodes.
fn a_second_runner_is_refused_and_a_dead_holders_lease_is_taken_over(store: &str, thread: &str) {
    let (env, _runtime, server, hang) = survey_with_hanging_cache();
    let child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "run", "survey.toml", "--thread", thread, "--input", r#"{"topic": "the outage"}"#])
        .args(graph_args(&server, store))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("cache to hang", Duration::from_secs(30), || server.requests().iter().any(|r| node_of(r) == "cache"));
    let second = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "resume", "--thread", thread])
        .args(graph_args(&server, store))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(String::from_utf8_lossy(&second.stderr).contains("is being run by another process"));

    signal(child.id(), "KILL");
    let mut child = child;
    child.wait().unwrap();
    let before = server.request_count();
    hang.store(false, Ordering::SeqCst);
    let taken_over = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "resume", "--thread", thread, "--wait"])
        .args(graph_args(&server, store))
        .output()
        .unwrap();
    assert_eq!(taken_over.status.code(), Some(0), "{}", String::from_utf8_lossy(&taken_over.stderr));
    let after: Vec<String> = server.requests()[before..].iter().map(node_of).collect();
    assert_eq!(after, ["cache", "report"], "only the unfinished node and its successor ran");
}

#[test]
fn one_runner_per_thread_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("graphs.db");
    a_second_runner_is_refused_and_a_dead_holders_lease_is_taken_over(s(&store), "leased");
}

#[test]
fn one_runner_per_thread_on_postgres() {
    let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
    let thread = format!("leased-{}", std::process::id());
    a_second_runner_is_refused_and_a_dead_holders_lease_is_taken_over(&url, &thread);
}

#[test]
fn a_graph_killed_mid_step_resumes_from_sqlite_without_rerunning_finished_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("graphs.db");
    killed_run_resumes_without_rerunning_finished_nodes(s(&store), "sqlite");
}

#[test]
fn a_graph_killed_mid_step_resumes_from_postgres_without_rerunning_finished_nodes() {
    let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
    let prefix = format!("pg-{}", uuid_like());
    killed_run_resumes_without_rerunning_finished_nodes(&url, &prefix);
}

fn uuid_like() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{t:x}-{}", std::process::id())
}

const APPROVAL: &str = include_str!("fixtures/graphs/approval.toml");

#[test]
fn an_approval_interrupts_with_status_16_and_resumes_with_a_value() {
    let env = Env::new();
    std::fs::write(env.path("approval.toml"), APPROVAL).unwrap();
    let script = env.script("s.json", json!(["A draft about tides.", "PUBLISHED: tides"]));
    let mock = ["--provider", "mock", "--mock-script", s(&script)];
    let out = env
        .cmd()
        .args(["graph", "run", "approval.toml", "--thread", "t1", "--input", r#"{"topic": "tides"}"#])
        .args(mock)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(16), "{stderr}");
    assert!(stderr.contains("Publish this draft? A draft about tides."), "{stderr}");
    assert!(stderr.contains("recursive graph resume --thread t1 --value JSON"), "{stderr}");
    assert!(env.path(".recursive/graphs.db").exists(), "the default store is under the workspace");

    // The thread knows its blueprint: resume needs no file, and the mock script continues.
    let script = env.script("s2.json", json!(["PUBLISHED: tides"]));
    let out = env
        .cmd()
        .args(["graph", "resume", "--thread", "t1", "--value", "yes", "--json"])
        .args(["--provider", "mock", "--mock-script", s(&script)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["state"]["answer"], "yes");
    assert_eq!(v["state"]["draft"], "PUBLISHED: tides");

    let history = env.run(&["graph", "history", "--thread", "t1", "--json"]);
    assert_eq!(history.status.code(), Some(0));
    let list: Value = serde_json::from_slice(&history.stdout).unwrap();
    let steps: Vec<u64> = list.as_array().unwrap().iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [3, 2, 1, 0]);
    let waiting = list.as_array().unwrap().iter().find(|c| c["next"] == json!(["approve"])).unwrap();

    // Time travel: the state where it waited, then a different answer from there.
    let state = env.run(&["graph", "state", "--thread", "t1", "--checkpoint", waiting["id"].as_str().unwrap()]);
    let state: Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(state["state"]["draft"], "A draft about tides.");
    // The step from there was answered: its write is kept with the checkpoint it started at.
    assert_eq!(state["pending_writes"][0]["node"], "approve");
    assert_eq!(state["pending_writes"][0]["write"]["update"]["answer"], "yes");
    let out = env
        .cmd()
        .args(["graph", "resume", "--thread", "t1", "--checkpoint", waiting["id"].as_str().unwrap()])
        .args(["--value", "\"no\"", "--json", "--provider", "mock", "--mock-script", s(&script)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["state"]["draft"], "A draft about tides.", "not published this time");

    // Fork with an edited draft to a new thread; it waits for approval of the new text.
    let out = env.run(&[
        "graph",
        "fork",
        "--thread",
        "t1",
        "--checkpoint",
        waiting["id"].as_str().unwrap(),
        "--set",
        r#"{"draft": "A better draft."}"#,
        "--into",
        "t2",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = env
        .cmd()
        .args(["graph", "resume", "--thread", "t2", "--provider", "mock", "--mock-script", s(&script)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(16));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Publish this draft? A better draft."));
    let bad = env.run(&["graph", "fork", "--thread", "t1", "--set", r#"{"draft": 3}"#]);
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
}

#[test]
fn check_reports_every_problem_with_a_caret_and_exits_2() {
    let env = Env::new();
    let broken = APPROVAL
        .replace("to = \"approve\"\n", "to = \"aprove\"\n")
        .replace("Write about {topic}.", "Write about {topik}.")
        .replace("ask = \"Publish", "model = \"gpt-9\"\nprompt = \"x\"\n#ask = \"Publish");
    std::fs::write(env.path("broken.toml"), &broken).unwrap();
    let out = env.run(&["graph", "check", "broken.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown node `aprove` in an edge"), "{stderr}");
    assert!(stderr.contains("reads unknown channel `topik`"), "{stderr}");
    assert!(stderr.contains("^"), "{stderr}");

    // Compiling is fine, but the model is not on the allowlist: bind fails before any call.
    let unbound = APPROVAL.replace("model = \"default\"\nprompt = \"Publish", "model = \"gpt-9\"\nprompt = \"Publish");
    std::fs::write(env.path("unbound.toml"), &unbound).unwrap();
    let out = env.run(&["graph", "check", "unbound.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("model `gpt-9` is not allowed"), "{stderr}");
    let out = env.run(&["graph", "run", "unbound.toml", "--provider", "mock"]);
    assert_eq!(out.status.code(), Some(2));

    std::fs::write(env.path("approval.toml"), APPROVAL).unwrap();
    let ok = env.run(&["graph", "check", "approval.toml"]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let show = env.run(&["graph", "show", "approval.toml"]);
    let mermaid = String::from_utf8_lossy(&show.stdout);
    assert!(mermaid.starts_with("flowchart TD"), "{mermaid}");
    assert!(mermaid.contains("n_approve -. otherwise .-> END"), "{mermaid}");
}

#[test]
fn a_sub_graph_next_to_the_blueprint_runs_with_namespaced_checkpoints() {
    let env = Env::new();
    std::fs::write(
        env.path("summarize.toml"),
        r#"
name = "summarize"
[state]
text = "string"
summary = "string"
[[nodes]]
name = "sum"
model = "default"
prompt = "Summarise: {text}"
output = "summary"
[[edges]]
from = "START"
to = "sum"
"#,
    )
    .unwrap();
    std::fs::write(
        env.path("outer.toml"),
        r#"
name = "outer"
[state]
doc = "string"
short = "string"
[[nodes]]
name = "shorten"
graph = "summarize"
map_in = { text = "doc" }
map_out = { short = "summary" }
[[edges]]
from = "START"
to = "shorten"
"#,
    )
    .unwrap();
    let script = env.script("s.json", json!(["Short."]));
    let out = env
        .cmd()
        .args(["graph", "run", "outer.toml", "--thread", "o", "--input", r#"{"doc": "A long doc."}"#, "--json"])
        .args(["--provider", "mock", "--mock-script", s(&script), "--events", "ev.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["state"]["short"], "Short.");
    let trace = env.run(&["trace", "ev.jsonl"]);
    let text = String::from_utf8_lossy(&trace.stdout);
    assert!(text.contains("graph node `shorten`"), "{text}");
    assert!(text.contains("model node `sum`"), "{text}");
}

#[test]
fn one_corrupt_thread_record_is_named_and_the_others_are_listed() {
    let env = Env::new();
    let store = env.path("graphs.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let sqlite = recursive_store::SqliteCheckpointer::open(&store).unwrap();
        for thread in ["first", "broken", "last"] {
            let info = recursive_store::ThreadInfo {
                thread: thread.into(),
                graph: "survey".into(),
                blueprint: None,
                origin: None,
                subgraphs: None,
                created_at: chrono::Utc::now(),
            };
            recursive_store::Checkpointer::put_thread(&sqlite, &info).await.unwrap();
        }
    });
    let raw = rusqlite::Connection::open(&store).unwrap();
    raw.execute("UPDATE graph_threads SET body = 'garbage' WHERE thread = 'broken'", []).unwrap();
    let out = env.run(&["graph", "threads", "--store", s(&store)]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.contains("first") && stdout.contains("last"), "{stdout}");
    assert!(stderr.contains("thread broken") && stderr.contains("unreadable"), "{stderr}");
}

const TICKER: &str = r#"
name = "ticker"
[limits]
max_visits = 2
[state]
said = "string"
[[nodes]]
name = "tick"
model = "default"
prompt = "Say again or stop"
output = "said"
[[edges]]
from = "START"
to = "tick"
[[edges]]
from = "tick"
to = "END"
when = { channel = "said", equals = "stop" }
[[edges]]
from = "tick"
to = "tick"
otherwise = true
"#;

#[test]
fn a_thread_stopped_on_its_limits_goes_on_with_raise_limits_and_a_fork_counts_afresh() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    let stop = Arc::new(AtomicBool::new(false));
    let told = stop.clone();
    server.respond_with(move |_| Some(Reply::text(if told.load(Ordering::SeqCst) { "stop" } else { "again" })));
    let blueprint = env.path("ticker.toml");
    std::fs::write(&blueprint, TICKER).unwrap();
    let store = env.path("graphs.db");
    let graph = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test").arg("graph").args(args).args(graph_args(&server, s(&store)));
        cmd.output().unwrap()
    };
    let calls = || server.requests().len();
    let out = graph(&["run", s(&blueprint), "--thread", "t1", "--input", "{}"]);
    assert_eq!(out.status.code(), Some(17), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(calls(), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--raise-limits"), "the way on is named");

    // A plain resume stops at the same limit without a model call; a fork counts afresh.
    assert_eq!(graph(&["resume", "--thread", "t1"]).status.code(), Some(17));
    assert_eq!(calls(), 2);
    let out = env.run(&["graph", "fork", "--thread", "t1", "--into", "t2", "--store", s(&store)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(graph(&["resume", "--thread", "t2"]).status.code(), Some(17));
    assert_eq!(calls(), 4, "the fork ran its own two visits");

    // Raised, the first thread goes on from where it stopped.
    stop.store(true, Ordering::SeqCst);
    let out = graph(&["resume", "--thread", "t1", "--raise-limits"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["state"]["said"], "stop");
    assert_eq!(calls(), 5);
}

const SUMMARIZE: &str = r#"
name = "summarize"
[state]
text = "string"
summary = "string"
[[nodes]]
name = "sum"
model = "default"
prompt = "Summarise: {text}"
output = "summary"
[[edges]]
from = "START"
to = "sum"
"#;

const PICKER: &str = r#"
name = "picker"
[state]
doc = "string"
short = "string"
[[nodes]]
name = "pick"
ask = "Which document?"
output = "doc"
[[nodes]]
name = "shorten"
graph = "summarize"
map_in = { text = "doc" }
map_out = { short = "summary" }
[[edges]]
from = "START"
to = "pick"
[[edges]]
from = "pick"
to = "shorten"
"#;

/// A workspace with the picker blueprint (a question, then the `summarize` sub-graph next to
/// it) and a model server that answers `S[<prompt>]`.
fn picker_workspace() -> (Env, tokio::runtime::Runtime, ModelServer) {
    let env = Env::new();
    std::fs::write(env.path("summarize.toml"), SUMMARIZE).unwrap();
    std::fs::write(env.path("picker.toml"), PICKER).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(|r| Some(Reply::text(format!("S[{}]", prompt(r)))));
    (env, runtime, server)
}

/// `graph` with the scripted server and `store`; returns the output.
fn graph_cmd(env: &Env, server: &ModelServer, store: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = env.cmd();
    cmd.env("OPENAI_API_KEY", "sk-test").arg("graph").args(args).args(graph_args(server, store));
    cmd.output().unwrap()
}

/// The id of the newest top-level checkpoint of `thread` whose next nodes are `next`.
fn checkpoint_before(env: &Env, store: &str, thread: &str, next: &str) -> String {
    let out = env.run(&["graph", "history", "--thread", thread, "--store", store, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list = stdout_json(&out);
    let found = list.as_array().unwrap().iter().find(|c| c["next"] == json!([next])).cloned();
    found.unwrap_or_else(|| panic!("no checkpoint before {next}: {list}"))["id"].as_str().unwrap().to_string()
}

/// Time travel and a fork into the same thread from before a sub-graph run it again on its new
/// input: each is one more model call at the server, and the result follows the new input.
fn time_travel_reruns_a_sub_graph_on_its_new_input(store: &str, thread: &str) {
    let (env, _runtime, server) = picker_workspace();
    let graph = |args: &[&str]| graph_cmd(&env, &server, store, args);
    let short = |out: &std::process::Output| {
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        stdout_json(out)["state"]["short"].as_str().unwrap().to_string()
    };
    assert_eq!(graph(&["run", "picker.toml", "--thread", thread, "--input", "{}"]).status.code(), Some(16));
    assert_eq!(short(&graph(&["resume", "--thread", thread, "--value", "tides"])), "S[Summarise: tides]");
    assert_eq!(server.request_count(), 1);

    // `resume --checkpoint` back to the question, answered differently.
    let asked = checkpoint_before(&env, store, thread, "pick");
    let out = graph(&["resume", "--thread", thread, "--checkpoint", &asked, "--value", "waves"]);
    assert_eq!(short(&out), "S[Summarise: waves]");
    assert_eq!(server.request_count(), 2, "the sub-graph called the model again");

    // `fork --into` the same thread before the sub-graph, with the input edited.
    let before = checkpoint_before(&env, store, thread, "shorten");
    let fork = ["graph", "fork", "--thread", thread, "--checkpoint", &before, "--into", thread];
    let out = env.run(&[&fork[..], &["--set", r#"{"doc": "dunes"}"#, "--store", store]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(short(&graph(&["resume", "--thread", thread])), "S[Summarise: dunes]");
    assert_eq!(server.request_count(), 3, "the sub-graph called the model again");
    let prompts: Vec<String> = server.requests().iter().map(prompt).collect();
    assert_eq!(prompts, ["Summarise: tides", "Summarise: waves", "Summarise: dunes"]);
}

#[test]
fn time_travel_before_a_sub_graph_reruns_it_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    time_travel_reruns_a_sub_graph_on_its_new_input(s(&dir.path().join("graphs.db")), "travel");
}

#[test]
fn time_travel_before_a_sub_graph_reruns_it_on_postgres() {
    let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
    time_travel_reruns_a_sub_graph_on_its_new_input(&url, &format!("travel-{}", uuid_like()));
}

#[test]
fn a_running_thread_keeps_its_sub_graphs_when_their_file_is_edited_or_moved() {
    let (env, _runtime, server) = picker_workspace();
    let store = env.path("graphs.db");
    let graph = |args: &[&str]| graph_cmd(&env, &server, s(&store), args);
    assert_eq!(graph(&["run", "picker.toml", "--thread", "before", "--input", "{}"]).status.code(), Some(16));
    // Edited after the first thread started: a new thread runs the edit.
    std::fs::write(env.path("summarize.toml"), SUMMARIZE.replace("Summarise:", "Condense:")).unwrap();
    assert_eq!(graph(&["run", "picker.toml", "--thread", "after", "--input", "{}"]).status.code(), Some(16));
    // Then moved away: neither running thread needs the file.
    std::fs::create_dir(env.path("old")).unwrap();
    std::fs::rename(env.path("summarize.toml"), env.path("old/summarize.toml")).unwrap();
    for (thread, want) in [("before", "S[Summarise: tides]"), ("after", "S[Condense: tides]")] {
        let out = graph(&["resume", "--thread", thread, "--value", "tides"]);
        assert_eq!(out.status.code(), Some(0), "{thread}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout_json(&out)["state"]["short"], want, "{thread}");
    }
    // A new thread reads the files as they are now: the sub-graph is gone.
    let out = graph(&["run", "picker.toml", "--thread", "later", "--input", "{}"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

//! Durable RLM runs: an RLM SIGKILLed while waiting for the reply of iteration 3 of 4 resumes
//! with `rlm --resume RUN` at iteration 3 — a variable set in iteration 1 and a sub-call's
//! answer from iteration 2 still in the REPL — and no earlier model call is made again (counted
//! at a scripted OpenAI-compatible server on 127.0.0.1), on both backends; resuming it while it
//! still runs is refused, and right after the kill it is not (its holder is seen dead).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::BufRead;
use std::process::Stdio;
use std::time::Duration;

use common::{Env, stdout_json};
use recursive_testkit::{ModelServer, Reply};

const FIRST: &str = "Setting up.\n```python\nx = 41\nprint('x is set')\n```";
const SECOND: &str = "Asking.\n```python\ny = llm_query('the sub question')['result']\nprint('got', y)\n```";
const THIRD: &str = "```python\nsubmit(f'{x + 1} {y}')\n```";

fn provider(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

fn killed_after_two_iterations_then_resumed(backend: &[&str]) {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start_with([Reply::text(FIRST), Reply::text(SECOND), Reply::hang()]));
    server.when("the sub question", Reply::text("SUB-ANSWER"));
    let mut args = vec!["rlm", "what is x + 1?", "--input", "notes.txt", "--max-iterations", "4"];
    args.extend_from_slice(backend);
    let mut child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(&args)
        .args(provider(&server))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let key = loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).expect("the run names its checkpoints");
        if let Some(rest) = line.strip_prefix("checkpointed as ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Iteration 3's model call is in flight (the server never answers it): kill the run there.
    common::wait_for("the third primary call", Duration::from_secs(60), || server.request_count() >= 4);
    // One runner per run: resuming it while it runs is refused.
    let mut second = env.cmd();
    second.env("OPENAI_API_KEY", "sk-test").args(["rlm", "--resume", &key]).args(backend).args(provider(&server));
    let second = second.output().unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(String::from_utf8_lossy(&second.stderr).contains("is being run by another process"));
    child.kill().unwrap();
    child.wait().unwrap();
    let before = server.request_count();

    server.push(Reply::text(THIRD));
    let resume = || {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test").args(["rlm", "--resume", &key, "--json"]).args(backend);
        cmd.args(provider(&server)).output().unwrap()
    };
    let out = resume();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result = stdout_json(&out);
    assert_eq!(result["output"]["answer"], "42 SUB-ANSWER", "{result}");
    assert_eq!(result["iterations"], 3);
    assert_eq!(result["run"], key.as_str());
    let requests = server.requests();
    assert_eq!(requests.len(), before + 1, "only iteration 3 is asked again");
    let subs = requests.iter().filter(|r| r.body.to_string().contains("the sub question\"")).count();
    assert_eq!(subs, 1, "the sub-call is answered from the checkpoint");
    // The resumed call continues the conversation of the first two iterations.
    let last = requests.last().unwrap().body.to_string();
    assert!(last.contains("x is set") && last.contains("got SUB-ANSWER"), "{last}");

    // A finished run resumed again answers at once.
    let again = resume();
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(stdout_json(&again)["output"]["answer"], "42 SUB-ANSWER");
    assert_eq!(server.request_count(), before + 1, "no model call for a finished run");
}

#[test]
fn a_killed_rlm_resumes_with_its_variables_and_no_repeated_call_on_monty() {
    killed_after_two_iterations_then_resumed(&[]);
}

#[test]
fn a_killed_rlm_resumes_with_its_variables_and_no_repeated_call_on_cpython() {
    let Some(python) = recursive_testkit::require_env("RLM_TEST_PYTHON") else { return };
    let python: &'static str = Box::leak(python.into_boxed_str());
    killed_after_two_iterations_then_resumed(&["--sandbox", "cpython", "--python", python]);
}

#[test]
fn resuming_an_unknown_run_is_a_usage_error() {
    let env = Env::new();
    let out = env.cmd().args(["rlm", "--resume", "rlm-nope", "--provider", "mock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no checkpointed run `rlm-nope`"));
}

const READ_GRAPH: &str = r#"name = "read"
[state]
doc = "string"
answer = "string"

[[nodes]]
name = "reader"
rlm = "reader"
question = "what is x + 1?"
inputs = ["doc"]
output = "answer"

[[edges]]
from = "START"
to = "reader"
"#;

#[test]
fn an_rlm_node_of_a_graph_killed_mid_run_resumes_from_its_checkpoint() {
    let env = Env::new();
    std::fs::write(env.path("read.toml"), READ_GRAPH).unwrap();
    std::fs::write(env.path("reader.toml"), "kind = \"rlm\"\nmax_iterations = 4\n").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start_with([Reply::text(FIRST), Reply::text(SECOND), Reply::hang()]));
    server.when("the sub question", Reply::text("SUB-ANSWER"));
    let store = env.path("graphs.db");
    let graph = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test")
            .arg("graph")
            .args(args)
            .args(["--agent", "reader=reader.toml", "--store", store.to_str().unwrap(), "--json"])
            .args(provider(&server));
        cmd
    };
    let mut child = graph(&["run", "read.toml", "--thread", "t1", "--input", r#"{"doc": "some text"}"#])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("the third primary call", Duration::from_secs(60), || server.request_count() >= 4);
    child.kill().unwrap();
    child.wait().unwrap();
    let before = server.request_count();

    server.push(Reply::text(THIRD));
    // The killed runner is seen dead: the thread's lease is taken over at once.
    let out = graph(&["resume", "--thread", "t1", "--wait"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result = stdout_json(&out);
    assert_eq!(result["state"]["answer"], "42 SUB-ANSWER", "{result}");
    assert_eq!(server.request_count(), before + 1, "only the RLM's third iteration is asked again");
}

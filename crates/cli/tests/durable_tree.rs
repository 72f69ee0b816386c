#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A mixed run tree killed anywhere resumes where it was: `recursive run` drives an agent that
//! calls an RLM as a tool, whose snippet calls an agent, `llm_query` and a goal pursuit, which
//! delegates to a graph whose node asks a model. The tree is killed with SIGKILL while a call
//! is in flight at three depths (the RLM's `llm_query`, the graph node inside the goal, the top
//! agent's last call), resumed each time with `run --resume ID`, and ends with the answer of an
//! uninterrupted run. Against a scripted OpenAI-compatible server on 127.0.0.1 that reports
//! usage: no call that had been answered is sent again (only the three in flight at a kill are),
//! and the spend reported equals what the server priced plus the holds of the calls in flight
//! at the kills.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Env, s, signal, stdout_json, wait_for};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

/// Usage of every answered call: 2,000 tokens in and 4,000 out, at gpt-4o-mini's price.
const PER_CALL: f64 = 2000.0 * 0.15e-6 + 4000.0 * 0.6e-6;

const SNIPPET: &str = "```repl\ncolor = helper('name a color')\nnumber = llm_query('name a number')\n\
plan = planner('plan the launch')\nsubmit('|'.join([str(color), str(number), str(plan)]))\n```";

/// The text of the messages of `role`, joined.
fn texts(r: &RecordedRequest, role: &str) -> String {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let of_role = messages.iter().filter(|m| m["role"] == role).filter_map(|m| m["content"].as_str());
    of_role.collect::<Vec<_>>().join("\n")
}

/// Which call of the tree a request is, and its answer.
fn answer(r: &RecordedRequest) -> Option<(&'static str, Reply)> {
    let (step, _) = common::goal_phase(r);
    let structured = |v: Value| Reply::text(v.to_string());
    let reply = match step.as_str() {
        "assess" => (
            "goal:assess",
            structured(json!({
                "reasoning": "one hand-off", "executable": true, "why_decompose": "",
                "action": {"type": "delegate", "target": "flow", "input": "the launch"}
            })),
        ),
        "check" => (
            "goal:check",
            structured(json!({"reasoning": "done", "achieved": true, "confidence": 0.9, "remaining_gaps": []})),
        ),
        "synthesize" => (
            "goal:synthesize",
            structured(json!({
                "summary": "go at dawn", "key_findings": [], "confidence": 0.9, "limitations": [], "contradictions": []
            })),
        ),
        "" => {
            let user = texts(r, "user");
            let last_is_tool = r.body["messages"].as_array()?.last()?["role"] == "tool";
            if user.contains("Report on the launch") && last_is_tool {
                let result = r.body["messages"].as_array()?.last()?["content"].as_str()?.to_string();
                ("main:final", Reply::text(format!("Report: {result}")))
            } else if user.contains("Report on the launch") {
                ("main:call", Reply::tool_call("analyst", json!({"input": "Investigate the launch"})))
            } else if user.contains("name a color") {
                ("helper", Reply::text("teal"))
            } else if user.contains("name a number") {
                ("llm_query", Reply::text("42"))
            } else if user.contains("Draft the plan for") {
                ("graph:node", Reply::text("go at dawn"))
            } else if user.contains("Investigate the launch") {
                ("rlm:root", Reply::text(SNIPPET))
            } else {
                return None;
            }
        }
        _ => return None,
    };
    Some((reply.0, reply.1.with_usage(2000, 4000)))
}

/// A server answering the tree, counting each call's requests; the first request of each call
/// named in `hang` hangs (a call in flight when the process is killed).
struct Tree {
    server: ModelServer,
    seen: Arc<Mutex<BTreeMap<&'static str, usize>>>,
    answered: Arc<Mutex<usize>>,
    _runtime: tokio::runtime::Runtime,
}

impl Tree {
    fn start(hang: &'static [&'static str]) -> Tree {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let server = runtime.block_on(ModelServer::start());
        let seen: Arc<Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
        let answered = Arc::new(Mutex::new(0));
        let (counts, replies) = (seen.clone(), answered.clone());
        server.respond_with(move |r| {
            let (label, reply) = answer(r)?;
            let mut counts = counts.lock().unwrap();
            let n = counts.entry(label).or_default();
            *n += 1;
            if hang.contains(&label) && *n == 1 {
                return Some(Reply::hang());
            }
            *replies.lock().unwrap() += 1;
            Some(reply)
        });
        Tree { server, seen, answered, _runtime: runtime }
    }

    fn requests_of(&self, label: &str) -> usize {
        self.seen.lock().unwrap().get(label).copied().unwrap_or(0)
    }
}

fn files(env: &Env) -> Vec<String> {
    let write = |name: &str, text: &str| {
        std::fs::write(env.path(name), text).unwrap();
        format!("{}={}", name.trim_end_matches(".toml"), s(&env.path(name)))
    };
    std::fs::write(
        env.path("flow-graph.toml"),
        "name = \"flow\"\n[state]\ninput = \"string\"\noutput = \"string\"\n[[nodes]]\nname = \"draft\"\n\
         model = \"default\"\nprompt = \"Draft the plan for {input}\"\noutput = \"output\"\n[[edges]]\n\
         from = \"START\"\nto = \"draft\"\n",
    )
    .unwrap();
    let mut agents = Vec::new();
    for (name, text) in [
        ("helper.toml", "description = \"Answers questions.\"\n"),
        ("flow.toml", "kind = \"graph\"\ndescription = \"Drafts plans.\"\nblueprint = \"flow-graph.toml\"\n"),
        ("planner.toml", "kind = \"goal\"\ndescription = \"Plans.\"\nmax_goals = 3\n"),
        ("analyst.toml", "kind = \"rlm\"\ndescription = \"Investigates.\"\nmax_iterations = 3\n"),
    ] {
        agents.push("--agent".to_string());
        agents.push(write(name, text));
    }
    agents
}

fn run(env: &Env, tree: &Tree, args: &[&str]) -> Command {
    let mut cmd = env.cmd();
    cmd.env("OPENAI_API_KEY", "sk-test")
        .arg("run")
        .args(args)
        .args(files(env))
        .args(["--provider", "openai", "--base-url", &tree.server.openai_url(), "--model", "gpt-4o-mini"])
        .args(["--max-cost", "1", "--json", "--no-tools", "--yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `cmd` until the call `label` hangs, then kills it with SIGKILL.
fn kill_at(tree: &Tree, mut cmd: Command, label: &str) {
    let mut child = cmd.spawn().unwrap();
    let mut ended = false;
    wait_for(&format!("the call {label} to hang"), Duration::from_secs(60), || {
        ended = child.try_wait().unwrap().is_some();
        ended || tree.requests_of(label) > 0
    });
    if ended {
        let out = child.wait_with_output().unwrap();
        panic!("ended before {label}: {}\n{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    }
    signal(child.id(), "KILL");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), None, "killed by a signal: {}", stderr(&out));
}

fn only_session(env: &Env) -> String {
    let list: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    list[0]["id"].as_str().unwrap().to_string()
}

/// The calls that held but never settled in the session's journal (in the user's run store):
/// their held USD.
fn unsettled(env: &Env, session: &str) -> Vec<f64> {
    let store = env.path(".local/share/recursive/runs.db");
    common::unsettled_holds(&common::store_journal(&store, &format!("session-{session}")))
}

#[test]
fn a_mixed_tree_killed_at_three_depths_resumes_to_the_uninterrupted_answer_without_resending_answered_calls() {
    let whole_env = Env::new();
    let whole_tree = Tree::start(&[]);
    let whole = run(&whole_env, &whole_tree, &["Report on the launch"]).output().unwrap();
    assert_eq!(whole.status.code(), Some(0), "{}", stderr(&whole));
    let expected = stdout_json(&whole)["output"].as_str().unwrap().to_string();
    let calls = whole_tree.seen.lock().unwrap().clone();
    for part in ["Report: teal|", "42", "|go at dawn"] {
        assert!(expected.contains(part), "the tree answers through every level: {expected} ({calls:?})");
    }
    assert!(calls.values().all(|n| *n == 1), "each call once: {calls:?}");

    let env = Env::new();
    let hung = ["llm_query", "graph:node", "main:final"];
    let tree = Tree::start(&["llm_query", "graph:node", "main:final"]);
    kill_at(&tree, run(&env, &tree, &["Report on the launch"]), hung[0]);
    let session = only_session(&env);
    kill_at(&tree, run(&env, &tree, &["--resume", &session]), hung[1]);
    kill_at(&tree, run(&env, &tree, &["--resume", &session]), hung[2]);
    let last = run(&env, &tree, &["--resume", &session]).output().unwrap();

    assert_eq!(last.status.code(), Some(0), "{}", stderr(&last));
    let v = stdout_json(&last);
    assert_eq!(v["output"], expected, "the same answer as the uninterrupted run");
    let seen = tree.seen.lock().unwrap().clone();
    for (label, n) in &seen {
        let want = if hung.contains(label) { 2 } else { 1 };
        assert_eq!(*n, want, "{label} was sent {n} time(s): only a call in flight at a kill repeats ({seen:?})");
    }
    assert_eq!(seen.keys().collect::<Vec<_>>(), calls.keys().collect::<Vec<_>>(), "the same calls as the whole run");
    let in_flight = unsettled(&env, &session);
    assert_eq!(in_flight.len(), hung.len(), "the calls in flight at the kills stay held: {in_flight:?}");
    let served = *tree.answered.lock().unwrap() as f64 * PER_CALL;
    let held: f64 = in_flight.iter().sum();
    let reported = v["cost_usd"].as_f64().unwrap_or_else(|| panic!("no cost in {v}"));
    assert!(
        (reported - (served + held)).abs() < 1e-9,
        "reported ${reported}: the server priced ${served} of answered calls, ${held} was in flight at the kills"
    );
}

#[test]
fn a_chat_turn_killed_mid_call_leaves_its_spend_in_the_session_it_resumes() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(|r| match r.index {
        0 => Some(Reply::hang()),
        _ => Some(Reply::text("two").with_usage(2000, 4000)),
    });
    let chat = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test")
            .arg("chat")
            .args(args)
            .args(["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini", "-q"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let mut first = chat(&[]);
    let mut stdin = first.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"one\n").unwrap();
    wait_for("the first turn's call", Duration::from_secs(30), || server.request_count() > 0);
    signal(first.id(), "KILL");
    assert_eq!(first.wait().unwrap().code(), None);
    let session = only_session(&env);
    let held: f64 = unsettled(&env, &session).iter().sum();
    assert!(held > 0.0, "the call in flight held its estimate");

    let mut second = chat(&["--resume", &session]);
    std::io::Write::write_all(&mut second.stdin.take().unwrap(), b"two\n/cost\n").unwrap();
    let out = second.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    let cost = list[0]["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (held + PER_CALL)).abs() < 1e-9,
        "the session counts ${cost}: ${held} held by the killed turn + ${PER_CALL}"
    );
}

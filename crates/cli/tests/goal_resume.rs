#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Goal pursuit across processes, against a scripted model server on 127.0.0.1 that answers
//! by phase and goal (read from each request's system and user messages): a pursuit killed
//! with SIGKILL in the middle resumes from its log (kept in the run store: its JSONL file, an
//! export, may even be gone) without asking the model about any goal it had finished, and ends with the tree an uninterrupted run gives; a recorded pursuit whose
//! sub-goals ran concurrently (finishing in another order than planned) replays offline to the
//! same tree.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Env, s, signal, stdout_json, wait_for};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

const OBJECTIVE: &str = "Survey the three service logs";
const SUBS: [&str; 3] = ["Read the api log", "Read the db log", "Read the cache log"];

fn provider_args(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

fn phase(r: &RecordedRequest) -> (String, String) {
    common::goal_phase(r)
}

/// The scripted model: the objective splits into the three reads, each read is one analysis,
/// the final check says achieved, the synthesis merges.
fn answer(r: &RecordedRequest) -> Option<Reply> {
    let (step, goal) = phase(r);
    let user = r.body["messages"].to_string();
    let reply = match step.as_str() {
        "assess" if goal == OBJECTIVE => json!({
            "reasoning": "three logs", "executable": false, "action": null, "why_decompose": "three separate logs"
        }),
        "assess" => json!({
            "reasoning": "one look", "executable": true,
            "action": {"type": "analyze", "target": "", "input": "look at it"}, "why_decompose": ""
        }),
        "decompose" => json!({
            "reasoning": "one per log",
            "sub_goals": SUBS.iter().map(|g| json!({
                "goal": g, "rationale": "needed", "depends_on": [], "complexity": "atomic"
            })).collect::<Vec<_>>(),
            "coverage": "every log"
        }),
        "check" => {
            let last = user.contains("(none: every planned sub-goal has run)");
            json!({
                "reasoning": "judged", "achieved": last, "confidence": 0.9,
                "remaining_gaps": if last { json!([]) } else { json!(["the other logs"]) }
            })
        }
        "synthesize" => json!({
            "summary": format!("summary of {goal}"), "key_findings": ["all three read"], "confidence": 0.8,
            "limitations": [], "contradictions": []
        }),
        "action:analyze" => return Some(Reply::text(format!("findings of {goal}"))),
        _ => return None,
    };
    Some(Reply::text(reply.to_string()))
}

/// The tree's shape and results: `(id, goal, status, summary)` depth first.
fn tree(v: &Value) -> Vec<(String, String, String, String)> {
    let mut out = vec![(
        v["goal_id"].as_str().unwrap_or("").to_string(),
        v["goal"].as_str().unwrap_or("").to_string(),
        v["status"].as_str().unwrap_or("").to_string(),
        v["result"]["summary"].as_str().unwrap_or("").to_string(),
    )];
    for c in v["children"].as_array().into_iter().flatten() {
        out.extend(tree(c));
    }
    out
}

#[test]
fn a_pursuit_killed_mid_way_resumes_without_repeating_a_finished_goal() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    // In the first process the third read hangs, so the process is killed while it waits.
    let hang = Arc::new(AtomicBool::new(true));
    let hanging = hang.clone();
    server.respond_with(move |r| {
        let (step, goal) = phase(r);
        if hanging.load(Ordering::SeqCst) && step == "assess" && goal == SUBS[2] {
            return Some(Reply::hang());
        }
        answer(r)
    });
    let log = env.path("survey.jsonl");
    let goal_args = |extra: &[&str]| {
        let mut a: Vec<String> = vec!["goal".into()];
        a.extend(extra.iter().map(|x| x.to_string()));
        a.extend(["--layer-concurrency", "1", "--json"].map(String::from));
        a.extend(provider_args(&server));
        a
    };

    let child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(goal_args(&[OBJECTIVE, "--log", s(&log)]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the third read to be asked about", Duration::from_secs(30), || {
        server.requests().iter().any(|r| phase(r) == ("assess".into(), SUBS[2].into()))
    });
    signal(child.id(), "KILL");
    let killed = child.wait_with_output().unwrap();
    assert_eq!(killed.status.code(), None, "killed by a signal");
    let before = server.request_count();
    let asked_before: Vec<(String, String)> = server.requests().iter().map(phase).collect();
    assert!(asked_before.contains(&("action:analyze".into(), SUBS[1].into())), "{asked_before:?}");

    // The log is kept in the run store; the file is its export: the resume reads the store.
    std::fs::rename(&log, env.path("survey.before.jsonl")).unwrap();
    hang.store(false, Ordering::SeqCst);
    let resumed = env.cmd().env("OPENAI_API_KEY", "sk-test").args(goal_args(&["--resume", s(&log)])).output().unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let asked_after: Vec<(String, String)> = server.requests()[before..].iter().map(phase).collect();
    for finished in [SUBS[0], SUBS[1]] {
        assert!(!asked_after.iter().any(|(_, g)| g == finished), "{finished} was asked about again: {asked_after:?}");
    }
    for (step, goal) in [("assess", OBJECTIVE), ("decompose", OBJECTIVE)] {
        assert!(
            !asked_after.contains(&(step.into(), goal.into())),
            "the recorded {step} was reused, not asked again: {asked_after:?}"
        );
    }
    assert!(asked_after.contains(&("action:analyze".into(), SUBS[2].into())), "{asked_after:?}");
    let events = common::events(&log);
    let restored: Vec<&str> =
        events.iter().filter(|e| e["event"] == "resumed").filter_map(|e| e["goal_id"].as_str()).collect();
    assert_eq!(restored, ["1.1", "1.2"]);

    // The same pursuit without the interruption ends with the same tree.
    let whole = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(goal_args(&[OBJECTIVE, "--log", s(&env.path("whole.jsonl"))]))
        .output()
        .unwrap();
    assert_eq!(whole.status.code(), Some(0), "{}", String::from_utf8_lossy(&whole.stderr));
    let (resumed, whole) = (stdout_json(&resumed), stdout_json(&whole));
    assert_eq!(tree(&resumed), tree(&whole));
    assert_eq!(resumed["status"], "achieved");
}

#[test]
fn a_recorded_pursuit_with_concurrent_sub_goals_replays_offline_to_the_same_tree() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    // Later reads answer sooner, so the concurrent sub-goals finish in reverse plan order.
    server.respond_with(|r| {
        let (_, goal) = phase(r);
        let delay = match SUBS.iter().position(|g| *g == goal) {
            Some(i) => 600 - 300 * i as u64,
            None => 0,
        };
        answer(r).map(|reply| reply.after(Duration::from_millis(delay)))
    });
    let cassette = env.path("survey.cassette.jsonl");
    let recorded = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["goal", OBJECTIVE, "--json", "--record", s(&cassette)])
        .args(provider_args(&server))
        .output()
        .unwrap();
    assert_eq!(recorded.status.code(), Some(0), "{}", String::from_utf8_lossy(&recorded.stderr));
    // The cassette holds the analyses in the order they finished: not the plan's.
    let analysed: Vec<String> = common::events(&cassette)
        .iter()
        .filter_map(|i| {
            let messages = i["request"]["messages"].as_array()?;
            let system = messages.iter().find(|m| m["role"] == "system")?["content"].as_str()?;
            let user = messages.iter().find(|m| m["role"] == "user")?["content"].as_str()?;
            system
                .starts_with("Action: analyze")
                .then(|| user.lines().find_map(|l| l.strip_prefix("Current goal: ")))?
        })
        .map(str::to_string)
        .collect();
    assert_eq!(analysed, [SUBS[2], SUBS[1], SUBS[0]], "the sub-goals ran concurrently");

    let replayed = env.cmd().args(["goal", OBJECTIVE, "--json", "--replay", s(&cassette)]).output().unwrap();
    assert_eq!(replayed.status.code(), Some(0), "{}", String::from_utf8_lossy(&replayed.stderr));
    assert_eq!(tree(&stdout_json(&replayed)), tree(&stdout_json(&recorded)));
}

#[test]
fn a_pursuit_being_run_is_not_resumed_by_a_second_process() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(|_| Some(Reply::hang()));
    let log = env.path("survey.jsonl");
    let goal = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test").arg("goal").args(args).args(provider_args(&server));
        cmd
    };
    let mut first = goal(&[OBJECTIVE, "--log", s(&log)]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for("the first pursuit's first call", Duration::from_secs(30), || server.request_count() > 0);
    let log_before = std::fs::read_to_string(&log).unwrap();
    let second = goal(&["--resume", s(&log)]).output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is being run by another process"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), log_before, "the second process left the log alone");
    assert_eq!(server.request_count(), 1, "and asked the model nothing");
    signal(first.id(), "KILL");
    first.wait().unwrap();
    let third = goal(&["--resume", s(&log), "--max-cost", "0.000001"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&third.stderr).contains("another process"),
        "a killed runner's lock is taken over at once: {}",
        String::from_utf8_lossy(&third.stderr)
    );
}

#[test]
fn a_new_pursuit_on_a_reused_log_path_starts_afresh_however_the_path_is_spelled() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(answer);
    std::fs::create_dir_all(env.path("logs")).unwrap();
    let goal = |log: &str| {
        let out = env
            .cmd()
            .env("OPENAI_API_KEY", "sk-test")
            .args(["goal", OBJECTIVE, "--log", log, "--layer-concurrency", "1", "--json"])
            .args(provider_args(&server))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        stdout_json(&out)
    };
    let first = goal("logs/g.jsonl");
    let asked = server.request_count();
    std::fs::remove_file(env.path("logs/g.jsonl")).unwrap();
    // The same file, spelled another way: a new pursuit, asked anew and priced anew.
    let again = goal("./logs/../logs/g.jsonl");
    assert_eq!(server.request_count(), 2 * asked, "no call of the earlier pursuit answers the new one");
    assert_eq!(tree(&first), tree(&again));
    assert!(first["cost_usd"].as_f64().is_some(), "{first}");
    assert_eq!(first["cost_usd"], again["cost_usd"], "none of the earlier pursuit's spend counts: {again}");
}

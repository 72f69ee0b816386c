#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Spend written ahead, and records cut by a kill, across processes, against a scripted
//! OpenAI-compatible server on 127.0.0.1 that reports usage (so costs are real): a `goal` killed
//! with SIGKILL twice while a call is in flight, then resumed under `--max-cost`, spends within
//! the cap plus one call over all three processes and reports what the server's usage priced at
//! the model's price adds up to (plus the calls in flight at the kills, at their hold); a goal
//! log, a spend ledger and a session transcript whose last line a kill cut resume with a
//! warning naming the file and what was dropped, while a damaged line before the last stays an
//! error with its line number.

mod common;

use std::io::Write;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Env, s, signal, stdout_json, wait_for};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::Value;

const OBJECTIVE: &str = common::SIXTEEN_REGIONS;

/// Usage of every answered call: 2,000 tokens in and 4,000 out, at gpt-4o-mini's price
/// ($0.15 and $0.60 per million).
const PER_CALL: f64 = 2000.0 * 0.15e-6 + 4000.0 * 0.6e-6;

fn provider_args(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

/// The scripted pursuit: the objective splits into sixteen regions, each assessed and analysed
/// in one call each, a check after each; every answer reports [`PER_CALL`]'s usage.
fn answer(r: &RecordedRequest) -> Option<Reply> {
    common::sixteen_regions(r)
}

/// The calls of a pursuit's journal (in the user's run store, keyed by its log) that hold but
/// never settled: their held USD.
fn unsettled_holds(env: &Env, log: &std::path::Path) -> Vec<f64> {
    let store = env.path(".local/share/recursive/runs.db");
    common::unsettled_holds(&common::store_journal(&store, &format!("goal-{}", log.display())))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_goal_killed_twice_mid_call_and_resumed_stays_within_its_cap_and_reports_every_processs_spend() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    // The 7th and the 14th request hang: each process is killed while one call is in flight.
    let hangs = [6, 13];
    let answered = Arc::new(AtomicUsize::new(0));
    let counted = answered.clone();
    server.respond_with(move |r| {
        if hangs.contains(&r.index) {
            return Some(Reply::hang());
        }
        let reply = answer(r);
        if reply.is_some() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        reply
    });
    let cap = 0.05;
    let log = env.path("survey.jsonl");
    let goal = |extra: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test")
            .arg("goal")
            .args(extra)
            .args(["--max-cost", &cap.to_string(), "--layer-concurrency", "1", "--json"])
            .args(provider_args(&server))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let kill_at = |mut cmd: std::process::Command, hang: usize| {
        let child = cmd.spawn().unwrap();
        wait_for(&format!("request #{hang} to hang"), Duration::from_secs(60), || server.request_count() > hang);
        signal(child.id(), "KILL");
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), None, "killed by a signal: {}", stderr(&out));
    };

    kill_at(goal(&[OBJECTIVE, "--log", s(&log)]), hangs[0]);
    // The kill also cut the log's last write short.
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(br#"{"timestamp":"2026-0"#).unwrap();
    kill_at(goal(&["--resume", s(&log)]), hangs[1]);
    let third = goal(&["--resume", s(&log)]).output().unwrap();

    let err = stderr(&third);
    let v = stdout_json(&third);
    assert_eq!(third.status.code(), Some(13), "not achieved: {err}");
    assert!(v["reason"].as_str().unwrap_or("").starts_with("max_cost: "), "stopped by its USD budget: {v}");
    let reported = v["cost_usd"].as_f64().unwrap_or_else(|| panic!("no cost in {v}"));
    let in_flight = unsettled_holds(&env, &log);
    assert_eq!(in_flight.len(), hangs.len(), "the calls in flight at the kills hold, unsettled: {in_flight:?}");
    let served = answered.load(Ordering::SeqCst) as f64 * PER_CALL;
    let held: f64 = in_flight.iter().sum();
    assert!(
        (reported - (served + held)).abs() < 1e-6,
        "reported ${reported}: the server priced ${served} of answered calls, ${held} was in flight at the kills"
    );
    let one_call = in_flight.iter().copied().fold(PER_CALL, f64::max);
    assert!(reported <= cap + one_call + 1e-9, "${reported} over all three processes, cap ${cap}");
    assert!(served <= cap + PER_CALL + 1e-9, "the server priced ${served} over all three processes, cap ${cap}");
    assert!(reported >= cap - one_call, "the cap was used, not starved: ${reported}");
}

#[test]
fn a_goal_log_cut_by_a_kill_and_an_older_versions_cut_ledger_resume_with_warnings_naming_what_was_dropped() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    // The 7th request (the second region's analysis) hangs: the process is killed there.
    server.respond_with(|r| if r.index == 6 { Some(Reply::hang()) } else { answer(r) });
    let log = env.path("g.jsonl");
    let ledger = env.path("g.spend.jsonl");
    let goal = |extra: &[&str]| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test")
            .arg("goal")
            .args(extra)
            .args(["--max-cost", "0.03", "--layer-concurrency", "1", "--json"])
            .args(provider_args(&server));
        cmd
    };
    let child = goal(&[OBJECTIVE, "--log", s(&log)]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for("request #6 to hang", Duration::from_secs(60), || server.request_count() > 6);
    signal(child.id(), "KILL");
    let _ = child.wait_with_output().unwrap();
    let whole_log = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, format!("{whole_log}{{\"timestamp\":\"2026-01-01T00:00:00Z\",\"event\":\"assess")).unwrap();
    // A ledger an earlier version kept beside the log, its last record cut: moved into the run
    // store on resume, the cut record skipped with a warning.
    std::fs::write(&ledger, "{\"spend\":\"hold\",\"v\":1,\"ca").unwrap();

    let resumed = goal(&["--resume", s(&log)]).output().unwrap();

    let err = stderr(&resumed);
    assert_eq!(resumed.status.code(), Some(13), "the resume went on, to its budget: {err}");
    let lines = whole_log.lines().count();
    assert!(err.contains(&format!("g.jsonl:{}: the last record was cut short", lines + 1)), "{err}");
    assert!(err.contains("\"event\":\"assess"), "the warning shows what was dropped: {err}");
    assert!(err.contains("g.spend.jsonl:1:"), "{err}");
    assert!(!ledger.exists(), "the older ledger was moved into the run store");
    let events = common::events(&log);
    assert!(events.iter().any(|e| e["event"] == "resumed"), "finished goals were restored");

    // A damaged line in the middle is not a kill: the resume is refused, naming its line.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut damaged: Vec<&str> = text.lines().collect();
    damaged[1] = "{\"timestamp\": oops";
    std::fs::write(&log, damaged.join("\n") + "\n").unwrap();
    let refused = goal(&["--resume", s(&log)]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("g.jsonl:2: not a goal log record"), "{}", stderr(&refused));
}

/// `recursive sessions --json`'s only session: its id and transcript.
fn only_session(env: &Env) -> (String, std::path::PathBuf) {
    let list: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    let session = &list.as_array().unwrap()[0];
    (session["id"].as_str().unwrap().to_string(), session["transcript"].as_str().unwrap().into())
}

fn contents(body: &Value) -> Vec<String> {
    body["messages"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap_or("").to_string()).collect()
}

#[test]
fn a_session_whose_last_line_a_kill_cut_continues_with_a_warning() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server =
        runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("41"), Reply::text("still 41")]));
    let run = |args: &[&str]| {
        env.cmd().env("OPENAI_API_KEY", "sk-test").args(args).args(provider_args(&server)).output().unwrap()
    };
    let first = run(&["run", "remember the number 41", "--json"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let (id, transcript) = only_session(&env);
    let cut = |text: &str| {
        std::fs::OpenOptions::new().append(true).open(&transcript).unwrap().write_all(text.as_bytes()).unwrap()
    };
    let lines = std::fs::read_to_string(&transcript).unwrap().lines().count();
    cut(r#"{"role":"user","content":"a question the kill cu"#);

    let second = run(&["run", "which number?", "--continue", "--json"]);

    let err = stderr(&second);
    assert_eq!(second.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("warning: session {id}: ")), "{err}");
    assert!(err.contains(&format!("transcript.jsonl:{}: the last record was cut short", lines + 1)), "{err}");
    assert!(err.contains("a question the kill cu"), "the warning shows what was dropped: {err}");
    let sent = contents(&server.request(1).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?"], "{sent:?}");

    // The chat resumes a cut transcript too.
    cut(r#"{"role":"assistant","content":"half an ans"#);
    let mut chat = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["chat", "--resume", &id, "-q"])
        .args(provider_args(&server))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    chat.stdin.take().unwrap().write_all(b"and now?\n/exit\n").unwrap();
    let out = chat.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("half an ans"), "{}", stderr(&out));
    let sent = contents(&server.request(2).body);
    assert_eq!(&sent[1..], ["remember the number 41", "noted", "which number?", "41", "and now?"], "{sent:?}");
}

#[test]
fn a_session_with_a_damaged_line_before_the_last_is_refused_naming_the_line() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("unused")]));
    let run = |args: &[&str]| {
        env.cmd().env("OPENAI_API_KEY", "sk-test").args(args).args(provider_args(&server)).output().unwrap()
    };
    assert_eq!(run(&["run", "remember the number 41", "--json"]).status.code(), Some(0));
    let (_, transcript) = only_session(&env);
    let text = std::fs::read_to_string(&transcript).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[0] = "{\"role\": damaged";
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();

    let refused = run(&["run", "which number?", "--continue"]);

    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("line 1:"), "{}", stderr(&refused));
    assert_eq!(server.request_count(), 1, "nothing was sent");
}

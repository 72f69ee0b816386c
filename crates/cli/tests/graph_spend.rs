//! A graph thread's spend survives a kill: every model call of a run of the thread is held in the
//! thread's spend ledger before it is sent, so `graph resume` after a SIGKILL counts what the
//! killed run spent — its finished node, and the call in flight at the kill at its hold — and
//! reports that with its own spend, while its finished node is not run again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Env, stdout_json};
use recursive_testkit::{ModelServer, Reply};

const PAIR: &str = include_str!("fixtures/graphs/pair.toml");

/// Tokens every answer reports (input, output), and their price at gpt-4o-mini's.
const TOKENS: (u64, u64) = (30_000, 2_000);
const PRICED: f64 = (30_000.0 * 0.15 + 2_000.0 * 0.60) / 1e6;

fn provider(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

#[test]
fn a_killed_thread_resumes_counting_what_its_killed_run_spent() {
    let env = Env::new();
    std::fs::write(env.path("pair.toml"), PAIR).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start());
    let second_answers = Arc::new(AtomicBool::new(false));
    let answering = second_answers.clone();
    server.respond_with(move |r| {
        let text = r.last_user_text()?;
        if text.starts_with("Second:") && !answering.load(Ordering::SeqCst) {
            return Some(Reply::hang());
        }
        Some(Reply::text(format!("answer to {text}")).with_usage(TOKENS.0, TOKENS.1))
    });
    let mut child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "run", "pair.toml", "--thread", "t1", "--input", r#"{"topic": "tides"}"#, "--max-cost", "1"])
        .args(provider(&server))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let asked_second =
        || server.requests().iter().any(|r| r.last_user_text().is_some_and(|t| t.starts_with("Second:")));
    common::wait_for("the second node's call in flight", Duration::from_secs(60), asked_second);
    child.kill().unwrap();
    child.wait().unwrap();
    let journal = || common::store_journal(&env.path(".recursive/graphs.db"), "thread-t1");
    let in_flight: f64 = common::unsettled_holds(&journal()).iter().sum();
    assert!(in_flight > 0.0, "the killed call's hold is in the ledger");

    second_answers.store(true, Ordering::SeqCst);
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "resume", "--thread", "t1", "--json", "--max-cost", "1"])
        .args(provider(&server))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result = stdout_json(&out);
    assert!(result["state"]["second"].as_str().unwrap().starts_with("answer to Second:"), "{result}");
    let firsts =
        server.requests().iter().filter(|r| r.last_user_text().is_some_and(|t| t.starts_with("First:"))).count();
    assert_eq!(firsts, 1, "the finished node is not run again");
    let reported = result["cost_usd"].as_f64().unwrap();
    let expected = 2.0 * PRICED + in_flight;
    assert!(
        (reported - expected).abs() < 1e-6,
        "reported {reported}, expected two answers and the killed hold: {expected}"
    );

    // That run ended whole: a new run on the thread starts its spend afresh.
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["graph", "run", "pair.toml", "--thread", "t1", "--input", r#"{"topic": "reefs"}"#, "--json"])
        .args(provider(&server))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let again = stdout_json(&out)["cost_usd"].as_f64().unwrap();
    assert!((again - 2.0 * PRICED).abs() < 1e-6, "a fresh run counts its own two calls: {again}");
}

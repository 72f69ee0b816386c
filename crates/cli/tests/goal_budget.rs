#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `recursive goal --max-cost` against a scripted OpenAI-compatible server with eight goals
//! running at once: every call holds its estimated cost against the cap while it runs, so the
//! pursuit overshoots the cap by at most one call — not by all the calls in flight.

mod common;

use std::time::Duration;

use common::{Env, stdout_json};
use recursive_testkit::ModelServer;

const OBJECTIVE: &str = common::SIXTEEN_REGIONS;

/// Usage of every reply: 2,000 in and 4,000 out, $0.0027 at gpt-4o-mini's price.
const PER_CALL: f64 = 2000.0 * 0.15e-6 + 4000.0 * 0.6e-6;

#[test]
fn eight_goals_at_once_overshoot_the_cost_cap_by_at_most_one_call() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(|r| common::sixteen_regions(r).map(|reply| reply.after(Duration::from_millis(40))));
    let cap = 0.012;
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["goal", OBJECTIVE, "--max-cost", &cap.to_string(), "--layer-concurrency", "8", "--json"])
        .args(["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"])
        .output()
        .unwrap();
    let v = stdout_json(&out);
    let spent = v["cost_usd"].as_f64().unwrap_or_else(|| panic!("no cost in {v}"));
    let calls = server.requests().len();
    assert!(spent <= cap + PER_CALL + 1e-9, "spent ${spent} with {calls} calls over a ${cap} cap");
    assert!(spent >= cap - 2.0 * PER_CALL, "the cap was used: ${spent}");
    assert_ne!(out.status.code(), Some(0), "a pursuit cut short by its budget is not a success");
}

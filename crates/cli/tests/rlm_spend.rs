//! A durable RLM's spend survives a kill: the calls it made after its last checkpoint, and the
//! call in flight when it was SIGKILLed, are in its spend ledger, so the resumed run reports
//! what the server answered (priced at the model's price) plus the killed call's hold — not
//! only what the last checkpoint knew — and its `--max-cost` counts from there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Env, stdout_json};
use recursive_testkit::{ModelServer, Reply};

const FIRST: &str = "Setting up.\n```python\nx = 41\nprint('x is set')\n```";
const SECOND: &str = "Asking.\n```python\na = llm_query('the sub question')['result']\n\
                      b = llm_query('the slow question')['result']\nprint(a, b)\n```";
const THIRD: &str = "```python\nsubmit(f'{x + 1}')\n```";

/// Tokens each kind of answer reports (input, output).
const PRIMARY: (u64, u64) = (20_000, 500);
const SUB: (u64, u64) = (40_000, 1_000);

/// gpt-4o-mini's price: $0.15 per million input tokens, $0.60 per million output tokens.
fn priced((input, output): (u64, u64)) -> f64 {
    (input as f64 * 0.15 + output as f64 * 0.60) / 1e6
}

fn provider(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

#[test]
fn a_killed_rlm_resumes_counting_what_it_spent_after_its_last_checkpoint() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start_with([
        Reply::text(FIRST).with_usage(PRIMARY.0, PRIMARY.1),
        Reply::text(SECOND).with_usage(PRIMARY.0, PRIMARY.1),
    ]));
    let slow_answers = Arc::new(AtomicBool::new(false));
    let answering = slow_answers.clone();
    server.respond_with(move |request| {
        let text = request.last_user_text()?;
        if text.contains("the sub question") {
            return Some(Reply::text("SUB").with_usage(SUB.0, SUB.1));
        }
        if text.contains("the slow question") {
            return Some(if answering.load(Ordering::SeqCst) {
                Reply::text("SLOW").with_usage(SUB.0, SUB.1)
            } else {
                Reply::hang()
            });
        }
        None
    });
    let args = ["rlm", "what is x + 1?", "--input", "notes.txt", "--max-iterations", "5", "--max-cost", "1"];
    let mut child = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(args)
        .args(provider(&server))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let slow_asked = |s: &ModelServer| s.requests().iter().any(|r| r.body.to_string().contains("the slow question\""));
    common::wait_for("the slow sub-call in flight", Duration::from_secs(60), || slow_asked(&server));
    child.kill().unwrap();
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    child.wait().unwrap();
    let key = stderr
        .lines()
        .find_map(|l| l.strip_prefix("checkpointed as "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the run names its checkpoints")
        .to_string();
    let journal = || common::store_journal(&env.path(".recursive/graphs.db"), &key);
    let in_flight: f64 = common::unsettled_holds(&journal()).iter().sum();
    assert!(in_flight > 0.0, "the killed call's hold is in the ledger");

    slow_answers.store(true, Ordering::SeqCst);
    server.push(Reply::text(SECOND).with_usage(PRIMARY.0, PRIMARY.1));
    server.push(Reply::text(THIRD).with_usage(PRIMARY.0, PRIMARY.1));
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["rlm", "--resume", &key, "--json", "--max-cost", "1"])
        .args(provider(&server))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result = stdout_json(&out);
    assert_eq!(result["output"]["answer"], "42", "{result}");

    // What the server answered, in both processes, priced; the hung call answered nothing.
    let requests = server.requests();
    let subs = requests.iter().filter(|r| r.last_user_text().is_some_and(|t| t.contains("the sub question"))).count();
    let slows = requests.iter().filter(|r| r.last_user_text().is_some_and(|t| t.contains("the slow question"))).count();
    let primaries = requests.len() - subs - slows;
    assert_eq!(primaries, 4, "iterations 1 and 2, then 2 again and 3 after the resume");
    let answered = primaries as f64 * priced(PRIMARY) + (subs + slows - 1) as f64 * priced(SUB);
    let reported = result["cost_usd"].as_f64().unwrap();
    assert!(
        (reported - (answered + in_flight)).abs() < 1e-6,
        "reported {reported}, answered {answered} + the killed call's hold {in_flight}"
    );
}

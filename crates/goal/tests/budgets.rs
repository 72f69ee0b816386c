#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Budgets that hold: concurrent goals cannot overshoot a USD cap by more than one call, and a
//! pursuit killed and resumed spends no more than its cap over all its attempts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{
    Budget, BudgetLimits, CallPrice, ChatProvider, ChatRequest, ChatResponse, ChatStream, Message, MockProvider,
    NullSink, ProviderError, Role, RunScope, StopReason, ToolInvoker, Usage,
};
use recursive_goal::{GoalConfig, GoalPursuer, ResumeLog};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Every call of the world costs this much.
const PER_CALL: f64 = 0.001;

/// The root goal splits into `n` independent leaves; each leaf is analysed in one call.
fn world(n: usize) -> MockProvider {
    MockProvider::with_handler(move |req: &ChatRequest| {
        let system =
            req.messages.iter().find(|m| m.role == Role::System).map(|m| m.content.clone()).unwrap_or_default();
        let user = req.messages.iter().filter(|m| m.role == Role::User).map(|m| m.content.clone()).collect::<String>();
        let root = user.contains("Current goal: R\n") || user.ends_with("Current goal: R");
        let text = if system.starts_with("Step: assess") && root {
            json!({ "executable": false, "reasoning": "too big", "action": null }).to_string()
        } else if system.starts_with("Step: assess") {
            json!({ "executable": true, "reasoning": "one step", "action": {"type": "analyze", "target": "", "input": "x"} })
                .to_string()
        } else if system.starts_with("Step: decompose") {
            let subs: Vec<_> = (1..=n)
                .map(|i| json!({ "goal": format!("leaf {i}"), "rationale": "needed", "depends_on": [], "complexity": "low" }))
                .collect();
            json!({ "reasoning": "split", "sub_goals": subs }).to_string()
        } else if system.starts_with("Step: check") {
            json!({ "reasoning": "judged", "achieved": false, "confidence": 0.9, "remaining_gaps": [] }).to_string()
        } else if system.starts_with("Step: synthesize") {
            json!({ "summary": "s", "key_findings": [], "confidence": 0.8, "limitations": [] }).to_string()
        } else {
            "analysis".to_string()
        };
        Ok(ChatResponse {
            message: Message::assistant(text),
            stop_reason: StopReason::EndTurn,
            usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
            cost_usd: Some(PER_CALL),
            model: "priced".into(),
        })
    })
}

/// The world behind a priced, slow provider: each call takes a while (so goals overlap),
/// its cost is estimated at [`PER_CALL`], and calls are counted (and may trip a cancel).
struct Priced {
    inner: MockProvider,
    calls: AtomicUsize,
    cancel_after: Option<(usize, CancellationToken)>,
    /// The call (from 1) that never answers, as if the process died while it was in flight.
    hang_at: Option<usize>,
}

#[async_trait]
impl ChatProvider for Priced {
    fn name(&self) -> &str {
        "priced"
    }

    fn price(&self, _request: &ChatRequest) -> CallPrice {
        CallPrice::Estimate(PER_CALL)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((limit, token)) = &self.cancel_after
            && n >= *limit
        {
            token.cancel();
        }
        if self.hang_at == Some(n) {
            std::future::pending::<()>().await;
        }
        self.inner.stream(request).await
    }
}

fn priced(n: usize, cancel_after: Option<(usize, CancellationToken)>) -> Arc<Priced> {
    Arc::new(Priced { inner: world(n), calls: AtomicUsize::new(0), cancel_after, hang_at: None })
}

fn pursuer(provider: Arc<Priced>, config: GoalConfig) -> GoalPursuer {
    GoalPursuer::new(provider, ToolInvoker::default(), config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_goals_overshoot_a_cost_cap_by_at_most_one_call() {
    let cap = 0.0105;
    let budget = Arc::new(Budget::new(BudgetLimits { max_cost_usd: Some(cap), ..Default::default() }));
    let scope = RunScope::root("t", Arc::new(NullSink), budget.clone());
    let provider = priced(16, None);
    let config = GoalConfig { layer_concurrency: 8, ..Default::default() };
    let _ = pursuer(provider.clone(), config).pursue("R", &scope).await.unwrap();
    let spent = budget.cost_used();
    assert!(
        spent <= cap + PER_CALL + 1e-9,
        "spent {spent} over a cap of {cap} with {} calls",
        provider.calls.load(Ordering::SeqCst)
    );
    assert!(spent >= cap - PER_CALL, "the cap was used, not starved: {spent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pursuit_killed_and_resumed_twice_spends_no_more_than_its_cap_in_total() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("goal.jsonl");
    let mut config = GoalConfig { layer_concurrency: 2, ..Default::default() };
    config.constraints.max_cost_usd = 0.012;
    let mut calls = 0;
    for attempt in 0..3 {
        let stop = CancellationToken::new();
        let cancel_after = (attempt < 2).then(|| (5, stop.clone()));
        let provider = priced(20, cancel_after);
        let scope = RunScope::root("t", Arc::new(NullSink), Arc::new(Budget::unlimited())).with_cancel(stop);
        let pursuer = pursuer(provider.clone(), config.clone()).with_log(&log).unwrap();
        let _ = if attempt == 0 {
            pursuer.pursue("R", &scope).await.unwrap()
        } else {
            pursuer.resume(ResumeLog::open(&log).unwrap(), &scope).await.unwrap()
        };
        calls += provider.calls.load(Ordering::SeqCst);
    }
    let spent = calls as f64 * PER_CALL;
    assert!(spent <= 0.012 + PER_CALL + 1e-9, "three attempts spent {spent} of a 0.012 cap ({calls} calls)");
    let (_, logged) = ResumeLog::open(&log).unwrap().spent("1");
    assert!((logged - spent).abs() < PER_CALL * 2.0 + 1e-9, "the log knows what was spent: {logged} vs {spent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pursuit_that_died_with_calls_in_flight_resumes_counting_them_at_their_hold() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("goal.jsonl");
    let mut config = GoalConfig { layer_concurrency: 1, ..Default::default() };
    config.constraints.max_cost_usd = 0.012;
    let mut answered = 0;
    for hang_at in [4, 3] {
        let provider = Arc::new(Priced { hang_at: Some(hang_at), ..Arc::into_inner(priced(20, None)).unwrap() });
        let scope = RunScope::root("t", Arc::new(NullSink), Arc::new(Budget::unlimited()));
        let pursuer = pursuer(provider.clone(), config.clone()).with_log(&log).unwrap();
        let resume = (answered > 0).then(|| ResumeLog::open(&log).unwrap());
        let attempt = tokio::spawn(async move {
            match resume {
                Some(log) => pursuer.resume(log, &scope).await,
                None => pursuer.pursue("R", &scope).await,
            }
        });
        while provider.calls.load(Ordering::SeqCst) < hang_at {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The process dies: the call in flight never returns, nothing after it is written.
        attempt.abort();
        let _ = attempt.await;
        answered += hang_at - 1;
    }
    let provider = priced(20, None);
    let scope = RunScope::root("t", Arc::new(NullSink), Arc::new(Budget::unlimited()));
    let last = pursuer(provider.clone(), config).with_log(&log).unwrap();
    let outcome = last.resume(ResumeLog::open(&log).unwrap(), &scope).await.unwrap();
    answered += provider.calls.load(Ordering::SeqCst);

    let in_flight = 2.0 * PER_CALL;
    let reported = outcome.cost_usd;
    let paid = answered as f64 * PER_CALL;
    assert!(
        (reported - (paid + in_flight)).abs() < 1e-9,
        "reported {reported}: {answered} calls answered, 2 in flight"
    );
    assert!(reported <= 0.012 + PER_CALL + 1e-9, "all attempts spent {reported} of a 0.012 cap");
    assert!(reported >= 0.012 - PER_CALL, "the cap was used: {reported}");
}

//! The one tool executor of the run tree. The agent loop, goal `tool` actions, RLM host tools
//! and MCP tools all run their calls through a [`ToolInvoker`], which adds, in one place: the
//! `ToolCall` event, the permission gate (with its event), the per-call timeout and the run's
//! deadline, cancellation, a cap on the output, the `ToolResult` event, and exactly one result
//! per call in call order — also when a call fails, times out, is denied or is cancelled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::budget::earliest;
use crate::event::{Decision, EventKind};
use crate::message::ToolCall;
use crate::run::{FinishReason, RunScope};
use crate::text::truncate_middle;
use crate::tool::{ToolContext, ToolGate, ToolRegistry};

/// Limits of tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLimits {
    /// Time allowed for one call.
    pub timeout: Option<Duration>,
    /// Calls of one batch that run at once.
    pub concurrency: usize,
    /// Characters of one result kept (head and tail; the cut is marked).
    pub max_output_chars: usize,
}

/// Default cap on the characters of one tool result.
pub const DEFAULT_MAX_OUTPUT_CHARS: usize = 100_000;

impl Default for ToolLimits {
    fn default() -> Self {
        Self { timeout: None, concurrency: 8, max_output_chars: DEFAULT_MAX_OUTPUT_CHARS }
    }
}

/// What became of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// The call's id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// What the model sees.
    pub output: String,
    /// Whether the output is an error.
    pub is_error: bool,
    /// The permission gate refused the call.
    pub denied: bool,
    /// How long it took.
    pub duration_ms: u64,
    /// Set when cancellation or the run's deadline interrupted the call: the run must end.
    pub stop: Option<FinishReason>,
}

/// Runs tool calls with the run tree's guarantees (see the module docs).
#[derive(Clone, Default)]
pub struct ToolInvoker {
    tools: ToolRegistry,
    gate: Option<Arc<dyn ToolGate>>,
    limits: ToolLimits,
}

impl std::fmt::Debug for ToolInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolInvoker")
            .field("tools", &self.tools)
            .field("gated", &self.gate.is_some())
            .field("limits", &self.limits)
            .finish()
    }
}

impl ToolInvoker {
    /// An invoker over these tools, with no permission gate (every call may run) and default
    /// limits.
    pub fn new(tools: ToolRegistry) -> Self {
        Self { tools, gate: None, limits: ToolLimits::default() }
    }

    /// Consults this gate before each call.
    pub fn with_gate(mut self, gate: Arc<dyn ToolGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Sets the gate, or removes it.
    pub fn set_gate(&mut self, gate: Option<Arc<dyn ToolGate>>) {
        self.gate = gate;
    }

    /// Uses these limits.
    pub fn with_limits(mut self, limits: ToolLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The gate, if any.
    pub fn gate(&self) -> Option<&Arc<dyn ToolGate>> {
        self.gate.as_ref()
    }

    /// The limits.
    pub fn limits(&self) -> &ToolLimits {
        &self.limits
    }

    /// Runs one call (see [`ToolInvoker::invoke_all`]).
    pub async fn invoke(&self, call: ToolCall, scope: &RunScope, step: u32, deadline: Option<Instant>) -> ToolOutcome {
        let mut out = self.invoke_all(std::slice::from_ref(&call), scope, step, deadline).await;
        out.pop().unwrap_or_else(|| synthetic(&call, "error: the call produced no result".into()))
    }

    /// Runs the calls of one model message: emits a `ToolCall` event for each, asks the gate
    /// about each in order, runs the allowed ones under the timeout, the deadline and
    /// cancellation — read-only calls concurrently (at most [`ToolLimits::concurrency`] at once),
    /// every other call alone and in call order —
    /// and returns exactly one outcome per call, in call order, each also emitted as a
    /// `ToolResult` event.
    pub async fn invoke_all(
        &self,
        calls: &[ToolCall],
        scope: &RunScope,
        step: u32,
        deadline: Option<Instant>,
    ) -> Vec<ToolOutcome> {
        for c in calls {
            scope.emit(step, EventKind::ToolCall { call: c.clone() });
        }
        let journal = scope.journal();
        let keys: Vec<Option<String>> = calls.iter().map(|c| journal.map(|_| crate::journal::tool_key(c))).collect();
        // Calls the resumed run already had finished are not asked about or run again.
        let replayed: Vec<Option<ToolOutcome>> = calls
            .iter()
            .zip(&keys)
            .map(|(c, key)| journal.zip(key.as_deref()).and_then(|(j, k)| j.replay_tool(k)).map(|r| replayed(c, r)))
            .collect();
        // What is read back is recorded already.
        let keys: Vec<Option<String>> =
            keys.into_iter().zip(&replayed).map(|(k, r)| k.filter(|_| r.is_none())).collect();
        let mut denials = Vec::with_capacity(calls.len());
        for (c, done) in calls.iter().zip(&replayed) {
            denials.push(match done {
                Some(_) => None,
                None => self.check(c, scope, step).await,
            });
        }
        let deadline = earliest(deadline, scope.budget().deadline());
        // Read-only calls share the lock; any other call holds it alone. The lock is fair and
        // taken in call order, so writers run one at a time, in order, and a read after a
        // write sees it.
        let order = tokio::sync::RwLock::new(());
        let order = &order;
        let runs = calls.iter().cloned().zip(denials).zip(replayed).map(|((call, denial), done)| async move {
            if let Some(done) = done {
                return done;
            }
            match denial {
                Some(reason) => {
                    ToolOutcome { denied: true, ..synthetic(&call, format!("permission denied: {reason}")) }
                }
                None if self.tools.get(&call.name).is_some_and(|t| t.read_only()) => {
                    let _shared = order.read().await;
                    self.run_one(call, scope, step, deadline).await
                }
                None => {
                    let _alone = order.write().await;
                    self.run_one(call, scope, step, deadline).await
                }
            }
        });
        let outcomes: Vec<ToolOutcome> =
            futures::stream::iter(runs).buffered(self.limits.concurrency.max(1)).collect().await;
        for o in &outcomes {
            emit_result(scope, step, o);
        }
        record(scope, step, &keys, &outcomes).await;
        outcomes
    }

    /// One synthetic result per call for calls that will not run (plan mode, a cut-off
    /// response, a stuck run), with the same events as real ones.
    pub fn skip_all(&self, calls: &[ToolCall], scope: &RunScope, step: u32, why: &str) -> Vec<ToolOutcome> {
        calls
            .iter()
            .map(|c| {
                scope.emit(step, EventKind::ToolCall { call: c.clone() });
                let o = synthetic(c, why.to_string());
                emit_result(scope, step, &o);
                o
            })
            .collect()
    }

    /// The gate's verdict, as an event; `Some(reason)` when the call is denied.
    async fn check(&self, call: &ToolCall, scope: &RunScope, step: u32) -> Option<String> {
        let gate = self.gate.as_ref()?;
        let verdict = gate.check_in(call, self.tools.get(&call.name), scope, step).await;
        scope.emit(
            step,
            EventKind::Permission {
                id: call.id.clone(),
                name: call.name.clone(),
                decision: verdict.decision,
                reason: verdict.reason.clone(),
            },
        );
        (verdict.decision == Decision::Deny).then_some(verdict.reason)
    }

    async fn run_one(&self, call: ToolCall, scope: &RunScope, step: u32, deadline: Option<Instant>) -> ToolOutcome {
        let t0 = Instant::now();
        let screen = self.gate.as_ref().zip(self.tools.get(&call.name)).and_then(|(g, t)| g.screen(&call, t));
        let ctx = ToolContext { scope: scope.clone(), step, call_id: call.id.clone(), screen };
        let limit = earliest(self.limits.timeout.and_then(|t| t0.checked_add(t)), deadline);
        let run = self.tools.call(&call, &ctx);
        let timed = async {
            match limit {
                Some(l) => tokio::time::timeout_at(l.into(), run).await.ok(),
                None => Some(run.await),
            }
        };
        let result = tokio::select! {
            biased;
            _ = scope.cancel_token().cancelled() => Err(FinishReason::Cancelled),
            r = timed => r.ok_or(FinishReason::WallClockExceeded),
        };
        let ms = t0.elapsed().as_millis() as u64;
        let (output, is_error, stop) = match result {
            Ok(Ok(out)) => (out, false, None),
            Ok(Err(e)) => (format!("error: {e}"), true, None),
            Err(FinishReason::Cancelled) => (
                "cancelled: the run was cancelled before this call finished".to_string(),
                true,
                Some(FinishReason::Cancelled),
            ),
            Err(_) => {
                let whole_run = deadline.is_some_and(|d| Instant::now() >= d);
                let stop = whole_run.then_some(FinishReason::WallClockExceeded);
                (format!("error: timed out after {:.1}s", ms as f64 / 1000.0), true, stop)
            }
        };
        let output = cap(output, self.limits.max_output_chars);
        ToolOutcome { id: call.id, name: call.name, output, is_error, denied: false, duration_ms: ms, stop }
    }
}

/// Records, in a journaled run, the outcomes of the calls that finished (a call cut off by the
/// run's stop did not).
async fn record(scope: &RunScope, step: u32, keys: &[Option<String>], outcomes: &[ToolOutcome]) {
    let Some(journal) = scope.journal() else { return };
    for (key, outcome) in keys.iter().zip(outcomes) {
        if let (Some(key), None) = (key, &outcome.stop)
            && let Err(e) = journal.record_tool(key, outcome).await
        {
            let message = format!("the run's journal could not record a tool call's result: {e}");
            scope.emit(step, EventKind::Error { message });
        }
    }
}

/// The outcome of a call read back from the journal.
fn replayed(call: &ToolCall, recorded: crate::journal::RecordedTool) -> ToolOutcome {
    ToolOutcome {
        id: call.id.clone(),
        name: call.name.clone(),
        output: recorded.output,
        is_error: recorded.is_error,
        denied: recorded.denied,
        duration_ms: 0,
        stop: None,
    }
}

fn synthetic(call: &ToolCall, output: String) -> ToolOutcome {
    ToolOutcome {
        id: call.id.clone(),
        name: call.name.clone(),
        output,
        is_error: true,
        denied: false,
        duration_ms: 0,
        stop: None,
    }
}

fn emit_result(scope: &RunScope, step: u32, o: &ToolOutcome) {
    scope.emit(
        step,
        EventKind::ToolResult {
            id: o.id.clone(),
            name: o.name.clone(),
            output: o.output.clone(),
            is_error: o.is_error,
            duration_ms: o.duration_ms,
        },
    );
}

/// Keeps head and tail of an output longer than `max` characters, saying how much was cut.
fn cap(output: String, max: usize) -> String {
    if output.len() <= max || output.chars().count() <= max {
        return output;
    }
    truncate_middle(&output, max)
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::{Value, json};

    use super::*;
    use crate::event::MemorySink;
    use crate::message::ToolSpec;
    use crate::tool::{GateVerdict, Tool, ToolError};

    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: "echo".into(), description: String::new(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            if let Some(ms) = a.get("sleep_ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(a.get("text").and_then(Value::as_str).unwrap_or_default().to_string())
        }
    }

    struct DenyAll;

    #[async_trait]
    impl ToolGate for DenyAll {
        async fn check(&self, _c: &ToolCall, _t: Option<&Arc<dyn Tool>>) -> GateVerdict {
            GateVerdict::deny("rule #1: deny")
        }
    }

    fn invoker() -> ToolInvoker {
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Echo));
        ToolInvoker::new(tools)
    }

    fn call(id: &str, args: Value) -> ToolCall {
        ToolCall { id: id.into(), name: "echo".into(), arguments: args }
    }

    #[tokio::test]
    async fn results_come_back_in_call_order_with_events() {
        let sink = MemorySink::new();
        let scope = RunScope::root("t", Arc::new(sink.clone()), Arc::new(crate::Budget::unlimited()));
        let calls = [
            call("a", json!({"text": "slow", "sleep_ms": 50})),
            call("b", json!({"text": "fast"})),
            call("c", json!(7)),
        ];
        let out = invoker().invoke_all(&calls, &scope, 1, None).await;
        let ids: Vec<&str> = out.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(out[0].output, "slow");
        assert!(out[2].is_error && out[2].output.contains("must be a JSON object"), "{:?}", out[2]);
        let results = sink.events().iter().filter(|e| matches!(e.kind, EventKind::ToolResult { .. })).count();
        assert_eq!(results, 3);
    }

    #[tokio::test]
    async fn denied_call_gets_a_result_and_never_runs() {
        let sink = MemorySink::new();
        let scope = RunScope::root("t", Arc::new(sink.clone()), Arc::new(crate::Budget::unlimited()));
        let inv = invoker().with_gate(Arc::new(DenyAll));
        let o = inv.invoke(call("a", json!({"text": "x"})), &scope, 1, None).await;
        assert!(o.denied && o.is_error);
        assert!(o.output.starts_with("permission denied: rule #1"), "{}", o.output);
        assert!(sink.events().iter().any(|e| matches!(e.kind, EventKind::Permission { decision: Decision::Deny, .. })));
    }

    #[tokio::test]
    async fn timeout_gives_an_error_result() {
        let scope = RunScope::detached("t");
        let inv = invoker().with_limits(ToolLimits { timeout: Some(Duration::from_millis(20)), ..Default::default() });
        let o = inv.invoke(call("a", json!({"sleep_ms": 5000})), &scope, 1, None).await;
        assert!(o.is_error && o.output.contains("timed out"), "{o:?}");
        assert_eq!(o.stop, None, "a tool timeout does not end the run");
    }

    /// Says it started, then never finishes.
    struct Parked(Arc<tokio::sync::Notify>);

    #[async_trait]
    impl Tool for Parked {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: "parked".into(), description: String::new(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, _a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            self.0.notify_one();
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn cancellation_ends_the_call_and_says_the_run_must_stop() {
        let scope = RunScope::detached("t");
        let token = scope.cancel_token().clone();
        let started = Arc::new(tokio::sync::Notify::new());
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Parked(started.clone())));
        // Cancelled once the tool is running.
        tokio::spawn(async move {
            started.notified().await;
            token.cancel();
        });
        let parked = ToolCall { id: "a".into(), name: "parked".into(), arguments: json!({}) };
        let o = ToolInvoker::new(tools).invoke(parked, &scope, 1, None).await;
        assert_eq!(o.stop, Some(FinishReason::Cancelled));
        assert!(o.output.starts_with("cancelled"), "{}", o.output);
    }

    #[tokio::test]
    async fn long_output_is_capped_head_and_tail() {
        let scope = RunScope::detached("t");
        let inv = invoker().with_limits(ToolLimits { max_output_chars: 100, ..Default::default() });
        let text = format!("{}{}", "a".repeat(500), "z".repeat(500));
        let o = inv.invoke(call("a", json!({ "text": text })), &scope, 1, None).await;
        assert!(o.output.starts_with("aaaa") && o.output.ends_with("zzzz"), "{}", o.output);
        assert!(o.output.contains("chars truncated"), "{}", o.output);
        assert!(o.output.chars().count() < 200);
    }

    /// Logs when each call starts and ends, having waited for the entry `until` (if given) and
    /// then worked `ms` (a slow call gives a call that should wait a chance to overlap it);
    /// `read_only` says which kind it is.
    struct Logged {
        name: &'static str,
        reads: bool,
        log: Arc<std::sync::Mutex<Vec<String>>>,
    }

    #[async_trait]
    impl Tool for Logged {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: self.name.into(), description: String::new(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            let id = a["id"].as_str().unwrap_or_default().to_string();
            self.log.lock().unwrap().push(format!("start {id}"));
            if let Some(until) = a["until"].as_str() {
                let logged = || self.log.lock().unwrap().iter().any(|l| l == until);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while !logged() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(a["ms"].as_u64().unwrap_or(0))).await;
            self.log.lock().unwrap().push(format!("end {id}"));
            Ok(id)
        }
        fn read_only(&self) -> bool {
            self.reads
        }
    }

    #[tokio::test]
    async fn a_journaled_call_finished_before_a_kill_is_read_back_not_run_or_asked_again() {
        use crate::journal::RunJournal;
        use crate::spend::MemorySpendLedger;
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let ledger = Arc::new(MemorySpendLedger::default());
        let first = RunScope::detached("t").with_journal(Arc::new(RunJournal::new(ledger.clone(), &[])));
        let write = |id: &str| ToolCall { id: id.into(), name: "write".into(), arguments: json!({ "id": id }) };
        let calls = [write("w1"), write("w2")];
        logged(&log).invoke_all(&calls[..1], &first, 1, None).await;
        let resumed =
            RunScope::detached("t").with_journal(Arc::new(RunJournal::new(ledger.clone(), &ledger.records())));
        let sink = Arc::new(MemorySink::new());
        let inv = logged(&log).with_gate(Arc::new(DenyAll));
        let out = inv.invoke_all(&calls[..1], &resumed, 1, None).await;
        assert_eq!((out[0].output.as_str(), out[0].is_error), ("w1", false), "read back, not denied: {out:?}");
        assert_eq!(*log.lock().unwrap(), ["start w1", "end w1"], "the tool ran once");
        let gated = RunScope::root("t", sink.clone(), Arc::new(crate::Budget::unlimited()))
            .with_journal(Arc::new(RunJournal::new(ledger.clone(), &ledger.records())));
        inv.invoke_all(&calls[1..], &gated, 1, None).await;
        assert!(sink.events().iter().any(|e| matches!(e.kind, EventKind::Permission { .. })), "a new call is asked");
    }

    fn logged(log: &Arc<std::sync::Mutex<Vec<String>>>) -> ToolInvoker {
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Logged { name: "read", reads: true, log: log.clone() }));
        tools.register(Arc::new(Logged { name: "write", reads: false, log: log.clone() }));
        ToolInvoker::new(tools)
    }

    fn named(name: &str, id: &str, ms: u64) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: json!({"id": id, "ms": ms}) }
    }

    #[tokio::test]
    async fn writing_calls_of_one_message_run_one_at_a_time_in_order() {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let calls = [named("write", "w1", 60), named("write", "w2", 0)];
        logged(&log).invoke_all(&calls, &RunScope::detached("t"), 1, None).await;
        assert_eq!(*log.lock().unwrap(), ["start w1", "end w1", "start w2", "end w2"]);
    }

    #[tokio::test]
    async fn read_only_calls_run_together_and_wait_for_an_earlier_write() {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        // r1 ends only once r2 has started: reads that ran one at a time would log r2 after r1's end.
        let mut r1 = named("read", "r1", 60);
        r1.arguments["until"] = json!("start r2");
        let calls = [r1, named("read", "r2", 0), named("write", "w", 0), named("read", "r3", 0)];
        logged(&log).invoke_all(&calls, &RunScope::detached("t"), 1, None).await;
        let log = log.lock().unwrap().clone();
        let at = |e: &str| log.iter().position(|l| l == e).unwrap();
        assert!(at("start r2") < at("end r1"), "reads overlap: {log:?}");
        assert!(at("end r1") < at("start w") && at("end r2") < at("start w"), "the write waits: {log:?}");
        assert!(at("end w") < at("start r3"), "a later read sees the write: {log:?}");
    }
}

//! The run tree: a [`RunScope`] is one node (ids, depth, name) that shares its tree's event
//! sink and cancellation token, spends from its node of the budget tree, and rolls usage and
//! cost up to every ancestor. [`RunScope::call_model`] is the one guarded model call every path
//! of the tree makes — it writes each call's cost hold to the budget tree's spend ledgers
//! before the request goes out ([`crate::spend`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::budget::{Budget, BudgetLimits, earliest};
use crate::event::{AgentEvent, EventKind, EventSink, NullSink, RunIds};
use crate::message::Usage;
use crate::provider::{CallPrice, ChatProvider, ChatRequest, ChatResponse, ProviderError, StreamEvent};

/// Why a run ended. A limit is data, not an error.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The model answered without asking for tools.
    NoMoreToolCalls,
    /// The provider stopped for another reason (max tokens, content filter...).
    ProviderStop(crate::provider::StopReason),
    /// The step limit was reached.
    BudgetExceeded,
    /// The same tool call with the same arguments repeated too many times in a row.
    Stuck,
    /// The transcript grew past its size limit.
    TranscriptLimit,
    /// Plan mode: the model proposed a plan, which waits for approval.
    PlanPending,
    /// The cancellation token fired.
    Cancelled,
    /// Too many tool calls were denied.
    PermissionDenialLimit,
    /// The wall-clock limit passed.
    WallClockExceeded,
    /// The tree's token budget is spent.
    TokenBudgetExceeded,
    /// The tree's USD budget is spent.
    CostBudgetExceeded,
    /// The budget of model calls is spent.
    CallBudgetExceeded,
    /// The run did what was asked (an RLM answered, a goal was achieved or completed).
    Completed,
    /// A goal pursuit ended without achieving its objective.
    NotAchieved,
    /// An RLM ended without a valid answer.
    NoAnswer,
    /// A fault (provider unreachable after retries, I/O) ended the run (`error` in JSON).
    #[serde(rename = "error")]
    Fault,
    /// A graph run waits to be resumed (a pause at a node, or a node asking for a value).
    Interrupted,
    /// A graph's recursion policy (supersteps, visits per node, depth) ended the run.
    RecursionLimit,
    /// The model called a tool the caller runs itself ([`crate::asks::Asks::tools`]): the calls
    /// wait in the transcript for the caller's results.
    ClientToolCalls,
}

impl FinishReason {
    /// Snake-case name, as printed and logged.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::NoMoreToolCalls => "no_more_tool_calls",
            FinishReason::ProviderStop(_) => "provider_stop",
            FinishReason::BudgetExceeded => "budget_exceeded",
            FinishReason::Stuck => "stuck",
            FinishReason::TranscriptLimit => "transcript_limit",
            FinishReason::PlanPending => "plan_pending",
            FinishReason::Cancelled => "cancelled",
            FinishReason::PermissionDenialLimit => "permission_denial_limit",
            FinishReason::WallClockExceeded => "wall_clock_exceeded",
            FinishReason::TokenBudgetExceeded => "token_budget_exceeded",
            FinishReason::CostBudgetExceeded => "cost_budget_exceeded",
            FinishReason::CallBudgetExceeded => "call_budget_exceeded",
            FinishReason::Completed => "completed",
            FinishReason::NotAchieved => "not_achieved",
            FinishReason::NoAnswer => "no_answer",
            FinishReason::Fault => "error",
            FinishReason::Interrupted => "interrupted",
            FinishReason::RecursionLimit => "recursion_limit",
            FinishReason::ClientToolCalls => "client_tool_calls",
        }
    }

    /// The reason printed as `name` ([`FinishReason::as_str`]); a provider stop reads back
    /// without its detail.
    pub fn from_name(name: &str) -> Option<Self> {
        const ALL: &[FinishReason] = &[
            FinishReason::NoMoreToolCalls,
            FinishReason::BudgetExceeded,
            FinishReason::Stuck,
            FinishReason::TranscriptLimit,
            FinishReason::PlanPending,
            FinishReason::Cancelled,
            FinishReason::PermissionDenialLimit,
            FinishReason::WallClockExceeded,
            FinishReason::TokenBudgetExceeded,
            FinishReason::CostBudgetExceeded,
            FinishReason::CallBudgetExceeded,
            FinishReason::Completed,
            FinishReason::NotAchieved,
            FinishReason::NoAnswer,
            FinishReason::Fault,
            FinishReason::Interrupted,
            FinishReason::RecursionLimit,
            FinishReason::ClientToolCalls,
        ];
        if name == "provider_stop" {
            return Some(FinishReason::ProviderStop(crate::provider::StopReason::Other(String::new())));
        }
        ALL.iter().find(|r| r.as_str() == name).cloned()
    }

    /// The process exit status the CLI uses for this reason (0 only for a normal finish).
    pub fn exit_code(&self) -> i32 {
        match self {
            FinishReason::NoMoreToolCalls | FinishReason::Completed | FinishReason::ClientToolCalls => 0,
            FinishReason::Fault => 1,
            FinishReason::BudgetExceeded => 3,
            FinishReason::ProviderStop(_) => 4,
            FinishReason::Stuck => 5,
            FinishReason::TranscriptLimit => 6,
            FinishReason::PlanPending => 7,
            FinishReason::Cancelled => 8,
            FinishReason::PermissionDenialLimit => 9,
            FinishReason::WallClockExceeded => 10,
            FinishReason::TokenBudgetExceeded => 11,
            FinishReason::CostBudgetExceeded => 12,
            FinishReason::NotAchieved => 13,
            FinishReason::NoAnswer => 14,
            FinishReason::CallBudgetExceeded => 15,
            FinishReason::Interrupted => 16,
            FinishReason::RecursionLimit => 17,
        }
    }

    /// Whether the run did what was asked.
    pub fn is_success(&self) -> bool {
        matches!(self, FinishReason::NoMoreToolCalls | FinishReason::Completed | FinishReason::ClientToolCalls)
    }

    /// Whether a limit of the run tree (budget, wall clock) or cancellation ended the run, as
    /// opposed to the run's own logic.
    pub fn is_tree_stop(&self) -> bool {
        matches!(
            self,
            FinishReason::Cancelled
                | FinishReason::WallClockExceeded
                | FinishReason::TokenBudgetExceeded
                | FinishReason::CostBudgetExceeded
                | FinishReason::CallBudgetExceeded
        )
    }
}

impl std::fmt::Display for FinishReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FinishReason::ProviderStop(r) => write!(f, "provider_stop({r})"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Serde for a finish reason as its bare name (`"cancelled"`), for APIs that show it as a
/// string: `#[serde(with = "recursive_core::run::finish_name")]`.
pub mod finish_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::FinishReason;

    /// Writes the name.
    pub fn serialize<S: Serializer>(reason: &FinishReason, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(reason.as_str())
    }

    /// Reads a name.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<FinishReason, D::Error> {
        let name = String::deserialize(d)?;
        FinishReason::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown finish reason `{name}`")))
    }
}

/// Usage and cost of a run including all its descendants.
#[derive(Debug, Default)]
pub struct Totals {
    inner: Mutex<(Usage, f64)>,
}

impl Totals {
    fn add(&self, usage: &Usage, cost: f64) {
        if let Ok(mut g) = self.inner.lock() {
            g.0.add(usage);
            g.1 += cost;
        }
    }

    /// Usage so far.
    pub fn usage(&self) -> Usage {
        self.inner.lock().map(|g| g.0).unwrap_or_default()
    }

    /// USD so far.
    pub fn cost_usd(&self) -> f64 {
        self.inner.lock().map(|g| g.1).unwrap_or_default()
    }
}

/// A call would go deeper than the tree allows.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("depth limit reached: `{name}` would run at depth {depth}, beyond max_depth {max_depth}")]
pub struct DepthError {
    /// The child that was refused.
    pub name: String,
    /// The depth it would have had.
    pub depth: u32,
    /// The limit.
    pub max_depth: u32,
}

/// One node of the run tree.
#[derive(Clone)]
pub struct RunScope {
    ids: RunIds,
    sink: Arc<dyn EventSink>,
    budget: Arc<Budget>,
    cancel: CancellationToken,
    totals: Arc<Totals>,
    parent: Option<Arc<RunScope>>,
    max_depth: u32,
    steps: Arc<std::sync::atomic::AtomicU32>,
    journal: Option<Arc<crate::journal::RunJournal>>,
}

impl std::fmt::Debug for RunScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunScope").field("ids", &self.ids).field("max_depth", &self.max_depth).finish()
    }
}

/// Default cap on run-tree depth.
pub const DEFAULT_MAX_DEPTH: u32 = 8;

impl RunScope {
    /// A root run (depth 0) named `{name}-d0`.
    pub fn root(name: &str, sink: Arc<dyn EventSink>, budget: Arc<Budget>) -> Self {
        let id = new_run_id();
        Self {
            ids: RunIds {
                run_id: id.clone(),
                parent_run_id: None,
                root_run_id: id,
                depth: 0,
                name: format!("{name}-d0"),
            },
            sink,
            budget,
            cancel: CancellationToken::new(),
            totals: Arc::new(Totals::default()),
            parent: None,
            max_depth: DEFAULT_MAX_DEPTH,
            steps: Arc::default(),
            journal: None,
        }
    }

    /// A root run with no sink and no limits (tests, quick library use).
    pub fn detached(name: &str) -> Self {
        Self::root(name, Arc::new(NullSink), Arc::new(Budget::unlimited()))
    }

    /// Sets the depth cap for this node and its descendants.
    pub fn with_max_depth(mut self, max_depth: u32) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// Uses this cancellation token (children get child tokens of it).
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// A child one level deeper, named `{name}-d{depth}`; fails before anything runs when the
    /// depth cap would be passed.
    pub fn child(&self, name: &str) -> Result<RunScope, DepthError> {
        let depth = self.ids.depth + 1;
        self.child_named(format!("{name}-d{depth}"))
    }

    /// A child with an exact readable name (e.g. `{name}-t{turn}-d{depth}`).
    pub fn child_named(&self, full_name: String) -> Result<RunScope, DepthError> {
        let depth = self.ids.depth + 1;
        if depth > self.max_depth {
            return Err(DepthError { name: full_name, depth, max_depth: self.max_depth });
        }
        Ok(RunScope {
            ids: RunIds {
                run_id: new_run_id(),
                parent_run_id: Some(self.ids.run_id.clone()),
                root_run_id: self.ids.root_run_id.clone(),
                depth,
                name: full_name,
            },
            sink: self.sink.clone(),
            budget: self.budget.clone(),
            cancel: self.cancel.child_token(),
            totals: Arc::new(Totals::default()),
            parent: Some(Arc::new(self.clone())),
            max_depth: self.max_depth,
            steps: Arc::default(),
            journal: self.journal.clone(),
        })
    }

    /// A child whose budget is carved from this node's: `limits` apply to everything spent
    /// under the child, and this node's limits still apply (the child can only be narrower).
    pub fn child_with_budget(&self, name: &str, limits: BudgetLimits) -> Result<RunScope, DepthError> {
        let mut child = self.child(name)?;
        child.budget = self.budget.child(limits);
        Ok(child)
    }

    /// This node with its own narrower budget (same ids): for a library caller that wants a
    /// limit on the part of the tree it runs, without another level of nesting.
    pub fn with_budget(mut self, limits: BudgetLimits) -> Self {
        self.budget = self.budget.child(limits);
        self
    }

    /// This node with a budget level whose model calls (this node's and every descendant's)
    /// record their spend in `ledger` ahead of each call (same ids): for a durable host.
    pub fn with_ledger(mut self, ledger: Arc<dyn crate::spend::SpendLedger>) -> Self {
        self.budget = self.budget.child_with_ledger(BudgetLimits::default(), ledger);
        self
    }

    /// This node journaled ([`crate::journal`]): its model and tool calls, and those of every
    /// node under it, are recorded in `journal` (whose ledger also holds their spend, as
    /// [`RunScope::with_ledger`]), and answered from it where the run being resumed finished
    /// them.
    pub fn with_journal(self, journal: Arc<crate::journal::RunJournal>) -> Self {
        let mut scope = self.with_ledger(journal.ledger());
        scope.journal = Some(journal);
        scope
    }

    /// The journal of the durable run this node belongs to, if any.
    pub fn journal(&self) -> Option<&Arc<crate::journal::RunJournal>> {
        self.journal.as_ref()
    }

    /// Starts this node from what earlier processes of a durable run spent (a ledger's total):
    /// recorded into the budget tree and into the totals of this node and every ancestor.
    pub fn restore_spend(&self, spent: &crate::spend::SpendTotal) {
        self.record_usage(&spent.usage, Some(spent.usd()));
    }

    /// The next step number of this node (1, 2, …), for a node whose model and tool calls are
    /// not numbered by a loop of its own (a goal's phases, a graph's nodes).
    pub fn next_step(&self) -> u32 {
        self.steps.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }

    /// The node this one is a child of (`None` at the root).
    pub fn parent(&self) -> Option<&RunScope> {
        self.parent.as_deref()
    }

    /// This node's ids.
    pub fn ids(&self) -> &RunIds {
        &self.ids
    }

    /// Depth of this node.
    pub fn depth(&self) -> u32 {
        self.ids.depth
    }

    /// The depth cap.
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }

    /// The tree's sink.
    pub fn sink(&self) -> &Arc<dyn EventSink> {
        &self.sink
    }

    /// The tree's budget.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// This node's cancellation token.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Emits an event tagged with this node's ids.
    pub fn emit(&self, step: u32, kind: EventKind) {
        self.sink.emit(&AgentEvent { timestamp: Utc::now(), ids: self.ids.clone(), step, kind });
    }

    /// Records usage of a model call made by this node: into the tree's budget and into the
    /// totals of this node and every ancestor.
    pub fn record_usage(&self, usage: &Usage, cost_usd: Option<f64>) {
        self.budget.record(usage, cost_usd);
        let cost = cost_usd.unwrap_or(0.0);
        let mut node = Some(self);
        while let Some(n) = node {
            n.totals.add(usage, cost);
            node = n.parent.as_deref();
        }
    }

    /// Accounts for one model call made by this node: records its usage and cost (budget and
    /// every ancestor's totals) and emits the `Usage` event.
    pub fn record_response(&self, step: u32, response: &crate::provider::ChatResponse) {
        self.record_call(step, response, None);
    }

    /// [`Self::record_response`] with what is known of the call made.
    fn record_call(
        &self,
        step: u32,
        response: &crate::provider::ChatResponse,
        call: Option<crate::event::ModelCallInfo>,
    ) {
        self.record_usage(&response.usage, response.cost_usd);
        let model = response.model.clone();
        self.emit(step, EventKind::Usage { usage: response.usage, cost_usd: response.cost_usd, model, call });
    }

    /// The one guarded model call of the run tree. Before the call: cancellation and the
    /// budget tree (tokens, USD, wall clock) are checked and one model call is reserved (unless
    /// [`ModelCall::reserved`] says the caller reserved it, e.g. for a whole batch). During it:
    /// cancellation, the tree's deadline and the caller's own deadline cut it off; retries and
    /// (with [`ModelCall::stream_text`]) text deltas become events. After it: usage and cost are
    /// recorded at every level and a `Usage` event is emitted. A provider fault emits an
    /// `Error` event and is returned.
    ///
    /// Under a budget node with a spend ledger ([`crate::spend`]), the call's cost hold is
    /// written there before the request is sent (a hold that cannot be written stops the call)
    /// and settled after, so its spend survives a kill of the process. In a journaled run
    /// ([`RunScope::with_journal`]) a request the resumed run already had answered is answered
    /// from the journal, with nothing sent, held or counted again; a new answer is recorded.
    pub async fn call_model(
        &self,
        provider: &dyn ChatProvider,
        mut request: ChatRequest,
        call: ModelCall,
    ) -> Result<ChatResponse, ModelCallError> {
        if let Some(reason) = self.stop_reason() {
            return Err(ModelCallError::Stopped(reason));
        }
        let key = self.journal.as_ref().map(|_| crate::journal::request_key(&request));
        if let Some(answer) = self.journal.as_ref().zip(key.as_deref()).and_then(|(j, k)| j.replay_answer(k)) {
            // Answered before the kill: its spend was restored with the run's.
            return Ok(answer);
        }
        // One prompt-cache key per run tree: its calls share prefixes (a system prompt, an input).
        if request.options.prompt_cache_key.is_none() {
            request.options.prompt_cache_key = Some(self.ids.root_run_id.clone());
        }
        let price = provider.price(&request);
        if let CallPrice::Unknown { model } = &price
            && self.budget.caps_cost()
        {
            let refused = ProviderError::Unpriced { model: model.clone() };
            self.emit(call.step, EventKind::Error { message: refused.to_string() });
            return Err(ModelCallError::Provider(refused));
        }
        if !call.reserved {
            self.budget.reserve_calls(1).map_err(ModelCallError::Stopped)?;
        }
        let estimate = match price {
            CallPrice::Estimate(estimate) => Some(estimate),
            _ => None,
        };
        // Held until the call's real cost is recorded (the end of this function).
        let _held = match estimate {
            Some(estimate) => Some(self.hold_cost(estimate, call.deadline).await?),
            None => None,
        };
        let written = self.write_hold(call.step, estimate.unwrap_or(0.0)).await?;
        let result = self.send(provider, request, call).await;
        if let Some(id) = written {
            self.write_settle(call.step, &id, &result).await;
        }
        if let (Some(journal), Some(key), Ok(response)) = (&self.journal, &key, &result)
            && let Err(e) = journal.record_answer(key, response).await
        {
            let message = format!("the run's journal could not record a model call's answer: {e}");
            self.emit(call.step, EventKind::Error { message });
        }
        result
    }

    /// Writes the hold of a call about to be sent to the ledgers of the budget tree (none: no
    /// record, `None`). A hold that cannot be written keeps the call from being sent, since
    /// its spend would not survive a kill.
    async fn write_hold(&self, step: u32, estimate: f64) -> Result<Option<String>, ModelCallError> {
        if !self.budget.has_ledger() {
            return Ok(None);
        }
        let id = new_run_id();
        match self.budget.write_hold(&id, estimate).await {
            Ok(()) => Ok(Some(id)),
            Err(e) => {
                let refused = ProviderError::Invalid(format!(
                    "the spend ledger could not record this model call's cost hold, so the call was not sent: {e}"
                ));
                self.emit(step, EventKind::Error { message: refused.to_string() });
                Err(ModelCallError::Provider(refused))
            }
        }
    }

    /// Settles a call's hold in the ledgers: its cost as the budget counted it (0 for a call that
    /// failed or was cut off). A settlement that cannot be written leaves the hold counted.
    async fn write_settle(&self, step: u32, id: &str, result: &Result<ChatResponse, ModelCallError>) {
        let (usage, cost) = match result {
            Ok(r) => (r.usage, r.cost_usd.unwrap_or(0.0)),
            Err(_) => (Usage::default(), 0.0),
        };
        if let Err(e) = self.budget.write_settle(id, &usage, cost).await {
            let message = format!("the spend ledger could not settle a model call (its hold stays counted): {e}");
            self.emit(step, EventKind::Error { message });
        }
    }

    /// Sends a call the budget granted: streams it under cancellation and the deadlines, and
    /// records its usage and cost.
    async fn send(
        &self,
        provider: &dyn ChatProvider,
        request: ChatRequest,
        call: ModelCall,
    ) -> Result<ChatResponse, ModelCallError> {
        let step = call.step;
        let started = std::time::Instant::now();
        let request_model = request.options.model.clone();
        let work = async {
            let mut stream = provider.stream(request).await?;
            while let Some(event) = stream.next().await {
                match event? {
                    StreamEvent::TextDelta(delta) if call.stream_text => {
                        self.emit(step, EventKind::PartialText { delta })
                    }
                    StreamEvent::TextDelta(_) => {}
                    StreamEvent::ReasoningDelta(delta) if call.stream_text => {
                        self.emit(step, EventKind::PartialReasoning { delta })
                    }
                    StreamEvent::ReasoningDelta(_) => {}
                    StreamEvent::Retry { attempt, delay_ms, reason } => {
                        self.emit(step, EventKind::Retry { attempt, delay_ms, reason })
                    }
                    StreamEvent::Completed(r) => return Ok(r),
                }
            }
            Err(ProviderError::Truncated {
                provider: provider.name().to_string(),
                message: "stream ended without a final response".into(),
            })
        };
        let deadline = earliest(self.budget.deadline(), call.deadline);
        let timed = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d.into(), work).await.ok(),
                None => Some(work.await),
            }
        };
        let result = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(ModelCallError::Stopped(FinishReason::Cancelled)),
            r = timed => r,
        };
        match result {
            None => Err(ModelCallError::Stopped(FinishReason::WallClockExceeded)),
            Some(Err(e)) => {
                self.emit(step, EventKind::Error { message: e.to_string() });
                Err(ModelCallError::Provider(e))
            }
            Some(Ok(response)) => {
                let info = crate::event::ModelCallInfo {
                    provider: provider.name().to_string(),
                    request_model,
                    duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    stop_reason: response.stop_reason.to_string(),
                };
                self.record_call(step, &response, Some(info));
                Ok(response)
            }
        }
    }

    /// Holds a call's estimated cost against the USD caps, waiting while calls in flight hold
    /// too much (until cancellation or a deadline).
    async fn hold_cost(
        &self,
        estimate: f64,
        deadline: Option<std::time::Instant>,
    ) -> Result<crate::budget::CostHold, ModelCallError> {
        let deadline = earliest(self.budget.deadline(), deadline);
        loop {
            let released = self.budget.released().notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.budget.hold_cost(estimate) {
                Ok(hold) => return Ok(hold),
                Err(crate::budget::HoldRefused::Stop(reason)) => return Err(ModelCallError::Stopped(reason)),
                Err(crate::budget::HoldRefused::Busy) => {}
            }
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(ModelCallError::Stopped(FinishReason::Cancelled)),
                _ = timeout => return Err(ModelCallError::Stopped(FinishReason::WallClockExceeded)),
                _ = released => {}
            }
        }
    }

    /// A token that fires when this node is cancelled *or* when the tree's deadline passes:
    /// for work that only understands cancellation (a sandboxed snippet, a graph function
    /// node), so the wall clock ends it too. The run then learns why from
    /// [`RunScope::stop_reason`]. The timer stops when the token is dropped.
    pub fn stop_token(&self) -> StopToken {
        let token = self.cancel.child_token();
        let timer = self.budget.deadline().map(|deadline| {
            let fire = token.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = fire.cancelled() => {}
                    _ = tokio::time::sleep_until(deadline.into()) => fire.cancel(),
                }
            })
            .abort_handle()
        });
        StopToken { token, timer }
    }

    /// Usage of this node including descendants.
    pub fn usage(&self) -> Usage {
        self.totals.usage()
    }

    /// USD cost of this node including descendants.
    pub fn cost_usd(&self) -> f64 {
        self.totals.cost_usd()
    }

    /// Why this node must stop now, if it must: cancellation or an exhausted tree budget.
    pub fn stop_reason(&self) -> Option<FinishReason> {
        if self.cancel.is_cancelled() {
            return Some(FinishReason::Cancelled);
        }
        self.budget.exhausted()
    }
}

/// A cancellation token that also fires at the tree's deadline (see [`RunScope::stop_token`]).
#[derive(Debug)]
pub struct StopToken {
    token: CancellationToken,
    timer: Option<tokio::task::AbortHandle>,
}

impl std::ops::Deref for StopToken {
    type Target = CancellationToken;

    fn deref(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for StopToken {
    fn drop(&mut self) {
        if let Some(timer) = &self.timer {
            timer.abort();
        }
    }
}

/// How one guarded model call is made (see [`RunScope::call_model`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelCall {
    /// The caller's step, for events.
    pub step: u32,
    /// The caller's own deadline; the earlier of it and the tree's applies.
    pub deadline: Option<Instant>,
    /// Emit text deltas as `PartialText` events.
    pub stream_text: bool,
    /// The caller already reserved this call on the budget (e.g. for a whole batch).
    pub reserved: bool,
}

impl ModelCall {
    /// A call at this step, with no deadline of its own.
    pub fn at(step: u32) -> Self {
        Self { step, ..Default::default() }
    }
}

/// Why a guarded model call produced no response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelCallError {
    /// The run tree must stop (cancellation, a budget, the wall clock); no call was made, or
    /// it was cut off.
    #[error("stopped: {0}")]
    Stopped(FinishReason),
    /// The provider failed after its retries.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// A fresh unique run id.
pub fn new_run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_is_one_level_deeper_and_shares_root() {
        let root = RunScope::detached("main");
        let child = root.child("helper").unwrap();
        assert_eq!(child.ids().depth, 1);
        assert_eq!(child.ids().name, "helper-d1");
        assert_eq!(child.ids().root_run_id, root.ids().run_id);
        assert_eq!(child.ids().parent_run_id.as_deref(), Some(root.ids().run_id.as_str()));
    }

    #[test]
    fn child_past_max_depth_is_refused() {
        let root = RunScope::detached("main").with_max_depth(1);
        let child = root.child("a").unwrap();
        let err = child.child("b").unwrap_err();
        assert_eq!(err.depth, 2);
        assert_eq!(err.max_depth, 1);
    }

    #[test]
    fn usage_rolls_up_to_every_ancestor() {
        let root = RunScope::detached("main");
        let c1 = root.child("a").unwrap();
        let c2 = c1.child("b").unwrap();
        let u = Usage { input_tokens: 5, output_tokens: 7, ..Default::default() };
        c2.record_usage(&u, Some(0.5));
        root.record_usage(&u, Some(0.25));
        assert_eq!(c2.usage().total(), 12);
        assert_eq!(c1.usage().total(), 12);
        assert_eq!(root.usage().total(), 24);
        assert!((root.cost_usd() - 0.75).abs() < 1e-9);
        assert_eq!(root.budget().tokens_used(), 24);
    }

    #[test]
    fn exhausted_token_budget_is_reported() {
        let budget = Arc::new(Budget::new(BudgetLimits { max_tokens: Some(10), ..Default::default() }));
        let root = RunScope::root("m", Arc::new(NullSink), budget);
        assert_eq!(root.stop_reason(), None);
        root.record_usage(&Usage { input_tokens: 10, ..Default::default() }, None);
        assert_eq!(root.stop_reason(), Some(FinishReason::TokenBudgetExceeded));
    }

    #[test]
    fn finish_reasons_serialize_under_their_printed_names() {
        for r in [FinishReason::Fault, FinishReason::NotAchieved, FinishReason::Cancelled, FinishReason::Completed] {
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(v["kind"], r.as_str());
        }
    }

    #[tokio::test]
    async fn the_stop_token_fires_at_the_trees_deadline() {
        let limits = BudgetLimits { wall_clock: Some(std::time::Duration::from_millis(50)), ..Default::default() };
        let root = RunScope::root("m", Arc::new(NullSink), Arc::new(Budget::new(limits)));
        let token = root.stop_token();
        tokio::time::timeout(std::time::Duration::from_secs(5), token.cancelled()).await.unwrap();
        assert!(!root.cancel_token().is_cancelled(), "the run itself is not cancelled");
        assert_eq!(root.stop_reason(), Some(FinishReason::WallClockExceeded));
    }

    #[test]
    fn every_finish_reason_reads_back_from_its_name() {
        for r in [FinishReason::Fault, FinishReason::Cancelled, FinishReason::RecursionLimit, FinishReason::Completed] {
            assert_eq!(FinishReason::from_name(r.as_str()), Some(r));
        }
        assert_eq!(FinishReason::from_name("provider_stop").map(|r| r.exit_code()), Some(4));
        assert_eq!(FinishReason::from_name("nonsense"), None);
    }

    /// A paid API whose price for every model is unknown, answering from a mock.
    struct Unpriced(crate::mock::MockProvider);

    #[async_trait::async_trait]
    impl ChatProvider for Unpriced {
        fn name(&self) -> &str {
            "unpriced"
        }

        fn price(&self, request: &ChatRequest) -> CallPrice {
            CallPrice::Unknown { model: request.options.model.clone() }
        }

        async fn stream(&self, request: ChatRequest) -> Result<crate::provider::ChatStream, ProviderError> {
            self.0.stream(request).await
        }
    }

    fn unpriced_request() -> ChatRequest {
        ChatRequest {
            messages: vec![crate::message::Message::user("hi")],
            tools: Vec::new(),
            options: crate::provider::ChatOptions { model: "their-new-model".into(), ..Default::default() },
        }
    }

    #[tokio::test]
    async fn a_call_without_a_price_is_refused_under_a_usd_cap_and_never_sent() {
        let mock = crate::mock::MockProvider::new([crate::mock::MockReply::text("answer")]);
        let provider = Unpriced(mock.clone());
        let limits = BudgetLimits { max_cost_usd: Some(0.05), ..Default::default() };
        let root = RunScope::root("m", Arc::new(NullSink), Arc::new(Budget::new(limits)));
        let child = root.child("c").unwrap();
        let err = child.call_model(&provider, unpriced_request(), ModelCall::at(1)).await.unwrap_err();
        let ModelCallError::Provider(ProviderError::Unpriced { model }) = &err else { panic!("{err:?}") };
        assert_eq!(model, "their-new-model");
        assert!(err.to_string().contains("[pricing.\"their-new-model\"]"), "{err}");
        assert!(mock.requests().is_empty(), "nothing was sent");
        assert_eq!(root.budget().calls_used(), 0, "no call was counted");
    }

    #[tokio::test]
    async fn a_call_without_a_price_goes_out_when_no_usd_cap_applies() {
        let mock = crate::mock::MockProvider::new([crate::mock::MockReply::text("answer")]);
        let provider = Unpriced(mock.clone());
        let limits = BudgetLimits { max_tokens: Some(1_000), ..Default::default() };
        let root = RunScope::root("m", Arc::new(NullSink), Arc::new(Budget::new(limits)));
        let response = root.call_model(&provider, unpriced_request(), ModelCall::at(1)).await.unwrap();
        assert_eq!(response.message.content, "answer");
        assert_eq!(mock.requests().len(), 1);
    }

    /// A priced API answering from a mock, or never (`hang`), that notes what the ledger held
    /// at the moment each request went out.
    struct Ledgered {
        mock: crate::mock::MockProvider,
        ledger: Arc<crate::spend::MemorySpendLedger>,
        seen_at_send: Mutex<Vec<Vec<crate::spend::SpendRecord>>>,
        sent: tokio::sync::Notify,
        hang: bool,
    }

    #[async_trait::async_trait]
    impl ChatProvider for Ledgered {
        fn name(&self) -> &str {
            "ledgered"
        }

        fn price(&self, _request: &ChatRequest) -> CallPrice {
            CallPrice::Estimate(0.05)
        }

        async fn stream(&self, request: ChatRequest) -> Result<crate::provider::ChatStream, ProviderError> {
            self.seen_at_send.lock().unwrap().push(self.ledger.records());
            self.sent.notify_one();
            if self.hang {
                std::future::pending::<()>().await;
            }
            self.mock.stream(request).await
        }
    }

    fn ledgered(hang: bool) -> (Arc<Ledgered>, RunScope) {
        let ledger = Arc::new(crate::spend::MemorySpendLedger::default());
        let reply = crate::mock::MockReply::Response(ChatResponse {
            message: crate::message::Message::assistant("answer"),
            stop_reason: crate::provider::StopReason::EndTurn,
            usage: Usage { input_tokens: 100, output_tokens: 20, ..Default::default() },
            cost_usd: Some(0.02),
            model: "m".into(),
        });
        let provider = Arc::new(Ledgered {
            mock: crate::mock::MockProvider::new([reply]),
            ledger: ledger.clone(),
            seen_at_send: Mutex::default(),
            sent: tokio::sync::Notify::new(),
            hang,
        });
        let scope = RunScope::detached("m").with_ledger(ledger);
        (provider, scope)
    }

    #[tokio::test]
    async fn a_calls_hold_is_written_before_the_request_is_sent_and_settled_after() {
        use crate::spend::SpendRecord;
        let (provider, scope) = ledgered(false);
        let child = scope.child("c").unwrap();
        child.call_model(provider.as_ref(), unpriced_request(), ModelCall::at(1)).await.unwrap();
        let seen = provider.seen_at_send.lock().unwrap().clone();
        let [SpendRecord::Hold { call, usd, .. }] = seen[0].as_slice() else { panic!("{seen:?}") };
        assert_eq!(*usd, 0.05, "the estimate is held");
        let records = provider.ledger.records();
        assert_eq!(records.len(), 2, "{records:?}");
        let SpendRecord::Settle { call: settled, usd, usage, .. } = &records[1] else { panic!("{records:?}") };
        assert_eq!((settled, *usd, usage.total()), (call, 0.02, 120));
        assert_eq!(provider.ledger.total().unsettled_calls, 0);
    }

    #[tokio::test]
    async fn a_journaled_request_answered_before_a_kill_is_read_back_and_not_sent_or_counted() {
        use crate::journal::RunJournal;
        let (provider, _) = ledgered(false);
        let ledger = Arc::new(crate::spend::MemorySpendLedger::default());
        let killed = RunScope::detached("m").with_journal(Arc::new(RunJournal::new(ledger.clone(), &[])));
        let child = killed.child("c").unwrap();
        let first = child.call_model(provider.as_ref(), unpriced_request(), ModelCall::at(1)).await.unwrap();
        let resumed =
            RunScope::detached("m").with_journal(Arc::new(RunJournal::new(ledger.clone(), &ledger.records())));
        let child = resumed.child("c").unwrap();
        let again = child.call_model(provider.as_ref(), unpriced_request(), ModelCall::at(1)).await.unwrap();
        assert_eq!(again, first);
        assert_eq!(provider.mock.request_count(), 1, "sent once");
        assert_eq!(resumed.cost_usd(), 0.0, "its spend comes back with the run's restore, not twice");
        assert_eq!(ledger.total().settled_calls, 1, "nothing held or settled again");
    }

    #[tokio::test]
    async fn a_call_that_never_answers_leaves_its_hold_counted_and_a_restore_sums_it() {
        let (provider, scope) = ledgered(true);
        let calling = {
            let (provider, scope) = (provider.clone(), scope.clone());
            tokio::spawn(async move { scope.call_model(provider.as_ref(), unpriced_request(), ModelCall::at(1)).await })
        };
        provider.sent.notified().await;
        // The process ends here (a kill): the call never returns, nothing settles it.
        calling.abort();
        let _ = calling.await;
        let total = provider.ledger.total();
        assert_eq!((total.settled_calls, total.unsettled_calls, total.usd()), (0, 1, 0.05));

        let limits = BudgetLimits { max_cost_usd: Some(0.06), ..Default::default() };
        let resumed = RunScope::root("m", Arc::new(NullSink), Arc::new(Budget::new(limits)));
        resumed.restore_spend(&total);
        assert_eq!((resumed.budget().cost_used(), resumed.cost_usd()), (0.05, 0.05));
        assert!(resumed.budget().hold_cost(0.05).is_ok(), "a lone call may still start under the cap");
    }

    #[tokio::test]
    async fn a_hold_that_cannot_be_written_keeps_the_call_from_being_sent() {
        #[derive(Debug)]
        struct Broken;
        #[async_trait::async_trait]
        impl crate::spend::SpendLedger for Broken {
            async fn record(&self, _: &crate::spend::SpendRecord) -> std::io::Result<()> {
                Err(std::io::Error::other("disk full"))
            }
        }
        let (provider, _) = ledgered(false);
        let scope = RunScope::detached("m").with_ledger(Arc::new(Broken));
        let err = scope.call_model(provider.as_ref(), unpriced_request(), ModelCall::at(1)).await.unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert!(provider.seen_at_send.lock().unwrap().is_empty(), "nothing was sent");
    }

    #[tokio::test]
    async fn every_call_of_a_run_tree_shares_one_prompt_cache_key_unless_the_caller_sets_one() {
        let mock = crate::mock::MockProvider::new(["a", "b", "c"].map(crate::mock::MockReply::text));
        let root = RunScope::detached("m");
        let child = root.child("c").unwrap();
        let request = |key: Option<&str>| ChatRequest {
            messages: vec![crate::message::Message::user("hi")],
            tools: Vec::new(),
            options: crate::provider::ChatOptions { prompt_cache_key: key.map(String::from), ..Default::default() },
        };
        root.call_model(&mock, request(None), ModelCall::at(1)).await.unwrap();
        child.call_model(&mock, request(None), ModelCall::at(1)).await.unwrap();
        child.call_model(&mock, request(Some("mine")), ModelCall::at(2)).await.unwrap();
        let keys: Vec<_> = mock.requests().into_iter().map(|r| r.options.prompt_cache_key).collect();
        let tree = Some(root.ids().root_run_id.clone());
        assert_eq!(keys, vec![tree.clone(), tree, Some("mine".to_string())]);
    }

    #[test]
    fn cancelling_parent_cancels_child() {
        let root = RunScope::detached("m");
        let child = root.child("c").unwrap();
        root.cancel_token().cancel();
        assert_eq!(child.stop_reason(), Some(FinishReason::Cancelled));
    }
}

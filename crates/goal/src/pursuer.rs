//! The pursuit loop. One function pursues a goal at any depth: check constraints and cycles,
//! **assess** (directly executable?), then either **execute** the chosen action (its output
//! digested to a bounded result, the raw output kept in the log) or **decompose** into
//! sub-goals and pursue them (the `tree` module: dependency layers, achieved checks, rounds for
//! the remaining gaps, synthesis). Every prompt is assembled within the prompt budget
//! ([`crate::assemble`]) from text that does not depend on timing, so a recorded pursuit
//! replays; a pursuit can resume from its log ([`crate::resume`]) without repeating finished
//! goals.
//!
//! A pursuit carves its node of the budget tree from the caller's (`max_cost_usd`, `max_time`),
//! so every model call of every goal — also of goals running concurrently — is checked against
//! the constraints before it is made. Each goal runs in its own child [`RunScope`] named
//! `goal-d{depth}`, so usage and cost roll up; every event goes to the execution log and, as a
//! typed [`GoalRunEvent`], to the run tree's event stream; each goal's node ends with a
//! `run_finished` event.
//!
//! A goal's status is honest: a goal whose sub-goals mostly failed is `failed`, one whose
//! synthesis was cut short by a limit or cancellation is `constrained`, and a provider fault
//! that ended a goal is kept in [`GoalOutcome::fault`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use recursive_core::journal::RunJournal;
use recursive_core::spend::ledger_path_beside;
use recursive_core::{
    BudgetLimits, ChatProvider, ChatRequest, EventKind, Extension, FinishReason, JsonlSpendLedger, Message, ModelCall,
    ModelCallError, ResponseFormat, RunScope, SpendLedger, SpendTotal, ToolInvoker,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::actions::{ActionError, ActionRegistry, ActionRequest};
use crate::assemble::Prompt;
use crate::config::GoalConfig;
use crate::context::{Evidence, GoalContext};
use crate::log::{ExecutionLog, GoalEvent, GoalEventKind, GoalRunEvent};
use crate::outcome::{GoalOutcome, GoalResult, GoalStatus};
use crate::prompts::{self, Phase};
use crate::resume::{PURSUIT_COST, PURSUIT_TOKENS, ResumeLog};
use crate::similarity::{CycleKind, CycleMatch, Embedder, cosine, find_text_cycle, normalize, text_similarity};
use crate::structured::{ActionPlan, Assessment, output_schema, parse_lenient};

/// A fault that stopped a pursuit before it began. Limits, failed goals and unusable model
/// replies are not errors: they are statuses in the outcome tree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoalError {
    /// The objective is empty.
    #[error("the objective is empty")]
    EmptyObjective,
    /// The execution log could not be opened.
    #[error("goal log: {0}")]
    Log(#[from] std::io::Error),
    /// The log to resume from holds no pursuit.
    #[error("{0}")]
    Resume(String),
}

/// Called with every goal event as it happens (e.g. to draw a live goal tree).
pub type GoalObserver = Arc<dyn Fn(&GoalEvent) + Send + Sync>;

/// Pursues goals recursively with one provider, a tool registry and a set of action types.
pub struct GoalPursuer {
    pub(crate) provider: Arc<dyn ChatProvider>,
    pub(crate) config: GoalConfig,
    actions: ActionRegistry,
    log: Arc<ExecutionLog>,
    embedder: Option<Arc<dyn Embedder>>,
    observer: Option<GoalObserver>,
    pursuits: AtomicU64,
    embeddings: Mutex<HashMap<String, Vec<f32>>>,
    /// The budget of each pursuit under way, by its root goal id (for the running totals every
    /// logged event carries).
    spending: Mutex<HashMap<String, Arc<recursive_core::Budget>>>,
    /// Where the pursuit's model calls write their spend ahead (beside the log file).
    ledger: Option<Arc<dyn SpendLedger>>,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
}

impl std::fmt::Debug for GoalPursuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoalPursuer").field("config", &self.config).field("actions", &self.actions).finish()
    }
}

/// State shared by every goal of one pursuit.
pub(crate) struct Pursuit {
    objective: String,
    started: Instant,
    /// The caller's scope with the pursuit's own budget node (cost and time constraints).
    scope: RunScope,
    goal_count: AtomicUsize,
    /// What an earlier, interrupted attempt of this pursuit finished and decided.
    pub(crate) resume: Option<ResumeLog>,
    /// Goals achieved in this pursuit so far: a goal planned again is not pursued again.
    solved: Mutex<Vec<GoalOutcome>>,
}

impl Pursuit {
    fn cost(&self) -> f64 {
        self.scope.budget().cost_used()
    }
}

/// One goal about to be pursued.
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) goal: String,
    pub(crate) parent: Option<(String, String)>,
    /// The goals above it, root first.
    pub(crate) stack: Vec<String>,
    /// The goals already planned around it (its ancestors' plans), in plan order — the same on
    /// every run, whatever finished first.
    pub(crate) known: Vec<String>,
    pub(crate) evidence: Vec<Evidence>,
    pub(crate) depth: u32,
}

/// Why a structured phase produced nothing usable.
pub(crate) enum PhaseError {
    Stopped(FinishReason),
    Provider(String),
    Invalid(String),
}

impl PhaseError {
    pub(crate) fn status_and_reason(&self, phase: Phase) -> (GoalStatus, String) {
        match self {
            PhaseError::Stopped(r) => (GoalStatus::Constrained, format!("run tree stopped: {r}")),
            PhaseError::Provider(e) => (GoalStatus::Failed, format!("{} failed: {e}", phase.as_str())),
            PhaseError::Invalid(e) => (GoalStatus::Failed, format!("{}: unusable model reply: {e}", phase.as_str())),
        }
    }
}

/// Timing and placement of a goal, for building its outcome.
pub(crate) struct Frame<'a> {
    pub(crate) node: &'a Node,
    pub(crate) scope: Option<&'a RunScope>,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) t0: Instant,
}

impl GoalPursuer {
    /// A pursuer with the standard action types (`tool` when `tools` has any, `analyze`,
    /// `synthesize`) and an in-memory log. Tool calls go through `tools` (its permission
    /// gate and limits).
    pub fn new(provider: Arc<dyn ChatProvider>, tools: ToolInvoker, config: GoalConfig) -> Self {
        let actions = ActionRegistry::standard(provider.clone(), tools, config.options.clone());
        Self {
            provider,
            config,
            actions,
            log: Arc::new(ExecutionLog::in_memory()),
            embedder: None,
            observer: None,
            pursuits: AtomicU64::new(0),
            embeddings: Mutex::new(HashMap::new()),
            spending: Mutex::new(HashMap::new()),
            ledger: None,
            name: "goal".into(),
            description: None,
        }
    }

    /// Names this pursuer as a runnable (its tool, delegate or node name; default `goal`) and
    /// says what it is for.
    pub fn with_identity(mut self, name: impl Into<String>, description: Option<String>) -> Self {
        self.name = name.into();
        self.description = description;
        self
    }

    /// Replaces the action types (start from [`ActionRegistry::standard`] to keep the
    /// built-in ones).
    pub fn with_actions(mut self, actions: ActionRegistry) -> Self {
        self.actions = actions;
        self
    }

    /// Also appends the execution log to this JSONL file (one flushed line per event), and —
    /// unless [`GoalPursuer::with_journal`] gave it a journal — every model call's spend,
    /// written ahead of the call, to the spend ledger beside it (`<log>.spend.jsonl`), so a
    /// resumed pursuit knows what every earlier attempt spent.
    pub fn with_log(mut self, path: impl AsRef<Path>) -> Result<Self, GoalError> {
        let path = path.as_ref();
        self.log = Arc::new(ExecutionLog::create(path)?);
        if self.ledger.is_none() {
            self.ledger = Some(Arc::new(JsonlSpendLedger::open(ledger_path_beside(path))?));
        }
        Ok(self)
    }

    /// Keeps the execution log in `store` (what a resume reads, [`crate::ResumeLog::from_records`])
    /// with the JSONL file `export` as its export for people and `trace`.
    pub fn with_kept_log(
        mut self,
        store: Arc<dyn recursive_core::StoredRecords>,
        export: impl AsRef<Path>,
    ) -> Result<Self, GoalError> {
        self.log = Arc::new(ExecutionLog::kept(store, export)?);
        Ok(self)
    }

    /// Journals the pursuit's calls and spend in `ledger` (a store's, read back for a resume
    /// with [`crate::ResumeLog::open_with_journal`]) instead of a file beside its log.
    pub fn with_journal(mut self, ledger: Arc<dyn SpendLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Uses this embedder for semantic cycle detection.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Calls `observer` with every goal event as it happens.
    pub fn with_observer(mut self, observer: impl Fn(&GoalEvent) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &GoalConfig {
        &self.config
    }

    /// The action types.
    pub fn actions(&self) -> &ActionRegistry {
        &self.actions
    }

    /// The action types, to add more.
    pub fn actions_mut(&mut self) -> &mut ActionRegistry {
        &mut self.actions
    }

    /// The execution log (every event of every pursuit of this pursuer).
    pub fn log(&self) -> &Arc<ExecutionLog> {
        &self.log
    }

    /// Pursues an objective as the run of `scope` (a root run of its own): `run_started` first,
    /// `run_finished` last with the pursuit's finish reason (`cancelled` when the scope was
    /// cancelled before it succeeded), as every run of the tree ends.
    pub async fn pursue_as_run(
        &self,
        objective: &str,
        scope: &RunScope,
    ) -> Result<(GoalOutcome, FinishReason), GoalError> {
        scope.emit(0, EventKind::RunStarted { goal: objective.to_string() });
        let outcome = self.pursue(objective, scope).await?;
        Ok(self.finish_run(outcome, scope))
    }

    /// Ends the run of a pursuit with `run_finished`.
    fn finish_run(&self, outcome: GoalOutcome, scope: &RunScope) -> (GoalOutcome, FinishReason) {
        let finish = if scope.cancel_token().is_cancelled() && !outcome.status.is_success() {
            FinishReason::Cancelled
        } else {
            outcome.finish_reason()
        };
        scope.emit(
            0,
            EventKind::RunFinished {
                finish_reason: finish.clone(),
                error: outcome.fault.clone(),
                usage: scope.usage(),
                cost_usd: scope.cost_usd(),
            },
        );
        (outcome, finish)
    }

    /// Pursues an objective as a child of `scope`, returning the outcome tree. The objective's
    /// goal id is the pursuit's number (`1` for the first pursuit of this pursuer).
    pub async fn pursue(&self, objective: &str, scope: &RunScope) -> Result<GoalOutcome, GoalError> {
        let objective = objective.trim();
        if objective.is_empty() {
            return Err(GoalError::EmptyObjective);
        }
        let number = self.pursuits.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(self.start(objective, number.to_string(), None, scope).await)
    }

    /// Continues a pursuit from the log of an earlier, interrupted attempt (see
    /// [`ResumeLog`]): the same objective and goal ids; goals the log shows finished are
    /// restored without a model call (a `resumed` event each), recorded assessments and
    /// plans are reused, and everything else is pursued anew.
    pub async fn resume(&self, log: ResumeLog, scope: &RunScope) -> Result<GoalOutcome, GoalError> {
        let (id, objective) = log.objective().ok_or_else(|| {
            GoalError::Resume(format!("{}: the log holds no pursuit to resume", log.path().display()))
        })?;
        Ok(self.start(&objective, id, Some(log), scope).await)
    }

    /// Resumes as the run of `scope`, as [`GoalPursuer::pursue_as_run`] pursues.
    pub async fn resume_as_run(
        &self,
        log: ResumeLog,
        scope: &RunScope,
    ) -> Result<(GoalOutcome, FinishReason), GoalError> {
        let objective = log.objective().map(|(_, o)| o).unwrap_or_default();
        scope.emit(0, EventKind::RunStarted { goal: objective });
        let outcome = self.resume(log, scope).await?;
        Ok(self.finish_run(outcome, scope))
    }

    async fn start(&self, objective: &str, id: String, resume: Option<ResumeLog>, scope: &RunScope) -> GoalOutcome {
        let c = &self.config.constraints;
        let limits = BudgetLimits {
            max_cost_usd: Some(c.max_cost_usd).filter(|c| c.is_finite()),
            wall_clock: Some(c.max_time),
            ..Default::default()
        };
        let mut pursuit_scope = scope.clone().with_budget(limits);
        // A pursuit with a log is durable: its calls are journaled beside it (unless it runs
        // inside a durable run, whose journal holds them), and a resume reads back those the
        // killed attempts finished.
        if let Some(ledger) = self.ledger.as_ref().filter(|_| scope.journal().is_none()) {
            let earlier = resume.as_ref().map(ResumeLog::journal_records).unwrap_or_default();
            pursuit_scope = pursuit_scope.with_journal(Arc::new(RunJournal::new(ledger.clone(), earlier)));
        }
        // What earlier attempts spent counts against the same caps.
        let earlier = resume.as_ref().map(|log| log.earlier_spend(&id)).unwrap_or_default();
        pursuit_scope.restore_spend(&earlier);
        let finished_before = resume.as_ref().is_some_and(|log| log.finished(&id, objective).is_some());
        let pursuit = Pursuit {
            objective: objective.to_string(),
            started: Instant::now(),
            scope: pursuit_scope,
            goal_count: AtomicUsize::new(0),
            resume,
            solved: Mutex::new(Vec::new()),
        };
        if let Ok(mut spending) = self.spending.lock() {
            spending.insert(id.clone(), pursuit.scope.budget().clone());
        }
        let node = Node {
            id,
            goal: objective.to_string(),
            parent: None,
            stack: Vec::new(),
            known: vec![objective.to_string()],
            evidence: Vec::new(),
            depth: 0,
        };
        let mut outcome = self.pursue_node(&pursuit, node, &pursuit.scope).await;
        if let Ok(mut spending) = self.spending.lock() {
            spending.remove(&outcome.goal_id);
        }
        with_earlier_spend(&mut outcome, &earlier, finished_before);
        outcome
    }

    pub(crate) fn pursue_node<'a>(
        &'a self,
        p: &'a Pursuit,
        node: Node,
        parent_scope: &'a RunScope,
    ) -> BoxFuture<'a, GoalOutcome> {
        Box::pin(async move { self.run_node(p, node, parent_scope).await })
    }

    /// Pursues one goal in its own child node of the run tree, which ends with a
    /// `run_finished` event saying how the goal ended.
    async fn run_node(&self, p: &Pursuit, node: Node, parent_scope: &RunScope) -> GoalOutcome {
        if let Some(done) = p.resume.as_ref().and_then(|r| r.finished(&node.id, &node.goal)) {
            return self.restored(p, &node, parent_scope, done);
        }
        if let Some(earlier) = self.solved_before(p, &node) {
            return self.reused(&node, parent_scope, earlier);
        }
        let started_at = Utc::now();
        let t0 = Instant::now();
        let scope = match parent_scope.child("goal") {
            Ok(s) => s,
            Err(e) => {
                let frame = Frame { node: &node, scope: None, started_at, t0 };
                self.record(&node, parent_scope, GoalEventKind::Started, None, json!({}));
                return self.end(
                    &frame,
                    parent_scope,
                    GoalEventKind::Constrained,
                    GoalStatus::Constrained,
                    e.to_string(),
                );
            }
        };
        scope.emit(0, EventKind::RunStarted { goal: node.goal.clone() });
        let frame = Frame { node: &node, scope: Some(&scope), started_at, t0 };
        let outcome = self.run_goal(p, &frame, &scope).await;
        if outcome.status.is_success()
            && let Ok(mut solved) = p.solved.lock()
        {
            solved.push(outcome.clone());
        }
        scope.emit(
            0,
            EventKind::RunFinished {
                finish_reason: outcome.finish_reason(),
                error: outcome.fault.clone(),
                usage: scope.usage(),
                cost_usd: scope.cost_usd(),
            },
        );
        outcome
    }

    async fn run_goal(&self, p: &Pursuit, frame: &Frame<'_>, scope: &RunScope) -> GoalOutcome {
        let node = frame.node;
        let ctx = self.context(p, node);
        self.record(
            node,
            scope,
            GoalEventKind::Started,
            None,
            json!({ "objective": p.objective, "stack": node.stack, "evidence_items": node.evidence.len() }),
        );

        if let Some(reason) = self.violation(p, &ctx, scope) {
            return self.end(frame, scope, GoalEventKind::Constrained, GoalStatus::Constrained, reason);
        }
        if let Some(m) = self.find_cycle(node, scope).await {
            let reason =
                format!("repeats the goal `{}` on its stack ({:?} match, score {:.2})", m.ancestor, m.kind, m.score);
            let data = json!({ "reason": reason, "ancestor": m.ancestor, "score": m.score, "kind": m.kind });
            self.record(node, scope, GoalEventKind::CycleDetected, Some(GoalStatus::CycleDetected), data);
            return self.outcome(frame, GoalStatus::CycleDetected, Some(reason), None, GoalResult::default(), vec![]);
        }
        if let Some(reason) = self.count_goal(p) {
            return self.end(frame, scope, GoalEventKind::Constrained, GoalStatus::Constrained, reason);
        }

        // Assess (or reuse the assessment an interrupted attempt made).
        let at_max_depth = node.depth >= self.config.constraints.max_depth;
        let recorded = p.resume.as_ref().and_then(|r| r.assessment(&node.id, &node.goal));
        let assessment = match recorded {
            Some(a) => a,
            None => match self.assess(&ctx, node, at_max_depth, scope).await {
                Ok(a) => a,
                Err(e) => return self.phase_failed(p, frame, scope, Phase::Assess, e),
            },
        };
        self.record_assessment(node, scope, &assessment, None);

        if let (true, Some(plan)) = (assessment.executable, assessment.action.as_ref()) {
            let first = self.execute(frame, scope, &ctx, plan).await;
            if first.status != GoalStatus::Failed || first.fault.is_some() {
                return first;
            }
            return self.after_failure(p, frame, scope, &ctx, first, at_max_depth).await;
        }
        if at_max_depth {
            let reason = format!(
                "max_depth: the goal needs decomposition but is at depth {}, the maximum",
                self.config.constraints.max_depth
            );
            return self.end(frame, scope, GoalEventKind::Constrained, GoalStatus::Constrained, reason);
        }
        let why = if assessment.why_decompose.trim().is_empty() {
            assessment.reasoning.clone()
        } else {
            assessment.why_decompose.clone()
        };
        self.decompose_and_pursue(p, frame, scope, &ctx, &why).await
    }

    /// A leaf whose action failed is assessed once more with the failure as evidence: it may
    /// try another action (once) or, above the depth limit and within the goal count, be
    /// decomposed. Otherwise the first failure stands.
    async fn after_failure(
        &self,
        p: &Pursuit,
        frame: &Frame<'_>,
        scope: &RunScope,
        ctx: &GoalContext,
        first: GoalOutcome,
        at_max_depth: bool,
    ) -> GoalOutcome {
        let node = frame.node;
        let reason = first.reason.clone().unwrap_or_else(|| "the action failed".into());
        if self.spending_stop(p, scope).is_some() {
            return first;
        }
        let mut ctx = ctx.clone();
        ctx.evidence.push(Evidence {
            goal: node.goal.clone(),
            source: "failed attempt".into(),
            content: format!("The first attempt ({}) failed: {reason}", action_name(first.action.as_ref())),
            reference: None,
        });
        let mut prompt = ctx.prompt_to_act(&node.goal);
        prompt.text(prompts::after_failure(&reason, at_max_depth));
        let again = self.structured::<Assessment>(Phase::Assess, prompt, scope, |a| self.usable(a)).await;
        let Ok(assessment) = again else { return first };
        self.record_assessment(node, scope, &assessment, Some(&reason));
        match (assessment.executable, assessment.action.as_ref()) {
            (true, Some(plan)) => self.execute(frame, scope, &ctx, plan).await,
            _ if at_max_depth || p.goal_count.load(Ordering::SeqCst) >= self.config.constraints.max_goals => first,
            _ => {
                let why = format!("the direct attempt failed ({reason}); {}", assessment.why_decompose.trim());
                self.decompose_and_pursue(p, frame, scope, &ctx, &why).await
            }
        }
    }

    async fn assess(
        &self,
        ctx: &GoalContext,
        node: &Node,
        at_max_depth: bool,
        scope: &RunScope,
    ) -> Result<Assessment, PhaseError> {
        let mut prompt = ctx.prompt_to_act(&node.goal);
        if at_max_depth {
            prompt.text(prompts::max_depth_note());
        }
        self.structured::<Assessment>(Phase::Assess, prompt, scope, |a| self.usable(a)).await
    }

    /// Logs an assessment (made again after `failure`, when given).
    fn record_assessment(&self, node: &Node, scope: &RunScope, a: &Assessment, failure: Option<&str>) {
        let mut data = json!({
            "reasoning": a.reasoning,
            "executable": a.executable,
            "action": a.action,
            "why_decompose": a.why_decompose,
        });
        if let (Some(why), Value::Object(map)) = (failure, &mut data) {
            map.insert("after_failure".into(), Value::from(why));
        }
        self.record(node, scope, GoalEventKind::Assessed, None, data);
    }

    /// Whether an assessment can be acted on: an executable one names a known action.
    fn usable(&self, a: &Assessment) -> Result<(), String> {
        match (&a.executable, &a.action) {
            (true, None) => Err("`executable` is true but `action` is null; give the action".into()),
            (true, Some(plan)) => self.actions.check(plan),
            (false, _) => Ok(()),
        }
    }

    /// A goal the log of an interrupted attempt shows finished: its outcome as it was, with a
    /// `resumed` event and no model call. It counts toward the goal limit as before.
    fn restored(&self, p: &Pursuit, node: &Node, scope: &RunScope, done: GoalOutcome) -> GoalOutcome {
        let _ = p.goal_count.fetch_add(done.count(), Ordering::SeqCst);
        let data = json!({
            "reason": "finished before the pursuit was interrupted",
            "result": done.result,
            "action": done.action,
            "from_status": done.status,
        });
        self.record(node, scope, GoalEventKind::Resumed, Some(done.status), data);
        done
    }

    /// A goal of this pursuit already achieved that `node` repeats: the same text, or one at
    /// least as similar as the cycle check's threshold (its own ancestors are never achieved
    /// before it, so they cannot match).
    fn solved_before(&self, p: &Pursuit, node: &Node) -> Option<GoalOutcome> {
        let solved = p.solved.lock().ok()?;
        let wanted = normalize(&node.goal);
        solved
            .iter()
            .find(|o| normalize(&o.goal) == wanted)
            .or_else(|| {
                solved.iter().find(|o| {
                    same_numbers(&o.goal, &node.goal)
                        && text_similarity(&o.goal, &node.goal, self.config.similarity_metric)
                            >= self.config.similarity_threshold
                })
            })
            .cloned()
    }

    /// The budget of the pursuit goal `id` belongs to.
    fn pursuit_budget(&self, id: &str) -> Option<Arc<recursive_core::Budget>> {
        let root = id.split('.').next()?;
        self.spending.lock().ok()?.get(root).cloned()
    }

    /// `node` answered by the result of an earlier goal of the pursuit: no model call, a
    /// `reused` event naming the goal it came from.
    fn reused(&self, node: &Node, scope: &RunScope, earlier: GoalOutcome) -> GoalOutcome {
        let reason = format!(
            "reuses the result of goal {} (`{}`), achieved earlier in this pursuit",
            earlier.goal_id, earlier.goal
        );
        let data = json!({
            "reason": reason,
            "reused": earlier.goal_id,
            "result": earlier.result,
            "usage_total": recursive_core::Usage::default(),
            "cost_total_usd": 0.0,
        });
        self.record(node, scope, GoalEventKind::Reused, Some(earlier.status), data);
        GoalOutcome {
            goal_id: node.id.clone(),
            goal: node.goal.clone(),
            depth: node.depth,
            reason: Some(reason),
            children: Vec::new(),
            started_at: Utc::now(),
            duration_ms: 0,
            usage: Default::default(),
            cost_usd: 0.0,
            run_id: None,
            ..earlier
        }
    }

    pub(crate) fn context(&self, p: &Pursuit, node: &Node) -> GoalContext {
        GoalContext {
            objective: p.objective.clone(),
            stack: node.stack.clone(),
            evidence: node.evidence.clone(),
            capabilities: self.actions.capabilities(),
            overview: self.actions.overview(),
            constraints: self.config.constraints.clone(),
            depth: node.depth,
            started: p.started,
        }
    }

    /// Depth, time, cost and the tree's budget, checked before a goal starts.
    fn violation(&self, p: &Pursuit, ctx: &GoalContext, scope: &RunScope) -> Option<String> {
        let c = &self.config.constraints;
        if ctx.depth > c.max_depth {
            return Some(format!("max_depth: goal at depth {} is beyond max_depth {}", ctx.depth, c.max_depth));
        }
        self.spending_stop(p, scope)
    }

    /// The constraints that forbid further spending (the pursuit's budget node: time and
    /// cost; the tree's budget; cancellation), said in the pursuit's terms.
    pub(crate) fn spending_stop(&self, p: &Pursuit, scope: &RunScope) -> Option<String> {
        let c = &self.config.constraints;
        let reason = scope.stop_reason()?;
        Some(match reason {
            FinishReason::WallClockExceeded if p.started.elapsed() >= c.max_time => format!(
                "max_time: {:.1}s elapsed of {:.1}s allowed",
                p.started.elapsed().as_secs_f64(),
                c.max_time.as_secs_f64()
            ),
            FinishReason::CostBudgetExceeded if p.cost() >= c.max_cost_usd => {
                format!("max_cost: ${:.4} spent of ${:.4} allowed", p.cost(), c.max_cost_usd)
            }
            other => format!("run tree stopped: {other}"),
        })
    }

    fn count_goal(&self, p: &Pursuit) -> Option<String> {
        let max = self.config.constraints.max_goals;
        p.goal_count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .err()
            .map(|n| format!("max_goals: {n} goals already started of {max} allowed"))
    }

    async fn find_cycle(&self, node: &Node, scope: &RunScope) -> Option<CycleMatch> {
        if node.stack.is_empty() {
            return None;
        }
        let text =
            find_text_cycle(&node.goal, &node.stack, self.config.similarity_metric, self.config.similarity_threshold);
        if text.is_some() {
            return text;
        }
        self.semantic_cycle(&node.goal, &node.stack, scope).await
    }

    async fn semantic_cycle(&self, goal: &str, stack: &[String], scope: &RunScope) -> Option<CycleMatch> {
        let embedder = self.embedder.as_ref()?;
        let mut wanted: Vec<String> =
            std::iter::once(goal).chain(stack.iter().map(String::as_str)).map(normalize).collect();
        wanted.dedup();
        let missing: Vec<String> = {
            let cache = self.embeddings.lock().ok()?;
            wanted.iter().filter(|t| !cache.contains_key(*t)).cloned().collect()
        };
        if !missing.is_empty() {
            match embedder.embed(&missing).await {
                Ok(vectors) => {
                    let mut cache = self.embeddings.lock().ok()?;
                    for (t, v) in missing.into_iter().zip(vectors) {
                        cache.insert(t, v);
                    }
                }
                Err(e) => {
                    tracing::warn!("semantic cycle check skipped: {e}");
                    scope.emit(0, EventKind::Error { message: format!("semantic cycle check skipped: {e}") });
                    return None;
                }
            }
        }
        let cache = self.embeddings.lock().ok()?;
        let g = cache.get(&normalize(goal))?;
        stack
            .iter()
            .filter_map(|a| cache.get(&normalize(a)).map(|v| (a, cosine(g, v))))
            .filter(|(_, s)| *s >= self.config.semantic_threshold)
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(a, s)| CycleMatch { ancestor: a.clone(), score: s, kind: CycleKind::Semantic })
    }

    /// One structured phase: ask for JSON (natively, in strict mode, where the provider can),
    /// parse it leniently, validate it, and ask once more (per `json_retries`) with the error.
    /// The prompt is rendered within what the prompt budget leaves after the system prompt.
    pub(crate) async fn structured<T: DeserializeOwned + JsonSchema>(
        &self,
        phase: Phase,
        prompt: Prompt,
        scope: &RunScope,
        validate: impl Fn(&T) -> Result<(), String>,
    ) -> Result<T, PhaseError> {
        let schema = output_schema::<T>();
        let mut options = self.config.options.clone();
        options.response_format = if self.config.native_structured_output {
            Some(ResponseFormat::JsonSchema { name: phase.schema_name().into(), schema: schema.clone(), strict: true })
        } else {
            None
        };
        let system = prompts::system(phase, &schema.to_string(), self.config.max_subgoals);
        let user = prompt.render(self.user_budget(&system));
        let mut messages = vec![Message::system(system), Message::user(user)];
        let mut attempt = 0;
        loop {
            let request = ChatRequest { messages: messages.clone(), tools: Vec::new(), options: options.clone() };
            let response = scope
                .call_model(self.provider.as_ref(), request, ModelCall::at(scope.next_step()))
                .await
                .map_err(|e| match e {
                    ModelCallError::Stopped(r) => PhaseError::Stopped(r),
                    ModelCallError::Provider(e) => PhaseError::Provider(e.to_string()),
                })?;
            let raw = response.message.content;
            let problem = match parse_lenient::<T>(&raw) {
                Ok(value) => match validate(&value) {
                    Ok(()) => return Ok(value),
                    Err(e) => e,
                },
                Err(e) => e.message,
            };
            if attempt >= self.config.json_retries {
                return Err(PhaseError::Invalid(problem));
            }
            attempt += 1;
            tracing::debug!(phase = phase.as_str(), "asking again after an unusable reply: {problem}");
            messages.push(Message::assistant(raw));
            messages.push(Message::user(prompts::retry(&problem)));
        }
    }

    /// Characters left for the user prompt after this system prompt.
    pub(crate) fn user_budget(&self, system: &str) -> usize {
        self.config.prompt_chars.saturating_sub(system.chars().count())
    }

    async fn execute(&self, frame: &Frame<'_>, scope: &RunScope, ctx: &GoalContext, plan: &ActionPlan) -> GoalOutcome {
        let node = frame.node;
        let Some(executor) = self.actions.get(&plan.kind) else {
            let reason = format!("unknown action type `{}`", plan.kind);
            return self.end(frame, scope, GoalEventKind::Failed, GoalStatus::Failed, reason);
        };
        let request =
            ActionRequest { goal: &node.goal, plan, context: ctx, scope, prompt_chars: self.config.prompt_chars };
        let source = if plan.target.is_empty() { plan.kind.clone() } else { format!("{}:{}", plan.kind, plan.target) };
        match executor.execute(request).await {
            Ok(out) => {
                let digest = self.digest(&node.goal, &out.content, scope).await;
                let raw_chars = out.content.chars().count();
                let reference = digest.digested.then(|| {
                    format!("the raw output ({raw_chars} characters) is in the `executed` event of goal {}", node.id)
                });
                let result = GoalResult {
                    summary: digest.text.clone(),
                    limitations: digest.limitation.into_iter().collect(),
                    evidence: vec![Evidence { goal: node.goal.clone(), source, content: digest.text, reference }],
                    ..Default::default()
                };
                let data = json!({
                    "action": plan,
                    "status": "completed",
                    "output": out.content,
                    "digested": digest.digested,
                    "data": out.data,
                    "result": result,
                });
                self.record(node, scope, GoalEventKind::Executed, Some(GoalStatus::Completed), data);
                self.outcome(frame, GoalStatus::Completed, None, Some(plan.clone()), result, vec![])
            }
            Err(ActionError::Constrained(reason)) => {
                let data = json!({ "action": plan, "reason": reason });
                self.record(node, scope, GoalEventKind::Constrained, Some(GoalStatus::Constrained), data);
                let result = GoalResult { summary: reason.clone(), ..Default::default() };
                self.outcome(frame, GoalStatus::Constrained, Some(reason), Some(plan.clone()), result, vec![])
            }
            Err(e) => {
                let reason = e.to_string();
                let data = json!({ "action": plan, "status": "failed", "error": reason });
                self.record(node, scope, GoalEventKind::Executed, Some(GoalStatus::Failed), data);
                let result = GoalResult { summary: reason.clone(), ..Default::default() };
                let mut o =
                    self.outcome(frame, GoalStatus::Failed, Some(reason.clone()), Some(plan.clone()), result, vec![]);
                if matches!(e, ActionError::Fault(_)) {
                    o.fault = Some(reason);
                }
                o
            }
        }
    }

    pub(crate) fn phase_failed(
        &self,
        p: &Pursuit,
        frame: &Frame<'_>,
        scope: &RunScope,
        phase: Phase,
        e: PhaseError,
    ) -> GoalOutcome {
        let (status, mut reason) = e.status_and_reason(phase);
        if let (PhaseError::Stopped(_), Some(stop)) = (&e, self.spending_stop(p, scope)) {
            reason = stop;
        }
        let kind = if status == GoalStatus::Constrained { GoalEventKind::Constrained } else { GoalEventKind::Failed };
        let mut o = self.end(frame, scope, kind, status, reason.clone());
        if matches!(e, PhaseError::Provider(_)) {
            o.fault = Some(reason);
        }
        o
    }

    /// Records a terminal event with a reason and returns the matching outcome.
    pub(crate) fn end(
        &self,
        frame: &Frame<'_>,
        scope: &RunScope,
        kind: GoalEventKind,
        status: GoalStatus,
        reason: String,
    ) -> GoalOutcome {
        self.record(frame.node, scope, kind, Some(status), json!({ "reason": reason }));
        let result = GoalResult { summary: reason.clone(), ..Default::default() };
        self.outcome(frame, status, Some(reason), None, result, vec![])
    }

    pub(crate) fn outcome(
        &self,
        frame: &Frame<'_>,
        status: GoalStatus,
        reason: Option<String>,
        action: Option<ActionPlan>,
        result: GoalResult,
        children: Vec<GoalOutcome>,
    ) -> GoalOutcome {
        GoalOutcome {
            goal_id: frame.node.id.clone(),
            goal: frame.node.goal.clone(),
            depth: frame.node.depth,
            status,
            reason,
            action,
            result,
            children,
            started_at: frame.started_at,
            duration_ms: frame.t0.elapsed().as_millis() as u64,
            usage: frame.scope.map(RunScope::usage).unwrap_or_default(),
            cost_usd: frame.scope.map(RunScope::cost_usd).unwrap_or_default(),
            run_id: frame.scope.map(|s| s.ids().run_id.clone()),
            fault: None,
        }
    }

    /// Logs an event, emits it on the run tree as `goal_<event>` (a raw `output` clipped
    /// there; the log keeps it whole), and tells the observer.
    pub(crate) fn record(
        &self,
        node: &Node,
        scope: &RunScope,
        kind: GoalEventKind,
        status: Option<GoalStatus>,
        mut data: Value,
    ) {
        // The event that ends a goal carries what the goal and its sub-goals spent.
        if status.is_some()
            && let Value::Object(map) = &mut data
        {
            map.entry("usage_total").or_insert_with(|| serde_json::to_value(scope.usage()).unwrap_or(Value::Null));
            map.entry("cost_total_usd").or_insert_with(|| Value::from(scope.cost_usd()));
        }
        // Every event carries the pursuit's running totals, so a resumed pursuit knows what
        // the interrupted one spent.
        if let (Value::Object(map), Some(budget)) = (&mut data, self.pursuit_budget(&node.id)) {
            map.insert(PURSUIT_TOKENS.into(), Value::from(budget.tokens_used()));
            map.insert(PURSUIT_COST.into(), Value::from(budget.cost_used()));
        }
        let event = GoalEvent {
            timestamp: Utc::now(),
            event: kind,
            goal_id: node.id.clone(),
            goal: node.goal.clone(),
            depth: node.depth,
            parent_goal_id: node.parent.as_ref().map(|p| p.0.clone()),
            parent_goal: node.parent.as_ref().map(|p| p.1.clone()),
            status,
            run_id: Some(scope.ids().run_id.clone()),
            data,
        };
        if let Err(e) = self.log.record(&event) {
            tracing::warn!("goal log write failed: {e}");
            scope.emit(0, EventKind::Error { message: format!("goal log write failed: {e}") });
        }
        let mut emitted = GoalRunEvent::from(&event);
        let GoalRunEvent::Goal { data, .. } = &mut emitted;
        if let Some(Value::String(output)) = data.get_mut("output") {
            *output = clip(output);
        }
        scope.emit(0, EventKind::Extension(Extension::new(emitted)));
        if let Some(observer) = &self.observer {
            observer(&event);
        }
    }
}

/// An action's name for a message.
fn action_name(plan: Option<&ActionPlan>) -> String {
    match plan {
        Some(p) if p.target.is_empty() => p.kind.clone(),
        Some(p) => format!("{}:{}", p.kind, p.target),
        None => "its action".into(),
    }
}

/// Whether two goals name the same numbers (`place 1` and `place 2` are similar texts but
/// different goals).
fn same_numbers(a: &str, b: &str) -> bool {
    let numbers = |t: &str| -> Vec<String> {
        let mut n: Vec<String> = t
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| w.chars().any(|c| c.is_ascii_digit()))
            .map(str::to_lowercase)
            .collect();
        n.sort();
        n
    };
    numbers(a) == numbers(b)
}

pub(crate) fn clip(text: &str) -> String {
    recursive_core::text::clip_chars(text, 4000)
}

/// The pursuit's outcome counting what its earlier attempts spent (the totals a resumed pursuit
/// reports are those of every attempt): added to this attempt's, or — when the pursuit had
/// already finished and nothing ran — all of it.
fn with_earlier_spend(outcome: &mut GoalOutcome, earlier: &SpendTotal, finished_before: bool) {
    if finished_before {
        outcome.usage = earlier.usage;
        outcome.cost_usd = earlier.usd();
    } else {
        outcome.usage.add(&earlier.usage);
        outcome.cost_usd += earlier.usd();
    }
}

#[cfg(test)]
mod memo_tests {
    use super::same_numbers;

    #[test]
    fn goals_that_differ_in_a_number_are_different_goals() {
        assert!(!same_numbers("Look in place 1", "Look in place 2"));
        assert!(same_numbers("Collect the 2024 figures", "collect the 2024 figures."));
        assert!(same_numbers("collect the figures", "Collect the figures"));
    }
}

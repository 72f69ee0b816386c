//! The pursuit loop. One function pursues a goal at any depth: check constraints and cycles,
//! **assess** (directly executable?), then either **execute** the chosen action or
//! **decompose** into sub-goals, **pursue** them layer by layer (a layer's goals concurrently,
//! later layers seeing earlier results), ask after each layer whether the goal is already
//! **achieved** (skipping the rest if so), and **synthesize** the sub-results.
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
use futures::StreamExt;
use futures::future::BoxFuture;
use recursive_core::{
    BudgetLimits, ChatProvider, ChatRequest, EventKind, Extension, FinishReason, Message, ModelCall, ModelCallError,
    ResponseFormat, RunScope, ToolInvoker,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::actions::{ActionError, ActionRegistry, ActionRequest};
use crate::config::GoalConfig;
use crate::context::{Evidence, GoalContext};
use crate::layers::layer;
use crate::log::{ExecutionLog, GoalEvent, GoalEventKind, GoalRunEvent};
use crate::outcome::{GoalOutcome, GoalResult, GoalStatus};
use crate::prompts::{self, Phase};
use crate::similarity::{CycleKind, CycleMatch, Embedder, cosine, find_text_cycle, normalize};
use crate::structured::{
    AchievedCheck, ActionPlan, Assessment, Decomposition, SynthesisOutput, output_schema, parse_lenient,
};

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
}

/// Called with every goal event as it happens (e.g. to draw a live goal tree).
pub type GoalObserver = Arc<dyn Fn(&GoalEvent) + Send + Sync>;

/// Pursues goals recursively with one provider, a tool registry and a set of action types.
pub struct GoalPursuer {
    provider: Arc<dyn ChatProvider>,
    config: GoalConfig,
    actions: ActionRegistry,
    log: Arc<ExecutionLog>,
    embedder: Option<Arc<dyn Embedder>>,
    observer: Option<GoalObserver>,
    pursuits: AtomicU64,
    embeddings: Mutex<HashMap<String, Vec<f32>>>,
}

impl std::fmt::Debug for GoalPursuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoalPursuer").field("config", &self.config).field("actions", &self.actions).finish()
    }
}

/// State shared by every goal of one pursuit.
struct Pursuit {
    objective: String,
    started: Instant,
    /// The caller's scope with the pursuit's own budget node (cost and time constraints).
    scope: RunScope,
    goal_count: AtomicUsize,
    all_goals: Mutex<Vec<String>>,
}

impl Pursuit {
    fn cost(&self) -> f64 {
        self.scope.budget().cost_used()
    }
}

/// One goal about to be pursued.
struct Node {
    id: String,
    goal: String,
    parent: Option<(String, String)>,
    stack: Vec<String>,
    evidence: Vec<Evidence>,
    depth: u32,
}

/// Why a structured phase produced nothing usable.
enum PhaseError {
    Stopped(FinishReason),
    Provider(String),
    Invalid(String),
}

impl PhaseError {
    fn status_and_reason(&self, phase: Phase) -> (GoalStatus, String) {
        match self {
            PhaseError::Stopped(r) => (GoalStatus::Constrained, format!("run tree stopped: {r}")),
            PhaseError::Provider(e) => (GoalStatus::Failed, format!("{} failed: {e}", phase.as_str())),
            PhaseError::Invalid(e) => (GoalStatus::Failed, format!("{}: unusable model reply: {e}", phase.as_str())),
        }
    }
}

/// Timing and placement of a goal, for building its outcome.
struct Frame<'a> {
    node: &'a Node,
    scope: Option<&'a RunScope>,
    started_at: DateTime<Utc>,
    t0: Instant,
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
        }
    }

    /// Replaces the action types (start from [`ActionRegistry::standard`] to keep the
    /// built-in ones).
    pub fn with_actions(mut self, actions: ActionRegistry) -> Self {
        self.actions = actions;
        self
    }

    /// Also appends the execution log to this JSONL file (one flushed line per event).
    pub fn with_log(mut self, path: impl AsRef<Path>) -> Result<Self, GoalError> {
        self.log = Arc::new(ExecutionLog::create(path)?);
        Ok(self)
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
        Ok((outcome, finish))
    }

    /// Pursues an objective as a child of `scope`, returning the outcome tree. The objective's
    /// goal id is the pursuit's number (`1` for the first pursuit of this pursuer).
    pub async fn pursue(&self, objective: &str, scope: &RunScope) -> Result<GoalOutcome, GoalError> {
        let objective = objective.trim();
        if objective.is_empty() {
            return Err(GoalError::EmptyObjective);
        }
        let number = self.pursuits.fetch_add(1, Ordering::SeqCst) + 1;
        let c = &self.config.constraints;
        let limits =
            BudgetLimits { max_cost_usd: Some(c.max_cost_usd), wall_clock: Some(c.max_time), ..Default::default() };
        let pursuit = Pursuit {
            objective: objective.to_string(),
            started: Instant::now(),
            scope: scope.clone().with_budget(limits),
            goal_count: AtomicUsize::new(0),
            all_goals: Mutex::new(vec![objective.to_string()]),
        };
        let node = Node {
            id: number.to_string(),
            goal: objective.to_string(),
            parent: None,
            stack: Vec::new(),
            evidence: Vec::new(),
            depth: 0,
        };
        Ok(self.pursue_node(&pursuit, node, &pursuit.scope).await)
    }

    fn pursue_node<'a>(&'a self, p: &'a Pursuit, node: Node, parent_scope: &'a RunScope) -> BoxFuture<'a, GoalOutcome> {
        Box::pin(async move { self.run_node(p, node, parent_scope).await })
    }

    /// Pursues one goal in its own child node of the run tree, which ends with a
    /// `run_finished` event saying how the goal ended.
    async fn run_node(&self, p: &Pursuit, node: Node, parent_scope: &RunScope) -> GoalOutcome {
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

        // Assess.
        let at_max_depth = node.depth >= self.config.constraints.max_depth;
        let mut user = ctx.render(&node.goal, self.config.evidence_chars);
        if at_max_depth {
            user.push_str(prompts::max_depth_note());
        }
        let actions = &self.actions;
        let assessment = self
            .structured::<Assessment>(Phase::Assess, user, scope, |a| match (&a.executable, &a.action) {
                (true, None) => Err("`executable` is true but `action` is null; give the action".into()),
                (true, Some(plan)) => actions.check(plan),
                (false, _) => Ok(()),
            })
            .await;
        let assessment = match assessment {
            Ok(a) => a,
            Err(e) => return self.phase_failed(p, frame, scope, Phase::Assess, e),
        };
        self.record(
            node,
            scope,
            GoalEventKind::Assessed,
            None,
            json!({ "executable": assessment.executable, "reasoning": assessment.reasoning, "action": assessment.action }),
        );

        if let (true, Some(plan)) = (assessment.executable, assessment.action.as_ref()) {
            return self.execute(frame, scope, &ctx, plan).await;
        }
        if at_max_depth {
            let reason = format!(
                "max_depth: the goal needs decomposition but is at depth {}, the maximum",
                self.config.constraints.max_depth
            );
            return self.end(frame, scope, GoalEventKind::Constrained, GoalStatus::Constrained, reason);
        }
        self.decompose_and_pursue(p, frame, scope, &ctx, &assessment.reasoning).await
    }

    fn context(&self, p: &Pursuit, node: &Node) -> GoalContext {
        GoalContext {
            objective: p.objective.clone(),
            stack: node.stack.clone(),
            evidence: node.evidence.clone(),
            capabilities: self.actions.capabilities(),
            constraints: self.config.constraints.clone(),
            depth: node.depth,
            started: p.started,
            cost_so_far: p.cost(),
            goal_count: p.goal_count.load(Ordering::SeqCst),
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
    fn spending_stop(&self, p: &Pursuit, scope: &RunScope) -> Option<String> {
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

    /// One structured phase: ask for JSON (natively where the provider can), parse it
    /// leniently, validate it, and ask once more (per `json_retries`) with the error.
    async fn structured<T: DeserializeOwned + JsonSchema>(
        &self,
        phase: Phase,
        user: String,
        scope: &RunScope,
        validate: impl Fn(&T) -> Result<(), String>,
    ) -> Result<T, PhaseError> {
        let schema = output_schema::<T>();
        let mut options = self.config.options.clone();
        options.response_format = if self.config.native_structured_output {
            Some(ResponseFormat::JsonSchema { name: phase.schema_name().into(), schema: schema.clone() })
        } else {
            None
        };
        let mut messages = vec![
            Message::system(prompts::system(phase, &schema.to_string(), self.config.max_subgoals)),
            Message::user(user),
        ];
        let mut attempt = 0;
        loop {
            let request = ChatRequest { messages: messages.clone(), tools: Vec::new(), options: options.clone() };
            let response =
                scope.call_model(self.provider.as_ref(), request, ModelCall::at(0)).await.map_err(|e| match e {
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

    async fn execute(&self, frame: &Frame<'_>, scope: &RunScope, ctx: &GoalContext, plan: &ActionPlan) -> GoalOutcome {
        let node = frame.node;
        let Some(executor) = self.actions.get(&plan.kind) else {
            let reason = format!("unknown action type `{}`", plan.kind);
            return self.end(frame, scope, GoalEventKind::Failed, GoalStatus::Failed, reason);
        };
        let request = ActionRequest { goal: &node.goal, plan, context: ctx, scope };
        let source = if plan.target.is_empty() { plan.kind.clone() } else { format!("{}:{}", plan.kind, plan.target) };
        match executor.execute(request).await {
            Ok(out) => {
                let data =
                    json!({ "action": plan, "status": "completed", "output": clip(&out.content), "data": out.data });
                self.record(node, scope, GoalEventKind::Executed, Some(GoalStatus::Completed), data);
                let result = GoalResult {
                    summary: out.content.clone(),
                    evidence: vec![Evidence { goal: node.goal.clone(), source, content: out.content }],
                    ..Default::default()
                };
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

    async fn decompose_and_pursue(
        &self,
        p: &Pursuit,
        frame: &Frame<'_>,
        scope: &RunScope,
        ctx: &GoalContext,
        why: &str,
    ) -> GoalOutcome {
        let node = frame.node;
        let existing = p.all_goals.lock().map(|g| g.clone()).unwrap_or_default();
        let mut user = ctx.render(&node.goal, self.config.evidence_chars);
        user.push_str(&prompts::why_decompose(why));
        user.push_str(&prompts::existing_goals(&existing));
        let plan = self
            .structured::<Decomposition>(Phase::Decompose, user, scope, |d| {
                if d.sub_goals.is_empty() {
                    return Err("`sub_goals` is empty; give at least one sub-goal".into());
                }
                match d.sub_goals.iter().position(|s| s.goal.trim().is_empty()) {
                    Some(i) => Err(format!("sub-goal {i} has an empty `goal`")),
                    None => Ok(()),
                }
            })
            .await;
        let mut plan = match plan {
            Ok(d) => d,
            Err(e) => return self.phase_failed(p, frame, scope, Phase::Decompose, e),
        };
        let mut issues = Vec::new();
        if plan.sub_goals.len() > self.config.max_subgoals {
            issues.push(format!(
                "{} sub-goals planned; only the first {} are pursued",
                plan.sub_goals.len(),
                self.config.max_subgoals
            ));
            plan.sub_goals.truncate(self.config.max_subgoals);
        }
        let subs = plan.sub_goals;
        let deps: Vec<Vec<i64>> = subs.iter().map(|s| s.depends_on.clone()).collect();
        let layering = layer(subs.len(), &deps);
        issues.extend(layering.issues.iter().cloned());
        for issue in &issues {
            tracing::warn!(goal = %node.goal, "plan repaired: {issue}");
        }
        self.record(
            node,
            scope,
            GoalEventKind::Decomposed,
            None,
            json!({ "reasoning": plan.reasoning, "sub_goals": subs, "layers": layering.layers, "issues": issues }),
        );
        if let Ok(mut all) = p.all_goals.lock() {
            all.extend(subs.iter().map(|s| s.goal.clone()));
        }

        let mut slots: Vec<Option<GoalOutcome>> = vec![None; subs.len()];
        let mut gathered: Vec<Evidence> = Vec::new();
        let mut achieved: Option<AchievedCheck> = None;
        let mut child_stack = node.stack.clone();
        child_stack.push(node.goal.clone());
        for (li, layer_goals) in layering.layers.iter().enumerate() {
            let mut evidence = node.evidence.clone();
            evidence.extend(gathered.iter().cloned());
            let children = layer_goals.iter().map(|&i| Node {
                id: format!("{}.{}", node.id, i + 1),
                goal: subs[i].goal.clone(),
                parent: Some((node.id.clone(), node.goal.clone())),
                stack: child_stack.clone(),
                evidence: evidence.clone(),
                depth: node.depth + 1,
            });
            let futures: Vec<_> = children.map(|c| self.pursue_node(p, c, scope)).collect();
            let outcomes: Vec<GoalOutcome> =
                futures::stream::iter(futures).buffered(self.config.layer_concurrency.max(1)).collect().await;
            for (&i, o) in layer_goals.iter().zip(outcomes) {
                if o.status.is_success() {
                    gathered.push(Evidence {
                        goal: o.goal.clone(),
                        source: "sub-goal".into(),
                        content: result_text(&o),
                    });
                }
                slots[i] = Some(o);
            }
            let rest: Vec<usize> = layering.layers[li + 1..].iter().flatten().copied().collect();
            if rest.is_empty() || gathered.is_empty() || self.spending_stop(p, scope).is_some() {
                continue;
            }
            let done: Vec<&GoalOutcome> = slots.iter().flatten().collect();
            let pending: Vec<&str> = rest.iter().map(|&i| subs[i].goal.as_str()).collect();
            let mut user = ctx.render_for_judging(&node.goal, self.config.evidence_chars);
            user.push_str(&prompts::results("Finished sub-goals", &done));
            user.push_str(&prompts::pending(&pending));
            match self.structured::<AchievedCheck>(Phase::Check, user, scope, |_| Ok(())).await {
                Ok(check) => {
                    // `achieved` only when it is; a negative check is `checked`.
                    let kind = if check.achieved { GoalEventKind::Achieved } else { GoalEventKind::Checked };
                    self.record(node, scope, kind, None, json!(check));
                    if check.achieved {
                        achieved = Some(check);
                        for &i in &rest {
                            let skipped = self.skipped(node, scope, i, &subs[i].goal);
                            slots[i] = Some(skipped);
                        }
                        break;
                    }
                }
                Err(e) => {
                    let (_, reason) = e.status_and_reason(Phase::Check);
                    tracing::warn!(goal = %node.goal, "achievement check skipped: {reason}");
                    scope.emit(0, EventKind::Error { message: format!("achievement check skipped: {reason}") });
                }
            }
        }
        let children: Vec<GoalOutcome> = slots.into_iter().flatten().collect();
        self.synthesize(p, frame, scope, ctx, children, achieved).await
    }

    fn skipped(&self, parent: &Node, scope: &RunScope, index: usize, goal: &str) -> GoalOutcome {
        let node = Node {
            id: format!("{}.{}", parent.id, index + 1),
            goal: goal.to_string(),
            parent: Some((parent.id.clone(), parent.goal.clone())),
            stack: Vec::new(),
            evidence: Vec::new(),
            depth: parent.depth + 1,
        };
        let reason = "the parent goal was already achieved".to_string();
        self.record(&node, scope, GoalEventKind::Skipped, Some(GoalStatus::Skipped), json!({ "reason": reason }));
        let frame = Frame { node: &node, scope: None, started_at: Utc::now(), t0: Instant::now() };
        self.outcome(&frame, GoalStatus::Skipped, Some(reason), None, GoalResult::default(), vec![])
    }

    async fn synthesize(
        &self,
        p: &Pursuit,
        frame: &Frame<'_>,
        scope: &RunScope,
        ctx: &GoalContext,
        children: Vec<GoalOutcome>,
        achieved: Option<AchievedCheck>,
    ) -> GoalOutcome {
        let node = frame.node;
        let succeeded: Vec<&GoalOutcome> = children.iter().filter(|c| c.status.is_success()).collect();
        let mut limitations: Vec<String> = children
            .iter()
            .filter(|c| !c.status.is_success() && c.status != GoalStatus::Skipped)
            .map(|c| format!("sub-goal `{}` {}: {}", c.goal, c.status, c.reason.as_deref().unwrap_or("no result")))
            .collect();
        let evidence: Vec<Evidence> = succeeded
            .iter()
            .map(|c| Evidence { goal: c.goal.clone(), source: "sub-goal".into(), content: result_text(c) })
            .collect();

        if succeeded.is_empty() {
            let status = if children.iter().any(|c| c.status == GoalStatus::Constrained) {
                GoalStatus::Constrained
            } else {
                GoalStatus::Failed
            };
            let reason = format!("no sub-goal produced a result ({})", limitations.join("; "));
            let kind =
                if status == GoalStatus::Constrained { GoalEventKind::Constrained } else { GoalEventKind::Failed };
            self.record(node, scope, kind, Some(status), json!({ "reason": reason }));
            let result = GoalResult { summary: reason.clone(), limitations, ..Default::default() };
            // When every sub-goal was ended by a provider fault, so is this goal.
            let fault = children
                .iter()
                .filter(|c| c.status != GoalStatus::Skipped)
                .map(|c| c.fault.clone())
                .collect::<Option<Vec<String>>>()
                .and_then(|f| f.into_iter().next());
            let mut o = self.outcome(frame, status, Some(reason), None, result, children);
            o.fault = fault;
            return o;
        }

        let mut stopped = self.spending_stop(p, scope);
        let mut result = match &stopped {
            Some(stop) => {
                limitations.push(format!("synthesized without a model call: {stop}"));
                mechanical(&succeeded)
            }
            None => {
                let mut user = ctx.render_for_judging(&node.goal, self.config.evidence_chars);
                let all: Vec<&GoalOutcome> = children.iter().collect();
                user.push_str(&prompts::results("Sub-goal results", &all));
                if let Some(check) = &achieved {
                    user.push_str(&format!("\nThe goal was judged achieved (confidence {:.2}).\n", check.confidence));
                }
                match self
                    .structured::<SynthesisOutput>(Phase::Synthesize, user, scope, |s| {
                        if s.summary.trim().is_empty() { Err("`summary` is empty".into()) } else { Ok(()) }
                    })
                    .await
                {
                    Ok(s) => GoalResult {
                        summary: s.summary,
                        key_findings: s.key_findings,
                        confidence: Some(s.confidence),
                        limitations: s.limitations,
                        evidence: Vec::new(),
                    },
                    Err(e) => {
                        let (status, reason) = e.status_and_reason(Phase::Synthesize);
                        limitations.push(format!("synthesized without the model: {reason}"));
                        if status == GoalStatus::Constrained {
                            stopped = Some(reason);
                        }
                        mechanical(&succeeded)
                    }
                }
            }
        };
        result.limitations.extend(limitations);
        result.evidence = evidence;
        let (status, reason) = synthesis_status(&children, achieved.is_some(), stopped);
        self.record(
            node,
            scope,
            GoalEventKind::Synthesized,
            Some(status),
            json!({
                "summary": clip(&result.summary),
                "key_findings": result.key_findings,
                "confidence": result.confidence,
                "limitations": result.limitations,
            }),
        );
        self.outcome(frame, status, reason, None, result, children)
    }

    fn phase_failed(
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
    fn end(
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

    fn outcome(
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

    /// Logs an event, emits it on the run tree as `goal_<event>`, and tells the observer.
    fn record(&self, node: &Node, scope: &RunScope, kind: GoalEventKind, status: Option<GoalStatus>, mut data: Value) {
        // The event that ends a goal carries what the goal and its sub-goals spent.
        if status.is_some()
            && let Value::Object(map) = &mut data
        {
            map.insert("usage_total".into(), serde_json::to_value(scope.usage()).unwrap_or(Value::Null));
            map.insert("cost_total_usd".into(), Value::from(scope.cost_usd()));
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
        scope.emit(0, EventKind::Extension(Extension::new(GoalRunEvent::from(&event))));
        if let Some(observer) = &self.observer {
            observer(&event);
        }
    }
}

/// The status of a decomposed goal once its sub-goals ran: achieved when the model judged it
/// so; constrained when a limit or cancellation cut the work short; failed when most sub-goals
/// (not counting skipped ones) did not succeed; completed otherwise.
fn synthesis_status(children: &[GoalOutcome], achieved: bool, stopped: Option<String>) -> (GoalStatus, Option<String>) {
    let considered = children.iter().filter(|c| c.status != GoalStatus::Skipped).count();
    let failed = children.iter().filter(|c| c.status != GoalStatus::Skipped && !c.status.is_success()).count();
    if achieved {
        (GoalStatus::Achieved, None)
    } else if let Some(stop) = stopped {
        (GoalStatus::Constrained, Some(stop))
    } else if failed * 2 > considered {
        (GoalStatus::Failed, Some(format!("{failed} of {considered} sub-goals did not succeed")))
    } else {
        (GoalStatus::Completed, None)
    }
}

/// A goal's result as evidence text: its summary and key findings.
fn result_text(o: &GoalOutcome) -> String {
    let mut text = o.result.summary.clone();
    if !o.result.key_findings.is_empty() {
        text.push_str("\nKey findings: ");
        text.push_str(&o.result.key_findings.join("; "));
    }
    text
}

/// A synthesis made without the model: the sub-results side by side.
fn mechanical(succeeded: &[&GoalOutcome]) -> GoalResult {
    let summary = succeeded.iter().map(|c| format!("{}: {}", c.goal, c.result.summary)).collect::<Vec<_>>().join("\n");
    let mut key_findings: Vec<String> = Vec::new();
    for f in succeeded.iter().flat_map(|c| c.result.key_findings.iter()) {
        if !key_findings.contains(f) {
            key_findings.push(f.clone());
        }
    }
    let confidences: Vec<f64> = succeeded.iter().filter_map(|c| c.result.confidence).collect();
    let confidence = (!confidences.is_empty()).then(|| confidences.iter().sum::<f64>() / confidences.len() as f64);
    GoalResult { summary, key_findings, confidence, limitations: Vec::new(), evidence: Vec::new() }
}

fn clip(text: &str) -> String {
    recursive_core::text::clip_chars(text, 4000)
}

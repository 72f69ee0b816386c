//! The decomposed half of a goal: **decompose** it (hearing why the assessment chose to),
//! pursue the sub-goals in priority order — dependencies first, then the model's order — a
//! batch of at most `layer_concurrency` at a time, ask after each batch whether the goal is
//! **achieved** (skipping the rest when it is), decompose again for the **remaining gaps**
//! when the last check says it is not (up to `gap_rounds` times), and **synthesize** the
//! results into a bounded result.
//!
//! Each sub-goal sees a bounded view of every goal it depends on (and of what its ancestors
//! were given); prompts list results in plan order, never in the order they finished, so a
//! recorded pursuit replays.

use futures::StreamExt;
use recursive_core::{EventKind, RunScope};
use serde_json::json;

use crate::assemble::shorten;
use crate::context::{Evidence, GoalContext};
use crate::layers::layer;
use crate::log::GoalEventKind;
use crate::outcome::{GoalOutcome, GoalResult, GoalStatus};
use crate::prompts::{self, Phase};
use crate::pursuer::{Frame, GoalPursuer, Node, PhaseError, Pursuit};
use crate::structured::{AchievedCheck, Decomposition, SubGoalPlan, SynthesisOutput};

/// What the last achieved check said.
enum Verdict {
    /// No check ran, or its reply was unusable.
    None,
    /// The goal is achieved.
    Achieved(AchievedCheck),
    /// It is not, with what remains.
    NotAchieved(AchievedCheck),
}

/// One round's plan, ready to pursue.
struct Plan {
    subs: Vec<SubGoalPlan>,
    layers: Vec<Vec<usize>>,
}

impl GoalPursuer {
    pub(crate) async fn decompose_and_pursue(
        &self,
        p: &Pursuit,
        frame: &Frame<'_>,
        scope: &RunScope,
        ctx: &GoalContext,
        why: &str,
    ) -> GoalOutcome {
        let mut children: Vec<GoalOutcome> = Vec::new();
        let mut verdict = Verdict::None;
        for round in 0..=self.config.gap_rounds {
            let gaps = match (&verdict, round) {
                (_, 0) => Vec::new(),
                (Verdict::NotAchieved(c), _) if !c.remaining_gaps.is_empty() => c.remaining_gaps.clone(),
                _ => break,
            };
            if round > 0 && self.spending_stop(p, scope).is_some() {
                break;
            }
            let plan = match self.plan(p, frame.node, scope, ctx, why, round, &children, &gaps).await {
                Ok(plan) => plan,
                Err(e) if round == 0 => return self.phase_failed(p, frame, scope, Phase::Decompose, e),
                Err(e) => {
                    let (_, reason) = e.status_and_reason(Phase::Decompose);
                    scope.emit(0, EventKind::Error { message: format!("no plan for the remaining gaps: {reason}") });
                    break;
                }
            };
            let can_revise = round < self.config.gap_rounds;
            let (outcomes, v) = self.pursue_plan(p, frame.node, scope, ctx, &plan, &children, can_revise).await;
            children.extend(outcomes);
            verdict = v;
            if matches!(verdict, Verdict::Achieved(_)) {
                break;
            }
        }
        self.synthesize(p, frame, scope, ctx, children, verdict).await
    }

    /// Asks for (or, resuming, reuses) the decomposition of one round, repairs it, logs it.
    #[allow(clippy::too_many_arguments)]
    async fn plan(
        &self,
        p: &Pursuit,
        node: &Node,
        scope: &RunScope,
        ctx: &GoalContext,
        why: &str,
        round: u32,
        earlier: &[GoalOutcome],
        gaps: &[String],
    ) -> Result<Plan, PhaseError> {
        let recorded = p.resume.as_ref().and_then(|r| r.plan(&node.id, &node.goal, round));
        let mut plan = match recorded {
            Some(d) => d,
            None => {
                let mut prompt = ctx.prompt_to_plan(&node.goal);
                prompt.text(prompts::why_decompose(why));
                prompt.section("Goals already in the tree (do not duplicate them)", node.known.clone(), "");
                if round > 0 {
                    prompt.section("Sub-goals pursued so far", earlier.iter().map(result_item).collect(), "");
                    prompt.section("Remaining gaps (plan sub-goals that close them)", gaps.to_vec(), "");
                }
                self.structured::<Decomposition>(Phase::Decompose, prompt, scope, valid_plan).await?
            }
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
        let deps: Vec<Vec<i64>> = plan.sub_goals.iter().map(|s| s.depends_on.clone()).collect();
        let layering = layer(plan.sub_goals.len(), &deps);
        issues.extend(layering.issues.iter().cloned());
        for issue in &issues {
            tracing::warn!(goal = %node.goal, "plan repaired: {issue}");
        }
        self.record(
            node,
            scope,
            GoalEventKind::Decomposed,
            None,
            json!({
                "round": round,
                "reasoning": plan.reasoning,
                "sub_goals": plan.sub_goals,
                "coverage": plan.coverage,
                "layers": layering.layers,
                "issues": issues,
                "gaps": gaps,
            }),
        );
        Ok(Plan { subs: plan.sub_goals, layers: layering.layers })
    }

    /// Pursues one round's sub-goals batch by batch, checking after each batch — alongside the
    /// next batch when that one starts a new dependency layer (it waited for these results
    /// anyway), before it otherwise (an achieved goal then skips it). With `can_revise`, a
    /// failed sub-goal ends the round early so the next round plans around it.
    #[allow(clippy::too_many_arguments)]
    async fn pursue_plan(
        &self,
        p: &Pursuit,
        node: &Node,
        scope: &RunScope,
        ctx: &GoalContext,
        plan: &Plan,
        earlier: &[GoalOutcome],
        can_revise: bool,
    ) -> (Vec<GoalOutcome>, Verdict) {
        let offset = earlier.len();
        let concurrency = self.config.layer_concurrency.max(1);
        let batches: Vec<(usize, Vec<usize>)> = plan
            .layers
            .iter()
            .enumerate()
            .flat_map(|(l, layer)| layer.chunks(concurrency).map(move |c| (l, c.to_vec())))
            .collect();
        let mut known = node.known.clone();
        known.extend(plan.subs.iter().map(|s| s.goal.clone()));
        let mut stack = node.stack.clone();
        stack.push(node.goal.clone());
        let mut slots: Vec<Option<GoalOutcome>> = vec![None; plan.subs.len()];
        // A check left to run alongside the next batch: the results it judges, what was pending.
        let mut deferred: Option<(Vec<GoalOutcome>, Vec<String>)> = None;
        for (b, (_, batch)) in batches.iter().enumerate() {
            let children: Vec<Node> = batch
                .iter()
                .map(|&i| Node {
                    id: format!("{}.{}", node.id, offset + i + 1),
                    goal: plan.subs[i].goal.clone(),
                    parent: Some((node.id.clone(), node.goal.clone())),
                    stack: stack.clone(),
                    known: known.clone(),
                    evidence: evidence_for(i, plan, &slots, earlier, node),
                    depth: node.depth + 1,
                })
                .collect();
            let futures: Vec<_> = children.into_iter().map(|c| self.pursue_node(p, c, scope)).collect();
            let run_batch = futures::stream::iter(futures).buffered(concurrency).collect::<Vec<GoalOutcome>>();
            let (outcomes, verdict) = match deferred.take() {
                Some((judged, pending)) => {
                    let check = async {
                        let refs: Vec<&GoalOutcome> = judged.iter().collect();
                        self.check(node, scope, ctx, &refs, pending).await
                    };
                    let (verdict, outcomes) = futures::join!(check, run_batch);
                    (outcomes, Some(verdict))
                }
                None => (run_batch.await, None),
            };
            for (&i, o) in batch.iter().zip(outcomes) {
                slots[i] = Some(o);
            }
            let rest: Vec<usize> = batches[b + 1..].iter().flat_map(|(_, c)| c.iter().copied()).collect();
            if let Some(Verdict::Achieved(check)) = verdict {
                for &i in &rest {
                    slots[i] = Some(self.skipped(node, scope, offset + i, &plan.subs[i].goal));
                }
                return (slots.into_iter().flatten().collect(), Verdict::Achieved(check));
            }
            if can_revise && !rest.is_empty() {
                let failed: Vec<&GoalOutcome> = batch
                    .iter()
                    .filter_map(|&i| slots[i].as_ref())
                    .filter(|o| o.status == GoalStatus::Failed)
                    .collect();
                if !failed.is_empty() {
                    let pending: Vec<String> = rest.iter().map(|&i| plan.subs[i].goal.clone()).collect();
                    let check = revise_after(&failed, &pending);
                    self.record(node, scope, GoalEventKind::Checked, None, json!({ "revised_after_failure": check }));
                    return (slots.into_iter().flatten().collect(), Verdict::NotAchieved(check));
                }
            }
            let done: Vec<&GoalOutcome> = earlier.iter().chain(slots.iter().flatten()).collect();
            if !done.iter().any(|o| o.status.has_result()) || self.spending_stop(p, scope).is_some() {
                continue;
            }
            // A resumed pursuit does not check again where the interrupted attempt checked
            // and went on: the batch was restored whole and work remains.
            let restored = |i: &usize| {
                let id = format!("{}.{}", node.id, offset + i + 1);
                p.resume.as_ref().is_some_and(|r| r.finished(&id, &plan.subs[*i].goal).is_some())
            };
            if !rest.is_empty() && batch.iter().all(restored) {
                continue;
            }
            let pending: Vec<String> = rest.iter().map(|&i| plan.subs[i].goal.clone()).collect();
            let next_layer_starts = batches.get(b + 1).is_some_and(|(l, _)| *l != batches[b].0);
            if next_layer_starts {
                deferred = Some((done.into_iter().cloned().collect(), pending));
                continue;
            }
            match self.check(node, scope, ctx, &done, pending).await {
                Verdict::Achieved(check) => {
                    for &i in &rest {
                        slots[i] = Some(self.skipped(node, scope, offset + i, &plan.subs[i].goal));
                    }
                    return (slots.into_iter().flatten().collect(), Verdict::Achieved(check));
                }
                v if rest.is_empty() => return (slots.into_iter().flatten().collect(), v),
                _ => {}
            }
        }
        (slots.into_iter().flatten().collect(), Verdict::None)
    }

    /// The achieved check over the results so far.
    async fn check(
        &self,
        node: &Node,
        scope: &RunScope,
        ctx: &GoalContext,
        done: &[&GoalOutcome],
        pending: Vec<String>,
    ) -> Verdict {
        let mut prompt = ctx.prompt(&node.goal);
        prompt.section("Finished sub-goals", done.iter().map(|o| result_item(o)).collect(), "");
        prompt.section("Sub-goals not yet pursued", pending, "(none: every planned sub-goal has run)");
        match self.structured::<AchievedCheck>(Phase::Check, prompt, scope, |_| Ok(())).await {
            Ok(check) => {
                // `achieved` only when it is; a negative check is `checked`.
                let kind = if check.achieved { GoalEventKind::Achieved } else { GoalEventKind::Checked };
                self.record(node, scope, kind, None, json!(check));
                if check.achieved { Verdict::Achieved(check) } else { Verdict::NotAchieved(check) }
            }
            Err(e) => {
                let (_, reason) = e.status_and_reason(Phase::Check);
                tracing::warn!(goal = %node.goal, "achievement check skipped: {reason}");
                scope.emit(0, EventKind::Error { message: format!("achievement check skipped: {reason}") });
                Verdict::None
            }
        }
    }

    fn skipped(&self, parent: &Node, scope: &RunScope, index: usize, goal: &str) -> GoalOutcome {
        let node = Node {
            id: format!("{}.{}", parent.id, index + 1),
            goal: goal.to_string(),
            parent: Some((parent.id.clone(), parent.goal.clone())),
            stack: Vec::new(),
            known: Vec::new(),
            evidence: Vec::new(),
            depth: parent.depth + 1,
        };
        let reason = "the parent goal was already achieved".to_string();
        self.record(&node, scope, GoalEventKind::Skipped, Some(GoalStatus::Skipped), json!({ "reason": reason }));
        let frame = Frame { node: &node, scope: None, started_at: chrono::Utc::now(), t0: std::time::Instant::now() };
        self.outcome(&frame, GoalStatus::Skipped, Some(reason), None, GoalResult::default(), vec![])
    }

    async fn synthesize(
        &self,
        p: &Pursuit,
        frame: &Frame<'_>,
        scope: &RunScope,
        ctx: &GoalContext,
        children: Vec<GoalOutcome>,
        verdict: Verdict,
    ) -> GoalOutcome {
        let node = frame.node;
        let with_result: Vec<&GoalOutcome> = children.iter().filter(|c| c.status.has_result()).collect();
        let mut limitations: Vec<String> = children
            .iter()
            .filter(|c| !c.status.has_result() && c.status != GoalStatus::Skipped)
            .map(|c| format!("sub-goal `{}` {}: {}", c.goal, c.status, c.reason.as_deref().unwrap_or("no result")))
            .collect();
        if with_result.is_empty() {
            return self.nothing_to_synthesize(frame, scope, children, limitations);
        }
        let gaps = match &verdict {
            Verdict::NotAchieved(c) => c.remaining_gaps.clone(),
            _ => Vec::new(),
        };
        limitations.extend(gaps.iter().map(|g| format!("not achieved: {g}")));
        let mut stopped = self.spending_stop(p, scope);
        let mut result = match &stopped {
            Some(stop) => {
                limitations.push(format!("synthesized without a model call: {stop}"));
                mechanical(&with_result, self.config.result_chars)
            }
            None => match self.synthesis_call(scope, ctx, node, &children, &verdict).await {
                Ok(result) => result,
                Err(e) => {
                    let (status, reason) = e.status_and_reason(Phase::Synthesize);
                    limitations.push(format!("synthesized without the model: {reason}"));
                    if status == GoalStatus::Constrained {
                        stopped = Some(reason);
                    }
                    mechanical(&with_result, self.config.result_chars)
                }
            },
        };
        result.limitations.extend(limitations);
        // What the sub-goals found contradictory stays visible above them.
        for c in children.iter().flat_map(|c| c.result.contradictions.iter()) {
            if !result.contradictions.contains(c) {
                result.contradictions.push(c.clone());
            }
        }
        result.evidence = with_result.iter().map(|c| evidence_of(c)).collect();
        let (status, reason) = synthesis_status(&children, &verdict, stopped);
        self.record(
            node,
            scope,
            GoalEventKind::Synthesized,
            Some(status),
            json!({ "reason": reason, "result": result }),
        );
        self.outcome(frame, status, reason, None, result, children)
    }

    async fn synthesis_call(
        &self,
        scope: &RunScope,
        ctx: &GoalContext,
        node: &Node,
        children: &[GoalOutcome],
        verdict: &Verdict,
    ) -> Result<GoalResult, PhaseError> {
        let mut prompt = ctx.prompt(&node.goal);
        prompt.section("Sub-goal results", children.iter().map(result_item).collect(), "");
        match verdict {
            Verdict::Achieved(c) => {
                prompt.text(format!("\nThe goal was judged achieved (confidence {:.2}).\n", c.confidence));
            }
            Verdict::NotAchieved(c) => {
                prompt.text(format!(
                    "\nThe goal was judged NOT achieved (confidence {:.2}); list what is missing among the \
                     limitations.\n",
                    c.confidence
                ));
                prompt.section("Remaining gaps", c.remaining_gaps.clone(), "");
            }
            Verdict::None => {}
        }
        let s = self
            .structured::<SynthesisOutput>(Phase::Synthesize, prompt, scope, |s| {
                if s.summary.trim().is_empty() { Err("`summary` is empty".into()) } else { Ok(()) }
            })
            .await?;
        Ok(GoalResult {
            summary: shorten(&s.summary, self.config.result_chars),
            key_findings: s.key_findings,
            confidence: Some(s.confidence),
            limitations: s.limitations,
            contradictions: s.contradictions,
            evidence: Vec::new(),
        })
    }

    /// No sub-goal produced a result: the goal fails (or is constrained, when a limit stopped
    /// its sub-goals), keeping a provider fault that ended every one of them.
    fn nothing_to_synthesize(
        &self,
        frame: &Frame<'_>,
        scope: &RunScope,
        children: Vec<GoalOutcome>,
        limitations: Vec<String>,
    ) -> GoalOutcome {
        let status = if children.iter().any(|c| c.status == GoalStatus::Constrained) {
            GoalStatus::Constrained
        } else {
            GoalStatus::Failed
        };
        let reason = format!("no sub-goal produced a result ({})", limitations.join("; "));
        let kind = if status == GoalStatus::Constrained { GoalEventKind::Constrained } else { GoalEventKind::Failed };
        self.record(frame.node, scope, kind, Some(status), json!({ "reason": reason }));
        let result = GoalResult { summary: reason.clone(), limitations, ..Default::default() };
        let fault = children
            .iter()
            .filter(|c| c.status != GoalStatus::Skipped)
            .map(|c| c.fault.clone())
            .collect::<Option<Vec<String>>>()
            .and_then(|f| f.into_iter().next());
        let mut o = self.outcome(frame, status, Some(reason), None, result, children);
        o.fault = fault;
        o
    }
}

/// The verdict that ends a round early after failed sub-goals: their failures are the gaps the
/// next round plans around, with what was not yet pursued.
fn revise_after(failed: &[&GoalOutcome], pending: &[String]) -> AchievedCheck {
    let mut gaps: Vec<String> = failed
        .iter()
        .map(|o| format!("sub-goal `{}` failed: {}", o.goal, o.reason.as_deref().unwrap_or("no result")))
        .collect();
    gaps.push(format!("not yet pursued (replan them around the failure): {}", pending.join("; ")));
    AchievedCheck {
        reasoning: "a sub-goal failed, so the rest of the plan is revised".into(),
        achieved: false,
        confidence: 1.0,
        remaining_gaps: gaps,
    }
}

fn valid_plan(d: &Decomposition) -> Result<(), String> {
    if d.sub_goals.is_empty() {
        return Err("`sub_goals` is empty; give at least one sub-goal".into());
    }
    match d.sub_goals.iter().position(|s| s.goal.trim().is_empty()) {
        Some(i) => Err(format!("sub-goal {i} has an empty `goal`")),
        None => Ok(()),
    }
}

/// What sub-goal `i` is given: the results of the goals it depends on, then those of the
/// other sub-goals finished before it (in plan order), then the results of earlier rounds,
/// then what its parent was given — so when the budget is tight, what it depends on keeps
/// its place.
fn evidence_for(
    i: usize,
    plan: &Plan,
    slots: &[Option<GoalOutcome>],
    earlier: &[GoalOutcome],
    node: &Node,
) -> Vec<Evidence> {
    let mut deps: Vec<usize> =
        plan.subs[i].depends_on.iter().filter_map(|&d| usize::try_from(d).ok()).filter(|&d| d != i).collect();
    deps.sort_unstable();
    deps.dedup();
    let others = (0..slots.len()).filter(|d| !deps.contains(d));
    let siblings: Vec<&GoalOutcome> =
        deps.iter().copied().chain(others).filter_map(|d| slots.get(d).and_then(Option::as_ref)).collect();
    siblings
        .into_iter()
        .chain(earlier.iter())
        .filter(|o| o.status.has_result())
        .map(evidence_of)
        .chain(node.evidence.iter().cloned())
        .collect()
}

fn evidence_of(o: &GoalOutcome) -> Evidence {
    let mut content = o.result.summary.clone();
    if !o.result.key_findings.is_empty() {
        content.push_str("\nKey findings: ");
        content.push_str(&o.result.key_findings.join("; "));
    }
    let reference = o.result.evidence.iter().find_map(|e| e.reference.clone());
    Evidence { goal: o.goal.clone(), source: "sub-goal".into(), content, reference }
}

/// A sub-goal's outcome as one prompt item.
fn result_item(o: &GoalOutcome) -> String {
    let mut out = format!("[{}] {}", o.status, o.goal);
    if let Some(r) = &o.reason {
        out.push_str(&format!("\n  reason: {r}"));
    }
    if !o.result.summary.is_empty() && o.status.has_result() {
        out.push_str(&format!("\n  result: {}", o.result.summary));
    }
    for f in &o.result.key_findings {
        out.push_str(&format!("\n  finding: {f}"));
    }
    for l in &o.result.limitations {
        out.push_str(&format!("\n  limitation: {l}"));
    }
    for c in &o.result.contradictions {
        out.push_str(&format!("\n  contradiction: {c}"));
    }
    if let Some(c) = o.result.confidence {
        out.push_str(&format!("\n  confidence: {c:.2}"));
    }
    out
}

/// The status of a decomposed goal once its sub-goals ran: achieved when the check said so;
/// constrained when a limit or cancellation cut the work short; failed when most sub-goals
/// (not counting skipped ones) produced no result; incomplete when the last check said it is
/// not achieved; completed otherwise (no usable verdict).
fn synthesis_status(
    children: &[GoalOutcome],
    verdict: &Verdict,
    stopped: Option<String>,
) -> (GoalStatus, Option<String>) {
    let considered = children.iter().filter(|c| c.status != GoalStatus::Skipped).count();
    let failed = children.iter().filter(|c| c.status != GoalStatus::Skipped && !c.status.has_result()).count();
    let constrained: Vec<&str> =
        children.iter().filter(|c| c.status == GoalStatus::Constrained).map(|c| c.goal.as_str()).collect();
    match verdict {
        Verdict::Achieved(_) if !constrained.is_empty() => (
            GoalStatus::Achieved,
            Some(format!("{} sub-goal(s) constrained: {}", constrained.len(), constrained.join("; "))),
        ),
        Verdict::Achieved(_) => (GoalStatus::Achieved, None),
        _ if stopped.is_some() => (GoalStatus::Constrained, stopped),
        _ if failed * 2 > considered => {
            (GoalStatus::Failed, Some(format!("{failed} of {considered} sub-goals did not succeed")))
        }
        Verdict::NotAchieved(c) => {
            let gaps = if c.remaining_gaps.is_empty() { "no gaps named".into() } else { c.remaining_gaps.join("; ") };
            (GoalStatus::Incomplete, Some(format!("judged not achieved: {gaps}")))
        }
        Verdict::None => (GoalStatus::Completed, None),
    }
}

/// A synthesis made without the model: the sub-results side by side, within the result size.
fn mechanical(with_result: &[&GoalOutcome], result_chars: usize) -> GoalResult {
    let summary =
        with_result.iter().map(|c| format!("{}: {}", c.goal, c.result.summary)).collect::<Vec<_>>().join("\n");
    let mut key_findings: Vec<String> = Vec::new();
    for f in with_result.iter().flat_map(|c| c.result.key_findings.iter()) {
        if !key_findings.contains(f) {
            key_findings.push(f.clone());
        }
    }
    let confidences: Vec<f64> = with_result.iter().filter_map(|c| c.result.confidence).collect();
    let confidence = (!confidences.is_empty()).then(|| confidences.iter().sum::<f64>() / confidences.len() as f64);
    GoalResult { summary: shorten(&summary, result_chars), key_findings, confidence, ..Default::default() }
}

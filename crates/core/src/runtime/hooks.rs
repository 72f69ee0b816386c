//! The agent loop's capabilities as hooks. Each is a small type acting at the points of a run it
//! needs ([`Hook`]): at the start, before each model call, on an answer, before and after tool
//! calls; each says whether the run goes on ([`Flow`]). [`built_in`] assembles them in the one
//! order the loop relies on; [`Agent::drive`](super::Agent) only moves between [`State`]s.
//!
//! [`State`]: super::turn::State

use async_trait::async_trait;

use crate::asks::{AnswerCheck, MAX_REPAIRS};
use crate::compact::CompactionConfig;
use crate::inbox::Inbox;
use crate::invoke::ToolOutcome;
use crate::message::{Message, Role, ToolCall};
use crate::provider::StopReason;
use crate::run::FinishReason;

use super::turn::{Reply, State, Turn};
use super::{Agent, AgentError, LateTools, StuckDetector};

/// What a hook decides at its point.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Flow {
    /// Go on.
    Go,
    /// Ask the model again (back to before the model call) instead of ending on this answer.
    Again,
    /// The run ends for this reason.
    Stop(FinishReason),
}

impl Flow {
    /// The state after this decision, `next` when the run goes on.
    pub fn then(self, next: State) -> State {
        match self {
            Flow::Go => next,
            Flow::Again => State::BeforeCall,
            Flow::Stop(reason) => State::Done(reason),
        }
    }
}

/// Tool calls that will not run: each gets `text` as its result and the run ends for `reason`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    /// Why the run ends.
    pub reason: FinishReason,
    /// The result each call gets.
    pub text: String,
}

/// A capability of the loop, acting at the points it needs (each defaults to going on).
#[async_trait]
pub(crate) trait Hook: Send {
    /// Once, before the first turn.
    async fn on_start(&mut self, _turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        Ok(Flow::Go)
    }

    /// Before each model call.
    async fn before_call(&mut self, _turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        Ok(Flow::Go)
    }

    /// When the model answered without tool calls; going on ends the run as answered.
    fn on_answer(&mut self, _turn: &mut Turn<'_>, _reply: &Reply) -> Result<Flow, AgentError> {
        Ok(Flow::Go)
    }

    /// Before the agent's tool calls run: a refusal skips them all and ends the run.
    fn before_tools(&mut self, _turn: &Turn<'_>, _reply: &Reply) -> Option<Refusal> {
        None
    }

    /// After the agent's tool calls ran (a call that stopped the run ends it first).
    fn after_tools(&mut self, _turn: &Turn<'_>, _reply: &Reply, _outcomes: &[ToolOutcome]) -> Flow {
        Flow::Go
    }
}

/// Hooks in order: at each point the first that does not go on decides.
pub(crate) struct Hooks(Vec<Box<dyn Hook>>);

impl Hooks {
    /// Runs the hooks' [`Hook::on_start`].
    pub async fn on_start(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        for hook in &mut self.0 {
            match hook.on_start(turn).await? {
                Flow::Go => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Go)
    }

    /// Runs the hooks' [`Hook::before_call`].
    pub async fn before_call(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        for hook in &mut self.0 {
            match hook.before_call(turn).await? {
                Flow::Go => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Go)
    }

    /// Runs the hooks' [`Hook::on_answer`].
    pub fn on_answer(&mut self, turn: &mut Turn<'_>, reply: &Reply) -> Result<Flow, AgentError> {
        for hook in &mut self.0 {
            match hook.on_answer(turn, reply)? {
                Flow::Go => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Go)
    }

    /// Runs the hooks' [`Hook::before_tools`].
    pub fn before_tools(&mut self, turn: &Turn<'_>, reply: &Reply) -> Option<Refusal> {
        self.0.iter_mut().find_map(|hook| hook.before_tools(turn, reply))
    }

    /// Runs the hooks' [`Hook::after_tools`].
    pub fn after_tools(&mut self, turn: &Turn<'_>, reply: &Reply, outcomes: &[ToolOutcome]) -> Flow {
        for hook in &mut self.0 {
            match hook.after_tools(turn, reply, outcomes) {
                Flow::Go => {}
                flow => return flow,
            }
        }
        Flow::Go
    }
}

/// The built-in hooks of `agent`'s runs for a caller who asked `check` of the answer and offers
/// client tools when `client_tools`, in their order: plan mode's tools before the clash check
/// sees them, a cut-off turn resumed before the first call; limits before tools and messages
/// join and before compaction; plan mode and a provider's stop before the answer's format;
/// the token cut-off before the stuck detector counts the calls; client calls before denials.
pub(crate) fn built_in(agent: &Agent, check: Option<&AnswerCheck>, client_tools: bool) -> Hooks {
    let config = &agent.config;
    let limits = &config.limits;
    let mut hooks: Vec<Box<dyn Hook>> = Vec::new();
    if config.plan_mode {
        hooks.push(Box::new(PlanMode));
    }
    if client_tools {
        hooks.push(Box::new(ClientTools));
    }
    hooks.push(Box::new(ResumePending));
    hooks.push(Box::new(StepLimit { max: limits.max_steps }));
    if let Some(max) = limits.max_transcript_chars {
        hooks.push(Box::new(TranscriptLimit { max }));
    }
    if let Some(late) = &agent.late {
        hooks.push(Box::new(JoiningTools { late: late.clone(), joined: 0 }));
    }
    if let Some(inbox) = &agent.inbox {
        hooks.push(Box::new(Steering { inbox: inbox.clone() }));
    }
    if let Some(config) = &config.compaction {
        hooks.push(Box::new(Compaction { config: config.clone() }));
    }
    hooks.push(Box::new(ProviderStops));
    if let Some(check) = check {
        hooks.push(Box::new(AnswerFormat { check: check.clone(), repairs: 0 }));
    }
    hooks.push(Box::new(Stuck {
        threshold: limits.stuck_threshold,
        detector: StuckDetector::new(limits.stuck_threshold),
    }));
    if limits.max_permission_denials > 0 {
        hooks.push(Box::new(DenialLimit { max: limits.max_permission_denials, denials: 0 }));
    }
    Hooks(hooks)
}

/// Plan mode: only read-only tools are offered (those joining later too), and the answer is a
/// plan awaiting approval.
struct PlanMode;

#[async_trait]
impl Hook for PlanMode {
    async fn on_start(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        turn.read_only = true;
        // Offered: what changes nothing. Run: the same, and a call to anything else is refused
        // saying why (by the gate in plan mode, else by the tool itself).
        let planning = turn.tools.planning();
        turn.set_tools(turn.tools.read_only());
        turn.invoker = turn.agent.invoker_over(planning);
        Ok(Flow::Go)
    }

    fn on_answer(&mut self, _turn: &mut Turn<'_>, _reply: &Reply) -> Result<Flow, AgentError> {
        Ok(Flow::Stop(FinishReason::PlanPending))
    }
}

/// The caller's tools: none may have the name of one of the agent's own; a call to one ends the
/// run with the calls handed back (after the agent's own were answered).
struct ClientTools;

#[async_trait]
impl Hook for ClientTools {
    async fn on_start(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        match turn.asks.tools.iter().find(|t| turn.tools.get(&t.name).is_some()) {
            Some(clash) => Err(AgentError::ToolClash(clash.name.clone())),
            None => Ok(Flow::Go),
        }
    }

    fn after_tools(&mut self, _turn: &Turn<'_>, reply: &Reply, _outcomes: &[ToolOutcome]) -> Flow {
        if reply.client.is_empty() { Flow::Go } else { Flow::Stop(FinishReason::ClientToolCalls) }
    }
}

/// A turn cut off before its answer (a kill) goes on where it was: the calls of its last
/// assistant message that have no result run first (in a journaled run, those that had
/// finished are read back).
struct ResumePending;

#[async_trait]
impl Hook for ResumePending {
    async fn on_start(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        let messages = turn.rec.transcript.messages();
        let pending: Vec<ToolCall> = match messages.iter().rev().find(|m| m.role == Role::Assistant) {
            Some(last) => {
                let open: Vec<&str> = turn.rec.transcript.pending_calls().collect();
                last.tool_calls.iter().filter(|c| open.contains(&c.id.as_str())).cloned().collect()
            }
            None => Vec::new(),
        };
        if pending.is_empty() {
            return Ok(Flow::Go);
        }
        let outcomes = turn.run(&pending).await;
        let stop = outcomes.iter().find_map(|o| o.stop.clone());
        turn.rec.push_outcomes(outcomes)?;
        Ok(stop.map_or(Flow::Go, Flow::Stop))
    }
}

/// At most `max` model turns.
struct StepLimit {
    max: u32,
}

#[async_trait]
impl Hook for StepLimit {
    async fn before_call(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        Ok(if *turn.step >= self.max { Flow::Stop(FinishReason::BudgetExceeded) } else { Flow::Go })
    }
}

/// A transcript past `max` characters ends the run.
struct TranscriptLimit {
    max: usize,
}

#[async_trait]
impl Hook for TranscriptLimit {
    async fn before_call(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        let over = turn.rec.transcript.size_chars() > self.max;
        Ok(if over { Flow::Stop(FinishReason::TranscriptLimit) } else { Flow::Go })
    }
}

/// Tools that became ready while the run goes (late MCP servers) are offered from the next call.
struct JoiningTools {
    late: LateTools,
    joined: usize,
}

#[async_trait]
impl Hook for JoiningTools {
    async fn before_call(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        let new = self.late.since(self.joined);
        if !new.is_empty() {
            self.joined += new.len();
            turn.offer(&new);
        }
        Ok(Flow::Go)
    }
}

/// Messages a person sent while the run goes (the steering inbox) join before the next call.
struct Steering {
    inbox: Inbox,
}

#[async_trait]
impl Hook for Steering {
    async fn before_call(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        for m in self.inbox.deliver(turn.scope, *turn.step) {
            turn.rec.push(m)?;
        }
        Ok(Flow::Go)
    }
}

/// The transcript is compacted before a call when it nears the context window.
struct Compaction {
    config: CompactionConfig,
}

#[async_trait]
impl Hook for Compaction {
    async fn before_call(&mut self, turn: &mut Turn<'_>) -> Result<Flow, AgentError> {
        let stopped = turn.agent.compact(turn.rec, turn.scope, *turn.step, turn.deadline, &self.config).await?;
        Ok(stopped.map_or(Flow::Go, Flow::Stop))
    }
}

/// A response the provider cut short ends the run: an answer ended otherwise than naturally,
/// and calls cut off by the token limit (not run).
struct ProviderStops;

#[async_trait]
impl Hook for ProviderStops {
    fn on_answer(&mut self, _turn: &mut Turn<'_>, reply: &Reply) -> Result<Flow, AgentError> {
        Ok(if reply.stop.is_natural() { Flow::Go } else { Flow::Stop(FinishReason::ProviderStop(reply.stop.clone())) })
    }

    fn before_tools(&mut self, _turn: &Turn<'_>, reply: &Reply) -> Option<Refusal> {
        (reply.stop == StopReason::MaxTokens).then(|| Refusal {
            reason: FinishReason::ProviderStop(StopReason::MaxTokens),
            text: "not executed: the response was cut off by the token limit".to_string(),
        })
    }
}

/// An answer failing the caller's check goes back to the model to be redone, at most
/// [`MAX_REPAIRS`] times; then the run ends with no answer.
struct AnswerFormat {
    check: AnswerCheck,
    repairs: u32,
}

#[async_trait]
impl Hook for AnswerFormat {
    fn on_answer(&mut self, turn: &mut Turn<'_>, reply: &Reply) -> Result<Flow, AgentError> {
        match self.check.0.check(&reply.text) {
            Ok(()) => Ok(Flow::Go),
            Err(_) if self.repairs >= MAX_REPAIRS => Ok(Flow::Stop(FinishReason::NoAnswer)),
            Err(why) => {
                self.repairs += 1;
                turn.rec.push(Message::user(format!(
                    "Your answer does not have the required format: {why}\nAnswer again with only the corrected answer."
                )))?;
                Ok(Flow::Again)
            }
        }
    }
}

/// The same call repeated `threshold` times in a row is not run; the run ends as stuck.
struct Stuck {
    threshold: u32,
    detector: StuckDetector,
}

#[async_trait]
impl Hook for Stuck {
    fn before_tools(&mut self, _turn: &Turn<'_>, reply: &Reply) -> Option<Refusal> {
        self.detector.observe(&reply.calls).then(|| Refusal {
            reason: FinishReason::Stuck,
            text: format!(
                "not executed: the same call was repeated {} times in a row; the run stopped as stuck",
                self.threshold
            ),
        })
    }
}

/// `max` calls refused by the permission gate end the run.
struct DenialLimit {
    max: u32,
    denials: u32,
}

#[async_trait]
impl Hook for DenialLimit {
    fn after_tools(&mut self, _turn: &Turn<'_>, _reply: &Reply, outcomes: &[ToolOutcome]) -> Flow {
        self.denials += outcomes.iter().filter(|o| o.denied).count() as u32;
        if self.denials >= self.max { Flow::Stop(FinishReason::PermissionDenialLimit) } else { Flow::Go }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::asks::{Asks, CheckAnswer};
    use crate::message::ToolSpec;
    use crate::mock::{MockProvider, MockReply};
    use crate::run::RunScope;
    use crate::runtime::{AgentConfig, Recorder};
    use crate::tool::{Tool, ToolContext, ToolError, ToolRegistry};
    use crate::transcript::Transcript;

    /// A tool answering `ran NAME`, read-only or not.
    struct Probe(&'static str, bool);

    #[async_trait]
    impl Tool for Probe {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: self.0.into(), description: String::new(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, _a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            Ok(format!("ran {}", self.0))
        }
        fn read_only(&self) -> bool {
            self.1
        }
    }

    fn tools(probes: &[(&'static str, bool)]) -> ToolRegistry {
        let mut tools = ToolRegistry::new();
        for &(name, read_only) in probes {
            tools.register(Arc::new(Probe(name, read_only)));
        }
        tools
    }

    fn agent(probes: &[(&'static str, bool)]) -> Agent {
        Agent::new(Arc::new(MockProvider::new(Vec::<MockReply>::new()))).with_tools(tools(probes))
    }

    fn recorder(messages: Vec<Message>) -> Recorder {
        Recorder { transcript: Transcript::from_messages(messages).unwrap(), log: None }
    }

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: json!({}) }
    }

    fn reply(stop: StopReason, own: Vec<ToolCall>, client: Vec<ToolCall>) -> Reply {
        let calls = own.iter().chain(&client).cloned().collect();
        Reply { text: "the answer".into(), stop, calls, own, client }
    }

    fn outcome(denied: bool) -> ToolOutcome {
        ToolOutcome {
            id: "call_1".into(),
            name: "look".into(),
            output: String::new(),
            is_error: denied,
            denied,
            duration_ms: 0,
            stop: None,
        }
    }

    fn names(turn: &Turn<'_>) -> Vec<String> {
        turn.tools.names()
    }

    #[tokio::test]
    async fn plan_mode_offers_only_read_only_tools_joining_ones_too_and_stops_on_its_plan() {
        let agent = agent(&[("look", true), ("write", false)]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        assert_eq!(PlanMode.on_start(&mut turn).await.unwrap(), Flow::Go);
        assert_eq!(names(&turn), ["look"], "offered: what changes nothing");
        let call = ToolCall { id: "c".into(), name: "write".into(), arguments: json!({}) };
        let refused = turn.invoker.invoke(call, &scope, 1, None).await;
        assert!(refused.is_error && refused.output.contains("plan mode"), "a call to the rest says why: {refused:?}");
        turn.offer(&[tools(&[("fetch", true), ("edit", false)])]);
        assert_eq!(names(&turn), ["fetch", "look"]);
        let answer = reply(StopReason::EndTurn, vec![], vec![]);
        assert_eq!(PlanMode.on_answer(&mut turn, &answer).unwrap(), Flow::Stop(FinishReason::PlanPending));
    }

    #[tokio::test]
    async fn client_tools_may_not_clash_with_the_agents_own_and_a_call_to_one_ends_the_run() {
        let agent = agent(&[("look", true)]);
        let scope = RunScope::detached("t");
        let spec = |name: &str| ToolSpec { name: name.into(), description: String::new(), parameters: json!({}) };
        let clashing = Asks { tools: vec![spec("look")], ..Default::default() };
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &clashing);
        let err = ClientTools.on_start(&mut turn).await.unwrap_err();
        assert!(matches!(err, AgentError::ToolClash(name) if name == "look"));

        let asks = Asks { tools: vec![spec("clock")], ..Default::default() };
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        assert_eq!(ClientTools.on_start(&mut turn).await.unwrap(), Flow::Go);
        let own_only = reply(StopReason::ToolUse, vec![call("call_1", "look")], vec![]);
        assert_eq!(ClientTools.after_tools(&turn, &own_only, &[]), Flow::Go);
        let with_client = reply(StopReason::ToolUse, vec![call("call_1", "look")], vec![call("call_2", "clock")]);
        assert_eq!(ClientTools.after_tools(&turn, &with_client, &[]), Flow::Stop(FinishReason::ClientToolCalls));
    }

    #[tokio::test]
    async fn resume_pending_runs_only_the_calls_a_cut_off_turn_left_without_results() {
        let agent = agent(&[("look", true), ("write", false)]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let cut_off = vec![
            Message::user("go"),
            Message::assistant_with_tools("", vec![call("call_1", "look"), call("call_2", "write")]),
            Message::tool_result("call_1", "looked before the kill", false),
        ];
        let (mut rec, mut step) = (recorder(cut_off), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        assert_eq!(ResumePending.on_start(&mut turn).await.unwrap(), Flow::Go);
        let messages = rec.transcript.messages();
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_2"));
        assert_eq!(messages[3].content, "ran write");
        assert!(rec.transcript.is_balanced());
    }

    #[tokio::test]
    async fn step_limit_ends_the_run_as_over_budget_once_max_steps_were_taken() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![]), 1);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let mut hook = StepLimit { max: 2 };
        assert_eq!(hook.before_call(&mut turn).await.unwrap(), Flow::Go);
        *turn.step = 2;
        assert_eq!(hook.before_call(&mut turn).await.unwrap(), Flow::Stop(FinishReason::BudgetExceeded));
    }

    #[tokio::test]
    async fn transcript_limit_ends_a_run_whose_transcript_grew_past_it() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![Message::user("x".repeat(100))]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        assert_eq!(TranscriptLimit { max: 1_000 }.before_call(&mut turn).await.unwrap(), Flow::Go);
        let flow = TranscriptLimit { max: 50 }.before_call(&mut turn).await.unwrap();
        assert_eq!(flow, Flow::Stop(FinishReason::TranscriptLimit));
    }

    #[tokio::test]
    async fn joining_tools_are_offered_and_run_from_the_next_call_each_once() {
        let agent = agent(&[("look", true)]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let late = LateTools::new();
        let mut hook = JoiningTools { late: late.clone(), joined: 0 };
        assert_eq!(hook.before_call(&mut turn).await.unwrap(), Flow::Go);
        assert_eq!(names(&turn), ["look"]);
        late.add(tools(&[("mcp_fetch", true)]));
        hook.before_call(&mut turn).await.unwrap();
        hook.before_call(&mut turn).await.unwrap();
        assert_eq!(names(&turn), ["look", "mcp_fetch"]);
        assert_eq!(hook.joined, 1);
        let outcomes = turn.run(&[call("call_1", "mcp_fetch")]).await;
        assert_eq!(outcomes[0].output, "ran mcp_fetch");
    }

    #[tokio::test]
    async fn steering_messages_join_the_transcript_before_the_next_call() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![Message::user("go")]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let inbox = Inbox::new();
        let mut hook = Steering { inbox: inbox.clone() };
        inbox.push("also check the tests");
        assert_eq!(hook.before_call(&mut turn).await.unwrap(), Flow::Go);
        assert!(inbox.is_empty());
        let last = rec.transcript.messages().last().cloned().unwrap();
        assert_eq!((last.role, last.content.as_str()), (Role::User, "also check the tests"));
    }

    #[tokio::test]
    async fn compaction_elides_old_tool_results_once_the_transcript_nears_the_window() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let mut messages = vec![Message::user("go")];
        for i in 1..=3 {
            let id = format!("call_{i}");
            messages.push(Message::assistant_with_tools("", vec![call(&id, "look")]));
            messages.push(Message::tool_result(&id, "r".repeat(2_000), false));
        }
        let (mut rec, mut step) = (recorder(messages), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let config = CompactionConfig { keep_tool_results: 1, ..CompactionConfig::for_window(1_000) };
        let mut hook = Compaction { config };
        assert_eq!(hook.before_call(&mut turn).await.unwrap(), Flow::Go);
        let results: Vec<&Message> = rec.transcript.messages().iter().filter(|m| m.role == Role::Tool).collect();
        assert!(results[0].content.starts_with("[earlier tool result of"), "{}", results[0].content);
        assert!(results[1].content.starts_with("[earlier tool result of"));
        assert_eq!(results[2].content, "r".repeat(2_000));
    }

    #[tokio::test]
    async fn provider_stops_end_an_unnatural_answer_and_refuse_calls_cut_by_the_token_limit() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let natural = reply(StopReason::EndTurn, vec![], vec![]);
        assert_eq!(ProviderStops.on_answer(&mut turn, &natural).unwrap(), Flow::Go);
        let filtered = reply(StopReason::ContentFilter, vec![], vec![]);
        let flow = ProviderStops.on_answer(&mut turn, &filtered).unwrap();
        assert_eq!(flow, Flow::Stop(FinishReason::ProviderStop(StopReason::ContentFilter)));
        assert_eq!(
            ProviderStops.before_tools(&turn, &reply(StopReason::ToolUse, vec![call("c", "look")], vec![])),
            None
        );
        let cut = ProviderStops.before_tools(&turn, &reply(StopReason::MaxTokens, vec![call("c", "look")], vec![]));
        assert_eq!(cut.map(|r| r.reason), Some(FinishReason::ProviderStop(StopReason::MaxTokens)));
    }

    struct RejectAll;

    impl CheckAnswer for RejectAll {
        fn check(&self, _text: &str) -> Result<(), String> {
            Err("not JSON".into())
        }
    }

    #[tokio::test]
    async fn answer_format_asks_for_a_repair_max_repairs_times_then_ends_with_no_answer() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![Message::user("go"), Message::assistant("nope")]), 1);
        let mut turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let mut hook = AnswerFormat { check: AnswerCheck(Arc::new(RejectAll)), repairs: 0 };
        let answer = reply(StopReason::EndTurn, vec![], vec![]);
        for _ in 0..MAX_REPAIRS {
            assert_eq!(hook.on_answer(&mut turn, &answer).unwrap(), Flow::Again);
        }
        assert_eq!(hook.on_answer(&mut turn, &answer).unwrap(), Flow::Stop(FinishReason::NoAnswer));
        let repairs: Vec<&Message> =
            rec.transcript.messages().iter().filter(|m| m.role == Role::User).skip(1).collect();
        assert_eq!(repairs.len(), MAX_REPAIRS as usize);
        assert!(repairs[0].content.contains("does not have the required format: not JSON"));
    }

    #[tokio::test]
    async fn stuck_refuses_the_same_call_repeated_threshold_times_in_a_row() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let mut hook = Stuck { threshold: 3, detector: StuckDetector::new(3) };
        let same = reply(StopReason::ToolUse, vec![call("c", "look")], vec![]);
        assert_eq!(hook.before_tools(&turn, &same), None);
        assert_eq!(hook.before_tools(&turn, &same), None);
        let refusal = hook.before_tools(&turn, &same).unwrap();
        assert_eq!(refusal.reason, FinishReason::Stuck);
        assert!(refusal.text.contains("repeated 3 times in a row"));
    }

    #[tokio::test]
    async fn denial_limit_counts_refused_calls_across_turns_and_ends_the_run_at_max() {
        let agent = agent(&[]);
        let (scope, asks) = (RunScope::detached("t"), Asks::default());
        let (mut rec, mut step) = (recorder(vec![]), 0);
        let turn = Turn::new(&agent, &mut rec, &scope, &mut step, &asks);
        let mut hook = DenialLimit { max: 2, denials: 0 };
        let calls = reply(StopReason::ToolUse, vec![call("call_1", "look")], vec![]);
        assert_eq!(hook.after_tools(&turn, &calls, &[outcome(false), outcome(true)]), Flow::Go);
        assert_eq!(hook.after_tools(&turn, &calls, &[outcome(true)]), Flow::Stop(FinishReason::PermissionDenialLimit));
    }

    #[test]
    fn built_in_hooks_are_only_those_a_run_needs() {
        let plain = agent(&[]);
        assert_eq!(built_in(&plain, None, false).0.len(), 5);
        let config = AgentConfig {
            plan_mode: true,
            compaction: Some(CompactionConfig::for_window(1_000)),
            limits: crate::runtime::RunLimits { max_transcript_chars: Some(10), ..Default::default() },
            ..Default::default()
        };
        let full = agent(&[]).with_config(config).with_late_tools(LateTools::new()).with_inbox(Inbox::new());
        let check = AnswerCheck(Arc::new(RejectAll));
        assert_eq!(built_in(&full, Some(&check), true).0.len(), 12);
    }
}

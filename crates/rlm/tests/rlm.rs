#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The RLM loop end to end with scripted models: the primary model's replies are code, the
//! sub-model answers from a handler that looks at the prompt.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{
    AgentEvent, Budget, BudgetLimits, ChatProvider, ChatRequest, ChatResponse, ChatStream, EventKind, FinishReason,
    MemorySink, Message, MockProvider, MockReply, ProviderError, Role, RunScope, StopReason, ToolContext, ToolError,
    ToolRegistry, TypedTool, Usage,
};
use recursive_core::{ChatOptions, ExtensionEvent, ToolInvoker};
use recursive_rlm::{Inputs, Rlm, RlmConfig, RlmEvent, RlmOutcome, RlmResult, SnippetErrorKind};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// helpers

fn py(code: &str) -> String {
    format!("Let me run this.\n```python\n{code}\n```")
}

fn primary(replies: &[String]) -> MockProvider {
    MockProvider::new(replies.iter().map(|r| MockReply::text(r.clone()))).with_model("primary")
}

fn response(text: impl Into<String>) -> ChatResponse {
    ChatResponse {
        message: Message::assistant(text),
        stop_reason: StopReason::EndTurn,
        usage: Usage { input_tokens: 7, output_tokens: 3, ..Default::default() },
        cost_usd: Some(0.001),
        model: "sub".into(),
    }
}

fn last_user(req: &ChatRequest) -> String {
    req.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.clone()).unwrap_or_default()
}

/// A sub-model that answers `ans:<prompt>`.
fn echo_sub() -> MockProvider {
    MockProvider::with_handler(|req| Ok(response(format!("ans:{}", last_user(req)))))
}

fn rlm(primary: &MockProvider, sub: &MockProvider, config: RlmConfig) -> Rlm {
    use_worker_binary();
    Rlm::new(Arc::new(primary.clone()), Arc::new(sub.clone()), config).unwrap()
}

fn use_worker_binary() {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: vec![],
    });
}

fn scope_with_sink() -> (RunScope, MemorySink) {
    let sink = MemorySink::new();
    (RunScope::root("rlm", Arc::new(sink.clone()), Arc::new(Budget::unlimited())), sink)
}

fn observation(r: &RlmResult, iteration: usize) -> &str {
    &r.trajectory[iteration].observation
}

/// The RLM events of one type (by its tag), in order.
fn custom<'a>(events: &'a [AgentEvent], name: &str) -> Vec<&'a AgentEvent> {
    events.iter().filter(|e| e.kind.extension::<RlmEvent>().is_some_and(|r| r.to_json()["type"] == name)).collect()
}

/// The fields of an RLM event.
fn custom_data(e: &AgentEvent) -> Value {
    e.kind.extension::<RlmEvent>().unwrap().to_json()
}

/// A provider that counts how many calls are in flight at once (each takes `latency`).
struct Tracking {
    inner: MockProvider,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// How many calls each call waits to see in flight at once (10 s at most) before it answers,
    /// so a test of concurrency does not hang on the calls' timing.
    together: usize,
}

impl Tracking {
    fn new(latency: Duration, together: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: echo_sub().with_latency(latency),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            together,
        })
    }
}

#[async_trait]
impl ChatProvider for Tracking {
    fn name(&self) -> &str {
        "tracking"
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.max_in_flight.load(Ordering::SeqCst) < self.together && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let r = self.inner.stream(request).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

// ---------------------------------------------------------------------------------------------
// the tests

#[tokio::test(flavor = "multi_thread")]
async fn needle_in_a_megabyte_haystack_is_found_with_code_and_batched_queries() {
    let mut lines: Vec<String> =
        (0..20_000).map(|i| format!("log line {i:05}: nothing to see here, all systems nominal")).collect();
    lines[12_345] = "log line 12345: the secret code is 7391".to_string();
    let haystack = lines.join("\n");
    assert!(haystack.len() > 1_000_000);
    let p = primary(&[
        py("print(type(context).__name__, len(context))\nlines = context.split('\\n')\nprint(len(lines), lines[0])"),
        py("size = 2000\nchunks = ['\\n'.join(lines[i:i + size]) for i in range(0, len(lines), size)]\n\
             rs = llm_query_batched(['Find the secret code in this text. Reply with only the code, or NONE.\\n' + c for c in chunks])\n\
             found = [r for r in rs['result'] if r != 'NONE']\nprint(len(chunks), found)"),
        py("assert found[0] in context\nsubmit({'answer': found[0]})"),
    ]);
    let sub = MockProvider::with_handler(|req| {
        let prompt = last_user(req);
        let answer = match prompt.find("the secret code is ") {
            Some(i) => prompt[i + 19..].chars().take_while(|c| c.is_ascii_digit()).collect(),
            None => "NONE".to_string(),
        };
        Ok(response(answer))
    });
    let (scope, _) = scope_with_sink();
    let r = rlm(&p, &sub, RlmConfig::default())
        .run("What is the secret code?", Inputs::single("logs", haystack), &scope)
        .await
        .unwrap();
    assert_eq!(r.output, json!({"answer": "7391"}), "{:#?}", r.trajectory);
    assert!(r.submitted && !r.extracted);
    assert_eq!(r.outcome, RlmOutcome::Submitted);
    assert_eq!(r.sub_calls, 10);
    assert_eq!(sub.request_count(), 10);
    assert!(observation(&r, 1).contains("10 ['7391']"), "{}", observation(&r, 1));
    // The primary model never saw the needle, nor more than a sliver of the input.
    for req in p.requests() {
        let total: usize = req.messages.iter().map(|m| m.content.len()).sum();
        assert!(total < 40_000, "primary request of {total} chars");
        assert!(req.messages.iter().all(|m| !m.content.contains("the secret code is 7391")));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn budget_runs_out_mid_run_and_batches_are_all_or_nothing() {
    let p = primary(&[
        py(
            "a = llm_query('one')\nb = llm_query('two')\nbatch = llm_query_batched(['x', 'y'])\nc = llm_query('three')\nd = llm_query('four')\nprint(a)\nprint(b)\nprint(batch)\nprint(c)\nprint(d)",
        ),
        py("submit(c['result'])"),
    ]);
    let sub = echo_sub();
    let config = RlmConfig { max_llm_calls: 3, ..Default::default() };
    let (scope, _) = scope_with_sink();
    let r = rlm(&p, &sub, config).run("q", Inputs::single("doc", "text"), &scope).await.unwrap();
    let obs = observation(&r, 0);
    let lines: Vec<&str> = obs.lines().collect();
    assert_eq!(lines[0], "{'result': 'ans:one'}");
    assert_eq!(lines[1], "{'result': 'ans:two'}");
    assert!(lines[2].starts_with("{'error': ") && lines[2].contains("2 call(s) needed, 1 of 3 left"), "{obs}");
    assert_eq!(lines[3], "{'result': 'ans:three'}", "the failed batch spent nothing");
    assert!(lines[4].starts_with("{'error': ") && lines[4].contains("0 of 3 left"), "{obs}");
    assert_eq!(sub.request_count(), 3);
    assert_eq!(r.sub_calls, 3);
    assert_eq!(r.output, json!({"answer": "ans:three"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_invocations_have_separate_counters() {
    // The primary answers by conversation length, so two runs can share it.
    let p = MockProvider::with_handler(|req| {
        Ok(response(if req.messages.len() <= 2 {
            py("a = llm_query('p1')\nb = llm_query('p2')\nprint(a, b)")
        } else {
            py("submit(a['result'] + ' ' + b['result'])")
        }))
    });
    let sub = echo_sub().with_latency(Duration::from_millis(20));
    let machine = rlm(&p, &sub, RlmConfig { max_llm_calls: 2, ..Default::default() });
    let (s1, s2) = (RunScope::detached("a"), RunScope::detached("b"));
    let (r1, r2) = tokio::join!(machine.run("q1", Inputs::new(), &s1), machine.run("q2", Inputs::new(), &s2));
    for r in [r1.unwrap(), r2.unwrap()] {
        assert_eq!(r.output, json!({"answer": "ans:p1 ans:p2"}), "{:#?}", r.trajectory);
        assert_eq!(r.sub_calls, 2);
    }
    assert_eq!(sub.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn syntax_error_is_observed_and_the_model_recovers() {
    let p = primary(&[py("x = [1, 2\nprint(x)"), py("x = [1, 2]\nsubmit(str(sum(x)))")]);
    let (scope, _) = scope_with_sink();
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("sum?", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.trajectory[0].snippets[0].error, Some(SnippetErrorKind::Syntax));
    assert!(observation(&r, 0).contains("SyntaxError"), "{}", observation(&r, 0));
    // The model saw the error in its next request.
    assert!(last_user(&p.requests()[1]).contains("SyntaxError"));
    assert_eq!(r.output, json!({"answer": "3"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn infinite_loop_is_stopped_by_the_timeout_and_the_loop_goes_on() {
    let p = primary(&[py("n = 0\nwhile True:\n    n += 1"), py("submit('stopped at ' + str(n > 0))")]);
    let config = RlmConfig { snippet_timeout: Duration::from_millis(1500), ..Default::default() };
    let (scope, _) = scope_with_sink();
    let r = rlm(&p, &echo_sub(), config).run("loop", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.trajectory[0].snippets[0].error, Some(SnippetErrorKind::Timeout));
    assert!(observation(&r, 0).contains("TimeoutError"), "{}", observation(&r, 0));
    assert_eq!(r.output, json!({"answer": "stopped at True"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_bomb_is_stopped_by_the_limit() {
    let p = primary(&[py("x = []\nwhile True:\n    x.append('a' * 1000000)"), py("x = None\nsubmit('recovered')")]);
    let config = RlmConfig { memory_limit_bytes: Some(64 << 20), ..Default::default() };
    let (scope, _) = scope_with_sink();
    let r = rlm(&p, &echo_sub(), config).run("bomb", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.trajectory[0].snippets[0].error, Some(SnippetErrorKind::Memory), "{}", observation(&r, 0));
    assert!(observation(&r, 0).contains("MemoryError"));
    assert_eq!(r.output, json!({"answer": "recovered"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_submit_is_an_observation_and_a_valid_one_ends_the_run() {
    let schema = json!({
        "type": "object",
        "properties": {"count": {"type": "integer"}, "unit": {"type": "string"}},
        "required": ["count", "unit"]
    });
    let p = primary(&[
        py("submit({'count': 'three', 'unit': 'apples'})\nprint('not reached')"),
        py("print('fixing')\nsubmit({'count': 3, 'unit': 'apples'})\nprint('hidden after submit')"),
    ]);
    let config = RlmConfig { output_schema: schema, ..Default::default() };
    let (scope, sink) = scope_with_sink();
    let r = rlm(&p, &echo_sub(), config).run("how many?", Inputs::new(), &scope).await.unwrap();
    let first = observation(&r, 0);
    assert!(first.contains("ValueError") && first.contains("/count"), "{first}");
    assert!(!first.contains("not reached"));
    assert_eq!(r.output, json!({"count": 3, "unit": "apples"}));
    assert_eq!(r.iterations, 2);
    assert!(r.trajectory[1].snippets[0].submitted);
    assert!(r.trajectory[1].snippets[0].observation.contains("fixing"));
    assert!(!r.trajectory[1].observation.contains("hidden after submit"));
    let submits =
        custom(&sink.events(), "rlm_submit").iter().map(|e| custom_data(e)["valid"].clone()).collect::<Vec<_>>();
    assert_eq!(submits, vec![json!(false), json!(true)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_iterations_end_with_an_extraction_call() {
    let p = primary(&[
        py("x = 6 * 7\nprint(x)"),
        "I think I know it now.".to_string(),
        "Here it is:\n```json\n{\"answer\": \"42\"}\n```".to_string(),
    ]);
    let config = RlmConfig { max_iterations: 2, ..Default::default() };
    let (scope, _) = scope_with_sink();
    let r = rlm(&p, &echo_sub(), config).run("answer?", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.outcome, RlmOutcome::Extracted);
    assert!(r.extracted && !r.submitted);
    assert_eq!(r.output, json!({"answer": "42"}));
    assert_eq!(r.iterations, 2);
    // The reply without code got the corrective observation.
    assert!(observation(&r, 1).contains("no ```python code block"));
    let extraction_request = p.requests().pop().unwrap();
    assert!(last_user(&extraction_request).contains("used all 2 iterations"));
}

#[tokio::test(flavor = "multi_thread")]
async fn extraction_that_does_not_match_the_schema_is_reported() {
    let p = primary(&[py("print(1)"), "I could not find it.".to_string()]);
    let config = RlmConfig {
        max_iterations: 1,
        output_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ..Default::default()
    };
    let r = rlm(&p, &echo_sub(), config).run("n?", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert!(matches!(r.outcome, RlmOutcome::ExtractionFailed { .. }), "{:?}", r.outcome);
    assert!(!r.outcome.has_output());
}

#[tokio::test(flavor = "multi_thread")]
async fn rlm_query_starts_a_child_run_and_falls_back_at_the_depth_cap() {
    // One primary serves the parent and the child: it tells them apart by the question.
    let p = MockProvider::with_handler(|req| {
        let first_user = &req.messages[1].content;
        let turn = req.messages.len();
        let code = if first_user.contains("CHILD TASK") {
            match turn {
                2 => py("print(inputs['prompt'][:10])\nr = rlm_query('GRANDCHILD please')\nprint(r)"),
                _ => py("submit('child says ' + r['result'])"),
            }
        } else {
            match turn {
                2 => py("r = rlm_query('CHILD TASK: summarise')\nprint(r)"),
                _ => py("submit(r['result'])"),
            }
        };
        Ok(response(code))
    });
    let sub = echo_sub();
    let (scope, sink) = scope_with_sink();
    let r = rlm(&p, &sub, RlmConfig { max_depth: 1, ..Default::default() })
        .run("PARENT question", Inputs::new(), &scope)
        .await
        .unwrap();
    assert_eq!(r.output, json!({"answer": "child says ans:GRANDCHILD please"}), "{:#?}", r.trajectory);
    // At the cap, the grandchild was a plain sub-model call.
    assert_eq!(sub.request_count(), 1);
    assert_eq!(last_user(&sub.requests()[0]), "GRANDCHILD please");
    // rlm_query (1) + the child's fallback call (1); the child's first step is covered by its rlm_query,
    // its second step costs one more.
    assert_eq!(r.sub_calls, 3);

    let events = sink.events();
    let root_id = scope.ids().run_id.clone();
    let started = custom(&events, "rlm_child_started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].ids.run_id, root_id);
    let child_id = custom_data(started[0])["child_run_id"].as_str().unwrap().to_string();
    let child_events: Vec<&AgentEvent> = events.iter().filter(|e| e.ids.run_id == child_id).collect();
    assert!(!child_events.is_empty());
    for e in &child_events {
        assert_eq!(e.ids.depth, 1);
        assert_eq!(e.ids.parent_run_id.as_deref(), Some(root_id.as_str()));
        assert_eq!(e.ids.root_run_id, root_id);
        assert_eq!(e.ids.name, "rlm-d1");
    }
    assert!(matches!(&child_events[0].kind, EventKind::RunStarted { goal } if goal.contains("CHILD TASK")));
    assert!(
        child_events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::RunFinished { finish_reason: FinishReason::Completed, .. }))
    );
    let fallback = custom(&events, "rlm_child_fallback");
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0].ids.run_id, child_id);
    let finished = custom(&events, "rlm_child_finished");
    assert_eq!(custom_data(finished[0])["outcome"]["kind"], "submitted");
    // Usage rolls up: the root's totals include the child's primary calls and the sub-call.
    let all: u64 = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Usage { usage, .. } => Some(usage.total()),
            _ => None,
        })
        .sum();
    assert_eq!(r.usage.total(), all);
    assert!(r.cost_usd > 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn rlm_query_past_max_depth_zero_is_a_plain_llm_query() {
    let p = primary(&[py("r = rlm_query('sub task', {'rows': [1, 2]})\nsubmit(r['result'])")]);
    let sub = echo_sub();
    let (scope, sink) = scope_with_sink();
    let r =
        rlm(&p, &sub, RlmConfig { max_depth: 0, ..Default::default() }).run("q", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.output, json!({"answer": "ans:sub task\n\nInputs:\n{\"rows\":[1,2]}"}));
    assert!(custom(&sink.events(), "rlm_child_started").is_empty());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CountArgs {
    /// Text to count words in.
    text: String,
    /// Only count words longer than this.
    #[serde(default)]
    min_len: usize,
}

struct WordCount;

#[async_trait]
impl TypedTool for WordCount {
    type Args = CountArgs;
    fn name(&self) -> &str {
        "word_count"
    }
    fn description(&self) -> String {
        "Counts words.".into()
    }
    async fn run(&self, args: CountArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        if args.text.is_empty() {
            return Err(ToolError::failed("empty text"));
        }
        Ok(args.text.split_whitespace().filter(|w| w.len() > args.min_len).count().to_string())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn host_tools_are_callable_from_snippets() {
    let p = primary(&[py(
        "a = word_count('one two three')\nb = word_count(text='aa b cc', min_len=1)\nc = word_count('')\nd = await word_count('x y')\nprint(a, b, c, d)\nsubmit(a)",
    )]);
    let mut tools = ToolRegistry::new();
    tools.register_typed(WordCount);
    let machine = rlm(&p, &echo_sub(), RlmConfig::default()).with_host_tools(ToolInvoker::new(tools)).unwrap();
    let (scope, sink) = scope_with_sink();
    let r = machine.run("count", Inputs::new(), &scope).await.unwrap();
    assert!(
        r.trajectory[0].snippets[0].observation.starts_with("3 2 {'error': 'empty text'} 2"),
        "{:#?}",
        r.trajectory
    );
    assert_eq!(r.output, json!({"answer": "3"}));
    // The catalog told the model how to call it.
    let system = &p.requests()[0].messages[0].content;
    assert!(system.contains("word_count(text: string, min_len: integer = None)`: Counts words."), "{system}");
    let results = sink
        .events()
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::ToolResult { name, .. } if name == "word_count"))
        .count();
    assert_eq!(results, 4, "every host tool call is a tool call of the run tree");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_tools_cannot_take_reserved_names() {
    struct Named(&'static str);
    #[async_trait]
    impl recursive_core::Tool for Named {
        fn spec(&self) -> recursive_core::ToolSpec {
            recursive_core::ToolSpec {
                name: self.0.into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }
        }
        async fn call(&self, _a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }
    for name in ["llm_query", "submit", "rlm_query", "llm_query_batched"] {
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Named(name)));
        let err =
            rlm(&primary(&[]), &echo_sub(), RlmConfig::default()).with_host_tools(ToolInvoker::new(tools)).unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn long_observations_keep_head_and_tail() {
    let p = primary(&[py("print('A' * 150 + 'B' * 1000 + 'C' * 150)"), py("submit('done')")]);
    let config = RlmConfig { observation_max_chars: 200, ..Default::default() };
    let r = rlm(&p, &echo_sub(), config).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    let obs = &r.trajectory[0].snippets[0].observation;
    assert!(obs.starts_with(&"A".repeat(100)), "{obs}");
    assert!(obs.ends_with(&"C".repeat(100)), "{obs}");
    assert!(obs.contains("1,100 chars truncated"), "{obs}");
    let seen = last_user(&p.requests()[1]);
    assert!(seen.contains("chars truncated") && !seen.contains(&"B".repeat(200)));
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_and_awaited_llm_query_both_work() {
    let p = primary(&[py("a = llm_query('one')\nb = await llm_query('two')\nsubmit(a['result'] + '+' + b['result'])")]);
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(r.output, json!({"answer": "ans:one+ans:two"}), "{:#?}", r.trajectory);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_list_of_sub_calls_gathered_later_runs_them_once_each() {
    let p = primary(&[
        py(
            "tasks = [llm_query(p) for p in ['a', 'b']]\nrs = await asyncio.gather(*tasks)\nprint([r['result'] for r in rs])",
        ),
        py("submit('x')"),
    ]);
    let sub = echo_sub();
    let r = rlm(&p, &sub, RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    let obs = observation(&r, 0);
    assert!(obs.contains("['ans:a', 'ans:b']"), "{obs}");
    assert_eq!(sub.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn awaiting_a_plain_result_gets_a_hint() {
    let p = primary(&[py("r = llm_query('a')\nx = await r"), py("submit('x')")]);
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    let obs = observation(&r, 0);
    assert!(obs.contains("Hint:") && obs.contains("await asyncio.gather(*[llm_query(p) for p in ps])"), "{obs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn gather_runs_sub_calls_concurrently() {
    let tracking = Tracking::new(Duration::from_millis(50), 4);
    let p = primary(&[
        py("rs = await asyncio.gather(*[llm_query(f'p{i}') for i in range(4)])\nprint([r['result'] for r in rs])"),
        py("submit('ok')"),
    ]);
    use_worker_binary();
    let machine = Rlm::new(Arc::new(p.clone()), tracking.clone(), RlmConfig::default()).unwrap();
    let r = machine.run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(observation(&r, 0).lines().next().unwrap(), "['ans:p0', 'ans:p1', 'ans:p2', 'ans:p3']");
    assert_eq!(tracking.max_in_flight.load(Ordering::SeqCst), 4);

    // Written as plain calls, the same sub-calls run one after the other.
    let sequential = Tracking::new(Duration::from_millis(10), 1);
    let p = primary(&[py("rs = [llm_query(f'p{i}') for i in range(4)]"), py("submit('ok')")]);
    use_worker_binary();
    let machine = Rlm::new(Arc::new(p), sequential.clone(), RlmConfig::default()).unwrap();
    machine.run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(sequential.max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn batched_queries_respect_the_concurrency_limit_and_keep_order() {
    let tracking = Tracking::new(Duration::from_millis(20), 3);
    let p = primary(&[py("rs = llm_query_batched([f'p{i}' for i in range(7)])\nsubmit(','.join(rs['result']))")]);
    let config = RlmConfig { batch_concurrency: 3, ..Default::default() };
    use_worker_binary();
    let machine = Rlm::new(Arc::new(p), tracking.clone(), config).unwrap();
    let r = machine.run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(r.output, json!({"answer": "ans:p0,ans:p1,ans:p2,ans:p3,ans:p4,ans:p5,ans:p6"}));
    assert_eq!(tracking.max_in_flight.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_batch_elements_are_error_strings() {
    let sub = MockProvider::with_handler(|req| {
        let p = last_user(req);
        if p == "bad" { Err(ProviderError::Invalid("no such model".into())) } else { Ok(response(format!("ans:{p}"))) }
    });
    let p = primary(&[
        py("rs = llm_query_batched(['good', 'bad'])\nprint(rs['result'])\nprint(llm_query('bad'))"),
        py("submit('x')"),
    ]);
    let r = rlm(&p, &sub, RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    let obs = observation(&r, 0);
    assert!(obs.contains("['ans:good', '[error] ProviderError: no such model']"), "{obs}");
    assert!(obs.contains("{'error': 'no such model'}"), "{obs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn variables_persist_across_iterations() {
    let p = primary(&[py("x = 41\ndef inc(v):\n    return v + 1"), py("submit(str(inc(x)))")]);
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(r.output, json!({"answer": "42"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn several_blocks_run_in_order_and_stop_at_the_first_failure() {
    let reply = "```python\na = 1\n```\n```py\nprint(a + 1)\n```\n```repl\nraise ValueError('bad')\n```\n```python\nprint('never')\n```";
    let p = primary(&[reply.to_string(), py("submit('x')")]);
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    let it = &r.trajectory[0];
    assert_eq!(it.snippets.len(), 3);
    assert_eq!(it.snippets[1].observation, "2");
    assert!(it.observation.contains("the remaining 1 block(s) did not run because block 3 failed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn inputs_are_bound_as_dict_and_json_values() {
    let p = primary(&[py("print(sorted(inputs.keys()), inputs['rows'][1]['n'], inputs['doc'][:5])\nsubmit('x')")]);
    let inputs = Inputs::new().with("doc", "hello world").with("rows", json!([{"n": 1}, {"n": 2}]));
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", inputs, &RunScope::detached("t")).await.unwrap();
    assert_eq!(r.trajectory[0].snippets[0].observation, "['doc', 'rows'] 2 hello\n(submitted)");
    let first = &p.requests()[0];
    assert!(first.messages[1].content.contains("inputs[\"rows\"]: list, 2 items"), "{}", first.messages[1].content);
    assert!(!first.messages[0].content.contains("- `context`"), "no context alias with two inputs");
}

#[tokio::test(flavor = "multi_thread")]
async fn tree_budget_is_honoured_before_each_model_call() {
    let p = primary(&[py("print(1)"), py("print(2)"), py("submit('x')")]);
    let budget = Arc::new(Budget::new(BudgetLimits { max_tokens: Some(20), ..Default::default() }));
    let scope = RunScope::root("t", Arc::new(MemorySink::new()), budget);
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.outcome, RlmOutcome::Stopped { reason: FinishReason::TokenBudgetExceeded });
    assert_eq!(p.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_step_is_observable() {
    let p = primary(&[py("r = llm_query('hello')\nprint(r)"), py("submit('x')")]);
    let (scope, sink) = scope_with_sink();
    rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &scope).await.unwrap();
    let events = sink.events();
    assert!(matches!(events[0].kind, EventKind::RunStarted { .. }));
    assert_eq!(custom(&events, "rlm_iteration").len(), 2);
    assert_eq!(custom(&events, "rlm_snippet").len(), 2);
    assert_eq!(custom(&events, "rlm_observation").len(), 2);
    let sub = custom(&events, "rlm_sub_call");
    assert_eq!(sub.len(), 1);
    let d = custom_data(sub[0]);
    assert_eq!(d["prompt_chars"], 5);
    assert!(d["latency_ms"].is_u64());
    assert_eq!(sub[0].step, 1);
    let usage_events = events.iter().filter(|e| matches!(e.kind, EventKind::Usage { .. })).count();
    assert_eq!(usage_events, 3);
    assert!(matches!(
        &events.last().unwrap().kind,
        EventKind::RunFinished { finish_reason: FinishReason::Completed, .. }
    ));
    assert!(events.iter().all(|e| e.ids.run_id == scope.ids().run_id));
}

#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    let p = primary(&[py(
        "a = llm_query('one')\nb = await llm_query('two')\nrs = await asyncio.gather(llm_query('x'), llm_query('y'))\nsubmit(' '.join([a['result'], b['result']] + [r['result'] for r in rs]))",
    )]);
    let sub = echo_sub().with_latency(Duration::from_millis(10));
    let r = rlm(&p, &sub, RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(r.output, json!({"answer": "ans:one ans:two ans:x ans:y"}), "{:#?}", r.trajectory);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_run_stops_a_running_snippet_and_the_run() {
    let p = primary(&[py("while True:\n    pass"), py("submit('x')")]);
    let (scope, sink) = scope_with_sink();
    let cancel = scope.cancel_token().clone();
    // Cancelled once the looping snippet is running.
    tokio::spawn(async move {
        while custom(&sink.events(), "rlm_snippet").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    });
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.trajectory[0].snippets[0].error, Some(SnippetErrorKind::Cancelled));
    assert_eq!(r.outcome, RlmOutcome::Stopped { reason: FinishReason::Cancelled });
    assert_eq!(p.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn child_runs_started_together_run_concurrently() {
    let p = MockProvider::with_handler(|req| {
        let first_user = req.messages[1].content.clone();
        let code = if let Some(i) = first_user.find("CHILD ") {
            let name: String = first_user[i + 6..].chars().take(1).collect();
            py(&format!("r = llm_query('from {name}')\nsubmit(r['result'])"))
        } else if req.messages.len() <= 2 {
            py("rs = await asyncio.gather(rlm_query('CHILD A'), rlm_query('CHILD B'))\nprint(rs)")
        } else {
            py("submit(' | '.join([r['result'] for r in rs]))")
        };
        Ok(response(code))
    });
    let (scope, sink) = scope_with_sink();
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &scope).await.unwrap();
    assert_eq!(r.output, json!({"answer": "ans:from A | ans:from B"}), "{:#?}", r.trajectory);
    assert_eq!(custom(&sink.events(), "rlm_child_started").len(), 2);
    assert_eq!(r.sub_calls, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn sub_calls_end_at_the_run_trees_deadline() {
    // The sub-model takes 30 s; the tree has 300 ms. The sub-call is a guarded model call of the
    // tree, so it is cut off at the deadline and the run ends with the wall clock.
    let p = primary(&[py("r = llm_query('slow')\nprint(r)"), py("submit('late')")]);
    let sub = echo_sub().with_latency(Duration::from_secs(30));
    let budget =
        Arc::new(Budget::new(BudgetLimits { wall_clock: Some(Duration::from_millis(300)), ..Default::default() }));
    let scope = RunScope::root("t", Arc::new(MemorySink::new()), budget);
    let t0 = std::time::Instant::now();
    let r = rlm(&p, &sub, RlmConfig::default()).run("q", Inputs::new(), &scope).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10), "the sub-call outlived the tree's deadline");
    assert_eq!(r.outcome, RlmOutcome::Stopped { reason: FinishReason::WallClockExceeded });
    assert!(r.trajectory[0].observation.contains("wall_clock_exceeded"), "{:#?}", r.trajectory);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_rlm_spends_from_its_parents_budget() {
    // The parent's scope allows 60 tokens; the child's calls are charged to the same tree, so
    // the child stops once the tree's tokens are spent (each call costs 15).
    let p = MockProvider::with_handler(|req| {
        let first_user = &req.messages[1].content;
        let code = if first_user.contains("CHILD") {
            py("x = 1\nprint(x)")
        } else if req.messages.len() <= 2 {
            py("r = rlm_query('CHILD TASK')\nprint(r)")
        } else {
            py("submit('parent done')")
        };
        Ok(response(code))
    });
    let budget = Arc::new(Budget::new(BudgetLimits { max_tokens: Some(60), ..Default::default() }));
    let (_, sink) = scope_with_sink();
    let scope = RunScope::root("t", Arc::new(sink.clone()), budget);
    let r = rlm(&p, &echo_sub(), RlmConfig::default()).run("q", Inputs::new(), &scope).await.unwrap();
    let events = sink.events();
    let finished = custom(&events, "rlm_child_finished");
    let child = custom_data(finished[0]);
    assert_eq!(child["outcome"]["reason"]["kind"], "token_budget_exceeded", "{child}");
    assert_eq!(r.outcome, RlmOutcome::Stopped { reason: FinishReason::TokenBudgetExceeded });
    assert!(scope.budget().tokens_used() <= 60 + 15, "at most the call in flight overshoots");
}

// ---------------------------------------------------------------------------------------------
// every peer's conventions

async fn run_with(config: RlmConfig, replies: &[String], inputs: Inputs) -> RlmResult {
    let p = primary(replies);
    rlm(&p, &echo_sub(), config).run("q", inputs, &RunScope::detached("t")).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn dspy_style_submit_with_keywords_ends_the_run() {
    let r = run_with(RlmConfig::default(), &[py("SUBMIT(answer='from SUBMIT')")], Inputs::new()).await;
    assert_eq!((r.output, r.submitted), (json!({"answer": "from SUBMIT"}), true));
}

#[tokio::test(flavor = "multi_thread")]
async fn final_called_in_code_ends_the_run() {
    let r = run_with(RlmConfig::default(), &[py("FINAL('from FINAL')")], Inputs::new()).await;
    assert_eq!(r.output, json!({"answer": "from FINAL"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn final_var_called_in_code_reads_the_named_variable() {
    let r = run_with(RlmConfig::default(), &[py("result = 'the value'\nFINAL_VAR('result')")], Inputs::new()).await;
    assert_eq!(r.output, json!({"answer": "the value"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn final_var_written_in_the_reply_reads_the_variable() {
    let reply = "I computed it.\n```python\nres = 'found it'\nprint(res)\n```\nFINAL_VAR(res)".to_string();
    let r = run_with(RlmConfig::default(), &[reply], Inputs::new()).await;
    assert_eq!(r.output, json!({"answer": "found it"}));
    assert!(r.submitted);
}

#[tokio::test(flavor = "multi_thread")]
async fn final_var_of_a_missing_variable_is_an_observation_never_the_answer() {
    let r =
        run_with(RlmConfig::default(), &["FINAL_VAR(answer)".to_string(), py("submit('later')")], Inputs::new()).await;
    assert_ne!(r.output, json!({"answer": "FINAL_VAR(answer)"}));
    assert!(observation(&r, 0).contains("NameError"), "{}", observation(&r, 0));
    assert_eq!(r.output, json!({"answer": "later"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn final_with_text_written_in_the_reply_is_the_answer() {
    let r = run_with(RlmConfig::default(), &["All checked.\n\nFINAL(42 apples)".to_string()], Inputs::new()).await;
    assert_eq!(r.output, json!({"answer": "42 apples"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ready_answer_dict_ends_the_run_and_a_draft_one_does_not() {
    let replies = [
        py("answer = {'content': 'draft', 'ready': False}"),
        py("answer['content'] = 'final text'\nanswer['ready'] = True"),
    ];
    let r = run_with(RlmConfig::default(), &replies, Inputs::new()).await;
    assert_eq!(r.iterations, 2);
    assert_eq!(r.output, json!({"answer": "final text"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rlm_dialect_predefines_answer_and_ready_ends_the_run() {
    let config = RlmConfig { dialect: recursive_rlm::Dialect::Rlm, ..Default::default() };
    let replies = [py("print(answer)"), py("answer['content'] = 'from the dict'\nanswer['ready'] = True")];
    let r = run_with(config, &replies, Inputs::new()).await;
    assert!(observation(&r, 0).contains("'ready': False"), "{}", observation(&r, 0));
    assert_eq!(r.iterations, 2);
    assert_eq!(r.output, json!({"answer": "from the dict"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_final_is_an_observation_and_the_run_goes_on() {
    let r = run_with(RlmConfig::default(), &[py("FINAL(123)"), py("FINAL('ok')")], Inputs::new()).await;
    assert!(observation(&r, 0).contains("FINAL: the result does not match"), "{}", observation(&r, 0));
    assert_eq!(r.output, json!({"answer": "ok"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn rlm_dialect_returns_plain_text_and_errors_as_strings() {
    let config = RlmConfig { dialect: recursive_rlm::Dialect::Rlm, max_llm_calls: 2, ..Default::default() };
    let replies = [
        py(
            "r = llm_query('hello', model=None)\nprint(type(r).__name__, r)\nrs = llm_query_batched(['a', 'b', 'c'])\nprint(rs)",
        ),
        py("FINAL(r)"),
    ];
    let r = run_with(config, &replies, Inputs::new()).await;
    let obs = observation(&r, 0);
    assert!(obs.contains("str ans:hello"), "{obs}");
    assert!(obs.contains("[error] BudgetExceeded:"), "{obs}");
    assert_eq!(r.output, json!({"answer": "ans:hello"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn dspy_dialect_binds_each_input_by_name_and_teaches_submit() {
    let config = RlmConfig { dialect: recursive_rlm::Dialect::Dspy, ..Default::default() };
    let p = primary(&[py("SUBMIT(answer=document[:5])")]);
    let r = rlm(&p, &echo_sub(), config)
        .run("q", Inputs::single("document", "hello world"), &RunScope::detached("t"))
        .await
        .unwrap();
    assert_eq!(r.output, json!({"answer": "hello"}));
    let system = &p.requests()[0].messages[0].content;
    assert!(system.contains("SUBMIT(field=value"), "{system}");
    assert!(system.contains("-> str"), "{system}");
}

#[tokio::test(flavor = "multi_thread")]
async fn code_inside_think_never_runs() {
    let reply = "<think>Maybe\n```python\nsubmit('from thinking')\n```\n</think>\n```python\nsubmit('real')\n```";
    let r = run_with(RlmConfig::default(), &[reply.to_string()], Inputs::new()).await;
    assert_eq!(r.output, json!({"answer": "real"}));
    assert_eq!(r.trajectory[0].snippets.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_query_with_a_model_sends_that_model() {
    let sub = echo_sub();
    let p = primary(&[py("r = llm_query('x', model='other-model')\nsubmit(r['result'])")]);
    rlm(&p, &sub, RlmConfig::default()).run("q", Inputs::new(), &RunScope::detached("t")).await.unwrap();
    assert_eq!(sub.requests()[0].options.model, "other-model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_concurrent_child_runs_replays_from_its_cassette() {
    use recursive_llm::{RecordingProvider, ReplayProvider};
    // One provider plays every role, answering by content: the parent starts two children at
    // once, each child finishes at once, the parent submits what they said.
    let model = MockProvider::with_handler(|req| {
        let first = req.messages.iter().find(|m| m.role == Role::User).map(|m| m.content.clone()).unwrap_or_default();
        let text = if first.contains("Question:\nq\n") {
            if req.messages.len() <= 2 {
                py(
                    "rs = await asyncio.gather(rlm_query('shout A', {'doc': 'aaa'}), rlm_query('shout B', {'doc': 'bbb'}))\nprint(rs)",
                )
            } else {
                py("submit(rs[0]['result'] + '+' + rs[1]['result'])")
            }
        } else if req.messages.len() <= 2 {
            // Two turns each, so a child's second request carries the footer of its first.
            py("x = inputs['doc'].upper()\nprint(x)")
        } else {
            py("submit(x)")
        };
        Ok(response(text))
    });
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("run.cassette.jsonl");
    let recorder: Arc<dyn ChatProvider> = Arc::new(RecordingProvider::new(Arc::new(model), &cassette).unwrap());
    use_worker_binary();
    // The models are named, as the CLI does, so the prompt does not depend on the provider.
    let named = || RlmConfig {
        primary_options: ChatOptions { model: "m".into(), ..Default::default() },
        sub_options: ChatOptions { model: "m".into(), ..Default::default() },
        ..Default::default()
    };
    let recorded = Rlm::new(recorder.clone(), recorder, named())
        .unwrap()
        .run("q", Inputs::new(), &RunScope::detached("rec"))
        .await
        .unwrap();
    assert_eq!(recorded.output, json!({"answer": "AAA+BBB"}));
    for _ in 0..3 {
        let replay: Arc<dyn ChatProvider> = Arc::new(ReplayProvider::open(&cassette).unwrap());
        let replayed = Rlm::new(replay.clone(), replay, named())
            .unwrap()
            .run("q", Inputs::new(), &RunScope::detached("rep"))
            .await
            .unwrap();
        assert_eq!(replayed.output, recorded.output);
        assert_eq!(replayed.sub_calls, recorded.sub_calls);
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The graph runtime end to end on in-memory and SQLite stores: supersteps fold in
//! declaration order, a failed step keeps the finished nodes' writes so a resume runs only
//! the rest, interrupts before/after/asking, time travel and forks, sub-graphs with
//! namespaced checkpoints and interrupts that surface and resume, the recursion policy,
//! and cancellation — plus model nodes through the one guarded model call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use recursive_core::{Budget, BudgetLimits, ChatOptions, FinishReason, MemorySink, MockProvider, MockReply, RunScope};
use recursive_graph::kinds::{AskNode, ModelNode, SubgraphNode};
use recursive_graph::{
    Channel, END, Finish, Graph, GraphError, GraphEvent, Guard, Node, Op, RecursionPolicy, START, Start, Template,
    Test, Thread, Update, ValueType, func,
};
use recursive_store::{Checkpointer, MemoryCheckpointer, SqliteCheckpointer};
use serde_json::{Value, json};

fn update(v: Value) -> Update {
    v.as_object().cloned().unwrap()
}

/// A node that appends `name` to `log` and counts its runs; fails while `fail` is set.
fn step(name: &'static str, runs: Arc<Mutex<BTreeMap<String, usize>>>, fail: Arc<AtomicUsize>) -> Arc<dyn Node> {
    func(move |_| {
        *runs.lock().unwrap().entry(name.to_string()).or_insert(0) += 1;
        if name == "c" && fail.load(Ordering::SeqCst) > 0 {
            return Err("c broke".into());
        }
        Ok(update(json!({"log": name})))
    })
}

/// START → a, b (fan-out) → c → END.
fn diamond(runs: &Arc<Mutex<BTreeMap<String, usize>>>, fail: &Arc<AtomicUsize>) -> Graph {
    Graph::builder("diamond")
        .channel("log", Channel::append())
        .node("a", step("a", runs.clone(), fail.clone()))
        .node("b", step("b", runs.clone(), fail.clone()))
        .node("c", step("c", runs.clone(), fail.clone()))
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", "c")
        .edge("b", "c")
        .edge("c", END)
        .build()
        .unwrap()
}

fn stores() -> Vec<(Arc<dyn Checkpointer>, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteCheckpointer::open(dir.path().join(".recursive/graphs.db")).unwrap();
    vec![(Arc::new(MemoryCheckpointer::new()), tempfile::tempdir().unwrap()), (Arc::new(sqlite), dir)]
}

#[tokio::test]
async fn a_fan_out_runs_in_one_superstep_and_joins_once_in_declaration_order() {
    for (store, _dir) in stores() {
        let runs = Arc::default();
        let g = diamond(&runs, &Arc::new(AtomicUsize::new(0)));
        let out =
            g.run(Start::Input(json!({})), &Thread::new(store.clone(), "t"), &RunScope::detached("g")).await.unwrap();
        assert_eq!(out.finish, Finish::Done);
        assert_eq!(out.state["log"], json!(["a", "b", "c"]));
        assert_eq!(out.step, 2);
        let history = store.list("t", "").await.unwrap();
        assert_eq!(history.iter().map(|c| c.step).collect::<Vec<_>>(), [2, 1, 0]);
        assert_eq!(history[1].next, ["c"]);
    }
}

#[tokio::test]
async fn a_failed_step_keeps_finished_writes_and_resume_runs_only_the_rest() {
    for (store, _dir) in stores() {
        let runs: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let fail = Arc::new(AtomicUsize::new(1));
        // c runs alongside a and b here: START → a, b, c.
        let g = Graph::builder("flat")
            .channel("log", Channel::append())
            .node("a", step("a", runs.clone(), fail.clone()))
            .node("b", step("b", runs.clone(), fail.clone()))
            .node("c", step("c", runs.clone(), fail.clone()))
            .edge(START, "a")
            .edge(START, "b")
            .edge(START, "c")
            .build()
            .unwrap();
        let thread = Thread::new(store.clone(), "t");
        let err = g.run(Start::Input(json!({})), &thread, &RunScope::detached("g")).await.unwrap_err();
        assert!(matches!(&err, GraphError::Node { node, .. } if node == "c"), "{err}");
        fail.store(0, Ordering::SeqCst);
        let out = g.run(Start::Resume(None), &thread, &RunScope::detached("g")).await.unwrap();
        assert_eq!(out.finish, Finish::Done);
        assert_eq!(out.state["log"], json!(["a", "b", "c"]), "updates fold in declaration order");
        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs, BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("c".into(), 2)]));
    }
}

#[tokio::test]
async fn new_input_on_an_unfinished_thread_is_refused() {
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let g = Graph::builder("g")
        .channel("x", Channel::last(ValueType::String))
        .node("ask", Arc::new(AskNode { question: Template::literal("x?"), output: "x".into() }))
        .edge(START, "ask")
        .build()
        .unwrap();
    let thread = Thread::new(store, "t");
    let out = g.run(Start::Input(json!({})), &thread, &RunScope::detached("g")).await.unwrap();
    assert!(
        matches!(out.finish, Finish::Interrupted(ref i) if i.when == recursive_store::When::Ask && i.path == ["ask"])
    );
    let err = g.run(Start::Input(json!({})), &thread, &RunScope::detached("g")).await.unwrap_err();
    assert!(matches!(err, GraphError::Unfinished(_)), "{err}");
    let err = g
        .run(
            Start::Input(json!({"x": 3})),
            &Thread::new(Arc::new(MemoryCheckpointer::new()), "u"),
            &RunScope::detached("g"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("channel `x` holds a string"), "{err}");
}

fn approval_graph(published: Arc<AtomicUsize>) -> Graph {
    Graph::builder("approval")
        .channel("draft", Channel::last(ValueType::String))
        .channel("answer", Channel::last(ValueType::String))
        .channel("status", Channel::last(ValueType::String))
        .node("write", func(|_| Ok(update(json!({"draft": "v1"})))))
        .node(
            "approve",
            Arc::new(AskNode { question: Template::parse("Publish {draft}?").unwrap(), output: "answer".into() }),
        )
        .node(
            "publish",
            func(move |_| {
                published.fetch_add(1, Ordering::SeqCst);
                Ok(update(json!({"status": "published"})))
            }),
        )
        .node("drop", func(|_| Ok(update(json!({"status": "dropped"})))))
        .edge(START, "write")
        .edge("write", "approve")
        .edge_when("approve", "publish", Test { channel: "answer".into(), op: Op::Equals(json!("yes")) })
        .guarded("approve", "drop", Guard::Otherwise)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_node_asks_for_a_value_and_the_resumed_thread_routes_on_the_answer() {
    for (store, _dir) in stores() {
        let published = Arc::new(AtomicUsize::new(0));
        let g = approval_graph(published.clone());
        let thread = Thread::new(store.clone(), "t");
        let out = g.run(Start::Input(json!({})), &thread, &RunScope::detached("g")).await.unwrap();
        let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
        assert_eq!(i.payload, json!({"question": "Publish v1?"}));
        // Resuming without a value asks again; a value where nothing asks is refused.
        let again = g.run(Start::Resume(None), &thread, &RunScope::detached("g")).await.unwrap();
        assert!(matches!(again.finish, Finish::Interrupted(_)));
        let out = g.run(Start::Resume(Some(json!("yes"))), &thread, &RunScope::detached("g")).await.unwrap();
        assert_eq!(out.finish, Finish::Done);
        assert_eq!(out.state["status"], "published");
        assert_eq!(published.load(Ordering::SeqCst), 1);
        let err = g.run(Start::Resume(Some(json!("no"))), &thread, &RunScope::detached("g")).await.unwrap_err();
        assert!(matches!(err, GraphError::NothingAsks(_)), "{err}");

        // Time travel: from the checkpoint where `approve` asked, answer differently.
        let history = store.list("t", "").await.unwrap();
        let asked_at = history.iter().find(|c| c.next == ["approve"]).unwrap();
        let replay = Start::From { checkpoint: asked_at.id.clone(), value: Some(json!("no")) };
        let out = g.run(replay, &thread, &RunScope::detached("g")).await.unwrap();
        assert_eq!(out.state["status"], "dropped");
        assert_eq!(published.load(Ordering::SeqCst), 1);
        // The history branched: the old final checkpoint is still readable.
        assert_eq!(store.get("t", &history[0].id).await.unwrap().unwrap().state["status"], "published");
    }
}

#[tokio::test]
async fn pauses_before_and_after_named_nodes_wait_for_resume() {
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let runs: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let zero = Arc::new(AtomicUsize::new(0));
    let g = Graph::builder("g")
        .channel("log", Channel::append())
        .node("a", step("a", runs.clone(), zero.clone()))
        .node("b", step("b", runs.clone(), zero.clone()))
        .node("c", step("c", runs.clone(), zero.clone()))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .interrupt_after("a")
        .interrupt_before("c")
        .build()
        .unwrap();
    let thread = Thread::new(store, "t");
    let out = g.run(Start::Input(json!({})), &thread, &RunScope::detached("g")).await.unwrap();
    assert!(
        matches!(&out.finish, Finish::Interrupted(i) if i.when == recursive_store::When::After && i.path == ["a"]),
        "{:?}",
        out.finish
    );
    assert_eq!(out.state["log"], json!(["a"]));
    let out = g.run(Start::Resume(None), &thread, &RunScope::detached("g")).await.unwrap();
    assert!(
        matches!(&out.finish, Finish::Interrupted(i) if i.when == recursive_store::When::Before && i.path == ["c"]),
        "{:?}",
        out.finish
    );
    assert_eq!(out.state["log"], json!(["a", "b"]));
    let out = g.run(Start::Resume(None), &thread, &RunScope::detached("g")).await.unwrap();
    assert_eq!(out.finish, Finish::Done);
    assert_eq!(out.state["log"], json!(["a", "b", "c"]));
}

#[tokio::test]
async fn a_fork_with_an_edited_state_runs_on_a_new_thread() {
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let g = approval_graph(Arc::new(AtomicUsize::new(0)));
    let out = g.run(Start::Input(json!({})), &Thread::new(store.clone(), "t"), &RunScope::detached("g")).await.unwrap();
    let asked = out.checkpoint;
    let forked =
        recursive_graph::fork(g.schema(), &store, "t", &asked, &update(json!({"draft": "v2"})), "t2").await.unwrap();
    assert_eq!(forked.state["draft"], "v2");
    let out = g.run(Start::Resume(None), &Thread::new(store.clone(), "t2"), &RunScope::detached("g")).await.unwrap();
    let Finish::Interrupted(i) = out.finish else { panic!() };
    assert_eq!(i.payload["question"], "Publish v2?");
    assert_eq!(store.latest("t", "").await.unwrap().unwrap().state["draft"], "v1", "the original thread is untouched");
    let bad =
        recursive_graph::fork(g.schema(), &store, "t", &asked, &update(json!({"draft": 1})), "t3").await.unwrap_err();
    assert!(bad.to_string().contains("holds a string"), "{bad}");
}

fn child_graph(inner_runs: Arc<AtomicUsize>) -> Graph {
    Graph::builder("child")
        .channel("text", Channel::last(ValueType::String))
        .channel("ok", Channel::last(ValueType::String))
        .channel("summary", Channel::last(ValueType::String))
        .node(
            "summarize",
            func(move |s| {
                inner_runs.fetch_add(1, Ordering::SeqCst);
                let text = s["text"].as_str().unwrap_or_default().to_uppercase();
                Ok(update(json!({ "summary": text })))
            }),
        )
        .node("check", Arc::new(AskNode { question: Template::parse("OK: {summary}?").unwrap(), output: "ok".into() }))
        .edge(START, "summarize")
        .edge("summarize", "check")
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_interrupt_inside_a_sub_graph_surfaces_and_resumes_into_it() {
    for (store, _dir) in stores() {
        let inner_runs = Arc::new(AtomicUsize::new(0));
        let mut map_in = BTreeMap::new();
        map_in.insert("text".to_string(), "draft".to_string());
        let mut map_out = BTreeMap::new();
        map_out.insert("result".to_string(), "summary".to_string());
        let parent = Graph::builder("parent")
            .channel("draft", Channel::last(ValueType::String))
            .channel("result", Channel::last(ValueType::String))
            .node(
                "sub",
                Arc::new(SubgraphNode {
                    graph: Arc::new(child_graph(inner_runs.clone())),
                    inputs: Some(map_in),
                    outputs: Some(map_out),
                }),
            )
            .edge(START, "sub")
            .build()
            .unwrap();
        let thread = Thread::new(store.clone(), "t");
        let out = parent.run(Start::Input(json!({"draft": "tides"})), &thread, &RunScope::detached("g")).await.unwrap();
        let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
        assert_eq!(i.path, ["sub", "check"]);
        assert_eq!(i.payload["question"], "OK: TIDES?");
        // The sub-graph's checkpoints are namespaced under the embedding node, step and the
        // checkpoint the step started at.
        assert!(!store.list("t", &format!("sub:0@{}", out.checkpoint)).await.unwrap().is_empty());
        let out = parent.run(Start::Resume(Some(json!("yes"))), &thread, &RunScope::detached("g")).await.unwrap();
        assert_eq!(out.finish, Finish::Done);
        assert_eq!(out.state["result"], "TIDES");
        assert_eq!(inner_runs.load(Ordering::SeqCst), 1, "the sub-graph's finished node did not run again");
    }
}

#[tokio::test]
async fn the_recursion_policy_ends_runs_with_typed_finishes() {
    let looping = |policy: RecursionPolicy| {
        Graph::builder("loop")
            .channel("n", Channel::last(ValueType::Integer))
            .node("inc", func(|s| Ok(update(json!({"n": s["n"].as_i64().unwrap_or(0) + 1})))))
            .edge(START, "inc")
            .edge_when("inc", "inc", Test { channel: "n".into(), op: Op::Lt(100.0) })
            .policy(policy)
            .build()
            .unwrap()
    };
    let run = |g: Graph| async move {
        g.run(Start::Input(json!({})), &Thread::new(Arc::new(MemoryCheckpointer::new()), "t"), &RunScope::detached("g"))
            .await
            .unwrap()
    };
    let out = run(looping(RecursionPolicy { max_supersteps: 5, max_visits: 50, max_depth: 8 })).await;
    assert_eq!(out.finish, Finish::SuperstepLimit { max: 5 });
    assert_eq!(out.state["n"], 5);
    assert_eq!(out.finish.finish_reason(), FinishReason::RecursionLimit);
    let out = run(looping(RecursionPolicy { max_supersteps: 50, max_visits: 3, max_depth: 8 })).await;
    assert_eq!(out.finish, Finish::VisitLimit { node: "inc".into(), max: 3 });
    assert_eq!(out.state["n"], 3, "checked before the fourth visit ran");
    let out = run(looping(RecursionPolicy { max_supersteps: 50, max_visits: 50, max_depth: 0 })).await;
    assert_eq!(out.finish, Finish::DepthLimit { node: "inc".into(), max: 0 });
}

#[tokio::test]
async fn a_cancelled_run_stops_before_the_next_step_and_resumes_later() {
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let scope = RunScope::detached("g");
    let cancel = scope.cancel_token().clone();
    let g = Graph::builder("g")
        .channel("log", Channel::append())
        .node(
            "a",
            func(move |_| {
                cancel.cancel();
                Ok(update(json!({"log": "a"})))
            }),
        )
        .node("b", func(|_| Ok(update(json!({"log": "b"})))))
        .edge(START, "a")
        .edge("a", "b")
        .build()
        .unwrap();
    let thread = Thread::new(store, "t");
    let out = g.run(Start::Input(json!({})), &thread, &scope).await.unwrap();
    assert_eq!(out.finish, Finish::Stopped { reason: FinishReason::Cancelled });
    assert_eq!(out.state["log"], json!(["a"]));
    let out = g.run(Start::Resume(None), &thread, &RunScope::detached("g")).await.unwrap();
    assert_eq!(out.finish, Finish::Done);
    assert_eq!(out.state["log"], json!(["a", "b"]));
}

#[tokio::test]
async fn model_nodes_call_through_the_run_tree_and_each_node_is_a_child_run() {
    let provider = Arc::new(MockProvider::new([MockReply::text("A tide is a wave."), MockReply::text("Short.")]));
    let sink = Arc::new(MemorySink::new());
    let scope = RunScope::root("graph", sink.clone(), Arc::new(Budget::new(BudgetLimits::default())));
    let model = |prompt: &str, output: &str| -> Arc<dyn Node> {
        Arc::new(ModelNode {
            provider: provider.clone(),
            options: ChatOptions::default(),
            system: None,
            prompt: Template::parse(prompt).unwrap(),
            output: output.into(),
        })
    };
    let g = Graph::builder("g")
        .channel("topic", Channel::last(ValueType::String))
        .channel("draft", Channel::last(ValueType::String))
        .channel("short", Channel::last(ValueType::String))
        .node("draft", model("Explain {topic}.", "draft"))
        .node("shorten", model("Shorten: {draft}", "short"))
        .edge(START, "draft")
        .edge("draft", "shorten")
        .build()
        .unwrap();
    let out = g
        .run(Start::Input(json!({"topic": "tides"})), &Thread::new(Arc::new(MemoryCheckpointer::new()), "t"), &scope)
        .await
        .unwrap();
    assert_eq!(out.state["short"], "Short.");
    let prompts: Vec<String> = provider.requests().iter().map(|r| r.messages[0].content.clone()).collect();
    assert_eq!(prompts, ["Explain tides.", "Shorten: A tide is a wave."]);
    let events = sink.events();
    let node_runs: Vec<(String, u32)> = events
        .iter()
        .filter_map(|e| {
            e.kind.extension::<GraphEvent>().and_then(|g| match g {
                GraphEvent::GraphNodeStarted { node, .. } => Some((node, e.ids.depth)),
                _ => None,
            })
        })
        .collect();
    assert_eq!(node_runs, [("draft".to_string(), 1), ("shorten".to_string(), 1)]);
    assert!(events.iter().any(|e| matches!(e.kind, recursive_core::EventKind::Usage { .. }) && e.ids.depth == 1));
}

#[tokio::test]
async fn a_spent_call_budget_stops_the_graph_with_the_trees_reason() {
    let provider = Arc::new(MockProvider::new([MockReply::text("one"), MockReply::text("two")]));
    let limits = BudgetLimits { max_model_calls: Some(1), ..Default::default() };
    let scope = RunScope::root("graph", Arc::new(recursive_core::NullSink), Arc::new(Budget::new(limits)));
    let node = |output: &str| -> Arc<dyn Node> {
        Arc::new(ModelNode {
            provider: provider.clone(),
            options: ChatOptions::default(),
            system: None,
            prompt: Template::literal("go"),
            output: output.into(),
        })
    };
    let g = Graph::builder("g")
        .channel("x", Channel::last(ValueType::String))
        .channel("y", Channel::last(ValueType::String))
        .node("first", node("x"))
        .node("second", node("y"))
        .edge(START, "first")
        .edge("first", "second")
        .build()
        .unwrap();
    let out =
        g.run(Start::Input(json!({})), &Thread::new(Arc::new(MemoryCheckpointer::new()), "t"), &scope).await.unwrap();
    assert_eq!(out.finish, Finish::Stopped { reason: FinishReason::CallBudgetExceeded });
    assert_eq!(out.state["x"], "one");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn a_function_node_still_computing_ends_at_the_trees_deadline() {
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let limits =
        recursive_core::BudgetLimits { wall_clock: Some(std::time::Duration::from_millis(300)), ..Default::default() };
    let scope = RunScope::root("g", Arc::new(recursive_core::NullSink), Arc::new(recursive_core::Budget::new(limits)));
    let g = Graph::builder("g")
        .channel("log", Channel::append())
        .node(
            "spin",
            func(|_| {
                // Computes for 8 s (bounded, so the test's runtime can shut down).
                std::thread::sleep(std::time::Duration::from_secs(8));
                Ok(update(json!({"log": "late"})))
            }),
        )
        .edge(START, "spin")
        .build()
        .unwrap();
    let t0 = std::time::Instant::now();
    let out = g.run(Start::Input(json!({})), &Thread::new(store, "t"), &scope).await.unwrap();
    assert_eq!(out.finish, Finish::Stopped { reason: FinishReason::WallClockExceeded });
    // The deadline (300 ms), not the node's 8 s — with room for a loaded machine.
    assert!(t0.elapsed() < std::time::Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(out.state.get("log").is_none_or(|l| l == &json!([])), "{:?}", out.state);
}

/// START → `pick` (asks for the draft) → `sub` (the child graph: `summarize` uppercases the
/// draft and counts its runs, then `check` asks) → END, mapping draft → text and summary,
/// ok → result, verdict.
fn picking_parent(inner_runs: Arc<AtomicUsize>) -> Graph {
    picking_parent_builder(inner_runs).build().unwrap()
}

fn picking_parent_builder(inner_runs: Arc<AtomicUsize>) -> recursive_graph::GraphBuilder {
    let map_in = BTreeMap::from([("text".to_string(), "draft".to_string())]);
    let map_out =
        BTreeMap::from([("result".to_string(), "summary".to_string()), ("verdict".to_string(), "ok".to_string())]);
    Graph::builder("parent")
        .channel("draft", Channel::last(ValueType::String))
        .channel("result", Channel::last(ValueType::String))
        .channel("verdict", Channel::last(ValueType::String))
        .node("pick", Arc::new(AskNode { question: Template::parse("Which draft?").unwrap(), output: "draft".into() }))
        .node(
            "sub",
            Arc::new(SubgraphNode {
                graph: Arc::new(child_graph(inner_runs)),
                inputs: Some(map_in),
                outputs: Some(map_out),
            }),
        )
        .edge(START, "pick")
        .edge("pick", "sub")
}

/// Runs `start` on thread `t` and returns the outcome.
async fn go(g: &Graph, store: &Arc<dyn Checkpointer>, start: Start) -> recursive_graph::GraphOutcome {
    g.run(start, &Thread::new(store.clone(), "t"), &RunScope::detached("g")).await.unwrap()
}

/// The thread's checkpoint (top namespace) whose next nodes are `next`, the newest such.
async fn at(store: &Arc<dyn Checkpointer>, next: &[&str]) -> String {
    let list = store.list("t", "").await.unwrap();
    list.iter().find(|c| c.next == next).map(|c| c.id.clone()).unwrap()
}

/// Picks "tides", answers the sub-graph's question "yes": done with TIDES, one inner run.
async fn picked_tides(g: &Graph, store: &Arc<dyn Checkpointer>, inner_runs: &AtomicUsize) {
    go(g, store, Start::Input(json!({}))).await;
    go(g, store, Start::Resume(Some(json!("tides")))).await;
    let out = go(g, store, Start::Resume(Some(json!("yes")))).await;
    assert_eq!(out.finish, Finish::Done);
    assert_eq!((out.state["result"].as_str(), out.state["verdict"].as_str()), (Some("TIDES"), Some("yes")));
    assert_eq!(inner_runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn time_travel_before_a_sub_graph_runs_it_again_on_its_new_input() {
    for (store, _dir) in stores() {
        let inner_runs = Arc::new(AtomicUsize::new(0));
        let g = picking_parent(inner_runs.clone());
        picked_tides(&g, &store, &inner_runs).await;
        // Back to the question before the sub-graph, answered differently.
        let asked = at(&store, &["pick"]).await;
        let out = go(&g, &store, Start::From { checkpoint: asked, value: Some(json!("waves")) }).await;
        let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
        assert_eq!(i.payload["question"], "OK: WAVES?", "the sub-graph ran on the new input");
        assert_eq!(inner_runs.load(Ordering::SeqCst), 2);
        let out = go(&g, &store, Start::Resume(Some(json!("fine")))).await;
        assert_eq!((out.state["result"].as_str(), out.state["verdict"].as_str()), (Some("WAVES"), Some("fine")));
    }
}

#[tokio::test]
async fn a_fork_into_the_same_thread_before_a_sub_graph_runs_it_again_on_the_edited_input() {
    for (store, _dir) in stores() {
        let inner_runs = Arc::new(AtomicUsize::new(0));
        let g = picking_parent(inner_runs.clone());
        picked_tides(&g, &store, &inner_runs).await;
        let before_sub = at(&store, &["sub"]).await;
        recursive_graph::fork(g.schema(), &store, "t", &before_sub, &update(json!({"draft": "waves"})), "t")
            .await
            .unwrap();
        let out = go(&g, &store, Start::Resume(None)).await;
        let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
        assert_eq!(i.payload["question"], "OK: WAVES?", "the sub-graph ran on the edited input");
        assert_eq!(inner_runs.load(Ordering::SeqCst), 2);
        let out = go(&g, &store, Start::Resume(Some(json!("yes")))).await;
        assert_eq!(out.state["result"], "WAVES");
    }
}

#[tokio::test]
async fn time_travel_to_a_question_inside_a_sub_graph_answers_it_again_without_rerunning_its_finished_nodes() {
    for (store, _dir) in stores() {
        let inner_runs = Arc::new(AtomicUsize::new(0));
        let g = picking_parent(inner_runs.clone());
        picked_tides(&g, &store, &inner_runs).await;
        // Back to where the sub-graph's `check` asked, answered differently.
        let asked = at(&store, &["sub"]).await;
        let out = go(&g, &store, Start::From { checkpoint: asked.clone(), value: Some(json!("no")) }).await;
        assert_eq!(out.finish, Finish::Done);
        assert_eq!((out.state["result"].as_str(), out.state["verdict"].as_str()), (Some("TIDES"), Some("no")));
        assert_eq!(inner_runs.load(Ordering::SeqCst), 1, "`summarize` had finished: it did not run again");
        // Without a value, the question is asked again.
        let out = go(&g, &store, Start::From { checkpoint: asked.clone(), value: None }).await;
        let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
        assert_eq!((i.at(), i.payload["question"].as_str()), ("sub/check".to_string(), Some("OK: TIDES?")));
        assert_eq!(inner_runs.load(Ordering::SeqCst), 1);
        // A sub-graph's checkpoint is not one to travel to at the top.
        let inner = store.list("t", &format!("sub:1@{asked}")).await.unwrap();
        let travel = Start::From { checkpoint: inner[0].id.clone(), value: None };
        let err = g.run(travel, &Thread::new(store.clone(), "t"), &RunScope::detached("g")).await.unwrap_err();
        assert!(matches!(err, GraphError::NoCheckpoint { .. }), "{err}");
    }
}

#[tokio::test]
async fn a_sub_graph_run_stored_under_the_old_namespace_form_is_continued() {
    for (store, _dir) in stores() {
        let inner_runs = Arc::new(AtomicUsize::new(0));
        let parent = picking_parent(inner_runs.clone());
        // The parent stops before `sub`; the sub-graph then runs as releases before sub-graph
        // runs were keyed by checkpoint ran it: under `sub:1`, asking `check`.
        let paused = picking_parent_builder(inner_runs.clone()).interrupt_before("sub").build().unwrap();
        go(&paused, &store, Start::Input(json!({}))).await;
        let out = go(&paused, &store, Start::Resume(Some(json!("tides")))).await;
        assert!(matches!(out.finish, Finish::Interrupted(_)), "{:?}", out.finish);
        let old = Thread { store: store.clone(), id: "t".into(), ns: "sub:1".into() };
        let inner = child_graph(inner_runs.clone());
        inner.run(Start::Input(json!({"text": "tides"})), &old, &RunScope::detached("g")).await.unwrap();
        let asked = recursive_store::PendingWrite {
            node: "sub".into(),
            write: recursive_store::Write::Interrupt { payload: json!({"question": "OK: TIDES?"}) },
            asked_at: None,
        };
        store.put_write("t", &out.checkpoint, &asked).await.unwrap();
        assert_eq!(inner_runs.load(Ordering::SeqCst), 1);

        let out = go(&parent, &store, Start::Resume(Some(json!("yes")))).await;
        assert_eq!(out.finish, Finish::Done);
        assert_eq!((out.state["result"].as_str(), out.state["verdict"].as_str()), (Some("TIDES"), Some("yes")));
        assert_eq!(inner_runs.load(Ordering::SeqCst), 1, "the stored sub-graph run went on");
    }
}

#[tokio::test]
async fn raising_the_limits_continues_a_sub_graph_that_stopped_on_its_own() {
    for (store, _dir) in stores() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        // The sub-graph ticks until n reaches 3, but may visit `tick` only twice per run.
        let inner = Graph::builder("ticker")
            .channel("n", Channel::last(ValueType::Integer))
            .node(
                "tick",
                func(move |s| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(update(json!({"n": s["n"].as_i64().unwrap_or(0) + 1})))
                }),
            )
            .edge(START, "tick")
            .edge_when("tick", END, Test { channel: "n".into(), op: Op::Ge(3.0) })
            .guarded("tick", "tick", Guard::Otherwise)
            .policy(RecursionPolicy { max_visits: 2, ..RecursionPolicy::default() })
            .build()
            .unwrap();
        let parent = Graph::builder("parent")
            .channel("n", Channel::last(ValueType::Integer))
            .node("sub", Arc::new(SubgraphNode { graph: Arc::new(inner), inputs: None, outputs: None }))
            .edge(START, "sub")
            .build()
            .unwrap();
        let out = go(&parent, &store, Start::Input(json!({"n": 0}))).await;
        assert_eq!(out.finish, Finish::VisitLimit { node: "tick".into(), max: 2 });
        assert_eq!(ticks.load(Ordering::SeqCst), 2);
        let out = go(&parent, &store, Start::RaiseLimits(None)).await;
        assert_eq!(out.finish, Finish::Done);
        assert_eq!(out.state["n"], 3);
        assert_eq!(ticks.load(Ordering::SeqCst), 3, "the sub-graph went on from n = 2, not from its start");
    }
}

#[tokio::test]
async fn time_travel_reaches_a_question_two_sub_graphs_deep() {
    for (store, _dir) in stores() {
        let inner_runs = Arc::new(AtomicUsize::new(0));
        // outer → mid → sub (the child graph: `summarize`, then `check` asks), all on the
        // channels they share.
        let nest = |name: &str, node: &str, graph: Graph| {
            Graph::builder(name)
                .channel("text", Channel::last(ValueType::String))
                .channel("ok", Channel::last(ValueType::String))
                .channel("summary", Channel::last(ValueType::String))
                .node(node, Arc::new(SubgraphNode { graph: Arc::new(graph), inputs: None, outputs: None }))
                .edge(START, node)
                .build()
                .unwrap()
        };
        let outer = nest("outer", "mid", nest("mid", "sub", child_graph(inner_runs.clone())));
        let out = go(&outer, &store, Start::Input(json!({"text": "tides"}))).await;
        let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
        assert_eq!(i.at(), "mid/sub/check");
        let out = go(&outer, &store, Start::Resume(Some(json!("yes")))).await;
        assert_eq!((out.state["summary"].as_str(), out.state["ok"].as_str()), (Some("TIDES"), Some("yes")));

        let start = at(&store, &["mid"]).await;
        let out = go(&outer, &store, Start::From { checkpoint: start, value: Some(json!("no")) }).await;
        assert_eq!(out.finish, Finish::Done);
        assert_eq!((out.state["summary"].as_str(), out.state["ok"].as_str()), (Some("TIDES"), Some("no")));
        assert_eq!(inner_runs.load(Ordering::SeqCst), 1, "`summarize` had finished: it did not run again");
    }
}

/// START → a → b → c ⇄ loop (until n reaches 3) → END: each node adds one to `n`.
fn chain_into_a_loop() -> Graph {
    let inc = || func(|s| Ok(update(json!({"n": s["n"].as_i64().unwrap_or(0) + 1}))));
    Graph::builder("g")
        .channel("n", Channel::last(ValueType::Integer))
        .node("a", inc())
        .node("b", inc())
        .node("c", inc())
        .node("again", inc())
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge_when("c", "again", Test { channel: "n".into(), op: Op::Lt(6.0) })
        .guarded("c", END, Guard::Otherwise)
        .edge("again", "c")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_checkpoint_keeps_the_visits_of_nodes_that_may_still_run_only() {
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let out = chain_into_a_loop()
        .run(Start::Input(json!({})), &Thread::new(store.clone(), "t"), &RunScope::detached("g"))
        .await
        .unwrap();
    assert_eq!((out.finish, out.state["n"].clone()), (Finish::Done, json!(7)));
    let history = store.list("t", "").await.unwrap();
    let visits = |next: &str| history.iter().find(|c| c.next == [next]).unwrap().visits.clone();
    assert_eq!(visits("b"), BTreeMap::new(), "`a` can never run again");
    let in_loop = BTreeMap::from([("c".to_string(), 2), ("again".to_string(), 2)]);
    assert_eq!(visits("c"), in_loop, "the loop's nodes keep their counts (the newest checkpoint before `c`)");
    assert!(history[0].visits.is_empty(), "a finished run keeps none");
}

#[tokio::test]
async fn a_node_reached_again_by_a_longer_path_still_meets_its_visit_limit() {
    // START → a → join and START → b → x → join: `join` runs in step 2 and again in step 3.
    let g = Graph::builder("g")
        .channel("log", Channel::append())
        .node("a", func(|_| Ok(update(json!({"log": "a"})))))
        .node("b", func(|_| Ok(update(json!({"log": "b"})))))
        .node("x", func(|_| Ok(update(json!({"log": "x"})))))
        .node("join", func(|_| Ok(update(json!({"log": "join"})))))
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", "join")
        .edge("b", "x")
        .edge("x", "join")
        .edge("join", END)
        .policy(RecursionPolicy { max_visits: 1, ..RecursionPolicy::default() })
        .build()
        .unwrap();
    let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let out = g.run(Start::Input(json!({})), &Thread::new(store, "t"), &RunScope::detached("g")).await.unwrap();
    assert_eq!(out.finish, Finish::VisitLimit { node: "join".into(), max: 1 });
}

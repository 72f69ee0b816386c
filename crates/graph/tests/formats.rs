#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A thread stored before records carried a format version resumes to its end: the fixture
//! `crates/store/tests/fixtures/graphs-v0.db` (written by the code of commit 3047545) holds thread
//! `brief-1` of the graph below, stopped at `ask` with `note`'s update pending in that step.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use recursive_core::RunScope;
use recursive_graph::kinds::AskNode;
use recursive_graph::{Channel, END, Finish, Graph, START, Start, Template, Thread, Update, ValueType, func};
use recursive_store::{Checkpointer, SqliteCheckpointer};
use serde_json::json;

fn update(value: serde_json::Value) -> Update {
    value.as_object().cloned().unwrap()
}

/// The graph the fixture's thread ran, counting the runs of `note`.
fn brief(notes: Arc<AtomicUsize>) -> Graph {
    Graph::builder("brief")
        .channel("topic", Channel::last(ValueType::String))
        .channel("draft", Channel::last(ValueType::String))
        .channel("notes", Channel::append())
        .channel("answer", Channel::last(ValueType::String))
        .node("write", func(|_| Ok(update(json!({"draft": "Tides rise twice a day."})))))
        .node(
            "note",
            func(move |_| {
                notes.fetch_add(1, Ordering::SeqCst);
                Ok(update(json!({"notes": "checked"})))
            }),
        )
        .node("ask", Arc::new(AskNode { question: Template::literal("Publish?"), output: "answer".into() }))
        .node("publish", func(|_| Ok(update(json!({"notes": "published"})))))
        .edge(START, "write")
        .edge("write", "note")
        .edge("write", "ask")
        .edge("ask", "publish")
        .edge("note", "publish")
        .edge("publish", END)
        .interrupt_before("write")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_thread_stored_before_records_were_versioned_resumes_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("graphs.db");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/../store/tests/fixtures/graphs-v0.db"), &path).unwrap();
    let store: Arc<dyn Checkpointer> = Arc::new(SqliteCheckpointer::open(&path).unwrap());
    let notes = Arc::new(AtomicUsize::new(0));
    let graph = brief(notes.clone());
    let thread = Thread::new(store.clone(), "brief-1");
    let out = graph.run(Start::Resume(Some(json!("yes"))), &thread, &RunScope::detached("t")).await.unwrap();
    assert_eq!(out.finish, Finish::Done);
    assert_eq!(out.state["answer"], json!("yes"));
    assert_eq!(out.state["notes"], json!(["checked", "published"]));
    assert_eq!(notes.load(Ordering::SeqCst), 0, "the pending write of the old format was reused, not run again");
    assert_eq!(store.list("brief-1", "").await.unwrap().len(), 4, "two old checkpoints and two new ones");
}

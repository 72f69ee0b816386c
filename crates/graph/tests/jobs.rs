#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Graph jobs on a real PostgreSQL queue (a schema of its own): workers in one process drain
//! queued threads, running every node exactly once, and a thread whose input does not fit the
//! graph is refused when enqueued.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recursive_core::RunScope;
use recursive_graph::jobs::{GraphJobs, enqueue_graph};
use recursive_graph::{Channel, END, Graph, START, ValueType, func};
use recursive_store::queue::{DEFAULT_QUEUE, JobQueue};
use recursive_store::worker::{Worker, WorkerOptions};
use recursive_store::{Checkpointer, PostgresCheckpointer, ThreadInfo};
use recursive_testkit::postgres::TestSchema;
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn queue(url: &str) -> (PostgresCheckpointer, JobQueue) {
    let store = PostgresCheckpointer::connect(url).await.unwrap();
    let queue = JobQueue::open(&store).await.unwrap();
    (store, queue)
}

const TTL: Duration = Duration::from_secs(30);

type Runs = Arc<Mutex<BTreeMap<(String, String), usize>>>;

/// START → a → b → END; each node counts its runs per topic and appends to `log`.
fn chain(runs: &Runs) -> Graph {
    let node = |name: &'static str| {
        let runs = runs.clone();
        func(move |state| {
            let topic = state["topic"].as_str().unwrap_or_default().to_string();
            *runs.lock().unwrap().entry((topic, name.to_string())).or_insert(0) += 1;
            Ok(json!({"log": name}).as_object().cloned().unwrap())
        })
    };
    Graph::builder("chain")
        .channel("topic", Channel::last(ValueType::String))
        .channel("log", Channel::append())
        .node("a", node("a"))
        .node("b", node("b"))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .build()
        .unwrap()
}

#[tokio::test]
async fn workers_drain_queued_threads_running_each_node_once() {
    let Some(schema) = TestSchema::from_env("queue_workers").await else { return };
    let (store, q) = queue(&schema.url).await;
    let store: Arc<dyn Checkpointer> = Arc::new(store);
    let runs: Runs = Arc::default();
    let graph = chain(&runs);
    for i in 0..40 {
        let info = ThreadInfo {
            thread: format!("t{i}"),
            graph: "chain".into(),
            blueprint: None,
            origin: None,
            subgraphs: None,
            created_at: chrono::Utc::now(),
        };
        enqueue_graph(&q, store.as_ref(), &graph, &info, json!({"topic": format!("t{i}")}), (DEFAULT_QUEUE, 3))
            .await
            .unwrap();
    }
    let bad = enqueue_graph(
        &q,
        store.as_ref(),
        &graph,
        &ThreadInfo {
            thread: "bad".into(),
            graph: "chain".into(),
            blueprint: None,
            origin: None,
            subgraphs: None,
            created_at: chrono::Utc::now(),
        },
        json!({"nope": 1}),
        (DEFAULT_QUEUE, 3),
    )
    .await
    .unwrap_err();
    assert!(bad.to_string().contains("nope"), "{bad}");

    let drain = CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..3 {
        let handler = GraphJobs::new(
            store.clone(),
            Box::new({
                let runs = runs.clone();
                move |_| Ok(chain(&runs))
            }),
            Box::new(|_| RunScope::detached("job")),
            TTL,
        );
        let options = WorkerOptions {
            name: format!("w{w}"),
            queue: DEFAULT_QUEUE.into(),
            concurrency: 2,
            lease_ttl: TTL,
            poll: Duration::from_millis(50),
            backoff: Duration::from_millis(50),
            drain_timeout: Duration::from_secs(10),
        };
        let worker = Worker::new(q.clone(), Arc::new(handler), options, Arc::new(|_| {}));
        let (drain, abort) = (drain.clone(), CancellationToken::new());
        workers.push(tokio::spawn(async move { worker.run(drain, abort).await }));
    }
    for _ in 0..600 {
        if q.counts(None).await.unwrap().iter().all(|(status, _)| status == "done") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drain.cancel();
    let mut done = 0;
    for w in workers {
        done += w.await.unwrap().done;
    }
    assert_eq!(done, 40);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 80, "a and b of each of 40 threads");
    assert!(runs.values().all(|n| *n == 1), "{runs:?}");
    assert_eq!(q.counts(None).await.unwrap(), [("done".to_string(), 40)]);
    schema.drop_all().await.unwrap();
}

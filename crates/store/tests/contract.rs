#![allow(clippy::unwrap_used, clippy::expect_used)]
//! One contract, three backends: every checkpointer (memory, SQLite, PostgreSQL) and every run
//! archive keeps the same behaviour — threads, checkpoints by namespace, pending writes, pruning,
//! leases; runs, their events in pages, listing, retention. The PostgreSQL cases need
//! `RECURSIVE_TEST_POSTGRES_URL` (`scripts/postgres start` prints one) and fail under CI without
//! it; each works in a schema of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use recursive_store::archive::FINISHED;
use recursive_store::{
    ArchivedRun, BlueprintSource, Checkpoint, Checkpointer, MemoryCheckpointer, PendingWrite, PostgresCheckpointer,
    Retention, RunArchive, RunQuery, Source, SqliteCheckpointer, ThreadInfo, Write, open, open_archive,
};
use recursive_testkit::postgres::TestSchema;
use serde_json::json;

fn checkpoint(thread: &str, ns: &str, step: u64, parent: Option<&str>) -> Checkpoint {
    Checkpoint {
        id: Checkpoint::new_id(),
        thread: thread.into(),
        ns: ns.into(),
        parent: parent.map(String::from),
        step,
        state: json!({"n": step}).as_object().cloned().unwrap_or_default(),
        next: vec!["a".into()],
        visits: BTreeMap::from([("a".to_string(), step as u32)]),
        base_step: 0,
        pause: None,
        source: Source::Step,
        created_at: Utc::now(),
    }
}

/// Threads, checkpoints by namespace, pending writes, pruning and leases.
async fn keeps_the_contract(store: &dyn Checkpointer, thread: &str) {
    keeps_threads(store, thread).await;
    let (c0, c1, sub) = keeps_checkpoints_by_namespace(store, thread).await;
    keeps_pending_writes(store, thread, &c0, &c1).await;
    prunes_only_before_the_kept_one(store, thread, &c1, &sub).await;
    holds_leases(store, thread).await;
    keeps_journals(store, thread).await;
}

async fn keeps_threads(store: &dyn Checkpointer, thread: &str) {
    let info = ThreadInfo {
        thread: thread.into(),
        graph: "g".into(),
        blueprint: Some("name = \"g\"".into()),
        origin: None,
        subgraphs: Some(BTreeMap::from([(
            "sub".to_string(),
            BlueprintSource { origin: "sub.toml".into(), text: "name = \"sub\"".into() },
        )])),
        created_at: Utc::now(),
    };
    store.put_thread(&info).await.unwrap();
    assert_eq!(store.thread(thread).await.unwrap().unwrap(), info);
    assert!(store.threads().await.unwrap().iter().any(|t| t.as_ref().is_ok_and(|t| t.thread == thread)));
}

async fn keeps_checkpoints_by_namespace(
    store: &dyn Checkpointer,
    thread: &str,
) -> (Checkpoint, Checkpoint, Checkpoint) {
    assert!(store.latest(thread, "").await.unwrap().is_none());
    let c0 = checkpoint(thread, "", 0, None);
    let c1 = checkpoint(thread, "", 1, Some(&c0.id));
    let sub = checkpoint(thread, "inner:1", 0, None);
    store.put(&c0).await.unwrap();
    store.put(&c1).await.unwrap();
    store.put(&sub).await.unwrap();
    assert_eq!(store.latest(thread, "").await.unwrap().unwrap(), c1);
    assert_eq!(store.latest(thread, "inner:1").await.unwrap().unwrap(), sub);
    assert_eq!(store.get(thread, &c0.id).await.unwrap().unwrap(), c0);
    assert!(store.get("another-thread", &c0.id).await.unwrap().is_none(), "an id is found only in its thread");
    let ids: Vec<_> = store.list(thread, "").await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, [c1.id.clone(), c0.id.clone()]);
    (c0, c1, sub)
}

async fn keeps_pending_writes(store: &dyn Checkpointer, thread: &str, c0: &Checkpoint, c1: &Checkpoint) {
    let w = |node: &str, n: i64| PendingWrite {
        node: node.into(),
        write: Write::Update { update: json!({"n": n}).as_object().cloned().unwrap_or_default() },
        asked_at: (n == 2).then(|| "inner".to_string()),
    };
    store.put_write(thread, &c1.id, &w("a", 1)).await.unwrap();
    store.put_write(thread, &c1.id, &w("b", 2)).await.unwrap();
    store.put_write(thread, &c1.id, &w("a", 3)).await.unwrap();
    let mut writes = store.writes(thread, &c1.id).await.unwrap();
    writes.sort_by(|x, y| x.node.cmp(&y.node));
    assert_eq!(writes, [w("a", 3), w("b", 2)], "a node's later write replaces its earlier one");
    assert!(store.writes(thread, &c0.id).await.unwrap().is_empty());
}

async fn prunes_only_before_the_kept_one(store: &dyn Checkpointer, thread: &str, c1: &Checkpoint, sub: &Checkpoint) {
    let c2 = checkpoint(thread, "", 2, Some(&c1.id));
    store.put(&c2).await.unwrap();
    store.prune(thread, "", &c1.id).await.unwrap();
    let ids: Vec<_> = store.list(thread, "").await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, [c2.id.clone(), c1.id.clone()], "only what came before `keep` goes");
    assert_eq!(&store.latest(thread, "inner:1").await.unwrap().unwrap(), sub, "other namespaces stay");
}

/// One holder at a time; renewal by the holder; release; who holds it; an expired lease
/// taken over.
async fn holds_leases(store: &dyn Checkpointer, thread: &str) {
    let long = Duration::from_secs(60);
    assert_eq!(store.take_lease(thread, "one", long).await.unwrap(), None);
    assert_eq!(store.take_lease(thread, "two", long).await.unwrap().as_deref(), Some("one"));
    assert_eq!(store.take_lease(thread, "one", long).await.unwrap(), None, "the holder renews");
    store.release_lease(thread, "two").await.unwrap();
    assert_eq!(store.take_lease(thread, "two", long).await.unwrap().as_deref(), Some("one"), "not two's to give");
    store.release_lease(thread, "one").await.unwrap();
    assert_eq!(store.lease_holder(thread).await.unwrap(), None, "released");
    assert_eq!(store.take_lease(thread, "two", Duration::from_millis(50)).await.unwrap(), None);
    assert_eq!(store.lease_holder(thread).await.unwrap().as_deref(), Some("two"), "who holds it (even once expired)");
    // An expired lease is taken over: "three" gets it once two's 50 ms have passed.
    recursive_testkit::eventually(Duration::from_secs(10), || async {
        store.take_lease(thread, "three", long).await.unwrap().is_none().then_some(())
    })
    .await;
    store.release_lease(thread, "three").await.unwrap();
}

/// A run's journal: its records in the order appended, apart from every other run's, until
/// it is deleted.
async fn keeps_journals(store: &dyn Checkpointer, thread: &str) {
    let (mine, other) = (format!("run-{thread}"), format!("other-{thread}"));
    assert!(store.journal(&mine).await.unwrap().is_empty());
    for body in ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"] {
        store.append_journal(&mine, body).await.unwrap();
    }
    store.append_journal(&other, "{\"n\":9}").await.unwrap();
    assert_eq!(store.journal(&mine).await.unwrap(), ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"]);
    assert_eq!(store.journal(&other).await.unwrap(), ["{\"n\":9}"]);
    store.delete_journal(&mine).await.unwrap();
    assert!(store.journal(&mine).await.unwrap().is_empty(), "a deleted journal is gone");
    assert_eq!(store.journal(&other).await.unwrap(), ["{\"n\":9}"], "the others stay");
}

async fn postgres_schema(prefix: &str) -> Option<TestSchema> {
    let url = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL")?;
    Some(TestSchema::create(&url, prefix).await.unwrap())
}

#[tokio::test]
async fn the_memory_store_keeps_the_contract() {
    keeps_the_contract(&MemoryCheckpointer::new(), "t1").await;
    keeps_the_contract(open("memory:").await.unwrap().as_ref(), "t2").await;
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".recursive/graphs.db");
    let store = SqliteCheckpointer::open(&path).unwrap();
    keeps_the_contract(&store, "t1").await;
    let latest = store.latest("t1", "").await.unwrap().unwrap();
    drop(store);
    let reopened = open(&format!("sqlite:{}", path.display())).await.unwrap();
    assert_eq!(reopened.latest("t1", "").await.unwrap().unwrap(), latest);
}

#[tokio::test]
async fn the_postgres_store_keeps_the_contract_across_connections() {
    let Some(schema) = postgres_schema("contract").await else { return };
    let store = PostgresCheckpointer::connect(&schema.url).await.unwrap();
    keeps_the_contract(&store, "t1").await;
    let other = open(&schema.url).await.unwrap();
    assert_eq!(other.latest("t1", "").await.unwrap(), store.latest("t1", "").await.unwrap());
    schema.drop_all().await.unwrap();
}

fn run(id: &str, status: &str, created_ms: i64) -> ArchivedRun {
    ArchivedRun {
        id: id.into(),
        kind: "run".into(),
        status: status.into(),
        created_ms,
        body: format!("{{\"id\":\"{id}\"}}"),
    }
}

/// Runs, their events in pages, listing newest first, retention, deletion.
async fn archive_keeps_the_contract(archive: Arc<dyn RunArchive>) {
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        archive.put_run(&run(id, FINISHED, 1000 + i as i64)).await.unwrap();
    }
    archive.put_run(&run("e", "running", 2000)).await.unwrap();
    let events: Vec<Arc<str>> = (0..5).map(|i| Arc::from(format!("{{\"i\":{i}}}"))).collect();
    archive.add_events("b", 0, &events[..3]).await.unwrap();
    archive.add_events("b", 2, &events[2..]).await.unwrap();
    assert_eq!(archive.next_event("b").await.unwrap(), 5);
    assert_eq!(archive.next_event("a").await.unwrap(), 0, "a run without events");
    let read = archive.events("b", 1, 3).await.unwrap();
    assert_eq!(read.iter().map(|e| e.as_ref()).collect::<Vec<_>>(), ["{\"i\":1}", "{\"i\":2}", "{\"i\":3}"]);

    let page = |before: Option<&str>, status: Option<&str>| RunQuery {
        before: before.map(str::to_string),
        status: status.map(str::to_string),
        kind: None,
        limit: 2,
    };
    let ids = |runs: Vec<ArchivedRun>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(archive.list(&page(None, None)).await.unwrap()), ["e", "d"]);
    assert_eq!(ids(archive.list(&page(Some("d"), None)).await.unwrap()), ["c", "b"]);
    assert_eq!(ids(archive.list(&page(None, Some("running"))).await.unwrap()), ["e"]);
    assert_eq!(ids(archive.unfinished().await.unwrap()), ["e"]);

    let mut finished = run("e", FINISHED, 2000);
    finished.body = "{\"done\":true}".into();
    archive.put_run(&finished).await.unwrap();
    assert_eq!(archive.run("e").await.unwrap().unwrap().body, "{\"done\":true}");

    assert_eq!(archive.prune(Retention { count: Some(3), before_ms: None }).await.unwrap().len(), 2);
    assert_eq!(ids(archive.list(&RunQuery { limit: 10, ..Default::default() }).await.unwrap()), ["e", "d", "c"]);
    assert!(archive.events("b", 0, 10).await.unwrap().is_empty(), "a pruned run's events go with it");
    assert_eq!(archive.prune(Retention { count: None, before_ms: Some(1003) }).await.unwrap().len(), 1);
    assert!(archive.delete("e").await.unwrap());
    assert!(!archive.delete("e").await.unwrap());
    assert_eq!(ids(archive.list(&RunQuery { limit: 10, ..Default::default() }).await.unwrap()), ["d"]);
}

#[tokio::test]
async fn the_memory_archive_keeps_the_contract() {
    archive_keeps_the_contract(open_archive("memory:").await.unwrap()).await;
}

#[tokio::test]
async fn the_sqlite_archive_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    archive_keeps_the_contract(open_archive(path.to_str().unwrap()).await.unwrap()).await;
}

#[tokio::test]
async fn the_postgres_archive_keeps_the_contract() {
    let Some(schema) = postgres_schema("archive").await else { return };
    archive_keeps_the_contract(open_archive(&schema.url).await.unwrap()).await;
    schema.drop_all().await.unwrap();
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Records written before records carried a format version still load. The fixture
//! `fixtures/graphs-v0.db` is a SQLite store written by the code of that time (commit 3047545): a
//! thread `brief-1` (with its pinned blueprint and a sub-graph's) paused before its first node,
//! resumed once and stopped at a node that asks, with a pending write of a node that finished in
//! that step; and an RLM run's slot (`rlm-1`). Every record written now carries
//! [`recursive_store::FORMAT`].

use std::sync::Arc;

use recursive_core::CheckpointSlot;
use recursive_store::format::decode;
use recursive_store::{
    Checkpoint, Checkpointer, FORMAT, PendingWrite, SqliteCheckpointer, StoreSlot, ThreadInfo, When, Write,
};
use serde_json::{Value, json};

/// A copy of the fixture (opening a store writes to it).
fn fixture_copy(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("graphs.db");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/graphs-v0.db"), &path).unwrap();
    path
}

/// Every body of `table` as stored.
fn bodies(path: &std::path::Path, table: &str) -> Vec<String> {
    let raw = rusqlite::Connection::open(path).unwrap();
    let mut stmt = raw.prepare(&format!("SELECT body FROM {table} ORDER BY rowid")).unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
}

#[test]
fn the_fixture_holds_records_without_a_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    for table in ["graph_threads", "graph_checkpoints", "graph_writes"] {
        for body in bodies(&path, table) {
            let raw: Value = serde_json::from_str(&body).unwrap();
            assert!(raw.get("version").is_none(), "{table}: {body}");
        }
    }
}

#[test]
fn every_record_of_the_old_format_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    let threads: Vec<ThreadInfo> = bodies(&path, "graph_threads").iter().map(|b| decode(b).unwrap()).collect();
    assert_eq!(threads.iter().map(|t| t.thread.as_str()).collect::<Vec<_>>(), ["brief-1", "rlm-1"]);
    let checkpoints: Vec<Checkpoint> = bodies(&path, "graph_checkpoints").iter().map(|b| decode(b).unwrap()).collect();
    assert_eq!(checkpoints.len(), 3);
    let writes: Vec<PendingWrite> = bodies(&path, "graph_writes").iter().map(|b| decode(b).unwrap()).collect();
    assert_eq!(writes.iter().map(|w| w.node.as_str()).collect::<Vec<_>>(), ["write", "note", "ask"]);
}

#[tokio::test]
async fn a_store_written_before_versions_reads_back_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteCheckpointer::open(fixture_copy(&dir)).unwrap();
    let info = store.thread("brief-1").await.unwrap().unwrap();
    assert_eq!((info.graph.as_str(), info.origin.as_deref()), ("brief", Some("brief.toml")));
    assert_eq!(info.subgraphs.unwrap()["review"].origin, "review.toml");
    assert!(store.threads().await.unwrap().iter().all(Result::is_ok), "no thread is unreadable");

    let latest = store.latest("brief-1", "").await.unwrap().unwrap();
    assert_eq!((latest.step, latest.next.clone()), (1, vec!["note".to_string(), "ask".to_string()]));
    assert_eq!(latest.visits.get("write"), Some(&1));
    assert_eq!(latest.state["draft"], json!("Tides rise twice a day."));
    let first = store.get("brief-1", latest.parent.as_deref().unwrap()).await.unwrap().unwrap();
    assert_eq!(first.pause.map(|p| (p.when, p.nodes)), Some((When::Before, vec!["write".to_string()])));

    let writes = store.writes("brief-1", &latest.id).await.unwrap();
    assert!(writes.iter().any(|w| w.node == "note" && matches!(w.write, Write::Update { .. })), "{writes:?}");
    assert!(writes.iter().any(|w| w.node == "ask" && matches!(w.write, Write::Interrupt { .. })), "{writes:?}");

    let store: Arc<dyn Checkpointer> = Arc::new(store);
    let slot = StoreSlot::standalone(store, "rlm-1", "rlm");
    assert_eq!(slot.load().await.unwrap().unwrap()["iteration"], json!(2), "an RLM slot of the old format loads");
}

#[tokio::test]
async fn records_written_now_carry_the_format_version_beside_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    let store = SqliteCheckpointer::open(&path).unwrap();
    let old = store.latest("brief-1", "").await.unwrap().unwrap();
    let new = Checkpoint { id: Checkpoint::new_id(), parent: Some(old.id.clone()), step: 2, ..old.clone() };
    store.put(&new).await.unwrap();
    let mut info = store.thread("brief-1").await.unwrap().unwrap();
    info.origin = Some("moved.toml".into());
    store.put_thread(&info).await.unwrap();
    let write = PendingWrite { node: "ask".into(), write: Write::Interrupt { payload: json!("?") }, asked_at: None };
    store.put_write("brief-1", &new.id, &write).await.unwrap();

    let version = |body: &String| serde_json::from_str::<Value>(body).unwrap().get("version").cloned();
    let checkpoints = bodies(&path, "graph_checkpoints");
    assert_eq!(checkpoints.iter().map(version).collect::<Vec<_>>(), [None, None, None, Some(json!(FORMAT))]);
    assert_eq!(version(&bodies(&path, "graph_threads")[0]), Some(json!(FORMAT)));
    assert_eq!(version(bodies(&path, "graph_writes").last().unwrap()), Some(json!(FORMAT)));
    assert_eq!(store.latest("brief-1", "").await.unwrap().unwrap(), new);
    assert_eq!(store.get("brief-1", &old.id).await.unwrap().unwrap(), old, "old and new records read side by side");
}

#[tokio::test]
async fn a_record_of_a_newer_format_is_refused_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    let store = SqliteCheckpointer::open(&path).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let newer = FORMAT + 1;
    raw.execute(&format!("UPDATE graph_checkpoints SET body = json_set(body, '$.version', {newer})"), []).unwrap();
    let err = store.latest("brief-1", "").await.unwrap_err();
    assert!(err.to_string().contains(&format!("format version {newer}")), "{err}");
}

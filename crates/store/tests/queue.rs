#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The job queue on a real PostgreSQL (each test in a schema of its own): a ready job goes to
//! exactly one of many concurrent claimers, a failing job backs off and ends `failed` after its
//! attempts, a job whose claimer stopped heartbeating is put back and its late claimer can no
//! longer finish it, one open job per thread.

use std::collections::BTreeSet;
use std::time::Duration;

use recursive_store::PostgresCheckpointer;
use recursive_store::queue::{DEFAULT_QUEUE, JobQueue, KIND_GRAPH, NewJob, QueueError};
use recursive_testkit::postgres::TestSchema;
use serde_json::json;

async fn queue(url: &str) -> (PostgresCheckpointer, JobQueue) {
    let store = PostgresCheckpointer::connect(url).await.unwrap();
    let queue = JobQueue::open(&store).await.unwrap();
    (store, queue)
}

fn job(target: &str, max_attempts: i32) -> NewJob {
    NewJob {
        queue: DEFAULT_QUEUE.into(),
        kind: KIND_GRAPH.into(),
        target: target.into(),
        payload: json!({}),
        max_attempts,
    }
}

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_ready_job_goes_to_exactly_one_of_many_concurrent_claimers() {
    let Some(schema) = TestSchema::from_env("queue_claim").await else { return };
    let (_store, q) = queue(&schema.url).await;
    for i in 0..60 {
        q.enqueue(&job(&format!("t{i}"), 3)).await.unwrap();
    }
    let mut claimers = Vec::new();
    for c in 0..6 {
        let url = schema.url.clone();
        claimers.push(tokio::spawn(async move {
            // A connection each, as separate workers have.
            let (_store, q) = queue(&url).await;
            let mut got = Vec::new();
            for _ in 0..100 {
                match q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], &format!("c{c}"), TTL).await.unwrap() {
                    Some(j) => got.push(j.target),
                    None => break,
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    let distinct: BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), 60, "every job claimed once: {all:?}");
    assert_eq!(distinct.len(), 60);
    assert!(q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "late", TTL).await.unwrap().is_none());
    schema.drop_all().await.unwrap();
}

#[tokio::test]
async fn a_failing_job_backs_off_then_fails_for_good_with_its_error() {
    let Some(schema) = TestSchema::from_env("queue_retry").await else { return };
    let (_store, q) = queue(&schema.url).await;
    let id = q.enqueue(&job("t", 2)).await.unwrap();
    let first = q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().unwrap();
    assert_eq!((first.id, first.attempt), (id, 1));
    let status = q.fail(id, "w", "boom 1", Duration::from_secs(3600), true).await.unwrap();
    assert_eq!(status.as_deref(), Some("queued"));
    assert!(q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().is_none(), "backing off");

    let id2 = q.enqueue(&job("u", 2)).await.unwrap();
    q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().unwrap();
    assert_eq!(q.fail(id2, "w", "boom 1", Duration::ZERO, true).await.unwrap().as_deref(), Some("queued"));
    let second = q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().unwrap();
    assert_eq!((second.id, second.attempt), (id2, 2));
    assert_eq!(q.fail(id2, "w", "boom 2", Duration::ZERO, true).await.unwrap().as_deref(), Some("failed"));
    let rows = q.list(None, Some("failed"), 10).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].target.as_str(), rows[0].error.as_deref(), rows[0].attempts), ("u", Some("boom 2"), 2));
    schema.drop_all().await.unwrap();
}

#[tokio::test]
async fn a_job_whose_claimer_stopped_heartbeating_is_put_back_and_the_late_claimer_cannot_finish_it() {
    let Some(schema) = TestSchema::from_env("queue_reap").await else { return };
    let (_store, q) = queue(&schema.url).await;
    let id = q.enqueue(&job("t", 3)).await.unwrap();
    q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "dead", Duration::from_millis(100)).await.unwrap().unwrap();
    assert!(q.reap().await.unwrap().is_empty(), "its lease has not expired yet");
    // Put back once its lease has expired.
    let reaped = recursive_testkit::eventually(Duration::from_secs(10), || async {
        Some(q.reap().await.unwrap()).filter(|reaped| !reaped.is_empty())
    })
    .await;
    assert_eq!((reaped.len(), reaped[0].id, reaped[0].status.as_str()), (1, id, "queued"));
    let taken = q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "alive", TTL).await.unwrap().unwrap();
    assert_eq!((taken.id, taken.attempt, taken.worker.as_str()), (id, 2, "alive"));
    assert!(!q.holds(id, "dead", 1).await.unwrap(), "the fence refuses the late claimer's writes");
    assert!(q.holds(id, "alive", 2).await.unwrap());
    assert!(!q.holds(id, "alive", 1).await.unwrap(), "nor an earlier attempt of the same worker");
    assert!(!q.complete(id, "dead", "done").await.unwrap(), "the dead claimer lost it");
    assert!(q.heartbeat("dead", TTL).await.unwrap().is_empty());
    assert_eq!(q.heartbeat("alive", TTL).await.unwrap(), [id]);
    assert!(q.complete(id, "alive", "done").await.unwrap());
    schema.drop_all().await.unwrap();
}

#[tokio::test]
async fn a_thread_has_at_most_one_open_job() {
    let Some(schema) = TestSchema::from_env("queue_open").await else { return };
    let (_store, q) = queue(&schema.url).await;
    let id = q.enqueue(&job("t", 3)).await.unwrap();
    let again = q.enqueue(&job("t", 3)).await.unwrap_err();
    assert!(matches!(again, QueueError::AlreadyQueued { .. }), "{again}");
    q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().unwrap();
    q.complete(id, "w", "done").await.unwrap();
    q.enqueue(&job("t", 3)).await.unwrap();
    schema.drop_all().await.unwrap();
}

#[tokio::test]
async fn a_job_of_a_newer_format_waits_for_a_worker_that_reads_it_and_an_unversioned_one_is_claimed() {
    let Some(schema) = TestSchema::from_env("queue_format").await else { return };
    let (_store, q) = queue(&schema.url).await;
    let (client, connection) = tokio_postgres::connect(&schema.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let id = q.enqueue(&job("t", 3)).await.unwrap();
    let format: i32 = client.query_one("SELECT format FROM recursive_jobs WHERE id = $1", &[&id]).await.unwrap().get(0);
    assert_eq!(format, recursive_store::FORMAT as i32, "a job records the format of its payload");
    client.execute("UPDATE recursive_jobs SET format = $2 WHERE id = $1", &[&id, &(format + 1)]).await.unwrap();
    assert!(q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().is_none(), "left for a newer worker");
    client.execute("UPDATE recursive_jobs SET format = 0 WHERE id = $1", &[&id]).await.unwrap();
    let claimed = q.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "w", TTL).await.unwrap().unwrap();
    assert_eq!((claimed.id, claimed.payload), (id, json!({})), "a job queued before versions reads as it is");
    schema.drop_all().await.unwrap();
}

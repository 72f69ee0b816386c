#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Runs that outlive the server process: kept in the workspace's store, listed after a restart
//! (a run in flight when the server was killed resumes), replayed from the store,
//! deleted, pruned by `--keep`; and memory that stays flat over thousands of finished requests.

mod common;

use std::time::Duration;

use common::{Env, Served, http, s, signal, wait_for};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

fn serve_against(env: &Env, model: &ModelServer, more: &[&str]) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .args(more)
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

fn get(server: &Served, path: &str) -> (u16, Value) {
    let (status, _, body) = http(&server.addr, "GET", path, &[], None);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn start_run(server: &Served, input: &str) -> String {
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": input})));
    assert_eq!(status, 202, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string()
}

fn status_of(server: &Served, id: &str) -> Value {
    get(server, &format!("/v1/runs/{id}")).1
}

/// Waits until the store holds `id` with at least one event (the archiver writes every 200 ms).
fn wait_stored(env: &Env, id: &str) {
    let db = env.path(".recursive/graphs.db");
    wait_for("the run in the store", Duration::from_secs(20), || {
        let Ok(conn) = rusqlite::Connection::open(&db) else { return false };
        conn.query_row("SELECT COUNT(*) FROM served_run_events WHERE run = ?1", [id], |r| r.get::<_, i64>(0))
            .is_ok_and(|n| n > 0)
    });
}

#[test]
fn a_server_killed_mid_run_lists_its_runs_after_a_restart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.when("quick", Reply::text("quick answer"));
    model.when("slow", Reply::text("too late").after(Duration::from_secs(60)));
    let env = Env::new();
    let first = serve_against(&env, &model, &[]);
    let quick = start_run(&first, "quick question");
    wait_for("the quick run", Duration::from_secs(20), || status_of(&first, &quick)["status"] == "finished");
    let slow = start_run(&first, "slow question");
    wait_for("the slow run to start", Duration::from_secs(20), || status_of(&first, &slow)["status"] == "running");
    wait_stored(&env, &slow);
    wait_stored(&env, &quick);
    signal(first.child.id(), "KILL");
    drop(first);

    // The restarted server's model answers at once: the run in flight at the kill resumes.
    let model = rt.block_on(ModelServer::start());
    model.when("slow", Reply::text("answered after the restart"));
    let second = serve_against(&env, &model, &[]);
    let (status, list) = get(&second, "/v1/runs");
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [slow.as_str(), quick.as_str()], "newest first: {list}");
    wait_for("the resumed run", Duration::from_secs(20), || status_of(&second, &slow)["status"] == "finished");
    let resumed = status_of(&second, &slow);
    assert_eq!(resumed["result"]["text"], "answered after the restart", "{resumed}");
    assert_eq!(resumed["result"]["ok"], true, "{resumed}");
    let kept = status_of(&second, &quick);
    assert_eq!(kept["result"]["text"], "quick answer", "{kept}");
    assert_eq!(kept["title"], "quick question");

    // Its events replay from the store, ending with `end`.
    let (status, _, events) = http(&second.addr, "GET", &format!("/v1/runs/{quick}/events"), &[], None);
    assert_eq!(status, 200);
    assert!(events.contains("event: run_started") && events.contains("event: run_finished"), "{events}");
    assert!(events.trim_end().lines().any(|l| l == "event: end"), "{events}");
    let (_, filtered) = get(&second, "/v1/runs?status=finished&limit=1");
    assert_eq!(filtered["data"].as_array().unwrap().len(), 1);
    assert_eq!(filtered["has_more"], true);
    let (_, next) = get(&second, &format!("/v1/runs?status=finished&limit=1&before={slow}"));
    assert_eq!(next["data"][0]["id"], quick.as_str(), "{next}");
}

#[test]
fn runs_are_deleted_on_request_and_pruned_past_keep() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.when("quick", Reply::text("quick answer"));
    model.when("slow", Reply::text("too late").after(Duration::from_secs(60)));
    let env = Env::new();
    let server = serve_against(&env, &model, &["--keep", "3"]);
    let ids: Vec<String> = (0..5).map(|i| start_run(&server, &format!("quick {i}"))).collect();
    wait_for("retention", Duration::from_secs(20), || {
        let runs = get(&server, "/v1/runs").1["data"].as_array().cloned().unwrap_or_default();
        runs.len() == 3 && runs.iter().all(|r| r["status"] == "finished")
    });
    let (_, list) = get(&server, "/v1/runs");
    let kept: Vec<&str> = list["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(kept, [ids[4].as_str(), ids[3].as_str(), ids[2].as_str()], "the newest are kept");
    assert_eq!(get(&server, &format!("/v1/runs/{}", ids[0])).0, 404, "a pruned run is gone");

    let (status, _, _) = http(&server.addr, "DELETE", &format!("/v1/runs/{}", ids[4]), &[], None);
    assert_eq!(status, 204);
    assert_eq!(get(&server, &format!("/v1/runs/{}", ids[4])).0, 404);
    assert_eq!(http(&server.addr, "DELETE", &format!("/v1/runs/{}", ids[4]), &[], None).0, 404);

    let slow = start_run(&server, "slow one");
    let (status, _, body) = http(&server.addr, "DELETE", &format!("/v1/runs/{slow}"), &[], None);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cancel it first"), "{body}");
}

/// The resident set of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `count` chat completions of about 2 KB each, from 8 client threads.
fn load(addr: &str, count: usize) {
    let body =
        json!({"model": "agent", "messages": [{"role": "user", "content": format!("say hello {}", "x".repeat(2000))}]});
    std::thread::scope(|scope| {
        for t in 0..8 {
            let body = &body;
            scope.spawn(move || {
                for _ in (t..count).step_by(8) {
                    let (status, _, text) = http(addr, "POST", "/v1/chat/completions", &[], Some(body));
                    assert_eq!(status, 200, "{text}");
                }
            });
        }
    });
}

#[test]
fn two_thousand_finished_requests_leave_memory_where_it_was() {
    let env = Env::new();
    let script = env.script("load.json", json!([{"when": "say hello", "text": "hello there"}]));
    let server = Served::start(&env, &["--mock-script", s(&script), "--keep", "100", "--max-queued-runs", "64"], None);
    load(&server.addr, 300);
    let warm = rss_kib(server.child.id());
    load(&server.addr, 2000);
    wait_for("the last runs written away and pruned", Duration::from_secs(30), || {
        get(&server, "/v1/runs?limit=500").1["data"].as_array().is_some_and(|d| d.len() == 100)
    });
    let after = rss_kib(server.child.id());
    let grown = after.saturating_sub(warm);
    eprintln!("RSS after warm-up {warm} KiB, after 2,000 more requests {after} KiB (+{grown} KiB)");
    assert!(grown < 4 * 1024, "RSS grew by {grown} KiB over 2,000 finished requests ({warm} → {after} KiB)");
    let (_, list) = get(&server, "/v1/runs?limit=500");
    assert_eq!(list["data"].as_array().unwrap().len(), 100, "retention keeps 100");
}

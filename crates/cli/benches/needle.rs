#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The 1 MB needle through the whole CLI against its floor (`cargo bench -p recursive --bench
//! needle`): `recursive rlm` as a user runs it — a process started, the input read from a file,
//! the sandbox worker spawned, 3 root turns and one batch of 50 sub-calls at `--concurrency
//! 64`, checkpoints kept — against a minimal client making the same requests to the same
//! scripted server on 127.0.0.1 (every request 50 ms). Also: the bare process start, the time
//! from spawn to the first request, and a sweep of `--concurrency`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

const LATENCY: Duration = Duration::from_millis(50);
const CHUNK: usize = 21_000;

/// The scripted turns of the root model and the sub-model's answers; every reply after 50 ms.
fn needle_reply(r: &RecordedRequest) -> Reply {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let text = if r.body["model"] == "bench-primary" {
        match messages.iter().filter(|m| m["role"] == "assistant").count() {
            0 => "Look first.\n```python\nprint(len(context), context[:80])\n```".to_string(),
            1 => format!(
                "Ask about every chunk at once.\n```python\nchunks = [context[i:i + {CHUNK}] for i in range(0, \
                 len(context), {CHUNK})]\nrs = llm_query_batched([f'Quote the code word if this text has one, else \
                 say none: {{c}}' for c in chunks])['result']\nhits = [r for r in rs if r != 'none']\nprint(len(chunks), hits)\n```"
            ),
            _ => "```python\nsubmit(hits[0])\n```".to_string(),
        }
    } else {
        let prompt = messages.last().and_then(|m| m["content"].as_str()).unwrap_or("");
        match prompt.find("CODEWORD-") {
            Some(at) => prompt[at..].split_whitespace().next().unwrap_or("none").to_string(),
            None => "none".to_string(),
        }
    };
    Reply::text(text).after(LATENCY)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// The same requests from a minimal client: 3 root turns in sequence, the 50 sub-calls of the
/// second at once.
async fn floor(client: &reqwest::Client, url: &str, input: &str) -> f64 {
    let post = |model: &'static str, content: String| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": content}]});
        client.post(format!("{url}/chat/completions")).bearer_auth("sk-bench").json(&body).send()
    };
    let t = Instant::now();
    post("bench-primary", "Which code word is in the log?".into()).await.unwrap().bytes().await.unwrap();
    post("bench-primary", "turn two".into()).await.unwrap().bytes().await.unwrap();
    let chunks: Vec<String> = input
        .as_bytes()
        .chunks(CHUNK)
        .map(|c| format!("Quote the code word if this text has one, else say none: {}", String::from_utf8_lossy(c)))
        .collect();
    let subs = chunks.into_iter().map(|c| async { post("bench-sub", c).await.unwrap().bytes().await.unwrap() });
    futures::future::join_all(subs).await;
    post("bench-primary", "turn three".into()).await.unwrap().bytes().await.unwrap();
    t.elapsed().as_secs_f64() * 1000.0
}

/// One CLI run; returns its wall time and the time from spawn to the first request.
fn cli_run(
    url: &str,
    input: &std::path::Path,
    dir: &std::path::Path,
    concurrency: usize,
    first: &Mutex<Option<Instant>>,
    extra: &[&str],
) -> (f64, f64) {
    *first.lock().unwrap() = None;
    let t = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recursive"))
        .current_dir(dir)
        .env("OPENAI_API_KEY", "sk-bench")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .args(["rlm", "Which code word is in the log?", "--input"])
        .arg(format!("log={}", input.display()))
        .args(["--provider", "openai", "--base-url", url, "--model", "bench-primary", "--sub-model", "bench-sub"])
        .args(["--concurrency", &concurrency.to_string(), "--max-llm-calls", "100", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let wall = t.elapsed().as_secs_f64() * 1000.0;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["output"]["answer"], "CODEWORD-7Q4", "{result}");
    let startup = first.lock().unwrap().map(|f| (f - t).as_secs_f64() * 1000.0).unwrap_or(f64::NAN);
    (wall, startup)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    let first: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = first.clone();
    server.respond_with(move |r| {
        let mut f = seen.lock().unwrap();
        if f.is_none() {
            *f = Some(Instant::now());
        }
        Some(needle_reply(r))
    });
    let url = server.openai_url();
    let dir = tempfile::tempdir().unwrap();
    let input_text = recursive_testkit::texts::haystack(1 << 20);
    let input = dir.path().join("log.txt");
    std::fs::write(&input, &input_text).unwrap();
    let client = recursive_http::client();
    const RUNS: usize = 7;

    let floors: Vec<f64> = (0..RUNS + 1).map(|_| runtime.block_on(floor(&client, &url, &input_text))).collect();
    let floor_ms = median(floors[1..].to_vec());

    let starts: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            std::process::Command::new(env!("CARGO_BIN_EXE_recursive")).arg("--version").output().unwrap();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();

    println!(
        "needle through the CLI: 3 root turns + 50 sub-calls, every request {} ms, 1 MiB input file",
        LATENCY.as_millis()
    );
    println!("  floor (a minimal client, same server, same requests): median {floor_ms:.1} ms");
    println!("  bare process start (`recursive --version`): median {:.1} ms", median(starts));
    for (label, extra) in [("checkpoints kept (default)", &[][..]), ("--no-checkpoint", &["--no-checkpoint"][..])] {
        let runs: Vec<(f64, f64)> =
            (0..RUNS + 1).map(|_| cli_run(&url, &input, dir.path(), 64, &first, extra)).collect();
        let wall = median(runs[1..].iter().map(|r| r.0).collect());
        let startup = median(runs[1..].iter().map(|r| r.1).collect());
        println!(
            "  recursive rlm --concurrency 64, {label}: median {wall:.1} ms (spawn to first request {startup:.1} ms), ratio to the floor {:.3}",
            wall / floor_ms
        );
    }
    println!("  --concurrency sweep (checkpoints kept):");
    for c in [8, 16, 32, 50, 64, 128] {
        let runs: Vec<f64> = (0..4).map(|_| cli_run(&url, &input, dir.path(), c, &first, &[]).0).collect();
        println!(
            "    {c:4}: median {:.1} ms, ratio {:.3}",
            median(runs[1..].to_vec()),
            median(runs[1..].to_vec()) / floor_ms
        );
    }
}

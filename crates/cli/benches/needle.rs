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
use recursive_testkit::texts::NEEDLE_CHUNK as CHUNK;

/// The scripted turns of the root model and the sub-model's answers; every reply after 50 ms.
fn needle_reply(r: &RecordedRequest) -> Reply {
    Reply::text(recursive_testkit::texts::needle_turn(&r.body)).after(LATENCY)
}

/// A provider's limit, as the scripted server enforces it: beyond it a request gets 429 with
/// `Retry-After`, as the providers answer.
#[derive(Clone, Copy, Debug)]
enum Limit {
    None,
    /// At most this many requests in flight (a gateway's or a self-hosted server's cap).
    InFlight(usize),
    /// A token bucket of this many requests refilled at this rate per second (a per-minute
    /// limit, scaled down: the burst a fresh minute allows, then the steady rate).
    Bucket(f64, f64),
}

/// The limiter's state: when each accepted request finishes, and the bucket's tokens.
struct Limiter {
    limit: Limit,
    busy_until: Vec<Instant>,
    tokens: f64,
    filled_at: Instant,
    refused: usize,
}

impl Limiter {
    fn new(limit: Limit) -> Self {
        let tokens = if let Limit::Bucket(capacity, _) = limit { capacity } else { 0.0 };
        Self { limit, busy_until: Vec::new(), tokens, filled_at: Instant::now(), refused: 0 }
    }

    /// `None` to accept a request now; the 429 to answer otherwise.
    fn admit(&mut self) -> Option<Reply> {
        let now = Instant::now();
        let refuse = |retry: f64| Reply::error(429, "rate limited").with_retry_after(format!("{retry:.3}"));
        let verdict = match self.limit {
            Limit::None => None,
            Limit::InFlight(cap) => {
                self.busy_until.retain(|t| *t > now);
                (self.busy_until.len() >= cap).then(|| refuse(1.0))
            }
            Limit::Bucket(capacity, rate) => {
                self.tokens = (self.tokens + (now - self.filled_at).as_secs_f64() * rate).min(capacity);
                self.filled_at = now;
                match self.tokens >= 1.0 {
                    true => {
                        self.tokens -= 1.0;
                        None
                    }
                    false => Some(refuse((1.0 - self.tokens) / rate)),
                }
            }
        };
        match verdict {
            Some(reply) => {
                self.refused += 1;
                Some(reply)
            }
            None => {
                self.busy_until.push(now + LATENCY);
                None
            }
        }
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// The same requests from a minimal client: 3 root turns in sequence, the 50 sub-calls of the
/// second at once. A new client each time: like a process of its own, it opens its connections.
async fn floor(url: &str, input: &str) -> f64 {
    let client = &recursive_http::client();
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

/// One CLI run; returns its wall time, the time from spawn to the first request, and whether
/// the answer was found (sub-calls refused for good come back to the model as errors).
fn cli_run(
    url: &str,
    input: &std::path::Path,
    dir: &std::path::Path,
    concurrency: usize,
    first: &Mutex<Option<Instant>>,
    extra: &[&str],
) -> (f64, f64, bool) {
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
    let found = result["output"]["answer"] == "CODEWORD-7Q4";
    let startup = first.lock().unwrap().map(|f| (f - t).as_secs_f64() * 1000.0).unwrap_or(f64::NAN);
    (wall, startup, found)
}

/// One run's timeline: when each request arrived and when the process ended, from its spawn.
fn timeline(
    url: &str,
    input: &std::path::Path,
    dir: &std::path::Path,
    first: &Mutex<Option<Instant>>,
    arrivals: &Mutex<Vec<(Instant, bool)>>,
) {
    for _ in 0..2 {
        arrivals.lock().unwrap().clear();
        let t = Instant::now();
        let (wall, _, found) = cli_run(url, input, dir, 64, first, &[]);
        assert!(found);
        let ms = |i: Instant| (i - t).as_secs_f64() * 1000.0;
        let seen = arrivals.lock().unwrap();
        let roots: Vec<String> = seen.iter().filter(|a| a.1).map(|a| format!("{:.1}", ms(a.0))).collect();
        let subs: Vec<f64> = seen.iter().filter(|a| !a.1).map(|a| ms(a.0)).collect();
        let (lo, hi) = subs.iter().fold((f64::MAX, 0f64), |(l, h), x| (l.min(*x), h.max(*x)));
        println!(
            "root requests at {roots:?} ms; {} sub-calls from {lo:.1} to {hi:.1} ms; exit at {wall:.1} ms",
            subs.len()
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start());
    let first: Arc<Mutex<Option<Instant>>> = Arc::default();
    let arrivals: Arc<Mutex<Vec<(Instant, bool)>>> = Arc::default();
    let limiter = Arc::new(Mutex::new(Limiter::new(Limit::None)));
    let (seen, log, limits) = (first.clone(), arrivals.clone(), limiter.clone());
    server.respond_with(move |r| {
        if let Some(refused) = limits.lock().unwrap().admit() {
            return Some(refused);
        }
        let mut f = seen.lock().unwrap();
        if f.is_none() {
            *f = Some(Instant::now());
        }
        log.lock().unwrap().push((Instant::now(), r.body["model"] == "bench-primary"));
        Some(needle_reply(r))
    });
    let url = server.openai_url();
    let dir = tempfile::tempdir().unwrap();
    let input_text = recursive_testkit::texts::haystack(1 << 20);
    let input = dir.path().join("log.txt");
    std::fs::write(&input, &input_text).unwrap();
    const RUNS: usize = 7;

    if std::env::args().any(|a| a == "--serve") {
        // For profiling by hand: the server and the input stay up for a minute.
        println!("serving {url} with the input {}", input.display());
        std::thread::sleep(Duration::from_secs(180));
        return;
    }
    if std::env::args().any(|a| a == "--timeline") {
        return timeline(&url, &input, dir.path(), &first, &arrivals);
    }
    let floors: Vec<f64> = (0..RUNS + 1).map(|_| runtime.block_on(floor(&url, &input_text))).collect();
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
        let runs: Vec<(f64, f64, bool)> =
            (0..RUNS + 1).map(|_| cli_run(&url, &input, dir.path(), 64, &first, extra)).collect();
        assert!(runs.iter().all(|r| r.2), "the answer was found");
        let wall = median(runs[1..].iter().map(|r| r.0).collect());
        let startup = median(runs[1..].iter().map(|r| r.1).collect());
        println!(
            "  recursive rlm --concurrency 64, {label}: median {wall:.1} ms (spawn to first request {startup:.1} ms), ratio to the floor {:.3}",
            wall / floor_ms
        );
    }
    println!("  --concurrency sweep (checkpoints kept), against a provider without limits and with the usual kinds:");
    for limit in [Limit::None, Limit::InFlight(32), Limit::InFlight(64), Limit::Bucket(40.0, 10.0)] {
        println!("    {limit:?}:");
        for c in [8, 16, 32, 50, 64, 128] {
            let runs: Vec<(f64, bool)> = (0..4)
                .map(|_| {
                    *limiter.lock().unwrap() = Limiter::new(limit);
                    let (wall, _, found) = cli_run(&url, &input, dir.path(), c, &first, &[]);
                    (wall, found)
                })
                .collect();
            let refused = limiter.lock().unwrap().refused;
            let found = runs[1..].iter().filter(|r| r.1).count();
            let m = median(runs[1..].iter().map(|r| r.0).collect());
            println!(
                "      {c:4}: median {m:.1} ms, ratio {:.3}; {refused} requests refused with 429 in the last run; \
                 answer found in {found} of {} runs",
                m / floor_ms,
                runs.len() - 1
            );
        }
    }
    *limiter.lock().unwrap() = Limiter::new(Limit::None);
}

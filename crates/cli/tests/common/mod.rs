//! Helpers of the CLI's end-to-end tests: a temp dir with a notes file, the binary run there
//! with no credentials and no user config, and small readers of its output.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

pub mod browser;
pub mod tmux;

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hello world\n").unwrap();
        Self { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn script(&self, name: &str, replies: Value) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, serde_json::to_string(&replies).unwrap()).unwrap();
        p
    }

    /// The binary, run in the temp dir with no provider credentials and no user config.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_recursive"));
        c.current_dir(self.dir.path())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env("OLLAMA_HOST", "127.0.0.1:9")
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"));
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }
}

pub fn stdout_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {text}"))
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(std::time::Instant::now() < end, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends a signal (`TERM`, `INT`...) to a process.
pub fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().unwrap().success();
    assert!(ok, "kill -{name} {pid} failed");
}

/// The events of a `--events` file, in order.
pub fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Whether a process with this pid is alive (and not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// Whether a host process runs exactly `argv`.
pub fn runs(argv: &[&str]) -> bool {
    let wanted = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
}

/// A running server and its address.
pub struct Served {
    pub child: Child,
    pub addr: String,
}

impl Served {
    pub fn start(env: &Env, args: &[&str], token: Option<&str>) -> Served {
        let mut cmd = env.cmd();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "-q"]).args(args);
        if let Some(token) = token {
            cmd.env("RECURSIVE_SERVE_TOKEN", token);
        }
        Served::spawn(cmd)
    }

    /// Starts a prepared `serve` command and reads the address it listens on.
    pub fn spawn(mut cmd: std::process::Command) -> Served {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line}")).to_string();
        Served { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One plain HTTP/1.1 request; the status, the headers and the body.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, String) {
    http_to_host(addr, addr, method, path, headers, body)
}

/// [`http`] with the `Host` header naming `host` (the connection still goes to `addr`).
pub fn http_to_host(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_lowercase(), body.to_string())
}

/// A server started with `args` and no token.
pub fn serve(env: &Env, args: &[&str]) -> Served {
    Served::start(env, args, None)
}

/// `(step, goal)` of a goal pursuit's request to a scripted server: `assess`, `decompose`,
/// `check`, `synthesize`, `digest` or `action:<type>` (from the system message), and the
/// `Current goal:` line of the user message.
pub fn goal_phase(r: &recursive_testkit::RecordedRequest) -> (String, String) {
    let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
    let text = |role: &str| -> String {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let system = text("system");
    let step = if let Some(rest) = system.strip_prefix("Step: ") {
        rest.split('.').next().unwrap_or("").to_string()
    } else if let Some(rest) = system.strip_prefix("Action: ") {
        format!("action:{}", rest.split('.').next().unwrap_or(""))
    } else {
        String::new()
    };
    let goal = text("user").lines().find_map(|l| l.strip_prefix("Current goal: ")).unwrap_or("").to_string();
    (step, goal)
}

/// Waits (bounded) for `child` to exit; its status.
pub fn wait_exit(child: &mut Child, what: &str) -> Option<std::process::ExitStatus> {
    let mut status = None;
    wait_for(&format!("{what} to exit"), Duration::from_secs(30), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status
}

/// Sends SIGTERM and waits (bounded) for the exit code.
pub fn terminate(mut child: Child, name: &str) -> Option<i32> {
    signal(child.id(), "TERM");
    wait_exit(&mut child, &format!("{name} after SIGTERM")).and_then(|s| s.code())
}

/// The objective of the sixteen-region pursuit ([`sixteen_regions`]).
pub const SIXTEEN_REGIONS: &str = "Survey sixteen regions";

/// A scripted model's answer in a pursuit of [`SIXTEEN_REGIONS`]: the objective decomposes into
/// sixteen atomic sub-goals, each analysed at once; every answer reports 2,000 input and 4,000
/// output tokens. `None` for a request it has no answer for.
pub fn sixteen_regions(r: &recursive_testkit::RecordedRequest) -> Option<recursive_testkit::Reply> {
    let (step, goal) = goal_phase(r);
    let reply = match step.as_str() {
        "assess" if goal == SIXTEEN_REGIONS => {
            serde_json::json!({ "reasoning": "many", "executable": false, "action": null, "why_decompose": "regions" })
        }
        "assess" => serde_json::json!({
            "reasoning": "one look", "executable": true,
            "action": {"type": "analyze", "target": "", "input": "look"}, "why_decompose": ""
        }),
        "decompose" => serde_json::json!({
            "reasoning": "one per region",
            "sub_goals": (1..=16).map(|i| serde_json::json!({
                "goal": format!("Survey region {i}"), "rationale": "needed", "depends_on": [], "complexity": "atomic"
            })).collect::<Vec<_>>(),
            "coverage": "all"
        }),
        "check" => serde_json::json!({ "reasoning": "j", "achieved": false, "confidence": 0.9, "remaining_gaps": [] }),
        "synthesize" => serde_json::json!({
            "summary": "s", "key_findings": [], "confidence": 0.8, "limitations": [], "contradictions": []
        }),
        "action:analyze" => Value::String(format!("findings of {goal}")),
        _ => return None,
    };
    let text = match reply {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Some(recursive_testkit::Reply::text(text).with_usage(2000, 4000))
}

/// The records of a durable run's journal kept in a file (a session's, a goal's).
pub fn file_journal(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The records of the durable run `key`'s journal in a SQLite store (a thread's, an RLM's).
pub fn store_journal(db: &Path, key: &str) -> Vec<Value> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT body FROM run_journal WHERE key = ?1 ORDER BY seq").unwrap();
    let rows = stmt.query_map([key], |r| r.get::<_, String>(0)).unwrap();
    rows.map(|r| serde_json::from_str(&r.unwrap()).unwrap()).collect()
}

/// What the holds of a journal's calls that never settled (in flight at a kill) hold, each.
pub fn unsettled_holds(records: &[Value]) -> Vec<f64> {
    let settled: Vec<&Value> = records.iter().filter(|r| r["spend"] == "settle").map(|r| &r["call"]).collect();
    records
        .iter()
        .filter(|r| r["spend"] == "hold" && !settled.contains(&&r["call"]))
        .map(|r| r["usd"].as_f64().unwrap())
        .collect()
}

/// A model server that reads `notes.txt` first and answers `read it` once it has; with
/// `hang_after_tool` it never answers after the tool result (its process is killed there).
pub fn notes_reader(runtime: &tokio::runtime::Runtime, hang_after_tool: bool) -> recursive_testkit::ModelServer {
    use recursive_testkit::Reply;
    let server = runtime.block_on(recursive_testkit::ModelServer::start());
    server.respond_with(move |r| {
        let after_tool = r.body["messages"].as_array()?.last()?["role"] == "tool";
        Some(match (after_tool, hang_after_tool) {
            (false, _) => Reply::tool_call("read_file", serde_json::json!({"path": "notes.txt"})),
            (true, true) => Reply::hang(),
            (true, false) => Reply::text("read it"),
        })
    });
    server
}

#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What reaches `recursive serve` at all, tried as a browser page, a rebinding attacker and a
//! deployment would: a foreign `Host` or `Origin` is refused on every route; CORS is off unless
//! an origin is configured; the bearer scheme is case-insensitive and a 401 says how to
//! authenticate; MCP over HTTP answers a real host name; a shutdown ends within its deadline
//! even with a stream nobody reads; `recursive mcp` exits 0 on SIGTERM.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Env, Served, http, http_to_host, s, signal};
use serde_json::{Value, json};

fn script(env: &Env) -> std::path::PathBuf {
    env.script("serve.json", json!([{"when": "say hello", "text": "hello there"}]))
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;

const MCP_HEADERS: [(&str, &str); 1] = [("accept", "application/json, text/event-stream")];

#[test]
fn a_foreign_host_or_origin_is_refused_on_every_route() {
    let env = Env::new();
    let server = Served::start(&env, &["--mock-script", s(&script(&env))], None);
    let port = server.addr.rsplit(':').next().unwrap().to_string();
    let evil = format!("evil.example:{port}");
    let start = json!({"kind": "run", "input": "say hello"});
    for (method, path, body) in [
        ("GET", "/health", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/runs", Some(&start)),
        ("GET", "/openapi.json", None),
    ] {
        let (status, _, body) = http_to_host(&server.addr, &evil, method, path, &[], body);
        assert_eq!(status, 403, "{method} {path} with Host {evil}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"]["message"].as_str().unwrap().contains("--allowed-host"), "{body}");
    }
    let init: Value = serde_json::from_str(INITIALIZE).unwrap();
    assert_eq!(http_to_host(&server.addr, &evil, "POST", "/mcp", &MCP_HEADERS, Some(&init)).0, 403);

    // A page of another site posting a run (a cross-site form or fetch) is refused.
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &[("origin", "http://evil.example")], Some(&start));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--cors-origin"), "{body}");
    assert_eq!(http(&server.addr, "POST", "/v1/runs", &[("origin", "null")], Some(&start)).0, 403);

    // The loopback names, and the server's own origin, are answered.
    assert_eq!(http_to_host(&server.addr, &format!("localhost:{port}"), "GET", "/v1/models", &[], None).0, 200);
    let own = format!("http://{}", server.addr);
    let (status, head, _) = http(&server.addr, "GET", "/v1/models", &[("origin", &own)], None);
    assert_eq!(status, 200);
    assert!(!head.contains("access-control-allow-origin"), "CORS is off unless configured: {head}");
    assert_eq!(http(&server.addr, "POST", "/v1/runs", &[], Some(&start)).0, 202, "no Origin: not a browser's page");
}

#[test]
fn a_configured_cors_origin_gets_preflight_answers_and_the_headers() {
    let env = Env::new();
    let script = script(&env);
    let args = ["--mock-script", s(&script), "--cors-origin", "https://app.example.com"];
    let server = Served::start(&env, &args, Some("sekrit"));
    let app = ("origin", "https://app.example.com");
    let preflight =
        [app, ("access-control-request-method", "POST"), ("access-control-request-headers", "authorization")];
    let (status, head, _) = http(&server.addr, "OPTIONS", "/v1/runs", &preflight, None);
    assert!((200..300).contains(&status), "{status} {head}");
    assert!(head.contains("access-control-allow-origin: https://app.example.com"), "{head}");
    assert!(head.contains("authorization"), "{head}");

    let (status, head, _) = http(&server.addr, "GET", "/v1/models", &[app, ("authorization", "Bearer sekrit")], None);
    assert_eq!(status, 200);
    assert!(head.contains("access-control-allow-origin: https://app.example.com"), "{head}");
    let other = [("origin", "https://other.example.com"), ("authorization", "Bearer sekrit")];
    assert_eq!(http(&server.addr, "GET", "/v1/models", &other, None).0, 403);
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_a_401_says_how_to_authenticate() {
    let env = Env::new();
    let server = Served::start(&env, &["--mock-script", s(&script(&env))], Some("sekrit"));
    for given in ["Bearer sekrit", "bearer sekrit", "BEARER  sekrit"] {
        assert_eq!(http(&server.addr, "GET", "/v1/models", &[("authorization", given)], None).0, 200, "{given}");
    }
    for wrong in ["Bearer other", "Basic sekrit", "sekrit"] {
        let (status, head, _) = http(&server.addr, "GET", "/v1/models", &[("authorization", wrong)], None);
        assert_eq!(status, 401, "{wrong}");
        assert!(head.contains("www-authenticate: bearer"), "{head}");
    }
}

#[test]
fn mcp_over_http_answers_a_real_host_name_with_a_token() {
    let env = Env::new();
    let script = script(&env);
    let args = ["--mock-script", s(&script), "--allowed-host", "agents.example.com"];
    let server = Served::start(&env, &args, Some("sekrit"));
    let port = server.addr.rsplit(':').next().unwrap();
    let init: Value = serde_json::from_str(INITIALIZE).unwrap();
    let headers = [MCP_HEADERS[0], ("authorization", "Bearer sekrit")];
    let host = format!("agents.example.com:{port}");
    let (status, head, body) = http_to_host(&server.addr, &host, "POST", "/mcp", &headers, Some(&init));
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(head.contains("mcp-session-id"), "{head}");
    assert!(body.contains("serverInfo"), "{body}");
}

/// Opens an MCP session over HTTP and a standalone event stream (GET) that is never read.
fn stalled_mcp_stream(addr: &str) -> std::net::TcpStream {
    let init: Value = serde_json::from_str(INITIALIZE).unwrap();
    let (status, head, _) = http(addr, "POST", "/mcp", &MCP_HEADERS, Some(&init));
    assert_eq!(status, 200, "{head}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .unwrap_or_else(|| panic!("{head}"))
        .trim()
        .to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) =
        http(addr, "POST", "/mcp", &[MCP_HEADERS[0], ("mcp-session-id", &session)], Some(&initialized));
    assert!((200..300).contains(&status));
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request =
        format!("GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\nmcp-session-id: {session}\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&first));
    stream
}

#[test]
fn sigterm_with_a_stream_nobody_reads_exits_within_the_deadline() {
    let env = Env::new();
    let script = script(&env);
    let args = ["--mock-script", s(&script), "--shutdown-grace", "1"];
    let mut server = Served::start(&env, &args, None);
    let _stalled = stalled_mcp_stream(&server.addr);
    let asked = Instant::now();
    signal(server.child.id(), "TERM");
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(asked.elapsed() < Duration::from_secs(20), "still running {:?} after SIGTERM", asked.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    // The deadline is the grace and a second (2 s); a loaded machine may take longer to exit,
    // never as long as a server that waits for the stream.
    assert!(asked.elapsed() < Duration::from_secs(12), "the deadline is the grace and a second: {:?}", asked.elapsed());
}

#[test]
fn the_stdio_mcp_server_exits_0_on_sigterm() {
    let env = Env::new();
    let mut child = env
        .cmd()
        .args(["mcp", "--mock-script", s(&script(&env))])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{INITIALIZE}").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("serverInfo"), "{line}");
    signal(child.id(), "TERM");
    let asked = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(asked.elapsed() < Duration::from_secs(15), "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn every_error_has_openais_shape() {
    let env = Env::new();
    let server = Served::start(&env, &["--mock-script", s(&script(&env)), "--max-body-mib", "1"], None);
    let shaped = |status: u16, body: &str, kind: &str| {
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {body}"));
        assert_eq!(v["error"]["type"], kind, "{status}: {body}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{body}");
    };
    // Not JSON; JSON of the wrong shape; not declared JSON.
    let raw = |content_type: &str, body: &str| {
        let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        (head.split_whitespace().nth(1).unwrap().parse::<u16>().unwrap(), body.to_string())
    };
    let (status, body) = raw("application/json", "{not json");
    assert_eq!(status, 400);
    shaped(status, &body, "invalid_request_error");
    let (status, body) = raw("application/json", r#"{"model": "agent"}"#);
    assert_eq!(status, 400, "OpenAI's status for a body of the wrong shape");
    shaped(status, &body, "invalid_request_error");
    let (status, body) = raw("text/plain", r#"{"model": "agent", "messages": []}"#);
    assert_eq!(status, 415);
    shaped(status, &body, "invalid_request_error");
    let big = json!({"model": "agent", "messages": [{"role": "user", "content": "x".repeat(2 << 20)}]});
    let (status, _, body) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&big));
    assert_eq!(status, 413);
    shaped(status, &body, "request_too_large");
    let (status, _, body) = http(&server.addr, "GET", "/v1/nothing-here", &[], None);
    assert_eq!(status, 404);
    shaped(status, &body, "not_found_error");
    let (status, head, body) = http(&server.addr, "DELETE", "/v1/models", &[], None);
    assert_eq!(status, 405);
    shaped(status, &body, "invalid_request_error");
    assert!(head.contains("allow: get"), "{head}");
}

#[test]
fn a_failed_run_is_a_500_the_official_sdk_does_not_retry() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(recursive_testkit::ModelServer::start_with([
        recursive_testkit::Reply::error(400, "the upstream model refuses"),
        recursive_testkit::Reply::error(400, "the upstream model refuses"),
        recursive_testkit::Reply::error(400, "the upstream model refuses"),
    ]));
    let mut cmd = env.cmd();
    cmd.env("OPENAI_API_KEY", "sk-test")
        .args(["serve", "--listen", "127.0.0.1:0", "-q", "--provider", "openai", "--base-url"])
        .args([model.openai_url().as_str(), "--model", "gpt-4o-mini"]);
    let server = Served::spawn(cmd);
    let client = r#"
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none", max_retries=2)
try:
    c.chat.completions.create(model="agent", messages=[{"role": "user", "content": "hi"}])
    print("no error")
except openai.InternalServerError as e:
    print("500", e.response.headers.get("x-should-retry"), e.body["message"] if isinstance(e.body, dict) else e.body)
"#;
    let out = std::process::Command::new(python).args(["-c", client, &server.url()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("500 false"), "{stdout}");
    assert!(stdout.contains("refuses"), "the run's error is the message: {stdout}");
    assert_eq!(model.requests().len(), 1, "the agent ran once: the SDK did not retry it");
}

#[test]
fn a_cors_origin_that_is_not_an_origin_is_a_usage_error() {
    let env = Env::new();
    let script = script(&env);
    for bad in ["app.example.com", "https://app.example.com/path", "ftp://app.example.com"] {
        let out = env.run(&["serve", "--listen", "127.0.0.1:0", "--mock-script", s(&script), "--cors-origin", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("an origin is"), "{bad}");
    }
}

#[test]
fn fields_the_server_cannot_honour_are_refused_by_name() {
    let env = Env::new();
    let server = Served::start(&env, &["--mock-script", s(&script(&env))], None);
    let messages = json!([{"role": "user", "content": "say hello"}]);
    let web_tool = json!([{"type": "web_search"}]);
    let bad_schema = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}});
    for (field, value) in [
        ("top_p", json!(0.5)),
        ("seed", json!(7)),
        ("frequency_penalty", json!(0.1)),
        ("logprobs", json!(true)),
        ("n", json!(2)),
        ("functions", json!([{"name": "f"}])),
        ("tools", web_tool),
        ("response_format", bad_schema),
    ] {
        let mut body = json!({"model": "agent", "messages": messages});
        body[field] = value;
        let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&body));
        assert_eq!(status, 400, "{field}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["param"], field, "{text}");
        assert_eq!(error["error"]["code"], "unsupported_parameter", "{text}");
    }
    // Client tools and settings are for agents: an RLM refuses them.
    let tool = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]);
    let body = json!({"model": "rlm", "messages": messages, "tools": tool});
    let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&body));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("agent models"), "{text}");
    // What changes nothing about the answer passes.
    let body = json!({"model": "agent", "messages": messages, "n": 1, "user": "u-1", "tool_choice": "auto",
        "response_format": {"type": "text"}, "temperature": null});
    let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&body));
    assert_eq!(status, 200, "{text}");
}

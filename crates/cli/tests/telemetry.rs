#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The run tree seen from outside: spans of nested runs received by a real OTLP receiver (the
//! official `opentelemetry-proto` package, over HTTP/protobuf and gRPC), live and after the
//! fact; a run whose collector is down; and the HTML trace rendered by headless Chromium.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{Env, s};
use serde_json::{Value, json};

/// The receiver script, running: its HTTP and gRPC ports and the file it writes spans to.
struct Receiver {
    child: Child,
    http: u16,
    grpc: u16,
    out: std::path::PathBuf,
}

impl Receiver {
    fn start(env: &Env) -> Self {
        let python = recursive_testkit::require_env("SERVE_TEST_PYTHON").expect("SERVE_TEST_PYTHON");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/otlp_receiver.py");
        let out = env.path("spans.jsonl");
        let mut child = Command::new(python)
            .arg(script)
            .arg(&out)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the OTLP receiver starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let ports: Vec<u16> = line.split_whitespace().map(|p| p.parse().unwrap()).collect();
        assert_eq!(ports.len(), 2, "the receiver said {line:?}");
        Self { child, http: ports[0], grpc: ports[1], out }
    }

    /// A configuration file whose `[telemetry]` table exports to this receiver as `service`.
    fn config(&self, env: &Env, service: &str) -> std::path::PathBuf {
        let config = env.path("otel.toml");
        let table =
            format!("[telemetry]\nendpoint = \"http://127.0.0.1:{}\"\nservice_name = \"{service}\"\n", self.http);
        std::fs::write(&config, table).unwrap();
        config
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "{name}: {:#?}", spans.iter().map(|s| &s["name"]).collect::<Vec<_>>());
    found[0]
}

const READER: &str = "kind = \"rlm\"\ndescription = \"Reads.\"\nmax_iterations = 2\n";

/// An agent calls an RLM file as a tool; the RLM makes one sub-call.
fn nested_run(env: &Env, extra_env: &[(&str, String)]) -> std::process::Output {
    std::fs::write(env.path("reader.toml"), READER).unwrap();
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [{"name": "reader", "arguments": {"input": "code 4471"}}]},
            "```python\nr = llm_query('shout ' + inputs['input'])\nsubmit(r['result'])\n```",
            "CODE 4471",
            "The code is CODE 4471."
        ]),
    );
    let mut cmd = env.cmd();
    cmd.args([
        "run",
        "find the code",
        "--mock-script",
        s(&script),
        "--agent",
        &format!("reader={}", s(&env.path("reader.toml"))),
        "-q",
    ]);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn a_nested_run_arrives_as_one_span_tree_with_genai_attributes() {
    let env = Env::new();
    let receiver = Receiver::start(&env);
    let endpoint = format!("http://127.0.0.1:{}", receiver.http);
    let out = nested_run(&env, &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let spans = receiver.spans();
    assert!(spans.iter().all(|s| s["transport"] == "http" && s["service"] == "recursive"));
    let main = one(&spans, "invoke_agent main");
    assert_eq!(main["parent_span_id"], "", "the root has no parent");
    assert_eq!(main["attributes"]["gen_ai.usage.input_tokens"], 40, "four calls of 10 tokens in the tree");
    let reader = one(&spans, "invoke_agent reader");
    assert_eq!(reader["parent_span_id"], main["span_id"]);
    assert_eq!(reader["attributes"]["recursive.kind"], "rlm");
    let iteration = one(&spans, "rlm iteration 1");
    assert_eq!(iteration["parent_span_id"], reader["span_id"]);
    let tool = one(&spans, "execute_tool reader");
    assert_eq!(tool["parent_span_id"], main["span_id"]);
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "reader");
    let chats: Vec<&Value> = spans.iter().filter(|s| s["name"].as_str().unwrap().starts_with("chat")).collect();
    assert_eq!(chats.len(), 4, "one client span per model call");
    for chat in &chats {
        assert_eq!(chat["kind"], 3, "SPAN_KIND_CLIENT");
        assert_eq!(chat["attributes"]["gen_ai.operation.name"], "chat");
        assert_eq!(chat["attributes"]["gen_ai.provider.name"], "mock");
        assert_eq!(chat["attributes"]["gen_ai.usage.input_tokens"], 10);
        assert_eq!(chat["attributes"]["gen_ai.usage.output_tokens"], 5);
        assert!(chat["attributes"]["gen_ai.response.finish_reasons"].is_array());
        assert!(chat["attributes"].get("gen_ai.completion").is_none(), "content only with --otel-content");
    }
    let under_iteration = chats.iter().filter(|c| c["parent_span_id"] == iteration["span_id"]).count();
    assert_eq!(under_iteration, 2, "the RLM's turn and its sub-call");
    assert!(spans.iter().all(|s| s["trace_id"] == main["trace_id"]), "one trace");
}

#[test]
fn a_graph_with_a_goal_node_is_exported_over_grpc_and_again_after_the_fact() {
    let env = Env::new();
    let receiver = Receiver::start(&env);
    std::fs::write(
        env.path("plan.toml"),
        "name = \"plan\"\n[state]\ninput = \"string\"\noutput = \"string\"\n[[nodes]]\nname = \"pursue\"\ngoal = \
         \"default\"\nobjective = \"{input}\"\noutput = \"output\"\n[[edges]]\nfrom = \"START\"\nto = \"pursue\"\n",
    )
    .unwrap();
    let assess = json!({"executable": true, "reasoning": "one step", "action": {"type": "analyze", "target": "", "input": "plan"}});
    let script = env.script("g.json", json!([assess.to_string(), "analysis done"]));
    let events = env.path("events.jsonl");
    let out = env
        .cmd()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{}", receiver.grpc))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .args(["graph", "run", "plan.toml", "--input", "{\"input\": \"write a plan\"}", "--mock-script", s(&script)])
        .args(["--events", s(&events), "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let spans = receiver.spans();
    assert!(spans.iter().all(|s| s["transport"] == "grpc"));
    let graph = one(&spans, "invoke_agent graph");
    assert_eq!(graph["attributes"]["recursive.kind"], "graph");
    let node = one(&spans, "graph node pursue");
    let node_run = one(&spans, "run pursue");
    assert_eq!(node["parent_span_id"], node_run["span_id"], "the node runs in its own scope");
    assert_eq!(node_run["parent_span_id"], graph["span_id"]);
    let goal = spans.iter().find(|s| s["name"].as_str().unwrap().starts_with("goal ")).expect("a goal span");
    let parent = spans.iter().find(|s| s["span_id"] == goal["parent_span_id"]).expect("the goal's parent span");
    assert_eq!(parent["attributes"]["recursive.kind"], "goal", "a goal sits under its pursuit's run: {parent}");
    assert!(goal["events"].as_array().unwrap().iter().any(|e| e == "assessed"), "{goal}");
    let live = spans.len();

    let again = env.run(&["trace", s(&events), "--otlp", &format!("http://127.0.0.1:{}", receiver.http)]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    let after: Vec<Value> = receiver.spans().into_iter().filter(|s| s["transport"] == "http").collect();
    assert_eq!(after.len(), live, "the same spans after the fact");
    let ids = |list: &[Value]| {
        let mut v: Vec<String> = list.iter().map(|s| s["span_id"].as_str().unwrap().to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&after), ids(&spans[..live]), "the same ids: the tree does not depend on when it is sent");
}

#[test]
fn a_run_whose_collector_is_down_finishes_normally() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = std::time::Instant::now();
    let out = nested_run(&env, &[("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{port}"))]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OpenTelemetry export lost"), "the loss is said: {stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
}

#[test]
fn the_html_trace_is_one_page_that_chromium_renders_without_errors() {
    let env = Env::new();
    let events = env.path("events.jsonl");
    std::fs::write(env.path("reader.toml"), READER).unwrap();
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [{"name": "reader", "arguments": {"input": "<script>alert(1)</script> code 4471"}}]},
            "```python\nr = llm_query('shout ' + inputs['input'])\nsubmit(r['result'])\n```",
            "CODE 4471",
            "The code is CODE 4471."
        ]),
    );
    let reader = format!("reader={}", s(&env.path("reader.toml")));
    let out = env.run(&[
        "run",
        "find the code",
        "--mock-script",
        s(&script),
        "--agent",
        &reader,
        "--events",
        s(&events),
        "-q",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let page = html_page(&env, &events);
    let text = std::fs::read_to_string(&page).unwrap();
    for external in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(!text.contains(external), "the page loads {external}");
    }
    let dom = render(&env, &page);
    assert!(dom.contains("data-rendered=\"2\""), "the script drew both runs: {}", &dom[..dom.len().min(2000)]);
    assert!(!dom.contains("data-error=\""), "the page raised an error");
    assert!(dom.contains("rlm iteration") || dom.contains("iteration 1"), "RLM iterations are drawn");
    assert!(dom.contains("submit(r['result'])"), "the RLM's code is shown");
    assert!(!dom.contains("<script>alert(1)</script> code"), "run text is text, not markup");
}

#[test]
fn the_html_of_the_readmes_main_job_renders_without_errors() {
    let env = Env::new();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rlm");
    let events = env.path("events.jsonl");
    let question = "Which access code opens the east server room now, and who issued it?";
    let out = env.run(&[
        "rlm",
        question,
        "--input",
        s(&examples.join("station-log.txt")),
        "--replay",
        s(&examples.join("station-log.cassette.jsonl")),
        "--events",
        s(&events),
        "-q",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let page = html_page(&env, &events);
    let dom = render(&env, &page);
    assert!(dom.contains("data-rendered=\"1\""), "{}", &dom[..dom.len().min(2000)]);
    assert!(!dom.contains("data-error=\""), "the page raised an error");
    assert!(dom.contains("llm_query_batched"), "the sub-calls are drawn");
}

/// `recursive trace EVENTS --html -o trace.html`, checked to succeed; the page's path.
fn html_page(env: &Env, events: &std::path::Path) -> std::path::PathBuf {
    let page = env.path("trace.html");
    let html = env.run(&["trace", s(events), "--html", "-o", s(&page)]);
    assert_eq!(html.status.code(), Some(0), "{}", String::from_utf8_lossy(&html.stderr));
    page
}

/// The DOM headless Chromium built from a page (its scripts run).
fn render(env: &Env, page: &std::path::Path) -> String {
    let dom = Command::new(common::browser::chromium())
        .args(common::browser::HEADLESS)
        .arg("--virtual-time-budget=3000")
        .arg(format!("--user-data-dir={}", env.path("chromium-profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&dom.stdout).into_owned()
}

#[test]
fn served_runs_are_exported_as_configured_in_the_telemetry_table() {
    let env = Env::new();
    let receiver = Receiver::start(&env);
    let config = receiver.config(&env, "served");
    let script = env.script("s.json", json!(["served answer"]));
    let server = common::Served::start(&env, &["--mock-script", s(&script), "--config", s(&config)], None);
    let (status, _, body) =
        common::http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": "hi"})));
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let events = common::http(&server.addr, "GET", &format!("/v1/runs/{id}/events"), &[], None).2;
    assert!(events.contains("run_finished"), "{events}");
    common::wait_for("the served run's spans", std::time::Duration::from_secs(20), || {
        receiver.spans().iter().any(|s| s["name"] == "invoke_agent main" && s["service"] == "served")
    });
}

#[test]
fn runs_called_over_mcp_stdio_are_exported_too() {
    use std::io::Write;
    let env = Env::new();
    let receiver = Receiver::start(&env);
    let config = receiver.config(&env, "over-mcp");
    let script = env.script("s.json", json!(["answered over MCP"]));
    let mut child = env
        .cmd()
        .args(["mcp", "--mock-script", s(&script), "--config", s(&config)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run", "arguments": {"goal": "hi"}}}),
    ];
    for message in messages {
        writeln!(stdin, "{message}").unwrap();
    }
    let answer = loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the server ended before answering the call");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 {
            break message;
        }
    };
    assert!(answer.to_string().contains("answered over MCP"), "{answer}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    common::wait_for("the run's span, exported by the MCP server", std::time::Duration::from_secs(20), || {
        receiver.spans().iter().any(|s| s["name"] == "invoke_agent main" && s["service"] == "over-mcp")
    });
}

/// `recursive goal OBJECTIVE` exported to `receiver`, with `--otel-content` when `content`.
fn exported_goal(env: &Env, receiver: &Receiver, objective: &str, content: bool) -> Vec<Value> {
    let assess = json!({"executable": true, "reasoning": "one step", "action": {"type": "analyze", "target": "", "input": "plan"}});
    let script = env.script("goal.json", json!([assess.to_string(), "analysis done"]));
    let mut cmd = env.cmd();
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{}", receiver.http)).args([
        "goal",
        objective,
        "--mock-script",
        s(&script),
        "-q",
    ]);
    if content {
        cmd.arg("--otel-content");
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let spans = receiver.spans();
    assert!(spans.iter().any(|s| s["name"].as_str().unwrap().starts_with("goal ")), "a goal span: {spans:#?}");
    std::fs::remove_file(&receiver.out).unwrap();
    spans
}

#[test]
fn a_goals_objective_is_exported_only_with_otel_content() {
    let env = Env::new();
    let receiver = Receiver::start(&env);
    let objective = "transfer 4471 dollars to account 99";
    let without = exported_goal(&env, &receiver, objective, false);
    for span in &without {
        assert!(!span.to_string().contains(objective), "the objective left without --otel-content: {span}");
    }
    let with = exported_goal(&env, &receiver, objective, true);
    assert!(with.iter().any(|s| s.to_string().contains(objective)), "with --otel-content it is exported");
}

#[test]
fn spans_lost_to_a_collector_that_never_answers_are_said() {
    let env = Env::new();
    // It takes connections (the kernel completes them) and never reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let out = nested_run(&env, &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("warning: OpenTelemetry export lost"), "the loss is said: {stderr}");
    assert!(stderr.contains("unsent"), "{stderr}");
    drop(silent);
}

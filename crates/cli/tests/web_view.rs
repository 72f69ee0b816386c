#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The live web view of `recursive serve` in headless Chromium (driven over the DevTools
//! protocol, so the page keeps running while the test reads its DOM): an RLM run started after
//! the page opened shows up in the list and its iterations, with their code, appear while the
//! run is still running; a run's text is text, never markup; with a token the page asks for it
//! and the API answers it, and the Host/Origin guard holds for the page; a blueprint's Mermaid
//! flowchart is drawn as SVG.

mod common;

use std::time::Duration;

use common::browser::{Browser, png_size};
use common::{Env, Served, http};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

/// How long any one thing the page should show may take to appear.
const SHOWN: Duration = Duration::from_secs(30);

const FIRST: &str = "```python\nprint('first look: ' + str(len(context)))\n```";
const SECOND: &str = "```python\nwords = context.split()\nprint('second look: ' + str(len(words)))\n```";
const XSS: &str = "<img src=x onerror=\"document.body.setAttribute('data-pwned', '1')\">";

/// The question of an RLM request (its first user message).
fn question(request: &RecordedRequest) -> String {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    let first = messages.iter().find(|m| m["role"] == "user");
    first.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

/// Iterations the RLM has had before this request (its earlier replies).
fn earlier_iterations(request: &RecordedRequest) -> usize {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().filter(|m| m["role"] == "assistant").count()
}

/// The upstream model: the live question gets two looks and then never its last reply (the run
/// stays running until cancelled); the probe submits at once.
fn upstream(rt: &tokio::runtime::Runtime) -> ModelServer {
    let model = rt.block_on(ModelServer::start());
    model.respond_with(|request| {
        let question = question(request);
        Some(match earlier_iterations(request) {
            _ if question.contains("PROBE") => {
                Reply::text(format!("```python\nsubmit({{'answer': {:?}}})\n```", format!("<b>{XSS}</b>")))
            }
            0 => Reply::text(FIRST),
            1 => Reply::text(SECOND).after(Duration::from_millis(800)),
            _ => Reply::hang(),
        })
    });
    model
}

fn serve(env: &Env, model: &ModelServer, token: Option<&str>) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    if let Some(token) = token {
        cmd.env("RECURSIVE_SERVE_TOKEN", token);
    }
    Served::spawn(cmd)
}

fn start_run(server: &Served, body: &Value, headers: &[(&str, &str)]) -> String {
    let (status, _, answer) = http(&server.addr, "POST", "/v1/runs", headers, Some(body));
    assert_eq!(status, 202, "{answer}");
    serde_json::from_str::<Value>(&answer).unwrap()["id"].as_str().unwrap().to_string()
}

fn status_of(server: &Served, id: &str, headers: &[(&str, &str)]) -> String {
    let (_, _, body) = http(&server.addr, "GET", &format!("/v1/runs/{id}"), headers, None);
    serde_json::from_str::<Value>(&body).unwrap()["status"].as_str().unwrap().to_string()
}

/// A JavaScript test of the text of the element `selector`.
fn shows(selector: &str, text: &str) -> String {
    format!(
        "(function () {{ var n = document.querySelector({}); return !!n && n.textContent.indexOf({}) >= 0; }})()",
        json!(selector),
        json!(text)
    )
}

#[test]
fn the_live_view_shows_a_running_rlms_iterations_as_they_happen() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = upstream(&rt);
    let env = Env::new();
    let server = serve(&env, &model, None);
    let mut page = Browser::open(&format!("{}/", server.url()), &env.path("profile"));
    page.wait_for("the empty run list", SHOWN, &shows("#runs", "No runs yet."));

    let id = start_run(
        &server,
        &json!({"kind": "rlm", "input": "LIVE how long is the context?", "inputs": {"context": "alpha beta gamma"}}),
        &[],
    );
    let entry = format!("#runs li[data-run-id=\"{id}\"]");
    page.wait_for("the run in the list", SHOWN, &shows(&entry, "LIVE how long is the context?"));
    page.wait_for("iteration 1 with its code", SHOWN, &shows("#tree", "print('first look: '"));
    assert_eq!(status_of(&server, &id, &[]), "running", "iteration 1 was shown while the run ran");
    page.wait_for("iteration 1's observation", SHOWN, &shows("#tree", "first look: 16"));
    page.wait_for("iteration 2 with its code", SHOWN, &shows("#tree", "words = context.split()"));
    page.wait_for("iteration 2's observation", SHOWN, &shows("#tree", "second look: 3"));
    assert_eq!(status_of(&server, &id, &[]), "running", "the last reply was never released");
    let tree = page.eval("document.getElementById('tree').innerText").as_str().unwrap().to_string();
    assert!(tree.contains("iteration 1") && tree.contains("iteration 2"), "{tree}");
    assert!(tree.contains("30 tok"), "the tokens of the two model calls so far: {tree}");
    page.wait_for("the page's totals so far", SHOWN, &shows("#totals", "30 tok"));
    let entry_status = page.eval(&format!("document.querySelector('{entry} .status').textContent"));
    assert_eq!(entry_status, "running", "the list says the run is running");

    let shot = page.screenshot();
    let (width, height) = png_size(&shot);
    assert!(width >= 400 && height >= 300, "{width}x{height}");
    // To look at it: WEB_VIEW_SCREENSHOT=/tmp/live.png.
    if let Some(path) = std::env::var_os("WEB_VIEW_SCREENSHOT") {
        std::fs::write(path, &shot).unwrap();
    }

    // Cancelled, the run's end reaches the open page.
    let (status, _, _) = http(&server.addr, "POST", &format!("/v1/runs/{id}/cancel"), &[], None);
    assert_eq!(status, 202);
    page.wait_for("the run's end in its header", SHOWN, &shows("#run-head", "cancelled"));
    page.wait_for("the run's end in the list", SHOWN, &shows(&entry, "cancelled"));
    assert_eq!(page.eval("document.body.getAttribute('data-error')"), Value::Null, "the page raised no error");
    assert_eq!(page.eval("location.href.indexOf('token') < 0"), true);
}

#[test]
fn run_text_is_shown_as_text_never_as_markup() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = upstream(&rt);
    let env = Env::new();
    let server = serve(&env, &model, None);
    let input = format!("PROBE {XSS}");
    let id = start_run(&server, &json!({"kind": "rlm", "input": input, "inputs": {"context": XSS}}), &[]);
    let mut page = Browser::open(&format!("{}/", server.url()), &env.path("profile"));
    let entry = format!("#runs li[data-run-id=\"{id}\"]");
    page.wait_for("the probe in the list, as text", SHOWN, &shows(&entry, &input));
    page.wait_for("its input in the tree, as text", SHOWN, &shows("#tree", &input));
    page.wait_for("its answer, as text", SHOWN, &shows("#run-head", "<b><img src=x onerror="));
    page.wait_for("the submitted answer in the tree", SHOWN, &shows("#tree", "submit"));
    assert_eq!(page.eval("document.querySelectorAll('#layout img, #layout b').length"), 0, "no element from run text");
    assert_eq!(page.eval("document.body.hasAttribute('data-pwned')"), false, "no handler from run text ran");
    assert_eq!(page.eval("document.body.getAttribute('data-error')"), Value::Null);
}

#[test]
fn with_a_token_the_page_asks_for_it_and_the_api_answers_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = upstream(&rt);
    let env = Env::new();
    let server = serve(&env, &model, Some("sekrit"));
    let auth = [("authorization", "Bearer sekrit")];
    let id =
        start_run(&server, &json!({"kind": "rlm", "input": "PROBE with a token", "inputs": {"context": "x"}}), &auth);
    // The page holds no run data: it is served without the token; the API is not.
    let (status, head, body) = http(&server.addr, "GET", "/", &[], None);
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("content-security-policy: default-src 'none'; script-src 'self'"), "{head}");
    assert!(!body.contains("PROBE"), "no run data in the page");
    assert_eq!(http(&server.addr, "GET", "/web/app.js", &[], None).0, 200);
    assert_eq!(http(&server.addr, "GET", "/v1/runs", &[], None).0, 401);
    // The Host and Origin guard holds for the page as for the API.
    assert_eq!(common::http_to_host(&server.addr, "evil.example", "GET", "/", &[], None).0, 403);
    assert_eq!(http(&server.addr, "GET", "/web/app.js", &[("origin", "http://evil.example")], None).0, 403);

    let mut page = Browser::open(&format!("{}/", server.url()), &env.path("profile"));
    page.wait_for("the token prompt", SHOWN, "!document.getElementById('auth').classList.contains('hidden')");
    assert_eq!(page.eval("document.querySelectorAll('#runs li[data-run-id]').length"), 0, "nothing without it");
    page.eval(
        "document.getElementById('token').value = 'sekrit'; \
         document.getElementById('auth').requestSubmit(); true",
    );
    let entry = format!("#runs li[data-run-id=\"{id}\"]");
    page.wait_for("the run, listed with the token", SHOWN, &shows(&entry, "PROBE with a token"));
    page.wait_for("its events, streamed with the token", SHOWN, &shows("#tree", "submit"));
    assert_eq!(page.eval("location.href.indexOf('sekrit') < 0"), true, "the token is not in the URL");
    assert_eq!(page.eval("document.body.getAttribute('data-error')"), Value::Null);
}

const BLUEPRINT: &str = r#"
name = "review"

[state]
topic = "string"
draft = "string"

[[nodes]]
name = "write"
model = "default"
prompt = "Write about {topic}."
output = "draft"

[[nodes]]
name = "check"
model = "default"
prompt = "Check: {draft}"
output = "draft"

[[edges]]
from = "START"
to = "write"

[[edges]]
from = "write"
to = "check"

[[edges]]
from = "check"
to = "write"
when = { channel = "draft", equals = "again" }

[[edges]]
from = "check"
to = "END"
otherwise = true
"#;

#[test]
fn a_blueprints_mermaid_is_drawn_as_svg_without_mermaid_js() {
    let env = Env::new();
    std::fs::write(env.path("review.toml"), BLUEPRINT).unwrap();
    let show = env.run(&["graph", "show", "review.toml"]);
    assert_eq!(show.status.code(), Some(0), "{}", String::from_utf8_lossy(&show.stderr));
    let mermaid = String::from_utf8_lossy(&show.stdout).into_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = upstream(&rt);
    let server = serve(&env, &model, None);
    let mut page = Browser::open(&format!("{}/", server.url()), &env.path("profile"));
    page.wait_for("the page's script", SHOWN, "typeof RecursiveTrace === 'object'");
    let drawn = page.eval(&format!(
        "(function () {{ var svg = RecursiveTrace.drawMermaid({}); document.body.appendChild(svg); \
         return {{ boxes: svg.querySelectorAll('rect').length, arrows: svg.querySelectorAll('path.edge').length, \
         dotted: svg.querySelectorAll('path.dotted').length, text: svg.textContent, width: svg.getBBox().width }}; }})()",
        json!(mermaid)
    ));
    assert_eq!(drawn["boxes"], 4, "START, END and the two nodes: {drawn}");
    assert_eq!(drawn["arrows"], 4, "{drawn}");
    assert_eq!(drawn["dotted"], 1, "the otherwise edge: {drawn}");
    let text = drawn["text"].as_str().unwrap();
    for label in ["write", "check", "START", "END", "draft = \"again\"", "otherwise", "model default"] {
        assert!(text.contains(label), "{label} in {text}");
    }
    assert!(
        !text.contains("<br") && !text.contains("<small") && !text.contains("#quot;"),
        "labels lose their markup: {text}"
    );
    assert!(drawn["width"].as_f64().unwrap() > 100.0, "{drawn}");
}

#[test]
fn the_view_survives_a_node_named_constructor_shows_streamed_text_small_costs_and_ended_graph_nodes() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = upstream(&rt);
    let server = serve(&env, &model, None);
    let mut page = Browser::open(&format!("{}/", server.url()), &env.path("profile"));
    page.wait_for("the page's script", SHOWN, "typeof RecursiveTrace === 'object'");
    let shown = page.eval(
        r#"(function () {
          var box = document.createElement("div"); document.body.appendChild(box);
          var view = RecursiveTrace.create(box);
          var at = "2026-11-27T10:00:00Z";
          function ev(run, parent, name, type, more) {
            var e = { timestamp: at, run_id: run, parent_run_id: parent, root_run_id: "g", run_name: name, depth: parent ? 1 : 0, step: 0, type: type };
            Object.keys(more || {}).forEach(function (k) { e[k] = more[k]; });
            return e;
          }
          view.addAll([
            ev("g", null, "graph-d0", "run_started", { goal: "flow", mermaid: "flowchart TD\n  constructor --> __proto__\n  __proto__ --> END" }),
            ev("n", "g", "draft-d1", "usage", { usage: { input_tokens: 3, output_tokens: 2 }, cost_usd: 0.0000123, model: "m" }),
            ev("a", null, "main-d0", "run_started", { goal: "hi" }),
            ev("a", null, "main-d0", "partial_text", { delta: "Hello, " }),
            ev("a", null, "main-d0", "partial_text", { delta: "wor" }),
            ev("g", null, "graph-d0", "run_finished", { finish_reason: "completed", usage: { input_tokens: 3, output_tokens: 2 }, cost_usd: 0.0000123 })
          ]);
          view.render();
          var node = box.querySelector('[data-run="n"] summary').textContent;
          return { text: box.textContent, node: node, runs: box.querySelectorAll("details.run").length,
                   boxes: box.querySelectorAll("svg.mermaid rect").length, small: RecursiveTrace.usd(0.0000123) };
        })()"#,
    );
    assert_eq!(shown["runs"], 3, "every run is listed: {shown}");
    assert_eq!(shown["boxes"], 3, "constructor, __proto__ and END are drawn: {shown}");
    assert!(shown["text"].as_str().unwrap().contains("Hello, wor"), "streamed text shows as it comes: {shown}");
    let node = shown["node"].as_str().unwrap();
    assert!(node.contains("node") && node.contains("ended") && !node.contains("running"), "{node}");
    assert_eq!(shown["small"], "$0.000012", "{shown}");
    assert!(node.contains("$0.000012"), "a small cost is not $0.0000: {node}");
}

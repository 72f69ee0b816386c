#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Blueprints: compile diagnostics (several at once, each with line, column and caret),
//! binding against an allowlist before anything runs, the JSON Schema accepting what the
//! parser accepts, canonical formatting that round-trips, the Mermaid diagram, and a bound
//! blueprint running a model node through the run tree.

use std::sync::Arc;

use recursive_core::{ChatOptions, MockProvider, MockReply, RunScope};
use recursive_graph::blueprint::{self, Allowlist, Source};
use recursive_graph::{Finish, Start, Thread};
use recursive_store::MemoryCheckpointer;
use serde_json::json;

const REVIEW: &str = r#"
name = "review"
description = "Draft, then ask a person, then publish or revise"

[limits]
max_supersteps = 12
max_visits = 3

[state]
topic = "string"
draft = "string"
answer = "string"
notes = { type = "list", reducer = "append" }

[[nodes]]
name = "draft"
model = "default"
prompt = "Write one sentence about {topic}. Notes so far: {notes}"
output = "draft"

[[nodes]]
name = "approve"
ask = "Publish this? {draft}"
output = "answer"

[[nodes]]
name = "note"
model = "default"
prompt = "Say what to improve in: {draft}"
output = "notes"

[[edges]]
from = "START"
to = "draft"

[[edges]]
from = "draft"
to = "approve"

[[edges]]
from = "approve"
to = "END"
when = { channel = "answer", equals = "yes" }

[[edges]]
from = "approve"
to = "note"
otherwise = true

[[edges]]
from = "note"
to = "draft"
"#;

fn source(text: &str) -> Source {
    Source { origin: "review.toml".into(), text: text.into() }
}

fn allow(provider: Arc<MockProvider>) -> Allowlist {
    Allowlist::new().model("default", provider, ChatOptions::default())
}

#[test]
fn a_good_blueprint_compiles() {
    let bp = blueprint::compile(REVIEW, "review.toml").unwrap();
    assert_eq!(bp.nodes.len(), 3);
}

#[test]
fn several_problems_are_reported_at_once_with_positions_and_carets() {
    let bad = REVIEW
        .replace("to = \"approve\"", "to = \"aprove\"")
        .replace("Notes so far: {notes}", "Notes so far: {nots}")
        .replace("notes = { type = \"list\", reducer = \"append\" }", "notes = { type = \"list\", reducer = \"append\" }\ncount = \"integer\"")
        .replace("output = \"answer\"", "output = \"answer\"\n\n[[nodes]]\nname = \"orphan\"\nmodel = \"default\"\nprompt = \"x\"\noutput = \"count\"");
    let err = blueprint::compile(&bad, "review.toml").unwrap_err();
    let text = err.to_string();
    let messages: Vec<&str> = err.items.iter().map(|d| d.message.as_str()).collect();
    assert!(messages.iter().any(|m| m.contains("unknown node `aprove` in an edge")), "{text}");
    assert!(messages.iter().any(|m| m.contains("`prompt` reads unknown channel `nots`")), "{text}");
    assert!(
        messages.iter().any(|m| m.contains("a model node writes text, but channel `count` holds an integer")),
        "{text}"
    );
    assert!(text.contains("help: did you mean `approve`?"), "{text}");
    // The template's unknown channel is pointed at exactly.
    let line = bad.lines().position(|l| l.contains("{nots}")).unwrap() + 1;
    let column = bad.lines().nth(line - 1).unwrap().find("{nots}").unwrap() + 1;
    assert!(text.contains(&format!("review.toml:{line}:{column}")), "{text}");
    assert!(text.contains("^^^^^^"), "{text}");
}

#[test]
fn unreachable_nodes_and_endless_cycles_are_found() {
    let bad = r#"
name = "g"
[state]
x = "string"
[[nodes]]
name = "a"
ask = "?"
output = "x"
[[nodes]]
name = "b"
ask = "?"
output = "x"
[[nodes]]
name = "lost"
ask = "?"
output = "x"
[[edges]]
from = "START"
to = "a"
[[edges]]
from = "a"
to = "b"
[[edges]]
from = "b"
to = "a"
"#;
    let err = blueprint::compile(bad, "g.toml").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("node `lost` is unreachable"), "{text}");
    assert!(text.contains("the cycle a → b → a has no exit condition"), "{text}");
    assert!(text.contains("g.toml:14:8"), "{text}");
}

#[test]
fn a_condition_on_the_wrong_type_and_bad_node_shapes_are_errors() {
    let bad = r#"
name = "g"
[state]
ok = "boolean"
[[nodes]]
name = "a"
model = "default"
agent = "helper"
[[nodes]]
name = "b"
tool = "read_file"
prompt = "not for tools"
output = "ok"
[[edges]]
from = "START"
to = ["a", "b"]
[[edges]]
from = "b"
to = "END"
when = { channel = "ok", contains = "yes" }
"#;
    let err = blueprint::compile(bad, "g.toml").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("names more than one capability (also `agent`)"), "{text}");
    assert!(text.contains("`prompt` does not apply to a tool node"), "{text}");
    assert!(text.contains("does not work on channel `ok`, which holds a boolean"), "{text}");
    assert!(text.contains("a tool node writes text, but channel `ok` holds a boolean"), "{text}");
}

#[test]
fn a_comparison_that_can_never_hold_is_an_error() {
    let bad = r#"
name = "g"
[state]
n = "integer"
text = "string"
[[nodes]]
name = "a"
ask = "?"
output = "n"
[[edges]]
from = "START"
to = "a"
[[edges]]
from = "a"
to = "END"
when = { channel = "n", equals = "yes" }
[[edges]]
from = "a"
to = "a"
when = { channel = "text", not_equals = 3 }
"#;
    let err = blueprint::compile(bad, "g.toml").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("does not work on channel `n`, which holds an integer"), "{text}");
    assert!(text.contains("does not work on channel `text`, which holds a string"), "{text}");
    let fine = bad.replace("equals = \"yes\"", "equals = 3").replace("not_equals = 3", "not_equals = \"done\"");
    blueprint::compile(&fine, "g.toml").unwrap();
}

#[test]
fn unreachable_nodes_are_found_even_when_an_edge_names_an_unknown_node() {
    let bad = r#"
name = "g"
[state]
x = "string"
[[nodes]]
name = "a"
ask = "?"
output = "x"
[[nodes]]
name = "lost"
ask = "?"
output = "x"
[[edges]]
from = "START"
to = "a"
[[edges]]
from = "a"
to = "ghost"
"#;
    let text = blueprint::compile(bad, "g.toml").unwrap_err().to_string();
    assert!(text.contains("unknown node `ghost`"), "{text}");
    assert!(text.contains("node `lost` is unreachable"), "{text}");
}

#[test]
fn columns_are_exact_after_escapes_in_a_template() {
    for (prompt, shown) in [
        (r#""line one\nline two \"quoted\" {nope}""#, "{nope}"),
        (r#""caf\u00e9 {nope}""#, "{nope}"),
        ("\"\"\"\nfirst \\\n   second {nope}\"\"\"", "{nope}"),
        (r#"'raw \n stays {nope}'"#, "{nope}"),
    ] {
        let bp = format!(
            "name = \"g\"\n[state]\nx = \"string\"\n[[nodes]]\nname = \"a\"\nmodel = \"default\"\nprompt = {prompt}\noutput = \"x\"\n[[edges]]\nfrom = \"START\"\nto = \"a\"\n"
        );
        let err = blueprint::compile(&bp, "g.toml").unwrap_err();
        let d = err.items.iter().find(|d| d.message.contains("unknown channel `nope`")).unwrap();
        assert_eq!(&bp[d.span.clone()], shown, "{prompt}: {err}");
    }
}

#[test]
fn a_long_chain_and_a_long_cycle_are_checked_without_recursion() {
    let n = 20_000;
    let mut bp = String::from("name = \"g\"\n[state]\nx = \"string\"\n");
    for i in 0..n {
        bp.push_str(&format!("[[nodes]]\nname = \"n{i}\"\nask = \"?\"\noutput = \"x\"\n"));
    }
    bp.push_str("[[edges]]\nfrom = \"START\"\nto = \"n0\"\n");
    for i in 0..n - 1 {
        bp.push_str(&format!("[[edges]]\nfrom = \"n{i}\"\nto = \"n{}\"\n", i + 1));
    }
    let closed = format!("{bp}[[edges]]\nfrom = \"n{}\"\nto = \"n0\"\n", n - 1);
    bp.push_str(&format!("[[edges]]\nfrom = \"n{}\"\nto = \"END\"\n", n - 1));
    assert_eq!(blueprint::compile(&bp, "g.toml").unwrap().nodes.len(), n);
    let text = blueprint::compile(&closed, "g.toml").unwrap_err().to_string();
    assert!(text.contains("has no exit condition"), "{text}");
    assert_eq!(text.matches("has no exit condition").count(), 1, "one cycle, reported once");
}

#[test]
fn a_toml_error_is_located() {
    let err = blueprint::compile("name = \"g\"\n[[nodes]\nname = 1\n", "g.toml").unwrap_err();
    assert_eq!(err.items.len(), 1);
    assert!(err.to_string().contains("g.toml:2:"), "{err}");
}

#[test]
fn binding_refuses_what_the_allowlist_does_not_name_before_anything_runs() {
    let provider = Arc::new(MockProvider::new([]));
    let text = REVIEW.replace("model = \"default\"\nprompt = \"Say", "model = \"gpt-9\"\nprompt = \"Say").replace(
        "[[edges]]\nfrom = \"START\"",
        "[[nodes]]\nname = \"shell\"\ntool = \"run_shell\"\nargs = { command = \"rm -rf {topic}\" }\noutput = \"draft\"\n\n[[edges]]\nfrom = \"draft\"\nto = \"shell\"\n\n[[edges]]\nfrom = \"START\"",
    );
    let err = blueprint::load(&source(&text), &allow(provider.clone())).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("model `gpt-9` is not allowed"), "{text}");
    assert!(text.contains("allowed models: default"), "{text}");
    assert!(text.contains("tool `run_shell` is not allowed"), "{text}");
    assert_eq!(provider.request_count(), 0);
}

#[test]
fn a_sub_graph_that_contains_itself_is_refused() {
    let looped = r#"
name = "outer"
[[nodes]]
name = "again"
graph = "outer"
[[edges]]
from = "START"
to = "again"
"#;
    let allow = Allowlist::new().graph("outer", Source { origin: "outer.toml".into(), text: looped.into() });
    let err = blueprint::load(&Source { origin: "outer.toml".into(), text: looped.into() }, &allow).unwrap_err();
    assert!(err.to_string().contains("graph `outer` contains itself"), "{err}");
}

#[test]
fn map_in_and_map_out_must_name_channels_the_sub_graph_declares() {
    let inner = "name = \"inner\"\n[state]\ntext = \"string\"\n[[nodes]]\nname = \"a\"\nask = \"?\"\noutput = \"text\"\n[[edges]]\nfrom = \"START\"\nto = \"a\"\n";
    let outer = |maps: &str| {
        format!(
            "name = \"outer\"\n[state]\ndoc = \"string\"\n[[nodes]]\nname = \"inner\"\ngraph = \"inner\"\n{maps}\n[[edges]]\nfrom = \"START\"\nto = \"inner\"\n"
        )
    };
    let allow = Allowlist::new().graph("inner", Source { origin: "inner.toml".into(), text: inner.into() });
    let load = |maps: &str| blueprint::load(&Source { origin: "outer.toml".into(), text: outer(maps) }, &allow);
    assert!(load("map_in = { text = \"doc\" }\nmap_out = { doc = \"text\" }").is_ok());
    let err = load("map_in = { txt = \"doc\" }").unwrap_err().to_string();
    assert!(err.contains("`map_in` writes `txt`, which the sub-graph does not declare"), "{err}");
    assert!(err.contains("outer.toml:7:"), "pointed at the parent's map: {err}");
    let err = load("map_out = { doc = \"summary\" }").unwrap_err().to_string();
    assert!(err.contains("`map_out` reads `summary`"), "{err}");
}

#[test]
fn formatting_is_canonical_and_round_trips() {
    let once = blueprint::format(REVIEW, "review.toml").unwrap();
    let twice = blueprint::format(&once, "review.toml").unwrap();
    assert_eq!(once, twice);
    let a = serde_json::to_value(blueprint::parse(REVIEW, "a").unwrap()).unwrap();
    let b = serde_json::to_value(blueprint::parse(&once, "b").unwrap()).unwrap();
    assert_eq!(a, b);
    blueprint::compile(&once, "formatted").unwrap();
}

#[test]
fn the_json_schema_accepts_the_example_and_rejects_an_unknown_field() {
    let schema = blueprint::schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let as_json = serde_json::to_value(blueprint::parse(REVIEW, "r").unwrap()).unwrap();
    assert!(
        validator.is_valid(&as_json),
        "{:?}",
        validator.iter_errors(&as_json).map(|e| e.to_string()).collect::<Vec<_>>()
    );
    let mut bad = as_json.clone();
    bad["nodes"][0]["temperature"] = json!(0.2);
    assert!(!validator.is_valid(&bad));
    assert!(
        blueprint::parse(&REVIEW.replace("output = \"draft\"", "output = \"draft\"\ntemperature = 0.2"), "r").is_err()
    );
}

#[test]
fn the_mermaid_diagram_shows_nodes_conditions_and_otherwise_edges() {
    let m = blueprint::mermaid(&blueprint::parse(REVIEW, "r").unwrap());
    assert!(m.starts_with("flowchart TD\n"), "{m}");
    assert!(m.contains("n_approve -- \"answer = #quot;yes#quot;\" --> END"), "{m}");
    assert!(m.contains("n_approve -. otherwise .-> n_note"), "{m}");
    assert!(m.contains("START --> n_draft"), "{m}");
}

#[tokio::test]
async fn a_bound_blueprint_runs_asks_and_loops_until_approved() {
    let provider = Arc::new(MockProvider::new([
        MockReply::text("Tides rise."),
        MockReply::text("Say why."),
        MockReply::text("Tides rise because the moon pulls."),
    ]));
    let graph = blueprint::load(&source(REVIEW), &allow(provider.clone())).unwrap();
    let thread = Thread::new(Arc::new(MemoryCheckpointer::new()), "t");
    let scope = RunScope::detached("graph");
    let out = graph.run(Start::Input(json!({"topic": "tides"})), &thread, &scope).await.unwrap();
    assert!(matches!(out.finish, Finish::Interrupted(_)));
    let out = graph.run(Start::Resume(Some(json!("no"))), &thread, &scope).await.unwrap();
    let Finish::Interrupted(i) = &out.finish else { panic!("{:?}", out.finish) };
    assert_eq!(i.payload["question"], "Publish this? Tides rise because the moon pulls.");
    let out = graph.run(Start::Resume(Some(json!("yes"))), &thread, &scope).await.unwrap();
    assert_eq!(out.finish, Finish::Done);
    assert_eq!(out.state["notes"], json!(["Say why."]));
    let second_prompt = provider.requests()[2].messages[0].content.clone();
    assert_eq!(second_prompt, "Write one sentence about tides. Notes so far: [\"Say why.\"]");
}

#[test]
fn the_sub_graphs_a_blueprint_reaches_are_found_through_every_level() {
    let graph_node = |name: &str, sub: &str| {
        format!(
            "name = \"{name}\"\n[state]\nx = \"string\"\n[[nodes]]\nname = \"n\"\ngraph = \"{sub}\"\n[[edges]]\nfrom = \"START\"\nto = \"n\"\n"
        )
    };
    let leaf = "name = \"leaf\"\n[state]\nx = \"string\"\n[[nodes]]\nname = \"n\"\nask = \"?\"\noutput = \"x\"\n[[edges]]\nfrom = \"START\"\nto = \"n\"\n";
    let src = |origin: &str, text: &str| Source { origin: origin.into(), text: text.into() };
    let allow = Allowlist::new()
        .graph("middle", src("middle.toml", &graph_node("middle", "leaf")))
        .graph("leaf", src("leaf.toml", leaf))
        .graph("unused", src("unused.toml", leaf));
    let top = src("top.toml", &graph_node("top", "middle"));
    let reached = allow.reachable_graphs(&top);
    assert_eq!(reached.keys().collect::<Vec<_>>(), ["leaf", "middle"]);
    assert_eq!(reached["leaf"], src("leaf.toml", leaf));
    // Bound from what was reached alone, the blueprint needs nothing else.
    let pinned = reached.into_iter().fold(Allowlist::new(), |a, (name, s)| a.graph(name, s));
    assert!(blueprint::load(&top, &pinned).is_ok());
}

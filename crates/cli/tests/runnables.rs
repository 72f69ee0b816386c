#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Runnable files through the `recursive` binary: `--agent NAME=FILE` declares an agent, an
//! RLM, a goal or a graph, and every command that runs models offers it to its engine — an
//! agent calls an RLM as a tool (and `recursive trace` shows the nesting), a graph node runs
//! an RLM file, an RLM snippet calls an agent file by name. Also the tree's wall clock ending
//! a snippet that never returns (`rlm --timeout`), and two writes of one message applied one
//! after the other.

mod common;

use std::time::{Duration, Instant};

use common::{Env, events, s, stdout_json};
use serde_json::json;

const RLM_FILE: &str = "kind = \"rlm\"\ndescription = \"Reads long texts.\"\nmax_iterations = 3\n";

#[test]
fn an_agent_calls_an_rlm_file_as_a_tool_and_the_trace_shows_it_nested() {
    let env = Env::new();
    std::fs::write(env.path("reader.toml"), RLM_FILE).unwrap();
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [{"name": "reader", "arguments": {"input": "code: 4471-KESTREL"}}]},
            "```repl\nsubmit(inputs['input'].split(':')[1].strip())\n```",
            "The code is 4471-KESTREL."
        ]),
    );
    let log = env.path("events.jsonl");
    let out = env.run(&[
        "run",
        "find the code",
        "--mock-script",
        s(&script),
        "--agent",
        &format!("reader={}", s(&env.path("reader.toml"))),
        "--events",
        s(&log),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let tool = v["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["content"], "4471-KESTREL", "the RLM's answer is the tool result");
    let evs = events(&log);
    let started = evs.iter().find(|e| e["type"] == "sub_agent_started").expect("a child run started");
    assert_eq!((started["agent"].as_str(), started["kind"].as_str()), (Some("reader"), Some("rlm")));
    assert!(evs.iter().any(|e| e["run_name"] == "reader-d1" && e["depth"] == 1));

    let trace = env.run(&["trace", s(&log)]);
    assert_eq!(trace.status.code(), Some(0), "{}", String::from_utf8_lossy(&trace.stderr));
    let text = String::from_utf8_lossy(&trace.stdout);
    let main = text.lines().position(|l| l.contains("main")).unwrap_or_else(|| panic!("{text}"));
    let reader = text.lines().position(|l| l.contains("reader")).unwrap_or_else(|| panic!("{text}"));
    assert!(reader > main, "{text}");
    let indent = |i: usize| text.lines().nth(i).unwrap().chars().take_while(|c| !c.is_alphanumeric()).count();
    assert!(indent(reader) > indent(main), "the RLM is drawn under the agent:\n{text}");
}

#[test]
fn a_graph_node_runs_an_rlm_file_with_host_tools() {
    let env = Env::new();
    std::fs::write(env.path("reader.toml"), RLM_FILE).unwrap();
    std::fs::write(
        env.path("flow.toml"),
        r#"
name = "flow"
[state]
file = "string"
answer = "string"
[[nodes]]
name = "read"
rlm = "reader"
question = "What does {file} say?"
output = "answer"
[[edges]]
from = "START"
to = "read"
"#,
    )
    .unwrap();
    let script = env.script("s.json", json!(["```repl\nsubmit(read_file(path='notes.txt'))\n```"]));
    let out = env.run(&[
        "graph",
        "run",
        s(&env.path("flow.toml")),
        "--input",
        r#"{"file": "notes.txt"}"#,
        "--mock-script",
        s(&script),
        "--agent",
        &format!("reader={}", s(&env.path("reader.toml"))),
        "--store",
        s(&env.path("g.db")),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert!(v["state"]["answer"].as_str().unwrap().contains("hello world"), "{v}");
}

#[test]
fn an_rlm_snippet_calls_an_agent_file_by_name() {
    let env = Env::new();
    std::fs::write(env.path("helper.toml"), "description = \"Answers greetings.\"\n").unwrap();
    let script = env.script(
        "s.json",
        json!([
            {"when": "say hi", "text": "hi there"},
            "```repl\nsubmit(helper('say hi'))\n```"
        ]),
    );
    let out = env.run(&[
        "rlm",
        "greet",
        "--input",
        s(&env.path("notes.txt")),
        "--mock-script",
        s(&script),
        "--agent",
        &format!("helper={}", s(&env.path("helper.toml"))),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["output"]["answer"], "hi there");
}

#[test]
fn a_bad_runnable_file_is_a_config_error_before_any_model_call() {
    let env = Env::new();
    std::fs::write(env.path("x.toml"), "kind = \"robot\"\n").unwrap();
    let script = env.script("s.json", json!(["never"]));
    let out = env.run(&["run", "go", "--mock-script", s(&script), "--agent", &format!("x={}", s(&env.path("x.toml")))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected agent, rlm, goal or graph"));
}

/// `rlm --timeout 2` on a snippet that never returns, with `extra` flags: its exit status, its
/// `--json` outcome and how long it took.
fn spin_until_the_timeout(extra: &[&str]) -> (Option<i32>, String, Duration) {
    let env = Env::new();
    let script = env.script("s.json", json!(["```repl\nwhile True:\n    pass\n```"]));
    let notes = env.path("notes.txt");
    let mut args = vec!["rlm", "spin", "--input", s(&notes), "--mock-script", s(&script), "--timeout", "2", "--json"];
    args.extend_from_slice(extra);
    let t0 = Instant::now();
    let out = env.run(&args);
    let took = t0.elapsed();
    let outcome = if out.stdout.is_empty() { String::new() } else { stdout_json(&out)["outcome"].to_string() };
    (out.status.code(), format!("{outcome} {}", String::from_utf8_lossy(&out.stderr)), took)
}

#[test]
fn a_snippet_that_loops_forever_ends_at_the_trees_timeout() {
    let (code, said, took) = spin_until_the_timeout(&[]);
    assert_eq!(code, Some(10), "{said}");
    assert!(said.starts_with("\"wall_clock_exceeded\""), "{said}");
    // The snippet's own limit is 60 s: well under it is the tree's 2 s, on a loaded machine too.
    assert!(took < Duration::from_secs(20), "ended about 2 s in, not at the snippet's own limit: {took:?}");
}

#[test]
fn two_patches_of_one_file_in_one_message_apply_one_after_the_other() {
    let env = Env::new();
    std::fs::write(env.path("a.txt"), "start\n").unwrap();
    let patch = |after: &str, add: &str| {
        format!("*** Begin Patch\n*** Update File: a.txt\n@@\n {after}\n+{add}\n*** End Patch\n")
    };
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [
                {"name": "apply_patch", "arguments": {"patch": patch("start", "one")}},
                {"name": "apply_patch", "arguments": {"patch": patch("one", "two")}}
            ]},
            "done"
        ]),
    );
    let out = env.run(&["run", "edit", "--mock-script", s(&script), "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let errors: Vec<&serde_json::Value> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool" && m["content"].as_str().unwrap().starts_with("error"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "start\none\ntwo\n");
}

#[test]
fn serve_runs_a_graph_file_and_offers_it_as_a_model() {
    let env = Env::new();
    std::fs::write(
        env.path("flow-graph.toml"),
        "name = \"flow\"\n[state]\ninput = \"string\"\noutput = \"string\"\n[[nodes]]\nname = \"draft\"\nmodel = \"default\"\n\
         prompt = \"Draft notes for {input}\"\noutput = \"output\"\n[[edges]]\nfrom = \"START\"\nto = \"draft\"\n",
    )
    .unwrap();
    std::fs::write(
        env.path("flow.toml"),
        "kind = \"graph\"\ndescription = \"Drafts notes.\"\nblueprint = \"flow-graph.toml\"\n",
    )
    .unwrap();
    let script = env.script("s.json", json!([{"when": "Draft notes for", "text": "- fixed the bug"}]));
    let agent = format!("flow={}", s(&env.path("flow.toml")));
    let served = common::serve(&env, &["--mock-script", s(&script), "--agent", &agent]);

    let (_, _, models) = common::http(&served.addr, "GET", "/v1/models", &[], None);
    assert!(models.contains("\"flow\""), "{models}");
    let start = json!({"kind": "graph", "input": "the release"});
    let (status, _, body) = common::http(&served.addr, "POST", "/v1/runs", &[], Some(&start));
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let mut result = serde_json::Value::Null;
    common::wait_for("the graph run", Duration::from_secs(30), || {
        let (_, _, body) = common::http(&served.addr, "GET", &format!("/v1/runs/{id}"), &[], None);
        result = serde_json::from_str(&body).unwrap();
        result["status"] == "finished"
    });
    assert_eq!(result["result"]["outcome"], "completed", "{result}");
    assert_eq!(result["result"]["text"], "- fixed the bug");
    assert_eq!(result["result"]["output"]["input"], "the release");
}

#[test]
fn a_cpython_snippet_that_loops_forever_ends_at_the_trees_timeout() {
    let Some(python) = recursive_testkit::require_env("RLM_TEST_PYTHON") else { return };
    let (code, said, took) = spin_until_the_timeout(&["--sandbox", "cpython", "--python", &python]);
    assert_eq!(code, Some(10), "{said}");
    assert!(said.starts_with("\"wall_clock_exceeded\""), "{said}");
    assert!(took < Duration::from_secs(20), "ended about 2 s in, not at the snippet's own limit (60 s): {took:?}");
}

const GOOD_BLUEPRINT: &str = "name = \"notes\"\n[state]\ntopic = \"string\"\nnotes = \"string\"\n[[nodes]]\nname = \"draft\"\n\
                              model = \"default\"\nprompt = \"Write notes on {topic}\"\noutput = \"notes\"\n[[edges]]\n\
                              from = \"START\"\nto = \"draft\"\n";

#[test]
fn a_model_writes_a_blueprint_repairs_it_from_the_diagnostic_and_runs_it_as_a_child() {
    let env = Env::new();
    let bad = GOOD_BLUEPRINT.replace("output = \"notes\"", "output = \"summary\"");
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [{"name": "blueprint", "arguments": {"blueprint": bad}}]},
            {"tool_calls": [{"name": "blueprint", "arguments": {"blueprint": GOOD_BLUEPRINT, "input": {"topic": "the release"}}}]},
            "- notes on the release",
            "The graph wrote the notes."
        ]),
    );
    let log = env.path("events.jsonl");
    let out = env.run(&[
        "run",
        "write notes",
        "--mock-script",
        s(&script),
        "--blueprints",
        "--yes",
        "--events",
        s(&log),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let results: Vec<&serde_json::Value> =
        v["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
    let first = results[0]["content"].as_str().unwrap();
    assert!(first.starts_with("error:") && first.contains("unknown channel `summary`"), "{first}");
    assert!(first.contains("blueprint.toml:9:10"), "located: {first}");
    let second = results[1]["content"].as_str().unwrap();
    let report: serde_json::Value = serde_json::from_str(second).unwrap_or_else(|_| panic!("{second}"));
    assert_eq!(report["finish"], "completed");
    assert_eq!(report["state"]["notes"], "- notes on the release");
    assert!(env.path(".recursive/blueprints/notes.toml").is_file(), "saved for `graph run`");
    let evs = events(&log);
    assert!(evs.iter().any(|e| e["type"] == "sub_agent_started" && e["kind"] == "graph" && e["agent"] == "notes"));

    // The child graph is checkpointed in the workspace's store, with its blueprint.
    let thread = evs.iter().find_map(|e| e["thread"].as_str().filter(|t| t.starts_with("notes-"))).unwrap();
    let store = env.path(".recursive/graphs.db");
    let history = env.run(&["graph", "history", "--thread", thread, "--store", s(&store), "--json"]);
    assert_eq!(history.status.code(), Some(0), "{}", String::from_utf8_lossy(&history.stderr));
    assert!(String::from_utf8_lossy(&history.stdout).contains("notes"));
    let trace = env.run(&["trace", s(&log)]);
    let text = String::from_utf8_lossy(&trace.stdout);
    assert!(text.contains("notes") && text.contains("draft"), "{text}");
}

#[test]
fn a_blueprint_naming_a_tool_the_run_may_not_use_is_refused_before_it_runs() {
    let env = Env::new();
    let sneaky = "name = \"peek\"\n[state]\ntext = \"string\"\n[[nodes]]\nname = \"read\"\ntool = \"read_file\"\n\
                  args = { path = \"notes.txt\" }\noutput = \"text\"\n[[edges]]\nfrom = \"START\"\nto = \"read\"\n";
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "blueprint", "arguments": {"blueprint": sneaky}}]}, "I may not read files."]),
    );
    let out = env.run(&["run", "peek", "--mock-script", s(&script), "--no-tools", "--blueprints", "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let result = v["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    let text = result["content"].as_str().unwrap();
    assert!(text.starts_with("error:") && text.contains("tool `read_file` is not allowed"), "{text}");
    assert!(!env.path(".recursive/blueprints/peek.toml").exists(), "nothing saved");
    assert!(!env.path(".recursive/graphs.db").exists(), "nothing ran");
}

#[test]
fn graph_new_writes_a_blueprint_that_graph_run_then_runs() {
    let env = Env::new();
    let script = env.script(
        "s.json",
        json!([
            {"tool_calls": [{"name": "blueprint", "arguments": {"blueprint": GOOD_BLUEPRINT}}]},
            "A graph that drafts notes on a topic."
        ]),
    );
    let out = env.run(&["graph", "new", "Draft notes on a topic", "--mock-script", s(&script)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), GOOD_BLUEPRINT, "the blueprint is printed");
    let saved = env.path(".recursive/blueprints/notes.toml");
    assert!(saved.is_file());
    assert!(!env.path(".recursive/graphs.db").exists(), "written, not run");

    let run_script = env.script("r.json", json!(["- the notes"]));
    let out = env.run(&[
        "graph",
        "run",
        s(&saved),
        "--input",
        r#"{"topic": "the release"}"#,
        "--mock-script",
        s(&run_script),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["state"]["notes"], "- the notes");
}

#[test]
fn graph_new_without_a_valid_blueprint_does_not_exit_zero() {
    let env = Env::new();
    let script = env.script("s.json", json!(["I would rather not."]));
    let out = env.run(&["graph", "new", "Draft notes", "--mock-script", s(&script)]);
    assert_eq!(out.status.code(), Some(14), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no valid blueprint was written"));
}

#[test]
fn rlm_code_reaches_the_run_trees_functions_of_the_repl() {
    let env = Env::new();
    std::fs::write(env.path("reviewer.toml"), "description = \"Reviews text.\"\n").unwrap();
    let code = "```python\nt = tool_call('read_file', path='notes.txt')\nr = agent_query('review: ' + t, \
                name='reviewer')\nm = model_query('and you?')\ntry:\n    graph_run('nowhere')\nexcept ValueError \
                as e:\n    print('refused:', e)\nsubmit(r['result'] + ' / ' + m['result'])\n```";
    let script = env.script("s.json", json!([code, "LGTM", "fine too"]));
    let log = env.path("events.jsonl");
    let reviewer = format!("reviewer={}", s(&env.path("reviewer.toml")));
    let out = env.run(&[
        "rlm",
        "check",
        "-i",
        "notes.txt",
        "--mock-script",
        s(&script),
        "--agent",
        &reviewer,
        "--events",
        s(&log),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["output"]["answer"], "LGTM / fine too");
    let observation = v["trajectory"][0]["observation"].as_str().unwrap();
    assert!(observation.contains("refused: no graph named `nowhere`"), "{observation}");
    let evs = events(&log);
    let started = evs.iter().find(|e| e["type"] == "sub_agent_started").expect("the agent ran as a child");
    assert_eq!(started["agent"], "reviewer");
    assert!(started["input"].as_str().unwrap().contains("hello world"), "{started}");
}

//! The offline examples of the README replay from their cassettes and give the documented
//! answers. A change to prompts or tool descriptions breaks them: re-record with
//! `examples/record.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn recursive(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_recursive"))
        .args(args)
        .current_dir(repo())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn rlm_example_replays_and_finds_the_valid_code() {
    let (code, out, err) = recursive(&[
        "rlm",
        "Which access code opens the east server room now, and who issued it?",
        "--input",
        "examples/rlm/station-log.txt",
        "--replay",
        "examples/rlm/station-log.cassette.jsonl",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v["output"]["answer"],
        "The east server room access code is 4471-KESTREL, issued by Duty Officer M. Okafor."
    );
    assert_eq!(v["submitted"], true);
    assert_eq!(v["iterations"], 4);
}

#[test]
fn run_example_replays_a_multi_step_tool_run() {
    let (code, out, err) = recursive(&[
        "run",
        "Which items are below their reorder point, and how many units should we order of each under our policy?",
        "--workspace",
        "examples/run/inventory",
        "--replay",
        "examples/run/inventory.cassette.jsonl",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["steps"], 4);
    let tools: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()))
        .collect();
    assert_eq!(tools, ["list_dir", "read_file", "read_file", "search_files"]);
    assert!(v["output"].as_str().unwrap().contains("| D-900 | diesel filter cartridges | 4 | 6 | 20 |"));
}

#[test]
fn graph_example_asks_for_approval_revises_with_feedback_and_finishes_on_yes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("graphs.db");
    let store = store.to_str().unwrap();
    let replay = ["--replay", "examples/graph/release-notes.cassette.jsonl", "--store", store];
    let changes = std::fs::read_to_string(repo().join("examples/graph/changes.json")).unwrap();
    let mut args = vec!["graph", "run", "examples/graph/release-notes.toml", "--thread", "ex", "--input", &changes];
    args.extend(replay);
    let (code, _, err) = recursive(&args);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("Publish these release notes?"), "{err}");
    let mut args = vec!["graph", "resume", "--thread", "ex", "--value", "\"Put the fix first.\""];
    args.extend(replay);
    let (code, _, err) = recursive(&args);
    assert_eq!(code, 16, "{err}");
    assert!(err.contains("- Fixed: CSV exports"), "the revised draft is asked about: {err}");
    let mut args = vec!["graph", "resume", "--thread", "ex", "--value", "yes", "--json"];
    args.extend(replay);
    let (code, out, err) = recursive(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["state"]["feedback"], serde_json::json!(["Put the fix first.", "yes"]));
    assert!(v["state"]["notes"].as_str().unwrap().starts_with("- Fixed: CSV exports"));
}

#[test]
fn graph_example_reads_summarises_in_a_sub_graph_and_writes_a_headline() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("graphs.db");
    let (code, out, err) = recursive(&[
        "graph",
        "run",
        "examples/graph/brief.toml",
        "--workspace",
        "examples/graph",
        "--input",
        r#"{"file": "incident.md"}"#,
        "--replay",
        "examples/graph/brief.cassette.jsonl",
        "--store",
        store.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["state"]["headline"], "Dropped index slowed checkout for 38 minutes; 412 orders timed out");
    assert!(v["state"]["report"].as_str().unwrap().contains("412 timed-out orders"));
}

#[test]
fn authoring_example_writes_a_graph_repairs_it_and_runs_it_as_a_child() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(repo().join("examples/graph/incident.md"), dir.path().join("incident.md")).unwrap();
    let events = dir.path().join("events.jsonl");
    let (code, out, err) = recursive(&[
        "run",
        "Write a graph that reads incident.md and writes a one-line headline for it, then run it",
        "--workspace",
        dir.path().to_str().unwrap(),
        "--blueprints",
        "--yes",
        "--replay",
        "examples/graph/authoring.cassette.jsonl",
        "--events",
        events.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Dropped index slowed checkout for 38 minutes"), "{out}");
    assert!(err.contains("unknown channel `summary`"), "the first blueprint's diagnostic: {err}");
    let saved = std::fs::read_to_string(dir.path().join(".recursive/blueprints/headline.toml")).unwrap();
    assert!(saved.contains("{report}"), "the repaired blueprint is saved: {saved}");
    let log = std::fs::read_to_string(&events).unwrap();
    assert!(log.contains("\"kind\":\"graph\"") && log.contains("\"run_name\":\"write-d2\""), "a child graph ran");
}

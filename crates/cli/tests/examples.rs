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

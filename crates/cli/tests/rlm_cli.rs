#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `recursive rlm` options end to end: dialects, instructions, sandbox tools (built-in and from
//! a real MCP server), concurrency and the `[rlm]` table, driven by scripted model replies.

mod common;

use common::{Env, s, stdout_json};
use serde_json::json;

fn doc(env: &Env) -> String {
    std::fs::write(env.path("doc.txt"), "alpha beta gamma\n").unwrap();
    "doc.txt".to_string()
}

#[test]
fn rlm_dialect_finishes_with_final_var_written_in_the_reply() {
    let env = Env::new();
    let input = doc(&env);
    let script =
        env.script("s.json", json!(["```python\nfirst = context.split()[0]\nprint(first)\n```\nFINAL_VAR(first)"]));
    let out = env.run(&["rlm", "q", "--input", &input, "--mock-script", s(&script), "--dialect", "rlm", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout_json(&out)["output"], json!({"answer": "alpha"}));
}

#[test]
fn unknown_dialect_and_bad_concurrency_are_usage_errors() {
    let env = Env::new();
    let input = doc(&env);
    for extra in [["--dialect", "lisp"], ["--concurrency", "0"]] {
        let mut args = vec!["rlm", "q", "--input", input.as_str(), "--provider", "mock"];
        args.extend(extra);
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = env.run(&["rlm", "q", "--input", &input, "--provider", "mock", "--dialect", "lisp"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("recursive, rlm, dspy"));
}

#[test]
fn instructions_file_replaces_the_working_rules_in_the_request() {
    let env = Env::new();
    let input = doc(&env);
    std::fs::write(env.path("rules.md"), "RULES-MARKER: always count words first.").unwrap();
    let script = env.script("s.json", json!(["```python\nsubmit('x')\n```"]));
    let cassette = env.path("c.jsonl");
    let out = env.run(&[
        "rlm",
        "q",
        "--input",
        &input,
        "--mock-script",
        s(&script),
        "--instructions",
        "rules.md",
        "--record",
        s(&cassette),
        "-q",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded = std::fs::read_to_string(&cassette).unwrap();
    assert!(recorded.contains("RULES-MARKER"), "the instructions were not sent");
    assert!(!recorded.contains("Explore before you slice"), "the default rules were still sent");
}

#[test]
fn sandbox_tools_default_to_read_only_without_web_fetch_and_tool_adds_one() {
    let env = Env::new();
    let input = doc(&env);
    let probe = "```python\ntry:\n    web_fetch\n    print('web_fetch: yes')\nexcept NameError:\n    print('web_fetch: no')\nsubmit(read_file('notes.txt'))\n```";
    let script = env.script("s.json", json!([probe]));
    let out = env.run(&["rlm", "q", "--input", &input, "--mock-script", s(&script), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert!(v["trajectory"][0]["snippets"][0]["observation"].as_str().unwrap().contains("web_fetch: no"));
    assert!(v["output"]["answer"].as_str().unwrap().contains("hello world"));

    let script = env.script("t.json", json!([probe.replace("submit(read_file('notes.txt'))", "submit('done')")]));
    let out = env.run(&["rlm", "q", "--input", &input, "--mock-script", s(&script), "--tool", "web_fetch", "--json"]);
    let v = stdout_json(&out);
    assert!(v["trajectory"][0]["snippets"][0]["observation"].as_str().unwrap().contains("web_fetch: yes"), "{v}");
}

#[test]
fn unknown_tool_is_a_usage_error_naming_the_available_ones() {
    let env = Env::new();
    let input = doc(&env);
    let out = env.run(&["rlm", "q", "--input", &input, "--provider", "mock", "--tool", "read_file", "--tool", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tool nope") && err.contains("read_file"), "{err}");
}

#[test]
fn a_real_mcp_servers_tool_runs_in_the_sandbox() {
    let Some(entry) = recursive_testkit::require_env("MCP_EVERYTHING_SERVER") else { return };
    let env = Env::new();
    let input = doc(&env);
    std::fs::write(
        env.path("recursive.toml"),
        format!("[mcp.servers.everything]\ncommand = \"node\"\nargs = [{:?}]\nstartup_timeout_secs = 60\n", entry),
    )
    .unwrap();
    let script = env.script(
        "s.json",
        json!(["```python\nr = everything__echo(message='hi from the sandbox')\nprint(r)\nsubmit(r)\n```"]),
    );
    let base = ["rlm", "q", "--input", input.as_str(), "--mock-script", s(&script), "--tool", "everything__echo"];
    // Through the permission rules: an MCP tool asks, and with no terminal that is a denial.
    let out = env.run(&[&base[..], &["--json"]].concat());
    let v = stdout_json(&out);
    let first = v["trajectory"][0]["snippets"][0]["observation"].as_str().unwrap();
    assert!(first.contains("permission denied"), "{first}");
    let out = env.run(&[&base[..], &["--yes", "--json"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert!(v["output"]["answer"].as_str().unwrap().contains("hi from the sandbox"), "{v}");
}

#[test]
fn the_rlm_table_sets_defaults_and_flags_win() {
    let env = Env::new();
    let input = doc(&env);
    std::fs::write(env.path("recursive.toml"), "[rlm]\nmemory_limit_mib = 64\ndialect = \"rlm\"\n").unwrap();
    let script = env.script(
        "s.json",
        json!([
            "```python\nwords = ('a ' * 30_000_000).split()\n```",
            "```python\nr = llm_query('x')\nprint(type(r).__name__)\nFINAL('ok')\n```"
        ]),
    );
    let out = env.run(&["rlm", "q", "--input", &input, "--mock-script", s(&script), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let first = v["trajectory"][0]["snippets"][0]["observation"].as_str().unwrap();
    assert!(first.contains("64.0 MiB"), "{first}");
    assert!(v["trajectory"][1]["snippets"][0]["observation"].as_str().unwrap().contains("str"), "{v}");

    std::fs::write(env.path("recursive.toml"), "[rlm]\nconcurrency = 0\n").unwrap();
    let out = env.run(&["rlm", "q", "--input", &input, "--provider", "mock"]);
    assert_eq!(out.status.code(), Some(2));
    let out = env.run(&[
        "rlm",
        "q",
        "--input",
        &input,
        "--provider",
        "mock",
        "--concurrency",
        "4",
        "--mock-script",
        s(&script),
    ]);
    assert_ne!(out.status.code(), Some(2), "the flag wins over the table");
}

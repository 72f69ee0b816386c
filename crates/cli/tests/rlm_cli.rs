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
    let base =
        ["rlm", "q", "--input", input.as_str(), "--mock-script", s(&script), "--tool", "everything__echo", "--trust"];
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

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every trajectory line is JSON"))
        .collect()
}

#[test]
fn the_trajectory_is_written_as_the_run_goes_and_a_killed_run_leaves_it() {
    let env = Env::new();
    let input = doc(&env);
    let script = env.script(
        "s.json",
        json!([
            "First look.\n```python\nr = llm_query('Summarise: ' + context)\nprint(r['result'])\n```",
            "three words",
            "```python\nwhile True:\n    pass\n```"
        ]),
    );
    let path = env.path("trajectory.jsonl");
    let mut child = env
        .cmd()
        .args(["rlm", "q", "--input", &input, "--mock-script", s(&script), "--trajectory", s(&path), "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("the second snippet to start", std::time::Duration::from_secs(20), || {
        lines(&path).iter().any(|l| l["event"]["type"] == "rlm_snippet" && l["event"]["iteration"] == 2)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let got = lines(&path);
    let of = |t: &str| got.iter().filter(|l| l["event"]["type"] == t).collect::<Vec<_>>();
    assert_eq!(of("rlm_reply")[0]["event"]["text"].as_str().unwrap().lines().next(), Some("First look."));
    let sub = of("rlm_sub_call");
    assert_eq!(sub.len(), 1);
    assert!(sub[0]["event"]["prompt_head"].as_str().unwrap().starts_with("Summarise: alpha beta"), "{:?}", sub[0]);
    assert_eq!(sub[0]["event"]["answer_head"], "three words");
    assert_eq!(of("rlm_observation").len(), 1);
}

#[test]
fn existing_output_files_are_refused_unless_appending() {
    let env = Env::new();
    let input = doc(&env);
    let script = env.script("s.json", json!(["```python\nsubmit('x')\n```"]));
    for flag in ["--events", "--trajectory", "--record"] {
        std::fs::write(env.path("old.jsonl"), "{\"earlier\": true}\n").unwrap();
        let base = ["rlm", "q", "--input", input.as_str(), "--mock-script", s(&script), flag, "old.jsonl", "-q"];
        let out = env.run(&base);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--append"), "{flag}");
        let out = env.run(&[&base[..], &["--append"]].concat());
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(env.path("old.jsonl")).unwrap();
        assert!(text.starts_with("{\"earlier\": true}\n") && text.lines().count() > 1, "{flag}: appended");
    }
}

#[test]
fn a_trajectory_that_cannot_be_written_fails_the_run() {
    let env = Env::new();
    let input = doc(&env);
    let script = env.script("s.json", json!(["```python\nsubmit('x')\n```"]));
    let out = env.run(&["rlm", "q", "--input", &input, "--mock-script", s(&script), "--trajectory", "/dev/full", "-q"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--trajectory file is incomplete"));
}

#[test]
fn the_cpython_backend_runs_pandas_and_host_tools_from_the_cli() {
    let Some(python) = recursive_testkit::require_env("RLM_TEST_PYTHON") else { return };
    let env = Env::new();
    let input = doc(&env);
    let code = "```python\nimport pandas as pd\ndf = pd.DataFrame({'w': context.split()})\n\
                text = read_file('notes.txt')\nsubmit({'answer': f\"{len(df)} words; {text.strip()}\"})\n```";
    let script = env.script("s.json", json!([code]));
    let args = ["rlm", "q", "--input", &input, "--mock-script", s(&script), "--sandbox", "cpython", "--json"];
    let out = env.cmd().args(args).args(["--python", &python]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["output"]["answer"], "3 words; 1\thello world", "{v}");

    let out = env.run(&["rlm", "q", "--input", &input, "--mock-script", s(&script), "--python", "/x", "-q"]);
    assert_eq!(out.status.code(), Some(2), "--python without --sandbox cpython is a usage error");
}

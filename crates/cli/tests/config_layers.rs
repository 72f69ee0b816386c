#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The user's configuration wins: a project's `recursive.toml` is layered on top of the user's
//! file and cannot loosen it without trust; every key that widens what runs needs trust; trust
//! is never borrowed through a symlink. Each test is an attack a cloned repository could make.

mod common;

use common::{Env, s, stdout_json};
use serde_json::json;

/// Writes the user's configuration file.
fn user_config(env: &Env, text: &str) {
    let dir = env.path("config/recursive");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("recursive.toml"), text).unwrap();
}

/// A run whose model writes `out.txt`, approving every ask; the tool's result.
fn write_attempt(env: &Env, dir: &std::path::Path) -> (std::process::Output, String) {
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]}, "done"]),
    );
    let out = env
        .cmd()
        .current_dir(dir)
        .args(["run", "write", "--mock-script", s(&script), "--yes", "--json"])
        .output()
        .unwrap();
    let v = stdout_json(&out);
    let result = v["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    (out, result)
}

#[test]
fn the_users_deny_rules_hold_under_a_harmless_project_file() {
    let env = Env::new();
    user_config(&env, "[[permissions.rules]]\ntool = \"write_file\"\naction = \"deny\"\n");
    std::fs::write(env.path("recursive.toml"), "[limits]\nmax_depth = 4\n").unwrap();
    let (_, result) = write_attempt(&env, env.dir.path());
    assert!(result.contains("denied"), "{result}");
    assert!(!env.path("out.txt").exists());
}

#[test]
fn a_project_cannot_loosen_the_users_permission_defaults() {
    let env = Env::new();
    user_config(&env, "[permissions]\ndefault_write = \"deny\"\n");
    std::fs::write(env.path("recursive.toml"), "[permissions]\ndefault_write = \"ask\"\n").unwrap();
    let (_, result) = write_attempt(&env, env.dir.path());
    assert!(result.contains("denied"), "`ask` answered by --yes loosened the user's deny: {result}");
    assert!(!env.path("out.txt").exists());
}

#[test]
fn a_trusted_project_may_widen_the_users_defaults() {
    let env = Env::new();
    user_config(&env, "[permissions]\ndefault_write = \"deny\"\n");
    std::fs::write(env.path("recursive.toml"), "[[permissions.rules]]\ntool = \"write_file\"\naction = \"allow\"\n")
        .unwrap();
    let script = env.script(
        "s.json",
        json!([{"tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]}, "done"]),
    );
    let out = env.run(&["run", "write", "--mock-script", s(&script), "--trust", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(env.path("out.txt").exists(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn widening_keys_of_an_untrusted_project_are_left_out_and_named() {
    let env = Env::new();
    let hostile = "[tools]\nmemory_path = \"../elsewhere/memory.db\"\n[tools.shell]\nmax_processes = 50000\n\
                   max_file_size_mb = 100000000\n[rlm]\ninstructions = \"/etc/hostname\"\nmemory_limit_mib = 0\n";
    std::fs::write(env.path("recursive.toml"), hostile).unwrap();
    let (out, _) = write_attempt(&env, env.dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for left_out in [
        "[tools] memory_path (a path outside the project)",
        "[tools.shell] max_processes = 50000 (above 1024)",
        "[tools.shell] max_file_size_mb = 100000000 (above 4096)",
        "[rlm] instructions (a path outside the project)",
        "[rlm] memory_limit_mib = 0 (no limit; above 512)",
    ] {
        assert!(stderr.contains(left_out), "{left_out} not left out: {stderr}");
    }
}

#[test]
fn a_project_cannot_lower_the_users_sandbox_or_raise_its_limits() {
    let env = Env::new();
    user_config(&env, "[tools.shell]\nsandbox = \"required\"\nmax_processes = 64\n");
    std::fs::write(env.path("recursive.toml"), "[tools.shell]\nsandbox = \"auto\"\nmax_processes = 512\n").unwrap();
    // `required` refuses to start when the OS sandbox is unusable (simulated with a bwrap that
    // does not exist), and the layered setting must still refuse.
    let script = env
        .script("s.json", json!([{"tool_calls": [{"name": "run_shell", "arguments": {"command": "true"}}]}, "done"]));
    let out = env
        .cmd()
        .env("RECURSIVE_BWRAP", "/nonexistent/bwrap")
        .args(["run", "x", "--mock-script", s(&script), "--yes", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "the project's `auto` replaced the user's `required`: {stderr}");
    assert!(stderr.contains("required"), "{stderr}");
}

#[test]
fn trust_is_not_borrowed_through_a_symlinked_project_file() {
    let env = Env::new();
    let trusted = env.path("trusted-project");
    std::fs::create_dir_all(&trusted).unwrap();
    std::fs::write(
        trusted.join("recursive.toml"),
        "[[permissions.rules]]\ntool = \"write_file\"\naction = \"allow\"\n",
    )
    .unwrap();
    let script = env.script("s.json", json!(["done"]));
    let out =
        env.cmd().current_dir(&trusted).args(["run", "x", "--mock-script", s(&script), "--trust"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let attacker = env.path("cloned");
    std::fs::create_dir_all(&attacker).unwrap();
    std::os::unix::fs::symlink(trusted.join("recursive.toml"), attacker.join("recursive.toml")).unwrap();
    // No --yes: only the borrowed allow rule could let the write through.
    let script = env.script(
        "w.json",
        json!([{"tool_calls": [{"name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]}, "done"]),
    );
    let out = env.cmd().current_dir(&attacker).args(["run", "write", "--mock-script", s(&script)]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be trusted"), "{stderr}");
    assert!(!attacker.join("out.txt").exists(), "the borrowed allow rule took effect: {stderr}");
}

#[test]
fn a_bad_value_is_named_by_its_key() {
    let env = Env::new();
    std::fs::write(env.path("bad.toml"), "[tools.shell]\nmax_processes = -1\n").unwrap();
    let out = env.run(&["run", "x", "--provider", "mock", "--config", "bad.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`shell.max_processes`"), "{stderr}");
}

#[test]
fn missing_schema_and_runnable_files_are_usage_errors() {
    let env = Env::new();
    let out = env.run(&["rlm", "q", "-i", "notes.txt", "--provider", "mock", "--schema", "missing.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let out = env.run(&["run", "q", "--provider", "mock", "--agent", "x=missing.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

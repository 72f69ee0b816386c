#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The system prompt as the model receives it: read from the request body a scripted OpenAI
//! server on 127.0.0.1 recorded — the workspace, the date, the project's AGENTS.md — and how
//! `--system` and `--append-system` change it.

mod common;

use common::{Env, s};
use recursive_testkit::{ModelServer, Reply};

/// Runs `recursive run hi` against a scripted server with `extra` arguments; the system message sent.
fn system_sent(env: &Env, extra: &[&str]) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start_with([Reply::text("done")]));
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "hi", "--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini", "-q"])
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let body = server.request(0).body;
    let first = &body["messages"][0];
    assert_eq!(first["role"], "system", "{body}");
    first["content"].as_str().unwrap().to_string()
}

#[test]
fn the_default_system_prompt_carries_the_workspace_the_date_and_agents_md() {
    let env = Env::new();
    std::fs::write(env.path("AGENTS.md"), "Always run `make lint` before answering.").unwrap();
    let system = system_sent(&env, &[]);
    let workspace = std::fs::canonicalize(env.dir.path()).unwrap();
    assert!(system.contains(&format!("Workspace: {}", workspace.display())), "{system}");
    assert!(system.contains(&chrono::Local::now().format("%Y-%m-%d").to_string()), "{system}");
    assert!(system.contains("Always run `make lint` before answering."), "{system}");
    assert!(system.contains("run_shell") && system.contains("read_file"), "the tools are named: {system}");

    let system = system_sent(&env, &["--append-system", "Answer in French."]);
    assert!(system.contains("Always run `make lint`") && system.ends_with("Answer in French."), "{system}");
    assert_eq!(system_sent(&env, &["--system", "Only this."]), "Only this.");
}

#[test]
fn the_users_own_agents_md_comes_before_the_projects() {
    let env = Env::new();
    let user_dir = env.path("config").join("recursive");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(user_dir.join("AGENTS.md"), "USER RULE").unwrap();
    std::fs::write(env.path("AGENTS.md"), "PROJECT RULE").unwrap();
    let system = system_sent(&env, &["--workspace", s(env.dir.path())]);
    let (user, project) = (system.find("USER RULE").unwrap(), system.find("PROJECT RULE").unwrap());
    assert!(user < project, "{system}");
}

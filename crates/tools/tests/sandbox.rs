#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `run_shell` in the OS sandbox, attacked as a model would: reading host secrets, writing
//! outside the workspace, reaching the network, fork and memory bombs, children left sleeping,
//! reading the parent's environment. `sandbox = "required"`, so a machine without bubblewrap
//! fails these tests instead of passing them unconfined (`./scripts/test` installs it).

use std::sync::Arc;
use std::time::Duration;

use recursive_core::confine::SandboxMode;
use recursive_core::{Tool, ToolContext, ToolError, typed};
use recursive_tools::config::ShellConfig;
use recursive_tools::sandbox::Workspace;
use recursive_tools::shell::RunShell;
use serde_json::json;

fn confined() -> ShellConfig {
    ShellConfig { sandbox: SandboxMode::Required, default_timeout_secs: 60, ..Default::default() }
}

fn shell(ws: &std::path::Path, config: ShellConfig) -> Arc<dyn Tool> {
    typed(RunShell::new(Workspace::new(ws).unwrap(), config))
}

async fn run(ws: &std::path::Path, config: ShellConfig, command: &str) -> Result<String, ToolError> {
    shell(ws, config).call(json!({"command": command}), &ToolContext::detached()).await
}

#[tokio::test]
async fn host_files_outside_the_workspace_cannot_be_read() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("mine.txt"), "workspace file").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();
    let command = format!(
        "cat mine.txt; cat /etc/shadow; cat {}; ls /root; ls /home; cat /proc/1/root/etc/shadow",
        secret.display()
    );
    let out = run(ws.path(), confined(), &command).await.unwrap();
    assert!(out.contains("workspace file"), "{out}");
    assert!(!out.contains("host secret"), "{out}");
    assert!(!out.contains("root:"), "/etc/shadow was read: {out}");
    assert!(out.contains("/etc/shadow: No such file"), "{out}");
}

#[tokio::test]
async fn writes_land_only_in_the_workspace() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("pwned");
    // A name of this test's own in the host's /tmp, which the command must not reach.
    let scratch = format!("/tmp/recursive-scratch-{}", std::process::id());
    let command =
        format!("echo in > inside.txt; echo out > {}; echo x > /usr/pwned; echo y > {scratch}", target.display());
    let out = run(ws.path(), confined(), &command).await.unwrap();
    assert_eq!(std::fs::read_to_string(ws.path().join("inside.txt")).unwrap(), "in\n");
    assert!(!target.exists(), "a file was written outside the workspace: {out}");
    assert!(!std::path::Path::new("/usr/pwned").exists(), "{out}");
    assert!(!std::path::Path::new(&scratch).exists(), "/tmp is private: {out}");
    assert!(out.contains("Read-only file system"), "{out}");
}

/// A listener on the host's loopback and a command that tries to reach it.
async fn connect_from_the_sandbox(network: bool) -> (String, bool) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws = tempfile::tempdir().unwrap();
    let command = format!(
        "/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\""
    );
    let config = ShellConfig { network, ..confined() };
    let accepted = tokio::spawn(async move { tokio::time::timeout(Duration::from_secs(5), listener.accept()).await });
    let out = run(ws.path(), config, &command).await.unwrap();
    let accepted = matches!(accepted.await.unwrap(), Ok(Ok(_)));
    (out, accepted)
}

#[tokio::test]
async fn commands_have_no_network_unless_it_is_allowed() {
    let (out, accepted) = connect_from_the_sandbox(false).await;
    assert!(!accepted, "the host's listener was reached: {out}");
    assert!(out.contains("ConnectionRefusedError") || out.contains("OSError"), "{out}");

    let (out, accepted) = connect_from_the_sandbox(true).await;
    assert!(accepted && out.contains("connected"), "with network = true the host is reachable: {out}");
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit() {
    let ws = tempfile::tempdir().unwrap();
    let config = ShellConfig { max_processes: 40, ..confined() };
    let command = "i=0; while [ $i -lt 300 ]; do sleep 31 & i=$((i+1)); done; echo all 300 started";
    let out = run(ws.path(), config, command).await.unwrap();
    assert!(!out.contains("all 300 started"), "{out}");
    assert!(out.contains("fork"), "the shell says it cannot fork: {out}");
    assert!(gone_soon(&["sleep", "31"]).await, "the bomb's processes outlived the call");
}

#[tokio::test]
async fn a_memory_bomb_fails_inside_the_sandbox() {
    let ws = tempfile::tempdir().unwrap();
    let config = ShellConfig { max_memory_mb: 256, ..confined() };
    let out = run(ws.path(), config, "/usr/bin/python3 -c 'x = bytearray(2 * 1024**3)'; echo after").await.unwrap();
    assert!(out.contains("MemoryError"), "{out}");
    assert!(out.contains("after"), "the shell goes on: {out}");
}

/// Host processes whose command line is exactly `argv`.
fn host_processes(argv: &[&str]) -> Vec<i32> {
    let wanted = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
        .collect()
}

/// Whether every host process running `argv` is gone within five seconds.
async fn gone_soon(argv: &[&str]) -> bool {
    for _ in 0..100 {
        if host_processes(argv).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn children_that_leave_the_session_do_not_survive_the_call() {
    let ws = tempfile::tempdir().unwrap();
    let out = run(ws.path(), confined(), "setsid sleep 4242 & nohup sleep 4242 >/dev/null 2>&1 & echo started")
        .await
        .unwrap();
    assert!(out.contains("started"), "{out}");
    assert!(
        gone_soon(&["sleep", "4242"]).await,
        "still running after the call: {:?}",
        host_processes(&["sleep", "4242"])
    );
}

#[tokio::test]
async fn the_parents_environment_is_out_of_reach() {
    let ws = tempfile::tempdir().unwrap();
    // Cargo sets CARGO_PKG_NAME for this test process; nothing inside may see it.
    let command = "cat /proc/1/environ /proc/$PPID/environ /proc/self/environ 2>&1 | tr '\\0' '\\n'; \
                   ls /proc | grep -c '^[0-9]'";
    let out = run(ws.path(), confined(), command).await.unwrap();
    assert!(!out.contains("CARGO_PKG_NAME"), "{out}");
    assert!(out.contains("PATH="), "the allowlisted environment is there: {out}");
}

#[tokio::test]
async fn the_prompt_says_how_the_command_will_run() {
    let ws = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let how = shell(ws.path(), confined()).confinement().unwrap();
    assert_eq!(how, format!("runs confined (OS sandbox: writes only to {}, no network)", root.display()));
    let off = ShellConfig { sandbox: SandboxMode::Off, ..Default::default() };
    assert_eq!(shell(ws.path(), off).confinement().unwrap(), "runs UNCONFINED (the sandbox is off)");
}

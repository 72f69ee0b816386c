#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `run_shell` attacked where the OS sandbox cannot simply hide things: the workspace's own
//! `.git` (a hook or a `core.fsmonitor` planted there runs outside with the user's next `git`),
//! and a command run unconfined (`sandbox = "off"`, or `auto` without bubblewrap), which must not
//! reach the user's terminal. Confined tests use `sandbox = "required"`, so a machine without
//! bubblewrap fails them instead of passing them unconfined.

use std::path::Path;

use recursive_core::confine::SandboxMode;
use recursive_core::{ToolContext, ToolError, typed};
use recursive_tools::config::ShellConfig;
use recursive_tools::sandbox::Workspace;
use recursive_tools::shell::RunShell;
use serde_json::json;

async fn run(ws: &Path, sandbox: SandboxMode, command: &str) -> Result<String, ToolError> {
    let config = ShellConfig { sandbox, ..Default::default() };
    let shell = typed(RunShell::new(Workspace::new(ws).unwrap(), config));
    shell.call(json!({"command": command}), &ToolContext::detached()).await
}

/// A workspace holding a repository: `.git/config`, `.git/hooks`, `.git/objects`.
fn repository() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let git = ws.path().join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::create_dir_all(git.join("objects")).unwrap();
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    ws
}

#[tokio::test]
async fn a_confined_command_cannot_change_the_git_config_or_plant_a_hook() {
    let ws = repository();
    let git = ws.path().join(".git");
    let command = "echo '[core] fsmonitor = touch /tmp/pwned' >> .git/config; \
                   echo 'touch /tmp/pwned' > .git/hooks/post-checkout; \
                   echo object > .git/objects/x; echo work > file.txt; echo done";
    let out = run(ws.path(), SandboxMode::Required, command).await.unwrap();
    assert_eq!(std::fs::read_to_string(git.join("config")).unwrap(), "[core]\n\tbare = false\n", "{out}");
    assert!(!git.join("hooks/post-checkout").exists(), "a hook was planted: {out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert_eq!(std::fs::read_to_string(git.join("objects/x")).unwrap(), "object\n", "{out}");
    assert_eq!(std::fs::read_to_string(ws.path().join("file.txt")).unwrap(), "work\n", "{out}");
}

#[tokio::test]
async fn a_confined_command_cannot_swap_the_git_directory_for_its_own() {
    let ws = repository();
    let git = ws.path().join(".git");
    let command = "mv .git .git-old; rm -rf .git; mkdir -p .git/hooks; \
                   echo '[core] fsmonitor = touch /tmp/pwned' > .git/config; \
                   echo 'touch /tmp/pwned' > .git/hooks/post-checkout; \
                   rm -rf .git/hooks; rm -f .git/config; echo done";
    let out = run(ws.path(), SandboxMode::Required, command).await.unwrap();
    assert!(out.contains("done"), "{out}");
    assert!(!ws.path().join(".git-old").exists(), "the repository was moved aside: {out}");
    assert_eq!(std::fs::read_to_string(git.join("config")).unwrap(), "[core]\n\tbare = false\n", "{out}");
    assert!(git.join("hooks").is_dir() && !git.join("hooks/post-checkout").exists(), "{out}");
}

/// The session id of a process, from `/proc/<pid>/stat`.
fn session_of(pid: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(')').unwrap().1.split_whitespace().nth(3).unwrap().to_string()
}

#[tokio::test]
async fn an_unconfined_command_runs_in_its_own_session_without_a_terminal() {
    let ws = tempfile::tempdir().unwrap();
    let command = "echo \"sid=$(ps -o sid= -p $$ | tr -d ' ') pid=$$\"; tty; \
                   if (: </dev/tty) 2>/dev/null; then echo HAS_TTY; else echo NO_TTY; fi";
    let out = run(ws.path(), SandboxMode::Off, command).await.unwrap();
    let ours = session_of("self");
    let line = out.lines().find(|l| l.starts_with("sid=")).unwrap_or_else(|| panic!("{out}"));
    let (sid, pid) = line.trim_start_matches("sid=").split_once(" pid=").unwrap();
    assert_ne!(sid, ours, "the command shares this process's session: {out}");
    assert_eq!(sid, pid, "the command leads a session of its own: {out}");
    assert!(out.contains("not a tty"), "{out}");
    assert!(out.contains("NO_TTY"), "the command has a controlling terminal: {out}");
}

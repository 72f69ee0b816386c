//! `run_shell`: runs `sh -c <command>` in the workspace with a timeout.
//!
//! The command runs in its own process group; unconfined (no OS sandbox), in a session of its
//! own (`setsid`) with stdin from `/dev/null`, so it has no controlling terminal and cannot push
//! keystrokes into the user's (`TIOCSTI`). When it times out — or when the call is
//! abandoned (the agent loop's own timeout, cancellation) — the whole group is killed, so
//! background jobs and grandchildren do not outlive it. When the shell exits normally, what it
//! left running in its group is killed too: output pipes held open by a leftover process would
//! otherwise keep the call waiting. A process that starts its own session (`setsid`) leaves the
//! group and is not stopped.
//!
//! The command's environment is built from an allowlist, never inherited whole: the variables
//! of [`recursive_core::env::DEFAULT_CHILD_ENV`] and [`ShellConfig::env_pass`], then
//! [`ShellConfig::env`]. Credentials (`*_API_KEY`, `DATABASE_URL`, tokens, cookies) reach a
//! command only when the configuration names them.
//!
//! Stdout and stderr are captured separately and each is capped, keeping its beginning and its
//! end with a marker saying how many bytes and lines were cut. A non-zero exit code is a normal
//! result (the model reads it); a timeout or a command that cannot start is a tool error.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::Signal;
use process_wrap::tokio::{CommandWrap, ProcessSession};
use recursive_core::confine::{Plan, ProcessCgroup};
use recursive_core::env::ChildEnv;
use recursive_core::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use crate::config::ShellConfig;
use crate::fs::resolve;
use crate::process::GroupKiller;
use crate::sandbox::Workspace;
use crate::truncate::HeadTail;

/// How long output pipes may stay open after the command's process group is gone.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Arguments of `run_shell`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunShellArgs {
    /// The command line, run with `sh -c`.
    pub command: String,
    /// Seconds before the command and everything it started are killed.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Working directory, relative to the workspace root. Default: the root.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// Runs a shell command.
#[derive(Debug, Clone)]
pub struct RunShell {
    ws: Workspace,
    config: ShellConfig,
    env: ChildEnv,
}

impl RunShell {
    /// The tool for this workspace. An invalid `env_pass` glob leaves only the default
    /// allowlist (with a warning); [`crate::ToolsConfig::validate`] reports it up front.
    pub fn new(ws: Workspace, config: ShellConfig) -> Self {
        let env = ChildEnv::new(&config.env_pass, &config.env).unwrap_or_else(|e| {
            tracing::warn!("{e}; passing only the default environment allowlist");
            ChildEnv::new(&[], &config.env).unwrap_or_else(|_| ChildEnv::defaults())
        });
        Self { ws, config, env }
    }
}

fn collect<R: AsyncRead + Unpin + Send + 'static>(mut pipe: R, max_bytes: usize) -> JoinHandle<HeadTail> {
    tokio::spawn(async move {
        let mut out = HeadTail::new(max_bytes);
        let mut buf = vec![0u8; 8192];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.push(&buf[..n]),
            }
        }
        out
    })
}

/// Waits for a reader, giving up after the grace period (a process outside the group may
/// still hold the pipe).
async fn finish(handle: JoinHandle<HeadTail>, max_bytes: usize) -> (HeadTail, bool) {
    let abort = handle.abort_handle();
    match tokio::time::timeout(PIPE_GRACE, handle).await {
        Ok(Ok(out)) => (out, false),
        Ok(Err(_)) => (HeadTail::new(max_bytes), false),
        Err(_) => {
            abort.abort();
            (HeadTail::new(max_bytes), true)
        }
    }
}

fn describe_status(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(sig)) => {
            let name = Signal::try_from(sig).map(|s| s.as_str().to_string()).unwrap_or_else(|_| sig.to_string());
            format!("killed by signal {name}")
        }
        (None, None) => "exit status unknown".into(),
    }
}

fn render_output(head: String, stdout: &HeadTail, stderr: &HeadTail, abandoned: bool) -> String {
    let mut out = head;
    if stdout.is_empty() && stderr.is_empty() {
        out.push_str("\n(no output)");
    }
    for (name, stream) in [("stdout", stdout), ("stderr", stderr)] {
        if !stream.is_empty() {
            let text = stream.render();
            out.push_str(&format!("\n--- {name} ---\n{}", text.trim_end_matches('\n')));
        }
    }
    if abandoned {
        out.push_str("\n[a process outside the command's process group kept its output open; output not collected]");
    }
    out
}

impl RunShell {
    /// How commands will run, per `[tools.shell] sandbox` and this machine.
    fn plan(&self) -> Result<Plan, ToolError> {
        Plan::for_mode(self.config.sandbox).map_err(|e| {
            ToolError::failed(format!("{e}; commands are not run because [tools.shell] sandbox = \"required\""))
        })
    }

    /// The process that runs `line`: `<shell> -c <line>`, leading a process group of its own:
    /// inside the sandbox when confined (with the pids cgroup to keep until it ends), else in a
    /// new session, without a controlling terminal.
    fn command(&self, line: &str, cwd: &Path) -> Result<(CommandWrap, Option<ProcessCgroup>), ToolError> {
        let shell = [self.config.shell.clone().into(), OsString::from("-c"), line.into()];
        match self.plan()? {
            Plan::Unconfined(_) => {
                let mut command = tokio::process::Command::new(&shell[0]);
                command.args(&shell[1..]);
                let mut wrapped = CommandWrap::from(command);
                // A session leader also leads its process group: the group guard still works.
                wrapped.wrap(ProcessSession);
                Ok((wrapped, None))
            }
            Plan::Confined(sandbox) => {
                let (argv, cgroup) = sandbox.command(&self.config.confinement(self.ws.root()), cwd, &shell);
                let mut command = tokio::process::Command::new(&argv[0]);
                command.args(&argv[1..]).process_group(0);
                Ok((CommandWrap::from(command), cgroup))
            }
        }
    }
}

#[async_trait]
impl TypedTool for RunShell {
    type Args = RunShellArgs;

    fn name(&self) -> &str {
        "run_shell"
    }

    fn description(&self) -> String {
        format!(
            "Run a shell command (`{} -c <command>`) in the workspace and return its exit code, stdout and \
             stderr. `cwd` is a directory relative to the workspace root. The command is killed, with every \
             process it started, after `timeout_secs` (default {}, at most {}). Background processes left \
             running when the command exits are stopped. Each of stdout and stderr is capped at {} bytes, \
             keeping the start and the end. Stdin is empty; do not run interactive programs.",
            self.config.shell,
            self.config.default_timeout_secs,
            self.config.max_timeout_secs,
            self.config.max_output_bytes
        )
    }

    fn confinement(&self) -> Option<String> {
        Some(match self.plan() {
            Ok(plan) => plan.describe(&self.config.confinement(self.ws.root())),
            Err(e) => e.to_string(),
        })
    }

    async fn run(&self, args: RunShellArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let cwd = resolve(&self.ws, args.cwd.as_deref().unwrap_or("."))?;
        if !cwd.is_dir() {
            return Err(ToolError::failed(format!(
                "working directory `{}` is not an existing directory",
                self.ws.display_relative(&cwd)
            )));
        }
        let max_timeout = self.config.max_timeout_secs.max(1);
        let requested = args.timeout_secs.unwrap_or(self.config.default_timeout_secs).max(1);
        let timeout_secs = requested.min(max_timeout);
        let max_bytes = self.config.max_output_bytes;

        let (mut command, cgroup) = self.command(&args.command, &cwd)?;
        self.env.apply_tokio(command.command_mut());
        command
            .command_mut()
            .current_dir(&cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| {
            let program = command.command().as_std().get_program().to_string_lossy().into_owned();
            ToolError::failed(format!("could not start `{program}`: {e}"))
        })?;
        let mut killer = GroupKiller::new(child.id());
        let stdout = child.stdout().take().map(|p| collect(p, max_bytes));
        let stderr = child.stderr().take().map(|p| collect(p, max_bytes));

        let waited = tokio::time::timeout(Duration::from_secs(timeout_secs), child.wait()).await;
        // Whether the shell finished or not, nothing it started may outlive the call.
        killer.kill();
        let status = match waited {
            Ok(status) => Some(status.map_err(|e| ToolError::failed(format!("waiting for the command: {e}")))?),
            Err(_) => {
                let _ = child.wait().await;
                None
            }
        };
        let (stdout, lost_out) = match stdout {
            Some(h) => finish(h, max_bytes).await,
            None => (HeadTail::new(max_bytes), false),
        };
        let (stderr, lost_err) = match stderr {
            Some(h) => finish(h, max_bytes).await,
            None => (HeadTail::new(max_bytes), false),
        };
        if let Some(cgroup) = cgroup {
            cgroup.remove().await;
        }
        let abandoned = lost_out || lost_err;
        let lowered = if requested > timeout_secs {
            format!(" (timeout lowered from {requested}s to the maximum {timeout_secs}s)")
        } else {
            String::new()
        };
        match status {
            Some(status) => {
                Ok(render_output(format!("{}{lowered}", describe_status(&status)), &stdout, &stderr, abandoned))
            }
            None => Err(ToolError::failed(render_output(
                format!(
                    "timed out after {timeout_secs}s{lowered}; the command and every process it started were \
                     killed. Output so far:"
                ),
                &stdout,
                &stderr,
                abandoned,
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::typed;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn tool(dir: &std::path::Path, config: ShellConfig) -> std::sync::Arc<dyn recursive_core::Tool> {
        typed(RunShell::new(Workspace::new(dir).unwrap(), config))
    }

    async fn run(dir: &std::path::Path, config: ShellConfig, args: serde_json::Value) -> Result<String, ToolError> {
        tool(dir, config).call(args, &ToolContext::detached()).await
    }

    /// Without the OS sandbox: these tests read the host's pids of what a command started
    /// (confined commands are tested in `tests/sandbox.rs`).
    fn unconfined() -> ShellConfig {
        ShellConfig { sandbox: recursive_core::confine::SandboxMode::Off, ..Default::default() }
    }

    /// Whether a process is gone (or a zombie waiting to be reaped).
    fn process_gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn reports_exit_code_stdout_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), ShellConfig::default(), json!({"command": "echo out; echo err >&2; exit 3"}))
            .await
            .unwrap();
        assert_eq!(out, "exit code: 3\n--- stdout ---\nout\n--- stderr ---\nerr");
    }

    #[tokio::test]
    async fn runs_in_the_workspace_and_in_cwd() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let out = run(dir.path(), ShellConfig::default(), json!({"command": "pwd"})).await.unwrap();
        assert!(out.ends_with(&format!("\n{}", root.display())), "{out}");
        let out = run(dir.path(), ShellConfig::default(), json!({"command": "pwd", "cwd": "sub"})).await.unwrap();
        assert!(out.ends_with(&format!("\n{}", root.join("sub").display())), "{out}");
    }

    #[tokio::test]
    async fn cwd_outside_the_workspace_is_denied() {
        let dir = tempfile::tempdir().unwrap();
        for cwd in ["..", "/", "/tmp", "sub/../.."] {
            let err = run(dir.path(), ShellConfig::default(), json!({"command": "touch pwned", "cwd": cwd}))
                .await
                .unwrap_err();
            assert!(matches!(err, ToolError::Denied(_)), "{cwd}: {err}");
        }
    }

    #[tokio::test]
    async fn missing_cwd_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(dir.path(), ShellConfig::default(), json!({"command": "true", "cwd": "nope"})).await.unwrap_err();
        assert!(err.to_string().contains("not an existing directory"), "{err}");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(
            dir.path(),
            unconfined(),
            json!({"command": "sleep 100 & echo $! > bg.pid; echo started; sleep 100", "timeout_secs": 1}),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("timed out after 1s"), "{text}");
        assert!(text.contains("started"), "partial output is kept: {text}");
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid")).unwrap().trim().parse().unwrap();
        // The kill is asynchronous in the kernel; poll until the grandchild is gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !process_gone(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(process_gone(pid), "background process {pid} survived the timeout");
    }

    #[tokio::test]
    async fn background_job_does_not_keep_the_call_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            dir.path(),
            ShellConfig { default_timeout_secs: 60, ..unconfined() },
            json!({"command": "sleep 100 & echo $! > bg.pid; echo done"}),
        )
        .await
        .unwrap();
        assert!(out.starts_with("exit code: 0"), "{out}");
        assert!(out.contains("done"), "{out}");
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid")).unwrap().trim().parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !process_gone(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(process_gone(pid), "background process {pid} was left running");
    }

    #[tokio::test]
    async fn abandoned_call_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let t = tool(dir.path(), unconfined());
        let ctx = ToolContext::detached();
        let call = t.call(json!({"command": "sleep 100 & echo $! > bg.pid; sleep 100"}), &ctx);
        let pid_file = dir.path().join("bg.pid");
        let waiter = async {
            while std::fs::read_to_string(&pid_file).map(|s| s.trim().is_empty()).unwrap_or(true) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            _ = call => panic!("the command cannot finish on its own"),
            _ = waiter => {}
        }
        // The call future is dropped here, as the agent loop does on its own timeout.
        let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !process_gone(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(process_gone(pid), "background process {pid} survived the dropped call");
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            dir.path(),
            ShellConfig { max_output_bytes: 100, ..Default::default() },
            json!({"command": "seq 1 10000"}),
        )
        .await
        .unwrap();
        let body = out.split_once("--- stdout ---\n").unwrap().1;
        assert!(body.starts_with("1\n2\n3\n"), "{out}");
        assert!(body.ends_with("9999\n10000"), "{out}");
        // `seq 1 10000` prints 48894 bytes; 100 are kept.
        assert!(body.contains("[... 48794 bytes ("), "{out}");
        assert!(body.contains("lines) cut from the middle"), "{out}");
    }

    #[tokio::test]
    async fn timeout_is_lowered_to_the_maximum() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            dir.path(),
            ShellConfig { max_timeout_secs: 5, ..Default::default() },
            json!({"command": "true", "timeout_secs": 3600}),
        )
        .await
        .unwrap();
        assert!(out.contains("lowered from 3600s to the maximum 5s"), "{out}");
    }

    #[tokio::test]
    async fn only_allowlisted_and_configured_variables_are_passed() {
        let dir = tempfile::tempdir().unwrap();
        // Cargo sets CARGO_MANIFEST_DIR and CARGO_PKG_NAME for the test process.
        let args = json!({"command": "echo \"${CARGO_MANIFEST_DIR-unset} ${CARGO_PKG_NAME-unset} ${EXTRA-unset}\"; env | cut -d= -f1 | sort | tr '\\n' ' '"});
        let out = run(dir.path(), ShellConfig::default(), args.clone()).await.unwrap();
        assert!(out.contains("unset unset unset"), "{out}");
        assert!(!out.contains("CARGO_PKG"), "{out}");
        let config = ShellConfig {
            env_pass: vec!["CARGO_MANIFEST_*".into()],
            env: BTreeMap::from([("EXTRA".to_string(), "given".to_string())]),
            ..Default::default()
        };
        let out = run(dir.path(), config, args).await.unwrap();
        assert!(out.contains(&format!("{} unset given", env!("CARGO_MANIFEST_DIR"))), "{out}");
    }

    #[tokio::test]
    async fn no_output_is_said_explicitly() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), ShellConfig::default(), json!({"command": "true"})).await.unwrap();
        assert_eq!(out, "exit code: 0\n(no output)");
    }

    #[tokio::test]
    async fn missing_shell_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let config = ShellConfig { shell: "/no/such/shell".into(), ..unconfined() };
        let err = run(dir.path(), config, json!({"command": "true"})).await.unwrap_err();
        assert!(err.to_string().contains("could not start `/no/such/shell`"), "{err}");
    }
}

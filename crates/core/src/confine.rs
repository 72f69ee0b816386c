//! OS confinement of child processes on bubblewrap (`bwrap`): the one place that decides how a
//! command the model chose (`run_shell`) or code it wrote (the RLM's CPython worker) runs.
//!
//! A confined process sees:
//! - the system read-only: `/usr`, `/bin`, `/sbin`, `/lib*`, `/opt`, and from `/etc` only what
//!   programs need to run (users and groups, name resolution, the loader cache, certificates,
//!   alternatives, time zone) — not `/etc/shadow`, not `/root`, not other users' homes;
//! - the directories on its `PATH` and [`Confinement::read_only`] read-only, and
//!   [`Confinement::writable`] (the workspace, a scratch dir) read-write, each at its own path;
//! - a private `/tmp`, an empty private home (`$HOME` on a tmpfs), its own `/proc` in its own PID
//!   namespace (no view of the parent or its environment), a minimal `/dev`;
//! - no network (its own network namespace, with only its own loopback) unless
//!   [`Confinement::network`] is set, which shares the host's network unfiltered (there is no
//!   allowlisting proxy);
//! - its own user namespace with every capability dropped, a new session (no terminal
//!   injection), and death with its parent: when the `bwrap` process ends, everything inside goes;
//! - resource limits ([`ProcessLimits`]): CPU seconds, address space and file size as rlimits
//!   (`prlimit`), the number of processes as an rlimit counted inside the sandbox's user
//!   namespace and, when the process runs as root (whom that rlimit does not bind), as the
//!   `pids.max` of a cgroup of its own when one can be made.
//!
//! The environment is not this module's: the caller starts `bwrap` with an allowlisted
//! environment ([`crate::env::ChildEnv`]), which is all the process inside sees.
//!
//! [`SandboxMode`] says what happens when `bwrap` is missing or the kernel refuses namespaces:
//! `required` fails, `auto` runs unconfined and says so (once per process, and in every prompt),
//! `off` never confines.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Whether to confine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Confine, or refuse to run when confinement is not available.
    Required,
    /// Confine when available; otherwise run unconfined and say so.
    #[default]
    Auto,
    /// Never confine.
    Off,
}

impl SandboxMode {
    /// The setting as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Required => "required",
            SandboxMode::Auto => "auto",
            SandboxMode::Off => "off",
        }
    }
}

/// Resource limits of a confined process tree (`None`: not limited).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessLimits {
    /// CPU seconds of each process.
    pub cpu_secs: Option<u64>,
    /// Address space of each process, in bytes.
    pub address_space_bytes: Option<u64>,
    /// Processes (and threads) of the whole sandbox.
    pub processes: Option<u64>,
    /// Largest file a process may write, in bytes.
    pub file_size_bytes: Option<u64>,
}

/// What a confined process may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Directories bound read-write at their own paths (the workspace, a scratch dir).
    pub writable: Vec<PathBuf>,
    /// Further paths bound read-only at their own paths (missing ones are skipped).
    pub read_only: Vec<PathBuf>,
    /// Share the host's network (unfiltered) instead of having none.
    pub network: bool,
    /// Resource limits.
    pub limits: ProcessLimits,
}

/// Why confinement cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the OS sandbox is not available: {0}")]
pub struct Unavailable(pub String);

/// System directories bound read-only (symlinks, as on merged-/usr systems, are recreated).
const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"];

/// What of `/etc` a confined process sees.
const ETC_ENTRIES: &[&str] = &[
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/inputrc",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/python3",
    "/etc/python3.11",
];

/// The sandbox as found on this machine: `bwrap` and `prlimit`, checked to work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    bwrap: PathBuf,
    prlimit: Option<PathBuf>,
}

/// The variable naming the `bwrap` to use instead of the one on `PATH`.
pub const BWRAP_VAR: &str = "RECURSIVE_BWRAP";

/// The sandbox of this machine, probed once: `$RECURSIVE_BWRAP`, else `bwrap` on `PATH` (or in
/// `/usr/bin`), that can
/// start a process in new user, PID, network and mount namespaces.
pub fn sandbox() -> Result<&'static Sandbox, Unavailable> {
    static PROBED: OnceLock<Result<Sandbox, Unavailable>> = OnceLock::new();
    PROBED.get_or_init(probe).as_ref().map_err(Clone::clone)
}

fn probe() -> Result<Sandbox, Unavailable> {
    let chosen = crate::env::var_os(BWRAP_VAR).map(PathBuf::from);
    let bwrap = match chosen {
        Some(path) if path.is_file() => path,
        Some(path) => return Err(Unavailable(format!("{BWRAP_VAR}={} is not a file", path.display()))),
        None => find_program("bwrap").ok_or_else(|| {
            Unavailable("`bwrap` was not found (install bubblewrap, e.g. `apt-get install bubblewrap`)".into())
        })?,
    };
    let out = std::process::Command::new(&bwrap)
        .args(["--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/", "--", "true"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Unavailable(format!("cannot run {}: {e}", bwrap.display())))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(Unavailable(format!("{} cannot create namespaces here: {why}", bwrap.display())));
    }
    Ok(Sandbox { bwrap, prlimit: find_program("prlimit") })
}

/// A program on `PATH`, else in the system's bin directories.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = crate::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// How a process will run, decided from a [`SandboxMode`] and this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Confined by this sandbox.
    Confined(&'static Sandbox),
    /// Not confined, with why (the setting, or what is missing).
    Unconfined(String),
}

impl Plan {
    /// Decides for `mode`: `required` without a sandbox is an error; `auto` without one runs
    /// unconfined (warning once per process).
    pub fn for_mode(mode: SandboxMode) -> Result<Plan, Unavailable> {
        match (mode, sandbox()) {
            (SandboxMode::Off, _) => Ok(Plan::Unconfined("the sandbox is off".into())),
            (_, Ok(sandbox)) => Ok(Plan::Confined(sandbox)),
            (SandboxMode::Required, Err(e)) => Err(e),
            (SandboxMode::Auto, Err(e)) => {
                static WARNED: OnceLock<()> = OnceLock::new();
                WARNED.get_or_init(|| tracing::warn!("{e}; commands run unconfined (sandbox = \"auto\")"));
                Ok(Plan::Unconfined(e.0))
            }
        }
    }

    /// One line for prompts and events: how the process will run.
    pub fn describe(&self, confinement: &Confinement) -> String {
        match self {
            Plan::Confined(_) => {
                let writable: Vec<String> = confinement.writable.iter().map(|p| p.display().to_string()).collect();
                let network = if confinement.network { "the host's network" } else { "no network" };
                format!("runs confined (OS sandbox: writes only to {}, {network})", writable.join(", "))
            }
            Plan::Unconfined(why) => format!("runs UNCONFINED ({why})"),
        }
    }
}

impl Sandbox {
    /// The command line that runs `command` (program and arguments) confined, in `cwd`.
    /// Start it with the allowlisted environment; keep the returned [`ProcessCgroup`] until
    /// the process has ended.
    pub fn command(
        &self,
        confinement: &Confinement,
        cwd: &Path,
        command: &[OsString],
    ) -> (Vec<OsString>, Option<ProcessCgroup>) {
        let mut argv: Vec<OsString> = vec![self.bwrap.clone().into()];
        argv.extend(self.namespace_args(confinement).into_iter().map(OsString::from));
        argv.extend(mount_args(confinement, cwd));
        argv.push("--".into());
        argv.extend(self.limit_args(&confinement.limits));
        argv.extend(command.iter().cloned());
        let cgroup = confinement.limits.processes.filter(|_| is_root()).and_then(ProcessCgroup::create);
        match &cgroup {
            Some(group) => (group.enter_then(argv), cgroup),
            None => (argv, None),
        }
    }

    fn namespace_args(&self, confinement: &Confinement) -> Vec<&'static str> {
        let mut args =
            vec!["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL"];
        if confinement.network {
            args.push("--share-net");
        }
        args
    }

    fn limit_args(&self, limits: &ProcessLimits) -> Vec<OsString> {
        let Some(prlimit) = &self.prlimit else {
            if *limits != ProcessLimits::default() {
                tracing::warn!("`prlimit` was not found; the sandbox's resource limits are not applied");
            }
            return Vec::new();
        };
        let set = [
            ("--cpu", limits.cpu_secs),
            ("--as", limits.address_space_bytes),
            ("--nproc", limits.processes),
            ("--fsize", limits.file_size_bytes),
        ];
        let flags: Vec<OsString> =
            set.iter().filter_map(|(flag, value)| value.map(|v| format!("{flag}={v}").into())).collect();
        if flags.is_empty() {
            return Vec::new();
        }
        let mut args = vec![prlimit.clone().into_os_string()];
        args.extend(flags);
        args.push("--".into());
        args
    }
}

/// The bind mounts: system, selected `/etc`, `/proc`, `/dev`, private `/tmp` and home, then
/// the read-only and writable paths of `confinement`, then the working directory.
fn mount_args(confinement: &Confinement, cwd: &Path) -> Vec<OsString> {
    let mut args = Args::default();
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::read_link(path) {
            Ok(target) => args.push(["--symlink".into(), target.into_os_string(), path.into()]),
            Err(_) if path.is_dir() => args.push(["--ro-bind".into(), path.into(), path.into()]),
            Err(_) => {}
        }
    }
    for entry in ETC_ENTRIES {
        args.push(["--ro-bind-try".into(), (*entry).into(), (*entry).into()]);
    }
    args.push(["--proc".into(), "/proc".into()]);
    args.push(["--dev".into(), "/dev".into()]);
    args.push(["--tmpfs".into(), "/tmp".into()]);
    if let Some(home) = crate::env::var_os("HOME").filter(|h| Path::new(h).is_absolute() && h != "/") {
        args.push(["--tmpfs".into(), home]);
    }
    for dir in toolchain_dirs().into_iter().chain(confinement.read_only.iter().cloned()) {
        args.push(["--ro-bind-try".into(), dir.clone().into(), dir.into()]);
    }
    for dir in &confinement.writable {
        args.push(["--bind".into(), dir.into(), dir.into()]);
    }
    args.push(["--chdir".into(), cwd.into()]);
    args.0
}

/// Variables naming where toolchains live; each is readable inside when set.
const TOOLCHAIN_VARS: &[&str] =
    &["CARGO_HOME", "RUSTUP_HOME", "PYENV_ROOT", "VIRTUAL_ENV", "CONDA_PREFIX", "GOROOT", "JAVA_HOME", "NVM_DIR"];

/// What programs on `PATH` need, read-only: each `PATH` directory outside the system dirs —
/// for one under the home directory, its top directory there (`~/.pyenv` for
/// `~/.pyenv/shims`, `~/.cargo` for `~/.cargo/bin`, with `~/.rustup` beside it) — and the
/// directories named by [`TOOLCHAIN_VARS`].
fn toolchain_dirs() -> Vec<PathBuf> {
    let home = crate::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute() && h != Path::new("/"));
    let path = crate::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(&path).filter(|d| d.is_absolute() && !under_system_dir(d)) {
        let top = home.as_ref().and_then(|h| Some(h.join(dir.strip_prefix(h).ok()?.components().next()?)));
        if let (Some(home), Some(top)) = (&home, &top)
            && top.ends_with(".cargo")
        {
            dirs.push(home.join(".rustup"));
        }
        dirs.push(top.unwrap_or(dir));
    }
    dirs.extend(TOOLCHAIN_VARS.iter().filter_map(crate::env::var_os).map(PathBuf::from));
    dirs.retain(|d| d.is_absolute());
    dirs.sort();
    dirs.dedup();
    dirs
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn push<const N: usize>(&mut self, words: [OsString; N]) {
        self.0.extend(words);
    }
}

fn under_system_dir(dir: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|s| dir.starts_with(s))
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false)
}

/// A pids cgroup of one confined process tree, for a process running as root (whom
/// `RLIMIT_NPROC` does not bind); removed when dropped.
#[derive(Debug)]
pub struct ProcessCgroup {
    dir: PathBuf,
}

impl ProcessCgroup {
    /// Makes a cgroup with `pids.max = max` under the pids hierarchy (cgroup v1) or this
    /// process's own cgroup (v2), if the system lets us.
    fn create(max: u64) -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let parent = pids_hierarchy()?;
        sweep_stale(&parent);
        let name = format!("recursive-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        let group = ProcessCgroup { dir };
        std::fs::write(group.dir.join("pids.max"), max.to_string()).ok()?;
        Some(group)
    }

    /// `argv` run by a shell that first moves itself into the cgroup, so every process of the
    /// sandbox is counted from its first instruction.
    fn enter_then(&self, argv: Vec<OsString>) -> Vec<OsString> {
        let mut wrapped: Vec<OsString> = vec!["/bin/sh".into(), "-c".into(), "echo $$ > \"$0\" && exec \"$@\"".into()];
        wrapped.push(self.dir.join("cgroup.procs").into());
        wrapped.extend(argv);
        wrapped
    }
}

impl ProcessCgroup {
    /// Removes the cgroup once the processes in it have gone (they may still be dying when the
    /// sandbox's first process has ended), waiting up to two seconds.
    pub async fn remove(self) {
        for _ in 0..40 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ProcessCgroup {
    /// Removes the cgroup, or, while processes are still leaving it, has a thread retry for a
    /// few seconds.
    fn drop(&mut self) {
        if !self.dir.exists() || std::fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        let dir = self.dir.clone();
        std::thread::spawn(move || {
            for _ in 0..100 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                if std::fs::remove_dir(&dir).is_ok() {
                    return;
                }
            }
        });
    }
}

/// Removes cgroups left by processes that are gone (one that ended before its sandbox's
/// processes had left could not remove its own).
fn sweep_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = name.to_str().and_then(|n| n.strip_prefix("recursive-")).and_then(|n| n.split('-').next());
        if let Some(pid) = owner.and_then(|p| p.parse::<u32>().ok())
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Where pids cgroups can be made: the v1 pids hierarchy, or this process's v2 cgroup when it
/// has the pids controller; `None` when neither is writable.
fn pids_hierarchy() -> Option<PathBuf> {
    let v1 = Path::new("/sys/fs/cgroup/pids");
    if v1.join("pids.max").exists() || v1.join("cgroup.procs").exists() {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = own.lines().find_map(|l| l.split_once(":pids:").map(|(_, p)| p.trim_start_matches('/').to_string()));
        return Some(v1.join(rel.unwrap_or_default()));
    }
    let controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").ok()?;
    if !controllers.split_whitespace().any(|c| c == "pids") {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim_start_matches('/').to_string();
    Some(Path::new("/sys/fs/cgroup").join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_never_confines_and_says_so() {
        let plan = Plan::for_mode(SandboxMode::Off).unwrap();
        assert_eq!(plan, Plan::Unconfined("the sandbox is off".into()));
        assert_eq!(plan.describe(&Confinement::default()), "runs UNCONFINED (the sandbox is off)");
    }

    #[test]
    fn limits_become_prlimit_flags() {
        let sandbox = Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: Some("/usr/bin/prlimit".into()) };
        let limits = ProcessLimits { cpu_secs: Some(5), file_size_bytes: Some(10), ..Default::default() };
        let args = sandbox.limit_args(&limits);
        assert_eq!(args, ["/usr/bin/prlimit", "--cpu=5", "--fsize=10", "--"].map(OsString::from));
        assert!(sandbox.limit_args(&ProcessLimits::default()).is_empty());
    }

    #[test]
    fn the_command_binds_the_workspace_writable_and_hides_the_rest_of_etc() {
        let sandbox = Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: None };
        let confinement = Confinement { writable: vec!["/work/ws".into()], ..Default::default() };
        let (argv, _) = sandbox.command(&confinement, Path::new("/work/ws"), &["ls".into()]);
        let text: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let joined = text.join(" ");
        assert!(joined.contains("--bind /work/ws /work/ws"), "{joined}");
        assert!(joined.contains("--chdir /work/ws"), "{joined}");
        assert!(!joined.contains("--share-net"), "{joined}");
        assert!(!joined.contains("/etc/shadow"), "{joined}");
        assert!(!joined.contains("--ro-bind / /"), "{joined}");
        assert_eq!(text.last().map(String::as_str), Some("ls"));
    }
}

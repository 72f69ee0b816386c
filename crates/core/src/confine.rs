//! OS confinement of child processes on bubblewrap (`bwrap`): the one place that decides how a
//! command the model chose (`run_shell`) or code it wrote (the RLM's CPython worker) runs.
//!
//! A confined process sees:
//! - the system read-only: `/usr`, `/bin`, `/sbin`, `/lib*`, `/opt`, and from `/etc` only what
//!   programs need to run (users and groups, name resolution, the loader cache, certificates,
//!   alternatives, time zone) — not `/etc/shadow`, not `/root`, not other users' homes;
//! - the directories on its `PATH` and [`Confinement::read_only`] read-only, and
//!   [`Confinement::writable`] (the workspace, a scratch dir) read-write, each at its own path;
//! - of the home directory only the workspace, what is configured, and what programs on `PATH`
//!   need: each `PATH` directory itself (`~/.local/bin`, never `~/.local` with other sessions'
//!   transcripts), the libraries beside a `bin` directory, a toolchain's own parts (`~/.rustup`
//!   and cargo's `bin`, `registry` and `git` — never `~/.cargo` with `credentials.toml`; a pyenv
//!   root's shims, versions and scripts), virtualenvs with the installation they were made from,
//!   and where a program that is a symlink (pipx, `uv tool`) leads ([`interpreter_dirs`] does the
//!   same for one interpreter);
//! - a private `/tmp`, an empty private home (`$HOME` on a tmpfs) and `/dev/shm`, each capped at
//!   [`Protections::tmp_size_bytes`] when `bwrap` can size a tmpfs (0.8 and later), its own
//!   `/proc` in its own PID namespace (no view of the parent or its environment), a minimal,
//!   read-only `/dev`;
//! - the `.git/config` and `.git/hooks` of a writable directory read-only, and its `.git` pinned
//!   in place (it cannot be renamed or replaced), so a command cannot plant a hook or an
//!   `core.fsmonitor` that the user's next `git` runs outside ([`Protections::protect_git`]);
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
#[schemars(extend("x-trust" = crate::config_trust::KeyClass::scale(&["off", "auto", "required"])))]
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

/// Protections of a confined process beyond what it may reach, which callers seldom change:
/// [`Sandbox::command`] uses the defaults, [`Sandbox::command_with`] takes others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protections {
    /// Size of each private tmpfs (`/tmp`, the home directory, `/dev/shm`), so writing there
    /// cannot fill the host's memory (`None`: bubblewrap's default, half the RAM).
    pub tmp_size_bytes: Option<u64>,
    /// Keep the `.git/config` and `.git/hooks` of each writable directory read-only.
    pub protect_git: bool,
}

/// The default size of each private tmpfs.
pub const DEFAULT_TMP_SIZE_BYTES: u64 = 1024 * 1024 * 1024;

impl Default for Protections {
    fn default() -> Self {
        Self { tmp_size_bytes: Some(DEFAULT_TMP_SIZE_BYTES), protect_git: true }
    }
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
    /// Whether this `bwrap` takes `--size` (0.8 and later).
    sized_tmpfs: bool,
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
    let sized_tmpfs = takes_size(&bwrap);
    Ok(Sandbox { bwrap, prlimit: find_program("prlimit"), sized_tmpfs })
}

/// Whether `bwrap` can size a tmpfs (`--size`, bubblewrap 0.8 and later), per its `--help`.
fn takes_size(bwrap: &Path) -> bool {
    let help = std::process::Command::new(bwrap).arg("--help").env_clear().stdin(std::process::Stdio::null()).output();
    help.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("--size"))
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
    /// The command line that runs `command` (program and arguments) confined, in `cwd`, with the
    /// default [`Protections`]. Start it with the allowlisted environment; keep the returned
    /// [`ProcessCgroup`] until the process has ended.
    pub fn command(
        &self,
        confinement: &Confinement,
        cwd: &Path,
        command: &[OsString],
    ) -> (Vec<OsString>, Option<ProcessCgroup>) {
        self.command_with(confinement, &Protections::default(), cwd, command)
    }

    /// [`Sandbox::command`] with these `protections`.
    pub fn command_with(
        &self,
        confinement: &Confinement,
        protections: &Protections,
        cwd: &Path,
        command: &[OsString],
    ) -> (Vec<OsString>, Option<ProcessCgroup>) {
        let protections = Protections { tmp_size_bytes: self.tmp_size(protections.tmp_size_bytes), ..*protections };
        let mut argv: Vec<OsString> = vec![self.bwrap.clone().into()];
        argv.extend(self.namespace_args(confinement).into_iter().map(OsString::from));
        argv.extend(mount_args(confinement, &protections, cwd));
        argv.push("--".into());
        argv.extend(self.limit_args(&confinement.limits));
        argv.extend(command.iter().cloned());
        let cgroup = confinement.limits.processes.filter(|_| is_root()).and_then(ProcessCgroup::create);
        match &cgroup {
            Some(group) => (group.enter_then(argv), cgroup),
            None => (argv, None),
        }
    }

    /// The size to give each private tmpfs: `wanted`, unless this `bwrap` cannot size one (said
    /// once per process).
    fn tmp_size(&self, wanted: Option<u64>) -> Option<u64> {
        if wanted.is_some() && !self.sized_tmpfs {
            static WARNED: OnceLock<()> = OnceLock::new();
            WARNED.get_or_init(|| {
                tracing::warn!(
                    "{} cannot size a tmpfs (`--size`, bubblewrap 0.8); the sandbox's /tmp is not capped",
                    self.bwrap.display()
                )
            });
            return None;
        }
        wanted
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
/// the read-only and writable paths of `confinement`, the protected parts of `.git`, then the
/// working directory.
fn mount_args(confinement: &Confinement, protections: &Protections, cwd: &Path) -> Vec<OsString> {
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
    args.tmpfs(Path::new("/dev/shm"), protections.tmp_size_bytes);
    args.push(["--remount-ro".into(), "/dev".into()]);
    args.tmpfs(Path::new("/tmp"), protections.tmp_size_bytes);
    if let Some(home) = home_dir() {
        args.tmpfs(&home, protections.tmp_size_bytes);
    }
    for dir in toolchain_dirs().into_iter().chain(confinement.read_only.iter().cloned()) {
        args.push(["--ro-bind-try".into(), dir.clone().into(), dir.into()]);
    }
    for dir in &confinement.writable {
        args.push(["--bind".into(), dir.into(), dir.into()]);
    }
    if protections.protect_git {
        for dir in &confinement.writable {
            args.0.extend(git_protection(dir));
        }
    }
    args.push(["--chdir".into(), cwd.into()]);
    args.0
}

/// For a writable directory with a `.git` directory: `.git` bound onto itself (a mount point
/// cannot be renamed or removed, so it stays the repository), then its `config` and `hooks`
/// read-only. A missing `hooks` is made (empty) first, so none can be planted.
fn git_protection(dir: &Path) -> Vec<OsString> {
    let git = dir.join(".git");
    if !is_real_dir(&git) {
        return Vec::new();
    }
    let hooks = git.join("hooks");
    if std::fs::symlink_metadata(&hooks).is_err() {
        let _ = std::fs::create_dir(&hooks);
    }
    let mut args = Args::default();
    args.push(["--bind".into(), git.clone().into(), git.clone().into()]);
    let config = git.join("config");
    if std::fs::symlink_metadata(&config).is_ok_and(|m| m.is_file()) {
        args.push(["--ro-bind".into(), config.clone().into(), config.into()]);
    }
    if is_real_dir(&hooks) {
        args.push(["--ro-bind".into(), hooks.clone().into(), hooks.into()]);
    }
    args.0
}

/// A directory that is not a symlink.
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// The home directory, unless unset, relative or `/`.
fn home_dir() -> Option<PathBuf> {
    crate::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute() && h != Path::new("/"))
}

/// Variables naming where toolchains live; each is readable inside when set (cargo's home and
/// pyenv's root only in the parts their programs need).
const TOOLCHAIN_VARS: &[&str] =
    &["CARGO_HOME", "RUSTUP_HOME", "PYENV_ROOT", "VIRTUAL_ENV", "CONDA_PREFIX", "GOROOT", "JAVA_HOME", "NVM_DIR"];

/// What programs on `PATH` need, read-only: each `PATH` directory outside the system dirs
/// itself, with what its programs need ([`bin_dir_needs`]), and the directories named by
/// [`TOOLCHAIN_VARS`] — never the home directory or a directory above it.
fn toolchain_dirs() -> Vec<PathBuf> {
    let home = home_dir();
    let path = crate::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(&path).filter(|d| d.is_absolute() && !under_system_dir(d)) {
        dirs.extend(bin_dir_needs(&dir, home.as_deref()));
        dirs.push(dir);
    }
    for var in TOOLCHAIN_VARS {
        let Some(dir) = crate::env::var_os(var).map(PathBuf::from).filter(|d| d.is_absolute()) else { continue };
        match *var {
            "CARGO_HOME" => dirs.extend(cargo_parts(&dir, home.as_deref())),
            "PYENV_ROOT" => dirs.extend(pyenv_parts(&dir)),
            "VIRTUAL_ENV" => dirs.extend(venv_dirs(&dir.join("bin"))),
            _ => dirs.push(dir),
        }
    }
    mountable(dirs, home.as_deref())
}

/// `dirs` sorted, without duplicates, paths under the system dirs or under another of them,
/// relative paths, and the home directory or anything above it.
fn mountable(mut dirs: Vec<PathBuf>, home: Option<&Path>) -> Vec<PathBuf> {
    dirs.retain(|d| d.is_absolute() && !under_system_dir(d) && !home.is_some_and(|h| h.starts_with(d)));
    dirs.sort();
    dirs.dedup();
    let mut kept: Vec<PathBuf> = Vec::with_capacity(dirs.len());
    for dir in dirs {
        if !kept.last().is_some_and(|k| dir.starts_with(k)) {
            kept.push(dir);
        }
    }
    kept
}

/// What the programs of the `PATH` directory `dir` need besides it: a cargo home's parts for
/// its `bin`, a pyenv root's parts for one of its shims directories, a virtualenv for its `bin`,
/// the `lib` beside a `bin` directory (`pip --user`'s packages, a node installation's modules),
/// and where the symlinks in it lead ([`link_needs`]).
fn bin_dir_needs(dir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut needs = Vec::new();
    let cargo_home = crate::env::var_os("CARGO_HOME").map(PathBuf::from);
    if let Some(parent) = dir.parent().filter(|_| dir.ends_with("bin"))
        && (parent.ends_with(".cargo") || cargo_home.as_deref() == Some(parent))
    {
        needs.extend(cargo_parts(parent, home));
    }
    if let Some(root) = pyenv_root_of(dir) {
        needs.extend(pyenv_parts(&root));
    }
    needs.extend(venv_dirs(dir));
    if let Some(parent) = dir.parent().filter(|p| dir.ends_with("bin") && !home.is_some_and(|h| h.starts_with(p))) {
        needs.push(parent.join("lib"));
    }
    needs.extend(link_needs(dir));
    needs
}

/// What cargo and the rustup proxies in `cargo_home/bin` read: the registry and git checkouts
/// (not `credentials.toml`, not `config.toml`) and the rustup home with the toolchains.
fn cargo_parts(cargo_home: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let rustup = crate::env::var_os("RUSTUP_HOME").map(PathBuf::from).or_else(|| Some(home?.join(".rustup")));
    ["bin", "registry", "git"].iter().map(|p| cargo_home.join(p)).chain(rustup).collect()
}

/// The pyenv root a directory is in: `$PYENV_ROOT`, else the nearest ancestor named `.pyenv`.
fn pyenv_root_of(dir: &Path) -> Option<PathBuf> {
    let root = crate::env::var_os("PYENV_ROOT").map(PathBuf::from);
    if let Some(root) = root.filter(|r| dir.starts_with(r)) {
        return Some(root);
    }
    dir.ancestors().find(|a| a.ends_with(".pyenv")).map(Path::to_path_buf)
}

/// What pyenv's shims run: its scripts, plugins and hooks, the installed versions and the
/// global version file.
fn pyenv_parts(root: &Path) -> Vec<PathBuf> {
    ["shims", "bin", "libexec", "plugins", "pyenv.d", "versions", "version"].iter().map(|p| root.join(p)).collect()
}

/// Most entries of one `PATH` directory looked at for symlinks.
const MAX_LINKS_PER_DIR: usize = 4096;

/// Where the symlinks in `dir` that lead out of it go (pipx's and `uv tool`'s programs are
/// symlinks into virtualenvs): the virtualenvs on the way, or else the executable they end at.
fn link_needs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut needs = Vec::new();
    for entry in entries.take(MAX_LINKS_PER_DIR).flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let chain = symlink_chain(&entry.path());
        let venvs: Vec<PathBuf> = chain.iter().filter_map(|hop| hop.parent()).flat_map(venv_dirs).collect();
        if !venvs.is_empty() {
            needs.extend(venvs);
        } else if let Some(end) = chain.last().filter(|end| !end.starts_with(dir) && is_executable(end)) {
            needs.push(end.clone());
        }
    }
    needs
}

/// What running the Python interpreter `interpreter` (a path, or a name looked up on `PATH`)
/// needs, read-only: the virtualenvs on its symlink chain with the installations they were made
/// from, pyenv's parts for one of its shims, the installation the chain ends in (`<prefix>` of
/// `<prefix>/bin/python3.x` with a `<prefix>/lib/python3.x`) or else that executable alone, and
/// the interpreter's own path when none of these holds it (bound as the file it leads to).
/// Nothing under the system dirs, never the home directory or above: `~/bin/python3` mounts the
/// interpreter and its environment, not `~`.
pub fn interpreter_dirs(interpreter: &Path) -> Vec<PathBuf> {
    let given = if interpreter.components().count() > 1 {
        std::path::absolute(interpreter).unwrap_or_else(|_| interpreter.to_path_buf())
    } else {
        match find_program(&interpreter.to_string_lossy()) {
            Some(found) => found,
            None => return Vec::new(),
        }
    };
    let chain = symlink_chain(&given);
    let mut dirs: Vec<PathBuf> = chain.iter().filter_map(|hop| hop.parent()).flat_map(venv_dirs).collect();
    let shims = given.parent().filter(|d| d.ends_with("shims")).and_then(pyenv_root_of);
    dirs.extend(shims.iter().flat_map(|root| pyenv_parts(root)));
    if let Some(end) = chain.last() {
        dirs.push(python_installation(end).unwrap_or_else(|| end.clone()));
    }
    if !dirs.iter().any(|d| given.starts_with(d)) {
        dirs.push(given);
    }
    mountable(dirs, home_dir().as_deref())
}

/// The installation an interpreter binary belongs to: `<prefix>` for `<prefix>/bin/<name>`
/// when `<prefix>/lib` has a `python*` directory.
fn python_installation(binary: &Path) -> Option<PathBuf> {
    let prefix = binary.parent().filter(|b| b.ends_with("bin"))?.parent()?;
    let lib = std::fs::read_dir(prefix.join("lib")).ok()?;
    lib.flatten().any(|e| e.file_name().to_string_lossy().starts_with("python")).then(|| prefix.to_path_buf())
}

/// Most symlinks followed on one chain.
const MAX_HOPS: usize = 40;

/// `path` and every path its symlinks lead to, in order (the last is not a symlink, or the
/// chain was cut after [`MAX_HOPS`]).
fn symlink_chain(path: &Path) -> Vec<PathBuf> {
    let mut chain = vec![path.to_path_buf()];
    let mut cur = path.to_path_buf();
    for _ in 0..MAX_HOPS {
        let Ok(target) = std::fs::read_link(&cur) else { break };
        let base = cur.parent().map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
        cur = normalize(&base.map(|b| b.join(&target)).unwrap_or(target));
        chain.push(cur.clone());
    }
    chain
}

/// `path` with `.` and `..` resolved lexically (a symlink's target is taken from the physical
/// directory of the link, so only symlinked directories inside the target itself can differ).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// For a directory holding a virtualenv's programs (`pyvenv.cfg` in it or its parent): the
/// virtualenv, and the installation its `home` names (whose `bin` holds the base interpreter).
fn venv_dirs(bin: &Path) -> Vec<PathBuf> {
    let Some(root) = [Some(bin), bin.parent()].into_iter().flatten().find(|d| d.join("pyvenv.cfg").is_file()) else {
        return Vec::new();
    };
    let base = std::fs::read_to_string(root.join("pyvenv.cfg")).ok().and_then(|cfg| {
        let home = cfg.lines().find_map(|l| Some(l.split_once('=')?).filter(|(k, _)| k.trim() == "home"))?.1.trim();
        let home = PathBuf::from(home);
        Some(if home.ends_with("bin") { home.parent()?.to_path_buf() } else { home })
    });
    [root.to_path_buf()].into_iter().chain(base).collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn push<const N: usize>(&mut self, words: [OsString; N]) {
        self.0.extend(words);
    }

    /// A tmpfs at `dir`, of `size` bytes when given.
    fn tmpfs(&mut self, dir: &Path, size: Option<u64>) {
        if let Some(size) = size {
            self.push(["--size".into(), size.to_string().into()]);
        }
        self.push(["--tmpfs".into(), dir.into()]);
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
        let sandbox =
            Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: Some("/usr/bin/prlimit".into()), sized_tmpfs: true };
        let limits = ProcessLimits { cpu_secs: Some(5), file_size_bytes: Some(10), ..Default::default() };
        let args = sandbox.limit_args(&limits);
        assert_eq!(args, ["/usr/bin/prlimit", "--cpu=5", "--fsize=10", "--"].map(OsString::from));
        assert!(sandbox.limit_args(&ProcessLimits::default()).is_empty());
    }

    #[test]
    fn the_command_binds_the_workspace_writable_and_hides_the_rest_of_etc() {
        let sandbox = Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: None, sized_tmpfs: true };
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

    fn joined(argv: &[OsString]) -> String {
        argv.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn each_private_tmpfs_is_capped_and_dev_is_read_only() {
        let sandbox = Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: None, sized_tmpfs: true };
        let (argv, _) = sandbox.command(&Confinement::default(), Path::new("/"), &["ls".into()]);
        let joined = joined(&argv);
        let size = format!("--size {DEFAULT_TMP_SIZE_BYTES}");
        assert!(joined.contains(&format!("{size} --tmpfs /tmp")), "{joined}");
        assert!(joined.contains(&format!("{size} --tmpfs /dev/shm --remount-ro /dev")), "{joined}");
    }

    #[test]
    fn a_bwrap_that_cannot_size_a_tmpfs_leaves_it_uncapped() {
        let sandbox = Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: None, sized_tmpfs: false };
        let (argv, _) = sandbox.command(&Confinement::default(), Path::new("/"), &["ls".into()]);
        let joined = joined(&argv);
        assert!(!joined.contains("--size"), "{joined}");
        assert!(joined.contains("--tmpfs /tmp"), "{joined}");
    }

    /// Runs `script` with `sh` in the real sandbox, `dir` writable; its exit status and output.
    fn run_confined(dir: &Path, protections: &Protections, script: &str) -> (bool, String) {
        let sandbox = sandbox().expect("bubblewrap is needed for this test (./scripts/test installs it)");
        let confinement = Confinement { writable: vec![dir.to_path_buf()], ..Default::default() };
        let command = ["sh".into(), "-c".into(), script.into()];
        let (argv, _) = sandbox.command_with(&confinement, protections, dir, &command);
        let out = std::process::Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    #[test]
    fn filling_the_private_tmp_home_or_dev_stops_at_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let protections = Protections { tmp_size_bytes: Some(8 * 1024 * 1024), ..Default::default() };
        for target in ["/tmp/fill", "/dev/shm/fill", "\"$HOME/fill\""] {
            let script = format!("dd if=/dev/zero of={target} bs=1M count=16 2>&1 && echo FILLED");
            let (ok, out) = run_confined(dir.path(), &protections, &script);
            assert!(!ok && !out.contains("FILLED"), "{target}: {out}");
            assert!(out.contains("No space left on device"), "{target}: {out}");
        }
        let (ok, out) = run_confined(dir.path(), &protections, "echo x > /dev/planted");
        assert!(!ok && out.contains("Read-only file system"), "{out}");
        let (ok, out) = run_confined(dir.path(), &protections, "echo kept > /dev/null && echo fine");
        assert!(ok && out.contains("fine"), "{out}");
    }

    #[test]
    fn git_config_and_hooks_are_bound_read_only_over_the_writable_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("objects")).unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        let sandbox = Sandbox { bwrap: "/usr/bin/bwrap".into(), prlimit: None, sized_tmpfs: true };
        let confinement = Confinement { writable: vec![dir.path().to_path_buf()], ..Default::default() };
        let (argv, _) = sandbox.command(&confinement, dir.path(), &["ls".into()]);
        let (g, ws) = (git.display(), dir.path().display());
        let expected =
            format!("--bind {ws} {ws} --bind {g} {g} --ro-bind {g}/config {g}/config --ro-bind {g}/hooks {g}/hooks");
        assert!(joined(&argv).contains(&expected), "{}", joined(&argv));
        assert!(git.join("hooks").is_dir(), "a missing hooks directory is made, so none can be planted");

        let off = Protections { protect_git: false, ..Default::default() };
        let (argv, _) = sandbox.command_with(&confinement, &off, dir.path(), &["ls".into()]);
        assert!(!joined(&argv).contains(".git"), "{}", joined(&argv));
    }

    /// `<root>/bin/python3` -> `<root>/venv/bin/python3` -> `<root>/base/bin/python3.11`, with
    /// the virtualenv's `pyvenv.cfg` naming `<root>/base/bin`.
    fn fake_interpreter(root: &Path) -> PathBuf {
        use std::os::unix::fs::symlink;
        std::fs::create_dir_all(root.join("base/bin")).unwrap();
        std::fs::create_dir_all(root.join("base/lib/python3.11")).unwrap();
        std::fs::write(root.join("base/bin/python3.11"), "").unwrap();
        std::fs::create_dir_all(root.join("venv/bin")).unwrap();
        std::fs::write(root.join("venv/pyvenv.cfg"), format!("home = {}\n", root.join("base/bin").display())).unwrap();
        symlink(root.join("base/bin/python3.11"), root.join("venv/bin/python3")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        symlink("../venv/bin/python3", root.join("bin/python3")).unwrap();
        std::fs::write(root.join("secret.txt"), "secret").unwrap();
        root.join("bin/python3")
    }

    #[test]
    fn an_interpreter_mounts_its_virtualenv_and_base_not_the_directory_above_its_bin() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let python = fake_interpreter(&root);
        let dirs = interpreter_dirs(&python);
        assert_eq!(dirs, vec![root.join("base"), root.join("bin/python3"), root.join("venv")]);
        let venv_python = interpreter_dirs(&root.join("venv/bin/python3"));
        assert_eq!(venv_python, vec![root.join("base"), root.join("venv")]);
    }

    #[test]
    fn the_home_directory_and_what_is_above_it_are_never_mounted() {
        let home = Path::new("/home/someone");
        let dirs = vec![home.into(), "/home".into(), "/".into(), home.join(".rustup"), "/usr/lib".into(), "rel".into()];
        assert_eq!(mountable(dirs, Some(home)), vec![home.join(".rustup")]);
        let nested = vec!["/opt2/a/b".into(), "/opt2/a".into(), "/opt2/ab".into()];
        assert_eq!(mountable(nested, None), vec![PathBuf::from("/opt2/a"), "/opt2/ab".into()]);
    }
}

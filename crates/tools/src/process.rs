//! Process groups of the children this crate starts (`run_shell` commands, MCP servers): a
//! guard per group kills it when dropped, and a registry of the live groups lets a process that
//! is about to exit without unwinding kill them all.

use std::collections::BTreeSet;
use std::sync::Mutex;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Process groups of the children running now (commands, MCP servers), so a process about to
/// exit at once (SIGTERM, a second Ctrl-C) can kill them all: destructors do not run on `exit`.
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Kills the process group of every child still running (`run_shell` commands, MCP servers).
/// For a process about to exit without unwinding; otherwise each group's guard kills it.
pub fn kill_running_commands() {
    let groups = RUNNING.lock().map(|mut g| std::mem::take(&mut *g)).unwrap_or_default();
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Kills a process group when dropped (or asked); registered in [`RUNNING`] meanwhile.
pub(crate) struct GroupKiller {
    pgid: Option<Pid>,
}

impl GroupKiller {
    /// Guards the group led by `pid` (a child started as a process-group leader).
    pub(crate) fn new(pid: Option<u32>) -> Self {
        let pgid = pid.and_then(|id| i32::try_from(id).ok());
        if let (Some(id), Ok(mut running)) = (pgid, RUNNING.lock()) {
            running.insert(id);
        }
        Self { pgid: pgid.map(Pid::from_raw) }
    }

    /// Sends `signal` to the group, unless it was killed already.
    pub(crate) fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, signal);
        }
    }

    /// Kills the group, once.
    pub(crate) fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            if let Ok(mut running) = RUNNING.lock() {
                running.remove(&pgid.as_raw());
            }
            // ESRCH (nothing left in the group) is the common, harmless case.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

//! One runner per durable run kept in files (a goal's log, a session's transcript): the run's
//! lock file beside its record, held for as long as this process runs it. Like a store's lease
//! ([`recursive_store::Lease`]) a second runner is refused while the first lives, and a holder
//! that died (killed) is taken over at once — the kernel drops a dead process's lock. The lock
//! file is opened without following links and only as a regular file, so a link or a FIFO
//! planted at its place blocks nothing and leads nowhere.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use crate::ConfigError;

/// This process's hold on running a file-kept durable run; released when dropped.
#[derive(Debug)]
pub struct RunnerLock {
    _file: File,
    path: PathBuf,
}

impl RunnerLock {
    /// Takes the lock of the run whose record is `record` (`<record>.lock`); `what` names the
    /// run in the refusal ("goal log …").
    pub fn take(record: &Path, what: &str) -> Result<RunnerLock, ConfigError> {
        let mut name = record.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".lock");
        let path = record.with_file_name(name);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ConfigError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let file = open_regular(&path).map_err(|e| ConfigError(format!("cannot lock {what}: {e}")))?;
        match file.try_lock() {
            Ok(()) => Ok(RunnerLock { _file: file, path }),
            Err(std::fs::TryLockError::WouldBlock) => Err(ConfigError(format!(
                "{what} is being run by another process; wait for it to end (lock {})",
                path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(ConfigError(format!("cannot lock {what}: {e}"))),
        }
    }

    /// Where the lock is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens (creating) `path` for writing without following a link and without blocking on a
/// FIFO; only a regular file is accepted.
fn open_regular(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(format!("{} is not a regular file", path.display())),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_runner_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("g.jsonl");
        let first = RunnerLock::take(&log, "goal log g").unwrap();
        let second = RunnerLock::take(&log, "goal log g").unwrap_err().to_string();
        assert!(second.contains("goal log g is being run by another process"), "{second}");
        drop(first);
        assert!(RunnerLock::take(&log, "goal log g").is_ok(), "free again once the holder let go");
    }

    #[test]
    fn a_link_planted_as_the_lock_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("g.jsonl");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join("g.jsonl.lock")).unwrap();
        assert!(RunnerLock::take(&log, "goal log g").is_err());
        assert!(!target.exists(), "nothing was created through the link");
    }
}

//! Checkpoints of the files the tools change, so a person can take back the edits of a turn
//! (`/undo` in chat). A [`Workspace`](crate::Workspace) and its clones share one journal; it
//! records only between [`EditJournal::begin`] calls, keeping each changed file's content from
//! before its first change in the checkpoint. `write_file` and `apply_patch` record every path
//! they may write; changes made by shell commands are not seen here.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Files larger than this are noted but not kept (their change cannot be undone).
const MAX_KEPT_BYTES: u64 = 8 * 1024 * 1024;

/// Checkpoints kept; the oldest go first.
const MAX_CHECKPOINTS: usize = 50;

/// Bytes kept over all checkpoints; past it the oldest checkpoints go (the latest stays).
const MAX_TOTAL_BYTES: usize = 64 * 1024 * 1024;

/// A file as it was before a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Saved {
    /// Its content.
    Bytes(Vec<u8>),
    /// It did not exist.
    Absent,
    /// Too large (or unreadable) to keep.
    NotKept(String),
}

/// The files one turn changed, each as it was before.
#[derive(Debug, Default)]
struct Checkpoint {
    /// Its id, as [`EditJournal::begin`] returned it.
    id: u64,
    files: Vec<(PathBuf, Saved)>,
}

impl Checkpoint {
    /// Bytes of content it keeps.
    fn bytes(&self) -> usize {
        self.files.iter().map(|(_, s)| if let Saved::Bytes(b) = s { b.len() } else { 0 }).sum()
    }
}

/// The checkpoints of one workspace.
#[derive(Debug, Default)]
pub struct EditJournal {
    checkpoints: Mutex<Option<Vec<Checkpoint>>>,
    /// The id of the last checkpoint begun.
    last_id: std::sync::atomic::AtomicU64,
    /// The id of the newest checkpoint dropped for the limits (0: none).
    dropped: std::sync::atomic::AtomicU64,
}

/// What an undo did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Undone {
    /// Files given back their earlier content.
    pub restored: Vec<PathBuf>,
    /// Files the turn created, removed.
    pub removed: Vec<PathBuf>,
    /// Files that could not be restored, and why.
    pub failed: Vec<(PathBuf, String)>,
}

impl EditJournal {
    /// Starts a checkpoint: changes from now on are kept in it (and recording starts). Returns
    /// its id, which [`EditJournal::rewind`] takes.
    pub fn begin(&self) -> u64 {
        let id = self.last_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if let Ok(mut c) = self.checkpoints.lock() {
            let list = c.get_or_insert_with(Vec::new);
            if list.len() >= MAX_CHECKPOINTS {
                self.drop_oldest(list);
            }
            list.push(Checkpoint { id, files: Vec::new() });
        }
        id
    }

    /// Keeps `path` as it is now, before a tool changes it (once per checkpoint).
    pub(crate) fn before_change(&self, path: &Path) {
        let Ok(mut c) = self.checkpoints.lock() else { return };
        let Some(list) = c.as_mut() else { return };
        let Some(current) = list.last_mut() else { return };
        if current.files.iter().any(|(p, _)| p == path) {
            return;
        }
        current.files.push((path.to_path_buf(), snapshot(path)));
        while list.len() > 1 && list.iter().map(Checkpoint::bytes).sum::<usize>() > MAX_TOTAL_BYTES {
            self.drop_oldest(list);
        }
    }

    /// Drops the oldest checkpoint of `list` (past the limits), remembering its id.
    fn drop_oldest(&self, list: &mut Vec<Checkpoint>) {
        if !list.is_empty() {
            let gone = list.remove(0);
            self.dropped.fetch_max(gone.id, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Takes back the changes of the latest checkpoint that has any, newest first; `None`
    /// when there is nothing to undo.
    pub fn undo(&self) -> Option<Undone> {
        let checkpoint = {
            let mut c = self.checkpoints.lock().ok()?;
            let list = c.as_mut()?;
            while list.last().is_some_and(|cp| cp.files.is_empty()) {
                list.pop();
            }
            list.pop()?
        };
        Some(restore(checkpoint.files.into_iter().rev()))
    }

    /// Takes back every change since checkpoint `id` began (its own and later ones), each file
    /// given its content from before the first of them; the checkpoints go. `None` when nothing
    /// kept since then changed a file. A file whose checkpoint was dropped (past the limits) is
    /// not restored: [`Rewound::complete`] says whether all were kept.
    pub fn rewind(&self, id: u64) -> Option<Rewound> {
        let (taken, complete) = {
            let mut c = self.checkpoints.lock().ok()?;
            let list = c.as_mut()?;
            let complete = self.dropped.load(std::sync::atomic::Ordering::Relaxed) < id;
            let at = list.iter().position(|cp| cp.id >= id)?;
            (list.split_off(at), complete)
        };
        let earliest = earliest(taken.iter());
        if earliest.is_empty() {
            return None;
        }
        Some(Rewound { undone: restore(earliest.into_iter()), complete })
    }

    /// Every file changed since recording began (as far as the checkpoints kept reach), with its
    /// content from before its first change, in the order first changed.
    pub fn changes(&self) -> Vec<(PathBuf, Saved)> {
        let Ok(c) = self.checkpoints.lock() else { return Vec::new() };
        c.as_ref().map(|list| earliest(list.iter())).unwrap_or_default()
    }
}

/// What a rewind did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rewound {
    /// The files restored and removed.
    pub undone: Undone,
    /// Whether every checkpoint since the one rewound to was still kept.
    pub complete: bool,
}

/// Each path of `checkpoints` (oldest first) with its content before its first change.
fn earliest<'a>(checkpoints: impl Iterator<Item = &'a Checkpoint>) -> Vec<(PathBuf, Saved)> {
    let mut out: Vec<(PathBuf, Saved)> = Vec::new();
    for (path, saved) in checkpoints.flat_map(|cp| cp.files.iter()) {
        if !out.iter().any(|(p, _)| p == path) {
            out.push((path.clone(), saved.clone()));
        }
    }
    out
}

/// Gives each file its saved content (or removes it when it did not exist).
fn restore(files: impl Iterator<Item = (PathBuf, Saved)>) -> Undone {
    let mut done = Undone::default();
    for (path, saved) in files {
        let outcome = match &saved {
            Saved::Bytes(bytes) => crate::fs::write_contents(&path, bytes).map(|()| &mut done.restored),
            Saved::Absent => match std::fs::remove_file(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                other => other.map(|()| &mut done.removed),
            },
            Saved::NotKept(why) => {
                done.failed.push((path, why.clone()));
                continue;
            }
        };
        match outcome {
            Ok(list) => list.push(path),
            Err(e) => done.failed.push((path, e.to_string())),
        }
    }
    done
}

/// The file at `path` as it is now.
fn snapshot(path: &Path) -> Saved {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Saved::Absent,
        Err(e) => return Saved::NotKept(format!("it could not be read: {e}")),
    };
    if !meta.is_file() {
        return Saved::NotKept("it is not a regular file".into());
    }
    if meta.len() > MAX_KEPT_BYTES {
        return Saved::NotKept(format!("it was larger than {MAX_KEPT_BYTES} bytes"));
    }
    match std::fs::read(path) {
        Ok(bytes) => Saved::Bytes(bytes),
        Err(e) => Saved::NotKept(format!("it could not be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_restores_changed_files_and_removes_created_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        std::fs::write(&a, "before").unwrap();
        let journal = EditJournal::default();
        journal.before_change(&a);
        assert!(journal.undo().is_none(), "nothing is recorded before a checkpoint begins");
        journal.begin();
        journal.before_change(&a);
        std::fs::write(&a, "after").unwrap();
        journal.before_change(&a);
        std::fs::write(&a, "after again").unwrap();
        journal.before_change(&b);
        std::fs::write(&b, "new").unwrap();
        journal.begin();
        let undone = journal.undo().unwrap();
        assert_eq!(undone.restored, std::slice::from_ref(&a));
        assert_eq!(undone.removed, std::slice::from_ref(&b));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "before", "the content before the turn's first change");
        assert!(!b.exists());
        assert!(journal.undo().is_none());
    }

    #[test]
    fn rewind_takes_back_every_turn_since_and_changes_lists_the_first_content() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        std::fs::write(&a, "v0").unwrap();
        let journal = EditJournal::default();
        let first = journal.begin();
        journal.before_change(&a);
        std::fs::write(&a, "v1").unwrap();
        let second = journal.begin();
        journal.before_change(&a);
        std::fs::write(&a, "v2").unwrap();
        journal.before_change(&b);
        std::fs::write(&b, "new").unwrap();
        let third = journal.begin();
        assert_eq!(journal.changes(), vec![(a.clone(), Saved::Bytes(b"v0".to_vec())), (b.clone(), Saved::Absent)]);
        assert!(journal.rewind(third).is_none(), "the third turn changed nothing");
        let rewound = journal.rewind(second).unwrap();
        assert!(rewound.complete);
        assert_eq!(rewound.undone.restored, std::slice::from_ref(&a));
        assert_eq!(rewound.undone.removed, std::slice::from_ref(&b));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "v1");
        assert!(!b.exists());
        assert_eq!(journal.changes(), vec![(a.clone(), Saved::Bytes(b"v0".to_vec()))]);
        assert!(journal.rewind(first).unwrap().complete);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "v0");
        assert!(journal.changes().is_empty());
        // Past the limit of checkpoints the oldest go: a rewind to one of them says it is partial.
        let oldest = journal.begin();
        for _ in 0..MAX_CHECKPOINTS {
            journal.begin();
        }
        journal.before_change(&a);
        std::fs::write(&a, "v9").unwrap();
        let rewound = journal.rewind(oldest).unwrap();
        assert!(!rewound.complete);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "v0");
    }
}

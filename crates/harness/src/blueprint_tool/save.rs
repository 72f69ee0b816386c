//! A blueprint's file, `.recursive/blueprints/NAME.toml` under the workspace, written without
//! following links: each directory under the root (`.recursive`, `blueprints`) and the file
//! itself is opened relative to the one before it with `O_NOFOLLOW`, so a symbolic link planted
//! at any of them is refused, never followed. A file of the same name is kept unless the caller
//! asked to replace it; a replacement is written beside it and renamed over it, so nothing is
//! ever written into the old file (a hard link to another file stays untouched).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// What saving did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Saved {
    /// A new file.
    Created,
    /// An existing file of that name was replaced (the caller asked to).
    Replaced,
    /// The file already held exactly this text.
    Unchanged,
}

/// Why a blueprint was not saved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SaveError {
    /// A link (or something else than a directory or a regular file) stands where the path goes.
    #[error("`{0}` is a symbolic link or not a {1}; blueprints are never saved through links")]
    NotFollowed(String, &'static str),
    /// A different file of that name exists and replacing it was not asked for.
    #[error("`{0}` already exists")]
    Exists(String),
    /// The file system refused.
    #[error("`{0}`: {1}")]
    Io(String, std::io::Error),
}

/// Writes `text` as `file` in the directory `dirs` (joined) under `root`, opening every
/// component below `root` without following links.
pub(crate) fn save(root: &Path, dirs: &[&str], file: &str, text: &str, replace: bool) -> Result<Saved, SaveError> {
    let mut shown = String::new();
    let mut dir = open_dir(None, root, &root.display().to_string())?;
    for name in dirs {
        shown = if shown.is_empty() { (*name).to_string() } else { format!("{shown}/{name}") };
        match mkdirat(&dir, *name, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(SaveError::Io(shown, e.into())),
        }
        dir = open_dir(Some(&dir), Path::new(name), &shown)?;
    }
    let shown = if shown.is_empty() { file.to_string() } else { format!("{shown}/{file}") };
    let stat = match fstatat(&dir, file, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => return create(&dir, file, text, &shown).map(|()| Saved::Created),
        Err(e) => return Err(SaveError::Io(shown, e.into())),
        Ok(stat) => stat,
    };
    if !is_regular(&stat) {
        return Err(SaveError::NotFollowed(shown, "regular file"));
    }
    if read_existing(&dir, file, text.len(), &shown)? == text.as_bytes() {
        return Ok(Saved::Unchanged);
    }
    if !replace {
        return Err(SaveError::Exists(shown));
    }
    replace_with(&dir, file, text, &shown).map(|()| Saved::Replaced)
}

fn is_regular(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
}

/// Opens a directory: `path` under `parent` without following a link, or the root as given.
fn open_dir(parent: Option<&OwnedFd>, path: &Path, shown: &str) -> Result<OwnedFd, SaveError> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let opened = match parent {
        Some(parent) => openat(parent, path, flags | OFlag::O_NOFOLLOW, Mode::empty()),
        None => nix::fcntl::open(path, flags, Mode::empty()),
    };
    opened.map_err(|e| match e {
        Errno::ELOOP | Errno::ENOTDIR => SaveError::NotFollowed(shown.to_string(), "directory"),
        e => SaveError::Io(shown.to_string(), e.into()),
    })
}

/// Creates `file` (refused if anything, even a dangling link, has its name) and writes `text`.
fn create(dir: &OwnedFd, file: &str, text: &str, shown: &str) -> Result<(), SaveError> {
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir, file, flags, Mode::from_bits_truncate(0o644)).map_err(|e| match e {
        Errno::EEXIST => SaveError::Exists(shown.to_string()),
        e => SaveError::Io(shown.to_string(), e.into()),
    })?;
    let written = std::fs::File::from(fd).write_all(text.as_bytes());
    written.map_err(|e| {
        let _ = unlinkat(dir, file, UnlinkatFlags::NoRemoveDir);
        SaveError::Io(shown.to_string(), e)
    })
}

/// The bytes of the regular file `file`, up to `len + 1` of them (enough to tell whether it
/// holds a text of `len` bytes).
fn read_existing(dir: &OwnedFd, file: &str, len: usize, shown: &str) -> Result<Vec<u8>, SaveError> {
    let io = |e: Errno| SaveError::Io(shown.to_string(), e.into());
    // Non-blocking: a FIFO swapped in after the check above cannot hang the open.
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match openat(dir, file, flags, Mode::empty()) {
        Err(Errno::ELOOP) => return Err(SaveError::NotFollowed(shown.to_string(), "regular file")),
        other => other.map_err(io)?,
    };
    if !is_regular(&fstat(&fd).map_err(io)?) {
        return Err(SaveError::NotFollowed(shown.to_string(), "regular file"));
    }
    let limit = u64::try_from(len).unwrap_or(u64::MAX).saturating_add(1);
    let mut bytes = Vec::new();
    std::fs::File::from(fd).take(limit).read_to_end(&mut bytes).map_err(|e| SaveError::Io(shown.to_string(), e))?;
    Ok(bytes)
}

/// Writes `text` to a new file beside `file` and renames it over `file`.
fn replace_with(dir: &OwnedFd, file: &str, text: &str, shown: &str) -> Result<(), SaveError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let fresh = format!(".{file}.{}-{}.new", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    create(dir, &fresh, text, shown)?;
    renameat(dir, fresh.as_str(), dir, file).map_err(|e| {
        let _ = unlinkat(dir, fresh.as_str(), UnlinkatFlags::NoRemoveDir);
        SaveError::Io(shown.to_string(), e.into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIRS: [&str; 2] = [".recursive", "blueprints"];

    fn saved(root: &Path) -> String {
        std::fs::read_to_string(root.join(".recursive/blueprints/g.toml")).unwrap()
    }

    #[test]
    fn creates_the_directories_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(save(dir.path(), &DIRS, "g.toml", "one", false).unwrap(), Saved::Created);
        assert_eq!(saved(dir.path()), "one");
    }

    #[test]
    fn the_same_text_again_is_unchanged_and_another_needs_replace() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &DIRS, "g.toml", "one", false).unwrap();
        assert_eq!(save(dir.path(), &DIRS, "g.toml", "one", false).unwrap(), Saved::Unchanged);
        assert!(matches!(save(dir.path(), &DIRS, "g.toml", "two", false), Err(SaveError::Exists(_))));
        assert_eq!(saved(dir.path()), "one");
        assert_eq!(save(dir.path(), &DIRS, "g.toml", "two", true).unwrap(), Saved::Replaced);
        assert_eq!(saved(dir.path()), "two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join(".recursive/blueprints")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_link_at_any_component_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("g.toml"), "kept").unwrap();
        // The state directory itself, the blueprints directory, the file.
        std::os::unix::fs::symlink(&target, dir.path().join(".recursive")).unwrap();
        let err = save(dir.path(), &DIRS, "g.toml", "x", true).unwrap_err();
        assert!(matches!(err, SaveError::NotFollowed(ref p, _) if p == ".recursive"), "{err}");
        std::fs::remove_file(dir.path().join(".recursive")).unwrap();
        std::fs::create_dir(dir.path().join(".recursive")).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(".recursive/blueprints")).unwrap();
        let err = save(dir.path(), &DIRS, "g.toml", "x", true).unwrap_err();
        assert!(matches!(err, SaveError::NotFollowed(ref p, _) if p == ".recursive/blueprints"), "{err}");
        std::fs::remove_file(dir.path().join(".recursive/blueprints")).unwrap();
        std::fs::create_dir(dir.path().join(".recursive/blueprints")).unwrap();
        std::os::unix::fs::symlink(target.join("g.toml"), dir.path().join(".recursive/blueprints/g.toml")).unwrap();
        for replace in [false, true] {
            let err = save(dir.path(), &DIRS, "g.toml", "x", replace).unwrap_err();
            assert!(matches!(err, SaveError::NotFollowed(..)), "{err}");
        }
        assert_eq!(std::fs::read_to_string(target.join("g.toml")).unwrap(), "kept");
    }

    #[test]
    fn replacing_never_writes_into_a_hard_linked_file() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &DIRS, "g.toml", "one", false).unwrap();
        std::fs::write(dir.path().join("secret"), "kept").unwrap();
        std::fs::remove_file(dir.path().join(".recursive/blueprints/g.toml")).unwrap();
        std::fs::hard_link(dir.path().join("secret"), dir.path().join(".recursive/blueprints/g.toml")).unwrap();
        assert_eq!(save(dir.path(), &DIRS, "g.toml", "two", true).unwrap(), Saved::Replaced);
        assert_eq!(std::fs::read_to_string(dir.path().join("secret")).unwrap(), "kept");
        assert_eq!(saved(dir.path()), "two");
    }
}

//! The workspace sandbox: every path a tool receives is resolved inside one root directory
//! before anything is read or written.
//!
//! [`Workspace::resolve`] walks the path one component at a time the way the operating system
//! would: relative paths start at the root, `.` is skipped, `..` goes to the physical parent,
//! and every symlink met on the way is followed to its canonical target. The part of the path
//! that does not exist yet (a file about to be written, a directory about to be created) is
//! appended to its longest existing ancestor, so a symlinked parent directory cannot smuggle a
//! new file out of the root. The result must lie inside the root; otherwise the call is refused
//! with an error naming the path (and the symlink, when one led outside).
//!
//! The check happens before the tool touches the file, so what remains is the usual race
//! between checking and using a path: a process that swaps a directory for a symlink in that
//! instant could redirect the operation. The sandbox protects against paths a model writes,
//! not against a hostile process running beside the agent.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused or could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxError {
    /// The path resolves to a place outside the workspace.
    #[error("path `{path}` is outside the workspace `{root}`")]
    OutsideWorkspace {
        /// The path as given.
        path: String,
        /// The workspace root.
        root: String,
    },
    /// A symlink on the path points outside the workspace.
    #[error("path `{path}` goes through symlink `{link}`, which points outside the workspace `{root}`")]
    SymlinkEscape {
        /// The path as given.
        path: String,
        /// The symlink, relative to the workspace root where possible.
        link: String,
        /// The workspace root.
        root: String,
    },
    /// The path cannot be used at all (NUL byte, dangling symlink, unreadable directory).
    #[error("invalid path `{path}`: {reason}")]
    InvalidPath {
        /// The path as given (escaped for display).
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The workspace root itself is unusable.
    #[error("workspace root `{root}`: {reason}")]
    BadRoot {
        /// The root as given.
        root: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A workspace: the one directory tree the tools may touch. Its clones share one
/// [`EditJournal`](crate::EditJournal).
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    journal: std::sync::Arc<crate::EditJournal>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for Workspace {}

/// How many symlinks one resolution may follow before it is treated as a loop.
const MAX_SYMLINKS: usize = 40;

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory; the root is
    /// canonicalised (symlinks in it resolved) once, here.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, SandboxError> {
        let given = root.as_ref();
        let bad = |reason: String| SandboxError::BadRoot { root: given.display().to_string(), reason };
        let root = std::fs::canonicalize(given).map_err(|e| bad(e.to_string()))?;
        if !root.is_dir() {
            return Err(bad("not a directory".into()));
        }
        Ok(Self { root, journal: Default::default() })
    }

    /// The checkpoints of the files the tools change here.
    pub fn journal(&self) -> &crate::EditJournal {
        &self.journal
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where Recursive keeps its own state inside the workspace (`<root>/.recursive`).
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(".recursive")
    }

    /// The state file `name` under `<root>/.recursive`, resolved as a tool's path is: a
    /// `.recursive` (or a file in it) that a command turned into a symlink leading outside the
    /// workspace is refused, so the host never writes its state there. Resolve it right before
    /// opening the file.
    pub fn state_path(&self, name: &str) -> Result<PathBuf, SandboxError> {
        self.resolve(&format!(".recursive/{name}"))
    }

    /// Resolves a path a tool received to an absolute path inside the workspace, or refuses
    /// it. Relative paths are taken from the root; absolute paths must point inside it. The
    /// empty path and `.` are the root itself. Nothing is created, read or written.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, SandboxError> {
        let shown = || path.escape_debug().to_string();
        if path.contains('\0') {
            return Err(SandboxError::InvalidPath { path: shown(), reason: "contains a NUL byte".into() });
        }
        let given = Path::new(path);
        // `cur` is always an existing, canonical directory (or file) path; `tail` holds the
        // components below it that do not exist yet.
        let mut cur = if given.is_absolute() { PathBuf::from("/") } else { self.root.clone() };
        let mut tail: Vec<OsString> = Vec::new();
        let mut escaping_link: Option<PathBuf> = None;
        let mut followed = 0usize;
        for comp in given.components() {
            match comp {
                Component::Prefix(_) | Component::RootDir => {
                    cur = PathBuf::from("/");
                    tail.clear();
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    if tail.pop().is_none() {
                        cur.pop();
                    }
                }
                Component::Normal(name) => {
                    if !tail.is_empty() {
                        tail.push(name.to_os_string());
                        continue;
                    }
                    let candidate = cur.join(name);
                    match std::fs::symlink_metadata(&candidate) {
                        Ok(meta) if meta.file_type().is_symlink() => {
                            followed += 1;
                            if followed > MAX_SYMLINKS {
                                return Err(SandboxError::InvalidPath {
                                    path: shown(),
                                    reason: "too many levels of symbolic links".into(),
                                });
                            }
                            match std::fs::canonicalize(&candidate) {
                                Ok(target) => {
                                    if !target.starts_with(&self.root) {
                                        escaping_link = Some(candidate.clone());
                                    }
                                    cur = target;
                                }
                                Err(e) => {
                                    let inside = candidate.starts_with(&self.root);
                                    let link = self.display_relative(&candidate);
                                    let reason = if e.kind() == ErrorKind::NotFound {
                                        format!("symlink `{link}` points to something that does not exist")
                                    } else {
                                        format!("symlink `{link}` cannot be followed: {e}")
                                    };
                                    return Err(if inside {
                                        SandboxError::InvalidPath { path: shown(), reason }
                                    } else {
                                        SandboxError::OutsideWorkspace { path: shown(), root: self.root_str() }
                                    });
                                }
                            }
                        }
                        Ok(_) => cur = candidate,
                        Err(_) => tail.push(name.to_os_string()),
                    }
                }
            }
        }
        if !cur.starts_with(&self.root) {
            return Err(match escaping_link {
                Some(link) => SandboxError::SymlinkEscape {
                    path: shown(),
                    link: self.display_relative(&link),
                    root: self.root_str(),
                },
                None => SandboxError::OutsideWorkspace { path: shown(), root: self.root_str() },
            });
        }
        let mut out = cur;
        out.extend(tail);
        Ok(out)
    }

    /// A path shown relative to the root (`.` for the root itself); paths outside the root
    /// are shown as they are.
    pub fn display_relative(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    fn root_str(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _outside: tempfile::TempDir,
        _base: tempfile::TempDir,
        ws: Workspace,
        outside: PathBuf,
    }

    /// A workspace with `src/main.rs`, a symlink to a directory outside (`out_link`), one to a
    /// file outside (`secret_link`), one inside (`in_link` -> `src`) and a dangling one.
    fn fixture() -> Fixture {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        symlink(outside.path(), root.join("out_link")).unwrap();
        symlink(outside.path().join("secret.txt"), root.join("secret_link")).unwrap();
        symlink(root.join("src"), root.join("in_link")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        let ws = Workspace::new(&root).unwrap();
        let outside_path = std::fs::canonicalize(outside.path()).unwrap();
        Fixture { _outside: outside, _base: base, ws, outside: outside_path }
    }

    #[test]
    fn relative_path_resolves_under_root() {
        let f = fixture();
        assert_eq!(f.ws.resolve("src/main.rs").unwrap(), f.ws.root().join("src/main.rs"));
    }

    #[test]
    fn empty_and_dot_are_the_root() {
        let f = fixture();
        assert_eq!(f.ws.resolve("").unwrap(), f.ws.root());
        assert_eq!(f.ws.resolve(".").unwrap(), f.ws.root());
        assert_eq!(f.ws.resolve("./src/..").unwrap(), f.ws.root());
    }

    #[test]
    fn denies_parent_dir_escape() {
        let f = fixture();
        let err = f.ws.resolve("../../etc/passwd").unwrap_err();
        assert!(matches!(err, SandboxError::OutsideWorkspace { .. }), "{err}");
        assert!(err.to_string().contains("../../etc/passwd"), "{err}");
    }

    #[test]
    fn denies_dotdot_hidden_inside_a_path() {
        let f = fixture();
        assert!(f.ws.resolve("src/../../x").is_err());
        assert!(f.ws.resolve("src/new/../../../x").is_err());
    }

    #[test]
    fn allows_dotdot_that_stays_inside() {
        let f = fixture();
        assert_eq!(f.ws.resolve("src/../src/main.rs").unwrap(), f.ws.root().join("src/main.rs"));
        assert_eq!(f.ws.resolve("new/dir/../file").unwrap(), f.ws.root().join("new/file"));
    }

    #[test]
    fn denies_absolute_path_outside() {
        let f = fixture();
        let err = f.ws.resolve("/etc/passwd").unwrap_err();
        assert!(matches!(err, SandboxError::OutsideWorkspace { .. }), "{err}");
        assert!(f.ws.resolve("/").is_err());
    }

    #[test]
    fn allows_absolute_path_inside() {
        let f = fixture();
        let abs = f.ws.root().join("src/main.rs");
        assert_eq!(f.ws.resolve(abs.to_str().unwrap()).unwrap(), abs);
    }

    #[test]
    fn denies_symlink_to_outside_directory() {
        let f = fixture();
        let err = f.ws.resolve("out_link/secret.txt").unwrap_err();
        assert!(matches!(err, SandboxError::SymlinkEscape { .. }), "{err}");
        assert!(err.to_string().contains("out_link"), "{err}");
    }

    #[test]
    fn denies_symlink_to_outside_file() {
        let f = fixture();
        assert!(matches!(f.ws.resolve("secret_link").unwrap_err(), SandboxError::SymlinkEscape { .. }));
    }

    #[test]
    fn denies_new_file_under_symlinked_parent_outside() {
        let f = fixture();
        let err = f.ws.resolve("out_link/new_dir/new_file.txt").unwrap_err();
        assert!(matches!(err, SandboxError::SymlinkEscape { .. }), "{err}");
        assert!(!f.outside.join("new_dir").exists());
    }

    #[test]
    fn follows_symlink_that_stays_inside() {
        let f = fixture();
        assert_eq!(f.ws.resolve("in_link/main.rs").unwrap(), f.ws.root().join("src/main.rs"));
    }

    #[test]
    fn denies_dangling_symlink() {
        let f = fixture();
        let err = f.ws.resolve("dangling").unwrap_err();
        assert!(matches!(err, SandboxError::InvalidPath { .. }), "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn denies_nul_byte() {
        let f = fixture();
        let err = f.ws.resolve("src/a\0b").unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
    }

    #[test]
    fn denies_symlink_loop() {
        let f = fixture();
        symlink(f.ws.root().join("loop_b"), f.ws.root().join("loop_a")).unwrap();
        symlink(f.ws.root().join("loop_a"), f.ws.root().join("loop_b")).unwrap();
        assert!(f.ws.resolve("loop_a/x").is_err());
    }

    #[test]
    fn missing_root_is_an_error() {
        let err = Workspace::new("/definitely/not/here").unwrap_err();
        assert!(matches!(err, SandboxError::BadRoot { .. }));
    }

    #[test]
    fn root_given_through_a_symlink_is_canonicalised() {
        let f = fixture();
        let other = tempfile::tempdir().unwrap();
        let link = other.path().join("ws_link");
        symlink(f.ws.root(), &link).unwrap();
        let ws = Workspace::new(&link).unwrap();
        assert_eq!(ws.root(), f.ws.root());
        assert_eq!(ws.resolve(link.join("src").to_str().unwrap()).unwrap(), f.ws.root().join("src"));
    }

    #[test]
    fn unicode_names_resolve_inside() {
        let f = fixture();
        assert_eq!(f.ws.resolve("données/ü.txt").unwrap(), f.ws.root().join("données/ü.txt"));
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn segment() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("..".to_string()),
                Just(".".to_string()),
                Just("".to_string()),
                Just("src".to_string()),
                Just("main.rs".to_string()),
                Just("out_link".to_string()),
                Just("secret_link".to_string()),
                Just("in_link".to_string()),
                Just("dangling".to_string()),
                Just("ws".to_string()),
                Just("ü".to_string()),
                Just("a\0b".to_string()),
                "[a-z.]{1,4}",
                "\\PC{1,3}",
            ]
        }

        fn prefix(kind: u8, root: &str, outside: &str) -> String {
            match kind % 7 {
                0 => String::new(),
                1 => "/".into(),
                2 => "/etc/".into(),
                3 => "//".into(),
                4 => format!("{root}/"),
                5 => format!("{outside}/"),
                _ => format!("{root}/../"),
            }
        }

        /// The longest existing ancestor of `p`, canonicalised.
        fn existing_ancestor(p: &Path) -> PathBuf {
            let mut cur = p.to_path_buf();
            loop {
                if let Ok(c) = std::fs::canonicalize(&cur) {
                    return c;
                }
                if !cur.pop() {
                    return cur;
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn resolved_paths_never_leave_the_root(kind in any::<u8>(), segs in proptest::collection::vec(segment(), 0..8)) {
                let f = fixture();
                let root = f.ws.root().display().to_string();
                let outside = f.outside.display().to_string();
                let path = format!("{}{}", prefix(kind, &root, &outside), segs.join("/"));
                if let Ok(resolved) = f.ws.resolve(&path) {
                    prop_assert!(resolved.starts_with(f.ws.root()), "{path:?} -> {resolved:?}");
                    prop_assert!(
                        existing_ancestor(&resolved).starts_with(f.ws.root()),
                        "{path:?} -> {resolved:?} escapes through its existing ancestor"
                    );
                    prop_assert!(!resolved.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)));
                }
                prop_assert_eq!(std::fs::read_dir(&f.outside).unwrap().count(), 1, "resolving created something outside");
            }
        }
    }
}

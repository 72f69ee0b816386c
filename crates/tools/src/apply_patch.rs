//! The V4A `apply_patch` format: parse a patch that adds, deletes, updates and moves files, and apply it.
//!
//! A patch looks like this:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/hello.txt
//! +Hello
//! *** Delete File: old.txt
//! *** Update File: src/main.rs
//! *** Move to: src/app.rs
//! @@ fn main() {
//! -    println!("hi");
//! +    println!("hello");
//! *** End Patch
//! ```
//!
//! Grammar (marker lines are recognised after trimming surrounding whitespace):
//!
//! ```text
//! start:  "*** Begin Patch" LF hunk+ "*** End Patch" LF?
//! hunk:   "*** Add File: " path LF ("+" line LF)+
//!       | "*** Delete File: " path LF
//!       | "*** Update File: " path LF ("*** Move to: " path LF)? change
//! change: (("@@" | "@@ " anchor) LF | ("+" | "-" | " ") line LF)+ ("*** End of File" LF)?
//! ```
//!
//! How an update is located:
//!
//! - chunks are separated by `@@` lines; the first chunk may omit its `@@`;
//! - `@@ text` anchors the chunk after a line matching (or else containing) `text`; several `@@` lines in a
//!   row narrow the position step by step; a unified-diff header such as `@@ -3,7 +3,8 @@` counts as a bare `@@`;
//! - the old lines (context and `-` lines) are searched after the anchor and after the previous chunk, first
//!   exactly, then ignoring trailing whitespace, then ignoring surrounding whitespace, then also treating
//!   typographic dashes, quotes and spaces as their ASCII forms;
//! - a chunk of only `+` lines is appended at the end of the file (an `@@` anchor does not move it);
//!   `*** End of File` pins a chunk to the end of the file;
//! - a lone blank line between the lines of a chunk is an empty context line (models often drop the space).
//!
//! How files are written: a patch is applied hunk by hunk (a failure leaves earlier hunks applied and the error
//! lists them); `Add File` and `Move to` overwrite an existing destination and create missing parent
//! directories; updated files always end with a newline; as codex does, the lines a chunk adds and a final
//! line that had no newline take the file's first line ending (LF, CRLF or a bare CR; LF for a file without
//! one), while every untouched line — a chunk's context lines included — keeps its own;
//! a UTF-8 byte-order mark is kept. Files must be UTF-8.
//!
//! Paths are mapped to real paths by a resolver supplied by the caller (e.g. a workspace sandbox that refuses
//! paths outside the workspace); [`resolve_in_dir`] is the plain resolver relative to a base directory.

mod apply;
mod parser;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use apply::apply_parsed_patch;
pub use parser::parse_patch;

/// A parsed patch: the file operations in the order they appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The file operations, in patch order.
    pub hunks: Vec<Hunk>,
}

impl Patch {
    /// Every path the patch touches (sources and move destinations), in patch order, as written in the patch.
    pub fn paths(&self) -> Vec<&str> {
        let mut paths = Vec::new();
        for hunk in &self.hunks {
            paths.push(hunk.path());
            if let Hunk::Update { move_to: Some(dest), .. } = hunk {
                paths.push(dest.as_str());
            }
        }
        paths
    }
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hunk {
    /// `*** Add File:` — create (or overwrite) a file with the given contents.
    Add {
        /// The path as written in the patch.
        path: String,
        /// The full new contents (each `+` line followed by a newline).
        contents: String,
        /// 1-based line number of the header in the patch.
        line: usize,
    },
    /// `*** Delete File:` — remove a file.
    Delete {
        /// The path as written in the patch.
        path: String,
        /// 1-based line number of the header in the patch.
        line: usize,
    },
    /// `*** Update File:` — change a file in place, optionally moving it.
    Update {
        /// The path as written in the patch.
        path: String,
        /// `*** Move to:` destination, if any.
        move_to: Option<String>,
        /// The changes, in file order.
        chunks: Vec<Chunk>,
        /// 1-based line number of the header in the patch.
        line: usize,
    },
}

impl Hunk {
    /// The (source) path as written in the patch.
    pub fn path(&self) -> &str {
        match self {
            Hunk::Add { path, .. } | Hunk::Delete { path, .. } | Hunk::Update { path, .. } => path,
        }
    }

    /// 1-based line number of the hunk header in the patch.
    pub fn line(&self) -> usize {
        match self {
            Hunk::Add { line, .. } | Hunk::Delete { line, .. } | Hunk::Update { line, .. } => *line,
        }
    }
}

/// One located change inside an `Update File` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The `@@` anchors, outermost first; empty when the chunk has none (bare `@@` or no `@@`).
    pub anchors: Vec<String>,
    /// The chunk's lines in patch order.
    pub lines: Vec<ChangeLine>,
    /// The chunk ends with `*** End of File`: it must match at the end of the file.
    pub end_of_file: bool,
    /// 1-based line number in the patch where the chunk starts.
    pub line: usize,
}

impl Chunk {
    /// The lines the chunk expects in the file (context and removed lines).
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                ChangeLine::Context(t) | ChangeLine::Remove(t) => Some(t.as_str()),
                ChangeLine::Add(_) => None,
            })
            .collect()
    }

    /// The lines the chunk leaves in the file (context and added lines).
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                ChangeLine::Context(t) | ChangeLine::Add(t) => Some(t.as_str()),
                ChangeLine::Remove(_) => None,
            })
            .collect()
    }
}

/// One line of a chunk, without its `+`/`-`/` ` prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeLine {
    /// ` line` — must be present, is kept.
    Context(String),
    /// `-line` — must be present, is removed.
    Remove(String),
    /// `+line` — is inserted.
    Add(String),
}

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileChange {
    /// The file was created (or overwritten) by `Add File`.
    Added,
    /// The file was updated (and possibly moved).
    Modified,
    /// The file was deleted.
    Deleted,
}

impl FileChange {
    /// The one-letter code used in reports: `A`, `M` or `D`.
    pub fn letter(self) -> char {
        match self {
            FileChange::Added => 'A',
            FileChange::Modified => 'M',
            FileChange::Deleted => 'D',
        }
    }
}

/// One applied file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedChange {
    /// What happened to the file.
    pub kind: FileChange,
    /// The path as written in the patch (the destination for a moved file).
    pub path: String,
}

impl fmt::Display for AppliedChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.letter(), self.path)
    }
}

/// The files a patch changed, in hunk order. `Display` gives one `A path` / `M path` / `D path` line per change
/// (lines separated by `\n`, no trailing newline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchReport {
    /// The applied changes, in hunk order.
    pub changes: Vec<AppliedChange>,
}

impl fmt::Display for PatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, change) in self.changes.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{change}")?;
        }
        Ok(())
    }
}

/// Why a patch could not be parsed or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The patch text is malformed; nothing was applied.
    #[error("invalid patch (line {line}): {message}")]
    Parse {
        /// 1-based line number in the patch.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A file operation failed (missing file, context not found, I/O error, path refused by the resolver, ...).
    #[error("{path}: {problem}")]
    File {
        /// The path as written in the patch.
        path: String,
        /// What went wrong (mentions the patch line where useful).
        problem: String,
        /// 1-based patch line of the hunk or chunk involved, when known.
        line: Option<usize>,
    },
    /// A hunk failed after earlier hunks had already been applied (they stay applied).
    #[error("{error}\napplied before the failure: {}", applied_list(.applied))]
    PartiallyApplied {
        /// The hunks applied before the failure.
        applied: PatchReport,
        /// The failure.
        #[source]
        error: Box<PatchError>,
    },
}

impl PatchError {
    /// The changes that were applied before the failure (empty unless [`PatchError::PartiallyApplied`]).
    pub fn applied(&self) -> &[AppliedChange] {
        match self {
            PatchError::PartiallyApplied { applied, .. } => &applied.changes,
            _ => &[],
        }
    }
}

fn applied_list(report: &PatchReport) -> String {
    report.changes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Parses `text` and applies it hunk by hunk, mapping each patch path (relative or absolute) to a real path
/// with `resolve`. A resolver error refuses that hunk (the message becomes the problem text).
pub fn apply_patch(text: &str, resolve: &dyn Fn(&str) -> Result<PathBuf, String>) -> Result<PatchReport, PatchError> {
    let patch = parse_patch(text)?;
    apply_parsed_patch(&patch, resolve)
}

/// Parses `text` and applies it with paths resolved relative to `dir` (see [`resolve_in_dir`]).
pub fn apply_patch_in_dir(text: &str, dir: &Path) -> Result<PatchReport, PatchError> {
    let resolve = resolve_in_dir(dir);
    apply_patch(text, &resolve)
}

/// The plain resolver: a relative patch path is joined to `base`, an absolute one is used as is. It does not
/// confine paths to `base`; sandboxing callers supply their own resolver.
pub fn resolve_in_dir(base: &Path) -> impl Fn(&str) -> Result<PathBuf, String> + use<> {
    let base = base.to_path_buf();
    move |path: &str| {
        if path.is_empty() {
            return Err("empty path".to_string());
        }
        Ok(base.join(path))
    }
}

//! Applying a parsed [`Patch`] to files: locating chunks, keeping line endings, writing hunk by hunk.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{AppliedChange, ChangeLine, Chunk, FileChange, Hunk, Patch, PatchError, PatchReport};

/// Applies `patch` hunk by hunk, resolving every patch path with `resolve`. On failure the hunks applied so far
/// stay applied and are listed in [`PatchError::PartiallyApplied`].
pub fn apply_parsed_patch(
    patch: &Patch,
    resolve: &dyn Fn(&str) -> Result<PathBuf, String>,
) -> Result<PatchReport, PatchError> {
    let mut report = PatchReport::default();
    for hunk in &patch.hunks {
        match apply_hunk(hunk, resolve) {
            Ok(change) => report.changes.push(change),
            Err(error) if report.changes.is_empty() => return Err(error),
            Err(error) => return Err(PatchError::PartiallyApplied { applied: report, error: Box::new(error) }),
        }
    }
    Ok(report)
}

fn file_error(path: &str, line: Option<usize>, problem: impl Into<String>) -> PatchError {
    PatchError::File { path: path.to_string(), problem: problem.into(), line }
}

fn io_problem(action: &str, err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::NotFound => format!("could not {action}: no such file or directory"),
        io::ErrorKind::PermissionDenied => format!("could not {action}: permission denied"),
        _ => format!("could not {action}: {err}"),
    }
}

fn resolve_path(
    resolve: &dyn Fn(&str) -> Result<PathBuf, String>,
    path: &str,
    line: usize,
) -> Result<PathBuf, PatchError> {
    resolve(path).map_err(|reason| file_error(path, Some(line), reason))
}

fn apply_hunk(hunk: &Hunk, resolve: &dyn Fn(&str) -> Result<PathBuf, String>) -> Result<AppliedChange, PatchError> {
    match hunk {
        Hunk::Add { path, contents, line } => {
            let real = resolve_path(resolve, path, *line)?;
            write_file(&real, contents.as_bytes()).map_err(|problem| file_error(path, Some(*line), problem))?;
            Ok(AppliedChange { kind: FileChange::Added, path: path.clone() })
        }
        Hunk::Delete { path, line } => {
            let real = resolve_path(resolve, path, *line)?;
            delete_file(&real).map_err(|problem| file_error(path, Some(*line), problem))?;
            Ok(AppliedChange { kind: FileChange::Deleted, path: path.clone() })
        }
        Hunk::Update { path, move_to, chunks, line } => {
            let real = resolve_path(resolve, path, *line)?;
            let dest = match move_to {
                Some(dest) => Some((dest, resolve_path(resolve, dest, *line)?)),
                None => None,
            };
            let original = read_text(&real).map_err(|problem| file_error(path, Some(*line), problem))?;
            let updated =
                update_text(&original, chunks).map_err(|(problem, at)| file_error(path, Some(at), problem))?;
            match dest {
                None => {
                    write_file(&real, updated.as_bytes()).map_err(|problem| file_error(path, Some(*line), problem))?;
                    Ok(AppliedChange { kind: FileChange::Modified, path: path.clone() })
                }
                Some((dest, dest_real)) => {
                    write_file(&dest_real, updated.as_bytes())
                        .map_err(|problem| file_error(dest, Some(*line), problem))?;
                    if dest_real != real {
                        fs::remove_file(&real).map_err(|e| {
                            file_error(
                                path,
                                Some(*line),
                                io_problem(&format!("remove it after moving it to {dest}"), &e),
                            )
                        })?;
                    }
                    Ok(AppliedChange { kind: FileChange::Modified, path: dest.clone() })
                }
            }
        }
    }
}

/// Writes `bytes` to `path`, creating missing parent directories and replacing an existing file.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if path.is_dir() {
        return Err("is a directory, not a file; it cannot be written".to_string());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| io_problem("create its parent directory", &e))?;
    }
    crate::fs::write_contents(path, bytes).map_err(|e| io_problem("write the file", &e))
}

fn delete_file(path: &Path) -> Result<(), String> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err("cannot delete: the file does not exist".to_string());
        }
        Err(e) => return Err(io_problem("inspect the file to delete", &e)),
    };
    if meta.is_dir() {
        return Err("cannot delete: it is a directory; Delete File only removes files".to_string());
    }
    fs::remove_file(path).map_err(|e| io_problem("delete the file", &e))
}

fn read_text(path: &Path) -> Result<String, String> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err("cannot update: the file does not exist".to_string());
        }
        Err(_) if path.is_dir() => return Err("cannot update: it is a directory, not a file".to_string()),
        Err(e) => return Err(io_problem("read the file to update", &e)),
    };
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "cannot update: the file is not valid UTF-8 text (invalid byte at offset {}); apply_patch only edits UTF-8 \
             files",
            e.utf8_error().valid_up_to()
        )
    })
}

/// A line ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Lf,
    CrLf,
    /// A bare CR (old Mac files, and lines some tools write): a line ending too, as codex reads it.
    Cr,
}

impl Ending {
    fn as_str(self) -> &'static str {
        match self {
            Ending::Lf => "\n",
            Ending::CrLf => "\r\n",
            Ending::Cr => "\r",
        }
    }
}

/// A line of a file: its text and its ending (`None` only for a last line without a newline).
#[derive(Debug, Clone, Copy)]
struct FileLine<'a> {
    text: &'a str,
    ending: Option<Ending>,
}

/// The lines of a text, each ending at LF, CRLF or a bare CR.
fn split_lines(text: &str) -> Vec<FileLine<'_>> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let (ending, width) = match (bytes[i], bytes.get(i + 1)) {
            (b'\r', Some(b'\n')) => (Ending::CrLf, 2),
            (b'\r', _) => (Ending::Cr, 1),
            (b'\n', _) => (Ending::Lf, 1),
            _ => {
                i += 1;
                continue;
            }
        };
        lines.push(FileLine { text: &text[start..i], ending: Some(ending) });
        i += width;
        start = i;
    }
    if start < text.len() {
        lines.push(FileLine { text: &text[start..], ending: None });
    }
    lines
}

/// The ending lines written by a patch take: the file's first line ending (as codex,
/// rustfmt and Ruff pick a file's style), LF for a file without one.
fn preferred_ending(lines: &[FileLine<'_>]) -> Ending {
    lines.iter().find_map(|l| l.ending).unwrap_or(Ending::Lf)
}

/// Where one chunk applies: `old_len` original lines from `start` are replaced according to `chunk.lines`.
struct Replacement<'c> {
    start: usize,
    old_len: usize,
    chunk: &'c Chunk,
}

/// Applies `chunks` to `original`; on failure returns the problem and the patch line of the failing chunk.
pub(super) fn update_text(original: &str, chunks: &[Chunk]) -> Result<String, (String, usize)> {
    const BOM: &str = "\u{feff}";
    let (bom, body) = match original.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", original),
    };
    let lines = split_lines(body);
    let texts: Vec<&str> = lines.iter().map(|l| l.text).collect();
    let preferred = preferred_ending(&lines);

    let mut replacements = Vec::with_capacity(chunks.len());
    let mut cursor = 0usize;
    for chunk in chunks {
        let replacement = locate(&texts, chunk, cursor)?;
        // An addition appended at the end of the file does not move the search position.
        if replacement.old_len > 0 || replacement.start < texts.len() {
            cursor = replacement.start + replacement.old_len;
        }
        replacements.push(replacement);
    }
    // Pure additions at the end of the file may precede later chunks in patch order.
    replacements.sort_by_key(|r| r.start);

    let mut out: Vec<(&str, Option<Ending>)> = Vec::with_capacity(lines.len() + 8);
    let mut pos = 0usize;
    for r in &replacements {
        for line in &lines[pos..r.start] {
            out.push((line.text, line.ending));
        }
        pos = r.start;
        emit_chunk(&lines, r, &mut out, preferred);
        pos += r.old_len;
    }
    for line in &lines[pos..] {
        out.push((line.text, line.ending));
    }

    let mut result = String::with_capacity(body.len() + 64);
    result.push_str(bom);
    for (text, ending) in out {
        result.push_str(text);
        result.push_str(ending.unwrap_or(preferred).as_str());
    }
    Ok(result)
}

/// Emits the lines of one replacement: its context lines as the file has them (text and ending: an untouched
/// line keeps its ending, as codex does) and its added lines with the preferred ending.
fn emit_chunk<'a>(
    lines: &[FileLine<'a>],
    r: &Replacement<'a>,
    out: &mut Vec<(&'a str, Option<Ending>)>,
    preferred: Ending,
) {
    let mut k = r.start;
    for change in &r.chunk.lines {
        match change {
            ChangeLine::Context(_) => {
                out.push((lines[k].text, lines[k].ending));
                k += 1;
            }
            ChangeLine::Remove(_) => k += 1,
            ChangeLine::Add(text) => out.push((text.as_str(), Some(preferred))),
        }
    }
}

/// Finds where `chunk` applies, searching from `cursor` (after the previous chunk).
fn locate<'c>(lines: &[&str], chunk: &'c Chunk, cursor: usize) -> Result<Replacement<'c>, (String, usize)> {
    let mut from = cursor;
    let mut anchor_at = None;
    for anchor in &chunk.anchors {
        match find_anchor(lines, anchor, from) {
            Some(i) => {
                anchor_at = Some(i);
                from = i + 1;
            }
            None => {
                let problem = if find_anchor(lines, anchor, 0).is_some() {
                    format!(
                        "the '@@ {anchor}' anchor of the change at patch line {} is only found before the position \
                         where this change must start (changes must follow file order)",
                        chunk.line
                    )
                } else {
                    format!("could not find the line '@@ {anchor}' (change at patch line {})", chunk.line)
                };
                return Err((problem, chunk.line));
            }
        }
    }

    let old = chunk.old_lines();
    if old.is_empty() {
        // A chunk of only `+` lines appends at the end of the file, anchored or not.
        return Ok(Replacement { start: lines.len(), old_len: 0, chunk });
    }

    let found = seek(lines, &old, from, chunk.end_of_file)
        // The anchor line itself is often repeated as the first old line.
        .or_else(|| anchor_at.and_then(|a| seek(lines, &old, a, chunk.end_of_file).filter(|&i| i == a)));
    if let Some(start) = found {
        return Ok(Replacement { start, old_len: old.len(), chunk });
    }

    let shown: String = old.iter().map(|l| format!("\n{l}")).collect();
    let problem = if chunk.end_of_file {
        if seek(lines, &old, from, false).is_some() {
            format!(
                "the lines of the change at patch line {} are in the file but not at its end ('*** End of File'):{shown}",
                chunk.line
            )
        } else {
            format!(
                "could not find the lines of the change at patch line {} at the end of the file:{shown}",
                chunk.line
            )
        }
    } else if from > 0 && seek(lines, &old, 0, false).is_some() {
        format!(
            "the lines of the change at patch line {} are only found before the position where this change must \
             start (after its '@@' anchor and the previous change):{shown}",
            chunk.line
        )
    } else {
        format!("could not find the lines of the change at patch line {}:{shown}", chunk.line)
    };
    Err((problem, chunk.line))
}

/// Line comparisons from strict to lenient; a search tries every position with one before the next.
const MATCHERS: [fn(&str, &str) -> bool; 4] = [
    |a, b| a == b,
    |a, b| a.trim_end() == b.trim_end(),
    |a, b| a.trim() == b.trim(),
    |a, b| normalized_eq(a.trim(), b.trim()),
];

/// Finds `pattern` as consecutive lines at or after `from`; with `at_end`, only where it ends the file.
fn seek(lines: &[&str], pattern: &[&str], from: usize, at_end: bool) -> Option<usize> {
    let last_start = lines.len().checked_sub(pattern.len())?;
    if from > last_start {
        return None;
    }
    let starts = if at_end { last_start..=last_start } else { from..=last_start };
    MATCHERS.iter().find_map(|same| starts.clone().find(|&i| pattern.iter().zip(&lines[i..]).all(|(p, l)| same(l, p))))
}

/// Finds the anchor line at or after `from`: a whole-line match first (exact, then more lenient), then a line
/// containing the anchor text.
fn find_anchor(lines: &[&str], anchor: &str, from: usize) -> Option<usize> {
    if from >= lines.len() {
        return None;
    }
    seek(lines, &[anchor], from, false).or_else(|| {
        let needle = anchor.trim();
        let normalized_needle = normalize(needle);
        (from..lines.len())
            .find(|&i| lines[i].contains(needle))
            .or_else(|| (from..lines.len()).find(|&i| normalize(lines[i]).contains(&normalized_needle)))
    })
}

/// Maps typographic punctuation and spaces to ASCII so that `“x” — y` matches `"x" - y`.
fn normalize_char(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

fn normalize(s: &str) -> String {
    s.chars().map(normalize_char).collect()
}

fn normalized_eq(a: &str, b: &str) -> bool {
    a.chars().map(normalize_char).eq(b.chars().map(normalize_char))
}

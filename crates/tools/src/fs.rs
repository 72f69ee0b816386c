//! File tools: `read_file` (numbered lines, paged, capped, binary refused), `write_file`
//! (create or overwrite, parents created) and `list_dir` (a tree honouring `.gitignore`).
//! Every path goes through [`Workspace::resolve`] before the file is touched, and every write
//! through `write_contents`, which never writes through another hard link of the file.

use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use recursive_core::{PathScreen, ToolContext, ToolError, TypedTool, path_arguments};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::{ListConfig, ReadConfig};
use crate::sandbox::Workspace;
use crate::truncate::{clip_chars, prefix_at_boundary};

/// Writes `bytes` as the whole content of the file at `path` (inside the workspace). A file
/// with other hard links — one may be a file outside the workspace that someone linked in —
/// is not written through: the content goes to a new file that takes its name (with its
/// permissions), and the other links keep the old content.
pub(crate) fn write_contents(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let linked = std::fs::symlink_metadata(path).ok().filter(|m| m.is_file() && m.nlink() > 1);
    let Some(old) = linked else { return std::fs::write(path, bytes) };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let fresh = path.with_file_name(format!(".{name}.recursive-{}", std::process::id()));
    let written = std::fs::write(&fresh, bytes)
        .and_then(|()| std::fs::set_permissions(&fresh, old.permissions()))
        .and_then(|()| std::fs::rename(&fresh, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&fresh);
    }
    written
}

/// Bytes inspected to decide whether a file is binary.
const SNIFF_BYTES: usize = 8 * 1024;

/// Resolves a path for a tool, turning a sandbox refusal into a denial the model reads.
pub(crate) fn resolve(ws: &Workspace, path: &str) -> Result<PathBuf, ToolError> {
    ws.resolve(path).map_err(|e| ToolError::Denied(e.to_string()))
}

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ToolError::failed(format!("internal error: {e}")))?
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path of the file, relative to the workspace root.
    pub path: String,
    /// First line to return, counting from 1. Default: 1.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Number of lines to return. Default: 2000.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Reads a text file with line numbers.
#[derive(Debug, Clone)]
pub struct ReadFile {
    ws: Workspace,
    config: ReadConfig,
}

impl ReadFile {
    /// The tool for this workspace.
    pub fn new(ws: Workspace, config: ReadConfig) -> Self {
        Self { ws, config }
    }
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;

    fn name(&self) -> &str {
        "read_file"
    }

    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        path_arguments(arguments, &["path"], None)
    }

    fn description(&self) -> String {
        format!(
            "Read a text file in the workspace. Returns the lines prefixed with their 1-based line numbers \
             (`number<TAB>text`). Use `offset` (first line, 1-based) and `limit` (number of lines, default {}) to \
             read a part of a long file; when the output is cut, a note at the end says which `offset` to use \
             next. At most {} bytes are returned per call. Binary files are refused.",
            self.config.default_lines, self.config.max_bytes
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn run(&self, args: ReadFileArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let path = resolve(&self.ws, &args.path)?;
        let shown = self.ws.display_relative(&path);
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(self.config.default_lines).max(1);
        let config = self.config.clone();
        blocking(move || read_numbered(&path, &shown, offset, limit, &config)).await
    }
}

fn read_numbered(path: &Path, shown: &str, offset: usize, limit: usize, cfg: &ReadConfig) -> Result<String, ToolError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(shown, &e))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!("`{shown}` is a directory; use list_dir to see its entries")));
    }
    if !meta.is_file() {
        return Err(ToolError::failed(format!("`{shown}` is not a regular file (a device, socket or pipe)")));
    }
    let mut file = std::fs::File::open(path).map_err(|e| io_error(shown, &e))?;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    (&mut file).take(SNIFF_BYTES as u64).read_to_end(&mut head).map_err(|e| io_error(shown, &e))?;
    if let Some(why) = binary_reason(&head) {
        return Err(ToolError::failed(format!(
            "`{shown}` looks like a binary file ({why} in its first 8 KiB); read_file only returns text. \
             Use run_shell (for example `file` or `xxd | head`) to inspect it."
        )));
    }
    let mut reader = BufReader::new(Cursor::new(head).chain(file));
    // Bytes of one line kept in memory: enough for `max_line_chars` characters of up to four
    // bytes, so a file that is one enormous line is streamed, not loaded whole.
    let keep = cfg.max_line_chars.saturating_mul(4).saturating_add(8);
    let mut out = String::new();
    let mut raw = Vec::new();
    let mut line_no = 0usize;
    let mut last_shown = 0usize;
    let mut capped = false;
    loop {
        raw.clear();
        let (n, dropped) = read_line_capped(&mut reader, &mut raw, keep).map_err(|e| io_error(shown, &e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line_no < offset || capped || line_no >= offset + limit {
            continue;
        }
        let text = String::from_utf8_lossy(&raw);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        let clipped = if dropped == 0 {
            clip_chars(text, cfg.max_line_chars)
        } else {
            // Only the start of this line was kept in memory; count what was skipped too.
            let kept: String = text.chars().take(cfg.max_line_chars).collect();
            let more = text.chars().count().saturating_sub(cfg.max_line_chars) + dropped;
            format!("{kept}… [{more} more characters]")
        };
        let entry = format!("{line_no:>6}\t{clipped}\n");
        if out.len() + entry.len() > cfg.max_bytes {
            if last_shown == 0 {
                // Even the first line is too long: show what fits of it.
                out.push_str(prefix_at_boundary(&entry, cfg.max_bytes));
                out.push('\n');
                last_shown = line_no;
            }
            capped = true;
            continue;
        }
        out.push_str(&entry);
        last_shown = line_no;
    }
    let total = line_no;
    if total == 0 {
        return Ok(format!("(`{shown}` is empty)"));
    }
    if offset > total {
        return Err(ToolError::failed(format!(
            "offset {offset} is past the end of `{shown}`, which has {total} lines"
        )));
    }
    if last_shown < total {
        let why = if capped { format!(" (output capped at {} bytes)", cfg.max_bytes) } else { String::new() };
        out.push_str(&format!(
            "[showing lines {offset}-{last_shown} of {total}{why}; call read_file with offset={} to read more]",
            last_shown + 1
        ));
    }
    Ok(out)
}

/// Reads one line (through its `\n`) keeping at most `keep` bytes of it in `raw`; returns the
/// bytes consumed and how many characters were read past `keep` and dropped.
fn read_line_capped(reader: &mut impl BufRead, raw: &mut Vec<u8>, keep: usize) -> std::io::Result<(usize, usize)> {
    let mut consumed = 0usize;
    let mut dropped_chars = 0usize;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((consumed, dropped_chars));
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let room = keep.saturating_sub(raw.len()).min(chunk.len());
        raw.extend_from_slice(&chunk[..room]);
        let rest = &chunk[room..];
        // Count characters by their first bytes; a trailing newline is not a character.
        let rest = if found { rest.strip_suffix(b"\n").unwrap_or(rest) } else { rest };
        dropped_chars += rest.iter().filter(|&&b| b & 0xC0 != 0x80).count();
        if found && room < chunk.len() && !raw.ends_with(b"\n") {
            raw.push(b'\n');
        }
        let len = chunk.len();
        reader.consume(len);
        consumed += len;
        if found {
            return Ok((consumed, dropped_chars));
        }
    }
}

/// Why these first bytes of a file look binary, if they do.
fn binary_reason(head: &[u8]) -> Option<&'static str> {
    if head.contains(&0) {
        return Some("NUL bytes");
    }
    match std::str::from_utf8(head) {
        Ok(_) => None,
        // A character cut at the end of the sample is not evidence of binary data.
        Err(e) if e.error_len().is_none() => None,
        Err(_) => Some("invalid UTF-8"),
    }
}

fn io_error(shown: &str, e: &std::io::Error) -> ToolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::failed(format!("`{shown}` does not exist")),
        _ => ToolError::failed(format!("`{shown}`: {e}")),
    }
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, relative to the workspace root. Missing parent directories are created.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// Creates or overwrites a file.
#[derive(Debug, Clone)]
pub struct WriteFile {
    ws: Workspace,
}

impl WriteFile {
    /// The tool for this workspace.
    pub fn new(ws: Workspace) -> Self {
        Self { ws }
    }
}

#[async_trait]
impl TypedTool for WriteFile {
    type Args = WriteFileArgs;

    fn name(&self) -> &str {
        "write_file"
    }

    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        path_arguments(arguments, &["path"], None)
    }

    fn description(&self) -> String {
        "Create a file or replace its whole content. Missing parent directories are created. For small \
         changes to an existing file prefer apply_patch."
            .into()
    }

    async fn run(&self, args: WriteFileArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let path = resolve(&self.ws, &args.path)?;
        let shown = self.ws.display_relative(&path);
        let previous = match tokio::fs::metadata(&path).await {
            Ok(m) if m.is_dir() => {
                return Err(ToolError::failed(format!("`{shown}` is a directory; give a file path")));
            }
            Ok(m) => Some(m.len()),
            Err(_) => None,
        };
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError::failed(format!("cannot create the directories of `{shown}`: {e}")))?;
        }
        let content = args.content.clone().into_bytes();
        let (target, ws) = (path.clone(), self.ws.clone());
        tokio::task::spawn_blocking(move || {
            ws.journal().before_change(&target);
            write_contents(&target, &content)
        })
        .await
        .map_err(|e| ToolError::failed(format!("the write of `{shown}` failed: {e}")))?
        .map_err(|e| io_error(&shown, &e))?;
        let bytes = args.content.len();
        Ok(match previous {
            Some(old) => format!("overwrote `{shown}`: {bytes} bytes written (was {old} bytes)"),
            None => format!("created `{shown}`: {bytes} bytes written"),
        })
    }
}

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// Directory to list, relative to the workspace root. Default: the root.
    #[serde(default)]
    pub path: Option<String>,
    /// How deep to descend: 1 lists only the directory's own entries. Default: 2.
    #[serde(default)]
    pub depth: Option<usize>,
}

/// Lists a directory tree.
#[derive(Debug, Clone)]
pub struct ListDir {
    ws: Workspace,
    config: ListConfig,
}

impl ListDir {
    /// The tool for this workspace.
    pub fn new(ws: Workspace, config: ListConfig) -> Self {
        Self { ws, config }
    }
}

#[async_trait]
impl TypedTool for ListDir {
    type Args = ListDirArgs;

    fn name(&self) -> &str {
        "list_dir"
    }

    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        path_arguments(arguments, &["path"], Some("."))
    }

    fn description(&self) -> String {
        format!(
            "List a directory of the workspace as an indented tree; directories end with `/`, symlinks show \
             their target. Files ignored by .gitignore and the .git directory are left out. `depth` sets how \
             many levels to show (default {}, at most {}); at most {} entries are listed.",
            self.config.default_depth, self.config.max_depth, self.config.max_entries
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn run(&self, args: ListDirArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = resolve(&self.ws, args.path.as_deref().unwrap_or("."))?;
        let shown = self.ws.display_relative(&path);
        let depth = args.depth.unwrap_or(self.config.default_depth).clamp(1, self.config.max_depth.max(1));
        let max_entries = self.config.max_entries;
        let filter = EntryFilter::new(&self.ws, ctx);
        blocking(move || list_tree(&path, &shown, depth, max_entries, filter)).await
    }
}

/// What a directory walk leaves out: `.git`, and the paths the call's permission rules hide
/// (counted, so the result can say that some were hidden).
#[derive(Clone)]
pub(crate) struct EntryFilter {
    ws: Workspace,
    screen: Option<Arc<dyn PathScreen>>,
    hidden: Arc<AtomicUsize>,
}

impl EntryFilter {
    pub(crate) fn new(ws: &Workspace, ctx: &ToolContext) -> Self {
        Self { ws: ws.clone(), screen: ctx.screen.clone(), hidden: Arc::new(AtomicUsize::new(0)) }
    }

    /// Whether the walk goes into (or shows) this entry.
    pub(crate) fn keeps(&self, entry: &ignore::DirEntry) -> bool {
        if entry.file_name() == ".git" {
            return false;
        }
        let Some(screen) = &self.screen else { return true };
        if entry.depth() > 0 && screen.hides(&self.ws.display_relative(entry.path())) {
            self.hidden.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// A line saying how many entries the rules hid, if any.
    pub(crate) fn note(&self) -> Option<String> {
        let n = self.hidden.load(Ordering::Relaxed);
        (n > 0).then(|| format!("[{n} entries hidden by permission rules]"))
    }
}

/// Entries counted past the cap before the count is given up.
const COUNT_PAST_CAP: usize = 10_000;

fn list_tree(
    dir: &Path,
    shown: &str,
    depth: usize,
    max_entries: usize,
    filter: EntryFilter,
) -> Result<String, ToolError> {
    let meta = std::fs::metadata(dir).map_err(|e| io_error(shown, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::failed(format!("`{shown}` is a file, not a directory; use read_file to read it")));
    }
    let keep = filter.clone();
    let walker = ignore::WalkBuilder::new(dir)
        .max_depth(Some(depth))
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| keep.keeps(e))
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut out = format!("{}/\n", shown.trim_end_matches('/'));
    let mut shown_entries = 0usize;
    let mut more = 0usize;
    let mut unreadable = 0usize;
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(_) => {
                unreadable += 1;
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        if shown_entries >= max_entries {
            more += 1;
            if more >= COUNT_PAST_CAP {
                break;
            }
            continue;
        }
        shown_entries += 1;
        let indent = "  ".repeat(entry.depth());
        let name = entry.file_name().to_string_lossy();
        let kind = entry.file_type();
        let line = if kind.is_some_and(|k| k.is_symlink()) {
            let target = std::fs::read_link(entry.path()).map(|t| t.display().to_string()).unwrap_or_default();
            format!("{indent}{name} -> {target}")
        } else if kind.is_some_and(|k| k.is_dir()) {
            format!("{indent}{name}/")
        } else {
            format!("{indent}{name}")
        };
        out.push_str(&line);
        out.push('\n');
    }
    if shown_entries == 0 {
        out.push_str("  (empty directory)\n");
    }
    if more > 0 {
        let count = if more >= COUNT_PAST_CAP { format!("at least {more}") } else { more.to_string() };
        out.push_str(&format!(
            "[listing stopped at {max_entries} entries; {count} more not shown. List a subdirectory or use a \
             smaller depth]\n"
        ));
    }
    if unreadable > 0 {
        out.push_str(&format!("[{unreadable} entries could not be read]\n"));
    }
    if let Some(note) = filter.note() {
        out.push_str(&note);
        out.push('\n');
    }
    Ok(out.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{ToolRegistry, typed};
    use serde_json::{Value, json};
    use std::os::unix::fs::symlink;

    struct Env {
        _dir: tempfile::TempDir,
        _outside: tempfile::TempDir,
        ws: Workspace,
        outside: PathBuf,
        tools: ToolRegistry,
    }

    fn env_with(read: ReadConfig, list: ListConfig) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        symlink(outside.path(), ws.root().join("escape")).unwrap();
        let mut tools = ToolRegistry::new();
        tools.register(typed(ReadFile::new(ws.clone(), read)));
        tools.register(typed(WriteFile::new(ws.clone())));
        tools.register(typed(ListDir::new(ws.clone(), list)));
        tools.register(typed(crate::patch::ApplyPatch::new(ws.clone())));
        let outside_path = outside.path().to_path_buf();
        Env { _dir: dir, _outside: outside, ws, outside: outside_path, tools }
    }

    fn env() -> Env {
        env_with(ReadConfig::default(), ListConfig::default())
    }

    async fn call(env: &Env, name: &str, args: Value) -> Result<String, ToolError> {
        let call = recursive_core::ToolCall { id: "1".into(), name: name.into(), arguments: args };
        env.tools.call(&call, &ToolContext::detached()).await
    }

    #[tokio::test]
    async fn read_file_numbers_lines() {
        let e = env();
        std::fs::write(e.ws.root().join("a.txt"), "alpha\nbeta\r\ngamma").unwrap();
        let out = call(&e, "read_file", json!({"path": "a.txt"})).await.unwrap();
        assert_eq!(out, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
    }

    #[tokio::test]
    async fn read_file_pages_with_offset_and_limit() {
        let e = env();
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        std::fs::write(e.ws.root().join("a.txt"), text).unwrap();
        let out = call(&e, "read_file", json!({"path": "a.txt", "offset": 4, "limit": 3})).await.unwrap();
        assert!(out.starts_with("     4\tl4\n     5\tl5\n     6\tl6\n"), "{out}");
        assert!(out.contains("showing lines 4-6 of 10"), "{out}");
        assert!(out.contains("offset=7"), "{out}");
    }

    #[tokio::test]
    async fn read_file_cap_says_where_to_continue() {
        let e = env_with(ReadConfig { max_bytes: 100, ..Default::default() }, ListConfig::default());
        let text: String = (1..=100).map(|i| format!("line number {i}\n")).collect();
        std::fs::write(e.ws.root().join("big.txt"), text).unwrap();
        let out = call(&e, "read_file", json!({"path": "big.txt"})).await.unwrap();
        let (body, note) = out.split_once('[').unwrap();
        assert!(body.len() <= 100, "{out}");
        assert!(note.contains("capped at 100 bytes"), "{out}");
        let shown = body.lines().count();
        assert!(note.contains(&format!("offset={}", shown + 1)), "{out}");
        let next = call(&e, "read_file", json!({"path": "big.txt", "offset": shown + 1, "limit": 1})).await.unwrap();
        assert!(next.contains(&format!("line number {}", shown + 1)), "{next}");
    }

    #[tokio::test]
    async fn read_file_cuts_very_long_lines() {
        let e = env_with(ReadConfig { max_line_chars: 10, ..Default::default() }, ListConfig::default());
        std::fs::write(e.ws.root().join("a.txt"), format!("{}\n", "x".repeat(50))).unwrap();
        let out = call(&e, "read_file", json!({"path": "a.txt"})).await.unwrap();
        assert!(out.contains("xxxxxxxxxx… [40 more characters]"), "{out}");
    }

    #[tokio::test]
    async fn read_file_streams_a_huge_single_line_and_counts_the_cut() {
        let e = env_with(ReadConfig { max_line_chars: 10, ..Default::default() }, ListConfig::default());
        let line = "é".repeat(300_000);
        std::fs::write(e.ws.root().join("min.js"), format!("{line}\nshort\n")).unwrap();
        let out = call(&e, "read_file", json!({"path": "min.js"})).await.unwrap();
        assert!(out.contains(&format!("{}… [299990 more characters]", "é".repeat(10))), "{out}");
        assert!(out.contains("     2\tshort"), "{out}");
    }

    #[test]
    fn read_line_capped_keeps_a_prefix_and_counts_the_rest() {
        let mut reader = BufReader::with_capacity(4, Cursor::new(b"abcdefgh\nxy".to_vec()));
        let mut raw = Vec::new();
        assert_eq!(read_line_capped(&mut reader, &mut raw, 3).unwrap(), (9, 5));
        assert_eq!(raw, b"abc\n");
        raw.clear();
        assert_eq!(read_line_capped(&mut reader, &mut raw, 3).unwrap(), (2, 0));
        assert_eq!(raw, b"xy");
        raw.clear();
        assert_eq!(read_line_capped(&mut reader, &mut raw, 3).unwrap(), (0, 0));
    }

    #[tokio::test]
    async fn read_file_refuses_nul_bytes() {
        let e = env();
        std::fs::write(e.ws.root().join("a.bin"), b"abc\0def").unwrap();
        let err = call(&e, "read_file", json!({"path": "a.bin"})).await.unwrap_err();
        assert!(err.to_string().contains("binary"), "{err}");
    }

    #[tokio::test]
    async fn read_file_refuses_invalid_utf8() {
        let e = env();
        std::fs::write(e.ws.root().join("a.bin"), [0xff, 0xfe, 0x41, 0x42]).unwrap();
        let err = call(&e, "read_file", json!({"path": "a.bin"})).await.unwrap_err();
        assert!(err.to_string().contains("invalid UTF-8"), "{err}");
    }

    #[tokio::test]
    async fn read_file_accepts_a_character_split_at_the_sniff_boundary() {
        let e = env();
        let mut text = "x\n".repeat((SNIFF_BYTES - 1) / 2);
        text.push_str("xé\n");
        assert!(!text.is_char_boundary(SNIFF_BYTES), "the sample must end inside `é`");
        std::fs::write(e.ws.root().join("a.txt"), &text).unwrap();
        let out = call(&e, "read_file", json!({"path": "a.txt", "offset": 4096})).await.unwrap();
        assert_eq!(out, "  4096\txé\n");
    }

    #[tokio::test]
    async fn read_file_reports_missing_files_and_directories() {
        let e = env();
        let err = call(&e, "read_file", json!({"path": "nope.txt"})).await.unwrap_err();
        assert!(err.to_string().contains("`nope.txt` does not exist"), "{err}");
        std::fs::create_dir(e.ws.root().join("d")).unwrap();
        let err = call(&e, "read_file", json!({"path": "d"})).await.unwrap_err();
        assert!(err.to_string().contains("list_dir"), "{err}");
    }

    #[tokio::test]
    async fn read_file_refuses_special_files() {
        let e = env();
        let fifo = e.ws.root().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
        assert!(made, "this test needs `mkfifo` (coreutils) to make a FIFO");
        let err = call(&e, "read_file", json!({"path": "pipe"})).await.unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[tokio::test]
    async fn read_file_offset_past_end_is_an_error() {
        let e = env();
        std::fs::write(e.ws.root().join("a.txt"), "one\n").unwrap();
        let err = call(&e, "read_file", json!({"path": "a.txt", "offset": 5})).await.unwrap_err();
        assert!(err.to_string().contains("has 1 lines"), "{err}");
    }

    #[tokio::test]
    async fn file_tools_deny_hostile_paths() {
        let e = env();
        let hostile = [
            "../outside.txt".to_string(),
            "/etc/passwd".to_string(),
            "escape/secret.txt".to_string(),
            "escape/new.txt".to_string(),
            format!("{}/secret.txt", e.outside.display()),
            "a/../../b".to_string(),
        ];
        for p in &hostile {
            let err = call(&e, "read_file", json!({"path": p})).await.unwrap_err();
            assert!(matches!(err, ToolError::Denied(_)), "read_file {p}: {err}");
            let err = call(&e, "write_file", json!({"path": p, "content": "x"})).await.unwrap_err();
            assert!(matches!(err, ToolError::Denied(_)), "write_file {p}: {err}");
            let err = call(&e, "list_dir", json!({"path": p})).await.unwrap_err();
            assert!(matches!(err, ToolError::Denied(_)), "list_dir {p}: {err}");
        }
        assert_eq!(std::fs::read_to_string(e.outside.join("secret.txt")).unwrap(), "top secret\n");
        assert!(!e.outside.join("new.txt").exists());
    }

    #[tokio::test]
    async fn writes_never_reach_a_file_outside_through_a_hard_link() {
        let e = env();
        std::fs::hard_link(e.outside.join("secret.txt"), e.ws.root().join("linked.txt")).unwrap();
        call(&e, "write_file", json!({"path": "linked.txt", "content": "overwritten"})).await.unwrap();
        assert_eq!(std::fs::read_to_string(e.outside.join("secret.txt")).unwrap(), "top secret\n");
        assert_eq!(std::fs::read_to_string(e.ws.root().join("linked.txt")).unwrap(), "overwritten");
        std::fs::hard_link(e.outside.join("secret.txt"), e.ws.root().join("again.txt")).unwrap();
        let patch = "*** Begin Patch\n*** Update File: again.txt\n@@\n-top secret\n+patched\n*** End Patch";
        call(&e, "apply_patch", json!({"patch": patch})).await.unwrap();
        assert_eq!(std::fs::read_to_string(e.outside.join("secret.txt")).unwrap(), "top secret\n");
        assert_eq!(std::fs::read_to_string(e.ws.root().join("again.txt")).unwrap(), "patched\n");
    }

    #[tokio::test]
    async fn write_file_creates_parents_and_reports_bytes() {
        let e = env();
        let out = call(&e, "write_file", json!({"path": "a/b/c.txt", "content": "héllo"})).await.unwrap();
        assert_eq!(out, "created `a/b/c.txt`: 6 bytes written");
        assert_eq!(std::fs::read_to_string(e.ws.root().join("a/b/c.txt")).unwrap(), "héllo");
    }

    #[tokio::test]
    async fn write_file_overwrites() {
        let e = env();
        std::fs::write(e.ws.root().join("f.txt"), "old content").unwrap();
        let out = call(&e, "write_file", json!({"path": "f.txt", "content": "new"})).await.unwrap();
        assert!(out.starts_with("overwrote `f.txt`: 3 bytes written (was 11 bytes)"), "{out}");
        assert_eq!(std::fs::read_to_string(e.ws.root().join("f.txt")).unwrap(), "new");
    }

    #[tokio::test]
    async fn write_file_refuses_a_directory() {
        let e = env();
        std::fs::create_dir(e.ws.root().join("d")).unwrap();
        let err = call(&e, "write_file", json!({"path": "d", "content": "x"})).await.unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[tokio::test]
    async fn list_dir_shows_a_tree_with_dirs_marked() {
        let e = env();
        std::fs::remove_file(e.ws.root().join("escape")).unwrap();
        std::fs::create_dir_all(e.ws.root().join("src/deep/deeper")).unwrap();
        std::fs::write(e.ws.root().join("src/main.rs"), "").unwrap();
        std::fs::write(e.ws.root().join("src/deep/deeper/x.rs"), "").unwrap();
        std::fs::write(e.ws.root().join("Cargo.toml"), "").unwrap();
        let out = call(&e, "list_dir", json!({"depth": 2})).await.unwrap();
        assert_eq!(out, "./\n  Cargo.toml\n  src/\n    deep/\n    main.rs");
        let out = call(&e, "list_dir", json!({"path": "src", "depth": 3})).await.unwrap();
        assert_eq!(out, "src/\n  deep/\n    deeper/\n      x.rs\n  main.rs");
    }

    #[tokio::test]
    async fn list_dir_honours_gitignore_outside_a_git_repo() {
        let e = env();
        std::fs::write(e.ws.root().join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::create_dir_all(e.ws.root().join("target/debug")).unwrap();
        std::fs::create_dir_all(e.ws.root().join(".git")).unwrap();
        std::fs::write(e.ws.root().join("build.log"), "").unwrap();
        std::fs::write(e.ws.root().join("keep.rs"), "").unwrap();
        let out = call(&e, "list_dir", json!({})).await.unwrap();
        assert!(out.contains("keep.rs"), "{out}");
        assert!(out.contains(".gitignore"), "{out}");
        assert!(!out.contains("target"), "{out}");
        assert!(!out.contains("build.log"), "{out}");
        assert!(!out.contains(".git/"), "{out}");
    }

    #[tokio::test]
    async fn list_dir_shows_symlinks_without_following_them() {
        let e = env();
        let out = call(&e, "list_dir", json!({"depth": 3})).await.unwrap();
        assert!(out.contains(&format!("escape -> {}", e.outside.display())), "{out}");
        assert!(!out.contains("secret.txt"), "{out}");
    }

    #[tokio::test]
    async fn list_dir_caps_entries_with_a_note() {
        let e = env_with(ReadConfig::default(), ListConfig { max_entries: 5, ..Default::default() });
        for i in 0..20 {
            std::fs::write(e.ws.root().join(format!("f{i:02}")), "").unwrap();
        }
        let out = call(&e, "list_dir", json!({"depth": 1})).await.unwrap();
        // 20 files plus the `escape` link: 5 shown, 16 not.
        assert_eq!(out.lines().filter(|l| l.starts_with("  ")).count(), 5, "{out}");
        assert!(out.contains("stopped at 5 entries; 16 more not shown"), "{out}");
    }

    #[tokio::test]
    async fn list_dir_on_a_file_points_to_read_file() {
        let e = env();
        std::fs::write(e.ws.root().join("f.txt"), "").unwrap();
        let err = call(&e, "list_dir", json!({"path": "f.txt"})).await.unwrap_err();
        assert!(err.to_string().contains("read_file"), "{err}");
    }
}

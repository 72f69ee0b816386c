//! `search_files`: a regex search over the workspace with ripgrep's own crates — files
//! ignored by `.gitignore` are skipped, binary files are skipped, and each hit is reported as
//! `path:line:column: text`.

use std::path::Path;

use async_trait::async_trait;
use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use recursive_core::{ToolContext, ToolError, TypedTool, path_arguments};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::SearchConfig;
use crate::fs::{EntryFilter, blocking, resolve};
use crate::sandbox::Workspace;
use crate::truncate::clip_chars;

/// Arguments of `search_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// Regular expression (Rust regex syntax, as in ripgrep).
    pub pattern: String,
    /// File or directory to search, relative to the workspace root. Default: the root.
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose name matches this glob, e.g. `*.rs` or `src/**/*.toml`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Match case-insensitively. Default: false.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Most matches to return.
    #[serde(default)]
    pub max_results: Option<usize>,
}

/// Searches file contents.
#[derive(Debug, Clone)]
pub struct SearchFiles {
    ws: Workspace,
    config: SearchConfig,
}

impl SearchFiles {
    /// The tool for this workspace.
    pub fn new(ws: Workspace, config: SearchConfig) -> Self {
        Self { ws, config }
    }
}

#[async_trait]
impl TypedTool for SearchFiles {
    type Args = SearchFilesArgs;

    fn name(&self) -> &str {
        "search_files"
    }

    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        path_arguments(arguments, &["path"], Some("."))
    }

    fn description(&self) -> String {
        format!(
            "Search the contents of workspace files with a regular expression (ripgrep syntax). Each match is \
             one line `path:line:column: text`. Files ignored by .gitignore, hidden VCS directories and binary \
             files are skipped. Narrow the search with `path` (a file or directory) and `glob` (e.g. `*.rs`). \
             At most {} matches are returned.",
            self.config.max_results
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn run(&self, args: SearchFilesArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let target = resolve(&self.ws, args.path.as_deref().unwrap_or("."))?;
        if !target.exists() {
            return Err(ToolError::failed(format!("`{}` does not exist", self.ws.display_relative(&target))));
        }
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive)
            .build(&args.pattern)
            .map_err(|e| ToolError::failed(format!("invalid regex `{}`: {e}", args.pattern)))?;
        let max = args.max_results.unwrap_or(self.config.max_results).clamp(1, self.config.max_results.max(1));
        let ws = self.ws.clone();
        let line_chars = self.config.max_line_chars;
        let glob = args.glob.clone();
        let pattern = args.pattern.clone();
        let filter = EntryFilter::new(&ws, ctx);
        blocking(move || {
            let query = Query { matcher: &matcher, glob: glob.as_deref(), max, line_chars, pattern: &pattern };
            search(&ws, &target, &query, filter)
        })
        .await
    }
}

/// What to search for and how much to show.
struct Query<'a> {
    matcher: &'a RegexMatcher,
    glob: Option<&'a str>,
    max: usize,
    line_chars: usize,
    pattern: &'a str,
}

fn search(ws: &Workspace, target: &Path, query: &Query<'_>, filter: EntryFilter) -> Result<String, ToolError> {
    let Query { matcher, glob, max, line_chars, pattern } = *query;
    let keep = filter.clone();
    let mut builder = ignore::WalkBuilder::new(target);
    builder
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| keep.keeps(e))
        .sort_by_file_name(|a, b| a.cmp(b));
    if let Some(glob) = glob {
        let base = if target.is_dir() { target } else { target.parent().unwrap_or(target) };
        let overrides = ignore::overrides::OverrideBuilder::new(base)
            .add(glob)
            .and_then(|b| b.build())
            .map_err(|e| ToolError::failed(format!("invalid glob `{glob}`: {e}")))?;
        builder.overrides(overrides);
    }
    let mut searcher =
        SearcherBuilder::new().line_number(true).binary_detection(BinaryDetection::quit(b'\x00')).build();
    let mut hits: Vec<String> = Vec::new();
    let mut capped = false;
    for entry in builder.build() {
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let shown = ws.display_relative(entry.path());
        let sink = Lossy(|line_no, line| {
            if hits.len() >= max {
                capped = true;
                return Ok(false);
            }
            let column = matcher
                .find(line.as_bytes())
                .ok()
                .flatten()
                .map(|m| line[..m.start().min(line.len())].chars().count() + 1)
                .unwrap_or(1);
            let text = line.trim_end_matches(['\n', '\r']);
            hits.push(format!("{shown}:{line_no}:{column}: {}", clip_chars(text, line_chars)));
            Ok(true)
        });
        // Unreadable files are skipped like ripgrep does.
        let _ = searcher.search_path(matcher, entry.path(), sink);
        if capped {
            break;
        }
    }
    let note = filter.note().map(|n| format!("\n{n}")).unwrap_or_default();
    if hits.is_empty() {
        return Ok(format!("no matches for `{pattern}`{note}"));
    }
    let mut out = hits.join("\n");
    out.push_str(&note);
    if capped {
        out.push_str(&format!("\n[stopped after {max} matches; narrow the pattern, `path` or `glob` to see the rest]"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::typed;
    use serde_json::{Value, json};

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let root = ws.root();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {\n    let needle = 1;\n}\n").unwrap();
        std::fs::write(root.join("src/lib.rs"), "// Needle in a comment\npub fn needle() {}\n").unwrap();
        std::fs::write(root.join("notes.md"), "a needle here\n").unwrap();
        std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        std::fs::create_dir_all(root.join("ignored")).unwrap();
        std::fs::write(root.join("ignored/hidden.rs"), "needle\n").unwrap();
        std::fs::write(root.join("blob.bin"), b"needle\0\x01\x02").unwrap();
        (dir, ws)
    }

    async fn run(ws: &Workspace, args: Value) -> Result<String, ToolError> {
        typed(SearchFiles::new(ws.clone(), SearchConfig::default())).call(args, &ToolContext::detached()).await
    }

    #[tokio::test]
    async fn reports_path_line_column_and_text() {
        let (_d, ws) = setup();
        let out = run(&ws, json!({"pattern": "needle"})).await.unwrap();
        assert_eq!(
            out,
            "notes.md:1:3: a needle here\nsrc/lib.rs:2:8: pub fn needle() {}\nsrc/main.rs:2:9:     let needle = 1;"
        );
    }

    #[tokio::test]
    async fn skips_gitignored_and_binary_files() {
        let (_d, ws) = setup();
        let out = run(&ws, json!({"pattern": "needle"})).await.unwrap();
        assert!(!out.contains("ignored/"), "{out}");
        assert!(!out.contains("blob.bin"), "{out}");
    }

    #[tokio::test]
    async fn glob_filters_files() {
        let (_d, ws) = setup();
        let out = run(&ws, json!({"pattern": "needle", "glob": "*.md"})).await.unwrap();
        assert_eq!(out, "notes.md:1:3: a needle here");
    }

    #[tokio::test]
    async fn case_insensitive_finds_more() {
        let (_d, ws) = setup();
        let out = run(&ws, json!({"pattern": "Needle", "path": "src/lib.rs"})).await.unwrap();
        assert_eq!(out, "src/lib.rs:1:4: // Needle in a comment");
        let out = run(&ws, json!({"pattern": "Needle", "path": "src", "case_insensitive": true})).await.unwrap();
        assert_eq!(out.lines().count(), 3, "{out}");
    }

    #[tokio::test]
    async fn column_counts_characters() {
        let (_d, ws) = setup();
        std::fs::write(ws.root().join("u.txt"), "ééé needle\n").unwrap();
        let out = run(&ws, json!({"pattern": "needle", "path": "u.txt"})).await.unwrap();
        assert_eq!(out, "u.txt:1:5: ééé needle");
    }

    #[tokio::test]
    async fn results_are_capped_with_a_note() {
        let (_d, ws) = setup();
        let out = run(&ws, json!({"pattern": "needle", "max_results": 2})).await.unwrap();
        assert_eq!(out.lines().filter(|l| l.contains(": ")).count(), 2, "{out}");
        assert!(out.contains("stopped after 2 matches"), "{out}");
    }

    #[tokio::test]
    async fn invalid_regex_is_explained() {
        let (_d, ws) = setup();
        let err = run(&ws, json!({"pattern": "(unclosed"})).await.unwrap_err();
        assert!(err.to_string().contains("invalid regex `(unclosed`"), "{err}");
    }

    #[tokio::test]
    async fn no_match_says_so() {
        let (_d, ws) = setup();
        assert_eq!(run(&ws, json!({"pattern": "zzz"})).await.unwrap(), "no matches for `zzz`");
    }

    #[tokio::test]
    async fn hostile_paths_are_denied() {
        let (_d, ws) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("s.txt"), "needle").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join("link")).unwrap();
        for p in ["..", "/etc", "link", "link/s.txt", "src/../../"] {
            let err = run(&ws, json!({"pattern": "needle", "path": p})).await.unwrap_err();
            assert!(matches!(err, ToolError::Denied(_)), "{p}: {err}");
        }
        // A symlink met during the walk is not followed either.
        let out = run(&ws, json!({"pattern": "needle"})).await.unwrap();
        assert!(!out.contains("s.txt"), "{out}");
    }
}

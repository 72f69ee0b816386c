//! Completion popups over the input box: `@` followed by part of a path offers the workspace's
//! files, `/` at the start of the box offers the commands (from [`HELP`]), and Ctrl-R offers
//! the earlier prompts that contain what the box holds. ↑/↓ pick, Tab (or Enter) accepts, Esc
//! closes.
//!
//! Pure: [`token`] finds what is being completed at the cursor and [`Popup`] keeps the
//! choices; the UI applies the accepted one to the editor.

use std::path::Path;

use crate::chat::HELP;

/// Choices shown at most.
pub const SHOWN: usize = 8;

/// Files listed at most from the workspace.
const MAX_FILES: usize = 20_000;

/// What a popup completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A workspace file after `@`.
    File,
    /// A command after `/` at the start of the box.
    Command,
    /// An earlier prompt (Ctrl-R): the whole box.
    History,
}

/// The word being completed: its kind, the character column where it starts (at the `@` or
/// `/`) and what follows that sign up to the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// What it completes.
    pub kind: Kind,
    /// Where the word starts in its line (characters).
    pub start: usize,
    /// What is typed after the sign.
    pub query: String,
}

/// The word before the cursor at (`row`, `col`) of `lines`, when it is one to complete.
pub fn token(lines: &[String], row: usize, col: usize) -> Option<Token> {
    let line = lines.get(row)?;
    let before: Vec<char> = line.chars().take(col).collect();
    let start = before.iter().rposition(|c| c.is_whitespace()).map_or(0, |i| i + 1);
    let word: String = before[start..].iter().collect();
    if let Some(query) = word.strip_prefix('@') {
        return Some(Token { kind: Kind::File, start, query: query.to_string() });
    }
    let query = word.strip_prefix('/')?;
    (row == 0 && start == 0 && lines.len() == 1).then(|| Token { kind: Kind::Command, start, query: query.to_string() })
}

/// The commands [`HELP`] lists, each with its line.
pub fn commands() -> Vec<(String, String)> {
    HELP.lines()
        .filter_map(|l| {
            let name = l.strip_prefix('/')?.split_whitespace().next()?;
            Some((name.to_string(), l.to_string()))
        })
        .collect()
}

/// The workspace's files under `root` (hidden and ignored ones left out), relative, with `/`.
pub fn workspace_files(root: &Path) -> Vec<String> {
    let walker = ignore::WalkBuilder::new(root).hidden(true).require_git(false).follow_links(false).build();
    let mut files = Vec::new();
    for entry in walker.flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            files.push(rel.to_string_lossy().replace('\\', "/"));
        }
        if files.len() >= MAX_FILES {
            break;
        }
    }
    files.sort();
    files
}

/// The files matching `query`: those whose name starts with it first, then those whose path
/// contains it (case-insensitive), shorter paths first.
pub fn matching_files(files: &[String], query: &str) -> Vec<String> {
    let q = query.to_lowercase();
    let mut hits: Vec<(u8, &String)> = files
        .iter()
        .filter_map(|f| {
            let lower = f.to_lowercase();
            let name = lower.rsplit('/').next().unwrap_or(&lower);
            if lower.starts_with(&q) || name.starts_with(&q) {
                Some((0, f))
            } else {
                lower.contains(&q).then_some((1, f))
            }
        })
        .collect();
    hits.sort_by_key(|(rank, f)| (*rank, f.len(), (*f).clone()));
    hits.into_iter().take(SHOWN).map(|(_, f)| f.clone()).collect()
}

/// The earlier prompts containing `query` (case-insensitive), newest first, each once.
pub fn matching_prompts(history: &[String], query: &str) -> Vec<String> {
    let q = query.to_lowercase();
    let mut hits: Vec<String> = Vec::new();
    for prompt in history.iter().rev() {
        if prompt.to_lowercase().contains(&q) && !hits.contains(prompt) {
            hits.push(prompt.clone());
        }
        if hits.len() == SHOWN {
            break;
        }
    }
    hits
}

/// A popup's choices and the one picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popup {
    /// What it completes.
    pub kind: Kind,
    /// Where the completed word starts in its line (characters).
    pub start: usize,
    /// The choices: what is inserted, and what is shown.
    pub items: Vec<(String, String)>,
    /// The picked choice.
    pub selected: usize,
}

impl Popup {
    /// A popup of `items`, the first picked; `None` when there are none.
    pub fn new(kind: Kind, start: usize, items: Vec<(String, String)>) -> Option<Self> {
        (!items.is_empty()).then_some(Self { kind, start, items, selected: 0 })
    }

    /// The popup for `token`: files or commands matching it.
    pub fn for_token(token: &Token, files: &[String]) -> Option<Self> {
        let items = match token.kind {
            Kind::File => matching_files(files, &token.query).into_iter().map(|f| (f.clone(), f)).collect(),
            Kind::Command => {
                let mut found: Vec<(String, String)> =
                    commands().into_iter().filter(|(name, _)| name.starts_with(&token.query)).collect();
                // The command typed in full comes first (`/mode`, not `/model`).
                found.sort_by_key(|(name, _)| name != &token.query);
                found.into_iter().take(SHOWN).collect()
            }
            Kind::History => Vec::new(),
        };
        Self::new(token.kind, token.start, items)
    }

    /// Whether the picked choice is just what `token` already says (Enter then sends as is).
    pub fn picked_is(&self, token: &Token) -> bool {
        self.items.get(self.selected).is_some_and(|(value, _)| value == &token.query)
    }

    /// Picks the one above (wrapping).
    pub fn up(&mut self) {
        self.selected = self.selected.checked_sub(1).unwrap_or(self.items.len().saturating_sub(1));
    }

    /// Picks the one below (wrapping).
    pub fn down(&mut self) {
        self.selected = (self.selected + 1) % self.items.len().max(1);
    }

    /// The text the picked choice puts in place of the word (with its sign and a space after a
    /// file or command), or the whole prompt for a history search.
    pub fn accepted(&self) -> Option<String> {
        let (value, _) = self.items.get(self.selected)?;
        Some(match self.kind {
            Kind::File => format!("@{value} "),
            Kind::Command => format!("/{value} "),
            Kind::History => value.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.split('\n').map(str::to_string).collect()
    }

    #[test]
    fn the_word_at_the_cursor_says_what_to_complete() {
        let l = lines("look at @src/ma please");
        assert_eq!(token(&l, 0, 15), Some(Token { kind: Kind::File, start: 8, query: "src/ma".into() }));
        assert_eq!(token(&l, 0, 4), None);
        assert_eq!(token(&lines("/re"), 0, 3), Some(Token { kind: Kind::Command, start: 0, query: "re".into() }));
        assert_eq!(token(&lines("/rewind 2"), 0, 9), None, "past the command's name");
        assert_eq!(token(&lines("see /etc"), 0, 8), None, "a slash inside a message");
        assert_eq!(token(&lines("a\n/re"), 1, 3), None, "a slash on a later line");
    }

    #[test]
    fn commands_come_from_help_and_files_match_by_name_first() {
        let names: Vec<String> = commands().into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&"rewind".to_string()) && names.contains(&"help".to_string()), "{names:?}");
        let popup = Popup::for_token(&Token { kind: Kind::Command, start: 0, query: "re".into() }, &[]).unwrap();
        let offered: Vec<&str> = popup.items.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(offered, ["rewind", "rename"]);
        assert_eq!(popup.accepted().as_deref(), Some("/rewind "));
        let mode = Token { kind: Kind::Command, start: 0, query: "mode".into() };
        let popup = Popup::for_token(&mode, &[]).unwrap();
        assert_eq!(popup.accepted().as_deref(), Some("/mode "), "the name typed in full first");
        assert!(popup.picked_is(&mode));
        let files: Vec<String> = ["docs/main.md", "src/main.rs", "src/domain.rs", "main.rs"].map(String::from).to_vec();
        assert_eq!(matching_files(&files, "main"), ["main.rs", "src/main.rs", "docs/main.md", "src/domain.rs"]);
        let mut popup = Popup::for_token(&Token { kind: Kind::File, start: 0, query: "dom".into() }, &files).unwrap();
        assert_eq!(popup.accepted().as_deref(), Some("@src/domain.rs "));
        popup.up();
        popup.down();
        assert_eq!(popup.selected, 0);
        assert!(Popup::for_token(&Token { kind: Kind::File, start: 0, query: "zzz".into() }, &files).is_none());
    }

    #[test]
    fn history_search_finds_earlier_prompts_newest_first_once() {
        let history: Vec<String> =
            ["fix the parser", "run the tests", "fix the parser", "fix the lexer"].map(String::from).to_vec();
        assert_eq!(matching_prompts(&history, "FIX"), ["fix the lexer", "fix the parser"]);
        assert!(matching_prompts(&history, "deploy").is_empty());
    }

    #[test]
    fn workspace_files_leave_out_hidden_and_ignored_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::create_dir_all(dir.path().join("target")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
        std::fs::write(dir.path().join("target/out"), "").unwrap();
        std::fs::write(dir.path().join(".secret"), "").unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        assert_eq!(workspace_files(dir.path()), ["src/lib.rs"]);
    }
}

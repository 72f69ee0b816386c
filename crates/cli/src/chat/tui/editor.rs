//! The input box's text: several lines, a cursor, the usual editing keys, and the history of
//! sent messages (Up on the first line, Down on the last).

/// An editable multi-line text with a cursor (line, character).
#[derive(Debug, Default)]
pub struct Editor {
    lines: Vec<String>,
    row: usize,
    col: usize,
    history: Vec<String>,
    /// Position while browsing the history, and the draft put aside.
    browsing: Option<(usize, String)>,
}

impl Editor {
    /// An empty editor.
    pub fn new() -> Self {
        Self { lines: vec![String::new()], ..Default::default() }
    }

    /// The whole text.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// The lines, for drawing.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// The cursor: line and character.
    pub fn cursor(&self) -> (usize, usize) {
        (self.row, self.col)
    }

    /// Whether there is no text.
    pub fn is_empty(&self) -> bool {
        self.lines.len() == 1 && self.lines[0].is_empty()
    }

    /// Replaces the text, cursor at the end.
    pub fn set(&mut self, text: &str) {
        self.lines = text.split('\n').map(str::to_string).collect();
        self.row = self.lines.len() - 1;
        self.col = self.lines[self.row].chars().count();
    }

    /// Empties the editor.
    pub fn clear(&mut self) {
        self.set("");
        self.browsing = None;
    }

    /// The messages sent so far (and those of the conversation continued), oldest first.
    pub fn history(&self) -> &[String] {
        &self.history
    }

    /// Adds a message to the history (an earlier prompt of a resumed conversation).
    pub fn remember(&mut self, text: &str) {
        if !text.trim().is_empty() && self.history.last().map(String::as_str) != Some(text) {
            self.history.push(text.to_string());
        }
    }

    /// Puts older messages (earlier sessions') before the history, oldest first.
    pub fn prepend_history(&mut self, older: Vec<String>) {
        self.browsing = None;
        let newer = std::mem::replace(&mut self.history, older);
        self.history.extend(newer);
    }

    /// Replaces the characters of the cursor's line from `start` to the cursor with `text`,
    /// the cursor after it (a completed word).
    pub fn replace_word(&mut self, start: usize, text: &str) {
        let start = start.min(self.col);
        let (from, to) = (self.byte(self.row, start), self.byte(self.row, self.col));
        self.lines[self.row].replace_range(from..to, text);
        self.col = start + text.chars().count();
    }

    /// Takes the text out (kept in the history when it is not blank).
    pub fn take(&mut self) -> String {
        let text = self.text();
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        self.clear();
        text
    }

    fn byte(&self, row: usize, col: usize) -> usize {
        self.lines[row].char_indices().nth(col).map_or(self.lines[row].len(), |(i, _)| i)
    }

    /// Inserts text at the cursor (line breaks in it start new lines; `\r\n` and `\r` count
    /// as one; tabs become spaces).
    pub fn insert(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n").replace('\t', "    ");
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.newline();
            }
            let at = self.byte(self.row, self.col);
            self.lines[self.row].insert_str(at, part);
            self.col += part.chars().count();
        }
    }

    /// Breaks the line at the cursor.
    pub fn newline(&mut self) {
        let at = self.byte(self.row, self.col);
        let rest = self.lines[self.row].split_off(at);
        self.lines.insert(self.row + 1, rest);
        self.row += 1;
        self.col = 0;
    }

    /// Deletes the character before the cursor (joining lines at a line's start).
    pub fn backspace(&mut self) {
        if self.col > 0 {
            let at = self.byte(self.row, self.col - 1);
            self.lines[self.row].remove(at);
            self.col -= 1;
        } else if self.row > 0 {
            let line = self.lines.remove(self.row);
            self.row -= 1;
            self.col = self.lines[self.row].chars().count();
            self.lines[self.row].push_str(&line);
        }
    }

    /// Deletes the character under the cursor (joining the next line at a line's end).
    pub fn delete(&mut self) {
        if self.col < self.lines[self.row].chars().count() {
            let at = self.byte(self.row, self.col);
            self.lines[self.row].remove(at);
        } else if self.row + 1 < self.lines.len() {
            let next = self.lines.remove(self.row + 1);
            self.lines[self.row].push_str(&next);
        }
    }

    /// Deletes the word before the cursor.
    pub fn delete_word(&mut self) {
        while self.col > 0 && self.char_before().is_some_and(char::is_whitespace) {
            self.backspace();
        }
        while self.col > 0 && self.char_before().is_some_and(|c| !c.is_whitespace()) {
            self.backspace();
        }
    }

    fn char_before(&self) -> Option<char> {
        self.lines[self.row].chars().nth(self.col.checked_sub(1)?)
    }

    /// Deletes from the line's start to the cursor.
    pub fn kill_to_start(&mut self) {
        let at = self.byte(self.row, self.col);
        self.lines[self.row].drain(..at);
        self.col = 0;
    }

    /// Deletes from the cursor to the line's end.
    pub fn kill_to_end(&mut self) {
        let at = self.byte(self.row, self.col);
        self.lines[self.row].truncate(at);
    }

    /// Cursor one character left (to the previous line's end at a line's start).
    pub fn left(&mut self) {
        if self.col > 0 {
            self.col -= 1;
        } else if self.row > 0 {
            self.row -= 1;
            self.col = self.lines[self.row].chars().count();
        }
    }

    /// Cursor one character right.
    pub fn right(&mut self) {
        if self.col < self.lines[self.row].chars().count() {
            self.col += 1;
        } else if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = 0;
        }
    }

    /// Cursor to the line's start.
    pub fn home(&mut self) {
        self.col = 0;
    }

    /// Cursor to the line's end.
    pub fn end(&mut self) {
        self.col = self.lines[self.row].chars().count();
    }

    /// Up a line, or to the previous message of the history on the first line.
    pub fn up(&mut self) {
        if self.row > 0 {
            self.row -= 1;
            self.col = self.col.min(self.lines[self.row].chars().count());
            return;
        }
        let at = match &self.browsing {
            Some((0, _)) => return,
            Some((i, _)) => i - 1,
            None if self.history.is_empty() => return,
            None => {
                self.browsing = Some((self.history.len(), self.text()));
                self.history.len() - 1
            }
        };
        let text = self.history[at].clone();
        let draft = self.browsing.take().map(|(_, d)| d).unwrap_or_default();
        self.set(&text);
        self.browsing = Some((at, draft));
    }

    /// Down a line, or to the next message of the history (then the draft) on the last line.
    pub fn down(&mut self) {
        if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.col = self.col.min(self.lines[self.row].chars().count());
            return;
        }
        let Some((at, draft)) = self.browsing.take() else { return };
        if at + 1 < self.history.len() {
            let text = self.history[at + 1].clone();
            self.set(&text);
            self.browsing = Some((at + 1, draft));
        } else {
            self.set(&draft);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paste_with_line_breaks_is_one_multi_line_text() {
        let mut e = Editor::new();
        e.insert("one\r\ntwo\nthree");
        assert_eq!(e.text(), "one\ntwo\nthree");
        assert_eq!(e.cursor(), (2, 5));
        e.backspace();
        e.home();
        e.backspace();
        assert_eq!(e.text(), "one\ntwothre");
    }

    #[test]
    fn a_completed_word_replaces_what_was_typed_of_it() {
        let mut e = Editor::new();
        e.insert("see @sr");
        e.replace_word(4, "@src/lib.rs ");
        assert_eq!(e.text(), "see @src/lib.rs ");
        assert_eq!(e.cursor(), (0, 16));
    }

    #[test]
    fn editing_keys_work_on_characters_not_bytes() {
        let mut e = Editor::new();
        e.insert("héllo wörld");
        e.delete_word();
        assert_eq!(e.text(), "héllo ");
        e.home();
        e.right();
        e.delete();
        assert_eq!(e.text(), "hllo ");
        e.kill_to_end();
        assert_eq!(e.text(), "h");
    }

    #[test]
    fn up_and_down_walk_the_history_and_return_to_the_draft() {
        let mut e = Editor::new();
        e.insert("first");
        e.take();
        e.insert("second");
        e.take();
        e.insert("draft");
        e.up();
        assert_eq!(e.text(), "second");
        e.up();
        assert_eq!(e.text(), "first");
        e.down();
        e.down();
        assert_eq!(e.text(), "draft");
    }
}

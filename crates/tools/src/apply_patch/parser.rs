//! Parsing V4A patch text into a [`Patch`]: markers are recognised after trimming, every error names its line.

use super::{ChangeLine, Chunk, Hunk, Patch, PatchError};

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File:";
const DELETE_FILE: &str = "*** Delete File:";
const UPDATE_FILE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Parses patch text (LF or CRLF line endings). Nothing is touched on disk.
pub fn parse_patch(text: &str) -> Result<Patch, PatchError> {
    let lines: Vec<&str> = text.lines().collect();
    Parser { lines, pos: 0 }.parse()
}

fn error(line: usize, message: impl Into<String>) -> PatchError {
    PatchError::Parse { line, message: message.into() }
}

fn is_blank(line: &str) -> bool {
    line.trim().is_empty()
}

fn is_hunk_header(trimmed: &str) -> bool {
    trimmed.starts_with(ADD_FILE) || trimmed.starts_with(DELETE_FILE) || trimmed.starts_with(UPDATE_FILE)
}

/// The hunk before a header position; used to give a precise hint when the header is invalid.
#[derive(Clone, Copy)]
enum Previous<'a> {
    Start,
    Add(&'a str),
    Other,
}

struct Parser<'a> {
    lines: Vec<&'a str>,
    pos: usize,
}

impl<'a> Parser<'a> {
    /// 1-based number of the line at `self.pos`.
    fn line_no(&self) -> usize {
        self.pos + 1
    }

    fn parse(mut self) -> Result<Patch, PatchError> {
        while self.pos < self.lines.len() && is_blank(self.lines[self.pos]) {
            self.pos += 1;
        }
        let Some(first) = self.lines.get(self.pos) else {
            return Err(error(1, format!("the patch is empty; it must start with '{BEGIN_PATCH}'")));
        };
        if first.trim() != BEGIN_PATCH {
            return Err(error(
                self.line_no(),
                format!("the patch must start with '{BEGIN_PATCH}', found '{}'", first.trim()),
            ));
        }
        self.pos += 1;

        let mut hunks = Vec::new();
        let mut previous = Previous::Start;
        loop {
            while self.pos < self.lines.len() && is_blank(self.lines[self.pos]) {
                self.pos += 1;
            }
            let Some(raw) = self.lines.get(self.pos).copied() else {
                return Err(error(self.line_no(), format!("the patch ends without '{END_PATCH}'")));
            };
            let trimmed = raw.trim();
            let header_line = self.line_no();
            if trimmed == END_PATCH {
                if hunks.is_empty() {
                    return Err(error(
                        header_line,
                        "the patch is empty: it contains no '*** Add File:', '*** Delete File:' or '*** Update File:' \
                         operation",
                    ));
                }
                self.pos += 1;
                if let Some(offset) = self.lines[self.pos..].iter().position(|l| !is_blank(l)) {
                    let at = self.pos + offset;
                    return Err(error(at + 1, format!("unexpected text after '{END_PATCH}': '{}'", self.lines[at])));
                }
                return Ok(Patch { hunks });
            }
            self.pos += 1;
            if let Some(rest) = trimmed.strip_prefix(ADD_FILE) {
                let path = header_path(rest, ADD_FILE, header_line)?;
                let contents = self.add_contents();
                previous = Previous::Add(path);
                hunks.push(Hunk::Add { path: path.to_string(), contents, line: header_line });
            } else if let Some(rest) = trimmed.strip_prefix(DELETE_FILE) {
                let path = header_path(rest, DELETE_FILE, header_line)?;
                previous = Previous::Other;
                hunks.push(Hunk::Delete { path: path.to_string(), line: header_line });
            } else if let Some(rest) = trimmed.strip_prefix(UPDATE_FILE) {
                let path = header_path(rest, UPDATE_FILE, header_line)?;
                let move_to = match self.lines.get(self.pos).map(|l| l.trim()) {
                    Some(next) if next.starts_with(MOVE_TO) => {
                        let dest = header_path(&next[MOVE_TO.len()..], MOVE_TO, self.line_no())?;
                        self.pos += 1;
                        Some(dest.to_string())
                    }
                    _ => None,
                };
                let chunks = self.update_chunks(path, header_line)?;
                previous = Previous::Other;
                hunks.push(Hunk::Update { path: path.to_string(), move_to, chunks, line: header_line });
            } else {
                let hint = match previous {
                    Previous::Add(path) => {
                        format!("; every line of the added file '{path}' must start with '+'")
                    }
                    Previous::Start | Previous::Other => String::new(),
                };
                return Err(error(
                    header_line,
                    format!(
                        "'{trimmed}' is not a valid hunk header; expected '*** Add File: <path>', \
                         '*** Delete File: <path>', '*** Update File: <path>' or '{END_PATCH}'{hint}"
                    ),
                ));
            }
        }
    }

    /// The `+` lines of an `Add File` hunk. Blank lines between `+` lines count as empty lines of the file.
    fn add_contents(&mut self) -> String {
        let mut contents = String::new();
        let mut blanks = 0usize;
        while let Some(raw) = self.lines.get(self.pos) {
            if let Some(text) = raw.strip_prefix('+') {
                for _ in 0..blanks {
                    contents.push('\n');
                }
                blanks = 0;
                contents.push_str(text);
                contents.push('\n');
            } else if is_blank(raw) {
                blanks += 1;
            } else {
                break;
            }
            self.pos += 1;
        }
        // Trailing blank lines separate hunks; give them back to the hunk loop.
        self.pos -= blanks;
        contents
    }

    /// The chunks of an `Update File` hunk, up to the next hunk header or `*** End Patch`.
    fn update_chunks(&mut self, path: &str, header_line: usize) -> Result<Vec<Chunk>, PatchError> {
        let mut chunks: Vec<Chunk> = Vec::new();
        let mut current: Option<Chunk> = None;
        let mut blanks = 0usize;
        let mut after_end_of_file = false;
        while let Some(raw) = self.lines.get(self.pos).copied() {
            let trimmed = raw.trim();
            let line_no = self.line_no();
            if trimmed == END_PATCH || is_hunk_header(trimmed) {
                break;
            }
            if trimmed.starts_with(MOVE_TO) {
                return Err(error(line_no, format!("'{MOVE_TO}' must come right after '{UPDATE_FILE} {path}'")));
            }
            if trimmed == END_OF_FILE {
                match current.take() {
                    Some(mut chunk) if !chunk.lines.is_empty() => {
                        chunk.end_of_file = true;
                        chunks.push(chunk);
                    }
                    _ => {
                        return Err(error(
                            line_no,
                            format!("'{END_OF_FILE}' in the update of '{path}' must follow the lines of a change"),
                        ));
                    }
                }
                blanks = 0;
                after_end_of_file = true;
                self.pos += 1;
                continue;
            }
            if let Some(rest) = trimmed.strip_prefix("@@") {
                let anchor = anchor_text(rest);
                match current.as_mut() {
                    // Chained `@@` lines narrow the position of one chunk.
                    Some(chunk) if chunk.lines.is_empty() => chunk.anchors.extend(anchor),
                    _ => {
                        if let Some(done) = current.take() {
                            chunks.push(done);
                        }
                        current = Some(Chunk {
                            anchors: anchor.into_iter().collect(),
                            lines: Vec::new(),
                            end_of_file: false,
                            line: line_no,
                        });
                    }
                }
                blanks = 0;
                after_end_of_file = false;
                self.pos += 1;
                continue;
            }
            let change = match raw.chars().next() {
                Some('+') => ChangeLine::Add(raw[1..].to_string()),
                Some('-') => ChangeLine::Remove(raw[1..].to_string()),
                Some(' ') => ChangeLine::Context(raw[1..].to_string()),
                _ if trimmed.is_empty() => {
                    // A lone blank line: an empty context line if more lines of the chunk follow.
                    blanks += 1;
                    self.pos += 1;
                    continue;
                }
                _ => {
                    return Err(error(
                        line_no,
                        format!(
                            "unexpected line in the update of '{path}': '{raw}'; lines of a change must start with \
                             '+', '-' or ' ' (space), and a new change with '@@'"
                        ),
                    ));
                }
            };
            if after_end_of_file {
                return Err(error(
                    line_no,
                    format!("a change after '{END_OF_FILE}' in the update of '{path}' must start with '@@'"),
                ));
            }
            let chunk = current.get_or_insert_with(|| Chunk {
                anchors: Vec::new(),
                lines: Vec::new(),
                end_of_file: false,
                line: line_no,
            });
            if !chunk.lines.is_empty() {
                for _ in 0..blanks {
                    chunk.lines.push(ChangeLine::Context(String::new()));
                }
            }
            blanks = 0;
            chunk.lines.push(change);
            self.pos += 1;
        }
        if let Some(chunk) = current {
            if chunk.lines.is_empty() {
                return Err(error(
                    chunk.line,
                    format!("the '@@' at this line in the update of '{path}' is not followed by any change lines"),
                ));
            }
            chunks.push(chunk);
        }
        if chunks.is_empty() {
            return Err(error(header_line, format!("the update of '{path}' contains no changes")));
        }
        Ok(chunks)
    }
}

/// The path after a header marker; it must not be empty.
fn header_path<'a>(rest: &'a str, marker: &str, line: usize) -> Result<&'a str, PatchError> {
    let path = rest.trim();
    if path.is_empty() {
        return Err(error(line, format!("'{marker}' needs a path")));
    }
    Ok(path)
}

/// The anchor of an `@@` line (text after `@@`), or `None` for a bare `@@`. A unified-diff range header
/// (`@@ -3,7 +3,8 @@ text`) keeps only the text after its closing `@@`.
fn anchor_text(rest: &str) -> Option<String> {
    let mut text = rest.trim();
    if let Some(after) = strip_unified_range(text) {
        text = after.trim();
    }
    (!text.is_empty()).then(|| text.to_string())
}

/// If `text` starts with `-a[,b] +c[,d] @@`, returns what follows.
fn strip_unified_range(text: &str) -> Option<&str> {
    fn range(text: &str, sign: char) -> Option<&str> {
        let rest = text.strip_prefix(sign)?;
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == ',').len();
        (digits > 0 && rest[..digits].starts_with(|c: char| c.is_ascii_digit())).then(|| &rest[digits..])
    }
    let rest = range(text, '-')?;
    let rest = range(rest.trim_start(), '+')?;
    rest.trim_start().strip_prefix("@@")
}

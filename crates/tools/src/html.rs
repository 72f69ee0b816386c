//! HTML to readable plain text in one pass over html5ever's tokens: linear in the input however
//! deeply it nests (no tree, no layout). Scripts, styles and other invisible elements are
//! dropped; block elements and `<br>` start new lines, list items get a `- `, whitespace
//! collapses outside `<pre>`; entities are decoded by the tokenizer.

use std::cell::{Cell, RefCell};

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts, states::RawKind,
};

/// Elements whose content is not shown.
const HIDDEN: &[&str] = &["script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas"];

/// Elements set apart by a blank line.
const PARAGRAPHS: &[&str] = &[
    "p",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "main",
    "aside",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "dl",
    "table",
    "blockquote",
    "pre",
    "hr",
    "form",
    "figure",
    "address",
    "details",
];

/// Elements that start and end a line.
const LINES: &[&str] = &["div", "li", "dt", "dd", "tr", "figcaption", "summary", "caption"];

/// The text of an HTML document, stopping once `max_chars` characters are collected.
pub fn to_text(html: &str, max_chars: usize) -> String {
    let sink = TextSink { out: RefCell::new(String::new()), hidden: Cell::new(0), pre: Cell::new(0), max_chars };
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    tidy(&tokenizer.sink.out.borrow())
}

struct TextSink {
    out: RefCell<String>,
    hidden: Cell<usize>,
    pre: Cell<usize>,
    max_chars: usize,
}

impl TextSink {
    fn push_text(&self, text: &str) {
        let mut out = self.out.borrow_mut();
        let limit = self.max_chars.saturating_mul(4);
        for c in text.chars() {
            if out.len() >= limit {
                return;
            }
            if self.pre.get() > 0 {
                out.push(c);
            } else if c.is_whitespace() {
                if !out.is_empty() && !out.ends_with([' ', '\n']) {
                    out.push(' ');
                }
            } else {
                out.push(c);
            }
        }
    }

    /// Ends the line (and leaves a blank line after it when `blank`).
    fn newline(&self, blank: bool) {
        let mut out = self.out.borrow_mut();
        while out.ends_with(' ') {
            out.pop();
        }
        if out.is_empty() {
            return;
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
        if blank && !out.ends_with("\n\n") {
            out.push('\n');
        }
    }
}

impl TokenSink for TextSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        match token {
            Token::TagToken(tag) => {
                let name: &str = &tag.name;
                let start = tag.kind == TagKind::StartTag;
                if HIDDEN.contains(&name) {
                    if start && !tag.self_closing {
                        self.hidden.set(self.hidden.get() + 1);
                        // The tokenizer alone does not know these hold raw text.
                        match name {
                            "script" => return TokenSinkResult::RawData(RawKind::ScriptData),
                            "style" | "noscript" | "iframe" => return TokenSinkResult::RawData(RawKind::Rawtext),
                            _ => {}
                        }
                    } else if !start {
                        self.hidden.set(self.hidden.get().saturating_sub(1));
                    }
                    return TokenSinkResult::Continue;
                }
                if self.hidden.get() > 0 {
                    return TokenSinkResult::Continue;
                }
                if name == "pre" {
                    self.pre.set(if start { self.pre.get() + 1 } else { self.pre.get().saturating_sub(1) });
                }
                if name == "br" {
                    self.out.borrow_mut().push('\n');
                } else if name == "td" || name == "th" {
                    self.push_text(" ");
                } else if PARAGRAPHS.contains(&name) || LINES.contains(&name) {
                    self.newline(PARAGRAPHS.contains(&name));
                    if start && name == "li" {
                        self.out.borrow_mut().push_str("- ");
                    }
                }
            }
            Token::CharacterTokens(text) if self.hidden.get() == 0 => self.push_text(&text),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

/// Trailing spaces off every line, at most one blank line in a row, no blank start or end.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_lists_and_entities_become_plain_lines() {
        let html = "<html><head><title>T</title><style>p{color:red}</style><script>if (a<b) x()</script></head>\
                    <body><h1>Main &amp; Title</h1><p>First <b>bold</b>\n   paragraph.</p><ul><li>one</li><li>two</li></ul>\
                    <pre>a  b\n c</pre>line<br>break</body></html>";
        assert_eq!(
            to_text(html, 10_000),
            "Main & Title\n\nFirst bold paragraph.\n\n- one\n- two\n\na  b\n c\n\nline\nbreak"
        );
    }

    #[test]
    fn a_megabyte_of_nesting_converts() {
        // 1 MB of nested elements: a layout-based converter spent 30 s on such a page.
        let depth = 50_000;
        let html = format!("{}deep text{}", "<div><span>".repeat(depth), "</span></div>".repeat(depth));
        assert!(html.len() > 1_000_000);
        assert_eq!(to_text(&html, 1000), "deep text");
    }

    #[test]
    fn collection_stops_past_the_character_budget() {
        let html = format!("<p>{}</p>", "word ".repeat(100_000));
        assert!(to_text(&html, 100).len() <= 100 * 4 + 5);
    }
}

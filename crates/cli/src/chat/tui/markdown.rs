//! Markdown to styled terminal lines: headings, emphasis, inline and fenced code, lists,
//! quotes, links and rules — what models write in answers. Wrapping is left to the view.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// Builds lines from the parser's events.
struct Renderer {
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// Open lists: the next number of each ordered one.
    lists: Vec<Option<u64>>,
    quote: usize,
    in_code: bool,
}

impl Renderer {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, patch: Style) {
        self.styles.push(self.style().patch(patch));
    }

    fn prefix(&self) -> Vec<Span<'static>> {
        let mut p = Vec::new();
        for _ in 0..self.quote {
            p.push(Span::styled("│ ", Style::new().fg(Color::DarkGray)));
        }
        if !self.lists.is_empty() {
            p.push(Span::raw("  ".repeat(self.lists.len())));
        }
        p
    }

    fn text(&mut self, text: &str) {
        if self.current.is_empty() {
            self.current = self.prefix();
        }
        self.current.push(Span::styled(text.to_string(), self.style()));
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.lines.push(Line::from(std::mem::take(&mut self.current)));
        }
    }

    fn blank(&mut self) {
        self.flush();
        if self.lines.last().is_some_and(|l| !l.spans.is_empty()) {
            self.lines.push(Line::default());
        }
    }

    fn code_block(&mut self, text: &str) {
        for line in text.split_inclusive('\n') {
            let mut spans = self.prefix();
            spans.push(Span::styled("  ", Style::new()));
            let line = super::view::expand_tabs(line.trim_end_matches('\n')).into_owned();
            spans.push(Span::styled(line, Style::new().fg(Color::Green)));
            self.lines.push(Line::from(spans));
        }
    }

    fn start(&mut self, tag: Tag) {
        match tag {
            Tag::Heading { level, .. } => {
                self.blank();
                let color = if level == HeadingLevel::H1 { Color::Magenta } else { Color::Cyan };
                self.push_style(Style::new().fg(color).add_modifier(Modifier::BOLD));
            }
            Tag::Emphasis => self.push_style(Style::new().add_modifier(Modifier::ITALIC)),
            Tag::Strong => self.push_style(Style::new().add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => self.push_style(Style::new().add_modifier(Modifier::CROSSED_OUT)),
            Tag::Link { .. } => self.push_style(Style::new().fg(Color::Blue).add_modifier(Modifier::UNDERLINED)),
            Tag::CodeBlock(kind) => {
                self.blank();
                if let CodeBlockKind::Fenced(lang) = kind
                    && !lang.is_empty()
                {
                    self.lines.push(Line::styled(format!("  {lang}"), Style::new().fg(Color::DarkGray)));
                }
                self.in_code = true;
            }
            Tag::BlockQuote(_) => {
                self.blank();
                self.quote += 1;
            }
            Tag::List(start) => {
                self.flush();
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush();
                let depth = self.lists.len().saturating_sub(1);
                let mut spans = Vec::new();
                for _ in 0..self.quote {
                    spans.push(Span::styled("│ ", Style::new().fg(Color::DarkGray)));
                }
                spans.push(Span::raw("  ".repeat(depth)));
                let bullet = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{}. ", *n - 1)
                    }
                    _ => "• ".to_string(),
                };
                spans.push(Span::styled(bullet, Style::new().fg(Color::Yellow)));
                self.current = spans;
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) | TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link => {
                self.styles.pop();
                if matches!(tag, TagEnd::Heading(_)) {
                    self.blank();
                }
            }
            TagEnd::Paragraph => {
                if self.lists.is_empty() {
                    self.blank();
                } else {
                    self.flush();
                }
            }
            TagEnd::CodeBlock => {
                self.in_code = false;
                self.blank();
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.quote = self.quote.saturating_sub(1);
            }
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
                if self.lists.is_empty() {
                    self.blank();
                }
            }
            TagEnd::Item => self.flush(),
            _ => {}
        }
    }
}

/// `markdown` as styled lines.
pub fn render(markdown: &str) -> Vec<Line<'static>> {
    let mut r = Renderer {
        lines: Vec::new(),
        current: Vec::new(),
        styles: Vec::new(),
        lists: Vec::new(),
        quote: 0,
        in_code: false,
    };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => r.start(tag),
            Event::End(tag) => r.end(tag),
            Event::Text(t) if r.in_code => r.code_block(&t),
            Event::Text(t) => r.text(&t),
            Event::Code(c) => {
                if r.current.is_empty() {
                    r.current = r.prefix();
                }
                r.current.push(Span::styled(c.to_string(), Style::new().fg(Color::Yellow)));
            }
            Event::SoftBreak => r.text(" "),
            Event::HardBreak => r.flush(),
            Event::Rule => {
                r.blank();
                r.lines.push(Line::styled("─".repeat(40), Style::new().fg(Color::DarkGray)));
            }
            Event::TaskListMarker(done) => r.text(if done { "[x] " } else { "[ ] " }),
            Event::Html(h) | Event::InlineHtml(h) => r.text(&h),
            _ => {}
        }
    }
    r.flush();
    while r.lines.last().is_some_and(|l| l.spans.is_empty()) {
        r.lines.pop();
    }
    r.lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn answers_are_styled_by_their_markdown() {
        let lines = render("# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n\n```rust\nfn main() {}\n```\n");
        let text = plain(&lines);
        assert_eq!(text[0], "Title");
        assert!(lines[0].spans[0].style.add_modifier.contains(Modifier::BOLD));
        assert_eq!(text[2], "Some bold and code.");
        let bold = lines[2].spans.iter().find(|s| s.content == "bold").unwrap();
        assert!(bold.style.add_modifier.contains(Modifier::BOLD));
        assert!(text.contains(&"• one".to_string()) && text.contains(&"• two".to_string()), "{text:?}");
        assert!(text.iter().any(|l| l.contains("fn main() {}")), "{text:?}");
    }

    #[test]
    fn tabs_in_a_code_block_are_shown_as_spaces() {
        let text = plain(&render("```\nname\tsize\n```\n"));
        assert!(text.iter().any(|l| l.contains("name    size")), "{text:?}");
    }

    #[test]
    fn ordered_lists_are_numbered() {
        let text = plain(&render("1. first\n2. second\n"));
        assert_eq!(text, ["1. first", "2. second"]);
    }
}

//! Diagnostics of a blueprint: each with its line and column and the source line with a
//! caret under the part at fault; several are reported at once.

use std::ops::Range;

/// One problem, located in the blueprint's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// What is wrong.
    pub message: String,
    /// Byte range in the text.
    pub span: Range<usize>,
    /// A hint on how to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem at `span`.
    pub fn new(message: impl Into<String>, span: Range<usize>) -> Self {
        Self { message: message.into(), span, help: None }
    }

    /// With a hint.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// The problems of one blueprint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics {
    /// Where the text came from (a path, or a name).
    pub origin: String,
    /// The text.
    pub text: String,
    /// The problems, in order of position.
    pub items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// No problems yet.
    pub fn new(origin: &str, source: &str) -> Self {
        Self { origin: origin.to_string(), text: source.to_string(), items: Vec::new() }
    }

    /// Adds a problem.
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// `Err(self)` when there are problems (sorted by position).
    pub fn into_result(mut self) -> Result<(), Diagnostics> {
        if self.items.is_empty() {
            return Ok(());
        }
        self.items.sort_by_key(|d| d.span.start);
        Err(self)
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
        (line, column)
    }

    fn render(&self, d: &Diagnostic, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (line, column) = self.position(d.span.start);
        writeln!(f, "error: {}", d.message)?;
        writeln!(f, "  --> {}:{line}:{column}", self.origin)?;
        let text = self.text.lines().nth(line - 1).unwrap_or("");
        let width = line.to_string().len();
        writeln!(f, "{:width$} |", "")?;
        writeln!(f, "{line} | {text}")?;
        let start = column - 1;
        let span_chars = self.text[floor(&self.text, d.span.start)..floor(&self.text, d.span.end)]
            .split('\n')
            .next()
            .map(|s| s.chars().count())
            .unwrap_or(1)
            .max(1);
        let carets = span_chars.min(text.chars().count().saturating_sub(start).max(1));
        writeln!(f, "{:width$} | {}{}", "", " ".repeat(start), "^".repeat(carets))?;
        if let Some(help) = &d.help {
            writeln!(f, "{:width$} = help: {help}", "")?;
        }
        Ok(())
    }
}

fn floor(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl std::fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, d) in self.items.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            self.render(d, f)?;
        }
        let n = self.items.len();
        write!(f, "{n} error{} in {}", if n == 1 { "" } else { "s" }, self.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_line_column_and_a_caret_under_the_span() {
        let src = "name = \"g\"\nto = \"reveiw\"\n";
        let mut d = Diagnostics::new("g.toml", src);
        let start = src.find("\"reveiw\"").unwrap();
        d.push(Diagnostic::new("unknown node `reveiw`", start..start + 8).help("did you mean `review`?"));
        let text = d.into_result().unwrap_err().to_string();
        assert!(text.contains("--> g.toml:2:6"), "{text}");
        assert!(text.contains("2 | to = \"reveiw\"\n  |      ^^^^^^^^\n"), "{text}");
        assert!(text.contains("help: did you mean `review`?"), "{text}");
        assert!(text.ends_with("1 error in g.toml"), "{text}");
    }
}

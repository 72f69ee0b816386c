//! Keeping text within a size a model (or a terminal line) can take: cutting at character
//! boundaries, keeping head and tail, and always saying how much was cut.

/// The longest prefix of `s` with at most `max` bytes that ends on a character boundary.
pub fn prefix_at_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts `s` to at most `max_chars` characters, appending a note with the number of
/// characters cut.
pub fn clip_chars(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((idx, _)) => {
            let rest = s[idx..].chars().count();
            format!("{}… [{rest} more characters]", &s[..idx])
        }
    }
}

/// `text` on one line (newlines shown as `⏎`), cut to at most `max_chars` characters like
/// [`clip_chars`]: for log lines and terminal output.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let flat: String = text.chars().map(|c| if c == '\n' { '⏎' } else { c }).collect();
    clip_chars(&flat, max_chars)
}

/// Keeps the first and last characters of `text` (at most `max` in all) with a marker in
/// between saying how many characters were cut.
pub fn truncate_middle(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let half = max / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - (max - half)).collect();
    format!("{head}\n[... {} chars truncated ...]\n{tail}", group_thousands(count - max))
}

/// `1234567` as `1,234,567`.
pub fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_never_splits_a_character() {
        assert_eq!(prefix_at_boundary("añb", 2), "a");
        assert_eq!(prefix_at_boundary("abc", 10), "abc");
    }

    #[test]
    fn clip_says_how_many_characters_were_cut() {
        assert_eq!(clip_chars("héllo world", 5), "héllo… [6 more characters]");
        assert_eq!(clip_chars("short", 5), "short");
    }

    #[test]
    fn middle_truncation_keeps_head_and_tail() {
        let text = format!("{}{}{}", "H".repeat(50), "m".repeat(1000), "T".repeat(50));
        let t = truncate_middle(&text, 100);
        assert!(t.starts_with(&"H".repeat(50)) && t.ends_with(&"T".repeat(50)), "{t}");
        assert!(t.contains("[... 1,000 chars truncated ...]"), "{t}");
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1234567), "1,234,567");
    }
}

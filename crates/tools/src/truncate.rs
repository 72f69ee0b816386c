//! Keeping tool output within a size a model can read: a head-and-tail byte collector for
//! streamed output, and helpers that cut text at character boundaries and say what was cut.

use std::collections::VecDeque;

/// Collects a byte stream, keeping the first `head` and the last `tail` bytes and counting
/// what fell out between them.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    cut_bytes: u64,
    cut_lines: u64,
}

impl HeadTail {
    /// A collector that keeps at most `max_bytes` in total, half from the start and half
    /// from the end.
    pub fn new(max_bytes: usize) -> Self {
        let head_cap = max_bytes / 2;
        Self::with_split(head_cap, max_bytes - head_cap)
    }

    /// A collector keeping `head` bytes from the start and `tail` bytes from the end.
    pub fn with_split(head: usize, tail: usize) -> Self {
        Self { head_cap: head, tail_cap: tail, head: Vec::new(), tail: VecDeque::new(), cut_bytes: 0, cut_lines: 0 }
    }

    /// Adds bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        // Bytes that cannot fit in the tail even alone are cut straight away.
        if bytes.len() > self.tail_cap {
            let skip = bytes.len() - self.tail_cap;
            self.cut(&bytes[..skip]);
            bytes = &bytes[skip..];
            let drained: Vec<u8> = self.tail.drain(..).collect();
            self.cut(&drained);
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        if overflow > 0 {
            let drained: Vec<u8> = self.tail.drain(..overflow).collect();
            self.cut(&drained);
        }
        self.tail.extend(bytes);
    }

    fn cut(&mut self, bytes: &[u8]) {
        self.cut_bytes += bytes.len() as u64;
        self.cut_lines += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    }

    /// Bytes dropped from the middle.
    pub fn cut_bytes(&self) -> u64 {
        self.cut_bytes
    }

    /// Total bytes seen.
    pub fn total_bytes(&self) -> u64 {
        self.head.len() as u64 + self.tail.len() as u64 + self.cut_bytes
    }

    /// Whether nothing was seen.
    pub fn is_empty(&self) -> bool {
        self.total_bytes() == 0
    }

    /// The kept text (invalid UTF-8 replaced), with a marker where the middle was cut that
    /// says how many bytes and lines are missing.
    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        if self.cut_bytes == 0 {
            let mut all = self.head.clone();
            all.extend(self.tail.iter());
            return String::from_utf8_lossy(&all).into_owned();
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        let sep_before = if head.ends_with('\n') || head.is_empty() { "" } else { "\n" };
        let sep_after = if tail.starts_with('\n') { "" } else { "\n" };
        format!(
            "{head}{sep_before}[... {} bytes ({} lines) cut from the middle of the output ...]{sep_after}{tail}",
            self.cut_bytes, self.cut_lines
        )
    }
}

pub use recursive_core::text::{clip_chars, prefix_at_boundary};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut c = HeadTail::new(100);
        c.push(b"hello\n");
        c.push(b"world\n");
        assert_eq!(c.render(), "hello\nworld\n");
        assert_eq!(c.cut_bytes(), 0);
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_counts_the_cut() {
        let mut c = HeadTail::with_split(10, 10);
        let text: String = (0..100).map(|i| format!("line{i:03}\n")).collect();
        for chunk in text.as_bytes().chunks(7) {
            c.push(chunk);
        }
        let out = c.render();
        assert!(out.starts_with("line000\nli"), "{out}");
        assert!(out.ends_with("\nline099\n"), "{out}");
        assert_eq!(c.cut_bytes(), 800 - 20);
        assert_eq!(c.total_bytes(), 800);
        assert!(out.contains("780 bytes"), "{out}");
        // 100 newlines in total; the head keeps 1 and the tail keeps 2.
        assert!(out.contains("(97 lines)"), "{out}");
    }

    #[test]
    fn one_huge_push_is_cut_the_same_way() {
        let mut c = HeadTail::with_split(4, 4);
        c.push(b"abcdefghijklmnop");
        assert_eq!(c.cut_bytes(), 8);
        let out = c.render();
        assert!(out.starts_with("abcd"), "{out}");
        assert!(out.ends_with("mnop"), "{out}");
    }

    #[test]
    fn prefix_never_splits_a_character() {
        assert_eq!(prefix_at_boundary("héllo", 2), "h");
        assert_eq!(prefix_at_boundary("héllo", 3), "hé");
        assert_eq!(prefix_at_boundary("ab", 5), "ab");
    }

    #[test]
    fn clip_chars_says_how_much_was_cut() {
        assert_eq!(clip_chars("abcdef", 4), "abcd… [2 more characters]");
        assert_eq!(clip_chars("abc", 4), "abc");
    }
}

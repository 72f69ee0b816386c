//! Captured output of a snippet, capped: the first half of the cap is kept as head, the latest
//! text as tail, and the number of dropped characters is reported.

/// Captured output, capped: the first half of the cap is kept as head, the latest text as tail.
pub(crate) struct OutputBuffer {
    head: String,
    tail: String,
    half: usize,
    dropped: usize,
    pub(crate) frozen: bool,
}

impl OutputBuffer {
    pub(crate) fn new(cap: usize) -> Self {
        Self { head: String::new(), tail: String::new(), half: cap.max(2) / 2, dropped: 0, frozen: false }
    }

    pub(crate) fn push_str(&mut self, s: &str) {
        if self.frozen {
            return;
        }
        let mut rest = s;
        if self.dropped == 0 && self.tail.is_empty() && self.head.len() < self.half {
            let room = self.half - self.head.len();
            let cut = floor_char_boundary(rest, room.min(rest.len()));
            self.head.push_str(&rest[..cut]);
            rest = &rest[cut..];
        }
        if rest.is_empty() {
            return;
        }
        self.tail.push_str(rest);
        if self.tail.len() > 2 * self.half {
            let excess = self.tail.len() - self.half;
            let cut = ceil_char_boundary(&self.tail, excess);
            self.dropped += self.tail[..cut].chars().count();
            self.tail.drain(..cut);
        }
    }

    pub(crate) fn finish(self) -> (String, usize) {
        let mut out = self.head;
        if self.dropped > 0 {
            out.push_str(&format!("\n[... {} printed chars dropped ...]\n", self.dropped));
        }
        out.push_str(&self.tail);
        (out, self.dropped)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_buffer_keeps_head_and_tail() {
        let mut b = OutputBuffer::new(10);
        for i in 0..100 {
            b.push_str(&format!("{}", i % 10));
        }
        let (text, dropped) = b.finish();
        assert_eq!(dropped, 90);
        assert!(text.starts_with("01234"), "{text}");
        assert!(text.ends_with("56789"), "{text}");
        assert!(text.contains("90 printed chars dropped"), "{text}");
    }

    #[test]
    fn output_buffer_under_cap_is_verbatim() {
        let mut b = OutputBuffer::new(100);
        b.push_str("héllo\n");
        b.push_str("world");
        assert_eq!(b.finish(), ("héllo\nworld".to_string(), 0));
    }
}

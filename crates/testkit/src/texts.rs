//! Large inputs for tests and benchmarks: a log-like text with one needle in it.

/// The code word [`haystack`] hides.
pub const NEEDLE: &str = "CODEWORD-7Q4";

/// A text of about `bytes` bytes of log-like lines with one line holding [`NEEDLE`] (line 5000).
pub fn haystack(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    let mut i = 0usize;
    while s.len() < bytes {
        if i == 5000 {
            s.push_str(&format!("note: the vault {NEEDLE} opens on tuesdays\n"));
        }
        s.push_str(&format!("line {i:07} status=ok service=search latency_ms={}\n", i % 900));
        i += 1;
    }
    s
}

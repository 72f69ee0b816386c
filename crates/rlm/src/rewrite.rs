//! The await rewrite: a small Python lexer pass that lets one host function be called both
//! as `x = llm_query(p)` and as `x = await llm_query(p)`.
//!
//! Monty cannot serve both forms with one function (the host must answer a call either with a
//! value or with a pending future, and the call does not say whether it will be awaited). So
//! before a snippet runs, calls to host functions that are directly preceded by `await`, or
//! whose innermost enclosing call is `gather(...)` / `asyncio.gather(...)`, are renamed to an
//! internal alias ([`ASYNC_PREFIX`] + name) that the host answers with a pending future. Every
//! other call is answered synchronously. String literals, the literal parts of f-strings and
//! comments are skipped; the expressions inside f-string replacement fields are lexed as code.
//!
//! [`restore_names`] undoes the renaming in error text shown to the model, keeping traceback
//! carets aligned.

/// Prefix of the internal alias of an awaited host-function call.
pub const ASYNC_PREFIX: &str = "__rlm_async_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    /// An identifier, keyword or number, with its byte span.
    Word(usize, usize),
    /// A string literal (of any kind).
    Str,
    /// One punctuation byte.
    Punct(u8),
    /// A line break outside brackets' significance (kept for call detection).
    Newline,
}

/// Python keywords after which `(` opens a group, not a call.
const KEYWORDS: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else", "except",
    "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
    "return", "try", "while", "with", "yield", "None", "True", "False",
];

/// String prefixes (lower-cased) that may precede a quote.
const STRING_PREFIXES: &[&str] = &["r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt"];

struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    toks: Vec<Tok>,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Self {
        Self { src: src.as_bytes(), pos: 0, toks: Vec::new() }
    }

    fn peek(&self, off: usize) -> Option<u8> {
        self.src.get(self.pos + off).copied()
    }

    /// Lexes code until the end, or (inside an f-string field) until an unbalanced `}`, a
    /// top-level `:` (format spec) or a top-level `!` conversion. Returns the byte that
    /// stopped it, if any (not consumed).
    fn code(&mut self, in_field: bool) -> Option<u8> {
        let mut depth = 0usize;
        while let Some(b) = self.peek(0) {
            match b {
                b'#' => {
                    while let Some(c) = self.peek(0) {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                b'\n' => {
                    self.toks.push(Tok::Newline);
                    self.pos += 1;
                }
                b'\\' | b' ' | b'\t' | b'\r' | b'\x0c' => self.pos += 1,
                b'\'' | b'"' => self.string(0),
                b if is_word_byte(b) => {
                    let start = self.pos;
                    while self.peek(0).is_some_and(is_word_byte) {
                        self.pos += 1;
                    }
                    let word = &self.src[start..self.pos];
                    let is_prefix = word.len() <= 2
                        && STRING_PREFIXES.iter().any(|p| p.as_bytes().eq_ignore_ascii_case(word))
                        && matches!(self.peek(0), Some(b'\'' | b'"'));
                    if is_prefix {
                        self.pos = start;
                        self.string(word.len());
                    } else {
                        self.toks.push(Tok::Word(start, self.pos));
                    }
                }
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    self.toks.push(Tok::Punct(b));
                    self.pos += 1;
                }
                b')' | b']' | b'}' => {
                    if in_field && depth == 0 {
                        return Some(b);
                    }
                    depth = depth.saturating_sub(1);
                    self.toks.push(Tok::Punct(b));
                    self.pos += 1;
                }
                b':' if in_field && depth == 0 && self.peek(1) != Some(b'=') => return Some(b),
                b'!' if in_field && depth == 0 && self.peek(1) != Some(b'=') => return Some(b),
                _ => {
                    self.toks.push(Tok::Punct(b));
                    self.pos += 1;
                }
            }
        }
        None
    }

    /// Lexes one string literal starting at `self.pos` with a prefix of `prefix_len` bytes.
    fn string(&mut self, prefix_len: usize) {
        let prefix = &self.src[self.pos..self.pos + prefix_len];
        let formatted = prefix.iter().any(|b| matches!(b, b'f' | b'F' | b't' | b'T'));
        self.pos += prefix_len;
        let Some(quote) = self.peek(0) else { return };
        let triple = self.peek(1) == Some(quote) && self.peek(2) == Some(quote);
        self.pos += if triple { 3 } else { 1 };
        self.toks.push(Tok::Str);
        while let Some(b) = self.peek(0) {
            if b == b'\\' {
                self.pos += 2;
                continue;
            }
            if b == quote {
                if !triple {
                    self.pos += 1;
                    return;
                }
                if self.peek(1) == Some(quote) && self.peek(2) == Some(quote) {
                    self.pos += 3;
                    return;
                }
            }
            if b == b'\n' && !triple {
                return;
            }
            if formatted && b == b'{' {
                if self.peek(1) == Some(b'{') {
                    self.pos += 2;
                    continue;
                }
                self.pos += 1;
                self.field();
                continue;
            }
            self.pos += 1;
        }
    }

    /// Lexes an f-string replacement field after its `{`, through its closing `}`.
    fn field(&mut self) {
        // A field is its own statement-like context for call detection.
        self.toks.push(Tok::Newline);
        let stop = self.code(true);
        if stop == Some(b'!') {
            // Conversion (`!r`): skip to the spec or the end of the field.
            while let Some(b) = self.peek(0) {
                if b == b':' || b == b'}' {
                    break;
                }
                self.pos += 1;
            }
        }
        if self.peek(0) == Some(b':') {
            self.pos += 1;
            // Format spec: literal text with nested fields.
            while let Some(b) = self.peek(0) {
                match b {
                    b'{' => {
                        self.pos += 1;
                        self.field();
                    }
                    b'}' => break,
                    _ => self.pos += 1,
                }
            }
        }
        if self.peek(0) == Some(b'}') {
            self.pos += 1;
        }
        self.toks.push(Tok::Newline);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    GatherCall,
    Call,
    Other,
}

/// Renames awaited calls (and calls directly inside `gather(...)`) of the functions named by
/// `is_host` to their async alias. Returns the snippet unchanged when nothing matched.
pub fn rewrite_awaited_calls(src: &str, is_host: &dyn Fn(&str) -> bool) -> String {
    let mut lexer = Lexer::new(src);
    lexer.code(false);
    let toks = lexer.toks;
    let word = |t: Tok| match t {
        Tok::Word(a, b) => Some(&src[a..b]),
        _ => None,
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut inserts: Vec<usize> = Vec::new();
    for (i, &tok) in toks.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| toks[j]);
        match tok {
            Tok::Punct(b'(') => {
                let frame = match prev {
                    Some(Tok::Word(a, b)) if !KEYWORDS.contains(&&src[a..b]) => {
                        if &src[a..b] == "gather" {
                            Frame::GatherCall
                        } else {
                            Frame::Call
                        }
                    }
                    Some(Tok::Punct(b')' | b']')) => Frame::Call,
                    _ => Frame::Other,
                };
                stack.push(frame);
            }
            Tok::Punct(b'[' | b'{') => stack.push(Frame::Other),
            Tok::Punct(b')' | b']' | b'}') => {
                stack.pop();
            }
            Tok::Word(a, b) => {
                let name = &src[a..b];
                if !is_host(name) || toks.get(i + 1) != Some(&Tok::Punct(b'(')) {
                    continue;
                }
                if matches!(prev, Some(Tok::Punct(b'.'))) || prev.and_then(word).is_some_and(|w| w == "def") {
                    continue;
                }
                let awaited = prev.and_then(word) == Some("await");
                let in_gather =
                    stack.iter().rev().find(|f| **f != Frame::Other).is_some_and(|f| *f == Frame::GatherCall);
                if awaited || in_gather {
                    inserts.push(a);
                }
            }
            _ => {}
        }
    }
    if inserts.is_empty() {
        return src.to_string();
    }
    let mut out = String::with_capacity(src.len() + inserts.len() * ASYNC_PREFIX.len());
    let mut last = 0;
    for at in inserts {
        out.push_str(&src[last..at]);
        out.push_str(ASYNC_PREFIX);
        last = at;
    }
    out.push_str(&src[last..]);
    out
}

/// Removes the async alias prefix from text shown to the model (error messages, tracebacks),
/// shortening the caret line under a rewritten source line so the carets stay aligned.
pub fn restore_names(text: &str) -> String {
    if !text.contains(ASYNC_PREFIX) {
        return text.to_string();
    }
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut i = 0;
    let plen = ASYNC_PREFIX.chars().count();
    while i < lines.len() {
        let line = lines[i];
        if !line.contains(ASYNC_PREFIX) {
            out.push(line.to_string());
            i += 1;
            continue;
        }
        // Char columns of every occurrence in this line.
        let mut cols = Vec::new();
        let mut search = 0;
        while let Some(found) = line[search..].find(ASYNC_PREFIX) {
            let byte = search + found;
            cols.push(line[..byte].chars().count());
            search = byte + ASYNC_PREFIX.len();
        }
        out.push(line.replace(ASYNC_PREFIX, ""));
        if let Some(next) = lines.get(i + 1)
            && !next.trim().is_empty()
            && next.chars().all(|c| matches!(c, ' ' | '^' | '~' | '\t'))
        {
            let mut chars: Vec<char> = next.chars().collect();
            for &col in cols.iter().rev() {
                let start = col.min(chars.len());
                let end = (col + plen).min(chars.len());
                chars.drain(start..end);
            }
            out.push(chars.into_iter().collect::<String>().trim_end().to_string());
            i += 2;
        } else {
            i += 1;
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> bool {
        matches!(name, "llm_query" | "llm_query_batched" | "rlm_query" | "search")
    }

    fn rw(src: &str) -> String {
        rewrite_awaited_calls(src, &host)
    }

    #[test]
    fn plain_call_is_left_synchronous() {
        assert_eq!(rw("x = llm_query('p')"), "x = llm_query('p')");
    }

    #[test]
    fn awaited_call_is_renamed() {
        assert_eq!(rw("x = await llm_query('p')"), "x = await __rlm_async_llm_query('p')");
    }

    #[test]
    fn calls_directly_inside_gather_are_renamed() {
        assert_eq!(
            rw("rs = await asyncio.gather(*[llm_query(p) for p in ps])"),
            "rs = await asyncio.gather(*[__rlm_async_llm_query(p) for p in ps])"
        );
        assert_eq!(
            rw("rs = await gather(llm_query(a), rlm_query(b))"),
            "rs = await gather(__rlm_async_llm_query(a), __rlm_async_rlm_query(b))"
        );
        assert_eq!(
            rw("rs = await asyncio.gather(*(llm_query(p) for p in ps))"),
            "rs = await asyncio.gather(*(__rlm_async_llm_query(p) for p in ps))"
        );
    }

    #[test]
    fn call_nested_in_another_call_inside_gather_stays_sync() {
        assert_eq!(
            rw("await asyncio.gather(*[f(llm_query(p)) for p in ps])"),
            "await asyncio.gather(*[f(llm_query(p)) for p in ps])"
        );
    }

    #[test]
    fn strings_and_comments_are_not_rewritten() {
        let src = "s = 'await llm_query(p)'\n# await llm_query(p)\nt = \"\"\"await llm_query(x)\"\"\"";
        assert_eq!(rw(src), src);
    }

    #[test]
    fn fstring_fields_are_code_but_literal_parts_are_not() {
        assert_eq!(
            rw("s = f\"await llm_query(a) {await llm_query(p)} {{await llm_query(q)}}\""),
            "s = f\"await llm_query(a) {await __rlm_async_llm_query(p)} {{await llm_query(q)}}\""
        );
        assert_eq!(rw("s = f'{x!r:>{w}} {y}'"), "s = f'{x!r:>{w}} {y}'");
    }

    #[test]
    fn attribute_calls_and_definitions_are_ignored() {
        assert_eq!(rw("await obj.llm_query(p)"), "await obj.llm_query(p)");
        assert_eq!(rw("async def llm_query(p):\n    pass"), "async def llm_query(p):\n    pass");
    }

    #[test]
    fn unknown_names_are_ignored() {
        assert_eq!(rw("await other(p)"), "await other(p)");
    }

    #[test]
    fn restore_names_realigns_carets() {
        let tb = "  File \"<python-input-1>\", line 1, in <module>\n    r = await __rlm_async_llm_query(p)['x']\n              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\nTypeError: boom";
        let restored = restore_names(tb);
        assert_eq!(
            restored,
            "  File \"<python-input-1>\", line 1, in <module>\n    r = await llm_query(p)['x']\n              ^^^^^^^^^^^^^^^^^^^\nTypeError: boom"
        );
    }

    #[test]
    fn restore_names_renames_in_messages() {
        assert_eq!(restore_names("name '__rlm_async_search' is not defined"), "name 'search' is not defined");
    }
}

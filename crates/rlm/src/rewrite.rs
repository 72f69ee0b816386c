//! The await rewrite: a pass over ruff's Python tokens that lets one host function be called both
//! as `x = llm_query(p)` and as `x = await llm_query(p)`.
//!
//! Monty cannot serve both forms with one function (the host must answer a call either with a
//! value or with a pending future, and the call does not say whether it will be awaited). So
//! before a snippet runs, calls to host functions that are directly preceded by `await`, or
//! whose innermost enclosing call is `gather(...)` / `asyncio.gather(...)`, are renamed to an
//! internal alias ([`ASYNC_PREFIX`] + name) that the host answers with a pending future. Every
//! other call is answered synchronously. String literals, the literal parts of f-strings and
//! comments are skipped; the expressions inside f-string replacement fields are read as code.
//! The tokens are ruff's (the parser Monty is built on), read with its error recovery, so a
//! snippet that does not parse is still rewritten as far as it reads.
//!
//! [`restore_names`] undoes the renaming in error text shown to the model, keeping traceback
//! carets aligned.

use ruff_python_ast::token::TokenKind;
use ruff_python_parser::{Mode, ParseOptions, parse_unchecked};

/// Prefix of the internal alias of an awaited host-function call.
pub const ASYNC_PREFIX: &str = "__rlm_async_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    /// An identifier, keyword or number, with its byte span.
    Word(usize, usize),
    /// A string literal (of any kind), with the byte offset of its opening quote.
    Str(usize),
    /// One punctuation byte (an operator of several bytes is one `Punct` each).
    Punct(u8),
    /// A line break, and the bounds of an f-string's replacement field (each field is its own
    /// statement-like context for call detection).
    Newline,
}

/// Python keywords after which `(` opens a group, not a call.
const KEYWORDS: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else", "except",
    "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
    "return", "try", "while", "with", "yield", "None", "True", "False",
];

/// Where a token of an f-string (or t-string) sits.
enum Nest {
    /// The string's literal text.
    Literal,
    /// A replacement field's expression, with the brackets open inside it; after its `!` the
    /// conversion, which is not code.
    Field { depth: usize, conversion: bool },
    /// A replacement field's format spec: literal text and nested fields.
    Spec,
}

/// The snippet as the rewrite sees it, from ruff's tokens: words, strings (opaque, except the
/// code in f-string replacement fields), punctuation bytes and line breaks; comments,
/// indentation and the literal parts of f-strings dropped. A snippet that does not parse is
/// tokenized as far as ruff's error recovery goes.
fn tokens(src: &str) -> Vec<Tok> {
    let parsed = parse_unchecked(src, ParseOptions::from(Mode::Module));
    let mut toks = Vec::new();
    let mut nest: Vec<Nest> = Vec::new();
    for token in parsed.tokens().iter() {
        let (kind, range) = token.as_tuple();
        let (start, end) = (usize::from(range.start()), usize::from(range.end()));
        let text = src.get(start..end).unwrap_or_default();
        match (kind, nest.last_mut()) {
            (TokenKind::FStringStart | TokenKind::TStringStart, _) => {
                toks.push(Tok::Str(quote_at(text, start)));
                nest.push(Nest::Literal);
                continue;
            }
            (TokenKind::FStringEnd | TokenKind::TStringEnd, _) => {
                nest.pop();
                continue;
            }
            (TokenKind::FStringMiddle | TokenKind::TStringMiddle, _) => continue,
            // A logical line break is never inside a string: what is open there was left so.
            (TokenKind::Newline, _) => nest.clear(),
            (TokenKind::Lbrace, Some(Nest::Literal | Nest::Spec)) => {
                toks.push(Tok::Newline);
                nest.push(Nest::Field { depth: 0, conversion: false });
                continue;
            }
            (TokenKind::Rbrace, Some(Nest::Spec | Nest::Field { depth: 0, .. })) => {
                toks.push(Tok::Newline);
                nest.pop();
                continue;
            }
            (TokenKind::Colon, Some(top @ Nest::Field { depth: 0, .. })) => {
                *top = Nest::Spec;
                continue;
            }
            (_, Some(Nest::Literal | Nest::Spec | Nest::Field { conversion: true, .. })) => continue,
            (TokenKind::Exclamation, Some(Nest::Field { depth: 0, conversion })) => {
                *conversion = true;
                continue;
            }
            (TokenKind::Lpar | TokenKind::Lsqb | TokenKind::Lbrace, Some(Nest::Field { depth, .. })) => *depth += 1,
            (TokenKind::Rpar | TokenKind::Rsqb | TokenKind::Rbrace, Some(Nest::Field { depth, .. })) => {
                *depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        match kind {
            TokenKind::Comment | TokenKind::Indent | TokenKind::Dedent | TokenKind::EndOfFile => {}
            TokenKind::Newline | TokenKind::NonLogicalNewline => toks.push(Tok::Newline),
            TokenKind::String => toks.push(Tok::Str(quote_at(text, start))),
            TokenKind::Name | TokenKind::Int | TokenKind::Float | TokenKind::Complex => {
                toks.push(Tok::Word(start, end))
            }
            k if k.is_keyword() || k.is_soft_keyword() => toks.push(Tok::Word(start, end)),
            _ => toks.extend(text.bytes().filter(|b| !b.is_ascii_whitespace()).map(Tok::Punct)),
        }
    }
    toks
}

/// The offset of a string token's opening quote (after its prefix), `start` being the token's.
fn quote_at(text: &str, start: usize) -> usize {
    start + text.find(['\'', '"']).unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// A call whose arguments become tasks: `gather(...)`, `create_task(...)`, `wait_for(...)`,
    /// or `.append(...)` on a list later passed to `gather(*list)`.
    TaskCall,
    /// A list or generator assigned to a name later passed to `gather(*name)`.
    TaskList,
    Call,
    Other,
}

/// Calls whose arguments are coroutines.
const TASK_FUNCTIONS: &[&str] = &["gather", "create_task", "ensure_future", "wait_for"];
/// `asyncio` functions that Monty lacks or only partly has, served by [`SHIMS`].
const SHIMMED: &[&str] = &["gather", "create_task", "ensure_future", "wait_for"];
/// Prefix of the shims standing in for `asyncio.` functions.
pub const SHIM_PREFIX: &str = "__rlm_aio_";
/// The stand-in for `next`: Monty builds a generator expression as a list, which `next` refuses.
const NEXT_SHIM: &str = "__rlm_next";
/// Python run once per session: `asyncio.gather(..., return_exceptions=True)`,
/// `asyncio.create_task`, `asyncio.ensure_future`, `asyncio.wait_for` (which Monty lacks) and a
/// `next` that takes a generator expression, in terms of what Monty has. Calls to them are
/// renamed by [`rewrite_awaited_calls`].
pub const SHIMS: &str = concat!(
    include_str!("shims/modules.py"),
    "import asyncio
import re
def __rlm_re_flags(pattern, flags):
    if flags & 64:
        return '(?x)' + pattern, flags & ~64
    return pattern, flags
def __rlm_re_compile(pattern, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.compile(p, f)
def __rlm_re_search(pattern, string, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.search(p, string, f)
def __rlm_re_match(pattern, string, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.match(p, string, f)
def __rlm_re_fullmatch(pattern, string, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.fullmatch(p, string, f)
def __rlm_re_findall(pattern, string, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.findall(p, string, f)
def __rlm_re_finditer(pattern, string, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.finditer(p, string, f)
def __rlm_re_split(pattern, string, maxsplit=0, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.split(p, string, maxsplit, f)
def __rlm_re_sub(pattern, repl, string, count=0, flags=0):
    p, f = __rlm_re_flags(pattern, flags)
    return re.sub(p, repl, string, count, f)
__rlm_re_VERBOSE = 64
__rlm_re_X = 64
def __rlm_next(it, *default):
    if isinstance(it, list):
        it = iter(it)
    return next(it, *default)
async def __rlm_aio_settle(aw):
    try:
        return await aw
    except Exception as e:
        return e
async def __rlm_aio_gather(*aws, return_exceptions=False):
    if return_exceptions:
        aws = [__rlm_aio_settle(a) for a in aws]
    return await asyncio.gather(*aws)
def __rlm_aio_create_task(coro, name=None):
    return coro
def __rlm_aio_ensure_future(coro):
    return coro
async def __rlm_aio_wait_for(aw, timeout=None):
    return await aw
"
);

/// Modules Monty lacks that models import often, stood in for by the Python classes of
/// `shims/modules.py` (`import heapq` binds `heapq` to an instance of one).
const SHIM_MODULES: &[&str] = &["heapq", "statistics", "string", "textwrap", "operator"];

/// Prefix of the stand-ins for `re` functions and flags, used in snippets that ask for
/// `re.VERBOSE` (Monty's engine has the inline `(?x)` flag but not the constant).
const RE_PREFIX: &str = "__rlm_re_";
/// The `re` names a verbose snippet's calls are redirected for.
const RE_SHIMMED: &[&str] =
    &["compile", "search", "match", "fullmatch", "findall", "finditer", "split", "sub", "VERBOSE", "X"];

/// The parameters of the lambda standing in for a method named as a value.
const METHOD_SELF: &str = "__rlm_v";
const METHOD_ARGS: &str = "__rlm_a";

/// One change to the source: replace `start..end` with `text`.
struct Edit {
    start: usize,
    end: usize,
    text: String,
}

/// Rewrites a snippet so that the forms models write run in the sandbox:
/// - calls of the functions named by `is_host` that are awaited, are arguments of `gather`,
///   `create_task`, `ensure_future` or `wait_for`, or build a list later passed to
///   `gather(*list)` (`tasks = [llm_query(p) for p in ps]`, `tasks.append(llm_query(p))`) are
///   renamed to their async alias, which the host answers with a future;
/// - `asyncio.gather`, `asyncio.create_task`, `asyncio.ensure_future` and `asyncio.wait_for`
///   become the shims of [`SHIMS`];
/// - a key function written as a bound method (`key=d.get`, which Monty cannot take as a value)
///   becomes a lambda calling it.
///
/// Returns the snippet unchanged when nothing matched.
pub fn rewrite_awaited_calls(src: &str, is_host: &dyn Fn(&str) -> bool) -> String {
    let toks = tokens(src);
    let word = |t: Option<&Tok>| match t {
        Some(Tok::Word(a, b)) => Some(&src[*a..*b]),
        _ => None,
    };
    let task_lists = task_list_names(&toks, src);
    let verbose_re = uses_verbose_re(&toks, src);
    let is_task_list = |i: usize| word(toks.get(i)).is_some_and(|w| task_lists.contains(&w));
    let mut stack: Vec<Frame> = Vec::new();
    let mut edits: Vec<Edit> = Vec::new();
    for (i, &tok) in toks.iter().enumerate() {
        let back = |n: usize| i.checked_sub(n).and_then(|j| toks.get(j));
        let prev = back(1).copied();
        match tok {
            Tok::Punct(b'(') => {
                let frame = match prev {
                    Some(Tok::Word(a, b)) if !KEYWORDS.contains(&&src[a..b]) => {
                        let name = &src[a..b];
                        let append_to_tasks = name == "append"
                            && back(2) == Some(&Tok::Punct(b'.'))
                            && i.checked_sub(3).is_some_and(is_task_list);
                        if TASK_FUNCTIONS.contains(&name) || append_to_tasks { Frame::TaskCall } else { Frame::Call }
                    }
                    Some(Tok::Punct(b')' | b']')) => Frame::Call,
                    Some(Tok::Punct(b'=')) if i.checked_sub(2).is_some_and(is_task_list) => Frame::TaskList,
                    _ => Frame::Other,
                };
                stack.push(frame);
            }
            Tok::Punct(b'[') => {
                let tasks = prev == Some(Tok::Punct(b'=')) && i.checked_sub(2).is_some_and(is_task_list);
                stack.push(if tasks { Frame::TaskList } else { Frame::Other });
            }
            Tok::Punct(b'{') => stack.push(Frame::Other),
            Tok::Punct(b')' | b']' | b'}') => {
                stack.pop();
            }
            Tok::Word(a, b) => {
                let name = &src[a..b];
                if verbose_re && let Some(edit) = re_edit(&toks, i, src) {
                    edits.push(edit);
                    continue;
                }
                if let Some(edit) = shim_edit(&toks, i, src) {
                    edits.push(edit);
                    continue;
                }
                if name == "FINAL_VAR"
                    && is_plain_call(&toks, i, src)
                    && let Some(edit) = final_var_edit(&toks, i, src)
                {
                    edits.push(edit);
                    continue;
                }
                if name == "next" && is_plain_call(&toks, i, src) {
                    edits.push(Edit { start: a, end: b, text: NEXT_SHIM.to_string() });
                    continue;
                }
                if matches!(name, "import" | "from")
                    && let Some(edit) = shim_import_edit(&toks, i, src)
                {
                    edits.push(edit);
                    continue;
                }
                if let Some(edit) = method_value_edit(&toks, i, src) {
                    edits.push(edit);
                    continue;
                }
                if !is_host(name) || toks.get(i + 1) != Some(&Tok::Punct(b'(')) {
                    continue;
                }
                if matches!(prev, Some(Tok::Punct(b'.'))) || word(back(1)).is_some_and(|w| w == "def") {
                    continue;
                }
                let awaited = word(back(1)) == Some("await");
                let in_tasks = stack
                    .iter()
                    .rev()
                    .find(|f| **f != Frame::Other)
                    .is_some_and(|f| matches!(f, Frame::TaskCall | Frame::TaskList));
                if awaited || in_tasks {
                    edits.push(Edit { start: a, end: a, text: ASYNC_PREFIX.to_string() });
                }
            }
            _ => {}
        }
    }
    apply(src, edits)
}

/// `FINAL_VAR(name)` or `FINAL_VAR("name")` (the variable's name) → `FINAL(name)` (its value).
fn final_var_edit(toks: &[Tok], i: usize, src: &str) -> Option<Edit> {
    let Tok::Word(a, b) = toks[i] else { return None };
    if toks.get(i + 3) != Some(&Tok::Punct(b')')) {
        return None;
    }
    match toks.get(i + 2) {
        Some(Tok::Word(..)) => Some(Edit { start: a, end: b, text: "FINAL".to_string() }),
        Some(Tok::Str(q)) => {
            let quote = *src.as_bytes().get(*q)?;
            let body = &src[q + 1..];
            let close = body.find(quote as char)?;
            let name = &body[..close];
            crate::dialect::is_identifier(name).then(|| Edit {
                start: a,
                end: q + 1 + close + 1,
                text: format!("FINAL({name}"),
            })
        }
        _ => None,
    }
}

/// Whether the word at `i` is called as a plain name (`name(`, not `x.name(` or `def name(`).
fn is_plain_call(toks: &[Tok], i: usize, src: &str) -> bool {
    let prev = i.checked_sub(1).map(|j| toks[j]);
    let after_def = matches!(prev, Some(Tok::Word(a, b)) if &src[a..b] == "def");
    toks.get(i + 1) == Some(&Tok::Punct(b'(')) && prev != Some(Tok::Punct(b'.')) && !after_def
}

/// Names passed as `gather(*name)`: lists of tasks.
fn task_list_names<'s>(toks: &[Tok], src: &'s str) -> Vec<&'s str> {
    toks.windows(4)
        .filter_map(|w| match w {
            [Tok::Word(a, b), Tok::Punct(b'('), Tok::Punct(b'*'), Tok::Word(c, d)] if &src[*a..*b] == "gather" => {
                Some(&src[*c..*d])
            }
            _ => None,
        })
        .collect()
}

/// Whether the snippet names `re.VERBOSE` or `re.X`.
fn uses_verbose_re(toks: &[Tok], src: &str) -> bool {
    toks.windows(3).any(|w| match w {
        [Tok::Word(a, b), Tok::Punct(b'.'), Tok::Word(c, d)] => {
            &src[*a..*b] == "re" && matches!(&src[*c..*d], "VERBOSE" | "X")
        }
        _ => false,
    })
}

/// `re.compile` (and the other functions taking flags) and `re.VERBOSE` → the stand-ins.
fn re_edit(toks: &[Tok], i: usize, src: &str) -> Option<Edit> {
    let (Tok::Word(a, b), Some(Tok::Punct(b'.')), Some(Tok::Word(c, d))) = (toks[i], toks.get(i + 1), toks.get(i + 2))
    else {
        return None;
    };
    let after_dot = i.checked_sub(1).is_some_and(|j| toks[j] == Tok::Punct(b'.'));
    if &src[a..b] != "re" || after_dot || !RE_SHIMMED.contains(&&src[*c..*d]) {
        return None;
    }
    Some(Edit { start: a, end: *d, text: format!("{RE_PREFIX}{}", &src[*c..*d]) })
}

/// `asyncio.gather(` and the like → the shim's name.
fn shim_edit(toks: &[Tok], i: usize, src: &str) -> Option<Edit> {
    let (Tok::Word(a, b), Some(Tok::Punct(b'.')), Some(Tok::Word(c, d)), Some(Tok::Punct(b'('))) =
        (toks[i], toks.get(i + 1), toks.get(i + 2), toks.get(i + 3))
    else {
        return None;
    };
    let after_dot = i.checked_sub(1).is_some_and(|j| toks[j] == Tok::Punct(b'.'));
    if &src[a..b] != "asyncio" || after_dot || !SHIMMED.contains(&&src[*c..*d]) {
        return None;
    }
    Some(Edit { start: a, end: *d, text: format!("{SHIM_PREFIX}{}", &src[*c..*d]) })
}

/// `import heapq [as h]` or `from heapq import a [as b], ...` of a module in [`SHIM_MODULES`]
/// → assignments from its stand-in. Only whole simple statements are rewritten.
fn shim_import_edit(toks: &[Tok], i: usize, src: &str) -> Option<Edit> {
    let word = |j: usize| match toks.get(j) {
        Some(Tok::Word(a, b)) => Some(&src[*a..*b]),
        _ => None,
    };
    let statement_start = i == 0 || matches!(toks[i - 1], Tok::Newline | Tok::Punct(b';'));
    let Tok::Word(start, _) = toks[i] else { return None };
    let module = word(i + 1).filter(|m| SHIM_MODULES.contains(m) && statement_start)?;
    let shim = format!("__rlm_mod_{module}");
    let ends = |j: usize| matches!(toks.get(j), None | Some(Tok::Newline | Tok::Punct(b';')));
    let end_of = |j: usize| match toks.get(j) {
        Some(Tok::Word(_, b)) => Some(*b),
        _ => None,
    };
    if word(i) == Some("import") {
        let (target, last) = match (word(i + 2), word(i + 3)) {
            (Some("as"), Some(alias)) => (alias, i + 3),
            _ => (module, i + 1),
        };
        return ends(last + 1).then(|| Edit {
            start,
            end: end_of(last).unwrap_or(start),
            text: format!("{target} = {shim}"),
        });
    }
    if word(i + 2) != Some("import") {
        return None;
    }
    let mut j = i + 3;
    let mut binds = Vec::new();
    loop {
        let name = word(j)?;
        let (target, last) = match (word(j + 1), word(j + 2)) {
            (Some("as"), Some(alias)) => (alias, j + 2),
            _ => (name, j),
        };
        binds.push(format!("{target} = {shim}.{name}"));
        if ends(last + 1) {
            return Some(Edit { start, end: end_of(last)?, text: binds.join("; ") });
        }
        if toks.get(last + 1) != Some(&Tok::Punct(b',')) {
            return None;
        }
        j = last + 2;
    }
}

/// Types whose methods named as values (`str.strip`) take the receiver first.
const TYPE_NAMES: &[&str] = &["str", "bytes", "dict", "list", "set", "tuple", "int", "float"];

/// A method named as a value, which Monty cannot take (`key=d.get`, `map(str.strip, lines)`),
/// becomes a lambda calling it. Only where a function is certainly meant: the value of `key=`,
/// the first argument of `map`/`filter`, or a method of a built-in type passed as an argument.
fn method_value_edit(toks: &[Tok], i: usize, src: &str) -> Option<Edit> {
    let Tok::Word(start, head_end) = toks[i] else { return None };
    let back = |n: usize| i.checked_sub(n).map(|j| toks[j]);
    let word = |t: Option<Tok>| match t {
        Some(Tok::Word(a, b)) => &src[a..b],
        _ => "",
    };
    let head = &src[start..head_end];
    if back(1) == Some(Tok::Punct(b'.')) || KEYWORDS.contains(&head) {
        return None;
    }
    let (mut j, mut end, mut dots) = (i, head_end, 0);
    while let (Some(Tok::Punct(b'.')), Some(Tok::Word(_, e))) = (toks.get(j + 1), toks.get(j + 2)) {
        (end, j, dots) = (*e, j + 2, dots + 1);
    }
    if dots == 0 || !matches!(toks.get(j + 1), Some(Tok::Punct(b',' | b')'))) {
        return None;
    }
    let is_type = dots == 1 && TYPE_NAMES.contains(&head);
    let opens = |t: Option<Tok>| matches!(t, Some(Tok::Punct(b'(' | b',')));
    let after_key = back(1) == Some(Tok::Punct(b'=')) && word(back(2)) == "key" && opens(back(3));
    let first_of_map = back(1) == Some(Tok::Punct(b'('))
        && matches!(word(back(2)), "map" | "filter")
        && back(3) != Some(Tok::Punct(b'.'));
    if !(after_key || first_of_map || (is_type && opens(back(1)))) {
        return None;
    }
    let chain = &src[start..end];
    let text = match chain.rsplit_once('.') {
        Some((_, method)) if is_type => {
            format!("(lambda {METHOD_SELF}, *{METHOD_ARGS}: {METHOD_SELF}.{method}(*{METHOD_ARGS}))")
        }
        _ => format!("(lambda *{METHOD_ARGS}: {chain}(*{METHOD_ARGS}))"),
    };
    Some(Edit { start, end, text })
}

fn apply(src: &str, mut edits: Vec<Edit>) -> String {
    if edits.is_empty() {
        return src.to_string();
    }
    edits.sort_by_key(|e| e.start);
    let mut out = String::with_capacity(src.len() + edits.len() * 16);
    let mut last = 0;
    for e in edits {
        if e.start < last {
            continue;
        }
        out.push_str(&src[last..e.start]);
        out.push_str(&e.text);
        last = e.end;
    }
    out.push_str(&src[last..]);
    out
}

/// Internal names shown to the model as what the model wrote.
const RENAMES: &[(&str, &str)] = &[
    (ASYNC_PREFIX, ""),
    (SHIM_PREFIX, "asyncio."),
    (NEXT_SHIM, "next"),
    (RE_PREFIX, "re."),
    ("'__rlm_mod_heapq_t' object", "module 'heapq'"),
    ("'__rlm_mod_statistics_t' object", "module 'statistics'"),
    ("'__rlm_mod_string_t' object", "module 'string'"),
    ("'__rlm_mod_textwrap_t' object", "module 'textwrap'"),
    ("'__rlm_mod_operator_t' object", "module 'operator'"),
];

/// Undoes the renaming in text shown to the model (error messages, tracebacks): the async alias
/// prefix is dropped and shims are named as the `asyncio` functions they stand for, with the
/// caret line under a rewritten source line shortened so the carets stay aligned.
pub fn restore_names(text: &str) -> String {
    if !RENAMES.iter().any(|(from, _)| text.contains(from)) {
        return text.to_string();
    }
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let (line, cuts) = rename_line(lines[i]);
        out.push(line);
        let carets = lines.get(i + 1).filter(|next| {
            !cuts.is_empty() && !next.trim().is_empty() && next.chars().all(|c| matches!(c, ' ' | '^' | '~' | '\t'))
        });
        match carets {
            Some(next) => {
                let mut chars: Vec<char> = next.chars().collect();
                for &(col, n) in cuts.iter().rev() {
                    let start = col.min(chars.len());
                    let end = (col + n).min(chars.len());
                    chars.drain(start..end);
                }
                out.push(chars.into_iter().collect::<String>().trim_end().to_string());
                i += 2;
            }
            None => i += 1,
        }
    }
    out.join("\n")
}

/// One line with the internal names replaced, and where (char column, chars removed) it
/// shrank.
fn rename_line(line: &str) -> (String, Vec<(usize, usize)>) {
    let mut out = String::with_capacity(line.len());
    let mut cuts = Vec::new();
    let mut rest = line;
    let mut col = 0;
    loop {
        let next = RENAMES.iter().filter_map(|(from, to)| rest.find(from).map(|at| (at, *from, *to))).min();
        let Some((at, from, to)) = next else { break };
        out.push_str(&rest[..at]);
        col += rest[..at].chars().count();
        out.push_str(to);
        let (from_chars, to_chars) = (from.chars().count(), to.chars().count());
        cuts.push((col + to_chars, from_chars - to_chars));
        col += to_chars;
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    (out, cuts)
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
            "rs = await __rlm_aio_gather(*[__rlm_async_llm_query(p) for p in ps])"
        );
        assert_eq!(
            rw("rs = await gather(llm_query(a), rlm_query(b))"),
            "rs = await gather(__rlm_async_llm_query(a), __rlm_async_rlm_query(b))"
        );
        assert_eq!(
            rw("rs = await asyncio.gather(*(llm_query(p) for p in ps))"),
            "rs = await __rlm_aio_gather(*(__rlm_async_llm_query(p) for p in ps))"
        );
    }

    #[test]
    fn call_nested_in_another_call_inside_gather_stays_sync() {
        assert_eq!(
            rw("await asyncio.gather(*[f(llm_query(p)) for p in ps])"),
            "await __rlm_aio_gather(*[f(llm_query(p)) for p in ps])"
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
    fn list_of_tasks_later_gathered_is_renamed() {
        assert_eq!(
            rw("tasks = [llm_query(p) for p in ps]\nrs = await asyncio.gather(*tasks)"),
            "tasks = [__rlm_async_llm_query(p) for p in ps]\nrs = await __rlm_aio_gather(*tasks)"
        );
        assert_eq!(
            rw("tasks = []\nfor p in ps:\n    tasks.append(llm_query(p))\nawait asyncio.gather(*tasks)"),
            "tasks = []\nfor p in ps:\n    tasks.append(__rlm_async_llm_query(p))\nawait __rlm_aio_gather(*tasks)"
        );
        // A list that is never gathered keeps its plain calls.
        assert_eq!(rw("rs = [llm_query(p) for p in ps]"), "rs = [llm_query(p) for p in ps]");
    }

    #[test]
    fn create_task_and_wait_for_take_futures_and_use_the_shims() {
        assert_eq!(
            rw("t = asyncio.create_task(llm_query(p))\nr = await asyncio.wait_for(t, timeout=5)"),
            "t = __rlm_aio_create_task(__rlm_async_llm_query(p))\nr = await __rlm_aio_wait_for(t, timeout=5)"
        );
    }

    #[test]
    fn methods_named_as_values_become_lambdas() {
        assert_eq!(rw("best = max(d, key=d.get)"), "best = max(d, key=(lambda *__rlm_a: d.get(*__rlm_a)))");
        assert_eq!(rw("sorted(xs, key=len)"), "sorted(xs, key=len)");
        assert_eq!(rw("f(key=a.b.c, x=1)"), "f(key=(lambda *__rlm_a: a.b.c(*__rlm_a)), x=1)");
        assert_eq!(rw("key = d.get"), "key = d.get");
        assert_eq!(
            rw("list(map(str.strip, lines))"),
            "list(map((lambda __rlm_v, *__rlm_a: __rlm_v.strip(*__rlm_a)), lines))"
        );
        assert_eq!(rw("vals = map(d.get, keys)"), "vals = map((lambda *__rlm_a: d.get(*__rlm_a)), keys)");
        assert_eq!(
            rw("sorted(ws, key=str.lower)"),
            "sorted(ws, key=(lambda __rlm_v, *__rlm_a: __rlm_v.lower(*__rlm_a)))"
        );
        // A data attribute passed along is left alone.
        assert_eq!(rw("print(obj.count, len(self.items))"), "print(obj.count, len(self.items))");
    }

    #[test]
    fn verbose_regexes_use_the_stand_ins_and_others_are_left_alone() {
        assert_eq!(
            rw("p = re.compile(r'a b', re.VERBOSE | re.I)"),
            "p = __rlm_re_compile(r'a b', __rlm_re_VERBOSE | re.I)"
        );
        assert_eq!(rw("p = re.compile(r'a b', re.I)"), "p = re.compile(r'a b', re.I)");
    }

    #[test]
    fn final_var_takes_the_named_variable() {
        assert_eq!(rw("FINAL_VAR(result)"), "FINAL(result)");
        assert_eq!(rw("FINAL_VAR('result')"), "FINAL(result)");
        assert_eq!(rw("FINAL_VAR(\"result\")\nx = 1"), "FINAL(result)\nx = 1");
        assert_eq!(rw("FINAL_VAR('not a name')"), "FINAL_VAR('not a name')");
    }

    #[test]
    fn imports_of_stood_in_modules_bind_the_stand_ins() {
        assert_eq!(rw("import heapq\nx = 1"), "heapq = __rlm_mod_heapq\nx = 1");
        assert_eq!(rw("    import statistics as st"), "    st = __rlm_mod_statistics");
        assert_eq!(
            rw("from string import ascii_lowercase, digits as d"),
            "ascii_lowercase = __rlm_mod_string.ascii_lowercase; d = __rlm_mod_string.digits"
        );
        assert_eq!(rw("import re, heapq"), "import re, heapq");
        assert_eq!(rw("import json"), "import json");
        assert_eq!(
            restore_names("AttributeError: '__rlm_mod_heapq_t' object has no attribute 'merge'"),
            "AttributeError: module 'heapq' has no attribute 'merge'"
        );
    }

    #[test]
    fn next_calls_use_the_shim() {
        assert_eq!(rw("first = next(x for x in xs if x)"), "first = __rlm_next(x for x in xs if x)");
        assert_eq!(rw("it.next(1)"), "it.next(1)");
        assert_eq!(rw("def next(a):\n    pass"), "def next(a):\n    pass");
        assert_eq!(rw("return next(it)"), "return __rlm_next(it)");
        assert_eq!(restore_names("TypeError: __rlm_next() boom"), "TypeError: next() boom");
    }

    #[test]
    fn restore_names_shows_shims_as_asyncio_functions() {
        let tb = "    r = await __rlm_aio_gather(*ts)\n              ^^^^^^^^^^^^^^^^^^^^^\nTypeError: x";
        assert_eq!(
            restore_names(tb),
            "    r = await asyncio.gather(*ts)\n              ^^^^^^^^^^^^^^^^^^^\nTypeError: x"
        );
    }

    #[test]
    fn numbers_and_continued_lines_are_read_as_python_reads_them() {
        // A float is one token, not a method named as a value.
        assert_eq!(rw("sorted(xs, key=1.5)"), "sorted(xs, key=1.5)");
        // An import continued with a backslash is one statement.
        assert_eq!(rw("import heapq \\\n    as h\nx = 1"), "h = __rlm_mod_heapq\nx = 1");
    }

    #[test]
    fn fields_with_conversions_specs_and_dicts_are_code() {
        assert_eq!(
            rw("s = f\"{await llm_query(p)!r:>{await llm_query(w)}} {x!s}\""),
            "s = f\"{await __rlm_async_llm_query(p)!r:>{await __rlm_async_llm_query(w)}} {x!s}\""
        );
        assert_eq!(
            rw("u = f\"{ {'a': await llm_query(p)}['a'] }\"\nv = t'{await llm_query(q)}'"),
            "u = f\"{ {'a': await __rlm_async_llm_query(p)}['a'] }\"\nv = t'{await __rlm_async_llm_query(q)}'"
        );
    }

    #[test]
    fn a_snippet_that_does_not_parse_is_rewritten_as_far_as_it_reads() {
        assert_eq!(rw("s = 'open\nr = await llm_query(p)"), "s = 'open\nr = await __rlm_async_llm_query(p)");
        assert_eq!(rw("r = await llm_query(p"), "r = await __rlm_async_llm_query(p");
    }

    #[test]
    fn restore_names_renames_in_messages() {
        assert_eq!(restore_names("name '__rlm_async_search' is not defined"), "name 'search' is not defined");
    }
}

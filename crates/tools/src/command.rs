//! Shell command lines as the permission rules see them: every simple command that a line
//! would run, with its argv normalised, so a rule matches the command and not its spelling.
//!
//! What is understood:
//! - lists and pipelines (`;`, `&&`, `||`, `|`, `|&`, `&`, newlines), subshells `( … )`, groups
//!   `{ …; }`, the words of `if`/`while`/`until`/`for` constructs, comments;
//! - command substitutions `$( … )` and `` ` … ` `` (also inside double quotes), process
//!   substitutions `<( … )` / `>( … )`: the commands inside are simple commands too;
//! - words split and unquoted by a real shell-words parser, so quotes and backslashes do not
//!   hide a name (`'rm'`, `\rm`, `r""m` are `rm`); the command name is reduced to its base
//!   name (`/bin/rm` is `rm`); leading `NAME=value` assignments and redirections are dropped;
//! - wrappers that run another command: `env`, `sudo`, `doas`, `nice`, `nohup`, `timeout`,
//!   `stdbuf`, `ionice`, `setsid`, `command`, `exec`, `builtin`, `time`, `xargs`, `watch`,
//!   `eval`, shells given a script with `-c` (`sh`, `bash`, `dash`, `zsh`, `ksh`, `ash`, `busybox
//!   sh`), and `find … -exec/-execdir/-ok/-okdir … ;`; `unlink` and `shred` count as `rm`;
//!   `find … -delete` counts as an `rm` of
//!   the paths it searches;
//! - programs that run a command after options not modelled here (`OPAQUE_WRAPPERS`: `strace`,
//!   `chroot`, `flock`, `taskset`, `unshare`, `nsenter`, `parallel`, `perf`…): every run of their
//!   words that starts at a non-option word counts as a command they may run; `su`/`runuser`/
//!   `flock`/`script -c SCRIPT` are parsed as scripts;
//! - `git`'s global options before the subcommand (`git -C dir push` is `git push`).
//!
//! What is not: `case` statements, here-documents, `${…}` holding a substitution, and any line
//! that does not parse make the line [`Parsed::Opaque`]; a command whose name comes from an
//! expansion (`$CMD`, `$(…)`), one that writes a file through a redirection, and `git` given
//! `-c`/`--config-env`/`--exec-path` are marked not [`SimpleCommand::allowable`]. Programs that
//! run code of their own (`python -c`, `perl -e`, `make`, scripts piped into `sh`) are seen as
//! themselves only.

/// One command that a line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words after unquoting, with the command name reduced to its base name.
    pub argv: Vec<String>,
    /// Whether an `allow` rule may match it: false when its name comes from an expansion, when
    /// it writes a file through a redirection, or when options can make it run other code.
    pub allowable: bool,
    /// Whether its name comes from an expansion (`$CMD x`, `x=rm; $x y`): it could be any
    /// command, so every `deny` and `ask` rule meets it.
    pub dynamic_name: bool,
}

impl SimpleCommand {
    fn new(argv: Vec<String>) -> Self {
        Self { argv, allowable: true, dynamic_name: false }
    }

    /// The words joined by spaces, for messages.
    pub fn display(&self) -> String {
        self.argv.join(" ")
    }

    /// Whether the words start with `prefix`'s words (the prefix's name reduced the same way).
    pub fn starts_with(&self, prefix: &[String]) -> bool {
        prefix.len() <= self.argv.len() && prefix.iter().zip(&self.argv).all(|(p, a)| p == a)
    }
}

/// A command line, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Every simple command the line runs, in order of appearance.
    Commands(Vec<SimpleCommand>),
    /// A line that could not be taken apart, with why.
    Opaque(String),
}

/// Takes a command line apart (see the module docs for what is understood).
pub fn parse(line: &str) -> Parsed {
    let mut out = Vec::new();
    match parse_into(line, &mut out, 0) {
        Ok(()) => Parsed::Commands(out),
        Err(why) => Parsed::Opaque(why),
    }
}

/// Words of a rule's `command_prefix`, reduced as a command's are; `None` when it does not parse.
pub fn prefix_words(prefix: &str) -> Option<Vec<String>> {
    let mut words = shell_words::split(prefix).ok()?;
    let first = words.first_mut()?;
    *first = base_name(first).to_string();
    Some(words)
}

/// Nesting beyond this (`sh -c "sh -c '…'"` …) makes a line opaque.
const MAX_NESTING: usize = 16;

/// Stands in for an expansion removed from a word, so a name built from one is recognised.
const EXPANSION: char = '\u{1}';

fn parse_into(script: &str, out: &mut Vec<SimpleCommand>, depth: usize) -> Result<(), String> {
    if depth > MAX_NESTING {
        return Err("nested too deeply".into());
    }
    let chars: Vec<char> = script.chars().collect();
    let mut scanner = Scanner { chars: &chars, pos: 0, segments: Vec::new(), nested: Vec::new() };
    scanner.scan(None)?;
    let Scanner { segments, nested, .. } = scanner;
    for segment in segments {
        let words = shell_words::split(&segment).map_err(|e| format!("cannot split `{segment}`: {e}"))?;
        words_into(words, out, depth)?;
    }
    for inner in nested {
        parse_into(&inner, out, depth + 1)?;
    }
    Ok(())
}

/// Splits a script into the texts of its simple commands and the scripts nested in it.
struct Scanner<'a> {
    chars: &'a [char],
    pos: usize,
    segments: Vec<String>,
    nested: Vec<String>,
}

impl Scanner<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    /// Scans until `until` (a closing `)`) or the end; segments go to `self.segments`.
    fn scan(&mut self, until: Option<char>) -> Result<(), String> {
        let mut current = String::new();
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '\'' => {
                    current.push(c);
                    self.single_quoted(&mut current)?;
                }
                '"' => {
                    current.push(c);
                    self.double_quoted(&mut current)?;
                }
                '\\' => match self.peek(0) {
                    Some('\n') => self.pos += 1,
                    Some(next) => {
                        self.pos += 1;
                        current.push('\\');
                        current.push(next);
                    }
                    None => return Err("trailing backslash".into()),
                },
                '#' if at_word_start(&current) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '$' => self.dollar(&mut current)?,
                '`' => {
                    let inner = self.backquoted()?;
                    self.nested.push(inner);
                    current.push(EXPANSION);
                }
                '(' => self.open_paren(&mut current)?,
                ')' if until == Some(')') => {
                    self.end_segment(&mut current);
                    return Ok(());
                }
                ')' => return Err("unbalanced `)`".into()),
                '<' if self.peek(0) == Some('<') && self.peek(1) != Some('<') => {
                    return Err("here-documents are not understood".into());
                }
                '&' if current.ends_with(['>', '<']) || self.peek(0) == Some('>') => current.push(c),
                ';' | '&' | '|' | '\n' => self.end_segment(&mut current),
                c => current.push(c),
            }
        }
        if until.is_some() {
            return Err("unterminated `(`".into());
        }
        self.end_segment(&mut current);
        Ok(())
    }

    fn end_segment(&mut self, current: &mut String) {
        let text = std::mem::take(current);
        if !text.trim().is_empty() {
            self.segments.push(text);
        }
    }

    fn single_quoted(&mut self, current: &mut String) -> Result<(), String> {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            current.push(c);
            if c == '\'' {
                return Ok(());
            }
        }
        Err("unterminated single quote".into())
    }

    fn double_quoted(&mut self, current: &mut String) -> Result<(), String> {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '"' => {
                    current.push(c);
                    return Ok(());
                }
                '\\' => {
                    current.push(c);
                    if let Some(next) = self.peek(0) {
                        self.pos += 1;
                        current.push(next);
                    }
                }
                '$' => self.dollar(current)?,
                '`' => {
                    let inner = self.backquoted()?;
                    self.nested.push(inner);
                    current.push(EXPANSION);
                }
                c => current.push(c),
            }
        }
        Err("unterminated double quote".into())
    }

    /// After a `$`: a substitution, an arithmetic expansion, a braced parameter or a plain `$`.
    fn dollar(&mut self, current: &mut String) -> Result<(), String> {
        match (self.peek(0), self.peek(1)) {
            (Some('('), Some('(')) => {
                self.pos += 2;
                let inner = self.inner_script()?;
                if !inner.ends_with(')') {
                    return Err("unterminated arithmetic expansion".into());
                }
                // `$(( … ))` computes a number; what it contains may still run commands.
                if inner.contains("$(") || inner.contains('`') {
                    return Err("substitution inside arithmetic".into());
                }
                current.push(EXPANSION);
            }
            (Some('('), _) => {
                self.pos += 1;
                let inner = self.inner_script()?;
                self.nested.push(inner);
                current.push(EXPANSION);
            }
            (Some('{'), _) => {
                self.pos += 1;
                let mut braced = String::new();
                loop {
                    let c = self.peek(0).ok_or("unterminated `${`")?;
                    self.pos += 1;
                    if c == '}' {
                        break;
                    }
                    braced.push(c);
                }
                if braced.contains("$(") || braced.contains('`') {
                    return Err("substitution inside `${…}`".into());
                }
                current.push(EXPANSION);
            }
            (Some(c), _) if c.is_ascii_alphanumeric() || "_@*#?$!-".contains(c) => {
                self.pos += 1;
                if is_name_start(c) {
                    while self.peek(0).is_some_and(|n| n.is_ascii_alphanumeric() || n == '_') {
                        self.pos += 1;
                    }
                }
                current.push(EXPANSION);
            }
            _ => current.push('$'),
        }
        Ok(())
    }

    /// The text up to the `)` that closes an opening `(` already consumed, itself scanned for
    /// its own structure; the position ends after the `)`.
    fn inner_script(&mut self) -> Result<String, String> {
        let start = self.pos;
        let mut inner = Scanner { chars: self.chars, pos: self.pos, segments: Vec::new(), nested: Vec::new() };
        inner.scan(Some(')'))?;
        self.pos = inner.pos;
        Ok(self.chars[start..self.pos - 1].iter().collect())
    }

    fn backquoted(&mut self) -> Result<String, String> {
        let mut inner = String::new();
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '`' => return Ok(inner),
                '\\' => {
                    if let Some(next) = self.peek(0) {
                        self.pos += 1;
                        if !matches!(next, '`' | '\\' | '$') {
                            inner.push('\\');
                        }
                        inner.push(next);
                    }
                }
                c => inner.push(c),
            }
        }
        Err("unterminated backquote".into())
    }

    /// `(` at a command's start is a subshell, after `<`/`>` a process substitution, after a
    /// name a function definition's `()`.
    fn open_paren(&mut self, current: &mut String) -> Result<(), String> {
        if current.ends_with(['<', '>']) {
            current.pop();
            let inner = self.inner_script()?;
            self.nested.push(inner);
            current.push(EXPANSION);
            return Ok(());
        }
        if self.peek(0) == Some(')') && !current.trim().is_empty() {
            return Err("function definitions are not understood".into());
        }
        if !current.trim().is_empty() && !ends_with_keyword(current) {
            return Err("unexpected `(`".into());
        }
        self.end_segment(current);
        let inner = self.inner_script()?;
        self.nested.push(inner);
        Ok(())
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn at_word_start(current: &str) -> bool {
    current.is_empty() || current.ends_with(char::is_whitespace)
}

/// Whether the text so far is only reserved words (`if (…)`, `! (…)`).
fn ends_with_keyword(current: &str) -> bool {
    current.split_whitespace().all(|w| RESERVED.contains(&w))
}

/// Reserved words that may start a simple command's text without being its name.
const RESERVED: &[&str] = &["{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"];

/// Turns the words of one simple command into commands, seeing through wrappers.
fn words_into(words: Vec<String>, out: &mut Vec<SimpleCommand>, depth: usize) -> Result<(), String> {
    let mut allowable = true;
    let mut argv = Vec::with_capacity(words.len());
    let mut words = words.into_iter().peekable();
    while let Some(word) = words.next() {
        match redirection(&word) {
            Some(Redirect { target: Some(t), writes }) => allowable &= !writes || harmless_target(&t),
            Some(Redirect { target: None, writes }) => {
                let t = words.next().unwrap_or_default();
                allowable &= !writes || harmless_target(&t);
            }
            None => argv.push(word),
        }
    }
    let mut start = 0;
    while start < argv.len() && (RESERVED.contains(&argv[start].as_str()) || is_assignment(&argv[start])) {
        start += 1;
    }
    let argv = argv.split_off(start);
    match argv.first().map(String::as_str) {
        None | Some("fi" | "done" | "}" | "esac") => Ok(()),
        Some("case") => Err("`case` is not understood".into()),
        Some("for" | "select") => Ok(()),
        Some(_) => command_into(argv, allowable, out, depth),
    }
}

/// One command's words (assignments and redirections gone): itself, and what it wraps.
fn command_into(
    mut argv: Vec<String>,
    allowable: bool,
    out: &mut Vec<SimpleCommand>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_NESTING {
        return Err("nested too deeply".into());
    }
    let dynamic = argv[0].contains(EXPANSION);
    let name = base_name(&argv[0]).to_string();
    let dynamic_name = name.contains(EXPANSION);
    argv[0].clone_from(&name);
    let argv: Vec<String> = argv.into_iter().map(|w| w.replace(EXPANSION, "$…")).collect();
    let mut command = SimpleCommand { argv, allowable: allowable && !dynamic, dynamic_name };
    let inner = wrapped(&name, &command.argv)?;
    if name == "git" {
        command.allowable &= git_without_globals(&mut command.argv);
    }
    if matches!(name.as_str(), "unlink" | "shred") {
        // They delete (or destroy) files as `rm` does.
        let mut rm = vec!["rm".to_string()];
        rm.extend(command.argv.iter().skip(1).cloned());
        out.push(SimpleCommand::new(rm));
    }
    if name == "find" && command.argv.iter().any(|w| w == "-delete") {
        let mut rm = vec!["rm".to_string()];
        rm.extend(command.argv.iter().skip(1).take_while(|w| !w.starts_with('-')).cloned());
        out.push(SimpleCommand::new(rm));
    }
    if name == "find" && command.argv.iter().any(|w| FIND_WRITES.contains(&w.as_str())) {
        command.allowable = false;
    }
    out.push(command);
    match inner {
        Wrapped::Nothing => Ok(()),
        Wrapped::Words(words) if words.is_empty() => Ok(()),
        Wrapped::Words(words) => command_into(words, allowable, out, depth + 1),
        Wrapped::Script(script) => parse_into(&script, out, depth + 1),
        Wrapped::Many(list) => {
            for words in list {
                if !words.is_empty() {
                    command_into(words, allowable, out, depth + 1)?;
                }
            }
            Ok(())
        }
    }
}

/// What a wrapper runs.
enum Wrapped {
    Nothing,
    Words(Vec<String>),
    Script(String),
    Many(Vec<Vec<String>>),
}

/// Options of wrappers that take a value as the next word.
fn option_takes_value(wrapper: &str, option: &str) -> bool {
    let list: &[&str] = match wrapper {
        "env" => &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
        "sudo" => &["-u", "-g", "-C", "-h", "-p", "-r", "-t", "-U", "-D", "--user", "--group", "--chdir"],
        "doas" => &["-u", "-C"],
        "nice" => &["-n", "--adjustment"],
        "timeout" => &["-s", "--signal", "-k", "--kill-after"],
        "stdbuf" => &["-i", "-o", "-e", "--input", "--output", "--error"],
        "ionice" => &["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"],
        "xargs" => &["-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args"],
        "exec" => &["-a"],
        "watch" => &["-n", "--interval", "-d"],
        _ => &[],
    };
    list.contains(&option)
}

/// Programs that run a command given after options whose grammar is not modelled here
/// (`strace -o out rm x`, `chroot /srv rm x`, `flock lock rm x`): every suffix of their words
/// that starts at a non-option word is taken as a command they may run, so a deny or ask rule
/// matches any of them, and an allow rule must allow them all.
const OPAQUE_WRAPPERS: &[&str] = &[
    "chroot",
    "flock",
    "taskset",
    "chrt",
    "unshare",
    "nsenter",
    "fakeroot",
    "strace",
    "ltrace",
    "valgrind",
    "firejail",
    "proxychains",
    "proxychains4",
    "torsocks",
    "catchsegv",
    "runuser",
    "su",
    "systemd-run",
    "parallel",
    "prlimit",
    "setpriv",
    "numactl",
    "cgexec",
    "bwrap",
    "sg",
    "script",
    "faketime",
    "caffeinate",
    "gdb",
    "rr",
    "perf",
    "nocache",
    "ccache",
    "distcc",
    "with-contenv",
    "dbus-run-session",
    "xvfb-run",
];

/// Every suffix of `words` that starts at a word not starting with `-`.
fn candidates(words: &[String]) -> Vec<Vec<String>> {
    (0..words.len()).filter(|&i| !words[i].starts_with('-')).map(|i| words[i..].to_vec()).collect()
}

/// The script after a `-c` option (`su -c 'rm x'`, `flock lock -c 'rm x'`).
fn script_after_c(words: &[String]) -> Option<String> {
    let i = words.iter().position(|w| w == "-c" || w == "--command")?;
    words.get(i + 1).cloned()
}

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash"];

/// `find` actions that write files.
const FIND_WRITES: &[&str] = &["-fprint", "-fprint0", "-fprintf", "-fls"];

fn wrapped(name: &str, argv: &[String]) -> Result<Wrapped, String> {
    let rest = &argv[1..];
    Ok(match name {
        "env" => {
            let (mut options, command) = split_options(name, rest);
            let command: Vec<String> = command.iter().skip_while(|w| is_assignment(w)).cloned().collect();
            // `env -S "a b"` splits its value into words.
            match options.iter().position(|o| o == "-S" || o == "--split-string") {
                Some(i) if i + 1 < options.len() => {
                    let mut words = shell_words::split(&options.remove(i + 1)).map_err(|e| e.to_string())?;
                    words.extend(command);
                    Wrapped::Words(words)
                }
                _ => Wrapped::Words(command),
            }
        }
        "sudo" | "doas" | "nice" | "nohup" | "stdbuf" | "ionice" | "setsid" | "command" | "exec" | "builtin"
        | "time" | "xargs" | "chronic" | "unbuffer" => {
            let (_, command) = split_options(name, rest);
            Wrapped::Words(command.iter().skip_while(|w| is_assignment(w)).cloned().collect())
        }
        "timeout" => {
            let (_, command) = split_options(name, rest);
            Wrapped::Words(command.iter().skip(1).cloned().collect())
        }
        "watch" | "eval" => {
            let (_, command) = split_options(name, rest);
            Wrapped::Script(command.join(" "))
        }
        "busybox" => Wrapped::Words(rest.to_vec()),
        "su" | "runuser" | "flock" | "script" if script_after_c(rest).is_some() => {
            Wrapped::Script(script_after_c(rest).unwrap_or_default())
        }
        generic if OPAQUE_WRAPPERS.contains(&generic) => Wrapped::Many(candidates(rest)),
        shell if SHELLS.contains(&shell) => match shell_script(rest) {
            Some(script) => Wrapped::Script(script),
            None => Wrapped::Nothing,
        },
        "find" => Wrapped::Many(find_execs(rest)),
        _ => Wrapped::Nothing,
    })
}

/// Leading options (and their values) of a wrapper, and the words after them.
fn split_options<'a>(wrapper: &str, words: &'a [String]) -> (Vec<String>, &'a [String]) {
    let mut options = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if w == "--" {
            i += 1;
            break;
        }
        if matches!(wrapper, "env" | "sudo" | "doas") && is_assignment(w) {
            i += 1;
            continue;
        }
        if !w.starts_with('-') || w == "-" {
            break;
        }
        options.push(w.clone());
        i += 1;
        if option_takes_value(wrapper, w) && i < words.len() {
            options.push(words[i].clone());
            i += 1;
        }
    }
    (options, &words[i..])
}

/// The script given to a shell with `-c` (also in grouped flags such as `-lc`, `-ec`).
fn shell_script(words: &[String]) -> Option<String> {
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if !w.starts_with('-') && !w.starts_with('+') {
            return None;
        }
        if w.starts_with('-') && !w.starts_with("--") && w.contains('c') {
            return words.get(i + 1).cloned();
        }
        // `-o option` takes a value.
        i += if w == "-o" || w == "+o" { 2 } else { 1 };
    }
    None
}

/// The commands of `find … -exec cmd … ;` (and `-execdir`, `-ok`, `-okdir`, ended by `;` or `+`).
fn find_execs(words: &[String]) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if matches!(words[i].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            let start = i + 1;
            let mut end = start;
            while end < words.len() && words[end] != ";" && words[end] != "+" {
                end += 1;
            }
            commands.push(words[start..end].to_vec());
            i = end;
        }
        i += 1;
    }
    commands
}

/// Drops `git`'s global options before the subcommand; false when one of them can make git
/// run other programs (`-c`, `--config-env`, `--exec-path`).
fn git_without_globals(argv: &mut Vec<String>) -> bool {
    let mut safe = true;
    let mut i = 1;
    while i < argv.len() && argv[i].starts_with('-') {
        let w = argv[i].as_str();
        let takes_value = matches!(w, "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--config-env");
        if w == "-c" || w.starts_with("--config-env") || w.starts_with("--exec-path") || w.starts_with("-c") {
            safe = false;
        }
        i += if takes_value { 2 } else { 1 };
    }
    let end = i.min(argv.len());
    argv.drain(1..end);
    safe
}

fn base_name(word: &str) -> &str {
    word.rsplit('/').next().filter(|b| !b.is_empty()).unwrap_or(word)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            name.chars().next().is_some_and(is_name_start)
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// A redirection word: its target when attached (`>out`, `2>&1`), and whether it writes.
struct Redirect {
    target: Option<String>,
    writes: bool,
}

fn redirection(word: &str) -> Option<Redirect> {
    let body = word.trim_start_matches(|c: char| c.is_ascii_digit());
    let body = body.strip_prefix('&').map_or(body, |b| if b.starts_with('>') { b } else { body });
    let (op_len, writes) = if body.starts_with(">>") || body.starts_with(">|") || body.starts_with("<>") {
        (2, true)
    } else if body.starts_with(">&") || body.starts_with("<&") {
        (2, body.starts_with('>'))
    } else if body.starts_with('>') {
        (1, true)
    } else if body.starts_with('<') {
        (1, false)
    } else {
        return None;
    };
    let target = &body[op_len..];
    Some(Redirect { target: (!target.is_empty()).then(|| target.to_string()), writes })
}

/// Redirection targets that write no file: `/dev/null`, the standard streams, descriptors.
fn harmless_target(target: &str) -> bool {
    matches!(target, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "-") || target.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(line: &str) -> Vec<String> {
        match parse(line) {
            Parsed::Commands(c) => c.into_iter().map(|c| c.display()).collect(),
            Parsed::Opaque(why) => panic!("opaque: {why}"),
        }
    }

    fn allowable(line: &str) -> Vec<bool> {
        match parse(line) {
            Parsed::Commands(c) => c.into_iter().map(|c| c.allowable).collect(),
            Parsed::Opaque(why) => panic!("opaque: {why}"),
        }
    }

    #[test]
    fn spellings_of_a_name_reduce_to_the_name() {
        for line in ["/bin/rm -rf x", "\\rm -rf x", "'rm' -rf x", "rm\t-rf x", "r\"\"m -rf x", "  rm  -rf  x"] {
            assert_eq!(names(line), vec!["rm -rf x"], "{line}");
        }
    }

    #[test]
    fn lists_and_pipelines_yield_every_command() {
        assert_eq!(
            names("git status; rm a && ls || cat b | wc -l & echo done\nwhoami"),
            vec!["git status", "rm a", "ls", "cat b", "wc -l", "echo done", "whoami"]
        );
    }

    #[test]
    fn operators_inside_quotes_are_text() {
        assert_eq!(names("echo 'a; rm b' \"c | d\""), vec!["echo a; rm b c | d"]);
    }

    #[test]
    fn substitutions_are_commands_too() {
        assert_eq!(names("echo $(rm a) `rm b` \"$(rm c)\""), vec!["echo $… $… $…", "rm a", "rm b", "rm c"]);
        assert_eq!(names("diff <(rm a) >(cat)"), vec!["diff $… $…", "rm a", "cat"]);
        assert_eq!(names("(cd x && rm y)"), vec!["cd x", "rm y"]);
    }

    #[test]
    fn wrappers_are_seen_through() {
        let cases = [
            ("env rm x", "rm x"),
            ("env -i A=1 -- rm x", "rm x"),
            ("env -u HOME rm x", "rm x"),
            ("env -S 'rm -rf' x", "rm -rf x"),
            ("sudo -u root rm x", "rm x"),
            ("nice -n 5 rm x", "rm x"),
            ("timeout -s KILL 5 rm x", "rm x"),
            ("nohup rm x", "rm x"),
            ("command rm x", "rm x"),
            ("exec rm x", "rm x"),
            ("xargs -0 -n 1 rm", "rm"),
            ("A=1 B=2 rm x", "rm x"),
            ("busybox rm x", "rm x"),
        ];
        for (line, inner) in cases {
            let got = names(line);
            assert_eq!(got.last().map(String::as_str), Some(inner), "{line}: {got:?}");
        }
    }

    #[test]
    fn wrappers_with_unmodelled_options_offer_every_possible_command() {
        for line in [
            "strace -f -o out.txt rm x",
            "chroot /srv rm x",
            "flock /tmp/lock rm x",
            "taskset -c 0 rm x",
            "unshare -r rm x",
            "parallel rm ::: x",
            "perf stat rm x",
        ] {
            let got = names(line);
            assert!(got.iter().any(|n| n.starts_with("rm ")), "{line}: {got:?}");
        }
        assert!(names("su -c 'rm x' root").contains(&"rm x".to_string()));
        assert!(names("flock /tmp/lock -c 'rm x'").contains(&"rm x".to_string()));
    }

    #[test]
    fn shells_with_a_script_are_parsed() {
        assert_eq!(names("sh -c 'rm -rf x; ls'"), vec!["sh -c rm -rf x; ls", "rm -rf x", "ls"]);
        assert_eq!(names("bash -lc \"git push\"").last().map(String::as_str), Some("git push"));
        assert_eq!(names("eval 'rm x'").last().map(String::as_str), Some("rm x"));
    }

    #[test]
    fn find_exec_and_delete_are_commands() {
        assert_eq!(names("find . -name '*.o' -exec rm {} \\;"), vec!["find . -name *.o -exec rm {} ;", "rm {}"]);
        assert_eq!(names("find build -delete"), vec!["rm build", "find build -delete"]);
        assert_eq!(allowable("find . -fprint out"), vec![false]);
    }

    #[test]
    fn git_global_options_are_dropped() {
        assert_eq!(names("git  push"), vec!["git push"]);
        assert_eq!(names("/usr/bin/git -C repo --no-pager push origin"), vec!["git push origin"]);
        assert_eq!(allowable("git -c core.pager=rm status"), vec![false]);
    }

    #[test]
    fn redirections_are_dropped_and_writes_are_not_allowable() {
        assert_eq!(names("git status > out.txt 2>&1"), vec!["git status"]);
        assert_eq!(allowable("git status > out.txt"), vec![false]);
        assert_eq!(allowable("git status >/dev/null 2>&1"), vec![true]);
        assert_eq!(allowable("git status &> log"), vec![false]);
    }

    #[test]
    fn names_from_expansions_are_not_allowable() {
        assert_eq!(allowable("$CMD -rf x"), vec![false]);
        assert!(!allowable("$(echo rm) x")[0]);
    }

    #[test]
    fn what_is_not_understood_is_opaque() {
        for line in [
            "echo 'unterminated",
            "cat <<EOF\nrm x\nEOF",
            "case $x in a) rm;; esac",
            "echo ${x:-$(rm y)}",
            "f() { rm x; }",
        ] {
            assert!(matches!(parse(line), Parsed::Opaque(_)), "{line}");
        }
    }

    #[test]
    fn control_words_and_comments_are_not_commands() {
        assert_eq!(names("if true; then rm x; fi # rm y"), vec!["true", "rm x"]);
        assert_eq!(names("for f in a b; do rm $f; done"), vec!["rm $…"]);
        assert_eq!(names("{ ls; }"), vec!["ls"]);
    }

    #[test]
    fn prefixes_reduce_like_commands() {
        assert_eq!(prefix_words("/usr/bin/git push"), Some(vec!["git".into(), "push".into()]));
        assert_eq!(prefix_words("rm "), Some(vec!["rm".into()]));
        assert_eq!(prefix_words("'unterminated"), None);
    }
}

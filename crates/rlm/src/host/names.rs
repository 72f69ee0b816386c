//! Which names host tools may take: Python identifiers that shadow none of the primitives,
//! keywords, common builtins or sandbox variables.

use super::PRIMITIVES;
use crate::error::RlmError;

/// Python keywords and builtins a host tool may not be named after (they would shadow it).
const UNUSABLE_NAMES: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "abs",
    "all",
    "any",
    "bool",
    "bytes",
    "callable",
    "chr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "filter",
    "float",
    "format",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "id",
    "input",
    "int",
    "isinstance",
    "iter",
    "len",
    "list",
    "locals",
    "map",
    "max",
    "min",
    "next",
    "object",
    "open",
    "ord",
    "pow",
    "print",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "inputs",
    "context",
    "asyncio",
    "json",
    "re",
];

/// Whether a host tool may be called `name` in snippets; the error says why not.
pub(crate) fn check_tool_name(name: &str) -> Result<(), RlmError> {
    let bad = |reason: &str| Err(RlmError::ToolName { name: name.to_string(), reason: reason.to_string() });
    if PRIMITIVES.contains(&name) {
        return bad("the name is reserved for a sandbox primitive");
    }
    let mut chars = name.chars();
    let ident = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident {
        return bad("the name is not a Python identifier");
    }
    if name.starts_with("__rlm") {
        return bad("names starting with `__rlm` are reserved");
    }
    if UNUSABLE_NAMES.contains(&name) {
        return bad("the name is a Python keyword, builtin or sandbox variable");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_must_be_usable_identifiers() {
        assert!(check_tool_name("read_file").is_ok());
        for bad in ["llm_query", "submit", "len", "2x", "has-dash", "__rlm_x", "context"] {
            assert!(check_tool_name(bad).is_err(), "{bad}");
        }
    }
}

//! What the primary model reads and what is taken from its replies: the default instructions,
//! the catalog of sandbox functions and host tools, code-block extraction, observation text
//! (with head-and-tail truncation and the await hint), and the JSON of an extraction reply.

use recursive_core::ToolSpec;
pub use recursive_core::text::truncate_middle;
use serde_json::Value;

use crate::dialect::Dialect;
use crate::sandbox::SnippetOutcome;

/// The default working rules given to the primary model.
pub const DEFAULT_INSTRUCTIONS: &str = "\
You answer a question about inputs that are too large to read in one go. The inputs are variables in a \
persistent Python REPL, and you work on them by writing code: you only ever see what your code prints.

How to work:
1. Explore before you slice. Print types, lengths and a few small samples of `inputs[...]` to learn the \
structure (headings, separators, record formats) before deciding how to split it.
2. Use code for structure and sub-model calls for meaning. Split, filter, search and count with Python \
(`re`, `json`, string methods); send the pieces that need reading or judgement to `llm_query` or \
`llm_query_batched` with a precise instruction, and keep each piece well within a sub-model's context.
3. Always read the data through the variables (`inputs[...]`). Never retype or paste text from the preview or \
from printed output into your code: the preview is truncated and retyped text drifts.
4. Keep intermediate results in variables; they persist between turns. Print only what you need to see; long \
output is cut in the middle.
5. Prefer one `llm_query_batched(prompts)` over a loop of `llm_query` calls: the batch runs concurrently.
6. Verify before you finish: check the candidate answer against the data with code or a focused sub-call, and \
look for evidence against it. Inspect on one turn and finish on the next: do not finish in the code that first \
computes an answer you have not seen.
7. Finishing is terminal. It ends the run at once and nothing after it runs, so do it only when you are done, \
with a value that matches the output schema.

In each reply, say briefly what you will do next, then give one or more ```python code blocks. They run in \
order in the same session and their output comes back to you.";

/// Shown when an awaiting mistake is detected in a snippet's result.
pub const AWAIT_HINT: &str = "Hint: the host functions work in these forms: `r = llm_query(p)` (blocks until the \
answer), `r = await llm_query(p)`, `rs = await asyncio.gather(*[llm_query(p) for p in ps])` (concurrent; the \
calls must be written inside the gather(...) parentheses), or `rs = llm_query_batched(ps)`. A call made outside \
`await`/`gather(...)` returns its result at once, so it cannot be awaited later.";

/// Shown when a reply has no code block.
pub const NO_CODE_OBSERVATION: &str = "Your reply had no ```python code block, so nothing ran. Reply with one or \
more ```python blocks (the REPL keeps your variables). When you have the answer, call `submit(...)` inside a \
code block.";

/// The modules the sandbox imports, each checked by a test that imports it.
#[rustfmt::skip]
pub const SANDBOX_MODULES: &[&str] = &[
    "re", "json", "math", "collections", "itertools", "functools", "random", "time", "copy", "csv", "decimal",
    "hashlib", "bisect", "dataclasses", "typing", "asyncio", "datetime", "base64", "heapq", "statistics", "string",
    "textwrap", "operator",
];

/// What the catalog needs to know about the run.
pub(crate) struct CatalogFacts<'a> {
    pub dialect: Dialect,
    /// The snippets run in full CPython (with its packages) rather than Monty.
    pub full_python: bool,
    pub sub_prompt_chars: usize,
    pub context_alias: Option<&'a str>,
    pub timeout_secs: f64,
    pub memory_limit_bytes: Option<usize>,
    pub recursion_limit: usize,
    pub observation_max_chars: usize,
    pub batch_concurrency: usize,
    pub max_llm_calls: u32,
    pub sub_model: &'a str,
    pub rlm_levels_left: u32,
    pub tools: &'a [ToolSpec],
    /// Runnables can be started (`agent_query`...).
    pub runnables: bool,
    pub schema: &'a Value,
    pub wrap_key: Option<&'a str>,
}

/// The catalog: the sandbox, its functions, the host tools and the output schema.
pub(crate) fn catalog(f: &CatalogFacts<'_>) -> String {
    let mut s = String::from("## The REPL\n");
    s.push_str(
        "- `inputs`: a dict of input name → full value (text as `str`, JSON as dicts/lists). The inputs are \
         described in the first user message.\n",
    );
    if let Some(name) = f.context_alias {
        s.push_str(&format!("- `context`: the same value as `inputs[{name:?}]` (the only input).\n"));
    }
    if f.dialect.binds_inputs_by_name() {
        s.push_str("- Each input is also a variable of its own name (when the name is a Python identifier).\n");
    }
    if f.full_python {
        s.push_str(
            "- The interpreter is CPython, confined: the full language and standard library, and the third-party \
             packages installed for it (try `import pandas`). There is no network; the working directory is an \
             empty scratch directory. `asyncio`, `json` and `re` are already imported.\n",
        );
    } else {
        s.push_str(&format!(
            "- The interpreter is a sandboxed Python subset: no class inheritance, no `del`, no `yield`, no \
             third-party packages. Modules: {}. There is no file, network or OS access. `asyncio`, `json` and `re` \
             are already imported.\n",
            SANDBOX_MODULES.join(", ")
        ));
    }
    let memory = f.memory_limit_bytes.map(|m| format!(", {} MiB of memory", m / (1024 * 1024))).unwrap_or_default();
    s.push_str(&format!(
        "- Limits per code block: {:.0} s wall clock (sub-calls included){memory}, recursion depth {}. Output \
         longer than {} chars is cut in the middle.\n\n",
        f.timeout_secs, f.recursion_limit, f.observation_max_chars
    ));
    s.push_str("## Functions\n");
    let model = if f.sub_model.is_empty() { String::new() } else { format!(" (`{}`)", f.sub_model) };
    if f.dialect.wraps_results() {
        s.push_str(&format!(
            "- `llm_query(prompt: str, model: str | None = None) -> dict`: one call to a sub-model{model}, which \
             sees only `prompt`. Returns `{{\"result\": text}}`, or `{{\"error\": message}}` on failure or when \
             the sub-call budget is spent (no exception: check for the key).\n"
        ));
        s.push_str(&format!(
            "- `llm_query_batched(prompts: list[str], model: str | None = None) -> dict`: the prompts run \
             concurrently (up to {} at a time). Returns `{{\"result\": [text, ...]}}` in input order; a failed \
             element is the string `\"[error] <Type>: <message>\"`. A batch larger than the remaining budget \
             fails as a whole with `{{\"error\": ...}}` and spends nothing.\n",
            f.batch_concurrency
        ));
    } else {
        s.push_str(&format!(
            "- `llm_query(prompt: str, model: str | None = None) -> str`: one call to a sub-model{model}, which \
             sees only `prompt`; returns its answer. On failure (or when the sub-call budget is spent) it returns \
             `\"[error] <Type>: <message>\"` instead of raising.\n"
        ));
        s.push_str(&format!(
            "- `llm_query_batched(prompts: list[str], model: str | None = None) -> list[str]`: the prompts run \
             concurrently (up to {} at a time); the answers come back in input order, a failed one as \
             `\"[error] <Type>: <message>\"`. A batch larger than the remaining budget sends nothing.\n",
            f.batch_concurrency
        ));
    }
    s.push_str(&format!(
        "- Keep each sub-model prompt under about {} characters (the sub-model's context window).\n",
        crate::inputs::group(f.sub_prompt_chars)
    ));
    if f.rlm_levels_left > 0 {
        s.push_str(
            "- `rlm_query(prompt: str, inputs: dict | None = None) -> dict`: starts a child run like this one, with \
             its own REPL, on `inputs` (default: `{\"prompt\": prompt}`), and returns `{\"result\": answer}` or \
             `{\"error\": message}`. Use it for sub-tasks that are themselves too large for one sub-model call.\n",
        );
    } else {
        s.push_str(
            "- `rlm_query(prompt: str, inputs: dict | None = None) -> dict`: at this depth it is a plain \
             `llm_query` on the prompt (with the inputs appended as JSON).\n",
        );
    }
    if !f.tools.is_empty() {
        s.push_str(
            "- `tool_call(name: str, **args)`: calls a host tool (below) by name, the same as calling its function.\n",
        );
    }
    if f.runnables {
        s.push_str(
            "- `agent_query(task, name=None, **data)`, `goal_query(objective, name=None, **data)`, \
             `graph_run(name, input=\"\", **data)` and `rlm_query(prompt, inputs, name=...)`: run a named agent, \
             goal pursuer, graph or RLM of this run as a child run (no name: the default agent, with the host \
             tools below, or goal pursuer); they answer like `llm_query`.\n",
        );
    }
    s.push_str(&finishing(f));
    s.push_str(
        "Each of these can be called plainly (`r = llm_query(p)` blocks until the answer) or awaited \
         (`r = await llm_query(p)`). To run several at once: `rs = await asyncio.gather(*[llm_query(p) for p in \
         ps])` or `rs = llm_query_batched(ps)`.\n",
    );
    s.push_str(&format!(
        "Sub-call budget: {} model calls for the whole run, shared by llm_query, llm_query_batched and rlm_query \
         (a child run's own steps count too).\n",
        f.max_llm_calls
    ));
    if !f.tools.is_empty() {
        s.push_str(
            "\n## Host tools\nCall them like functions, with positional arguments in the order shown or by \
                    keyword. They return the tool's text output, or an error as above.\n",
        );
        for t in f.tools {
            s.push_str(&format!("- `{}({})`: {}\n", t.name, signature(&t.parameters), first_sentence(&t.description)));
        }
    }
    s.push_str(&format!(
        "\n## Output schema\n```json\n{}\n```\n",
        serde_json::to_string_pretty(f.schema).unwrap_or_else(|_| f.schema.to_string())
    ));
    s
}

/// How the model finishes, in the dialect's words.
fn finishing(f: &CatalogFacts<'_>) -> String {
    let wrap = |call: &str| {
        f.wrap_key
            .map(|k| format!(" A bare value is accepted as `{{\"{k}\": value}}` (e.g. `{call}(\"text\")`)."))
            .unwrap_or_default()
    };
    let invalid = "An invalid result raises a ValueError naming the violation; fix it and finish again.";
    match f.dialect {
        Dialect::Recursive => format!(
            "- `submit(result)`: ends the run with `result`, which must match the output schema below.{} {invalid}\n\n",
            wrap("submit")
        ),
        Dialect::Rlm => format!(
            "- `FINAL(answer)`: ends the run with `answer`, which must match the output schema below.{} You can also \
             write, on a line of its own outside code, `FINAL(your answer)` or `FINAL_VAR(variable_name)` (the value \
             of a REPL variable). `answer` starts as `{{\"content\": \"\", \"ready\": False}}`: setting \
             `answer[\"content\"]` and then `answer[\"ready\"] = True` ends the run with the content too. {invalid}\n\n",
            wrap("FINAL")
        ),
        Dialect::Dspy => format!(
            "- `SUBMIT(field=value, ...)`: ends the run with the output schema's fields (below).{} {invalid}\n\n",
            wrap("SUBMIT")
        ),
    }
}

/// The positional order of a tool's arguments: the schema's properties in the order they are
/// declared (as a Python signature would list them).
pub(crate) fn argument_order(parameters: &Value) -> Vec<String> {
    parameters.get("properties").and_then(Value::as_object).map(|p| p.keys().cloned().collect()).unwrap_or_default()
}

/// A compact Python-like signature of a tool: `path: string, depth: integer = None`.
fn signature(parameters: &Value) -> String {
    let required: Vec<&str> = parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let props = parameters.get("properties").and_then(Value::as_object);
    argument_order(parameters)
        .iter()
        .map(|name| {
            let ty = props.and_then(|p| p.get(name)).map(json_type).unwrap_or("any");
            if required.contains(&name.as_str()) { format!("{name}: {ty}") } else { format!("{name}: {ty} = None") }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The JSON type name of a property schema (the first non-null one of a union).
fn json_type(schema: &Value) -> &str {
    match schema.get("type") {
        Some(Value::String(t)) => t,
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("any"),
        _ => "any",
    }
}

/// The first sentence of a description (up to 200 characters).
fn first_sentence(text: &str) -> String {
    let end = text.find(". ").map(|i| i + 1).unwrap_or(text.len());
    recursive_core::text::clip_chars(text[..end].trim(), 200)
}

/// The code blocks of a reply (```python, ```py or ```repl, optionally followed by more words
/// on the fence line), in order. A closing fence written at the end of the last code line
/// (`print(x)````) closes the block; an unclosed final block runs to the end of the reply.
pub fn extract_code_blocks(reply: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in reply.lines() {
        let t = line.trim();
        match &mut current {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    let lang = info.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
                    if matches!(lang.as_str(), "python" | "py" | "repl" | "python3") {
                        current = Some(Vec::new());
                    }
                }
            }
            Some(lines) => {
                if t == "```" {
                    blocks.push(lines.join("\n"));
                    current = None;
                } else if let Some(code) = line.trim_end().strip_suffix("```")
                    && !code.ends_with('`')
                {
                    lines.push(code);
                    blocks.push(lines.join("\n"));
                    current = None;
                } else {
                    lines.push(line);
                }
            }
        }
    }
    if let Some(lines) = current
        && !lines.is_empty()
    {
        blocks.push(lines.join("\n"));
    }
    blocks.retain(|b| !b.trim().is_empty());
    blocks.into_iter().map(|b| dedent(&b)).collect()
}

/// Leading spaces and tabs of a line, in bytes.
fn leading_blanks(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Removes the indentation (spaces and tabs) common to every non-blank line. Only ASCII
/// blanks are removed, so lines holding other whitespace are never cut inside a character.
fn dedent(code: &str) -> String {
    let indent = code.lines().filter(|l| !l.trim().is_empty()).map(leading_blanks).min().unwrap_or(0);
    if indent == 0 {
        return code.to_string();
    }
    code.lines().map(|l| &l[leading_blanks(l).min(indent)..]).collect::<Vec<_>>().join("\n")
}

/// Whether a snippet's result shows an awaiting mistake.
fn shows_await_mistake(o: &SnippetOutcome) -> bool {
    let err = o.error.as_ref().map(|e| e.message.as_str()).unwrap_or("");
    err.contains("can't be awaited")
        || err.contains("coroutine")
        || err.contains("awaitable")
        || o.stdout.contains("<coroutine")
        || o.value.as_deref().is_some_and(|v| v.contains("<coroutine"))
}

/// The observation text of one snippet (before truncation).
pub(crate) fn snippet_observation(o: &SnippetOutcome) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !o.stdout.is_empty() {
        parts.push(o.stdout.trim_end_matches('\n').to_string());
    }
    if let Some(v) = &o.value {
        parts.push(v.clone());
    }
    if let Some(e) = &o.error {
        parts.push(e.message.clone());
    }
    if parts.is_empty() {
        parts.push("(no output)".into());
    }
    if shows_await_mistake(o) {
        parts.push(AWAIT_HINT.into());
    }
    parts.join("\n")
}

/// Parses the JSON of an extraction reply (see [`recursive_core::reply::json_in_reply`]).
pub fn parse_json_reply(reply: &str) -> Option<Value> {
    recursive_core::reply::json_in_reply(reply).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{SnippetError, SnippetErrorKind};
    use serde_json::json;

    #[test]
    fn code_blocks_are_taken_in_order_from_the_accepted_fences() {
        let reply =
            "First:\n```python\nx = 1\n```\nthen\n```py\ny = 2\n```\n```repl\nprint(x + y)\n```\n```json\n{}\n```";
        assert_eq!(extract_code_blocks(reply), vec!["x = 1", "y = 2", "print(x + y)"]);
    }

    #[test]
    fn dedent_does_not_cut_inside_unicode_whitespace() {
        // A "blank" line of U+3000 (3 bytes) between indented lines used to be sliced mid-character.
        let reply = "```python\n  x = 1\n\u{3000}\n  y = 2\n\u{a0}\n```";
        assert_eq!(extract_code_blocks(reply), vec!["x = 1\n\u{3000}\ny = 2\n\u{a0}"]);
    }

    #[test]
    fn closing_fence_glued_to_the_last_line_closes_the_block() {
        assert_eq!(extract_code_blocks("```python\nx = 1\nprint(x)```\nDone."), vec!["x = 1\nprint(x)"]);
        assert_eq!(extract_code_blocks("```python\nprint(1)```\n```py\nprint(2)\n```"), vec!["print(1)", "print(2)"]);
    }

    #[test]
    fn fence_info_after_the_language_is_ignored() {
        assert_eq!(extract_code_blocks("```python title=\"step 1\"\nprint(1)\n```"), vec!["print(1)"]);
        assert!(extract_code_blocks("```pythonic\nprint(1)\n```").is_empty());
    }

    #[test]
    fn reply_without_code_has_no_blocks() {
        assert!(extract_code_blocks("I think the answer is 4.").is_empty());
        assert!(extract_code_blocks("```\nplain fence\n```").is_empty());
    }

    #[test]
    fn unclosed_block_runs_to_the_end_and_indentation_is_removed() {
        assert_eq!(extract_code_blocks("  ```python\n  if x:\n      y = 1"), vec!["if x:\n    y = 1"]);
    }

    #[test]
    fn truncation_keeps_head_and_tail_and_says_how_much_was_cut() {
        let text = format!("{}{}{}", "H".repeat(50), "m".repeat(1000), "T".repeat(50));
        let t = truncate_middle(&text, 100);
        assert!(t.starts_with(&"H".repeat(50)), "{t}");
        assert!(t.ends_with(&"T".repeat(50)), "{t}");
        assert!(t.contains("1,000 chars truncated"), "{t}");
        assert_eq!(truncate_middle("short", 100), "short");
    }

    #[test]
    fn await_mistakes_get_the_hint() {
        let o = SnippetOutcome {
            error: Some(SnippetError {
                kind: SnippetErrorKind::Exception,
                message: "TypeError: 'dict' object can't be awaited".into(),
            }),
            ..Default::default()
        };
        assert!(snippet_observation(&o).contains("asyncio.gather(*[llm_query(p) for p in ps])"));
        let fine = SnippetOutcome { stdout: "42\n".into(), ..Default::default() };
        assert_eq!(snippet_observation(&fine), "42");
    }

    #[test]
    fn json_reply_is_parsed_from_fences_and_prose() {
        assert_eq!(parse_json_reply("{\"answer\": \"a\"}"), Some(json!({"answer": "a"})));
        assert_eq!(parse_json_reply("Here:\n```json\n{\"answer\": \"b\"}\n```"), Some(json!({"answer": "b"})));
        assert_eq!(parse_json_reply("The output is {\"answer\": \"c\"}."), Some(json!({"answer": "c"})));
        assert_eq!(parse_json_reply("no json here"), None);
    }

    #[test]
    fn argument_order_follows_the_declared_properties() {
        let p = json!({"type": "object", "properties": {"path": {}, "depth": {}}, "required": ["depth"]});
        assert_eq!(argument_order(&p), vec!["path", "depth"]);
    }

    #[test]
    fn tools_are_listed_as_short_signatures() {
        let p = json!({"type": "object", "properties": {"path": {"type": ["string", "null"]}, "depth": {"type": "integer"}},
            "required": ["depth"]});
        assert_eq!(signature(&p), "path: string = None, depth: integer");
        assert_eq!(first_sentence("List a directory. Then more words."), "List a directory.");
    }
}

//! Facts about known models that callers plan with: the context window, in tokens, and whether
//! the model is one of OpenAI's reasoning models (which take `max_completion_tokens`), and the
//! thinking budget a reasoning effort stands for. A model id
//! matches an entry exactly or by a dated/versioned suffix (`gpt-4o-2024-08-06` → `gpt-4o`);
//! an unknown model has no known window.

/// Known context windows (tokens), longest prefixes first where ids share a stem.
const CONTEXT_WINDOWS: &[(&str, u32)] = &[
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4.1-nano", 1_047_576),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o-mini", 128_000),
    ("gpt-4o", 128_000),
    ("gpt-5-mini", 400_000),
    ("gpt-5-nano", 400_000),
    ("gpt-5", 400_000),
    ("o4-mini", 200_000),
    ("o3-mini", 200_000),
    ("o3", 200_000),
    ("claude-opus-4", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-haiku-4", 200_000),
    ("claude-3-7-sonnet", 200_000),
    ("claude-3-5-haiku", 200_000),
    ("claude-3-5-sonnet", 200_000),
    ("gemini-2.5-flash-lite", 1_048_576),
    ("gemini-2.5-flash", 1_048_576),
    ("gemini-2.5-pro", 1_048_576),
    ("llama3.1", 128_000),
    ("llama3.2", 128_000),
    ("qwen2.5-coder", 32_768),
    ("qwen3", 40_960),
];

/// The context window of `model` in tokens, when known.
pub fn context_window(model: &str) -> Option<u32> {
    let id = model.rsplit('/').next().unwrap_or(model);
    CONTEXT_WINDOWS.iter().find(|(name, _)| matches_model(id, name)).map(|(_, w)| *w)
}

/// The models whose context window is known, by family name.
pub fn known_models() -> impl Iterator<Item = &'static str> {
    CONTEXT_WINDOWS.iter().map(|(name, _)| *name)
}

/// OpenAI's reasoning model families: they refuse `max_tokens` and take
/// `max_completion_tokens` (and `reasoning_effort`).
const REASONING_FAMILIES: &[&str] = &[
    "o1",
    "o1-mini",
    "o1-pro",
    "o3",
    "o3-mini",
    "o3-pro",
    "o4-mini",
    "gpt-5",
    "gpt-5-mini",
    "gpt-5-nano",
    "gpt-5.1",
    "gpt-5.2",
    "codex-mini",
];

/// Whether `model` is one of OpenAI's reasoning models (`o1`, `o3`, `o4-mini`, `gpt-5`…).
pub fn is_reasoning_model(model: &str) -> bool {
    let id = model.rsplit('/').next().unwrap_or(model);
    REASONING_FAMILIES.iter().any(|name| matches_model(id, name))
}

/// `id` is `name`, or `name` followed by a suffix (`-…`, `:…`, `@…`): a date, a version, a
/// size tag. Entries that share a stem are listed longest first, so `gpt-4o-mini` is not read
/// as `gpt-4o`.
fn matches_model(id: &str, name: &str) -> bool {
    id.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', ':', '@']))
}

/// Thinking tokens for a reasoning effort (`None` for an unknown level): one scale for every
/// provider that takes a thinking budget (Anthropic, Bedrock's Claude, Gemini 2.5 — within each
/// one's range).
pub(crate) fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(24_576),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_models_are_told_apart_from_chat_models() {
        for m in ["o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5-mini", "openai/gpt-5-nano", "o3-pro"] {
            assert!(is_reasoning_model(m), "{m}");
        }
        for m in ["gpt-4o", "gpt-4.1-mini", "gpt-4o-mini", "llama3.1", "claude-sonnet-4", "o"] {
            assert!(!is_reasoning_model(m), "{m}");
        }
    }

    #[test]
    fn known_models_and_their_dated_ids_have_windows() {
        assert_eq!(context_window("gpt-4o"), Some(128_000));
        assert_eq!(context_window("gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(context_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(context_window("claude-haiku-4-5"), Some(200_000));
        assert_eq!(context_window("openai/gpt-5-mini"), Some(400_000));
        assert_eq!(context_window("qwen2.5-coder:7b"), Some(32_768));
    }

    #[test]
    fn unknown_models_have_none() {
        assert_eq!(context_window("my-finetune"), None);
        assert_eq!(context_window("gpt-4oo"), None);
    }
}

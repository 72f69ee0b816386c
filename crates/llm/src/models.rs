//! Facts about known models that callers plan with: the context window, in tokens. A model id
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

/// `id` is `name`, or `name` followed by a suffix (`-…`, `:…`, `@…`): a date, a version, a
/// size tag. Entries that share a stem are listed longest first, so `gpt-4o-mini` is not read
/// as `gpt-4o`.
fn matches_model(id: &str, name: &str) -> bool {
    id.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', ':', '@']))
}

#[cfg(test)]
mod tests {
    use super::*;

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

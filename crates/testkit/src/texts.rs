//! Large inputs for tests and benchmarks: a log-like text with one needle in it, and the
//! scripted model turns that find it.

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

/// The characters of each chunk the scripted root model of [`needle_turn`] splits the input into.
pub const NEEDLE_CHUNK: usize = 21_000;

/// The scripted answer to an OpenAI chat request (`body`) of an RLM looking for [`NEEDLE`]: the
/// model `bench-primary` looks, then asks a sub-model about every chunk at once, then submits
/// what was found; any other model (the sub-model) quotes the needle if its chunk holds it,
/// else says `none`.
pub fn needle_turn(body: &serde_json::Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if body["model"] == "bench-primary" {
        return match messages.iter().filter(|m| m["role"] == "assistant").count() {
            0 => "Look first.\n```python\nprint(len(context), context[:80])\n```".to_string(),
            1 => format!(
                "Ask about every chunk at once.\n```python\nchunks = [context[i:i + {NEEDLE_CHUNK}] for i in range(0, \
                 len(context), {NEEDLE_CHUNK})]\nrs = llm_query_batched([f'Quote the code word if this text has one, \
                 else say none: {{c}}' for c in chunks])['result']\nhits = [r for r in rs if r != 'none']\n\
                 print(len(chunks), hits)\n```"
            ),
            _ => "```python\nsubmit(hits[0])\n```".to_string(),
        };
    }
    let prompt = messages.last().and_then(|m| m["content"].as_str()).unwrap_or("");
    match prompt.find("CODEWORD-") {
        Some(at) => prompt[at..].split_whitespace().next().unwrap_or("none").to_string(),
        None => "none".to_string(),
    }
}

//! The JSON in a model's reply: the whole reply, a fenced block, or the first balanced
//! object or array in prose, with trailing commas repaired. One parser for every place that
//! reads structured answers from free text (goal steps, the RLM's extraction call).

use serde_json::Value;

/// The JSON value in a reply, or a message (worded for the model) saying why there is none.
pub fn json_in_reply(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Ok(v);
    }
    let Some(candidate) = extract_json(trimmed) else {
        return Err(format!("the reply contains no JSON object: {}", preview(trimmed)));
    };
    serde_json::from_str::<Value>(&remove_trailing_commas(&candidate)).map_err(|e| format!("invalid JSON: {e}"))
}

fn preview(text: &str) -> String {
    format!("{:?}", crate::text::clip_chars(text, 80))
}

/// The JSON object (or array) in a reply: inside a code fence if there is one, from the first
/// opening bracket to its balanced close (or to the end when it never closes).
fn extract_json(text: &str) -> Option<String> {
    let body = strip_fence(text).unwrap_or(text);
    let start = body.find(['{', '['])?;
    let bytes = body.as_bytes();
    let mut depth = 0i32;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(body[start..=i].to_string());
                }
            }
            _ => {}
        }
    }
    Some(body[start..].to_string())
}

fn strip_fence(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after = &text[open + 3..];
    // Skip the language tag (`json`) up to the end of the fence line.
    let body_start = after.find('\n').map(|n| n + 1).unwrap_or(0);
    let body = &after[body_start..];
    let close = body.find("```").unwrap_or(body.len());
    Some(&body[..close])
}

/// Drops commas that directly precede a closing bracket, outside strings.
fn remove_trailing_commas(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            out.push(c);
            continue;
        }
        if c == '"' {
            in_string = true;
        } else if c == ',' {
            let next = chars[i + 1..].iter().find(|n| !n.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_json_in_fences_prose_and_repairs_trailing_commas() {
        assert_eq!(json_in_reply("```json\n{\"a\": 1,}\n```").unwrap(), json!({"a": 1}));
        assert_eq!(
            json_in_reply("Sure! {\"a\": [1, 2,], \"b\": \"x}\"} hope it helps").unwrap(),
            json!({"a": [1, 2], "b": "x}"})
        );
        assert_eq!(json_in_reply(" [1, 2] ").unwrap(), json!([1, 2]));
    }

    #[test]
    fn a_reply_without_json_says_so() {
        let err = json_in_reply("no structure here").unwrap_err();
        assert!(err.starts_with("the reply contains no JSON object"), "{err}");
    }
}

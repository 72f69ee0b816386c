//! Cycle detection: a goal that repeats one on its own stack, exactly (after normalising case,
//! whitespace and punctuation), nearly (a text-similarity score above a threshold), or in
//! meaning (cosine similarity of embeddings, when an [`Embedder`] is configured — e.g.
//! [`HttpEmbedder`] for any OpenAI-compatible `/v1/embeddings` endpoint).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::config::SimilarityMetric;

/// Lower-case, punctuation replaced by spaces, whitespace collapsed.
pub fn normalize(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_alphanumeric() { c.to_lowercase().next().unwrap_or(c) } else { ' ' })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Similarity of two texts after normalisation, from 0 to 1.
pub fn text_similarity(a: &str, b: &str, metric: SimilarityMetric) -> f64 {
    let (a, b) = (normalize(a), normalize(b));
    match metric {
        SimilarityMetric::Levenshtein => strsim::normalized_levenshtein(&a, &b),
        SimilarityMetric::JaroWinkler => strsim::jaro_winkler(&a, &b),
    }
}

/// How a cycle was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CycleKind {
    /// Equal after normalisation.
    Exact,
    /// Text similarity at or above the threshold.
    Similar,
    /// Embedding cosine similarity at or above the semantic threshold.
    Semantic,
}

/// A goal found to repeat one on its stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleMatch {
    /// The goal on the stack it repeats.
    pub ancestor: String,
    /// The score (1 for exact).
    pub score: f64,
    /// How it was recognised.
    pub kind: CycleKind,
}

/// The first ancestor that `goal` repeats exactly or by text similarity, if any.
pub fn find_text_cycle(goal: &str, stack: &[String], metric: SimilarityMetric, threshold: f64) -> Option<CycleMatch> {
    let norm = normalize(goal);
    if let Some(a) = stack.iter().find(|a| normalize(a) == norm) {
        return Some(CycleMatch { ancestor: a.clone(), score: 1.0, kind: CycleKind::Exact });
    }
    stack
        .iter()
        .map(|a| (a, text_similarity(goal, a, metric)))
        .filter(|(_, s)| *s >= threshold)
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(a, s)| CycleMatch { ancestor: a.clone(), score: s, kind: CycleKind::Similar })
}

/// Cosine similarity of two vectors (0 when either is zero or their lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na.sqrt() * nb.sqrt()) }
}

/// Why embeddings could not be computed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The request failed.
    #[error("embeddings request failed: {0}")]
    Http(String),
    /// The server answered with an error status.
    #[error("embeddings endpoint returned HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The response body.
        body: String,
    },
    /// The answer was not the expected shape.
    #[error("malformed embeddings response: {0}")]
    Malformed(String),
}

/// Turns texts into vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// One vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// An OpenAI-compatible embeddings endpoint: `POST {base_url}/embeddings` with
/// `{"model", "input": [...]}`, answered by `{"data": [{"index", "embedding"}]}`.
#[derive(Debug, Clone)]
pub struct HttpEmbedder {
    client: reqwest::Client,
    base_url: String,
    model: String,
    api_key: Option<String>,
}

impl HttpEmbedder {
    /// An embedder for `base_url` (including the version path, e.g.
    /// `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`) and a model name.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            client: recursive_http::client(),
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            api_key: None,
        }
    }

    /// Sends `Authorization: Bearer <key>`.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Uses this HTTP client (timeouts, proxies); build it with `recursive_http::client_builder()`
    /// so it has the workspace's TLS set-up.
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[async_trait]
impl Embedder for HttpEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let url = format!("{}/embeddings", self.base_url);
        let mut req = self.client.post(&url).json(&serde_json::json!({ "model": self.model, "input": texts }));
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| EmbedError::Http(e.to_string()))?;
        let status = resp.status();
        let body = resp.text().await.map_err(|e| EmbedError::Http(e.to_string()))?;
        if !status.is_success() {
            return Err(EmbedError::Status { status: status.as_u16(), body });
        }
        let parsed: EmbeddingsResponse =
            serde_json::from_str(&body).map_err(|e| EmbedError::Malformed(e.to_string()))?;
        if parsed.data.len() != texts.len() {
            return Err(EmbedError::Malformed(format!("{} embeddings for {} inputs", parsed.data.len(), texts.len())));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (pos, item) in parsed.data.into_iter().enumerate() {
            let i = item.index.unwrap_or(pos);
            let slot = slots.get_mut(i).ok_or_else(|| EmbedError::Malformed(format!("index {i} out of range")))?;
            *slot = Some(item.embedding);
        }
        slots
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.ok_or_else(|| EmbedError::Malformed(format!("no embedding for input {i}"))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_ignores_case_whitespace_and_punctuation() {
        assert_eq!(normalize("  Find the  BEST route!? "), "find the best route");
        assert_eq!(normalize("find-the best_route"), "find the best route");
    }

    #[test]
    fn exact_cycle_beats_similarity() {
        let stack = vec!["Plan the trip".to_string(), "Book a hotel".to_string()];
        let m = find_text_cycle("book a HOTEL.", &stack, SimilarityMetric::Levenshtein, 0.9).unwrap();
        assert_eq!((m.kind, m.ancestor.as_str()), (CycleKind::Exact, "Book a hotel"));
    }

    #[test]
    fn near_duplicate_over_threshold_is_a_cycle_and_distinct_goal_is_not() {
        let stack = vec!["Summarize the quarterly sales report".to_string()];
        let m = find_text_cycle("Summarise the quarterly sales report", &stack, SimilarityMetric::Levenshtein, 0.9);
        assert_eq!(m.map(|m| m.kind), Some(CycleKind::Similar));
        let none = find_text_cycle("Chart the yearly costs", &stack, SimilarityMetric::Levenshtein, 0.9);
        assert!(none.is_none());
    }

    #[test]
    fn cosine_of_parallel_and_orthogonal_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-9);
        assert!(cosine(&[1.0, 0.0], &[0.0, 1.0]).abs() < 1e-9);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
    }
}

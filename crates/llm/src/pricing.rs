//! Model prices and call costs: a [`PriceTable`] (USD per million tokens: input, output,
//! cache read, cache write) with built-in list prices of well-known models, extendable from
//! TOML, and [`PricedProvider`], which fills `ChatResponse::cost_usd` where the price is known.
//!
//! Lookup is exact first, then the longest table key that the model id extends with only a
//! version tag (a date or snapshot number after `-`, `latest`, or anything after `:` or `@`),
//! so dated ids (`gpt-4o-2024-08-06`) find `gpt-4o` while other models that share a prefix
//! (`o3-pro`, `claude-opus-4-6`) are not priced as their namesake. A vendor prefix as routers
//! write it (`openai/gpt-4o`) is also tried without the vendor, and so is the part of an ARN
//! after its last `/`. A Bedrock id behind a geographic cross-region inference profile
//! (`us.`, `eu.`, `apac.`, `jp.`, `au.`, `ca.`, `us-gov.`) is priced as the in-region model; a
//! `global.` profile has its own price where it differs, else the model's.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use recursive_core::{CallPrice, ChatProvider, ChatRequest, ChatStream, ProviderError, StreamEvent, Usage};
use serde::{Deserialize, Serialize};

use crate::error::LlmError;

/// Prices of one model in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Input tokens read from the cache.
    pub cache_read: f64,
    /// Input tokens written to the cache.
    pub cache_write: f64,
}

impl ModelPrice {
    /// A price with cache reads and writes at the given rates.
    pub const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self { input, output, cache_read, cache_write }
    }

    /// The cost of a call in USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_read_tokens as f64 * self.cache_read
            + usage.cache_write_tokens as f64 * self.cache_write)
            / 1_000_000.0
    }
}

/// List prices of well-known models, USD per million tokens, as published by OpenAI,
/// Anthropic, Google and AWS on 2025-11-25 (standard tier; Anthropic cache writes at the
/// 5-minute rate; Gemini's paid tier for prompts up to 200k tokens — gemini-2.5-pro costs twice
/// as much past that, which this flat table does not see; Bedrock on demand, where Claude 4.5
/// models cost 10% more in-region and through geographic profiles than through `global.`).
const BUILTIN: &[(&str, ModelPrice)] = &[
    // OpenAI: cache writes are free; cached input is billed at the cached rate.
    ("gpt-5", ModelPrice::new(1.25, 10.0, 0.125, 0.0)),
    ("gpt-5-mini", ModelPrice::new(0.25, 2.0, 0.025, 0.0)),
    ("gpt-5-nano", ModelPrice::new(0.05, 0.40, 0.005, 0.0)),
    ("gpt-4.1", ModelPrice::new(2.0, 8.0, 0.50, 0.0)),
    ("gpt-4.1-mini", ModelPrice::new(0.40, 1.60, 0.10, 0.0)),
    ("gpt-4.1-nano", ModelPrice::new(0.10, 0.40, 0.025, 0.0)),
    ("gpt-4o", ModelPrice::new(2.50, 10.0, 1.25, 0.0)),
    ("gpt-4o-mini", ModelPrice::new(0.15, 0.60, 0.075, 0.0)),
    ("o3", ModelPrice::new(2.0, 8.0, 0.50, 0.0)),
    ("o3-mini", ModelPrice::new(1.10, 4.40, 0.55, 0.0)),
    ("o4-mini", ModelPrice::new(1.10, 4.40, 0.275, 0.0)),
    // Anthropic.
    ("claude-opus-4-5", ModelPrice::new(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-1", ModelPrice::new(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4", ModelPrice::new(15.0, 75.0, 1.50, 18.75)),
    ("claude-sonnet-4-5", ModelPrice::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-sonnet-4", ModelPrice::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-3-7-sonnet", ModelPrice::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-haiku-4-5", ModelPrice::new(1.0, 5.0, 0.10, 1.25)),
    ("claude-3-5-haiku", ModelPrice::new(0.80, 4.0, 0.08, 1.0)),
    // Google Gemini API (text input; output includes thinking tokens): implicitly cached input
    // at the cached rate, no charge for writing it.
    ("gemini-2.5-pro", ModelPrice::new(1.25, 10.0, 0.125, 0.0)),
    ("gemini-2.5-flash", ModelPrice::new(0.30, 2.50, 0.03, 0.0)),
    ("gemini-2.5-flash-lite", ModelPrice::new(0.10, 0.40, 0.01, 0.0)),
    // AWS Bedrock, Claude (keys without the `:N` revision, which the lookup takes as a version).
    ("global.anthropic.claude-sonnet-4-5-20250929-v1", ModelPrice::new(3.0, 15.0, 0.30, 3.75)),
    ("anthropic.claude-sonnet-4-5-20250929-v1", ModelPrice::new(3.30, 16.50, 0.33, 4.125)),
    ("global.anthropic.claude-haiku-4-5-20251001-v1", ModelPrice::new(1.0, 5.0, 0.10, 1.25)),
    ("anthropic.claude-haiku-4-5-20251001-v1", ModelPrice::new(1.10, 5.50, 0.11, 1.375)),
    ("global.anthropic.claude-opus-4-5-20251101-v1", ModelPrice::new(5.0, 25.0, 0.50, 6.25)),
    ("anthropic.claude-opus-4-5-20251101-v1", ModelPrice::new(5.50, 27.50, 0.55, 6.875)),
    ("anthropic.claude-opus-4-1-20250805-v1", ModelPrice::new(15.0, 75.0, 1.50, 18.75)),
    ("anthropic.claude-sonnet-4-20250514-v1", ModelPrice::new(3.0, 15.0, 0.30, 3.75)),
    ("anthropic.claude-3-7-sonnet-20250219-v1", ModelPrice::new(3.0, 15.0, 0.30, 3.75)),
    ("anthropic.claude-3-5-haiku-20241022-v1", ModelPrice::new(0.80, 4.0, 0.08, 1.0)),
    // AWS Bedrock, Amazon Nova: cached input at a quarter of the input price, writes free.
    ("amazon.nova-pro-v1", ModelPrice::new(0.80, 3.20, 0.20, 0.0)),
    ("amazon.nova-lite-v1", ModelPrice::new(0.06, 0.24, 0.015, 0.0)),
    ("amazon.nova-micro-v1", ModelPrice::new(0.035, 0.14, 0.00875, 0.0)),
];

/// Prefixes of Bedrock's cross-region inference profiles: geographic ones, priced as the
/// in-region model, then the global one.
const INFERENCE_PROFILE_PREFIXES: &[&str] = &["us.", "eu.", "apac.", "jp.", "au.", "ca.", "us-gov.", "global."];

/// One `[pricing."model"]` entry in TOML; cache prices default to the input price.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPrice {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct TomlDoc {
    #[serde(default)]
    pricing: BTreeMap<String, TomlPrice>,
}

/// Prices by model id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// A table with no prices.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in list prices.
    pub fn builtin() -> Self {
        let mut t = Self::empty();
        for (model, price) in BUILTIN {
            t.insert(*model, *price);
        }
        t
    }

    /// Adds or replaces a model's price.
    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) -> &mut Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// Adds the `[pricing."model"]` tables of a TOML document (other keys are ignored, so a
    /// whole `recursive.toml` can be passed). `input` and `output` are required; `cache_read`
    /// and `cache_write` default to the input price.
    pub fn extend_from_toml(&mut self, text: &str) -> Result<&mut Self, LlmError> {
        let doc: TomlDoc = toml::from_str(text).map_err(|e| LlmError::Pricing(e.to_string()))?;
        for (model, p) in doc.pricing {
            for (field, v) in [("input", Some(p.input)), ("output", Some(p.output)), ("cache_read", p.cache_read)]
                .into_iter()
                .chain([("cache_write", p.cache_write)])
            {
                if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
                    return Err(LlmError::Pricing(format!("{model}: `{field}` must be a price >= 0")));
                }
            }
            let price = ModelPrice {
                input: p.input,
                output: p.output,
                cache_read: p.cache_read.unwrap_or(p.input),
                cache_write: p.cache_write.unwrap_or(p.input),
            };
            self.insert(model, price);
        }
        Ok(self)
    }

    /// Reads a TOML file and adds its `[pricing]` tables.
    pub fn extend_from_toml_file(&mut self, path: impl AsRef<Path>) -> Result<&mut Self, LlmError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| LlmError::io(path, e))?;
        self.extend_from_toml(&text).map_err(|e| match e {
            LlmError::Pricing(m) => LlmError::Pricing(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// The price of a model: exact id, else the longest key that prefixes it at a boundary,
    /// else the same without a `vendor/` prefix (or an ARN's path); each also without a
    /// Bedrock inference profile's prefix.
    pub fn lookup(&self, model: &str) -> Option<&ModelPrice> {
        self.lookup_profile(model).or_else(|| model.rsplit_once('/').and_then(|(_, bare)| self.lookup_profile(bare)))
    }

    /// [`PriceTable::lookup_exact_or_prefix`] of the id, else of the id without the prefix of
    /// a Bedrock cross-region inference profile.
    fn lookup_profile(&self, model: &str) -> Option<&ModelPrice> {
        self.lookup_exact_or_prefix(model).or_else(|| {
            INFERENCE_PROFILE_PREFIXES
                .iter()
                .find_map(|prefix| model.strip_prefix(prefix))
                .filter(|rest| rest.contains('.'))
                .and_then(|rest| self.lookup_exact_or_prefix(rest))
        })
    }

    fn lookup_exact_or_prefix(&self, model: &str) -> Option<&ModelPrice> {
        if let Some(p) = self.prices.get(model) {
            return Some(p);
        }
        self.prices
            .iter()
            .filter(|(key, _)| model.strip_prefix(key.as_str()).is_some_and(is_version_tag))
            .max_by_key(|(key, _)| key.len())
            .map(|(_, p)| p)
    }

    /// The cost of a call, where the model's price is known.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.lookup(model).map(|p| p.cost(usage))
    }

    /// Number of priced models.
    pub fn len(&self) -> usize {
        self.prices.len()
    }

    /// Whether no model is priced.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }
}

/// Whether what follows a table key in a model id only names a version of that model: a tag
/// after `:` or `@` (`llama3:8b`, `claude-opus-4@20250514`), or after `-` or `.` a date or
/// snapshot number (`-2024-08-06`, `-20250929`, `-0613`) or `latest`. Anything else (`-mini`,
/// `-pro`, `-6`, `.5`) is another model, which must not borrow this one's price.
fn is_version_tag(rest: &str) -> bool {
    let mut chars = rest.chars();
    match chars.next() {
        Some(':' | '@') => !chars.as_str().is_empty(),
        Some('-' | '.') => {
            let tag = chars.as_str();
            tag == "latest"
                || (tag.bytes().all(|b| b.is_ascii_digit() || b == b'-')
                    && tag.bytes().filter(u8::is_ascii_digit).count() >= 4)
        }
        _ => false,
    }
}

/// Output tokens a call is assumed to produce at most when its request sets no cap.
pub const OUTPUT_ESTIMATE_TOKENS: u32 = 4096;

/// A provider that fills `cost_usd` of each response from a [`PriceTable`], using the model
/// the response reports (or the requested or default model when it reports none). A cost the
/// inner provider already set is kept.
#[derive(Clone)]
pub struct PricedProvider {
    inner: Arc<dyn ChatProvider>,
    table: Arc<PriceTable>,
    charges: bool,
}

impl PricedProvider {
    /// Wraps `inner`, a paid API: a call to a model the table does not price is
    /// [`CallPrice::Unknown`].
    pub fn new(inner: Arc<dyn ChatProvider>, table: PriceTable) -> Self {
        Self { inner, table: Arc::new(table), charges: true }
    }

    /// Wraps `inner`, whose calls cost nothing (scripted, replayed, a local server): a model the
    /// table does not price is [`CallPrice::Free`]; one it prices is estimated and reported as
    /// usual (a replayed run spends what the recorded one did).
    pub fn free(inner: Arc<dyn ChatProvider>, table: PriceTable) -> Self {
        Self { inner, table: Arc::new(table), charges: false }
    }
}

#[async_trait]
impl ChatProvider for PricedProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    /// The request's input at about four characters a token, and its output cap (or
    /// [`OUTPUT_ESTIMATE_TOKENS`]) at the output price.
    fn price(&self, request: &ChatRequest) -> CallPrice {
        let model = if request.options.model.is_empty() { self.inner.default_model() } else { &request.options.model };
        let Some(price) = self.table.lookup(model) else {
            return if self.charges { CallPrice::Unknown { model: model.to_string() } } else { CallPrice::Free };
        };
        let chars: usize = request
            .messages
            .iter()
            .map(|m| m.content.len() + m.tool_calls.iter().map(|c| c.arguments.to_string().len()).sum::<usize>() + 16)
            .sum::<usize>()
            + request.tools.iter().map(|t| t.parameters.to_string().len() + t.description.len()).sum::<usize>();
        let usage = Usage {
            input_tokens: (chars / 4) as u64,
            output_tokens: u64::from(request.options.max_tokens.unwrap_or(OUTPUT_ESTIMATE_TOKENS)),
            ..Default::default()
        };
        CallPrice::Estimate(price.cost(&usage))
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let requested = if request.options.model.is_empty() {
            self.inner.default_model().to_string()
        } else {
            request.options.model.clone()
        };
        let table = self.table.clone();
        let stream = self.inner.stream(request).await?;
        Ok(stream
            .map(move |item| match item {
                Ok(StreamEvent::Completed(mut r)) => {
                    if r.cost_usd.is_none() {
                        let model = if r.model.is_empty() { requested.as_str() } else { r.model.as_str() };
                        r.cost_usd = table.cost(model, &r.usage);
                    }
                    Ok(StreamEvent::Completed(r))
                }
                other => other,
            })
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins_at_a_boundary() {
        let t = PriceTable::builtin();
        assert_eq!(t.lookup("gpt-4o-mini-2024-07-18"), t.lookup("gpt-4o-mini"));
        assert_ne!(t.lookup("gpt-4o-mini-2024-07-18"), t.lookup("gpt-4o"));
        assert_eq!(t.lookup("claude-sonnet-4-5-20250929"), t.lookup("claude-sonnet-4-5"));
        assert!(t.lookup("gpt-4oz").is_none());
    }

    #[test]
    fn a_different_model_sharing_a_prefix_does_not_borrow_its_price() {
        let t = PriceTable::builtin();
        assert!(t.lookup("claude-opus-4-6").is_none(), "a newer model is not priced as claude-opus-4");
        assert!(t.lookup("o3-pro").is_none(), "o3-pro is not priced as o3");
        assert!(t.lookup("gpt-4.1-2025-04-14").is_some_and(|p| Some(p) == t.lookup("gpt-4.1")));
        assert!(t.lookup("gpt-4o-latest").is_some_and(|p| Some(p) == t.lookup("gpt-4o")));
        assert!(t.lookup("claude-opus-4@20250514").is_some_and(|p| Some(p) == t.lookup("claude-opus-4")));
        assert!(t.lookup("gpt-5.5").is_none());
    }

    #[test]
    fn gemini_models_are_priced_and_their_previews_stay_unknown() {
        let t = PriceTable::builtin();
        assert_eq!(t.lookup("gemini-2.5-flash"), Some(&ModelPrice::new(0.30, 2.50, 0.03, 0.0)));
        assert_ne!(t.lookup("gemini-2.5-flash-lite"), t.lookup("gemini-2.5-flash"));
        assert!(t.lookup("gemini-2.5-flash-preview-09-2025").is_none(), "a preview is another model");
        assert!(t.lookup("gemini-3-pro-preview").is_none());
        assert_eq!(t.lookup("models/gemini-2.5-pro"), t.lookup("gemini-2.5-pro"));
    }

    #[test]
    fn bedrock_ids_are_priced_with_and_without_their_inference_profile() {
        let t = PriceTable::builtin();
        let sonnet = "anthropic.claude-sonnet-4-5-20250929-v1:0";
        let regional = Some(&ModelPrice::new(3.30, 16.50, 0.33, 4.125));
        assert_eq!(t.lookup(sonnet), regional);
        assert_eq!(t.lookup(&format!("us.{sonnet}")), regional);
        assert_eq!(t.lookup(&format!("eu.{sonnet}")), regional);
        assert_eq!(t.lookup(&format!("global.{sonnet}")), Some(&ModelPrice::new(3.0, 15.0, 0.30, 3.75)));
        let arn = format!("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.{sonnet}");
        assert_eq!(t.lookup(&arn), regional);
        let sonnet4 = t.lookup("anthropic.claude-sonnet-4-20250514-v1:0");
        assert!(sonnet4.is_some());
        assert_eq!(t.lookup("global.anthropic.claude-sonnet-4-20250514-v1:0"), sonnet4, "no premium before 4.5");
        assert_eq!(t.lookup("us.amazon.nova-lite-v1:0"), Some(&ModelPrice::new(0.06, 0.24, 0.015, 0.0)));
        assert!(t.lookup("amazon.nova-premier-v1:0").is_none(), "unlisted models stay unknown");
        assert!(t.lookup("meta.llama3-3-70b-instruct-v1:0").is_none());
        assert!(t.lookup("anthropic.claude-sonnet-4-5-20250929-v2:0").is_none(), "another revision");
    }

    #[test]
    fn a_vendor_prefix_is_ignored() {
        let t = PriceTable::builtin();
        assert_eq!(t.lookup("openai/gpt-4o"), t.lookup("gpt-4o"));
    }

    #[test]
    fn negative_prices_are_rejected() {
        let err = PriceTable::empty().extend_from_toml("[pricing.m]\ninput = -1\noutput = 1\n").unwrap_err();
        assert!(err.to_string().contains("`input`"), "{err}");
    }
}

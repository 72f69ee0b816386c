//! Model providers for Recursive.
//!
//! Every provider implements [`recursive_core::ChatProvider`]:
//!
//! - [`openai`] — OpenAI Chat Completions and every compatible server (Ollama, vLLM,
//!   LM Studio, OpenRouter, DeepSeek...), streaming or not;
//! - [`anthropic`] — the Anthropic Messages API, streaming or not;
//! - [`responses`] — OpenAI's Responses API (reasoning items carried across the tool loop),
//!   streaming or not;
//! - [`gemini`] — Google's Gemini API natively (thought signatures carried across the tool
//!   loop), streaming or not;
//! - [`bedrock`] — AWS Bedrock Runtime's Converse API (SigV4-signed with credentials from the
//!   standard AWS chain, or a Bedrock API key; Claude's signed reasoning carried across the
//!   tool loop), streaming (AWS event streams, framed by [`eventstream`]) or not;
//! - [`mock`] — the scripted provider of `recursive-core`;
//! - [`replay`] — record interactions to a cassette, and serve them offline;
//!
//! and wrappers that compose around any of them: [`retry`] (backoff with jitter,
//! `Retry-After`), [`pricing`] (USD cost per call). [`config`] builds the whole stack from
//! settings or from the environment.
//!
//! Each HTTP provider is a pair of pure transforms — a request to a wire body, and wire bytes
//! (a complete JSON answer, or a stream framed by [`sse`] or [`eventstream`]) back to a
//! response — around one HTTP call; the wire types live in each provider's `wire` module. The
//! call itself — client, headers, request signing, the [`recursive_core::ChatProvider`] impl,
//! stream driving — is one generic shell, [`shell::HttpProvider`], under all five; each
//! provider is its [`shell::WireApi`].

pub mod anthropic;
pub mod bedrock;
pub mod config;
pub mod error;
pub mod eventstream;
pub mod gemini;
pub mod http;
pub mod models;
pub mod openai;
pub mod pricing;
pub mod replay;
pub mod responses;
pub mod retry;
pub mod shell;
pub mod sse;

/// The scripted provider for tests and offline runs (defined in `recursive-core` so the core's
/// own tests can use it).
pub mod mock {
    pub use recursive_core::{MockProvider, MockReply};
}

pub use anthropic::{AnthropicConfig, AnthropicProvider};
pub use bedrock::{BedrockConfig, BedrockProvider};
pub use config::{ProviderKind, ProviderSettings, build_provider, detect_from_env};
pub use error::LlmError;
pub use gemini::{GeminiConfig, GeminiProvider};
pub use openai::{OpenAiConfig, OpenAiProvider};
pub use pricing::{ModelPrice, PriceTable, PricedProvider};
pub use replay::{RecordingProvider, ReplayProvider};
pub use responses::{ResponsesConfig, ResponsesProvider};
pub use retry::{RetryPolicy, RetryProvider};

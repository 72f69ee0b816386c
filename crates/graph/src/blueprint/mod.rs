//! Blueprints: the declarative, side-effect-free text form of a graph (TOML), for people and
//! models alike. The pipeline is parse → compile (located diagnostics, several at once) →
//! bind (every capability checked against an allowlist, and the limits against its cap, before
//! anything runs) → a runnable [`Graph`](crate::Graph). Also: the format's JSON Schema, canonical formatting, and a
//! Mermaid diagram.

pub mod bind;
pub mod compile;
pub mod diag;
pub mod format;
pub mod limits;
pub mod mermaid;

pub use bind::{Allowlist, ProviderLookup, Source, load};
pub use compile::{compile, format, parse};
pub use diag::{Diagnostic, Diagnostics};
pub use format::Blueprint;
pub use mermaid::mermaid;

/// The JSON Schema of the blueprint format (for editors and constrained generation).
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Blueprint)).unwrap_or_default()
}

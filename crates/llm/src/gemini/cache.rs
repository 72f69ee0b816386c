//! Explicit context caching of the Gemini API: a request's shared prefix — its system
//! instruction, tools and tool config, which a request naming a cache must leave out — is
//! stored once as a cached content (`POST {base}/v1beta/cachedContents`, with a TTL), and later
//! requests with the same prefix name it (`cachedContent: "cachedContents/…"`) and send only
//! the conversation. The cached tokens come back as `cachedContentTokenCount`, counted as cache
//! reads like implicit caching's.
//!
//! What is decided here, with no I/O: which prefixes are cached (`Caches::wants`: long
//! enough by a character estimate, and — in `auto` mode — seen a second time), their identity
//! (a 128-bit digest of the model and the prefix), one slot per prefix behind an async lock (so
//! concurrent calls with one prefix create one cache), and which errors mean a cache is gone
//! (`cache_gone`). The calls themselves are [`super::GeminiProvider`]'s.
//!
//! The conversation (`contents`) is never cached explicitly: it grows every turn, so each turn
//! would need a cache of its own; implicit caching covers it.
//!
//! **Storage is not priced.** The API bills a cache's storage by the hour for its TTL; that cost
//! is not per call, so it is not in any call's cost (only the cached tokens' reduced input rate
//! is). A cache is left to expire (no delete), so keep `cache_ttl_secs` short.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use recursive_core::ProviderError;
use serde::{Deserialize, Serialize};

/// How long a cache lives unless configured (the API's own default is an hour).
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(600);

/// The shortest prefix cached unless configured, in characters of its JSON: about 2,048 tokens
/// at four characters a token, the minimum the API takes for Gemini 2.5 models (newer ones ask
/// more; a cache the API refuses as too small is remembered and not asked for again).
pub const DEFAULT_CACHE_MIN_CHARS: usize = 8_192;

/// A cache this close to its expiry is not named by a new request; a new one is made instead.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// Longest wait for a cache to be made (calls with its prefix wait too); past it the call goes
/// uncached.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Prefixes remembered as seen once; past this the memory starts over.
const MAX_SEEN: usize = 4_096;

/// When the provider caches a request's prefix explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Never: implicit caching only.
    Off,
    /// When a long prefix is seen a second time by this provider.
    #[default]
    Auto,
    /// Whenever a prefix is long enough, from its first request.
    Always,
}

impl CacheMode {
    /// The name used in settings.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Off => "off",
            CacheMode::Auto => "auto",
            CacheMode::Always => "always",
        }
    }
}

/// Explicit caching settings of a Gemini provider.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheSettings {
    /// When to cache.
    pub mode: CacheMode,
    /// How long a cache lives.
    pub ttl: Duration,
    /// The shortest prefix cached, in characters of its JSON.
    pub min_chars: usize,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { mode: CacheMode::default(), ttl: DEFAULT_CACHE_TTL, min_chars: DEFAULT_CACHE_MIN_CHARS }
    }
}

/// The identity of a prefix: a digest of the model and the prefix's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key(u128);

impl Key {
    /// The key of `prefix` (its JSON) for `model`.
    pub(crate) fn of(model: &str, prefix: &[u8]) -> Self {
        let half = |salt: u8| {
            let mut h = DefaultHasher::new();
            (salt, model, prefix).hash(&mut h);
            h.finish()
        };
        Key((u128::from(half(1)) << 64) | u128::from(half(2)))
    }
}

/// What is known of one prefix's cache.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Slot {
    /// None made (or the last one is gone).
    #[default]
    Empty,
    /// A cache to name until shortly before `until`.
    Live {
        /// `cachedContents/{id}`.
        name: String,
        /// When it expires.
        until: Instant,
    },
    /// The API refused to cache this prefix (too small, model without caching...), or a cache
    /// made anew was gone again at once: it is sent uncached from now on.
    Refused,
}

impl Slot {
    /// The name to use now, if the cache is live and not about to expire.
    pub(crate) fn usable(&self, now: Instant) -> Option<&str> {
        match self {
            Slot::Live { name, until } if now + EXPIRY_MARGIN < *until => Some(name),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Registry {
    seen: HashSet<Key>,
    slots: HashMap<Key, Arc<tokio::sync::Mutex<Slot>>>,
}

/// The caches of one provider: prefixes seen, and a slot per cached prefix.
#[derive(Debug, Default)]
pub(crate) struct Caches {
    registry: Mutex<Registry>,
}

impl Caches {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a prefix of `chars` characters is served from a cache under `settings`: never
    /// when off, shorter than the minimum, or with a TTL too short to outlive a call (within
    /// twice the expiry margin, a cache would be remade for nearly every call); in `auto` mode
    /// from its second sighting (this one is counted), in `always` mode at once.
    pub(crate) fn wants(&self, settings: &CacheSettings, key: Key, chars: usize) -> bool {
        if settings.mode == CacheMode::Off || chars < settings.min_chars || settings.ttl <= 2 * EXPIRY_MARGIN {
            return false;
        }
        if settings.mode == CacheMode::Always {
            return true;
        }
        let mut registry = self.registry();
        if registry.slots.contains_key(&key) || registry.seen.contains(&key) {
            return true;
        }
        if registry.seen.len() >= MAX_SEEN {
            registry.seen.clear();
        }
        registry.seen.insert(key);
        false
    }

    /// The slot of a prefix (made empty on first use); lock it to read or make its cache.
    pub(crate) fn slot(&self, key: Key) -> Arc<tokio::sync::Mutex<Slot>> {
        self.registry().slots.entry(key).or_default().clone()
    }
}

/// Whether an error answering a request that named a cache says the cache is gone (expired,
/// deleted, not found) or cannot be used: a 400, 403 or 404 whose message speaks of the cache.
pub(crate) fn cache_gone(error: &ProviderError) -> bool {
    match error {
        ProviderError::Http { status: 400 | 403 | 404, message, .. } => message.to_ascii_lowercase().contains("cache"),
        _ => false,
    }
}

/// Whether a failure to create a cache is the API refusing this prefix (a client error other
/// than a rate limit), so it is not asked again; other failures may pass.
pub(crate) fn refused(error: &ProviderError) -> bool {
    matches!(error, ProviderError::Http { status, .. } if (400..500).contains(status) && *status != 429 && *status != 408)
}

/// The TTL as the API writes a duration (`"600s"`).
pub(crate) fn ttl_text(ttl: Duration) -> String {
    format!("{}s", ttl.as_secs().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, message: &str) -> ProviderError {
        ProviderError::Http { provider: "gemini".into(), status, message: message.into(), retry_after_secs: None }
    }

    #[test]
    fn auto_mode_caches_a_long_prefix_from_its_second_sighting_and_never_a_short_one() {
        let caches = Caches::default();
        let settings = CacheSettings { min_chars: 100, ..Default::default() };
        let key = Key::of("m", b"prefix");
        assert!(!caches.wants(&settings, key, 100), "first sighting");
        assert!(caches.wants(&settings, key, 100), "second sighting");
        let short = Key::of("m", b"short");
        assert!(!caches.wants(&settings, short, 99) && !caches.wants(&settings, short, 99));
        let always = CacheSettings { mode: CacheMode::Always, ..settings.clone() };
        assert!(caches.wants(&always, Key::of("m", b"new"), 100));
        let brief = CacheSettings { ttl: Duration::from_secs(60), ..always };
        assert!(!caches.wants(&brief, Key::of("m", b"new"), 100), "a TTL of a minute caches nothing");
        let off = CacheSettings { mode: CacheMode::Off, ..settings };
        assert!(!caches.wants(&off, key, 1_000_000));
    }

    #[test]
    fn keys_differ_by_model_and_prefix() {
        assert_eq!(Key::of("m", b"p"), Key::of("m", b"p"));
        assert_ne!(Key::of("m", b"p"), Key::of("n", b"p"));
        assert_ne!(Key::of("m", b"p"), Key::of("m", b"q"));
    }

    #[test]
    fn a_cache_about_to_expire_is_not_used() {
        let now = Instant::now();
        let live = Slot::Live { name: "cachedContents/a".into(), until: now + Duration::from_secs(600) };
        assert_eq!(live.usable(now), Some("cachedContents/a"));
        let ending = Slot::Live { name: "cachedContents/a".into(), until: now + Duration::from_secs(10) };
        assert_eq!(ending.usable(now), None);
        assert_eq!(Slot::Refused.usable(now), None);
    }

    #[test]
    fn errors_about_the_cache_mean_it_is_gone() {
        assert!(cache_gone(&http(403, "CachedContent not found (or permission denied)")));
        assert!(cache_gone(&http(404, "Cached content cachedContents/x not found.")));
        assert!(cache_gone(&http(400, "Cache content 123 is expired.")));
        assert!(!cache_gone(&http(403, "The caller does not have permission")));
        assert!(!cache_gone(&http(500, "cache backend down")));
        assert!(refused(&http(400, "Cached content is too small.")) && !refused(&http(429, "quota")));
        assert_eq!(ttl_text(Duration::from_secs(600)), "600s");
    }
}

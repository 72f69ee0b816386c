//! Retries with exponential backoff and jitter around any provider.
//!
//! A call is retried when it fails with a retryable error ([`ProviderError::is_retryable`]:
//! 429, 408, 5xx, timeouts, dropped connections, truncated streams), also after part of its
//! text was delivered: the request is sent again, and the text already shown is not shown
//! twice — the new answer's deltas are held back while they repeat what was shown, and only
//! what goes beyond it is delivered. If the new answer departs from what was shown, a line
//! saying the answer restarted is delivered, then the new answer whole. The final response is
//! always the new one. A `Retry-After` the server sent is honoured; each retry is announced
//! with [`StreamEvent::Retry`] before the wait, so the agent loop can report it.
//!
//! A rate limit (429) with a `Retry-After` is treated as what it is — the provider asking for
//! patience, not a fault: a refused call is retried beyond `max_retries` for as long as its waits add up to
//! no more than [`RetryPolicy::max_rate_limit_wait`], and while a model is rate limited the
//! provider holds every new call to it until the wait is over instead of sending it to be
//! refused too (a batch of sub-calls meeting a per-minute limit drains at the provider's rate
//! instead of failing after three tries).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use rand::Rng;
use recursive_core::{ChatProvider, ChatRequest, ChatStream, ProviderError, StreamEvent};

/// When and how long to wait before trying again.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// Wait before the first retry; doubled for each further one.
    pub base_delay: Duration,
    /// Cap on the computed wait.
    pub max_delay: Duration,
    /// Fraction (0.0–1.0) of each computed wait that is randomised: the wait is drawn from
    /// `[delay × (1 − jitter), delay]`. A server's `Retry-After` is used as is.
    pub jitter: f64,
    /// A `Retry-After` longer than this is not waited for: the error is returned at once.
    pub max_retry_after: Duration,
    /// How long in all one call may wait on rate limits (429) before it gives up; until then a
    /// rate-limited call is retried whatever `max_retries` says (0 still disables retrying).
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            jitter: 0.5,
            max_retry_after: Duration::from_secs(120),
            max_rate_limit_wait: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self { max_retries: 0, ..Self::default() }
    }

    /// The wait before retry number `attempt` (1-based) after `error`, or `None` if the error
    /// must not be retried (not retryable, attempts used up, or `Retry-After` too long).
    pub fn delay_for(&self, attempt: u32, error: &ProviderError) -> Option<Duration> {
        self.delay_after(attempt, Duration::ZERO, error)
    }

    /// As [`Self::delay_for`], for a call that has already waited `waited` on rate limits: a
    /// rate-limited call is retried past `max_retries` while its waits stay within
    /// `max_rate_limit_wait`.
    pub fn delay_after(&self, attempt: u32, waited: Duration, error: &ProviderError) -> Option<Duration> {
        if self.max_retries == 0 || !error.is_retryable() {
            return None;
        }
        // Only a rate limit that says how long to wait is waited out past `max_retries`: a 429
        // without `Retry-After` may be for good (a spent quota) and keeps the count.
        let limited = is_rate_limit(error) && matches!(error, ProviderError::Http { retry_after_secs: Some(_), .. });
        if attempt > self.max_retries && !limited {
            return None;
        }
        let wait = self.wait_for(attempt, error)?;
        if limited && attempt > self.max_retries && waited.saturating_add(wait) > self.max_rate_limit_wait {
            return None;
        }
        Some(wait)
    }

    /// The server's `Retry-After` (if not beyond `max_retry_after`), else the backoff.
    fn wait_for(&self, attempt: u32, error: &ProviderError) -> Option<Duration> {
        if let ProviderError::Http { retry_after_secs: Some(secs), .. } = error {
            let wait = Duration::try_from_secs_f64(*secs).ok()?;
            return (wait <= self.max_retry_after).then_some(wait);
        }
        let exp = self.base_delay.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
        let capped = exp.min(self.max_delay);
        let jitter = self.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return Some(capped);
        }
        let factor = 1.0 - jitter * rand::rng().random::<f64>();
        Some(capped.mul_f64(factor))
    }
}

/// Whether the provider refused the call for its rate limit.
fn is_rate_limit(error: &ProviderError) -> bool {
    matches!(error, ProviderError::Http { status: 429, .. })
}

/// Until when each model is rate limited: shared by every call through one provider (and its
/// clones), so that a call does not go out while the provider has asked for a wait.
#[derive(Default)]
struct Throttle {
    until: Mutex<HashMap<String, Instant>>,
}

impl Throttle {
    /// Holds the model's calls for `wait` from now (a longer hold already set stays).
    fn hold(&self, model: &str, wait: Duration) {
        let Ok(mut until) = self.until.lock() else { return };
        let end = Instant::now() + wait;
        let slot = until.entry(model.to_string()).or_insert(end);
        *slot = (*slot).max(end);
    }

    /// Waits until the model is not held.
    async fn pass(&self, model: &str) {
        loop {
            let end = match self.until.lock() {
                Ok(until) => until.get(model).copied(),
                Err(_) => None,
            };
            match end {
                Some(end) if end > Instant::now() => tokio::time::sleep_until(end.into()).await,
                _ => return,
            }
        }
    }
}

/// A provider that retries another one according to a [`RetryPolicy`].
#[derive(Clone)]
pub struct RetryProvider {
    inner: Arc<dyn ChatProvider>,
    policy: RetryPolicy,
    throttle: Arc<Throttle>,
}

impl RetryProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ChatProvider>, policy: RetryPolicy) -> Self {
        Self { inner, policy, throttle: Arc::default() }
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

struct State {
    inner: Arc<dyn ChatProvider>,
    policy: RetryPolicy,
    throttle: Arc<Throttle>,
    /// The model the throttle holds calls of (the provider's default for an unnamed model).
    model: String,
    request: ChatRequest,
    current: Option<ChatStream>,
    /// Retries announced so far.
    retries: u32,
    /// Time spent waiting on rate limits so far.
    limited_for: Duration,
    /// Wait before the next attempt.
    wait: Option<Duration>,
    /// The text delivered to the caller so far.
    shown: String,
    /// After a retry: the new answer's text so far, held back while it repeats `shown`.
    replay: Option<String>,
    done: bool,
}

/// Delivered when a retried answer departs from the text already shown.
pub const RESTARTED_NOTICE: &str = "\n[the connection dropped and the answer was restarted]\n";

impl State {
    /// Decides what to do with a failure: announce a retry, or give up with the error.
    fn on_error(&mut self, error: ProviderError) -> Result<StreamEvent, ProviderError> {
        self.current = None;
        let next = self.retries + 1;
        match self.policy.delay_after(next, self.limited_for, &error) {
            Some(delay) => {
                self.retries = next;
                if is_rate_limit(&error) {
                    self.limited_for += delay;
                    self.throttle.hold(&self.model, delay);
                }
                self.wait = Some(delay);
                if !self.shown.is_empty() {
                    self.replay = Some(String::new());
                }
                tracing::warn!(provider = self.inner.name(), attempt = next, ?delay, "retrying: {error}");
                Ok(StreamEvent::Retry { attempt: next, delay_ms: delay.as_millis() as u64, reason: error.to_string() })
            }
            None => {
                self.done = true;
                Err(error)
            }
        }
    }

    /// A delta of the current answer: what of it to deliver (`None`: held back).
    fn on_delta(&mut self, delta: String) -> Option<String> {
        let Some(fresh) = self.replay.as_mut() else {
            self.shown.push_str(&delta);
            return Some(delta);
        };
        fresh.push_str(&delta);
        let common = fresh.len().min(self.shown.len());
        let out = if fresh.as_bytes()[..common] != self.shown.as_bytes()[..common] {
            Some(format!("{RESTARTED_NOTICE}{fresh}"))
        } else if fresh.len() > self.shown.len() {
            // Byte-equal prefixes end on the same character boundary.
            Some(fresh[self.shown.len()..].to_string())
        } else {
            return None;
        };
        self.shown = std::mem::take(fresh);
        self.replay = None;
        out
    }
}

#[async_trait]
impl ChatProvider for RetryProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let state = State {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
            throttle: self.throttle.clone(),
            model: match request.options.model.as_str() {
                "" => self.inner.default_model().to_string(),
                named => named.to_string(),
            },
            request,
            current: None,
            retries: 0,
            limited_for: Duration::ZERO,
            wait: None,
            shown: String::new(),
            replay: None,
            done: false,
        };
        let stream = futures::stream::unfold(state, |mut st| async move {
            loop {
                if st.done {
                    return None;
                }
                if let Some(wait) = st.wait.take() {
                    tokio::time::sleep(wait).await;
                }
                let Some(current) = st.current.as_mut() else {
                    st.throttle.pass(&st.model).await;
                    match st.inner.stream(st.request.clone()).await {
                        Ok(s) => st.current = Some(s),
                        Err(e) => {
                            let item = st.on_error(e);
                            return Some((item, st));
                        }
                    }
                    continue;
                };
                match current.next().await {
                    Some(Ok(StreamEvent::TextDelta(delta))) => match st.on_delta(delta) {
                        Some(text) => return Some((Ok(StreamEvent::TextDelta(text)), st)),
                        None => continue,
                    },
                    Some(Ok(event)) => {
                        if matches!(event, StreamEvent::Completed(_)) {
                            st.done = true;
                        }
                        return Some((Ok(event), st));
                    }
                    Some(Err(e)) => {
                        let item = st.on_error(e);
                        return Some((item, st));
                    }
                    None => return None,
                }
            }
        });
        Ok(stream.boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, retry_after_secs: Option<f64>) -> ProviderError {
        ProviderError::Http { provider: "p".into(), status, message: "m".into(), retry_after_secs }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy { base_delay: Duration::from_millis(100), jitter: 0.0, ..Default::default() }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = RetryPolicy { max_retries: 10, max_delay: Duration::from_millis(350), ..policy() };
        let delays: Vec<_> = (1..=4).map(|a| p.delay_for(a, &http(500, None)).unwrap().as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 350, 350]);
    }

    #[test]
    fn retry_after_wins_over_backoff() {
        assert_eq!(policy().delay_for(1, &http(429, Some(2.5))), Some(Duration::from_millis(2500)));
    }

    #[test]
    fn a_retry_after_beyond_the_cap_is_not_waited_for() {
        assert_eq!(policy().delay_for(1, &http(429, Some(3600.0))), None);
    }

    #[test]
    fn client_errors_and_spent_attempts_are_not_retried() {
        assert_eq!(policy().delay_for(1, &http(401, None)), None);
        assert_eq!(policy().delay_for(4, &http(500, None)), None);
    }

    #[test]
    fn bad_request_unauthorized_and_not_found_are_never_retried() {
        let p = RetryPolicy { max_retries: 10, ..policy() };
        for status in [400, 401, 403, 404, 422] {
            assert_eq!(p.delay_for(1, &http(status, None)), None, "{status}");
            // Not even when the server asks to be retried later.
            assert_eq!(p.delay_for(1, &http(status, Some(1.0))), None, "{status} with Retry-After");
        }
        for status in [408, 429, 500, 502, 503, 529] {
            assert!(p.delay_for(1, &http(status, None)).is_some(), "{status}");
        }
    }

    #[test]
    fn rate_limits_are_retried_past_the_count_until_the_wait_budget_is_spent() {
        let p = RetryPolicy { max_retries: 2, max_rate_limit_wait: Duration::from_secs(10), ..policy() };
        let limited = http(429, Some(1.0));
        assert_eq!(p.delay_after(7, Duration::from_secs(8), &limited), Some(Duration::from_secs(1)));
        assert_eq!(p.delay_after(3, Duration::ZERO, &http(429, None)), None, "a 429 without a wait keeps the count");
        assert_eq!(p.delay_after(7, Duration::from_millis(9500), &limited), None);
        assert_eq!(p.delay_after(3, Duration::ZERO, &http(503, None)), None, "other errors keep the count");
        let off = RetryPolicy { max_retries: 0, ..p };
        assert_eq!(off.delay_after(1, Duration::ZERO, &limited), None, "0 retries is no retrying");
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let p = RetryPolicy { jitter: 0.5, ..policy() };
        for _ in 0..50 {
            let d = p.delay_for(1, &http(503, None)).unwrap().as_millis();
            assert!((50..=100).contains(&d), "{d}");
        }
    }
}

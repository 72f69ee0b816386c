//! Waiting for a condition instead of sleeping a fixed time: [`wait_until`] polls a condition,
//! [`eventually`] an asynchronous probe (a store, a server) until it yields a value; both fail
//! with the caller's location when nothing comes in time.

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

/// How often the condition is polled.
const POLL: Duration = Duration::from_millis(10);

/// Polls `condition` every 10 ms until it holds; panics (naming the caller's file and line)
/// if it still does not hold after `timeout`. The condition is checked once more at the
/// deadline, so a slow machine only makes the wait longer, never the result different.
///
/// ```no_run
/// # async fn demo(tool: recursive_testkit::SlowTool) {
/// use std::time::Duration;
/// recursive_testkit::wait_until(Duration::from_secs(5), || tool.started() == 1).await;
/// # }
/// ```
#[track_caller]
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> impl Future<Output = ()> {
    let failed = "wait_until: the condition still did not hold";
    poll(Location::caller(), failed, timeout, move || std::future::ready(condition().then_some(())))
}

/// Polls `probe` every 10 ms until it yields a value, and returns it; panics (naming the
/// caller's file and line) if it still yields `None` after `timeout`. For conditions that take an
/// `await` to check: a lease that expires, a job a store puts back, a server's answer.
///
/// ```no_run
/// # async fn lease_taken() -> bool { true }
/// # async fn example() {
/// use std::time::Duration;
/// recursive_testkit::eventually(Duration::from_secs(5), || async { lease_taken().await.then_some(()) }).await;
/// # }
/// ```
#[track_caller]
pub fn eventually<T, F, Fut>(timeout: Duration, probe: F) -> impl Future<Output = T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll(Location::caller(), "eventually: nothing came", timeout, probe)
}

/// Polls `probe` every [`POLL`] until it yields a value (checked once more at the deadline);
/// past `timeout`, panics with `failed` and `caller`.
async fn poll<T, Fut: Future<Output = Option<T>>>(
    caller: &'static Location<'static>,
    failed: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Fut,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut polls = 0u32;
    loop {
        polls += 1;
        if let Some(value) = probe().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{failed} after {timeout:?} ({polls} checks), waiting at {caller}");
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_once_the_condition_holds() {
        let count = Arc::new(AtomicU32::new(0));
        let bump = count.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                bump.fetch_add(1, Ordering::SeqCst);
            }
        });
        wait_until(Duration::from_secs(10), || count.load(Ordering::SeqCst) == 3).await;
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn eventually_returns_the_first_value_the_probe_yields() {
        let count = Arc::new(AtomicU32::new(0));
        let probes = count.clone();
        let got = eventually(Duration::from_secs(10), || {
            let n = probes.fetch_add(1, Ordering::SeqCst) + 1;
            async move { (n >= 3).then_some(n) }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    async fn eventually_fails_with_the_caller_location_on_timeout() {
        let waited = tokio::spawn(eventually(Duration::from_millis(30), || async { None::<()> })).await;
        let panic = waited.unwrap_err().into_panic();
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("nothing came after 30ms"), "{message}");
        assert!(message.contains("wait.rs"), "{message}");
    }

    #[tokio::test]
    async fn fails_with_the_caller_location_on_timeout() {
        let waited = tokio::spawn(wait_until(Duration::from_millis(30), || false)).await;
        let panic = waited.unwrap_err().into_panic();
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("did not hold after 30ms"), "{message}");
        assert!(message.contains("wait.rs"), "{message}");
    }
}

//! One runner per thread: running a thread takes a lease on it in the store (see
//! [`Checkpointer::take_lease`]), renewed while the run goes and given up at its end. A second
//! runner is refused (or waits); a lease whose holder died expires, and the next runner takes
//! it over and resumes from the last checkpoint.

use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::{Checkpointer, StoreError};

/// How long a lease lasts without renewal (a crashed holder blocks the thread this long).
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often a waiting runner asks again.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// Why a lease could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another runner holds it.
    #[error(
        "thread `{thread}` is being run by another process ({holder}); wait for it to end (or pass --wait), or \
         use another thread"
    )]
    Held {
        /// The thread.
        thread: String,
        /// Who holds it.
        holder: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A lease held on a thread, renewed in the background until released or dropped.
pub struct Lease {
    store: Arc<dyn Checkpointer>,
    thread: String,
    holder: String,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// Takes the lease on `thread`; with `wait`, waits for another holder to end (or its lease
    /// to expire) instead of failing.
    pub async fn take(store: Arc<dyn Checkpointer>, thread: &str, wait: bool) -> Result<Lease, LeaseError> {
        Self::take_for(store, thread, wait, LEASE_TTL).await
    }

    /// [`Lease::take`] with a lease of `ttl` (renewed every third of it): how long a crashed
    /// holder blocks the thread.
    pub async fn take_for(
        store: Arc<dyn Checkpointer>,
        thread: &str,
        wait: bool,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        let holder = format!("pid {} ({})", std::process::id(), uuid::Uuid::now_v7());
        loop {
            match store.take_lease(thread, &holder, ttl).await? {
                None => break,
                Some(other) if !wait => return Err(LeaseError::Held { thread: thread.into(), holder: other }),
                Some(_) => tokio::time::sleep(WAIT_POLL).await,
            }
        }
        let heartbeat = {
            let (store, thread, holder) = (store.clone(), thread.to_string(), holder.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    let _ = store.take_lease(&thread, &holder, ttl).await;
                }
            })
        };
        Ok(Lease { store, thread: thread.into(), holder, heartbeat })
    }

    /// Gives the lease up.
    pub async fn release(self) {
        self.heartbeat.abort();
        let _ = self.store.release_lease(&self.thread, &self.holder).await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_runner_is_refused_until_the_first_releases() {
        let store: Arc<dyn Checkpointer> = Arc::new(crate::MemoryCheckpointer::new());
        let first = Lease::take(store.clone(), "t", false).await.unwrap();
        let refused = Lease::take(store.clone(), "t", false).await.err().unwrap();
        assert!(matches!(refused, LeaseError::Held { .. }), "{refused}");
        let waiting = tokio::spawn({
            let store = store.clone();
            async move { Lease::take(store, "t", true).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a waiting runner waits");
        first.release().await;
        waiting.await.unwrap().unwrap();
    }
}

//! The one way a durable run is run, whatever it is (a graph thread, an RLM run, a served run, a
//! chat session, a goal pursuit) and whoever runs it (a command, serve, a worker): take the run's
//! lease ([`crate::lease`]: one runner, fenced writes), open its journal ([`crate::journal`]:
//! spend written ahead, finished calls read back), run, end the journal when the run ended whole,
//! release the lease. Hosts differ only in what they run between the opening and the closing.
//!
//! A run whose scope is already journaled (a graph run by a tool inside a durable RLM) keeps the
//! enclosing journal and still takes its own lease.

use std::sync::Arc;
use std::time::Duration;

use recursive_core::RunScope;
use recursive_core::journal::DurableRun;

use crate::checkpoint::{Checkpointer, StoreError};
use crate::lease::{LEASE_TTL, Lease, LeaseError};

/// Which run, and how its runner holds it.
#[derive(Debug, Clone)]
pub struct DurableKey {
    /// The lease's key: the run's thread (a graph thread, an RLM run's key, `session-ID`, …).
    pub lease: String,
    /// The journal's key (see [`crate::journal::thread_key`], [`crate::journal::run_key`]).
    pub journal: String,
    /// Wait for another runner to end instead of being refused.
    pub wait: bool,
    /// How long the lease lasts without renewal (how long a crashed holder on another machine
    /// blocks the run).
    pub ttl: Duration,
}

impl DurableKey {
    /// The run `lease`, journaled under `journal`, refused while another runner holds it.
    pub fn new(lease: impl Into<String>, journal: impl Into<String>) -> Self {
        Self { lease: lease.into(), journal: journal.into(), wait: false, ttl: LEASE_TTL }
    }

    /// A graph thread (`graph`, serve's threads, workers).
    pub fn thread(thread: &str) -> Self {
        Self::new(thread, crate::journal::thread_key(thread))
    }

    /// A served run.
    pub fn served(run: &str) -> Self {
        Self::new(crate::journal::run_key(run), crate::journal::run_key(run))
    }

    /// A run whose lease and journal share its key (an RLM run, a session, a goal pursuit).
    pub fn own(key: &str) -> Self {
        Self::new(key, key)
    }

    /// Waits for another runner instead of failing.
    pub fn waiting(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    /// With a lease of `ttl`.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
}

/// A run this process holds (its lease taken), before its journal is open.
#[derive(Debug)]
pub struct Runner {
    lease: Lease,
    journal: String,
}

impl Runner {
    /// Takes the run's lease in `store` (refused, or waiting, while another runner lives).
    pub async fn take(store: Arc<dyn Checkpointer>, key: &DurableKey) -> Result<Runner, LeaseError> {
        let lease = Lease::take_for(store, &key.lease, key.wait, key.ttl).await?;
        Ok(Runner { lease, journal: key.journal.clone() })
    }

    /// The store as this runner writes to it (fenced by the lease).
    pub fn store(&self) -> Arc<dyn Checkpointer> {
        self.lease.store()
    }

    /// Opens the run's journal in `scope`: the scope it runs in (journaled, what earlier
    /// processes spent restored). On an error the lease is given up.
    pub async fn open(self, scope: &RunScope) -> Result<HeldRun, StoreError> {
        match crate::journal::durable(self.lease.store(), &self.journal, scope).await {
            Ok(journal) => Ok(HeldRun { lease: self.lease, journal: Arc::new(journal) }),
            Err(e) => {
                self.lease.release().await;
                Err(e)
            }
        }
    }

    /// The key its journal is kept under.
    pub fn journal_key(&self) -> &str {
        &self.journal
    }

    /// Gives the run up without running it.
    pub async fn release(self) {
        self.lease.release().await;
    }
}

/// A durable run being run: held by this process, journaled.
#[derive(Debug)]
pub struct HeldRun {
    lease: Lease,
    journal: Arc<DurableRun>,
}

impl HeldRun {
    /// Takes the run and opens its journal ([`Runner::take`], [`Runner::open`]).
    pub async fn open(store: Arc<dyn Checkpointer>, key: &DurableKey, scope: &RunScope) -> Result<HeldRun, LeaseError> {
        Ok(Runner::take(store, key).await?.open(scope).await?)
    }

    /// The scope to run in.
    pub fn scope(&self) -> &RunScope {
        &self.journal.scope
    }

    /// The store as this runner writes to it (fenced by the lease).
    pub fn store(&self) -> Arc<dyn Checkpointer> {
        self.lease.store()
    }

    /// The run's journal, for a run made of several parts each ending it (a chat's turns:
    /// [`DurableRun::attach`], [`DurableRun::end`]) while this process holds the run.
    pub fn journal(&self) -> Arc<DurableRun> {
        self.journal.clone()
    }

    /// Whether earlier processes left records (this is a resume).
    pub fn resumed(&self) -> bool {
        self.journal.resumed()
    }

    /// Ends the hold: with `ended` (the run ended whole, not stopped to be taken up again) its
    /// journal ends too — while this runner still holds the run — so a later run of the key
    /// starts afresh; the lease is released either way. An error ending the journal is returned
    /// after the release.
    pub async fn close(self, ended: bool) -> Result<(), String> {
        // A runner that lost the run to another (it stalled past its lease) must not end the
        // journal its successor goes on writing.
        let ending = if ended && self.lease.still_held().await { self.journal.end().await } else { Ok(()) };
        self.lease.release().await;
        ending
    }
}

/// Runs `body` as the durable run `key` of `store` ([`HeldRun::open`]); `body` answers its
/// result and whether the run ended whole ([`HeldRun::close`]). A failure to end the journal is
/// reported in the run's scope as an error event (the run's own outcome stands).
pub async fn run_durable<T>(
    store: Arc<dyn Checkpointer>,
    key: &DurableKey,
    scope: &RunScope,
    body: impl AsyncFnOnce(&HeldRun) -> (T, bool),
) -> Result<T, LeaseError> {
    let held = HeldRun::open(store, key, scope).await?;
    let (value, ended) = body(&held).await;
    let reporter = held.scope().clone();
    if let Err(message) = held.close(ended).await {
        reporter.emit(0, recursive_core::EventKind::Error { message: format!("ending the run's journal: {message}") });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::MemoryCheckpointer;
    use recursive_core::spend::SpendRecord;

    #[tokio::test]
    async fn a_runner_that_lost_the_run_does_not_end_its_successors_journal() {
        let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
        let key = DurableKey::own("run-1");
        let stale = HeldRun::open(store.clone(), &key, &RunScope::detached("a")).await.unwrap();
        stale.scope().journal().unwrap().ledger().record(&SpendRecord::hold("c1", 0.5)).await.unwrap();
        // Another runner takes the run over (this one stalled past its lease).
        let holder = store.lease_holder("run-1").await.unwrap().unwrap();
        store.release_lease("run-1", &holder).await.unwrap();
        store.take_lease("run-1", "successor", Duration::from_secs(60)).await.unwrap();
        stale.close(true).await.unwrap();
        store.release_lease("run-1", "successor").await.unwrap();
        let next = HeldRun::open(store, &key, &RunScope::detached("b")).await.unwrap();
        assert!(next.resumed(), "the journal was not ended by the runner that lost it");
    }

    #[tokio::test]
    async fn a_second_runner_is_refused_while_the_first_holds_the_run() {
        let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
        let key = DurableKey::own("session-1");
        let first = HeldRun::open(store.clone(), &key, &RunScope::detached("a")).await.unwrap();
        let second = HeldRun::open(store.clone(), &key, &RunScope::detached("b")).await;
        assert!(matches!(second, Err(LeaseError::Held { .. })));
        first.close(false).await.unwrap();
        assert!(HeldRun::open(store, &key, &RunScope::detached("c")).await.is_ok(), "free once let go");
    }

    #[tokio::test]
    async fn a_run_that_did_not_end_whole_resumes_with_its_spend_and_one_that_did_starts_afresh() {
        let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
        let key = DurableKey::thread("t");
        let spent = run_durable(store.clone(), &key, &RunScope::detached("r"), async |held: &HeldRun| {
            let ledger = held.scope().journal().unwrap().ledger();
            ledger.record(&SpendRecord::hold("call-1", 0.5)).await.unwrap();
            (held.resumed(), false)
        })
        .await
        .unwrap();
        assert!(!spent, "the first run is new");
        let again = HeldRun::open(store.clone(), &key, &RunScope::detached("r")).await.unwrap();
        assert!(again.resumed());
        assert_eq!(again.scope().cost_usd(), 0.5, "the hold of the call in flight counts");
        again.close(true).await.unwrap();
        let fresh = HeldRun::open(store, &key, &RunScope::detached("r")).await.unwrap();
        assert!(!fresh.resumed(), "a run that ended whole leaves nothing to resume");
    }
}

//! One runner per thread: running a thread takes a lease on it in the store (see
//! [`Checkpointer::take_lease`]), renewed while the run goes and given up at its end. A second
//! runner is refused (or waits); a lease whose holder died expires, and the next runner takes
//! it over and resumes from the last checkpoint.
//!
//! A holder that died on this machine (SIGKILL, a crash) is seen at once: a holder names its
//! process and where it runs (the boot and the PID namespace), and a runner in the same place
//! whose holder's process is gone takes the lease over without waiting for it to expire. One
//! that is stopped on this machine (SIGSTOP, Ctrl-Z) keeps the lease however long it stays
//! stopped, expired or not, as a lock would: it goes on where it was once continued.
//!
//! A holder that only stalled (a paused process, a machine asleep) past its lease may wake up
//! after another runner took the thread over. Its writes are fenced: the holder writes through
//! [`Lease::store`], which renews the lease in the same store before every write and refuses
//! the write ([`StoreError::LeaseLost`]) when another runner holds it — so a stale runner
//! stops at its next checkpoint instead of writing over its successor's work. The renewal and
//! the write are two statements: a holder stopped between them for longer than a whole lease
//! could still make that one write (a window of one statement, against the whole stall before).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::checkpoint::{Checkpoint, Checkpointer, Listed, PendingWrite, StoreError, ThreadInfo};

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

/// A lease held on a thread, renewed in the background until released or dropped. A lease
/// dropped without [`Lease::release`] (an early error) is given up on a task of its own.
pub struct Lease {
    store: Arc<dyn Checkpointer>,
    thread: String,
    holder: String,
    ttl: Duration,
    heartbeat: tokio::task::JoinHandle<()>,
    released: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("thread", &self.thread).field("holder", &self.holder).finish_non_exhaustive()
    }
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
        let holder = holder_name();
        loop {
            // A holder stopped on this machine (Ctrl-Z) keeps its run, as a lock would, however
            // long it is stopped: it goes on where it was when it is continued.
            if let Some(stopped) = store.lease_holder(thread).await?.filter(|h| stopped_here(h)) {
                if !wait {
                    return Err(LeaseError::Held { thread: thread.into(), holder: format!("{stopped}, stopped") });
                }
                tokio::time::sleep(WAIT_POLL).await;
                continue;
            }
            match store.take_lease(thread, &holder, ttl).await? {
                None => break,
                Some(other) if died_here(&other) => store.release_lease(thread, &other).await?,
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
        Ok(Lease { store, thread: thread.into(), holder, ttl, heartbeat, released: false })
    }

    /// The store as this holder must write to it: every write renews the lease first and is
    /// refused when another runner holds it (see the module docs). Reads go straight through.
    pub fn store(&self) -> Arc<dyn Checkpointer> {
        Arc::new(Fenced {
            store: self.store.clone(),
            thread: self.thread.clone(),
            holder: self.holder.clone(),
            ttl: self.ttl,
        })
    }

    /// Whether this holder still holds the lease (renewing it): false once another runner took
    /// the run over (this one stalled past its lease) or the store cannot say.
    pub async fn still_held(&self) -> bool {
        matches!(self.store.take_lease(&self.thread, &self.holder, self.ttl).await, Ok(None))
    }

    /// Gives the lease up.
    pub async fn release(mut self) {
        self.heartbeat.abort();
        let _ = self.store.release_lease(&self.thread, &self.holder).await;
        self.released = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if self.released {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (store, thread, holder) = (self.store.clone(), self.thread.clone(), self.holder.clone());
            runtime.spawn(async move {
                let _ = store.release_lease(&thread, &holder).await;
            });
        }
    }
}

/// Where this process runs, as a holder's suffix: ` in BOOT/PIDNS` (the kernel's boot id and the
/// PID namespace), so that a holder's PID means the same process to a reader in the same place.
fn place() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let pidns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(format!(" in {}/{}", boot.trim(), pidns.display()))
}

/// Whether `holder` is a process of this place that is gone (or a zombie, or its PID now
/// another process's). Only a process the kernel says does not exist counts: one this user may
/// not see or signal is alive.
fn died_here(holder: &str) -> bool {
    let Some(pid) = pid_here(holder) else { return false };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Err(nix::errno::Errno::ESRCH) => true,
        Err(_) => false,
        // It exists: dead all the same if it is a zombie, or another process now has its PID.
        Ok(()) => process_stat(pid)
            .is_some_and(|(state, start)| state == 'Z' || since(holder).is_some_and(|s| Some(s) != start.as_deref())),
    }
}

/// Whether `holder` is a process of this place that is stopped (SIGSTOP, Ctrl-Z) — alive, and
/// going on where it was once continued.
fn stopped_here(holder: &str) -> bool {
    let Some(pid) = pid_here(holder) else { return false };
    process_stat(pid).is_some_and(|(state, start)| {
        matches!(state, 'T' | 't') && since(holder).is_none_or(|s| Some(s) == start.as_deref())
    })
}

/// The PID of `holder` when it names a process of this place.
fn pid_here(holder: &str) -> Option<i32> {
    let here = place()?;
    let pid = holder.strip_prefix("pid ")?.split(' ').next()?.parse::<i32>().ok()?;
    (pid > 0 && holder.ends_with(&here)).then_some(pid)
}

/// When the holder's process started (`since TICKS` in its name), telling it from a later
/// process that reused its PID.
fn since(holder: &str) -> Option<&str> {
    holder.split_once(" since ")?.1.split(' ').next()
}

/// A process's state letter and start time (clock ticks after boot), from `/proc/PID/stat`:
/// the fields after the command name, the state third and the start time twenty-second.
fn process_stat(pid: i32) -> Option<(char, Option<String>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let state = rest.chars().next()?;
    Some((state, rest.split(' ').nth(19).map(str::to_string)))
}

/// This process's holder name: its PID, a unique id, when it started and where it runs.
fn holder_name() -> String {
    let pid = std::process::id();
    let started = i32::try_from(pid).ok().and_then(process_stat).and_then(|(_, start)| start);
    let since = started.map(|s| format!(" since {s}")).unwrap_or_default();
    format!("pid {pid} ({}){since}{}", uuid::Uuid::now_v7(), place().unwrap_or_default())
}

/// A store whose writes are fenced by a lease (see [`Lease::store`]).
struct Fenced {
    store: Arc<dyn Checkpointer>,
    thread: String,
    holder: String,
    ttl: Duration,
}

impl Fenced {
    /// Renews the lease, or says who took it over. Renewed for a whole lease, the holder keeps
    /// it through the write that follows.
    async fn hold(&self) -> Result<(), StoreError> {
        match self.store.take_lease(&self.thread, &self.holder, self.ttl).await? {
            None => Ok(()),
            Some(holder) => Err(StoreError::LeaseLost { thread: self.thread.clone(), holder }),
        }
    }
}

#[async_trait]
impl Checkpointer for Fenced {
    async fn put_thread(&self, info: &ThreadInfo) -> Result<(), StoreError> {
        self.hold().await?;
        self.store.put_thread(info).await
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        self.store.thread(thread).await
    }

    async fn threads(&self) -> Result<Vec<Listed>, StoreError> {
        self.store.threads().await
    }

    async fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.hold().await?;
        self.store.put(checkpoint).await
    }

    async fn put_write(&self, thread: &str, checkpoint: &str, write: &PendingWrite) -> Result<(), StoreError> {
        self.hold().await?;
        self.store.put_write(thread, checkpoint, write).await
    }

    async fn prune(&self, thread: &str, ns: &str, keep: &str) -> Result<(), StoreError> {
        self.hold().await?;
        self.store.prune(thread, ns, keep).await
    }

    async fn writes(&self, thread: &str, checkpoint: &str) -> Result<Vec<PendingWrite>, StoreError> {
        self.store.writes(thread, checkpoint).await
    }

    async fn latest(&self, thread: &str, ns: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.store.latest(thread, ns).await
    }

    async fn get(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.store.get(thread, id).await
    }

    async fn list(&self, thread: &str, ns: &str) -> Result<Vec<Checkpoint>, StoreError> {
        self.store.list(thread, ns).await
    }

    async fn take_lease(&self, thread: &str, holder: &str, ttl: Duration) -> Result<Option<String>, StoreError> {
        self.store.take_lease(thread, holder, ttl).await
    }

    async fn release_lease(&self, thread: &str, holder: &str) -> Result<(), StoreError> {
        self.store.release_lease(thread, holder).await
    }

    async fn lease_holder(&self, thread: &str) -> Result<Option<String>, StoreError> {
        self.store.lease_holder(thread).await
    }

    /// Not fenced: a runner that lost its lease while a call was in flight records what that
    /// call really cost, which the run's spend must count.
    async fn append_journal(&self, key: &str, body: &str) -> Result<(), StoreError> {
        self.store.append_journal(key, body).await
    }

    async fn journal(&self, key: &str) -> Result<Vec<String>, StoreError> {
        self.store.journal(key).await
    }

    async fn delete_journal(&self, key: &str) -> Result<(), StoreError> {
        self.hold().await?;
        self.store.delete_journal(key).await
    }

    /// Not fenced, as [`Checkpointer::append_journal`] is not.
    fn local_records(&self, key: &str) -> Option<Arc<dyn recursive_core::StoredRecords>> {
        self.store.local_records(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_holder_whose_process_died_here_is_taken_over_at_once() {
        let store: Arc<dyn Checkpointer> = Arc::new(crate::MemoryCheckpointer::new());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let here = place().unwrap();
        store.take_lease("t", &format!("pid {dead} (x){here}"), LEASE_TTL).await.unwrap();
        let taken = tokio::time::timeout(Duration::from_secs(5), Lease::take(store.clone(), "t", false)).await;
        assert!(taken.unwrap().is_ok(), "the dead holder's lease was taken over");
        let alive = format!("pid {} (x){here}", std::process::id());
        store.take_lease("u", &alive, LEASE_TTL).await.unwrap();
        assert!(matches!(Lease::take(store.clone(), "u", false).await, Err(LeaseError::Held { .. })));
        let elsewhere = format!("pid {dead} (x) in another-boot/pid:[1]");
        store.take_lease("v", &elsewhere, LEASE_TTL).await.unwrap();
        assert!(matches!(Lease::take(store, "v", false).await, Err(LeaseError::Held { .. })), "not ours to judge");
    }

    #[tokio::test]
    async fn a_holder_stopped_here_keeps_its_lease_after_it_expired_until_it_dies() {
        let store: Arc<dyn Checkpointer> = Arc::new(crate::MemoryCheckpointer::new());
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let holder = format!("pid {pid} (x){}", place().unwrap());
        store.take_lease("t", &holder, Duration::from_millis(1)).await.unwrap();
        signal_child(pid, "STOP");
        recursive_testkit::eventually(Duration::from_secs(10), || async { stopped_here(&holder).then_some(()) }).await;
        assert_eq!(store.lease_holder("t").await.unwrap().as_deref(), Some(holder.as_str()));
        let refused = Lease::take(store.clone(), "t", false).await.err().unwrap();
        assert!(refused.to_string().contains("stopped"), "an expired lease of a stopped holder is kept: {refused}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(Lease::take(store, "t", false).await.is_ok(), "taken over once the holder died");
    }

    fn signal_child(pid: u32, name: &str) {
        let status = std::process::Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status();
        assert!(status.unwrap().success());
    }

    #[test]
    fn a_holder_whose_pid_another_process_now_has_is_not_taken_for_it() {
        let name = holder_name();
        assert!(since(&name).is_some(), "{name}");
        assert!(!died_here(&name) && !stopped_here(&name), "this process is alive and running: {name}");
        let pid = std::process::id();
        let reused = format!("pid {pid} (x) since 1{}", place().unwrap());
        assert!(died_here(&reused), "a process that started at another time had the PID");
    }

    #[tokio::test]
    async fn a_lease_dropped_on_an_early_error_is_given_up() {
        let store: Arc<dyn Checkpointer> = Arc::new(crate::MemoryCheckpointer::new());
        drop(Lease::take(store.clone(), "t", false).await.unwrap());
        let again = tokio::time::timeout(Duration::from_secs(5), Lease::take(store, "t", true)).await;
        assert!(again.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_stalled_holder_cannot_write_after_another_runner_took_the_thread_over() {
        let store: Arc<dyn Checkpointer> = Arc::new(crate::MemoryCheckpointer::new());
        let stale = Lease::take_for(store.clone(), "t", false, Duration::from_millis(150)).await.unwrap();
        let stale_store = stale.store();
        // The holder stalls: no heartbeat, and its lease runs out.
        stale.heartbeat.abort();
        let _stalled = std::mem::ManuallyDrop::new(stale);
        let successor = recursive_testkit::eventually(Duration::from_secs(10), || {
            let store = store.clone();
            async move { Lease::take(store, "t", false).await.ok() }
        })
        .await;
        let checkpoint = Checkpoint {
            id: Checkpoint::new_id(),
            thread: "t".into(),
            ns: String::new(),
            parent: None,
            step: 0,
            state: Default::default(),
            next: Vec::new(),
            visits: Default::default(),
            base_step: 0,
            pause: None,
            source: crate::checkpoint::Source::Step,
            created_at: chrono::Utc::now(),
        };
        let refused = stale_store.put(&checkpoint).await.err().unwrap();
        assert!(matches!(refused, StoreError::LeaseLost { .. }), "{refused}");
        assert!(store.latest("t", "").await.unwrap().is_none(), "nothing was written");
        successor.store().put(&checkpoint).await.unwrap();
        assert!(store.latest("t", "").await.unwrap().is_some());
    }

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

//! Where a server's runs live: in memory while in flight, then in the run archive (the same
//! store as graph threads — SQLite by default, PostgreSQL when configured), so they are listed
//! after a restart and memory holds only the runs in flight, whatever the traffic. An archiver
//! task writes each run's new events and status every [`FLUSH_EVERY`], lets go of a finished run
//! once it is written, and applies retention ([`Retention`]). At start, runs a stopped server left
//! unfinished are marked interrupted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use recursive_core::FinishReason;
use recursive_store::queue::{JobQueue, KIND_RUN};
use recursive_store::{ArchivedRun, MemoryArchive, RunArchive, RunQuery, RunWrite, StoreError};
use tokio::sync::Notify;

use crate::runs::{PAGE, RunFilter, RunKind, RunOutput, RunRecord, RunStatus, RunView, unix_ms};

/// How often the archiver writes what runs added.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// How many finished runs to keep, and for how long (both optional; none: keep every run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Retention {
    /// Keep at most this many finished runs, the newest.
    pub count: Option<u64>,
    /// Delete finished runs older than this.
    pub age: Option<Duration>,
}

impl Retention {
    fn is_unbounded(&self) -> bool {
        self.count.is_none() && self.age.is_none()
    }

    fn at(&self, now_ms: i64) -> recursive_store::Retention {
        let age_ms = |a: Duration| i64::try_from(a.as_millis()).unwrap_or(i64::MAX);
        recursive_store::Retention { count: self.count, before_ms: self.age.map(|a| now_ms.saturating_sub(age_ms(a))) }
    }
}

/// A run as the archive keeps it, and how far it has been written.
struct Written {
    events: usize,
    status: Option<RunStatus>,
}

/// The runs of a server.
pub struct RunStore {
    live: Mutex<HashMap<String, (Arc<RunRecord>, Written)>>,
    archive: Arc<dyn RunArchive>,
    retention: Retention,
    wake: Notify,
    /// Told when runs were let go (written away, or deleted): what [`RunStore::kept`] waits on.
    released: Notify,
    archiver: AtomicBool,
    /// Held by a flush and by a delete: one flush at a time (a flush that read a run before it
    /// finished must not write over the one that wrote it finished), and no flush in progress
    /// writes back a run being deleted.
    writing: tokio::sync::Mutex<()>,
    /// Checked before every write: whether this process may still write its runs (a worker's
    /// hold on the job; see [`RunStore::fenced`]).
    fence: Option<Fence>,
    /// Where durable runs keep what resumes them (their request, their journal): deleted with
    /// the run, by a client or by retention.
    journals: Option<Arc<dyn recursive_store::Checkpointer>>,
}

/// Whether the writer may still write, or why not.
pub type Fence = Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync>;

impl Default for RunStore {
    fn default() -> Self {
        Self::new(Arc::new(MemoryArchive::default()), Retention::default())
    }
}

fn stored(e: StoreError) -> String {
    e.to_string()
}

impl RunStore {
    /// A store writing to `archive`, keeping what `retention` says.
    pub fn new(archive: Arc<dyn RunArchive>, retention: Retention) -> Self {
        RunStore {
            live: Mutex::new(HashMap::new()),
            archive,
            retention,
            wake: Notify::new(),
            released: Notify::new(),
            archiver: AtomicBool::new(false),
            writing: tokio::sync::Mutex::new(()),
            fence: None,
            journals: None,
        }
    }

    /// This store, deleting with a run what `journals` keeps to resume it.
    pub fn with_journals(mut self, journals: Option<Arc<dyn recursive_store::Checkpointer>>) -> Self {
        self.journals = journals;
        self
    }

    /// Deletes what the journals keep of the deleted runs `ids`.
    async fn forget(&self, ids: &[String]) -> Result<(), String> {
        let Some(journals) = &self.journals else { return Ok(()) };
        for id in ids {
            crate::durable::forget(journals.as_ref(), id).await?;
        }
        Ok(())
    }

    /// This store, writing only while `fence` allows it: a write it refuses is not made and
    /// fails with the fence's reason (a worker whose job was taken over stops writing the run).
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<RunRecord>, Written)>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a new, queued run (and starts the archiver with the first).
    pub(crate) fn create(self: &Arc<Self>, kind: RunKind, title: String) -> Arc<RunRecord> {
        let record = RunRecord::create(kind, title);
        self.register(record.clone());
        record
    }

    /// Holds `record` as a run in flight, written to the archive as it goes (from its first
    /// event on), and starts the archiver with the first.
    pub fn register(self: &Arc<Self>, record: Arc<RunRecord>) {
        let written = Written { events: record.base(), status: None };
        self.lock().insert(record.id.clone(), (record, written));
        if !self.archiver.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().archive_loop());
        }
    }

    /// A run as the archive keeps it, with when it was created (Unix milliseconds).
    pub async fn archived(&self, id: &str) -> Result<Option<(RunView, i64)>, String> {
        let archived = self.archive.run(id).await.map_err(stored)?;
        archived.map(|a| Ok((view_of(&a)?, a.created_ms))).transpose()
    }

    /// Writes a run accepted here but run elsewhere (queued) to the archive.
    pub async fn put_archived(&self, view: &RunView, created_ms: i64) -> Result<(), String> {
        self.archive.put_run(&archived_of(view, created_ms)?).await.map_err(stored)
    }

    /// Ends an archived run that is not in flight here with `output` (unless it has ended);
    /// the run as it is now, `None` when there is none.
    pub async fn finish_archived(&self, id: &str, output: RunOutput) -> Result<Option<RunView>, String> {
        let Some((mut view, created_ms)) = self.archived(id).await? else { return Ok(None) };
        if view.status != RunStatus::Finished {
            view.status = RunStatus::Finished;
            view.result = Some(output);
            self.put_archived(&view, created_ms).await?;
        }
        Ok(Some(view))
    }

    /// Ends run `id`, left unfinished by a stopped server and found finished after all (its
    /// journal ended before its result reached the store), as interrupted: what it answered is
    /// not known.
    pub async fn interrupt_left(&self, id: &str) -> Result<(), String> {
        let output = RunOutput {
            outcome: FinishReason::Interrupted,
            ..RunOutput::failed("the server stopped before the run's result was kept")
        };
        self.finish_archived(id, output).await.map(|_| ())
    }

    /// The index the next event of the archived run `id` takes.
    pub async fn next_event(&self, id: &str) -> Result<usize, String> {
        let next = self.archive.next_event(id).await.map_err(stored)?;
        Ok(usize::try_from(next).unwrap_or(usize::MAX))
    }

    /// A run in flight (or finished and not yet written away).
    pub fn live(&self, id: &str) -> Option<Arc<RunRecord>> {
        self.lock().get(id).map(|(r, _)| r.clone())
    }

    /// Every run in flight.
    pub fn unfinished(&self) -> Vec<Arc<RunRecord>> {
        self.lock().values().map(|(r, _)| r.clone()).filter(|r| r.result().is_none()).collect()
    }

    /// A run by id, in flight or archived.
    pub async fn view(&self, id: &str) -> Result<Option<RunView>, String> {
        if let Some(run) = self.live(id) {
            return Ok(Some(run.view()));
        }
        let archived = self.archive.run(id).await.map_err(stored)?;
        archived.map(|a| view_of(&a)).transpose()
    }

    /// At most a page of an archived run's events from index `from` on.
    pub async fn archived_events(&self, id: &str, from: usize) -> Result<Vec<Arc<str>>, String> {
        self.archive.events(id, from as u64, crate::runs::EVENT_PAGE).await.map_err(stored)
    }

    /// A page of runs, newest first, and whether more follow.
    pub async fn list(&self, filter: &RunFilter) -> Result<RunPage, String> {
        let limit = filter.limit.unwrap_or(PAGE.0).clamp(1, PAGE.1);
        let live: Vec<(Arc<RunRecord>, RunView)> = self.lock().values().map(|(r, _)| (r.clone(), r.view())).collect();
        let cursor = match &filter.before {
            Some(id) => Some(self.created_ms(id, &live).await?),
            None => None,
        };
        // The archive may hold a live run with an older status: ask without the status and filter here.
        let query = RunQuery {
            status: None,
            kind: filter.kind.map(|k| k.as_str().to_string()),
            before: filter.before.clone(),
            limit: limit + 1 + live.len(),
        };
        let archived = self.archive.list(&query).await.map_err(stored)?;
        let mut rows: Vec<(i64, RunView)> = Vec::new();
        let mut unreadable = Vec::new();
        for a in &archived {
            if live.iter().any(|(r, _)| r.id == a.id) {
                continue;
            }
            match view_of(a) {
                Ok(view) => rows.push((a.created_ms, view)),
                Err(e) => {
                    tracing::warn!("listing runs: {e}");
                    unreadable.push(a.id.clone());
                }
            }
        }
        for (record, view) in live {
            let before_cursor = cursor.as_ref().is_none_or(|c| (record.created_ms, &record.id) < (c.0, &c.1));
            if before_cursor && filter.kind.is_none_or(|k| k == view.kind) {
                rows.push((record.created_ms, view));
            }
        }
        rows.retain(|(_, v)| filter.status.is_none_or(|s| s == v.status));
        rows.sort_by(|a, b| (b.0, &b.1.id).cmp(&(a.0, &a.1.id)));
        let more = rows.len() > limit;
        Ok(RunPage { runs: rows.into_iter().take(limit).map(|(_, v)| v).collect(), more, unreadable })
    }

    /// When the run `id` was created, and its id (a listing's cursor).
    async fn created_ms(&self, id: &str, live: &[(Arc<RunRecord>, RunView)]) -> Result<(i64, String), String> {
        if let Some((r, _)) = live.iter().find(|(r, _)| r.id == id) {
            return Ok((r.created_ms, r.id.clone()));
        }
        match self.archive.run(id).await.map_err(stored)? {
            Some(a) => Ok((a.created_ms, a.id)),
            None => Err(format!("no run `{id}` to list from")),
        }
    }

    /// Deletes a finished run with its events: `Ok(false)` when there is none, `Err` with its
    /// status when it is still in flight (cancel it first).
    pub async fn delete(&self, id: &str) -> Result<Result<bool, RunStatus>, String> {
        let _writing = self.writing.lock().await;
        let was_live = {
            let mut live = self.lock();
            match live.get(id).map(|(run, _)| run.view().status) {
                Some(RunStatus::Finished) => {
                    live.remove(id);
                    self.released.notify_waiters();
                    true
                }
                Some(status) => return Ok(Err(status)),
                None => false,
            }
        };
        // A run in flight elsewhere (a worker's) is deleted only once it has ended.
        if !was_live && let Some((view, _)) = self.archived(id).await?.filter(|(v, _)| v.status != RunStatus::Finished)
        {
            return Ok(Err(view.status));
        }
        let deleted = self.archive.delete(id).await.map_err(stored)?;
        if deleted {
            self.forget(&[id.to_string()]).await?;
        }
        Ok(Ok(deleted))
    }

    /// Marks the runs a stopped server left unfinished as interrupted — but those with an open
    /// job in `queue` (queued runs, and runs a worker runs) — then applies retention; how many
    /// were interrupted.
    pub async fn recover(&self, queue: Option<&JobQueue>, running_elsewhere: &[String]) -> Result<usize, String> {
        let mut interrupted = 0;
        for (mut view, created_ms) in self.left_unfinished(queue).await? {
            if running_elsewhere.contains(&view.id) {
                continue;
            }
            view.status = RunStatus::Finished;
            view.result = Some(RunOutput {
                outcome: FinishReason::Interrupted,
                ..RunOutput::failed("the server stopped before the run finished")
            });
            self.archive.put_run(&archived_of(&view, created_ms)?).await.map_err(stored)?;
            interrupted += 1;
        }
        self.prune().await?;
        Ok(interrupted)
    }

    /// The runs a stopped server left unfinished, with when each was created: not those in
    /// flight here (resumed) nor those with an open job in `queue` (queued, or run by a worker).
    pub async fn left_unfinished(&self, queue: Option<&JobQueue>) -> Result<Vec<(RunView, i64)>, String> {
        let mut left = Vec::new();
        for archived in self.archive.unfinished().await.map_err(stored)? {
            if self.live(&archived.id).is_some() {
                continue;
            }
            if let Some(queue) = queue
                && queue.is_open(KIND_RUN, &archived.id).await.map_err(stored)?
            {
                continue;
            }
            left.push((view_of(&archived)?, archived.created_ms));
        }
        Ok(left)
    }

    /// Writes what every live run added, lets go of finished runs once written, and applies
    /// retention when a run was let go.
    pub async fn flush(&self) -> Result<(), String> {
        let writing = self.writing.lock().await;
        let runs: Vec<(Arc<RunRecord>, usize, Option<RunStatus>)> =
            self.lock().values().map(|(r, w)| (r.clone(), w.events, w.status)).collect();
        let mut writes = Vec::new();
        let mut written = Vec::new();
        for (run, from, status) in runs {
            let view = run.view();
            let events = run.events_since(from);
            if status == Some(view.status) && events.is_empty() {
                continue;
            }
            written.push((run.clone(), from + events.len(), view.status));
            writes.push(RunWrite { run: archived_of(&view, run.created_ms)?, first: from as u64, events });
        }
        if writes.is_empty() {
            return Ok(());
        }
        if let Some(fence) = &self.fence {
            fence().await?;
        }
        self.archive.save(&writes).await.map_err(stored)?;
        let mut released = 0;
        {
            let mut live = self.lock();
            for (run, events, status) in written {
                let done = status == RunStatus::Finished && run.events_since(events).is_empty();
                if done {
                    live.remove(&run.id);
                    released += 1;
                } else if let Some((_, w)) = live.get_mut(&run.id) {
                    *w = Written { events, status: Some(status) };
                }
            }
        }
        drop(writing);
        if released > 0 {
            self.released.notify_waiters();
            self.prune().await?;
        }
        Ok(())
    }

    async fn prune(&self) -> Result<(), String> {
        if self.retention.is_unbounded() {
            return Ok(());
        }
        let pruned = self.archive.prune(self.retention.at(unix_ms())).await.map_err(stored)?;
        self.forget(&pruned).await
    }

    /// Waits until the run `id` is no longer held here: written to the archive and let go (or
    /// deleted). A finished run's slot is given back only then, so the runs waiting to be written
    /// are at most the slots: when the store writes slower than runs finish, new runs wait for it
    /// (and past the queue get 429) instead of memory holding every finished run until it is
    /// written — with 100 KB requests, hundreds of MB a server's allocator then kept.
    pub(crate) async fn kept(&self, id: &str) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.lock().contains_key(id) {
                return;
            }
            self.nudge();
            released.await;
        }
    }

    /// Asks the archiver to write now.
    pub(crate) fn nudge(&self) {
        self.wake.notify_one();
    }

    /// Writes runs away every [`FLUSH_EVERY`] (or when nudged) until the store is the loop's
    /// alone, then a last time.
    async fn archive_loop(self: Arc<Self>) {
        loop {
            if let Err(e) = self.flush().await {
                tracing::warn!("keeping runs in the store failed (retrying): {e}");
            }
            if Arc::strong_count(&self) == 1 {
                return;
            }
            let _ = tokio::time::timeout(FLUSH_EVERY, self.wake.notified()).await;
        }
    }
}

/// An archived run's record as the API shows it.
fn view_of(archived: &ArchivedRun) -> Result<RunView, String> {
    recursive_store::format::decode(&archived.body)
        .map_err(|e| format!("the stored run `{}` is unreadable: {e}", archived.id))
}

/// A page of a listing.
#[derive(Debug, Default)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<RunView>,
    /// Whether older runs follow.
    pub more: bool,
    /// The ids of stored runs of the page that could not be read (left out of `runs`).
    pub unreadable: Vec<String>,
}

/// A run's view as the archive keeps it.
fn archived_of(view: &RunView, created_ms: i64) -> Result<ArchivedRun, String> {
    let status = serde_json::to_value(view.status).map_err(|e| e.to_string())?;
    Ok(ArchivedRun {
        id: view.id.clone(),
        kind: view.kind.as_str().to_string(),
        status: status.as_str().unwrap_or_default().to_string(),
        created_ms,
        body: recursive_store::format::encode(view).map_err(|e| e.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_finished_run_is_kept_once_written_and_not_before() {
        use futures::FutureExt;
        let store = Arc::new(RunStore::default());
        let record = store.create(RunKind::Run, "t".into());
        record.finish(RunOutput::failed("done"));
        let kept = store.kept(&record.id);
        tokio::pin!(kept);
        assert!(kept.as_mut().now_or_never().is_none(), "a finished run not yet written is held");
        store.flush().await.unwrap();
        assert!(kept.now_or_never().is_some(), "written and let go, its slot is free");
        assert!(store.live(&record.id).is_none());
    }

    #[tokio::test]
    async fn runs_made_in_one_millisecond_list_newest_first() {
        let archive = Arc::new(MemoryArchive::default());
        let store = Arc::new(RunStore::new(archive, Retention::default()));
        let made: Vec<String> = (0..40).map(|_| store.create(RunKind::Run, "t".into()).id.clone()).collect();
        store.flush().await.unwrap();
        let filter = RunFilter { limit: Some(100), ..Default::default() };
        let listed: Vec<String> = store.list(&filter).await.unwrap().runs.into_iter().map(|v| v.id).collect();
        let newest_first: Vec<String> = made.into_iter().rev().collect();
        assert_eq!(listed, newest_first);
    }

    #[tokio::test]
    async fn a_fenced_store_stops_writing_once_its_writer_lost_the_run() {
        let archive = Arc::new(MemoryArchive::default());
        let allowed = Arc::new(AtomicBool::new(true));
        let gate = allowed.clone();
        let fence: Fence = Arc::new(move || {
            let open = gate.load(Ordering::SeqCst);
            Box::pin(async move { if open { Ok(()) } else { Err("taken over".to_string()) } })
        });
        let store = Arc::new(RunStore::new(archive.clone(), Retention::default()).fenced(fence));
        let record = store.create(RunKind::Run, "t".into());
        record.note(&serde_json::json!({"type": "first"}));
        store.flush().await.unwrap();
        let kept = archive.next_event(&record.id).await.unwrap();
        assert_eq!(kept, 1);
        allowed.store(false, Ordering::SeqCst);
        record.note(&serde_json::json!({"type": "second"}));
        assert_eq!(store.flush().await.unwrap_err(), "taken over");
        assert_eq!(archive.next_event(&record.id).await.unwrap(), kept, "nothing more was written");
    }
}

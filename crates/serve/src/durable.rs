//! Runs this server runs itself (not queued for workers) made durable when the server has a
//! store for them ([`crate::server::ServeConfig::journals`]): a run is held and journaled as
//! every durable run is ([`recursive_store::durable`]), with its request kept beside its journal,
//! so a server killed mid-run resumes it when it starts again — the same id, its events after
//! those already kept, every model call and tool call it had finished read back from the
//! journal instead of made again, and what it had spent still counted. A server stopped on
//! purpose (SIGTERM) leaves its durable runs unfinished in the store the same way, for the
//! next server to resume, instead of ending them cancelled; one that restarts while the lease
//! of a killed predecessor elsewhere still runs takes the run up once that lease expires.
//!
//! A run whose client runs tools of its own is not durable: the client that would answer them
//! went with the server, so it ends interrupted, as every run does without a store.

use std::sync::Arc;

use recursive_core::spend::SpendRecord;
use recursive_core::{FinishReason, RunScope};
use recursive_store::LeaseError;
use recursive_store::durable::{DurableKey, HeldRun, Runner};
use recursive_store::{Checkpointer, StoreLedger};

use crate::runs::{RunOutput, RunRecord, RunRequest};

/// The journal key the request of run `run` is kept under.
fn request_key(run: &str) -> String {
    format!("request-{run}")
}

/// Whether a run of `request` can be resumed by a server started again.
pub(crate) fn resumable(request: &RunRequest) -> bool {
    request.tools.is_empty()
}

/// How a durable run is held when it starts.
pub(crate) enum Hold {
    /// A new run (its request kept already, [`keep_request`]): taken in this store.
    Fresh(Arc<dyn Checkpointer>),
    /// A run a stopped server left, taken up already (see [`take_left`]).
    Left(Runner),
}

/// How a run's job ended.
pub(crate) enum JobEnd {
    /// The run finished.
    Finished(RunOutput),
    /// A durable run stopped with the server, left unfinished for the next server to resume:
    /// what those waiting on it here are told, and the hold to let go of once its last events
    /// are written.
    Left(RunOutput, HeldRun),
}

/// What those waiting on a run left for the next server are told.
pub(crate) fn left_output() -> RunOutput {
    RunOutput {
        outcome: FinishReason::Interrupted,
        ..RunOutput::failed("the server stopped; the run resumes when a server starts again on its store")
    }
}

/// Runs `request` as the durable run `record` in `scope`, held and journaled for as long as it
/// runs. Stopped by the server ([`RunRecord::stop`]), it is left for the next server: its journal
/// stays open (what it finished is read back then).
pub(crate) async fn run(
    hold: Hold,
    runner: Arc<dyn crate::runs::Runner>,
    record: &RunRecord,
    request: RunRequest,
    scope: RunScope,
) -> JobEnd {
    let id = &record.id;
    let taken = match hold {
        Hold::Left(taken) => Ok(taken),
        Hold::Fresh(journals) => Runner::take(journals, &DurableKey::served(id)).await.map_err(|e| e.to_string()),
    };
    let held = match taken {
        Ok(taken) => taken.open(&scope).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let held = match held {
        Ok(held) => held,
        Err(e) => return JobEnd::Finished(RunOutput::failed(format!("the run's journal: {e}"))),
    };
    let output = runner.run(request, held.scope().clone()).await;
    if record.stopped() && output.outcome == FinishReason::Cancelled {
        return JobEnd::Left(left_output(), held);
    }
    if let Err(e) = held.close(true).await {
        tracing::warn!("ending the journal of run {id}: {e}");
    }
    JobEnd::Finished(output)
}

/// What became of a run a stopped server left unfinished.
pub(crate) enum Left {
    /// It kept no request, or it had finished: it is not run again.
    NotDurable,
    /// Another live process holds it (a server beside this one on a shared store).
    Elsewhere,
    /// Taken up by this process, with the request it was started with.
    Taken(Box<RunRequest>, Runner),
}

/// Takes up run `id` a stopped server left unfinished (see [`Left`]); with `wait`, waits for
/// another holder to let go. A run whose journal ended had finished (the server stopped before
/// the store had its result): it is not run again, as nothing of it could be read back.
pub(crate) async fn take_left(journals: &Arc<dyn Checkpointer>, id: &str, wait: bool) -> Result<Left, String> {
    let Some(request) = kept_request(journals.as_ref(), id).await? else { return Ok(Left::NotDurable) };
    let taken = match Runner::take(journals.clone(), &DurableKey::served(id).waiting(wait)).await {
        Ok(taken) => taken,
        Err(LeaseError::Held { .. }) => return Ok(Left::Elsewhere),
        Err(e) => return Err(e.to_string()),
    };
    let records = StoreLedger::new(taken.store(), taken.journal_key()).records().await.map_err(|e| e.to_string())?;
    if records.last().is_some_and(|r| matches!(r, SpendRecord::Ended { .. })) {
        taken.release().await;
        return Ok(Left::NotDurable);
    }
    Ok(Left::Taken(Box::new(request), taken))
}

/// Keeps the request of the new durable run `id`, for a server started later to resume it.
pub(crate) async fn keep_request(
    journals: Arc<dyn Checkpointer>,
    id: String,
    request: RunRequest,
) -> Result<(), String> {
    let body = serde_json::to_string(&request).map_err(|e| e.to_string())?;
    journals.append_journal(&request_key(&id), &body).await.map_err(|e| e.to_string())
}

/// Deletes what the store keeps of run `id` to resume it (its request, its journal): the run was
/// deleted.
pub(crate) async fn forget(journals: &dyn Checkpointer, id: &str) -> Result<(), String> {
    for key in [request_key(id), recursive_store::journal::run_key(id)] {
        journals.delete_journal(&key).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The request run `id` was started with, when it was kept (a durable run's).
async fn kept_request(journals: &dyn Checkpointer, id: &str) -> Result<Option<RunRequest>, String> {
    let bodies = journals.journal(&request_key(id)).await.map_err(|e| e.to_string())?;
    let Some(body) = bodies.first() else { return Ok(None) };
    serde_json::from_str(body).map(Some).map_err(|e| format!("the kept request of run {id} is unreadable: {e}"))
}

//! Runs this server runs itself (not queued for workers) made durable when the server has a
//! store for them ([`crate::server::ServeConfig::journals`]): a run is held and journaled as
//! every durable run is ([`recursive_store::durable`]), with its request kept beside its journal,
//! so a server killed mid-run resumes it when it starts again — the same id, its events after
//! those already kept, every model call and tool call it had finished read back from the
//! journal instead of made again, and what it had spent still counted.
//!
//! A run whose client runs tools of its own is not durable: the client that would answer them
//! went with the server, so it ends interrupted, as every run does without a store.

use std::sync::Arc;

use recursive_core::RunScope;
use recursive_store::Checkpointer;
use recursive_store::LeaseError;
use recursive_store::durable::{DurableKey, Runner};

use crate::runs::{RunOutput, RunRequest};

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
    /// A new run: its request is kept in this store, then the run is taken.
    Fresh(Arc<dyn Checkpointer>),
    /// A run a stopped server left, taken up already (see [`take_left`]).
    Left(Runner),
}

/// Runs `request` as the durable run `id` in `scope`, held and journaled for as long as it runs.
pub(crate) async fn run(
    hold: Hold,
    runner: Arc<dyn crate::runs::Runner>,
    id: &str,
    request: RunRequest,
    scope: RunScope,
) -> RunOutput {
    let taken = match hold {
        Hold::Left(taken) => Ok(taken),
        Hold::Fresh(journals) => {
            if let Err(e) = keep_request(journals.as_ref(), id, &request).await {
                tracing::warn!("keeping the request of run {id}: {e}; it will not resume after a crash");
            }
            Runner::take(journals, &DurableKey::served(id)).await.map_err(|e| e.to_string())
        }
    };
    let held = match taken {
        Ok(taken) => taken.open(&scope).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let held = match held {
        Ok(held) => held,
        Err(e) => return RunOutput::failed(format!("the run's journal: {e}")),
    };
    let output = runner.run(request, held.scope().clone()).await;
    if let Err(e) = held.close(true).await {
        tracing::warn!("ending the journal of run {id}: {e}");
    }
    output
}

/// What became of a run a stopped server left unfinished.
pub(crate) enum Left {
    /// It kept no request: it cannot resume.
    NotDurable,
    /// Another live process holds it (a server beside this one on a shared store).
    Elsewhere,
    /// Taken up by this process, with the request it was started with.
    Taken(Box<RunRequest>, Runner),
}

/// Takes up run `id` a stopped server left unfinished (see [`Left`]).
pub(crate) async fn take_left(journals: &Arc<dyn Checkpointer>, id: &str) -> Result<Left, String> {
    let Some(request) = kept_request(journals.as_ref(), id).await? else { return Ok(Left::NotDurable) };
    match Runner::take(journals.clone(), &DurableKey::served(id)).await {
        Ok(taken) => Ok(Left::Taken(Box::new(request), taken)),
        Err(LeaseError::Held { .. }) => Ok(Left::Elsewhere),
        Err(e) => Err(e.to_string()),
    }
}

async fn keep_request(journals: &dyn Checkpointer, id: &str, request: &RunRequest) -> Result<(), String> {
    let body = serde_json::to_string(request).map_err(|e| e.to_string())?;
    journals.append_journal(&request_key(id), &body).await.map_err(|e| e.to_string())
}

/// The request run `id` was started with, when it was kept (a durable run's).
async fn kept_request(journals: &dyn Checkpointer, id: &str) -> Result<Option<RunRequest>, String> {
    let bodies = journals.journal(&request_key(id)).await.map_err(|e| e.to_string())?;
    let Some(body) = bodies.first() else { return Ok(None) };
    serde_json::from_str(body).map(Some).map_err(|e| format!("the kept request of run {id} is unreadable: {e}"))
}

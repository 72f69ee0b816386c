//! One module per subcommand.

pub mod goal;
pub mod patch;
pub mod rlm;
pub mod run;
pub mod trace;

use std::sync::Arc;

use recursive_core::{Budget, BudgetLimits, EventSink, FanoutSink, JsonlSink, RunScope};

use crate::ProviderArgs;
use crate::output::CliSink;

/// Builds the root run scope: sinks (stderr/stdout, optional JSONL), the tree budget, and
/// Ctrl-C wired to cancellation.
pub fn root_scope(
    name: &str,
    args: &ProviderArgs,
    stream_text: bool,
    limits: BudgetLimits,
    extra: Option<Arc<dyn EventSink>>,
) -> anyhow::Result<RunScope> {
    let mut sink = FanoutSink::new().with(Arc::new(CliSink::new(stream_text, args.quiet)));
    if let Some(path) = &args.events {
        let jsonl =
            JsonlSink::create(path).map_err(|e| anyhow::anyhow!("cannot open events file {}: {e}", path.display()))?;
        sink.push(Arc::new(jsonl));
    }
    if let Some(extra) = extra {
        sink.push(extra);
    }
    let scope = RunScope::root(name, Arc::new(sink), Arc::new(Budget::new(limits)));
    let token = scope.cancel_token().clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupted: cancelling the run (press Ctrl-C again to abort)");
            token.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    Ok(scope)
}

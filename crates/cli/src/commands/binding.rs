//! What a blueprint may bind, as the commands that load blueprints (`graph`, `worker`) take it:
//! the `--agent`, `--graph` and `--workspace` flags, reading a blueprint file, and where a
//! blueprint finds its sub-graphs (the files next to it, or the texts a stored thread pinned).

use std::path::{Path, PathBuf};

use clap::Args;
use recursive_graph::blueprint::{Allowlist, Source};
use recursive_harness::{Harness, SubGraphs};
use recursive_store::ThreadInfo;

use crate::ConfigError;

/// What blueprints may use beyond the defaults.
#[derive(Debug, Clone, Args)]
pub struct BindArgs {
    /// A runnable nodes may run: NAME=FILE, a TOML file declaring `kind = "agent"` (the
    /// default), `"rlm"`, `"goal"` or `"graph"` (repeatable); a node names it by its kind.
    #[arg(long = "agent", value_name = "NAME=FILE")]
    pub agents: Vec<String>,
    /// A blueprint sub-graph nodes may run, by name: NAME=FILE (repeatable; blueprints next to
    /// the main one are allowed by their file name).
    #[arg(long = "graph", value_name = "NAME=FILE")]
    pub graphs: Vec<String>,
    /// Workspace of the tools and of the default store (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

/// A blueprint file's text, named by its path.
pub(crate) fn read_source(path: &Path) -> anyhow::Result<Source> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read blueprint {}: {e}", path.display())))?;
    Ok(Source { origin: path.display().to_string(), text })
}

/// The `--graph NAME=FILE` blueprints.
fn named_graphs(bind: &BindArgs) -> anyhow::Result<Vec<(String, Source)>> {
    bind.graphs
        .iter()
        .map(|spec| {
            let (name, file) =
                spec.split_once('=').ok_or_else(|| ConfigError(format!("--graph {spec}: expected NAME=FILE")))?;
            Ok((name.to_string(), read_source(Path::new(file))?))
        })
        .collect()
}

/// Where a blueprint read from a file finds its sub-graphs: the blueprints next to it (by file
/// stem) and `--graph NAME=FILE`.
pub(crate) fn files(bind: &BindArgs, dir: Option<&Path>) -> anyhow::Result<SubGraphs> {
    Ok(SubGraphs::Files(dir.map(Path::to_path_buf), named_graphs(bind)?))
}

/// A stored thread's sub-graphs: its pinned texts, or (a thread stored before sub-graphs were
/// pinned) the files next to its blueprint's origin and `--graph`.
pub(crate) fn stored(bind: &BindArgs, info: &ThreadInfo, origin: &str) -> anyhow::Result<SubGraphs> {
    Ok(match SubGraphs::of(info, origin) {
        SubGraphs::Files(dir, _) => SubGraphs::Files(dir, named_graphs(bind)?),
        pinned => pinned,
    })
}

/// What blueprints may bind: the harness's (its model, agent, RLM and goal pursuer as
/// `default`, its tools, the `--agent` runnables), the blueprints next to the main one (by file
/// stem) and `--graph NAME=FILE`.
pub(crate) fn allowlist(harness: &Harness, bind: &BindArgs, dir: Option<&Path>) -> anyhow::Result<Allowlist> {
    Ok(harness.allowlist(files(bind, dir)?.sources())?)
}

//! `recursive goal`: pursues an objective by recursive decomposition, showing the goal tree
//! live on stderr, with tools, sub-agents (`--agent`) and (given `--input`) an RLM to delegate
//! to. Every pursuit keeps its execution log (by default under the user's data directory), so
//! an interrupted one continues with `--resume ID_OR_LOG`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use recursive_core::{BudgetLimits, ChatOptions, Runnable, Runnables, WithData};
use recursive_goal::{GoalConfig, ResumeLog};
use recursive_harness::{RlmOptions, load_inputs};
use serde_json::json;

use crate::ConfigError;
use crate::ProviderArgs;

/// Arguments of `goal`.
#[derive(Debug, Args)]
pub struct GoalArgs {
    /// The objective (not with `--resume`, which takes it from the log).
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    pub objective: Option<String>,
    /// Continue an interrupted pursuit from its log: the id printed when it started, or the
    /// log's path. Goals it finished are not pursued again.
    #[arg(long, value_name = "ID_OR_LOG")]
    pub resume: Option<String>,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// Deepest goal level (default 15).
    #[arg(long, value_parser = crate::flags::goal_depth)]
    pub max_depth: Option<u32>,
    /// Wall clock for the whole pursuit, in seconds (default 3600).
    #[arg(long = "timeout", alias = "max-time", value_name = "SECS", value_parser = crate::flags::secs)]
    pub max_time: Option<f64>,
    /// USD budget for the whole pursuit (default 10; refused when the model's price is unknown).
    #[arg(long, value_parser = crate::flags::usd)]
    pub max_cost: Option<f64>,
    /// Most goals in the tree (default 100).
    #[arg(long)]
    pub max_goals: Option<usize>,
    /// Similarity above which a goal counts as a repeat of one on its stack (0..1; default 0.9).
    #[arg(long, value_parser = crate::flags::fraction)]
    pub similarity_threshold: Option<f64>,
    /// OpenAI-compatible embeddings endpoint (base URL ending in `/v1`) for semantic cycle
    /// detection; the key is read from `OPENAI_API_KEY`.
    #[arg(long, value_name = "URL")]
    pub embeddings_url: Option<String>,
    /// Embedding model for `--embeddings-url`.
    #[arg(long, default_value = "text-embedding-3-small")]
    pub embeddings_model: String,
    /// Append the goal execution log (JSONL) to this file (default: a new file under the
    /// user's data directory, named by the pursuit's id).
    #[arg(long, value_name = "PATH", conflicts_with = "resume")]
    pub log: Option<PathBuf>,
    /// Characters a prompt may have; evidence and results are shortened, visibly, to fit
    /// (default 24000).
    #[arg(long, value_name = "CHARS", value_parser = crate::flags::chars)]
    pub prompt_chars: Option<usize>,
    /// Characters a goal's result may have; longer action outputs are digested by the model
    /// (default 2000).
    #[arg(long, value_name = "CHARS", value_parser = crate::flags::chars)]
    pub result_chars: Option<usize>,
    /// Most sub-goals one decomposition may have (default 8).
    #[arg(long, value_name = "N", value_parser = crate::flags::concurrency)]
    pub max_subgoals: Option<usize>,
    /// Sub-goals run at most this many at once; the achieved check runs after each batch
    /// (default 4).
    #[arg(long, value_name = "N", value_parser = crate::flags::concurrency)]
    pub layer_concurrency: Option<usize>,
    /// How many more times the model is asked after an unusable JSON reply (default 1).
    #[arg(long, value_name = "N")]
    pub json_retries: Option<u32>,
    /// How many more times a goal judged not achieved is decomposed for its remaining gaps
    /// (default 1).
    #[arg(long, value_name = "N")]
    pub gap_rounds: Option<u32>,
    /// Runnables goals may be delegated to (the `delegate` action).
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    /// Print the outcome tree as one JSON object on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    /// Workspace for the read-only tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Long inputs an `rlm` delegate may read ([NAME=]PATH, repeatable).
    #[arg(long = "input", short = 'i', value_name = "[NAME=]PATH")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
}

/// Runs the command.
pub async fn execute(args: GoalArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let mut harness = super::harness(
        &args.provider,
        args.workspace.as_deref(),
        args.approval.approver(),
        recursive_core::RunLimits::default().max_steps,
        &args.runnables.agents,
        RlmOptions::default(),
    )
    .await?;
    args.approval.apply(&harness);
    let max_cost = match args.max_cost {
        Some(usd) => {
            super::usd("--max-cost", usd)?;
            harness.provider.require_price("--max-cost")?;
            usd
        }
        None => {
            if let Some(model) = &harness.provider.unpriced {
                eprintln!(
                    "warning: the price of model `{model}` is unknown, so the pursuit runs without its default $10 \
                     budget (its time and goal caps still apply); add [pricing.\"{model}\"] to recursive.toml"
                );
                f64::INFINITY
            } else {
                recursive_goal::Constraints::default().max_cost_usd
            }
        }
    };
    let goal_config = goal_config(&args, max_cost, harness.provider.model())?;
    let log_path = match (&args.resume, &args.log) {
        (Some(spec), _) => resume_path(spec)?,
        (None, Some(path)) => path.clone(),
        (None, None) => crate::sessions::goals_root()?.join(format!("{}.jsonl", crate::sessions::new_id())),
    };
    // A pursuit is a slot of the run store: its log is kept there (`log_path` its export), one
    // runner holds it — taken before the log is read — and its spend and finished calls are
    // journaled there.
    let store = crate::sessions::runs_store()?;
    if let Some(dir) = log_path.parent().filter(|d| !d.as_os_str().is_empty() && args.resume.is_none()) {
        // Made now so the pursuit's key resolves it as every later resume will.
        std::fs::create_dir_all(dir).map_err(|e| ConfigError(format!("cannot create {}: {e}", dir.display())))?;
    }
    let key = pursuit_key(&log_path);
    let runner = hold_pursuit(&store, &key, &log_path).await?;
    let log_key = format!("log-{key}");
    if args.resume.is_none() {
        start_afresh(&store, &key, &log_key, &log_path).await?;
    }
    let journal = pursuit_journal(&log_path, &runner, args.resume.is_some()).await?;
    let records = journal.records().await.map_err(|e| anyhow::anyhow!("the pursuit's journal: {e}"))?;
    let kept = store.records(&log_key);
    // A bad log to resume is reported before any model is called.
    let resume = match &args.resume {
        Some(_) => Some(resume_log(&log_path, &kept, records)?),
        None => None,
    };

    // The pursuit carves its own budget node (time, cost) from the root's. Each goal is one
    // level of the run tree, plus a level for the work a goal delegates: the tree's depth cap
    // is `[limits] max_depth`, raised to what `--max-depth` goal levels need.
    let depth = harness.limits().max_depth.max(goal_config.run_tree_depth());
    let scope = super::root_scope(exports, &harness, "goal", &args.provider, false, BudgetLimits::default(), None)?
        .with_max_depth(depth);
    harness.check_shell_sandbox(None)?;
    let mcp = harness.start_mcp(&scope).await?;
    let mut pursuer = harness.pursuer_with(goal_config, &delegates(&harness, &args.inputs)?);
    if let Some(url) = &args.embeddings_url {
        let mut embedder = recursive_goal::HttpEmbedder::new(url.clone(), args.embeddings_model.clone());
        if let Some(key) = recursive_core::env::var("OPENAI_API_KEY") {
            embedder = embedder.with_api_key(key);
        }
        pursuer = pursuer.with_embedder(Arc::new(embedder));
    }
    let journal = recursive_store::journal::ledger(runner.store(), runner.journal_key());
    pursuer = pursuer.with_journal(journal).with_kept_log(Arc::new(kept), &log_path)?;
    if !args.provider.quiet {
        match &resume {
            Some(r) => eprintln!(
                "resuming from {} ({} goal(s) finished before, ${:.4} spent before)",
                log_path.display(),
                r.finished_count(),
                r.objective().map(|(id, _)| r.earlier_spend(&id).usd()).unwrap_or_default()
            ),
            None => eprintln!("goal log: {}", log_path.display()),
        }
    }
    let pursued = match resume {
        Some(log) => pursuer.resume_as_run(log, &scope).await,
        None => pursuer.pursue_as_run(args.objective.as_deref().unwrap_or_default(), &scope).await,
    };
    mcp.shutdown().await;
    let (outcome, finish) = pursued?;
    report(&args, &outcome, &finish, &log_path)?;
    Ok(finish.exit_code() as u8)
}

/// The pursuit's settings: the flags given, the library's defaults for the rest.
fn goal_config(args: &GoalArgs, max_cost: f64, model: String) -> anyhow::Result<GoalConfig> {
    let mut c = GoalConfig::default();
    c.constraints.max_depth = args.max_depth.unwrap_or(c.constraints.max_depth);
    if let Some(secs) = args.max_time {
        c.constraints.max_time = super::seconds("--timeout", secs)?;
    }
    c.constraints.max_cost_usd = max_cost;
    c.constraints.max_goals = args.max_goals.unwrap_or(c.constraints.max_goals);
    c.similarity_threshold = args.similarity_threshold.unwrap_or(c.similarity_threshold);
    if !(0.0..=1.0).contains(&c.similarity_threshold) {
        return Err(ConfigError(format!(
            "--similarity-threshold {}: expected a number between 0 and 1",
            c.similarity_threshold
        ))
        .into());
    }
    c.prompt_chars = args.prompt_chars.unwrap_or(c.prompt_chars);
    c.result_chars = args.result_chars.unwrap_or(c.result_chars);
    c.max_subgoals = args.max_subgoals.unwrap_or(c.max_subgoals);
    c.layer_concurrency = args.layer_concurrency.unwrap_or(c.layer_concurrency);
    c.json_retries = args.json_retries.unwrap_or(c.json_retries);
    c.gap_rounds = args.gap_rounds.unwrap_or(c.gap_rounds);
    for (flag, value, min) in [
        ("--prompt-chars", c.prompt_chars, 2_000),
        ("--result-chars", c.result_chars, 200),
        ("--max-subgoals", c.max_subgoals, 1),
        ("--layer-concurrency", c.layer_concurrency, 1),
    ] {
        if value < min {
            return Err(ConfigError(format!("{flag} {value}: expected at least {min}")).into());
        }
    }
    if c.result_chars * 2 > c.prompt_chars {
        return Err(ConfigError(format!(
            "--result-chars {} must be at most half of --prompt-chars {}",
            c.result_chars, c.prompt_chars
        ))
        .into());
    }
    c.options = ChatOptions { model, ..Default::default() };
    Ok(c)
}

/// The log `--resume` names: a path, or the id of a log under the data directory — its export
/// there, or its log kept in the run store.
fn resume_path(spec: &str) -> anyhow::Result<PathBuf> {
    let by_path = spec.contains(['/', '\\']) || spec.starts_with('.') || Path::new(spec).is_file();
    if spec.is_empty() || (by_path && !is_pursuit(Path::new(spec))?) {
        return Err(ConfigError(format!("--resume {spec}: no such goal log")).into());
    }
    if by_path {
        return Ok(PathBuf::from(spec));
    }
    let path = crate::sessions::goals_root()?.join(format!("{spec}.jsonl"));
    if !is_pursuit(&path)? {
        return Err(
            ConfigError(format!("--resume {spec}: no goal log with that id (looked for {})", path.display())).into()
        );
    }
    Ok(path)
}

/// Whether a pursuit's log is at `log`: its export there, or its log kept in the run store.
fn is_pursuit(log: &Path) -> anyhow::Result<bool> {
    if log.is_file() {
        return Ok(true);
    }
    let kept = crate::sessions::runs_store()?.records(&format!("log-{}", pursuit_key(log)));
    Ok(!recursive_core::StoredRecords::records(&kept)?.is_empty())
}

/// The log to resume, from the run store, checked to hold a pursuit. Its export is taken up
/// first: read (a last line a kill cut short cut off, with a warning naming it; a damaged line
/// before it refuses the resume), and a log an earlier version kept in the file alone moved
/// into the store.
fn resume_log(
    path: &Path,
    kept: &recursive_store::SqliteRecords,
    journal: Vec<recursive_core::spend::SpendRecord>,
) -> anyhow::Result<ResumeLog> {
    use recursive_core::StoredRecords;
    let refused = |e: &dyn std::fmt::Display| ConfigError(format!("--resume: {e}"));
    let mut records = kept.records().map_err(|e| refused(&e))?;
    if path.exists() {
        let export = ResumeLog::open_with_journal(path, Vec::new()).map_err(|e| refused(&e))?;
        for cut in export.cuts() {
            eprintln!("warning: {cut}");
        }
        if records.is_empty() {
            for event in export.events() {
                let record = serde_json::to_string(event)?;
                kept.append(&record).map_err(|e| refused(&e))?;
                records.push(record);
            }
        }
    }
    let log = ResumeLog::from_records(path, &records, journal).map_err(|e| refused(&e))?;
    if log.objective().is_none() {
        return Err(ConfigError(format!("--resume: {} holds no pursuit", path.display())).into());
    }
    Ok(log)
}

/// What goals may delegate to: the `--agent` runnables and, given `--input` files, the
/// configuration's RLM over them (as `rlm`).
fn delegates(harness: &recursive_harness::Harness, specs: &[String]) -> anyhow::Result<Runnables> {
    if specs.is_empty() {
        return Ok(harness.runnables().clone());
    }
    let inputs = load_inputs(specs)?;
    let names: Vec<&str> = inputs.iter().map(|(n, _)| n).collect();
    let description = format!(
        "A recursive language model that answers a question by writing Python over the long inputs ({}) and \
         calling sub-models on the pieces. Use it for questions about those inputs.",
        names.join(", ")
    );
    let data = inputs.iter().map(|(n, v)| (n.to_string(), v.to_json())).collect();
    let rlm: Arc<dyn Runnable> = Arc::new(harness.rlm(None)?);
    let rlm = Arc::new(WithData::new(rlm, data).described(description));
    Ok(harness.runnables().clone().with(rlm))
}

/// Prints the outcome: the result on stdout (or the tree as JSON), a summary line on stderr.
fn report(
    args: &GoalArgs,
    outcome: &recursive_goal::GoalOutcome,
    finish: &recursive_core::FinishReason,
    log: &Path,
) -> anyhow::Result<()> {
    if args.json {
        let mut v = serde_json::to_value(outcome)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("outcome".into(), json!(finish.as_str()));
            obj.insert("error".into(), json!(outcome.fault));
            obj.insert("log".into(), json!(log));
        }
        println!("{}", serde_json::to_string(&v)?);
    } else if outcome.result.summary.is_empty() {
        println!("{}", outcome.reason.clone().unwrap_or_default());
    } else {
        println!("{}", outcome.result.summary);
    }
    if !args.json && !args.provider.quiet {
        eprintln!(
            "goal {}{}: {} goal(s), {} tokens, ${:.4}",
            outcome.status.as_str(),
            outcome.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
            outcome.count(),
            outcome.usage.total(),
            outcome.cost_usd
        );
    }
    if let Some(fault) = &outcome.fault {
        eprintln!("error: {fault}");
    }
    if !outcome.status.is_success() && !args.provider.quiet {
        let id = log.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let under_data = crate::sessions::goals_root().is_ok_and(|root| log.starts_with(root));
        let spec = if under_data { id.to_string() } else { log.display().to_string() };
        eprintln!("continue it with: recursive goal --resume {spec}");
    }
    Ok(())
}

/// The run store's key of the pursuit whose log (export) is `log`: one key however the path
/// is spelled (relative, through `..` or a link to its directory), so one pursuit has one
/// runner, one log and one journal.
fn pursuit_key(log: &Path) -> String {
    format!("goal-{}", canonical_log(log).display())
}

/// `log` with its directory resolved (the file itself may not exist yet, or any more).
fn canonical_log(log: &Path) -> PathBuf {
    let absolute = std::path::absolute(log).unwrap_or_else(|_| log.to_path_buf());
    let (Some(dir), Some(name)) = (absolute.parent(), absolute.file_name()) else { return absolute };
    match std::fs::canonicalize(dir) {
        Ok(dir) => dir.join(name),
        Err(_) => absolute,
    }
}

/// Takes the pursuit `key` (whose log is `log`) for this process, by its lease in the run
/// store (one runner per pursuit; a killed holder is taken over at once).
async fn hold_pursuit(
    store: &recursive_store::SqliteCheckpointer,
    key: &str,
    log: &Path,
) -> anyhow::Result<recursive_store::Runner> {
    let shown = log.display().to_string();
    crate::sessions::hold_run(store, key, || {
        format!("goal log {shown} is being run by another process; wait for it to end")
    })
    .await
}

/// The journal of the pursuit kept in `log`, in the run store `runner` holds it in: its spend
/// written ahead of every call and its finished calls. On a resume, a ledger an earlier version
/// kept beside the log (`<log>.spend.jsonl`) is moved in first.
async fn pursuit_journal(
    log: &Path,
    runner: &recursive_store::Runner,
    resuming: bool,
) -> anyhow::Result<recursive_store::StoreLedger> {
    if resuming {
        crate::sessions::import_file_journal(&recursive_core::spend::ledger_path_beside(log), runner).await?;
    }
    Ok(recursive_store::StoreLedger::new(runner.store(), runner.journal_key()))
}

/// A new pursuit under `key` (its log's path used before) starts afresh: no earlier pursuit's
/// finished calls answer it and none of their spend counts against its caps; the earlier log is
/// kept only while its export is there to be appended to (a log several pursuits share).
async fn start_afresh(
    store: &recursive_store::SqliteCheckpointer,
    key: &str,
    log_key: &str,
    log: &Path,
) -> anyhow::Result<()> {
    use recursive_store::Checkpointer;
    let failed = |e: recursive_store::StoreError| anyhow::anyhow!("the run store: {e}");
    store.delete_journal(key).await.map_err(failed)?;
    if !log.exists() {
        store.delete_journal(log_key).await.map_err(failed)?;
    }
    Ok(())
}

//! Sessions: every `run` and `chat` is a session, so a conversation started in one process
//! continues in another (`run --continue`, `run --resume ID`, `chat --resume ID`) and
//! `recursive sessions` lists them.
//!
//! A session is a slot of the user's run store (`<data dir>/recursive/runs.db`, see
//! [`runs_store`]): its transcript is kept there message by message as it happens (what a
//! resume reads), this process holds it by the store's lease (a second process is refused; a
//! killed holder is taken over at once) and every turn is journaled there
//! ([`recursive_store::durable`]), as graph threads and RLM runs are in theirs. Beside it, under
//! `<data dir>/recursive/sessions/<id>/`, `session.json` says what it is and what it cost, and
//! `transcript.jsonl` is the transcript's export for people and `trace`, appended as it goes.
//!
//! The files of a session are opened without following links and only when they are regular
//! files: a link planted as `session.json` leads nowhere, a FIFO there blocks nothing.

use std::path::{Path, PathBuf};

use anyhow::Context;
use recursive_core::{Message, RunResult, TranscriptLog};
use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// What a session is and what it has cost so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionMeta {
    /// Its id (sortable by creation time).
    pub id: String,
    /// When it was created (RFC 3339).
    pub created: String,
    /// When it last changed (RFC 3339).
    pub updated: String,
    /// The workspace it ran in.
    pub workspace: PathBuf,
    /// The model of its last turn.
    pub model: String,
    /// Its first goal, shortened.
    pub title: String,
    /// Where its transcript is.
    pub transcript: PathBuf,
    /// Goals given so far.
    pub turns: u32,
    /// Tokens in, over every turn.
    pub input_tokens: u64,
    /// Tokens out, over every turn.
    pub output_tokens: u64,
    /// USD over every turn (known prices only).
    pub cost_usd: f64,
    /// How its last turn finished.
    pub last_outcome: String,
}

/// A session on disk, held by this process (one process at a time: see [`Session::hold`]).
#[derive(Debug)]
pub struct Session {
    /// Its directory.
    pub dir: PathBuf,
    /// What it is.
    pub meta: SessionMeta,
    /// This process's hold on it until its journal opens ([`Session::open_journal`]), which
    /// then holds it; released when dropped.
    runner: Option<recursive_store::Runner>,
    /// Its transcript: a slot of the run store (what a resume reads), exported as it goes to
    /// `meta.transcript` (JSONL, for people and `trace`).
    records: recursive_store::SqliteRecords,
}

/// The result given, on resume, to a tool call the session ended during.
const INTERRUPTED_CALL: &str = "interrupted: the session ended before this tool call finished, so its result (and \
whether it took effect) is unknown; check before relying on it";

/// The key of session `id` in the run store: its lease and its journal.
fn journal_key(id: &str) -> String {
    format!("session-{id}")
}

/// The key of session `id`'s transcript in the run store.
fn transcript_key(id: &str) -> String {
    format!("transcript-session-{id}")
}

/// Where sessions are kept.
pub fn root() -> anyhow::Result<PathBuf> {
    let data = dirs::data_dir().ok_or_else(|| anyhow::anyhow!("no data directory for sessions (set HOME)"))?;
    Ok(data.join("recursive").join("sessions"))
}

/// The user's run store: where sessions and goal pursuits are kept (their transcripts and
/// logs), held (one runner each) and journaled. A SQLite file beside the sessions.
pub fn runs_store() -> anyhow::Result<recursive_store::SqliteCheckpointer> {
    let data = dirs::data_dir().ok_or_else(|| anyhow::anyhow!("no data directory for the run store (set HOME)"))?;
    let path = data.join("recursive").join("runs.db");
    recursive_store::SqliteCheckpointer::open(&path).map_err(|e| {
        anyhow::anyhow!(
            "the run store {}: {e} (if the file is damaged, move it aside: a new one is made, and sessions and \
             goal pursuits are read back from their exports when resumed)",
            path.display()
        )
    })
}

/// Takes the run `key` of the run store `store` for this process; `busy` says what to do when
/// another process holds it.
pub async fn hold_run(
    store: &recursive_store::SqliteCheckpointer,
    key: &str,
    busy: impl FnOnce() -> String,
) -> anyhow::Result<recursive_store::Runner> {
    let store: std::sync::Arc<dyn recursive_store::Checkpointer> = std::sync::Arc::new(store.clone());
    match recursive_store::Runner::take(store, &recursive_store::DurableKey::own(key)).await {
        Ok(runner) => Ok(runner),
        Err(recursive_store::LeaseError::Held { holder, .. }) => {
            Err(ConfigError(format!("{} (held by {holder})", busy())).into())
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

/// Where goal pursuits keep their execution logs (`<id>.jsonl`), for `goal --resume ID`.
pub fn goals_root() -> anyhow::Result<PathBuf> {
    let data = dirs::data_dir().ok_or_else(|| anyhow::anyhow!("no data directory for goal logs (set HOME)"))?;
    Ok(data.join("recursive").join("goals"))
}

/// A new id, sortable by creation time: `20261125-141502-3fa9c1`.
pub fn new_id() -> String {
    let now = chrono::Local::now();
    format!("{}-{}", now.format("%Y%m%d-%H%M%S"), &uuid::Uuid::new_v4().simple().to_string()[..6])
}

impl Session {
    /// A new session for `title` in `workspace`; its transcript is `transcript` when given
    /// (`--transcript`), else the session's own.
    pub async fn create(
        workspace: &Path,
        model: &str,
        title: &str,
        transcript: Option<&Path>,
    ) -> anyhow::Result<Session> {
        let now = chrono::Local::now();
        let id = new_id();
        let dir = root()?.join(&id);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating the session directory {}", dir.display()))?;
        let transcript = match transcript {
            Some(p) => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
            None => dir.join("transcript.jsonl"),
        };
        let meta = SessionMeta {
            id,
            created: now.to_rfc3339(),
            updated: now.to_rfc3339(),
            workspace: workspace.to_path_buf(),
            model: model.to_string(),
            title: recursive_core::text::clip_chars(title.trim(), 80),
            transcript,
            turns: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            last_outcome: String::new(),
        };
        let store = runs_store()?;
        let records = store.records(&transcript_key(&meta.id));
        let session = Session { runner: Some(Self::hold(&store, &meta.id).await?), dir, meta, records };
        session.save()?;
        Ok(session)
    }

    /// The session `id`.
    pub async fn open(id: &str) -> anyhow::Result<Session> {
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return Err(ConfigError(format!("`{id}` is not a session id; `recursive sessions` lists them")).into());
        }
        let dir = root()?.join(id);
        let meta = match read_meta(&dir) {
            Ok(meta) => meta,
            Err(MetaError::Missing) => {
                return Err(ConfigError(format!("no session `{id}`; `recursive sessions` lists them")).into());
            }
            Err(e) => return Err(anyhow::anyhow!("session `{id}` is damaged: {e}")),
        };
        let store = runs_store()?;
        let records = store.records(&transcript_key(id));
        let session = Session { runner: Some(Self::hold(&store, id).await?), dir, meta, records };
        session.take_up_export()?;
        Ok(session)
    }

    /// Takes the session `id` for this process: a second process is refused while one holds it
    /// (so two never interleave one transcript); a holder that was killed is taken over.
    async fn hold(store: &recursive_store::SqliteCheckpointer, id: &str) -> anyhow::Result<recursive_store::Runner> {
        hold_run(store, &journal_key(id), || {
            format!("session `{id}` is in use by another process; wait for it to end, or start a new session")
        })
        .await
    }

    /// Opens the session's journal in `scope` (once per process): every turn a durable run of
    /// it, so a turn a kill cut off resumes with what it had finished, and its spend counts. The
    /// returned hold keeps the session for this process from then on. A journal an earlier
    /// version kept in the session's directory (`journal.jsonl`) is moved into the store first.
    pub async fn open_journal(&mut self, scope: &recursive_core::RunScope) -> anyhow::Result<recursive_store::HeldRun> {
        let runner =
            self.runner.take().ok_or_else(|| anyhow::anyhow!("session {}'s journal is already open", self.meta.id))?;
        import_file_journal(&self.dir.join("journal.jsonl"), &runner).await?;
        runner.open(scope).await.map_err(|e| anyhow::anyhow!("session {}'s journal: {e}", self.meta.id))
    }

    /// The most recently updated session of `workspace`.
    pub async fn latest_for(workspace: &Path) -> anyhow::Result<Session> {
        let latest = list()?.into_iter().find(|m| m.workspace == workspace);
        match latest {
            Some(meta) => Session::open(&meta.id).await,
            None => Err(ConfigError(format!("no earlier session in {} to continue", workspace.display())).into()),
        }
    }

    /// The conversation so far, checked for call/result pairing, without its system prompt (the
    /// process continuing it builds its own: today's date, its `--system`/`--append-system`). A
    /// session that ended during tool calls (killed, the terminal closed) is repaired: each call
    /// still awaiting its result gets one saying it was interrupted, also written to the
    /// transcript, so the conversation can go on.
    pub fn history(&self) -> anyhow::Result<Vec<Message>> {
        self.read_history(true)
    }

    /// The conversation as a kill left it, under the system prompt its last turn was asked under:
    /// a turn cut off keeps its calls awaiting results, for a resume that goes on with that turn
    /// ([`recursive_core::runtime::cut_off`]).
    pub fn history_as_left(&self) -> anyhow::Result<Vec<Message>> {
        self.read_history(false)
    }

    fn read_history(&self, repair: bool) -> anyhow::Result<Vec<Message>> {
        let reading = || format!("reading session {}'s transcript", self.meta.id);
        let records = recursive_core::StoredRecords::records(&self.records).with_context(reading)?;
        let transcript = TranscriptLog::from_records(&records).with_context(reading)?;
        let pending: Vec<String> = transcript.pending_calls().map(str::to_string).collect();
        let mut messages = transcript.into_messages();
        let system = messages.iter().rev().find(|m| m.role == recursive_core::Role::System).cloned();
        messages.retain(|m| m.role != recursive_core::Role::System);
        if let Some(system) = system.filter(|_| !repair) {
            // The turn goes on as it was asked: under the system prompt it was asked under.
            messages.insert(0, system);
        }
        if repair && !pending.is_empty() {
            let mut log = self.log().with_context(|| format!("repairing session {}'s transcript", self.meta.id))?;
            for id in pending {
                let result = Message::tool_result(id, INTERRUPTED_CALL, true);
                log.append(&result).with_context(|| format!("repairing session {}'s transcript", self.meta.id))?;
                messages.push(result);
            }
        }
        Ok(messages)
    }

    /// Appends messages to the transcript (a note closing an interrupted answer).
    pub fn append(&self, messages: &[Message]) -> anyhow::Result<()> {
        let mut log = self.log()?;
        for m in messages {
            log.append(m)?;
        }
        Ok(())
    }

    /// Saves a compaction of the conversation (`/compact`): later processes continue from it.
    pub fn save_compacted(&self, messages: &[Message]) -> anyhow::Result<()> {
        let mut log = self.log()?;
        log.append_compacted(messages)?;
        Ok(())
    }

    /// The transcript's slot in the run store, for the agent that goes on with the session
    /// (`AgentConfig::transcript_store`, exported to `meta.transcript`).
    pub fn transcript_store(&self) -> std::sync::Arc<dyn recursive_core::StoredRecords> {
        std::sync::Arc::new(self.records.clone())
    }

    /// The transcript as this process appends to it: its store slot, exported.
    fn log(&self) -> anyhow::Result<TranscriptLog> {
        let log = TranscriptLog::kept(self.transcript_store(), Some(&self.meta.transcript))
            .with_context(|| format!("opening session {}'s transcript", self.meta.id))?;
        Ok(log)
    }

    /// Takes up the session's JSONL export before going on: a last line a kill cut short is
    /// cut off (with a warning naming it; the store kept the record), so the export goes on
    /// after whole lines. A session an earlier version kept in the file alone (the store holds
    /// none of it) moves into the store: the conversation as the file has it, as one record.
    fn take_up_export(&self) -> anyhow::Result<()> {
        if !self.meta.transcript.exists() {
            return Ok(());
        }
        let recovered = TranscriptLog::recover(&self.meta.transcript)
            .with_context(|| format!("reading session {}'s transcript", self.meta.id))?;
        if let Some(cut) = &recovered.cut {
            eprintln!("warning: session {}: {cut}", self.meta.id);
        }
        let kept = recursive_core::StoredRecords::records(&self.records)
            .with_context(|| format!("reading session {}'s transcript", self.meta.id))?;
        let messages = recovered.transcript.into_messages();
        if kept.is_empty() && !messages.is_empty() {
            let mut store_only = TranscriptLog::kept(self.transcript_store(), None)?;
            store_only.append_compacted(&messages).context("moving the transcript into the run store")?;
        }
        Ok(())
    }

    /// Adds one turn's usage, cost and outcome.
    pub fn record(&mut self, model: &str, result: &RunResult) -> anyhow::Result<()> {
        self.meta.turns += 1;
        self.meta.model = model.to_string();
        self.meta.input_tokens += result.usage.input_tokens;
        self.meta.output_tokens += result.usage.output_tokens;
        self.meta.cost_usd += result.cost_usd;
        self.meta.last_outcome = result.finish_reason.as_str().to_string();
        self.meta.updated = chrono::Local::now().to_rfc3339();
        self.save()
    }

    /// Names the session (`/rename`, or its first message when it was started without one).
    pub fn retitle(&mut self, title: &str) -> anyhow::Result<()> {
        self.meta.title = recursive_core::text::clip_chars(title.trim(), 80);
        self.save()
    }

    /// Adds the spend of a turn a kill cut off (restored from the session's journal).
    pub fn add_spend(&mut self, usage: &recursive_core::Usage, cost_usd: f64) -> anyhow::Result<()> {
        self.meta.input_tokens += usage.input_tokens;
        self.meta.output_tokens += usage.output_tokens;
        self.meta.cost_usd += cost_usd;
        self.meta.updated = chrono::Local::now().to_rfc3339();
        self.save()
    }

    /// Writes `session.json` whole: into a fresh file beside it (whatever was planted under
    /// that name is removed, never followed), renamed over it.
    fn save(&self) -> anyhow::Result<()> {
        use std::io::Write;
        let path = self.dir.join(META);
        let tmp = self.dir.join("session.json.tmp");
        let bytes = serde_json::to_vec_pretty(&self.meta)?;
        let write = || -> std::io::Result<()> {
            match std::fs::remove_file(&tmp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            file.write_all(&bytes)?;
            std::fs::rename(&tmp, &path)
        };
        write().with_context(|| format!("writing {}", path.display()))
    }
}

/// The file saying what a session is.
const META: &str = "session.json";
/// Largest `session.json` read (it holds a few short fields).
const META_MAX_BYTES: u64 = 1024 * 1024;

/// Why a session's `session.json` could not be read.
#[derive(Debug, thiserror::Error)]
enum MetaError {
    /// There is none.
    #[error("no session.json")]
    Missing,
    /// It is a link, a FIFO, a directory or a device.
    #[error("{0} is not a regular file")]
    NotRegular(String),
    /// It cannot be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is too large or not a session's.
    #[error("{0}")]
    Invalid(String),
}

/// Opens a session's file without following a link at its place and without blocking on a
/// FIFO there (`O_NOFOLLOW | O_NONBLOCK`), and only if it is a regular file.
fn open_regular(path: &Path, options: &mut std::fs::OpenOptions) -> Result<std::fs::File, MetaError> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = options.custom_flags(flags.bits()).open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MetaError::Missing,
        // A link at the place: O_NOFOLLOW refuses it with ELOOP.
        _ if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            MetaError::NotRegular(path.display().to_string())
        }
        _ => MetaError::Io(e),
    })?;
    if !file.metadata()?.is_file() {
        return Err(MetaError::NotRegular(path.display().to_string()));
    }
    Ok(file)
}

/// The `session.json` of the session in `dir`, read within [`META_MAX_BYTES`].
fn read_meta(dir: &Path) -> Result<SessionMeta, MetaError> {
    use std::io::Read;
    let file = open_regular(&dir.join(META), std::fs::OpenOptions::new().read(true))?;
    let mut bytes = Vec::new();
    file.take(META_MAX_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > META_MAX_BYTES {
        return Err(MetaError::Invalid(format!("{META} is larger than {META_MAX_BYTES} bytes")));
    }
    serde_json::from_slice(&bytes).map_err(|e| MetaError::Invalid(e.to_string()))
}

/// Moves a journal an earlier version kept in a file (`path`) into the run's store journal,
/// so a turn it cut off resumes as if it had been kept there; the file is then renamed
/// `*.imported`. A last record a kill cut short is skipped.
pub async fn import_file_journal(path: &Path, runner: &recursive_store::Runner) -> anyhow::Result<()> {
    use recursive_core::spend::SpendLedger;
    if !path.exists() {
        return Ok(());
    }
    let read = recursive_core::spend::read_ledger(path).with_context(|| format!("reading {}", path.display()))?;
    if let Some(cut) = &read.cut {
        eprintln!("warning: {cut}");
    }
    let ledger = recursive_store::StoreLedger::new(runner.store(), runner.journal_key());
    for record in &read.records {
        ledger.record(record).await.with_context(|| format!("moving {} into the run store", path.display()))?;
    }
    std::fs::rename(path, path.with_extension("jsonl.imported"))
        .with_context(|| format!("renaming {} after moving it into the run store", path.display()))
}

/// Every session, most recently updated first (damaged ones are skipped, with a warning for
/// one whose `session.json` is there but cannot be read).
pub fn list() -> anyhow::Result<Vec<SessionMeta>> {
    let root = root()?;
    let Ok(entries) = std::fs::read_dir(&root) else { return Ok(Vec::new()) };
    let mut metas: Vec<SessionMeta> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| match read_meta(&e.path()) {
            Ok(meta) => Some(meta),
            Err(MetaError::Missing) => None,
            Err(why) => {
                eprintln!("warning: session {} skipped: {why}", e.file_name().to_string_lossy());
                None
            }
        })
        .collect();
    metas.sort_by(|a, b| b.updated.cmp(&a.updated).then(b.id.cmp(&a.id)));
    Ok(metas)
}

/// Largest transcript read for [`earlier_prompts`].
const PROMPTS_MAX_TRANSCRIPT_BYTES: u64 = 4 * 1024 * 1024;

/// What people typed in the latest `sessions` other sessions of `workspace` (not `except`),
/// oldest first, for the chat's history search: each user message without the files attached
/// to it, notes the chat wrote for the model left out. Unreadable transcripts are skipped.
pub fn earlier_prompts(workspace: &Path, except: &str, sessions: usize) -> Vec<String> {
    let Ok(metas) = list() else { return Vec::new() };
    let mut prompts = Vec::new();
    let chosen: Vec<SessionMeta> =
        metas.into_iter().filter(|m| m.workspace == workspace && m.id != except).take(sessions).collect();
    for meta in chosen.iter().rev() {
        let small = std::fs::metadata(&meta.transcript).is_ok_and(|m| m.len() <= PROMPTS_MAX_TRANSCRIPT_BYTES);
        let Some(transcript) = small.then(|| TranscriptLog::read(&meta.transcript).ok()).flatten() else { continue };
        for m in transcript.messages().iter().filter(|m| m.role == recursive_core::Role::User) {
            let typed = m.content.split("\n\n[Attached file: ").next().unwrap_or_default().trim();
            if !typed.is_empty() && !typed.starts_with("[The user ") {
                prompts.push(typed.to_string());
            }
        }
    }
    prompts
}

/// One session in `chat --resume`'s picker: its title, how long ago it changed, its turns and
/// what it cost.
pub fn picker_line(meta: &SessionMeta, now: chrono::DateTime<chrono::Local>) -> String {
    let age = chrono::DateTime::parse_from_rfc3339(&meta.updated)
        .map(|t| ago(now.signed_duration_since(t)))
        .unwrap_or_else(|_| "?".into());
    let title = if meta.title.is_empty() { "(untitled)" } else { meta.title.as_str() };
    format!("{title} — {age} ago, {} turn(s), ${:.4}  [{}]", meta.turns, meta.cost_usd, meta.id)
}

/// A duration as people say it: `42s`, `5m`, `3h`, `2d`.
fn ago(d: chrono::TimeDelta) -> String {
    let secs = d.num_seconds().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_picker_says_title_age_turns_and_cost() {
        let now = chrono::Local::now();
        let meta = super::SessionMeta {
            id: "20261127-1".into(),
            created: String::new(),
            updated: (now - chrono::TimeDelta::minutes(5)).to_rfc3339(),
            workspace: "/w".into(),
            model: "m".into(),
            title: "fix the parser".into(),
            transcript: "/t".into(),
            turns: 3,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0125,
            last_outcome: String::new(),
        };
        assert_eq!(super::picker_line(&meta, now), "fix the parser — 5m ago, 3 turn(s), $0.0125  [20261127-1]");
    }
}

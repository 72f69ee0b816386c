//! Where a command's events go besides the screen, for one run of the program: the OTLP span
//! exporter (started at most once, flushed when the command ends) and the log files
//! (`--events`, `--trajectory`) whose failed writes make the exit status non-zero. `main`
//! makes one [`Exports`], hands it to the command and closes it when the command returns.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use recursive_core::EventSink;
use recursive_harness::Harness;
use recursive_telemetry::{OtlpSink, Settings, TelemetryFile};

/// How long the end of the command waits for the last spans to go out.
const TELEMETRY_FLUSH: Duration = Duration::from_secs(5);

/// Reports the first failed write of a log file, if any.
pub type LogCheck = Box<dyn Fn() -> Option<String> + Send>;

/// The exporter and the watched log files of one command (see the module docs).
#[derive(Default)]
pub struct Exports {
    /// The span exporter, once the first run scope asked: `None` when export is off or could
    /// not start (said once, then the runs go on without it).
    otlp: OnceLock<Option<Arc<OtlpSink>>>,
    /// The log files of the command's runs and how to ask each for a failed write.
    logs: Mutex<Vec<(&'static str, LogCheck)>>,
}

impl std::fmt::Debug for Exports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let logs = self.logs.lock().map(|l| l.len()).unwrap_or_default();
        f.debug_struct("Exports").field("otlp", &self.otlp).field("logs", &logs).finish()
    }
}

impl Exports {
    /// The span exporter when export is configured (standard `OTEL_*` variables or the
    /// `[telemetry]` table of `harness`'s configuration; `content` for `--otel-content`). The
    /// first call decides: later calls share its exporter, and a configuration that cannot
    /// start is said once.
    pub fn telemetry_sink(&self, harness: &Harness, content: bool) -> anyhow::Result<Option<Arc<dyn EventSink>>> {
        let file = telemetry_file(harness)?;
        let otlp = self.otlp.get_or_init(|| start(&file, content));
        Ok(otlp.clone().map(|sink| sink as Arc<dyn EventSink>))
    }

    /// Has a log file checked when the command ends: a failed write makes the exit status
    /// non-zero.
    pub fn watch_log(&self, flag: &'static str, check: LogCheck) {
        if let Ok(mut logs) = self.logs.lock() {
            logs.push((flag, check));
        }
    }

    /// Why a log file of the command is incomplete, if one is.
    pub fn incomplete_log(&self) -> Option<String> {
        let logs = self.logs.lock().ok()?;
        logs.iter().find_map(|(flag, check)| check().map(|e| format!("the {flag} file is incomplete: {e}")))
    }

    /// Sends the last spans (waiting at most [`TELEMETRY_FLUSH`]) and says what was lost.
    pub fn finish_telemetry(&self) {
        let Some(Some(sink)) = self.otlp.get() else { return };
        if let Some(loss) = sink.shutdown(TELEMETRY_FLUSH).loss() {
            eprintln!("warning: {loss}");
        }
    }
}

/// The `[telemetry]` table of `harness`'s configuration.
pub fn telemetry_file(harness: &Harness) -> Result<TelemetryFile, recursive_harness::ConfigError> {
    harness.config.section(&harness.config.file.telemetry, "telemetry")
}

/// Starts the exporter `file` and the environment ask for, if any; what keeps it from
/// starting is said and the run goes on.
fn start(file: &TelemetryFile, content: bool) -> Option<Arc<OtlpSink>> {
    let settings = match Settings::from_env(file, content) {
        Ok(settings) => settings?,
        Err(e) => {
            eprintln!("warning: OpenTelemetry export is off: {e}");
            return None;
        }
    };
    match OtlpSink::start(settings) {
        Ok(sink) => Some(Arc::new(sink)),
        Err(e) => {
            eprintln!("warning: {e}; the run goes on without it");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(message: &'static str) -> LogCheck {
        Box::new(move || Some(message.to_string()))
    }

    #[test]
    fn a_failed_log_write_is_reported_by_the_exports_that_watch_it_only() {
        let (watching, other) = (Exports::default(), Exports::default());
        watching.watch_log("--events", Box::new(|| None));
        assert_eq!(watching.incomplete_log(), None);
        watching.watch_log("--trajectory", failing("disk full"));
        assert_eq!(watching.incomplete_log().as_deref(), Some("the --trajectory file is incomplete: disk full"));
        assert_eq!(other.incomplete_log(), None);
    }
}

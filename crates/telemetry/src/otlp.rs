//! Export of the run tree's spans over OTLP (HTTP/protobuf or gRPC) with the `opentelemetry`
//! crates' exporters. An [`OtlpSink`] is an event sink that never blocks a run: it hands each
//! event to a thread of its own through a bounded queue (a full queue drops the event and
//! counts it); that thread turns events into spans ([`SpanModel`]) and exports them in batches,
//! each export bounded by a timeout. A collector that is down or never answers costs failed
//! exports, counted, and nothing else; whatever is lost — refused, timed out, dropped from a
//! full queue, still unsent when the process must end — is said by [`Counts::loss`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use recursive_core::{AgentEvent, EventSink};

use crate::spans::{Attr, Kind, Options, Span, SpanModel};

/// Events waiting for the export thread at most.
const QUEUE: usize = 8192;
/// Spans sent in one export at most.
const BATCH: usize = 512;
/// How often a partial batch is sent.
const INTERVAL: Duration = Duration::from_millis(500);
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTP with protobuf bodies (`/v1/traces`).
    HttpProtobuf,
    /// gRPC.
    Grpc,
}

impl Transport {
    /// Parses `OTEL_EXPORTER_OTLP_PROTOCOL`'s values (`http/protobuf`, `grpc`).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "http/protobuf" | "http" => Ok(Transport::HttpProtobuf),
            "grpc" => Ok(Transport::Grpc),
            other => Err(format!("unsupported OTLP protocol `{other}` (expected http/protobuf or grpc)")),
        }
    }
}

/// Where and how spans go.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The collector's traces endpoint (for HTTP, the full URL with `/v1/traces`).
    pub endpoint: String,
    /// The transport.
    pub transport: Transport,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// What the spans carry.
    pub options: Options,
}

/// Export failed to start.
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry export: {0}")]
pub struct ExportError(String);

/// What an export did, counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans lost to failed exports.
    pub failed: AtomicU64,
    /// Events dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Spans made from the events (exported, failed, or still waiting to be sent).
    pub made: AtomicU64,
    /// Set when [`OtlpSink::shutdown`] gave up before the last spans were sent: a collector
    /// that does not answer in time, or an export thread that ended early.
    pub unfinished: AtomicBool,
}

impl Counts {
    /// What was lost, in one sentence, if anything was: spans a collector refused or did not
    /// answer for, events dropped, spans still waiting when the export had to end.
    pub fn loss(&self) -> Option<String> {
        let failed = self.failed.load(Ordering::Relaxed);
        let dropped = self.dropped.load(Ordering::Relaxed);
        let unfinished = self.unfinished.load(Ordering::Relaxed);
        if failed == 0 && dropped == 0 && !unfinished {
            return None;
        }
        let mut parts =
            vec![format!("{failed} span(s) the collector did not take"), format!("{dropped} event(s) dropped")];
        if unfinished {
            let settled = self.exported.load(Ordering::Relaxed).saturating_add(failed);
            let waiting = self.made.load(Ordering::Relaxed).saturating_sub(settled);
            parts.push(format!("{waiting} span(s) and the run's last events still unsent when the export had to end"));
        }
        Some(format!("OpenTelemetry export lost {}", parts.join(", ")))
    }
}

enum Message {
    Event(Box<AgentEvent>),
    Flush(SyncSender<()>),
}

/// An event sink exporting the run tree as spans (see the module docs).
pub struct OtlpSink {
    queue: SyncSender<Message>,
    counts: Arc<Counts>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for OtlpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpSink").field("counts", &self.counts).finish()
    }
}

impl OtlpSink {
    /// Starts the export thread for `settings`.
    pub fn start(settings: Settings) -> Result<Self, ExportError> {
        let (queue, inbox) = std::sync::mpsc::sync_channel(QUEUE);
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let worker = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_thread(settings, inbox, shared, ready_tx))
            .map_err(|e| ExportError(format!("cannot start the export thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self { queue, counts, worker: Mutex::new(Some(worker)) }),
            Ok(Err(e)) => Err(ExportError(e)),
            Err(_) => Err(ExportError("the export thread ended at start".into())),
        }
    }

    /// Ends the spans still open, exports what is left and stops the thread, waiting at most
    /// `limit` (a collector that never answers is given up on then, and the spans still
    /// waiting are counted as lost: [`Counts::loss`]). Returns the counts.
    pub fn shutdown(&self, limit: Duration) -> &Counts {
        let deadline = Instant::now() + limit;
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        let flushed = self.queue_before(Message::Flush(done_tx), deadline)
            && done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok();
        if !flushed {
            self.counts.unfinished.store(true, Ordering::Relaxed);
        }
        if let Ok(mut worker) = self.worker.lock()
            && worker.as_ref().is_some_and(|w| w.is_finished())
            && let Some(w) = worker.take()
        {
            let _ = w.join();
        }
        &self.counts
    }
}

impl OtlpSink {
    /// Queues `message`, waiting while the queue is full until `deadline`; whether it went in.
    fn queue_before(&self, mut message: Message, deadline: Instant) -> bool {
        loop {
            match self.queue.try_send(message) {
                Ok(()) => return true,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
    }

    /// Hands an event to the export thread, waiting while the queue is full (for exporting a
    /// finished run's events, where nothing waits on it).
    pub fn send(&self, event: &AgentEvent) {
        if self.queue.send(Message::Event(Box::new(event.clone()))).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl EventSink for OtlpSink {
    fn emit(&self, event: &AgentEvent) {
        match self.queue.try_send(Message::Event(Box::new(event.clone()))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The export thread: its own single-threaded runtime, the exporter, the span model.
fn export_thread(
    settings: Settings,
    inbox: Receiver<Message>,
    counts: Arc<Counts>,
    ready: SyncSender<Result<(), String>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("no runtime: {e}")));
            return;
        }
    };
    let exporter = match runtime.block_on(async { exporter(&settings) }) {
        Ok(e) => e,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut model = SpanModel::new(settings.options);
    let mut batch: Vec<SpanData> = Vec::new();
    let mut sent_at = Instant::now();
    loop {
        let message = inbox.recv_timeout(INTERVAL);
        let flush = match message {
            Ok(Message::Event(event)) => {
                made(&mut batch, model.push(&event), &counts);
                None
            }
            Ok(Message::Flush(done)) => Some(done),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if flush.is_some() {
            made(&mut batch, model.finish(), &counts);
        }
        if !batch.is_empty() && (flush.is_some() || batch.len() >= BATCH || sent_at.elapsed() >= INTERVAL) {
            for chunk in std::mem::take(&mut batch).chunks(BATCH) {
                runtime.block_on(send(&exporter, chunk.to_vec(), &counts));
            }
            sent_at = Instant::now();
        }
        if let Some(done) = flush {
            let _ = done.send(());
            break;
        }
    }
}

/// Adds ended spans to the batch, counted as made.
fn made(batch: &mut Vec<SpanData>, spans: Vec<Span>, counts: &Counts) {
    counts.made.fetch_add(spans.len() as u64, Ordering::Relaxed);
    batch.extend(spans.into_iter().map(span_data));
}

/// The exporter for `settings`, with the `service.name` resource.
fn exporter(settings: &Settings) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let built = match settings.transport {
        Transport::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
        Transport::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
    };
    let mut exporter = built.map_err(|e| e.to_string())?;
    exporter.set_resource(&Resource::builder().with_service_name(settings.service_name.clone()).build());
    Ok(exporter)
}

async fn send(exporter: &opentelemetry_otlp::SpanExporter, spans: Vec<SpanData>, counts: &Counts) {
    let n = spans.len() as u64;
    match tokio::time::timeout(EXPORT_TIMEOUT + Duration::from_secs(1), exporter.export(spans)).await {
        Ok(Ok(())) => counts.exported.fetch_add(n, Ordering::Relaxed),
        _ => counts.failed.fetch_add(n, Ordering::Relaxed),
    };
}

/// One span in the SDK's export form.
fn span_data(span: Span) -> SpanData {
    let context = |id: u64| {
        SpanContext::new(
            TraceId::from(span.trace_id),
            SpanId::from(id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        )
    };
    let mut events = SpanEvents::default();
    events.events = span
        .notes
        .iter()
        .map(|n| opentelemetry::trace::Event::new(n.name.clone(), n.at, key_values(&n.attrs), 0))
        .collect();
    SpanData {
        span_context: context(span.span_id),
        parent_span_id: span.parent.map(SpanId::from).unwrap_or(SpanId::INVALID),
        parent_span_is_remote: false,
        span_kind: match span.kind {
            Kind::Client => SpanKind::Client,
            Kind::Internal => SpanKind::Internal,
        },
        name: Cow::Owned(span.name.clone()),
        start_time: span.start,
        end_time: span.end,
        attributes: key_values(&span.attrs),
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status: match &span.error {
            Some(why) => Status::error(why.clone()),
            None => Status::Ok,
        },
        instrumentation_scope: InstrumentationScope::builder("recursive")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

fn key_values(attrs: &[(String, Attr)]) -> Vec<KeyValue> {
    attrs
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Attr::Str(s) => Value::from(s.clone()),
                Attr::Int(i) => Value::from(*i),
                Attr::Float(f) => Value::from(*f),
                Attr::Bool(b) => Value::from(*b),
                Attr::Strs(list) => {
                    Value::Array(list.iter().map(|s| StringValue::from(s.clone())).collect::<Vec<_>>().into())
                }
            };
            KeyValue::new(k.clone(), value)
        })
        .collect()
}

//! The run tree seen from outside, built from its events:
//!
//! - [`spans`]: events → spans (one per run node, RLM iteration, goal, graph node, model call
//!   and tool call; GenAI semantic conventions for model calls);
//! - [`otlp`]: those spans exported over OTLP (HTTP/protobuf or gRPC), live from a sink that
//!   never blocks a run, or after the fact from an events file.
//!
//! Export is off unless an endpoint is configured: [`Settings::from_env`] reads the standard
//! `OTEL_EXPORTER_OTLP_*` variables (and `OTEL_SDK_DISABLED`), over the `[telemetry]` table of
//! `recursive.toml` ([`TelemetryFile`]).

pub mod otlp;
pub mod spans;

use recursive_core::config_trust::KeyClass;
use serde::Deserialize;

pub use otlp::{Counts, ExportError, OtlpSink, Settings, Transport};
pub use spans::{Options, SpanModel};

/// The `[telemetry]` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryFile {
    /// The OTLP endpoint (`http://host:4318` for HTTP, `http://host:4317` for gRPC).
    #[schemars(extend("x-trust" = KeyClass::loosening("every run's spans would be sent there")))]
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc`.
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub protocol: Option<String>,
    /// The `service.name` resource attribute (default `recursive`).
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub service_name: Option<String>,
    /// Prompts, completions, inputs and code in the spans.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::switch_on_loosens()))]
    pub content: bool,
}

impl Settings {
    /// The export settings, if export is on: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it
    /// is) or `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` added for HTTP), else `file`'s
    /// endpoint; `OTEL_EXPORTER_OTLP_PROTOCOL` / `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` over
    /// `file`'s protocol; `OTEL_SERVICE_NAME`; `OTEL_SDK_DISABLED=true` turns it off. `content`
    /// adds prompts and completions (`--otel-content`).
    pub fn from_env(file: &TelemetryFile, content: bool) -> Result<Option<Settings>, String> {
        let var = |name: &str| {
            recursive_core::env::var_os(name).and_then(|v| v.into_string().ok()).filter(|v| !v.trim().is_empty())
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .or_else(|| file.protocol.clone())
            .unwrap_or_else(|| "http/protobuf".into());
        let transport = Transport::parse(&protocol)?;
        let endpoint = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            (Some(exact), _) => exact,
            (None, Some(base)) => signal_endpoint(&base, transport),
            (None, None) => match &file.endpoint {
                Some(base) => signal_endpoint(base, transport),
                None => return Ok(None),
            },
        };
        let service_name =
            var("OTEL_SERVICE_NAME").or_else(|| file.service_name.clone()).unwrap_or_else(|| "recursive".into());
        Ok(Some(Settings { endpoint, transport, service_name, options: Options { content: content || file.content } }))
    }
}

/// The traces endpoint under a base endpoint: `/v1/traces` appended for HTTP.
pub fn signal_endpoint(base: &str, transport: Transport) -> String {
    match transport {
        Transport::HttpProtobuf if !base.ends_with("/v1/traces") => format!("{}/v1/traces", base.trim_end_matches('/')),
        _ => base.to_string(),
    }
}

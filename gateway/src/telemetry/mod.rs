//! Logs and traces: what the process writes to stderr (`FORGE_LOG_FORMAT`: `text`,
//! the default, or `json` with the trace and span ids of the job span an event is in)
//! and, when the standard `OTEL_*` variables ask for it, the OpenTelemetry traces it
//! exports over OTLP/HTTP.
//!
//! Tracing is **off unless** `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`,
//! and `OTEL_TRACES_EXPORTER` is not `none`). Then the SDK reads the rest itself:
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`; `grpc`
//! is refused at start: this build links no gRPC stack), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG` (default: parent-based, always on),
//! `OTEL_BSP_*`, `OTEL_RESOURCE_ATTRIBUTES`, and `OTEL_SERVICE_NAME` (default
//! `forge-gateway`).
//!
//! Only spans of the [`TARGET`] target become OpenTelemetry spans: one trace per job
//! (`job_trace.rs`) and a review whose caller sent a `traceparent`. HTTP request spans
//! and the rest of the gateway's `tracing` spans stay in the logs, so the hot paths
//! (reviews, the dispatcher) pay for no trace nobody asked for.

mod export_client;
pub mod job_trace;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use job_trace::JobTrace;

/// The `tracing` target of the spans exported as OpenTelemetry spans.
pub const TARGET: &str = "forge::trace";

/// Whether traces are exported (set once, at [`init`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces. Everything that would only build a span for
/// the exporter asks first.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// `FORGE_LOG_FORMAT`: how log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (`tracing_subscriber`'s default format).
    #[default]
    Text,
    /// One JSON object per line, with `traceId`/`spanId` inside a job's span.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = TelemetryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(TelemetryError::LogFormat(other.to_string())),
        }
    }
}

/// What stops logging or tracing from starting.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("FORGE_LOG_FORMAT: `{0}` is not a log format (text or json)")]
    LogFormat(String),
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL: `{0}` is not supported by this build (http/protobuf or \
         http/json; point it at the collector's OTLP/HTTP port, usually 4318)"
    )]
    Protocol(String),
    #[error("the OTLP trace exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("the OTLP exporter's HTTP client")]
    HttpClient(#[source] reqwest::Error),
}

/// The process's telemetry; [`Telemetry::shutdown`] flushes the spans not yet sent.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered (bounded by the exporter's timeout). Call it
    /// once the server has drained, from a blocking-capable context.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!("flushing traces at exit: {e}");
        }
    }
}

/// Starts logging (from `FORGE_LOG_FORMAT` and `RUST_LOG`) and, when configured, the
/// trace exporter. Call once, inside the Tokio runtime (the exporter sends through it).
pub fn init(default_filter: &str) -> Result<Telemetry, TelemetryError> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let format: LogFormat = env("FORGE_LOG_FORMAT")
        .map(|v| v.parse())
        .transpose()?
        .unwrap_or_default();
    let provider = if tracing_requested(&env) {
        Some(provider(&env)?)
    } else {
        None
    };
    let filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("forge-gateway"))
            .with_filter(filter_fn(|meta| meta.target() == TARGET))
    });
    let registry = tracing_subscriber::registry().with(otel);
    // A second init (tests start several gateways in one process) keeps the first.
    let _ = match format {
        // Colours only on a terminal: a pod's log (or a file) gets plain text.
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stdout().is_terminal())
                    .with_filter(filter()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                json_subscriber::layer()
                    .with_current_span(true)
                    .with_opentelemetry_ids(true)
                    .with_filter(filter()),
            )
            .try_init(),
    };
    if let Some(p) = &provider {
        opentelemetry::global::set_tracer_provider(p.clone());
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        ENABLED.store(true, Ordering::Relaxed);
        tracing::info!("exporting traces over OTLP/HTTP");
    }
    Ok(Telemetry { provider })
}

/// Whether the `OTEL_*` environment asks for traces.
fn tracing_requested(env: &impl Fn(&str) -> Option<String>) -> bool {
    let endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    endpoint && !disabled
}

/// The tracer provider: OTLP/HTTP through the gateway's reqwest client, batched, with
/// the SDK's sampler and resource from the environment.
fn provider(env: &impl Fn(&str) -> Option<String>) -> Result<SdkTracerProvider, TelemetryError> {
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let protocol = match protocol.as_str() {
        "http/protobuf" => opentelemetry_otlp::Protocol::HttpBinary,
        "http/json" => opentelemetry_otlp::Protocol::HttpJson,
        other => return Err(TelemetryError::Protocol(other.to_string())),
    };
    let client = export_client::ExportClient::new().map_err(TelemetryError::HttpClient)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_http_client(client)
        .build()
        .map_err(TelemetryError::Exporter)?;
    let mut resource = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("forge-gateway");
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_string())
        }
    }

    #[test]
    fn tracing_is_off_without_an_endpoint_or_when_disabled() {
        assert!(!tracing_requested(&env_of(&[])));
        assert!(tracing_requested(&env_of(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318"
        )])));
        assert!(tracing_requested(&env_of(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces"
        )])));
        assert!(!tracing_requested(&env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ])));
        assert!(!tracing_requested(&env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])));
    }

    #[tokio::test]
    async fn grpc_is_refused_with_the_variable_named() {
        let e = provider(&env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]))
            .expect_err("grpc is not linked");
        assert!(matches!(e, TelemetryError::Protocol(ref p) if p == "grpc"));
        assert!(e.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{e}");
    }

    #[test]
    fn log_formats_are_text_or_json() {
        assert_eq!("json".parse::<LogFormat>().ok(), Some(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>().ok(), Some(LogFormat::Text));
        let e = "yaml".parse::<LogFormat>().expect_err("not a format");
        assert!(e.to_string().starts_with("FORGE_LOG_FORMAT"), "{e}");
    }
}

//! Logs and traces: the `tracing` subscriber of the binary (text or JSON
//! lines on stderr, filtered by `AGENTHOST_LOG`), spans exported over OTLP
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and the W3C `traceparent`
//! that carries a caller's trace into a run or an orchestration's work.
//!
//! A run and an orchestration outlive the request that started them: they
//! run on a worker, maybe on another host, maybe after a restart. So the
//! trace context is stored with them (the `traceparent` of the request's
//! span), and the worker's span for them continues that trace.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours on a terminal).
    Text,
    /// One JSON object a line, with the span fields (for log shippers).
    Json,
}

/// What the default filter shows: the host at `info`, chatty dependencies
/// at `warn`.
const DEFAULT_FILTER: &str = "info,sqlx=warn,wasmtime=warn,cranelift_codegen=warn";

/// Keeps the exporter alive; dropping it sends the spans still queued.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("warning: could not send the last spans: {e}");
            }
        }
    }
}

/// Installs the subscriber. Errors (a bad `AGENTHOST_LOG`, an exporter
/// that cannot be built) are reported and the host runs with what works.
pub fn init(format: LogFormat) -> Telemetry {
    let (filter, bad_filter) = match EnvFilter::try_from_env("AGENTHOST_LOG") {
        Ok(filter) => (filter, None),
        Err(e) => (
            EnvFilter::new(DEFAULT_FILTER),
            std::env::var("AGENTHOST_LOG").ok().map(|v| (v, e)),
        ),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let (provider, exporter_error) = match exporter() {
        Ok(provider) => (provider, None),
        Err(e) => (None, Some(e)),
    };
    let otel = provider.as_ref().map(|provider| {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        tracing_opentelemetry::layer().with_tracer(provider.tracer("agenthost"))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .init();
    if let Some((value, e)) = bad_filter {
        tracing::warn!(AGENTHOST_LOG = %value, error = %e, "AGENTHOST_LOG is not a filter (e.g. `info,agenthost::durable=debug`); using the default");
    }
    if let Some(e) = exporter_error {
        tracing::warn!(error = %e, "traces are not exported");
    } else if provider.is_some() {
        EXPORTING.store(true, Ordering::Relaxed);
        tracing::info!("exporting traces over OTLP");
    }
    Telemetry { provider }
}

/// The OTLP exporter, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its traces
/// twin) is set. HTTP with protobuf, or JSON with
/// `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`; gRPC is not built in.
fn exporter() -> Result<Option<SdkTracerProvider>, String> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").ok().as_deref() {
        Some("http/json") => Protocol::HttpJson,
        None | Some("http/protobuf") => Protocol::HttpBinary,
        Some(other) => return Err(unsupported_protocol(other)),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| e.to_string())?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name("agenthost");
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

/// Set once spans are exported: work that must read a trace context from
/// the store does so only then.
static EXPORTING: AtomicBool = AtomicBool::new(false);

pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

fn unsupported_protocol(protocol: &str) -> String {
    format!(
        "OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: use http/protobuf or http/json"
    )
}

/// A span made only when spans are exported: nothing reads it otherwise,
/// and the hot paths (an episode, a tool call) should not pay for it.
pub(crate) fn traced(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if exporting() {
        make()
    } else {
        tracing::Span::none()
    }
}

/// The `traceparent` of the current span, to store with work it starts;
/// `None` when traces are not exported.
pub(crate) fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` continue the trace of `traceparent` (stored with a run or
/// an instance, or sent by a caller). A missing or malformed one leaves
/// the span a trace of its own.
pub(crate) fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else {
        return;
    };
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(context);
}

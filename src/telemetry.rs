//! Logs and traces: the tracing subscriber (text or JSON on stderr, `RUST_LOG` filter) and, in
//! builds with the cargo feature `otlp`, the OpenTelemetry exporter that sends each request's
//! span over OTLP/HTTP to the collector named by the standard `OTEL_EXPORTER_OTLP_*` variables.
//!
//! The request span joins the caller's W3C trace (`traceparent` from `_meta`, else from the HTTP
//! headers), so the gateway appears as one hop in the client's trace.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Environment variables that turn the OTLP exporter on (the OpenTelemetry specification's names).
pub const OTLP_ENDPOINT_VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// Set once the exporter runs: spans leave the process.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported (the OTLP exporter runs in this process).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Log line format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Keeps the exporter alive; [`Telemetry::shutdown`] sends what is still buffered.
#[must_use = "dropping the guard without shutdown may lose the last spans"]
pub struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the exporter. Call outside the async runtime: the OTLP HTTP client is a
    /// blocking one that runs on the exporter's own thread.
    pub fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider {
            if let Err(e) = provider.shutdown() {
                eprintln!("mrtr-gateway: OTLP exporter shutdown: {e}");
            }
        }
    }
}

fn otlp_requested() -> bool {
    OTLP_ENDPOINT_VARS
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// Installs the global subscriber; with `export`, also the OTLP exporter when one is configured
/// (the server exports; other subcommands, and stdio children that inherit the environment, do
/// not). Must run before the async runtime starts (see [`Telemetry::shutdown`]).
pub fn init(format: LogFormat, default_level: &str, export: bool) -> Telemetry {
    // `RUST_LOG` filters the log lines only: what is exported does not depend on it.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    let export = export && otlp_requested();

    #[cfg(feature = "otlp")]
    {
        let (tracer, provider) = match export.then(otlp::pipeline) {
            Some(Ok((tracer, provider))) => (Some(tracer), Some(provider)),
            Some(Err(e)) => {
                eprintln!("mrtr-gateway: OTLP exporter not started: {e}");
                (None, None)
            }
            None => (None, None),
        };
        // Without context activation a span stays a builder until it closes, so the caller's
        // trace, known only once the body is parsed, can still become its parent.
        // Only the gateway's own spans: events would pile up inside long-lived spans (a backend
        // session's) until they close.
        let layer = tracer.map(|tracer| {
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_context_activation(false)
                .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                    meta.is_span() && meta.target().starts_with(env!("CARGO_CRATE_NAME"))
                }))
        });
        registry.with(layer).init();
        EXPORTING.store(provider.is_some(), Ordering::Relaxed);
        Telemetry { provider }
    }
    #[cfg(not(feature = "otlp"))]
    {
        registry.init();
        if export {
            tracing::warn!(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set but this build has no OTLP exporter \
                 (cargo feature `otlp`); spans are not exported"
            );
        }
        Telemetry {}
    }
}

/// The trace id of a W3C `traceparent` among the caller's trace context, if one is valid.
pub(crate) fn trace_id_of(caller_trace: &[(&'static str, String)]) -> Option<String> {
    let (_, parent) = caller_trace
        .iter()
        .find(|(name, _)| *name == "traceparent")?;
    let trace_id = parent.split('-').nth(1)?;
    (trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| trace_id.to_ascii_lowercase())
}

/// Makes the current request span a child of the caller's trace (`traceparent` and
/// `tracestate`, as the request gave them: in `_meta`, else in the HTTP headers).
pub fn join_caller_trace(caller_trace: &[(&'static str, String)]) {
    // Only an exported span has a parent to take.
    #[cfg(feature = "otlp")]
    if exporting() {
        otlp::join_caller_trace(caller_trace);
    }
    #[cfg(not(feature = "otlp"))]
    let _ = caller_trace;
}

/// Writes the current span's trace context into `traceparent` / `tracestate`, so the next hop
/// (a forwarded retry's owner) continues this span's trace. Without export, the headers are
/// left as the caller sent them.
pub fn inject_current_trace(headers: &mut http::HeaderMap) {
    #[cfg(feature = "otlp")]
    if exporting() {
        otlp::inject_current_trace(headers);
    }
    #[cfg(not(feature = "otlp"))]
    let _ = headers;
}

#[cfg(feature = "otlp")]
mod otlp {
    use std::collections::HashMap;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{TraceContextExt, TracerProvider};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use opentelemetry_sdk::Resource;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    pub(super) fn pipeline() -> Result<
        (opentelemetry_sdk::trace::Tracer, SdkTracerProvider),
        opentelemetry_otlp::ExporterBuildError,
    > {
        // Endpoint, headers, timeout and compression come from the OTEL_EXPORTER_OTLP_* variables.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(env!("CARGO_PKG_NAME"));
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok((provider.tracer(env!("CARGO_PKG_NAME")), provider))
    }

    pub(super) fn inject_current_trace(headers: &mut http::HeaderMap) {
        let context = tracing::Span::current().context();
        if !context.span().span_context().is_valid() {
            return;
        }
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        for (name, value) in carrier {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::try_from(name),
                http::HeaderValue::try_from(value),
            ) {
                headers.insert(name, value);
            }
        }
    }

    pub(super) fn join_caller_trace(caller_trace: &[(&'static str, String)]) {
        let carrier: HashMap<String, String> = caller_trace
            .iter()
            .map(|(name, value)| ((*name).to_string(), value.clone()))
            .collect();
        if carrier.is_empty() {
            return;
        }
        let parent = TraceContextPropagator::new().extract(&carrier);
        if parent.span().span_context().is_valid() {
            // An error means the span is not exported (no layer, or filtered out): nothing to join.
            let _ = tracing::Span::current().set_parent(parent);
        }
    }
}

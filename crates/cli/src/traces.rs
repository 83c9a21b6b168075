//! OpenTelemetry traces over OTLP/HTTP (protobuf), off unless
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set; the exporter reads the other standard variables itself
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`). Spans are Postbox's own
//! `tracing` spans at INFO (emit, relay, handler), whatever POSTBOX_LOG
//! filters from the logs; [`postbox_trace`] carries their context with each
//! event.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

fn set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// The layer exporting Postbox's spans, when an OTLP endpoint is
/// configured. Must run inside the tokio runtime (the batch processor is a
/// task on it). An unusable configuration is an error naming the variable.
pub fn layer<S>() -> Result<Option<Box<dyn Layer<S> + Send + Sync>>, String>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ] {
        if let Ok(p) = std::env::var(var)
            && !p.is_empty()
            && p != "http/protobuf"
        {
            return Err(format!(
                "{var}={p:?}: Postbox exports traces over http/protobuf only"
            ));
        }
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("cannot set up the OTLP trace exporter: {e}"))?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let mut resource = Resource::builder();
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name("postbox");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("postbox");
    let _ = PROVIDER.set(provider);
    postbox_trace::set_enabled(true);
    let spans = Targets::new().with_target("postbox", tracing::Level::INFO);
    Ok(Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(spans)
            .boxed(),
    ))
}

/// Exports the spans still buffered; call before the process exits, from
/// outside the runtime's tasks.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get()
        && let Err(e) = provider.shutdown()
    {
        eprintln!("warning: traces not all exported: {e}");
    }
}

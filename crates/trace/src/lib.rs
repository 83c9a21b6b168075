//! W3C trace context carried with each event.
//!
//! An emit request's `traceparent` header (or, when traces are exported, a
//! new trace) is kept on the event's row as its `trace` attribute, outside
//! the hashed envelope. The relay, the worker, the handler span, webhook
//! requests (a `traceparent` header) and pull deliveries continue it, so one
//! event's path is one trace. Spans are `tracing` spans; the binary exports
//! them over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set and calls
//! [`set_enabled`]. When it is not, nothing here costs more than an atomic
//! load: received context is passed on as it came, and no span is made.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The event row's attribute (and a pull delivery's field) holding the
/// event's `traceparent`.
pub const ATTRIBUTE: &str = "trace";

/// The HTTP header of W3C Trace Context.
pub const HEADER: &str = "traceparent";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns span export on (the binary does so once it has installed an
/// OTLP exporter): from then on the parts of a node open spans and pass
/// their own context on.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The span context of a W3C `traceparent` (version 00), or None when it is
/// not one: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, ids not
/// all zero, lowercase hex.
pub fn parse(traceparent: &str) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if parts.next().is_some()
        || version != "00"
        || !hex(trace, 32)
        || !hex(span, 16)
        || !hex(flags, 2)
    {
        return None;
    }
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// `traceparent` of a span context.
pub fn format(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// Makes `span` a child of the remote span `traceparent` names (when it
/// names one; a malformed value starts no trace and is otherwise ignored).
pub fn follow(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(remote) = traceparent.and_then(parse) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
}

/// The `traceparent` to pass on from inside `span`: the span's own context
/// when spans are exported (so the next hop is its child), otherwise the
/// context received, as it came (if it is one).
pub fn pass_on(span: &tracing::Span, received: Option<&str>) -> Option<String> {
    if enabled() {
        let own = span.context().span().span_context().clone();
        if own.is_valid() {
            return Some(format(&own));
        }
    }
    received.and_then(parse).map(|remote| format(&remote))
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    const REMOTE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn only_well_formed_traceparents_parse() {
        let c = parse(REMOTE).unwrap();
        assert_eq!(format(&c), REMOTE);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad).is_none(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_followed_span_joins_the_remote_trace_and_passes_its_own_id_on() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        // Off: the received context is passed on unchanged.
        set_enabled(false);
        let passed_off = tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("hop");
            follow(&span, Some(REMOTE));
            let off = pass_on(&span, Some(REMOTE));
            set_enabled(true);
            let on = pass_on(&span, Some(REMOTE));
            set_enabled(false);
            (off, on)
        });
        assert_eq!(passed_off.0.as_deref(), Some(REMOTE));
        let on = parse(passed_off.1.as_deref().unwrap()).unwrap();
        assert_eq!(on.trace_id(), parse(REMOTE).unwrap().trace_id());
        assert_ne!(on.span_id(), parse(REMOTE).unwrap().span_id());
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].span_context.span_id(), on.span_id());
        assert_eq!(spans[0].parent_span_id, parse(REMOTE).unwrap().span_id());
    }
}

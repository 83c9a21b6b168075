//! The process's Prometheus recorder: the `metrics` facade the libraries
//! write histograms to (emit latency over HTTP, emit batch sizes, handler
//! latency and emit-to-completion per subscription) renders here, after
//! the hand-kept counters of `/v1/metrics`.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Buckets of every `*_seconds` histogram: 0.5 ms to a minute.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];
/// Buckets of every `*_events` histogram (events per commit).
const EVENTS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder (once per process); None if another recorder was
/// installed first.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let built = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_events".into()), EVENTS))
                .and_then(|b| b.install_recorder());
            match built {
                Ok(handle) => {
                    describe();
                    // Histograms keep their samples until upkeep folds them in.
                    let upkeep = handle.clone();
                    std::thread::Builder::new()
                        .name("metrics-upkeep".into())
                        .spawn(move || {
                            loop {
                                std::thread::sleep(Duration::from_secs(5));
                                upkeep.run_upkeep();
                            }
                        })
                        .ok()?;
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no histograms on /v1/metrics");
                    None
                }
            }
        })
        .as_ref()
}

/// The HELP lines of the metrics the libraries record.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "postbox_deliveries_total",
        Unit::Count,
        "Settled runs of a durable handler, per subscription and outcome (completed, retried, dead)."
    );
    describe_gauge!(
        "postbox_handlers_running",
        Unit::Count,
        "Durable handler runs in progress (claimed, not settled), per subscription."
    );
    describe_histogram!(
        "postbox_http_emit_seconds",
        Unit::Seconds,
        "POST /v1/events from its body read to its answer, by outcome (created, repeated, refused)."
    );
    describe_histogram!(
        "postbox_emit_batch_events",
        Unit::Count,
        "Events per emit transaction (a tenant's emits committed together)."
    );
    describe_histogram!(
        "postbox_handler_seconds",
        Unit::Seconds,
        "Durable handler runs, per subscription (a pull subscription's: until its consumer settles)."
    );
    describe_histogram!(
        "postbox_emit_to_completion_seconds",
        Unit::Seconds,
        "From an event's commit to its completion, per subscription."
    );
}

/// Appends the recorder's metrics to a `/v1/metrics` page.
pub fn render(out: &mut String) {
    if let Some(handle) = HANDLE.get().and_then(Option::as_ref) {
        out.push_str(&handle.render());
    }
}

//! Background verification: `postbox serve` recomputes every tenant's hash
//! chain from genesis every `--verify-every` (a day by default), so damage
//! to the file itself (an old event edited at rest, a row lost) is found
//! even if nobody runs `postbox verify`. A broken chain is logged, counted
//! in the metrics (`postbox_verify_broken_chains`) and named in the
//! reconciliation report's reasons, so `postbox status` says "attention".

use std::sync::{Arc, Mutex};
use std::time::Duration;

use postbox_engine::VerifyOptions;
use postbox_store::embedded::EmbeddedStore;
use tokio::sync::watch;

/// What the last background run found.
#[derive(Clone, Debug, Default)]
pub struct Verified {
    /// Runs finished since the node started.
    pub runs: u64,
    /// When the last run finished (ms since the epoch).
    pub last_finished_ms: Option<u64>,
    /// Events the last run checked.
    pub checked: u64,
    /// The broken chains of the last run: tenant, seq, what is wrong.
    pub broken: Vec<(String, u64, String)>,
    /// Why the last run could not finish, if it could not.
    pub failed: Option<String>,
}

/// The shared state a [`run`] task updates.
pub type State = Arc<Mutex<Verified>>;

/// Verifies every chain of `table` from genesis every `every`, until `stop`
/// turns true, recording each run in `state`.
pub async fn run(
    store: EmbeddedStore,
    table: &'static str,
    every: Duration,
    state: State,
    mut stop: watch::Receiver<bool>,
) {
    let store = Arc::new(store);
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let options = VerifyOptions {
            full: true,
            update_checkpoint: false,
            ..VerifyOptions::default()
        };
        let mut progress = |_: &postbox_engine::Progress| {};
        let run = postbox_engine::verify::verify_all(&store, table, &options, &mut progress);
        let outcome = tokio::select! {
            r = run => r,
            _ = stop.changed() => return,
        };
        let mut s = state.lock().expect("verify state");
        s.runs += 1;
        s.last_finished_ms = Some(postbox_engine::envelope::now_ms());
        match outcome {
            Ok(reports) => {
                s.failed = None;
                s.checked = reports.iter().map(|r| r.checked).sum();
                s.broken = reports
                    .iter()
                    .filter_map(|r| {
                        let (seq, problem) = r.broken.as_ref()?;
                        Some((r.tenant.clone(), *seq, problem.to_string()))
                    })
                    .collect();
                for (tenant, seq, problem) in &s.broken {
                    tracing::error!(%tenant, seq, %problem, "background verification: the chain is broken");
                }
                if s.broken.is_empty() {
                    tracing::info!(
                        checked = s.checked,
                        tenants = reports.len(),
                        "background verification: every chain is intact"
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "background verification could not finish");
                s.failed = Some(e.to_string());
            }
        }
    }
}

/// The metrics lines of `state`.
pub fn metrics(state: &Verified, out: &mut String) {
    use postbox_api::ops::{counter, gauge};
    counter(
        out,
        "postbox_verify_runs_total",
        "Background verifications finished.",
        state.runs,
    );
    gauge(
        out,
        "postbox_verify_broken_chains",
        "Broken chains found by the last background verification.",
        state.broken.len(),
    );
    gauge(
        out,
        "postbox_verify_failed",
        "Whether the last background verification could not finish.",
        u8::from(state.failed.is_some()),
    );
}

/// The report's fields and reasons for `state`.
pub fn report(state: &Verified, reasons: &mut Vec<serde_json::Value>) -> serde_json::Value {
    for (tenant, seq, problem) in &state.broken {
        reasons.push(serde_json::Value::from(format!(
            "background verification: tenant {tenant}'s chain is broken at seq {seq}: {problem}"
        )));
    }
    if let Some(e) = &state.failed {
        reasons.push(serde_json::Value::from(format!(
            "background verification could not finish: {e}"
        )));
    }
    serde_json::json!({
        "runs": state.runs,
        "last_finished_at": state.last_finished_ms.map(postbox_engine::envelope::format_timestamp),
        "checked": state.checked,
        "broken": state.broken.iter().map(|(t, s, p)| serde_json::json!({"tenant": t, "seq": s, "problem": p})).collect::<Vec<_>>(),
    })
}

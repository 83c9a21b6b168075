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

/// `--verify-every`: an interval, or None for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Every(pub Option<Duration>);

/// Parses `--verify-every` (see [`parse_every`]).
pub fn parse_flag(text: &str) -> Result<Every, String> {
    parse_every(text).map(Every)
}

/// Parses `off`, or a number with a unit (`s`, `m`, `h`, `d`).
pub fn parse_every(text: &str) -> Result<Option<Duration>, String> {
    if text == "off" {
        return Ok(None);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{text:?} is not `off` or a number with a unit (30s, 10m, 6h, 1d)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(format!(
                "{text:?}: the unit must be s, m, h or d (30s, 10m, 6h, 1d)"
            ));
        }
    };
    if secs == 0 {
        return Err("the interval must be at least 1s (or `off`)".to_owned());
    }
    Ok(Some(Duration::from_secs(secs)))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_take_a_unit_or_off() {
        assert_eq!(parse_every("off"), Ok(None));
        assert_eq!(parse_every("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse_every("10m"), Ok(Some(Duration::from_secs(600))));
        assert_eq!(parse_every("1d"), Ok(Some(Duration::from_secs(86_400))));
        for bad in ["", "10", "1w", "s", "0s", "-1h"] {
            assert!(parse_every(bad).is_err(), "{bad:?}");
        }
    }
}

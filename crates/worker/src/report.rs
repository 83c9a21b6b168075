//! The reconciliation report (SPEC §9) as a library call: per tenant, is
//! the chain intact, how far is the log, how many dead letters; for the
//! events queue, its depth, in-flight messages and its DLQ's depth; and
//! poison messages. Anything dead-lettered, poisoned, in a DLQ or a broken
//! chain means "attention".
//!
//! Not covered yet: relay lag (the relay's checkpoint against the stream
//! head), per-tenant queue depth (the queue counts per queue, not per
//! group), and events delivered to nobody (counted per worker process in
//! `WorkerStats`, not stored).

use std::sync::Arc;

use postbox_engine::VerifyOptions;
use postbox_queue::Queues;
use postbox_store::ItemStore;

use crate::error::{WorkerError, WorkerResult};
use crate::inbox::Inbox;

/// One tenant's line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantLine {
    /// The tenant.
    pub tenant: String,
    /// The head's seq.
    pub head_seq: u64,
    /// Whether the hash chain verified.
    pub chain_intact: bool,
    /// The first broken seq and what is wrong there.
    pub broken: Option<String>,
    /// Dead letters waiting for a replay.
    pub dead_letters: usize,
}

/// Overall verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing needs a person.
    Ok,
    /// Something does; the reasons, one per line.
    Attention(Vec<String>),
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciliation {
    /// Per tenant, in the order the events table lists them.
    pub tenants: Vec<TenantLine>,
    /// Visible messages in the events queue.
    pub queue_depth: u64,
    /// Messages in flight in the events queue.
    pub queue_in_flight: u64,
    /// Messages in the events queue's dead-letter queue (0 if it has none).
    pub dlq_depth: u64,
    /// Poison messages recorded.
    pub poison: usize,
    /// Ok or attention.
    pub verdict: Verdict,
}

/// Builds the report: verifies every tenant's chain (incrementally, from
/// its checkpoint), counts dead letters and poison messages, reads queue
/// depths.
pub async fn reconcile<S: ItemStore>(
    store: &Arc<S>,
    queues: &Queues,
    inbox: &Inbox<S>,
    events_table: &str,
    queue: &str,
) -> WorkerResult<Reconciliation> {
    let verified = postbox_engine::verify::verify_all(
        store,
        events_table,
        &VerifyOptions::default(),
        &mut |_| {},
    )
    .await
    .map_err(|e| WorkerError::Config(e.to_string()))?;
    let mut tenants = Vec::new();
    let mut reasons = Vec::new();
    for v in verified {
        let dead_letters = inbox.dead_letters(&v.tenant).await?.len();
        let broken = v.broken.as_ref().map(|(seq, p)| format!("seq {seq}: {p}"));
        if let Some(b) = &broken {
            reasons.push(format!("tenant {}: chain broken at {b}", v.tenant));
        }
        if dead_letters > 0 {
            reasons.push(format!(
                "tenant {}: {dead_letters} dead letter(s)",
                v.tenant
            ));
        }
        tenants.push(TenantLine {
            chain_intact: v.intact(),
            tenant: v.tenant,
            head_seq: v.head_seq,
            broken,
            dead_letters,
        });
    }
    let stats = queues.stats(queue)?;
    let dlq_depth = dead_letter_queue(queues, queue)
        .and_then(|dlq| queues.stats(&dlq).ok())
        .map_or(0, |s| s.visible + s.in_flight + s.delayed);
    if dlq_depth > 0 {
        reasons.push(format!(
            "{dlq_depth} message(s) in the dead-letter queue of {queue}"
        ));
    }
    let poison = inbox.poison_messages().await?.len();
    if poison > 0 {
        reasons.push(format!("{poison} poison message(s) recorded"));
    }
    Ok(Reconciliation {
        tenants,
        queue_depth: stats.visible + stats.delayed,
        queue_in_flight: stats.in_flight,
        dlq_depth,
        poison,
        verdict: if reasons.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Attention(reasons)
        },
    })
}

fn dead_letter_queue(queues: &Queues, queue: &str) -> Option<String> {
    let attrs = queues
        .queue_attributes(queue, &["RedrivePolicy".to_owned()])
        .ok()?;
    let policy: serde_json::Value = serde_json::from_str(attrs.get("RedrivePolicy")?).ok()?;
    let arn = policy.get("deadLetterTargetArn")?.as_str()?;
    arn.rsplit(':').next().map(str::to_owned)
}

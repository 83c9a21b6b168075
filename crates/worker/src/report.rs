//! The reconciliation report as a library call: per tenant, is
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
use postbox_queue::QueueClient;
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

impl TenantLine {
    /// What needs a person in this tenant, one line each (empty: nothing).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(b) = &self.broken {
            problems.push(format!("chain broken at {b}"));
        }
        if self.dead_letters > 0 {
            problems.push(format!("{} dead letter(s)", self.dead_letters));
        }
        problems
    }
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
pub async fn reconcile<S: ItemStore, Q: QueueClient>(
    store: &Arc<S>,
    queues: &Q,
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
        let line = line_of(inbox, v).await?;
        reasons.extend(
            line.problems()
                .into_iter()
                .map(|p| format!("tenant {}: {p}", line.tenant)),
        );
        tenants.push(line);
    }
    let attributes = queues
        .queue_attributes(queue, &depth_attributes(true))
        .await?;
    let queue_depth = count(&attributes, VISIBLE) + count(&attributes, DELAYED);
    let queue_in_flight = count(&attributes, IN_FLIGHT);
    let dlq_depth = match crate::worker::dead_letter_queue(&attributes) {
        Some(dlq) => queues
            .queue_attributes(&dlq, &depth_attributes(false))
            .await
            .map_or(0, |a| {
                count(&a, VISIBLE) + count(&a, IN_FLIGHT) + count(&a, DELAYED)
            }),
        None => 0,
    };
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
        queue_depth,
        queue_in_flight,
        dlq_depth,
        poison,
        verdict: if reasons.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Attention(reasons)
        },
    })
}

/// One tenant's line of the reconciliation, verifying that tenant's log
/// only: what a tenant's view of the report needs, without the work (and
/// the checkpoint writes) of verifying every other tenant. None when the
/// tenant has no log.
pub async fn tenant_line<S: ItemStore>(
    store: &Arc<S>,
    inbox: &Inbox<S>,
    events_table: &str,
    tenant: &str,
) -> WorkerResult<Option<TenantLine>> {
    let v = postbox_engine::verify::verify_tenant(
        store,
        events_table,
        tenant,
        &VerifyOptions::default(),
        &mut |_| {},
    )
    .await
    .map_err(|e| WorkerError::Config(e.to_string()))?;
    if v.head_seq == 0 && v.checked == 0 && v.intact() {
        return Ok(None);
    }
    Ok(Some(line_of(inbox, v).await?))
}

/// A verified tenant's line, with its dead letters counted.
async fn line_of<S: ItemStore>(
    inbox: &Inbox<S>,
    v: postbox_engine::verify::TenantReport,
) -> WorkerResult<TenantLine> {
    let dead_letters = inbox.dead_letters(&v.tenant).await?.len();
    let broken = v.broken.as_ref().map(|(seq, p)| format!("seq {seq}: {p}"));
    Ok(TenantLine {
        chain_intact: v.intact(),
        tenant: v.tenant,
        head_seq: v.head_seq,
        broken,
        dead_letters,
    })
}

const VISIBLE: &str = "ApproximateNumberOfMessages";
const IN_FLIGHT: &str = "ApproximateNumberOfMessagesNotVisible";
const DELAYED: &str = "ApproximateNumberOfMessagesDelayed";

/// The GetQueueAttributes names the report reads: the three depths, and the
/// redrive policy to find the dead-letter queue.
fn depth_attributes(with_redrive_policy: bool) -> Vec<String> {
    let mut names: Vec<String> = [VISIBLE, IN_FLIGHT, DELAYED].map(str::to_owned).into();
    if with_redrive_policy {
        names.push("RedrivePolicy".to_owned());
    }
    names
}

/// A count attribute; absent or unparsable counts as 0 (SQS calls them
/// approximate anyway).
fn count(attributes: &std::collections::BTreeMap<String, String>, name: &str) -> u64 {
    attributes
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

//! How a worker is set up: its options, and the check at startup that
//! claim rows outlive every message that could still come back for them
//! (the queue's retention, its dead-letter queue's, the deduplication
//! window).

use std::sync::Arc;
use std::time::Duration;

use postbox_engine::Envelope;
use postbox_queue::QueueClient;
use postbox_store::Clock;

use crate::error::{WorkerError, WorkerResult};
use crate::inbox::DEFAULT_INBOX_TABLE;

/// How a worker runs.
#[derive(Clone)]
pub struct WorkerOptions {
    /// This worker's name, recorded as the lease owner.
    pub owner: String,
    /// The events FIFO queue.
    pub queue: String,
    /// The events table (to read predecessors from the log).
    pub events_table: String,
    /// The inbox table.
    pub inbox_table: String,
    /// Lease length; renewed every third of it while a handler runs.
    pub lease: Duration,
    /// How long claim rows live after their last write.
    pub claim_retention: Duration,
    /// Long-poll wait of a receive, seconds (0..=20).
    pub wait_seconds: i64,
    /// Visibility of a message waiting for its predecessor, seconds.
    pub order_wait_seconds: i64,
    /// The source of "now" for leases and timestamps.
    pub clock: Arc<dyn Clock>,
    /// Claim a tenant's received messages together (see the module doc):
    /// every (event, subscription) of the group in one round of concurrent
    /// writes. Off: each message is a batch of one, so no claim is taken
    /// for a tenant's next message before this one is settled (the baseline
    /// of the worker bench).
    pub batch: bool,
    /// Called after each completion committed, with the event and the
    /// subscription (metrics; benchmarks measure latency with it).
    pub on_completed: Option<CompletionHook>,
    /// Batches one [`Worker::run`](super::Worker::run) loop keeps in
    /// flight: above 1 it receives again as soon as a batch is handed to its
    /// own task, so each receive takes what arrived meanwhile (up to 10)
    /// instead of many idle loops each waking for one message. The FIFO
    /// queue never hands one group to two batches at once. Default 8: a
    /// tenant's events complete one commit after another, so throughput
    /// with few subscriptions comes from many tenants' batches sharing each
    /// commit.
    pub batches_in_flight: usize,
}

/// See [`WorkerOptions::on_completed`].
pub type CompletionHook = Arc<dyn Fn(&Envelope, &str) + Send + Sync>;

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            owner: format!("worker-{}-{:08x}", std::process::id(), fastrand::u32(..)),
            queue: postbox_topology::EVENTS_QUEUE.into(),
            events_table: postbox_topology::EVENTS_TABLE.into(),
            inbox_table: DEFAULT_INBOX_TABLE.into(),
            lease: Duration::from_secs(30),
            claim_retention: Duration::from_secs(30 * 24 * 3600),
            wait_seconds: 1,
            order_wait_seconds: 1,
            clock: Arc::new(postbox_store::SystemClock),
            batch: true,
            on_completed: None,
            batches_in_flight: 8,
        }
    }
}

impl std::fmt::Debug for WorkerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerOptions")
            .field("owner", &self.owner)
            .field("queue", &self.queue)
            .field("lease", &self.lease)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// The longest a message can come back after its first send: the queue's
/// retention, its dead-letter queue's retention (a redrive moves it back)
/// and the 5-minute deduplication window. Claims must outlive it.
pub fn check_retention(
    claim_retention: Duration,
    queue_retention: Duration,
    dlq_retention: Duration,
) -> WorkerResult<()> {
    let dedup = Duration::from_secs(300);
    let needed = queue_retention + dlq_retention + dedup;
    if claim_retention < needed {
        return Err(WorkerError::Config(format!(
            "claim rows live {}s but a message can come back for {}s (queue retention {}s + DLQ retention {}s + dedup window {}s); \
             raise the claim retention to at least {}s or shorten the queues' retention",
            claim_retention.as_secs(),
            needed.as_secs(),
            queue_retention.as_secs(),
            dlq_retention.as_secs(),
            dedup.as_secs(),
            needed.as_secs()
        )));
    }
    Ok(())
}

/// The retention of `queue` and of its dead-letter queue (zero if none).
pub(super) async fn queue_retentions<Q: QueueClient>(
    queues: &Q,
    queue: &str,
) -> WorkerResult<(Duration, Duration)> {
    let names = [
        "MessageRetentionPeriod".to_owned(),
        "RedrivePolicy".to_owned(),
    ];
    let attrs = queues.queue_attributes(queue, &names).await?;
    let secs = |a: &std::collections::BTreeMap<String, String>| {
        a.get("MessageRetentionPeriod")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(345_600)
    };
    let own = secs(&attrs);
    let dlq = match dead_letter_queue(&attrs) {
        Some(name) => queues
            .queue_attributes(&name, &names)
            .await
            .ok()
            .map_or(0, |a| secs(&a)),
        None => 0,
    };
    Ok((Duration::from_secs(own), Duration::from_secs(dlq)))
}

/// The name of the dead-letter queue in a queue's `RedrivePolicy`
/// attribute, if it has one.
pub(crate) fn dead_letter_queue(
    attributes: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let policy: serde_json::Value = serde_json::from_str(attributes.get("RedrivePolicy")?).ok()?;
    let arn = policy.get("deadLetterTargetArn")?.as_str()?;
    arn.rsplit(':').next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_shorter_than_a_message_can_live_is_refused_with_the_numbers() {
        let day = Duration::from_secs(86_400);
        let e = check_retention(day, 4 * day, 14 * day)
            .unwrap_err()
            .to_string();
        assert!(e.contains("86400s") && e.contains("1555500s"), "{e}");
        check_retention(30 * day, 4 * day, 14 * day).unwrap();
    }
}

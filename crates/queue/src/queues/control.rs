//! The control plane: create, find, list, configure, purge and delete
//! queues, and their attributes and metrics.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::attributes::{COMPUTED, QueueConfig, validate_queue_name};
use crate::core::{Counts, QueueCore};
use crate::error::{QueueError, QueueResult};
use crate::stats::QueueStats;
use crate::storage::{QueueRecord, Tables};

use super::{Inner, QueueShared, Queues, first_seq, new_handle};

/// One PurgeQueue per queue in this interval.
const PURGE_INTERVAL_MS: u64 = 60_000;

impl Queues {
    /// Creates queue `name` with `attributes` (CreateQueue's map). Creating
    /// an existing queue succeeds when every attribute given has the value the
    /// queue has, and fails with QueueNameExists otherwise.
    pub async fn create_queue(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
    ) -> QueueResult<()> {
        self.create_queue_tagged(name, attributes, BTreeMap::new())
            .await
    }

    /// [`Queues::create_queue`] with tags (they apply only when the queue is
    /// new).
    pub async fn create_queue_tagged(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    ) -> QueueResult<()> {
        check_tags(&tags)?;
        let fifo = match attributes.get("FifoQueue").map(|v| v.to_ascii_lowercase()) {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(_) => {
                return Err(QueueError::InvalidAttributeValue(
                    "Invalid value for the parameter FifoQueue.".into(),
                ));
            }
        };
        validate_queue_name(name, fifo)?;
        let mut config = QueueConfig::new(fifo);
        config.apply(&attributes, true)?;
        self.inner.check_redrive(name, &config)?;
        if let Some(existing) = self.inner.lookup(name) {
            return conflict(&existing.lock().record.config, &attributes);
        }
        let inner = self.inner.clone();
        let name = name.to_owned();
        self.inner
            .submit(move |ctx| {
                if let Some(existing) = inner.lookup(&name) {
                    return Ok(conflict(&existing.lock().record.config, &attributes));
                }
                let now = ctx.now_ms();
                let mut tables = Tables::open(ctx.transaction())?;
                let record = QueueRecord {
                    id: tables.next_queue_id()?,
                    name: name.clone(),
                    config,
                    created_at: now,
                    modified_at: now,
                    tags,
                };
                tables.put_queue(&record)?;
                let core = QueueCore::new(record.config.fifo, first_seq(now));
                inner
                    .registry
                    .write()
                    .expect("registry lock")
                    .insert(name, Arc::new(new_handle(record, core)));
                Ok(Ok(()))
            })
            .await
    }

    /// Succeeds when queue `name` exists (GetQueueUrl).
    pub fn queue_exists(&self, name: &str) -> QueueResult<()> {
        self.inner.handle(name).map(|_| ())
    }

    /// Names of the queues starting with `prefix`, in name order.
    pub fn list_queues(&self, prefix: &str) -> Vec<String> {
        let registry = self.inner.registry.read().expect("registry lock");
        registry
            .keys()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Queues whose redrive policy names `name` as their dead-letter queue.
    pub fn dead_letter_sources(&self, name: &str) -> QueueResult<Vec<String>> {
        self.inner.handle(name)?;
        Ok(self.inner.sources_of(name))
    }

    /// Deletes a queue and its messages.
    pub async fn delete_queue(&self, name: &str) -> QueueResult<()> {
        let handle = self.inner.handle(name)?;
        let inner = self.inner.clone();
        self.inner
            .submit_live(handle, move |ctx, handle| {
                let mut tables = Tables::open(ctx.transaction())?;
                let mut shared = handle.lock();
                tables.drop_queue(&shared.record)?;
                shared.deleted = true;
                shared.core.purge();
                drop(shared);
                inner
                    .registry
                    .write()
                    .expect("registry lock")
                    .remove(&handle.name);
                handle.wake_all();
                Ok(Ok(()))
            })
            .await
    }

    /// Deletes every message of a queue.
    pub async fn purge_queue(&self, name: &str) -> QueueResult<()> {
        let handle = self.inner.handle(name)?;
        self.inner
            .submit_live(handle, move |ctx, handle| {
                let now = ctx.now_ms();
                let mut tables = Tables::open(ctx.transaction())?;
                let mut shared = handle.lock();
                if shared
                    .last_purge
                    .is_some_and(|at| now < at + PURGE_INTERVAL_MS)
                {
                    return Ok(Err(QueueError::PurgeQueueInProgress(format!(
                        "Only one PurgeQueue operation on {} is allowed every 60 seconds.",
                        handle.name
                    ))));
                }
                tables.remove_all_messages(handle.id)?;
                shared.core.purge();
                shared.attempts.clear();
                shared.last_purge = Some(now);
                Ok(Ok(()))
            })
            .await
    }

    /// GetQueueAttributes: the attributes named (`All` for every one SQS
    /// has). Postbox also answers `ApproximateAgeOfOldestMessage` (seconds;
    /// CloudWatch's metric in SQS) when it is asked for by name.
    pub fn queue_attributes(
        &self,
        name: &str,
        names: &[String],
    ) -> QueueResult<BTreeMap<String, String>> {
        let handle = self.inner.handle(name)?;
        let now = self.inner.now();
        let mut shared = handle.lock();
        let counts = self.inner.count(&mut shared, now);
        let record = &shared.record;
        let mut all = record.config.render();
        all.insert(
            "ApproximateNumberOfMessages".into(),
            counts.visible.to_string(),
        );
        all.insert(
            "ApproximateNumberOfMessagesNotVisible".into(),
            counts.in_flight.to_string(),
        );
        all.insert(
            "ApproximateNumberOfMessagesDelayed".into(),
            counts.delayed.to_string(),
        );
        all.insert(
            "CreatedTimestamp".into(),
            (record.created_at / 1000).to_string(),
        );
        all.insert(
            "LastModifiedTimestamp".into(),
            (record.modified_at / 1000).to_string(),
        );
        all.insert("QueueArn".into(), self.inner.arn(name));
        if names.iter().any(|n| n == "All") {
            return Ok(all);
        }
        let oldest_age_s = counts
            .oldest_sent_at
            .map_or(0, |t| now.saturating_sub(t) / 1000);
        all.insert(OLDEST_AGE.into(), oldest_age_s.to_string());
        let mut out = BTreeMap::new();
        for n in names {
            if !known_attribute(n) {
                return Err(QueueError::InvalidAttributeName(n.clone()));
            }
            if let Some(v) = all.get(n) {
                out.insert(n.clone(), v.clone());
            }
        }
        Ok(out)
    }

    /// SetQueueAttributes: applies all of `attributes` or none.
    pub async fn set_queue_attributes(
        &self,
        name: &str,
        attributes: BTreeMap<String, String>,
    ) -> QueueResult<()> {
        let handle = self.inner.handle(name)?;
        if let Some(computed) = attributes.keys().find(|k| COMPUTED.contains(&k.as_str())) {
            return Err(QueueError::InvalidAttributeName(computed.clone()));
        }
        let mut config = handle.lock().record.config.clone();
        config.apply(&attributes, false)?;
        self.inner.check_redrive(name, &config)?;
        self.inner
            .submit_live(handle, move |ctx, handle| {
                let now = ctx.now_ms();
                let mut tables = Tables::open(ctx.transaction())?;
                let mut shared = handle.lock();
                let mut record = shared.record.clone();
                // Applied again to the current configuration: another change
                // may have committed since the validation above.
                if let Err(e) = record.config.apply(&attributes, false) {
                    return Ok(Err(e));
                }
                record.modified_at = now;
                tables.put_queue(&record)?;
                shared.record = record;
                drop(shared);
                handle.wake_all();
                Ok(Ok(()))
            })
            .await
    }

    /// Adds or replaces tags of a queue (at most 50 in all).
    pub async fn tag_queue(&self, name: &str, tags: BTreeMap<String, String>) -> QueueResult<()> {
        check_tags(&tags)?;
        self.change_tags(name, move |all| {
            all.extend(tags);
            check_tags(all)
        })
        .await
    }

    /// Removes tags of a queue by key.
    pub async fn untag_queue(&self, name: &str, keys: Vec<String>) -> QueueResult<()> {
        self.change_tags(name, move |all| {
            keys.iter().for_each(|k| {
                all.remove(k);
            });
            Ok(())
        })
        .await
    }

    /// A queue's tags.
    pub fn queue_tags(&self, name: &str) -> QueueResult<BTreeMap<String, String>> {
        Ok(self.inner.handle(name)?.lock().record.tags.clone())
    }

    async fn change_tags(
        &self,
        name: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> QueueResult<()> + Send + 'static,
    ) -> QueueResult<()> {
        let handle = self.inner.handle(name)?;
        self.inner
            .submit_live(handle, move |ctx, handle| {
                let mut shared = handle.lock();
                let mut record = shared.record.clone();
                if let Err(e) = change(&mut record.tags) {
                    return Ok(Err(e));
                }
                Tables::open(ctx.transaction())?.put_queue(&record)?;
                shared.record = record;
                Ok(Ok(()))
            })
            .await
    }

    /// Depth, in flight, delayed, oldest age and counters of one queue.
    pub fn stats(&self, name: &str) -> QueueResult<QueueStats> {
        let handle = self.inner.handle(name)?;
        let now = self.inner.now();
        let mut shared = handle.lock();
        let counts = self.inner.count(&mut shared, now);
        let mut stats = QueueStats {
            name: name.to_owned(),
            visible: counts.visible,
            in_flight: counts.in_flight,
            delayed: counts.delayed,
            oldest_age_ms: counts.oldest_sent_at.map_or(0, |t| now.saturating_sub(t)),
            ..QueueStats::default()
        };
        stats.fill_counters(&handle.counters);
        Ok(stats)
    }

    /// Makes every waiting long poll look again: for a clock moved forward
    /// by hand, which their timers do not see.
    pub fn time_moved(&self) {
        for handle in self.inner.registry.read().expect("registry lock").values() {
            handle.wake_all();
        }
    }

    /// How many messages counting (GetQueueAttributes asked for a count,
    /// [`Queues::stats`], the metrics) has looked at one by one since the
    /// queues opened: only messages past retention that the expiry task
    /// has not removed yet, or every message after the clock was set back
    /// ([`QueueCore::counts`]). Tests use it to show that counting a deep
    /// queue does not walk it.
    pub fn messages_counted(&self) -> u64 {
        self.inner
            .messages_counted
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`Queues::stats`] of every queue.
    pub fn all_stats(&self) -> Vec<QueueStats> {
        self.list_queues("")
            .iter()
            .filter_map(|n| self.stats(n).ok())
            .collect()
    }
}

/// SQS's tag limits: 50 tags, keys 1-128 and values up to 256 characters.
fn check_tags(tags: &BTreeMap<String, String>) -> QueueResult<()> {
    if tags.len() > 50 {
        return Err(QueueError::invalid(
            "Too many tags added for queue. A queue can have at most 50 tags.",
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 || v.chars().count() > 256 {
            return Err(QueueError::invalid(format!(
                "Tag {k} is invalid: keys are 1 to 128 characters and values up to 256."
            )));
        }
    }
    Ok(())
}

/// Postbox's extension attribute: the age of the oldest message, seconds.
const OLDEST_AGE: &str = "ApproximateAgeOfOldestMessage";

fn known_attribute(name: &str) -> bool {
    name == OLDEST_AGE
        || COMPUTED.contains(&name)
        || matches!(
            name,
            "DelaySeconds"
                | "MaximumMessageSize"
                | "MessageRetentionPeriod"
                | "ReceiveMessageWaitTimeSeconds"
                | "VisibilityTimeout"
                | "RedrivePolicy"
                | "RedriveAllowPolicy"
                | "FifoQueue"
                | "ContentBasedDeduplication"
                | "DeduplicationScope"
                | "FifoThroughputLimit"
                | "Policy"
                | "KmsMasterKeyId"
                | "KmsDataKeyReusePeriodSeconds"
                | "SqsManagedSseEnabled"
        )
}

/// CreateQueue of an existing queue: the attributes given must match.
fn conflict(existing: &QueueConfig, attributes: &BTreeMap<String, String>) -> QueueResult<()> {
    match existing.first_conflict(attributes) {
        Ok(None) => Ok(()),
        Ok(Some(name)) => Err(QueueError::QueueNameExists(name)),
        // Attributes that cannot apply to the existing queue (say FifoQueue
        // for a standard one) differ from it too.
        Err(_) => Err(QueueError::QueueNameExists(
            attributes.keys().next().cloned().unwrap_or_default(),
        )),
    }
}

impl Inner {
    /// Counts the messages of a queue by state at `now` (see
    /// [`QueueCore::counts`] and [`Queues::messages_counted`]).
    fn count(&self, shared: &mut QueueShared, now: u64) -> Counts {
        let before = shared.core.walked();
        let retention_ms = shared.record.config.message_retention_period as u64 * 1000;
        let counts = shared.core.counts(now, retention_ms);
        self.messages_counted.fetch_add(
            shared.core.walked() - before,
            std::sync::atomic::Ordering::Relaxed,
        );
        counts
    }

    /// A redrive policy must name an existing dead-letter queue of the same
    /// kind, other than the queue itself.
    pub(crate) fn check_redrive(&self, name: &str, config: &QueueConfig) -> QueueResult<()> {
        let Some(policy) = &config.redrive_policy else {
            return Ok(());
        };
        let invalid = |why: &str| {
            QueueError::InvalidAttributeValue(format!(
                "Value {{\"deadLetterTargetArn\":\"{}\",\"maxReceiveCount\":{}}} for parameter RedrivePolicy is invalid. Reason: {why}",
                policy.dead_letter_target_arn, policy.max_receive_count
            ))
        };
        if policy.dead_letter_queue == name {
            return Err(invalid("Dead-letter queue cannot be the queue itself."));
        }
        let Some(dlq) = self.lookup(&policy.dead_letter_queue) else {
            return Err(invalid("Dead letter target does not exist."));
        };
        let dlq_config = dlq.lock().record.config.clone();
        if dlq_config.fifo != config.fifo {
            return Err(invalid(
                "Dead-letter queue must be same type of queue as the source.",
            ));
        }
        if !dlq_config.allows_source(&self.arn(name)) {
            return Err(invalid(
                "The dead-letter queue's RedriveAllowPolicy does not allow this queue as a source.",
            ));
        }
        Ok(())
    }

    /// Queues whose redrive policy names `dlq`.
    pub(crate) fn sources_of(&self, dlq: &str) -> Vec<String> {
        let registry = self.registry.read().expect("registry lock");
        registry
            .values()
            .filter(|h| {
                h.lock()
                    .record
                    .config
                    .redrive_policy
                    .as_ref()
                    .is_some_and(|p| p.dead_letter_queue == dlq)
            })
            .map(|h| h.name.clone())
            .collect()
    }
}

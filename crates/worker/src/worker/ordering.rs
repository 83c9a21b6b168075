//! Order within a tenant: an event runs for a subscription only once the
//! subscription's previous matching event in the tenant's log is COMPLETED
//! or DEAD. A predecessor with no claim at all is read from the log and
//! delivered first; the per-worker order cache remembers, per (tenant,
//! subscription), the seq up to which this is known, so the common case
//! costs no read.

use std::collections::HashMap;
use std::sync::Mutex;

use postbox_engine::{Envelope, layout};
use postbox_item::AttributeValue;
use postbox_queue::QueueClient;
use postbox_store::ItemStore;
use postbox_store::api::{QueryInput, Values};

use super::Worker;
use super::process::{Boxed, Step};
use super::settle::Outcome;
use super::stats::bump;
use crate::claim::ClaimKey;
use crate::error::{WorkerError, WorkerResult};

impl<S: ItemStore, Q: QueueClient> Worker<S, Q> {
    /// Whether every earlier event of the tenant that matches subscription
    /// `index` is COMPLETED or DEAD; a predecessor with no claim is
    /// delivered from the log first.
    pub(super) async fn predecessor_settled(
        &self,
        envelope: &Envelope,
        index: usize,
        depth: usize,
    ) -> WorkerResult<bool> {
        let sub = &self.inner.subscriptions[index];
        let cached = self.inner.order.settled_upto(&envelope.tenant, &sub.name);
        if known_settled_before(envelope.seq, cached) {
            return Ok(true);
        }
        // The nearest earlier event of the tenant this subscription matches.
        let Some(previous) = self.previous_matching(envelope, index, cached).await? else {
            return Ok(true);
        };
        let key = ClaimKey::new(&previous.id, &sub.name);
        match self.inner.inbox.get(&key).await? {
            Some(row) if row.status.is_final() => Ok(true),
            Some(_) => Ok(false),
            None if depth >= 64 => Ok(false),
            None => {
                bump(&self.inner.counters.predecessors_from_log);
                let o = self
                    .deliver_predecessor(&previous, index, depth + 1)
                    .await?;
                Ok(o == Outcome::Settled)
            }
        }
    }

    /// Delivers a predecessor read from the log to subscription `index` the
    /// way a chunk delivers its own events (ordered, claimed, run, settled),
    /// with no message to keep hidden. `depth` counts the predecessors
    /// being delivered so.
    fn deliver_predecessor<'a>(
        &'a self,
        envelope: &'a Envelope,
        index: usize,
        depth: usize,
    ) -> Boxed<'a, WorkerResult<Outcome>> {
        Box::pin(async move {
            match self.claim_step(envelope, index, true, depth).await? {
                Step::Run(row) => self.run_claimed(envelope, index, *row, None).await,
                Step::Done(outcome) => Ok(outcome),
            }
        })
    }

    /// Records that `envelope` is settled for `sub`; its predecessors were
    /// checked before it ran, so every matching event up to it is settled.
    pub(super) fn mark_settled(&self, envelope: &Envelope, sub: &str) {
        self.inner
            .order
            .mark_settled(&envelope.tenant, sub, envelope.seq);
    }

    /// The latest event before `envelope` in its tenant's log whose type
    /// subscription `index` matches, above seq `floor` (below it all are
    /// known settled).
    async fn previous_matching(
        &self,
        envelope: &Envelope,
        index: usize,
        floor: u64,
    ) -> WorkerResult<Option<Envelope>> {
        let sub = &self.inner.subscriptions[index];
        let mut start = None;
        loop {
            let page = self
                .inner
                .store
                .query(QueryInput {
                    table_name: self.inner.options.events_table.clone(),
                    key_condition_expression: Some("pk = :pk AND sk BETWEEN :lo AND :hi".into()),
                    expression_attribute_values: Some(Values::from([
                        (
                            ":pk".to_owned(),
                            AttributeValue::S(layout::event_pk(&envelope.tenant)),
                        ),
                        (
                            ":lo".to_owned(),
                            AttributeValue::S(layout::seq_sk(floor + 1)),
                        ),
                        (
                            ":hi".to_owned(),
                            AttributeValue::S(layout::seq_sk(envelope.seq - 1)),
                        ),
                    ])),
                    scan_index_forward: Some(false),
                    limit: Some(64),
                    exclusive_start_key: start,
                    consistent_read: Some(true),
                    ..Default::default()
                })
                .await?;
            for item in page.items.unwrap_or_default() {
                let (e, _) = layout::envelope_of(&item).map_err(|m| WorkerError::MissingEvent {
                    tenant: envelope.tenant.clone(),
                    seq: envelope.seq,
                    detail: m.0,
                })?;
                if sub.glob.matches(&e.event_type) {
                    return Ok(Some(e));
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(None);
            }
        }
    }
}

/// The per-worker order cache: per (tenant, subscription), the seq up to
/// which every matching event is known COMPLETED or DEAD.
#[derive(Default)]
pub(super) struct OrderCache(Mutex<HashMap<(String, String), u64>>);

impl OrderCache {
    /// The seq up to which `sub`'s events of `tenant` are known settled (0:
    /// none known).
    pub(super) fn settled_upto(&self, tenant: &str, sub: &str) -> u64 {
        let map = self.0.lock().unwrap();
        map.get(&(tenant.to_owned(), sub.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Records that `sub`'s events of `tenant` are settled up to `seq`; the
    /// mark never moves back.
    pub(super) fn mark_settled(&self, tenant: &str, sub: &str, seq: u64) {
        let mut map = self.0.lock().unwrap();
        let e = map.entry((tenant.to_owned(), sub.to_owned())).or_insert(0);
        *e = (*e).max(seq);
    }
}

/// Whether the event at `seq` needs no look at its predecessor: it is its
/// tenant's first, or every event before it is known settled
/// (`settled_upto`).
fn known_settled_before(seq: u64, settled_upto: u64) -> bool {
    seq <= 1 || settled_upto + 1 >= seq
}

/// Reads one event of the log, for replay and for tests.
pub async fn read_event<S: ItemStore>(
    store: &S,
    events_table: &str,
    tenant: &str,
    seq: u64,
) -> WorkerResult<Envelope> {
    let item = crate::replay::read_event_row(store, events_table, tenant, seq).await?;
    let (e, _) = layout::envelope_of(&item).map_err(|m| WorkerError::MissingEvent {
        tenant: tenant.to_owned(),
        seq,
        detail: m.0,
    })?;
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_and_one_right_after_the_known_settled_ones_need_no_look() {
        assert!(known_settled_before(1, 0), "a tenant's first event");
        assert!(!known_settled_before(2, 0), "nothing known yet");
        assert!(known_settled_before(2, 1));
        assert!(known_settled_before(5, 4));
        assert!(!known_settled_before(5, 3), "seq 4 is not known settled");
        assert!(known_settled_before(3, 9), "a redelivery of an old event");
    }

    #[test]
    fn the_order_cache_is_kept_per_tenant_and_subscription_and_never_moves_back() {
        let cache = OrderCache::default();
        assert_eq!(cache.settled_upto("acme", "ship"), 0);
        cache.mark_settled("acme", "ship", 4);
        cache.mark_settled("acme", "ship", 2);
        assert_eq!(
            cache.settled_upto("acme", "ship"),
            4,
            "a late mark of seq 2"
        );
        cache.mark_settled("acme", "ship", 5);
        assert_eq!(cache.settled_upto("acme", "ship"), 5);
        assert_eq!(
            cache.settled_upto("acme", "mail"),
            0,
            "another subscription"
        );
        assert_eq!(cache.settled_upto("globex", "ship"), 0, "another tenant");
    }
}

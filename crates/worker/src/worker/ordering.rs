//! Order within a tenant: an event runs for a subscription only once the
//! subscription's previous matching event in the tenant's log is COMPLETED
//! or DEAD. A predecessor with no claim at all is read from the log and
//! delivered first; the per-worker order cache remembers, per (tenant,
//! subscription), the seq up to which this is known, so the common case
//! costs no read.

use postbox_engine::{Envelope, layout};
use postbox_item::AttributeValue;
use postbox_queue::QueueClient;
use postbox_store::ItemStore;
use postbox_store::api::{GetItemInput, QueryInput, Values};

use super::Worker;
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
        let cached = self.settled_upto(&envelope.tenant, &sub.name);
        if envelope.seq <= 1 || cached + 1 >= envelope.seq {
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
                let o = self.deliver(&previous, index, None, depth + 1).await?;
                Ok(o == Outcome::Settled)
            }
        }
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

    fn settled_upto(&self, tenant: &str, sub: &str) -> u64 {
        let map = self.inner.settled_upto.lock().unwrap();
        map.get(&(tenant.to_owned(), sub.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Records that `envelope` is settled for `sub`; its predecessors were
    /// checked before it ran, so every matching event up to it is settled.
    pub(super) fn mark_settled(&self, envelope: &Envelope, sub: &str) {
        let mut map = self.inner.settled_upto.lock().unwrap();
        let e = map
            .entry((envelope.tenant.clone(), sub.to_owned()))
            .or_insert(0);
        *e = (*e).max(envelope.seq);
    }
}

/// Reads one event of the log, for replay and for tests.
pub async fn read_event<S: ItemStore>(
    store: &S,
    events_table: &str,
    tenant: &str,
    seq: u64,
) -> WorkerResult<Envelope> {
    let out = store
        .get_item(GetItemInput {
            table_name: events_table.to_owned(),
            key: layout::key(layout::event_pk(tenant), &layout::seq_sk(seq)),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    let item = out.item.ok_or_else(|| WorkerError::MissingEvent {
        tenant: tenant.to_owned(),
        seq,
        detail: "no such row".into(),
    })?;
    let (e, _) = layout::envelope_of(&item).map_err(|m| WorkerError::MissingEvent {
        tenant: tenant.to_owned(),
        seq,
        detail: m.0,
    })?;
    Ok(e)
}

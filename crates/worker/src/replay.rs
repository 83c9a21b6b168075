//! Dead letters: listing and replay, as library calls.
//!
//! The runbook: a handler fails terminally (or runs out of attempts), its
//! claim is DEAD with a dead letter; the handler is fixed and deployed; a
//! replay selects the dead letters, resets their claims, re-enqueues the
//! events from the log and records the replay. Only the DEAD claims are
//! reset: a subscription that COMPLETED the same event keeps its COMPLETED
//! claim, so the replayed message skips it and it never runs again.
//!
//! Each reset is one transaction: the claim back to FAILED with no attempts
//! used (conditioned on it still being the DEAD row that was listed), the
//! dead letter deleted, and a replay record written
//! (`pk = TENANT#<t>#REPLAY`, `sk = <ms, 20 digits>#<event_id>:<subscription>`).
//! The events are then sent again from the log with a fresh deduplication id,
//! so the queue's 5-minute deduplication window does not swallow them.
//!
//! [`redrive`] moves messages back from the queue's own dead-letter queue
//! (where maxReceiveCount put them) after resetting the DEAD claims of
//! their events, for the same reason.

use std::collections::BTreeMap;

use postbox_item::{AttributeValue, Item, item_to_json};
use postbox_queue::{NewMessage, QueueClient};
use postbox_store::api::*;
use postbox_store::{ItemStore, StoreError};

use crate::claim::{self, ClaimKey, Status};
use crate::deadletter::{DeadLetter, dead_letter_pk};
use crate::error::{WorkerError, WorkerResult};
use crate::inbox::Inbox;

/// Which dead letters a list or replay selects; every set field must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// One tenant (else every tenant: a scan of the inbox table).
    pub tenant: Option<String>,
    /// One subscription.
    pub subscription: Option<String>,
    /// These events only.
    pub event_ids: Option<Vec<String>>,
    /// Last failure at or after this time, ms.
    pub from_ms: Option<u64>,
    /// Last failure before this time, ms.
    pub to_ms: Option<u64>,
}

impl Selection {
    /// Whether `d` is selected.
    pub fn matches(&self, d: &DeadLetter) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == d.tenant)
            && self
                .subscription
                .as_ref()
                .is_none_or(|s| *s == d.subscription)
            && self
                .event_ids
                .as_ref()
                .is_none_or(|ids| ids.contains(&d.event_id))
            && self.from_ms.is_none_or(|f| d.last_failure_at >= f)
            && self.to_ms.is_none_or(|t| d.last_failure_at < t)
    }
}

/// What a replay did (or, dry, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Nothing was written.
    pub dry_run: bool,
    /// The dead letters selected.
    pub selected: Vec<DeadLetter>,
    /// Claims reset from DEAD.
    pub reset: usize,
    /// Selected dead letters whose claim was no longer the DEAD row listed
    /// (another replay got there first); left alone.
    pub skipped: usize,
    /// Events sent to the queue again (one per event, however many of its
    /// subscriptions were reset).
    pub enqueued: usize,
}

/// The dead letters `selection` selects, oldest event first per tenant.
pub async fn list<S: ItemStore>(
    inbox: &Inbox<S>,
    selection: &Selection,
) -> WorkerResult<Vec<DeadLetter>> {
    let all = match &selection.tenant {
        Some(t) => inbox.dead_letters(t).await?,
        None => scan_dead_letters(inbox).await?,
    };
    Ok(all.into_iter().filter(|d| selection.matches(d)).collect())
}

async fn scan_dead_letters<S: ItemStore>(inbox: &Inbox<S>) -> WorkerResult<Vec<DeadLetter>> {
    let items = inbox
        .store()
        .scan_all(ScanInput {
            table_name: inbox.table().to_owned(),
            filter_expression: Some("begins_with(pk, :t) AND contains(pk, :dl)".into()),
            expression_attribute_values: Some(Values::from([
                (":t".to_owned(), AttributeValue::s("TENANT#")),
                (":dl".to_owned(), AttributeValue::s("#DEADLETTER")),
            ])),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    let mut out: Vec<DeadLetter> = items.iter().filter_map(DeadLetter::from_item).collect();
    out.sort_by(|a, b| {
        (&a.tenant, a.seq, &a.subscription).cmp(&(&b.tenant, b.seq, &b.subscription))
    });
    Ok(out)
}

/// Replays the selected dead letters: resets their claims, re-enqueues their
/// events from the log (`events_table`) to `queue`, records the replay.
/// With `dry_run`, only reports the selection.
pub async fn replay<S: ItemStore, Q: QueueClient>(
    inbox: &Inbox<S>,
    queues: &Q,
    queue: &str,
    events_table: &str,
    selection: &Selection,
    dry_run: bool,
    now_ms: u64,
) -> WorkerResult<ReplayReport> {
    let selected = list(inbox, selection).await?;
    let mut report = ReplayReport {
        dry_run,
        selected: selected.clone(),
        ..Default::default()
    };
    if dry_run {
        return Ok(report);
    }
    // (tenant, seq) -> event id, for the events to send again, in log order.
    let mut events: BTreeMap<(String, u64), String> = BTreeMap::new();
    for d in &selected {
        if reset_one(inbox, d, now_ms).await? {
            report.reset += 1;
            events.insert((d.tenant.clone(), d.seq), d.event_id.clone());
        } else {
            report.skipped += 1;
        }
    }
    for ((tenant, seq), event_id) in events {
        let row = read_event_row(inbox.store().as_ref(), events_table, &tenant, seq).await?;
        let body = item_to_json(&row).to_string();
        let message = NewMessage::new(body)
            .group(&tenant)
            .dedup(format!("{event_id}#replay#{now_ms}"));
        queues.send(queue, message).await?;
        report.enqueued += 1;
    }
    Ok(report)
}

/// Resets one DEAD claim in one transaction; false if it is no longer the
/// DEAD row (already replayed, or never dead).
async fn reset_one<S: ItemStore>(
    inbox: &Inbox<S>,
    d: &DeadLetter,
    now_ms: u64,
) -> WorkerResult<bool> {
    let key = ClaimKey::new(&d.event_id, &d.subscription);
    let Some(row) = inbox.get(&key).await? else {
        return Ok(false);
    };
    let Some(reset) = claim::reset_for_replay(&row, now_ms) else {
        return Ok(false);
    };
    let names = Names::from([
        ("#status".to_owned(), claim::attr::STATUS.to_owned()),
        ("#updated_at".to_owned(), claim::attr::UPDATED_AT.to_owned()),
    ]);
    let values = Values::from([
        (":dead".to_owned(), AttributeValue::s(Status::Dead.as_str())),
        (
            ":updated".to_owned(),
            AttributeValue::n(row.updated_at as i64),
        ),
    ]);
    let record = Item::from([
        (
            "pk".to_owned(),
            AttributeValue::S(format!("TENANT#{}#REPLAY", d.tenant)),
        ),
        (
            "sk".to_owned(),
            AttributeValue::S(format!("{now_ms:020}#{}", key.idempotency_key())),
        ),
        ("event_id".to_owned(), AttributeValue::s(&d.event_id)),
        (
            "subscription".to_owned(),
            AttributeValue::s(&d.subscription),
        ),
        ("error".to_owned(), AttributeValue::s(&d.error)),
        (
            "attempts".to_owned(),
            AttributeValue::n(i64::from(d.attempts)),
        ),
        ("replayed_at".to_owned(), AttributeValue::n(now_ms as i64)),
    ]);
    let dead_letter_key = Item::from([
        (
            "pk".to_owned(),
            AttributeValue::S(dead_letter_pk(&d.tenant)),
        ),
        ("sk".to_owned(), AttributeValue::S(key.idempotency_key())),
    ]);
    let put = |item, condition: Option<(String, Names, Values)>| TransactWriteItem {
        put: Some(TransactPut {
            table_name: inbox.table().to_owned(),
            item,
            condition_expression: condition.as_ref().map(|c| c.0.clone()),
            expression_attribute_names: condition.as_ref().map(|c| c.1.clone()),
            expression_attribute_values: condition.map(|c| c.2),
            ..Default::default()
        }),
        ..Default::default()
    };
    let items = vec![
        put(
            claim::to_item(&reset),
            Some((
                "#status = :dead AND #updated_at = :updated".into(),
                names,
                values,
            )),
        ),
        TransactWriteItem {
            delete: Some(TransactDelete {
                table_name: inbox.table().to_owned(),
                key: dead_letter_key,
                ..Default::default()
            }),
            ..Default::default()
        },
        put(record, None),
    ];
    let input = TransactWriteItemsInput {
        transact_items: items,
        client_request_token: None,
    };
    match inbox.store().transact_write_items(input).await {
        Ok(()) => Ok(true),
        Err(StoreError::TransactionCanceled { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The raw row of event `seq` of `tenant` (a consistent read).
pub(crate) async fn read_event_row<S: ItemStore>(
    store: &S,
    events_table: &str,
    tenant: &str,
    seq: u64,
) -> WorkerResult<Item> {
    use postbox_engine::layout;
    let out = store
        .get_item(GetItemInput {
            table_name: events_table.to_owned(),
            key: layout::key(layout::event_pk(tenant), &layout::seq_sk(seq)),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    out.item.ok_or_else(|| WorkerError::MissingEvent {
        tenant: tenant.to_owned(),
        seq,
        detail: "no such row in the log".into(),
    })
}

/// A tenant's replay records, oldest first: (event_id, subscription, replayed_at ms).
pub async fn replay_records<S: ItemStore>(
    inbox: &Inbox<S>,
    tenant: &str,
) -> WorkerResult<Vec<(String, String, u64)>> {
    let page = inbox
        .store()
        .query(QueryInput {
            table_name: inbox.table().to_owned(),
            key_condition_expression: Some("pk = :pk".into()),
            expression_attribute_values: Some(Values::from([(
                ":pk".to_owned(),
                AttributeValue::S(format!("TENANT#{tenant}#REPLAY")),
            )])),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(page
        .items
        .unwrap_or_default()
        .iter()
        .filter_map(|i| {
            let s = |k: &str| i.get(k)?.as_s().map(str::to_owned);
            let at = i.get("replayed_at")?.as_n()?.to_i64()? as u64;
            Some((s("event_id")?, s("subscription")?, at))
        })
        .collect())
}

/// What a redrive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// Messages moved from the dead-letter queue back to the source queue.
    pub moved: usize,
    /// DEAD claims reset so the moved events run again.
    pub reset: usize,
    /// Bodies in the dead-letter queue that are no event: recorded as
    /// poison and deleted.
    pub poison: usize,
}

/// Moves every message of the dead-letter queue `dlq` back to `queue`,
/// first resetting the DEAD claims of its event (so the redelivery runs
/// them; COMPLETED ones stay completed and are skipped). Each message is
/// sent again before it is deleted from the DLQ, so a crash in between
/// duplicates it (harmless: the claims decide) rather than losing it.
pub async fn redrive<S: ItemStore, Q: QueueClient>(
    inbox: &Inbox<S>,
    queues: &Q,
    queue: &str,
    dlq: &str,
    now_ms: u64,
) -> WorkerResult<RedriveReport> {
    let mut report = RedriveReport::default();
    loop {
        let options = postbox_queue::ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(300),
            wait_time_seconds: Some(0),
            ..Default::default()
        };
        let got = queues.receive(dlq, options).await?;
        if got.is_empty() {
            return Ok(report);
        }
        for m in got {
            match crate::poison::parse_body(&m.body) {
                Err(reason) => {
                    inbox
                        .record_poison(crate::poison::poison_item(
                            dlq,
                            &m.message_id,
                            &m.body,
                            &reason,
                            now_ms,
                        ))
                        .await?;
                    report.poison += 1;
                }
                Ok(e) => {
                    let selection = Selection {
                        tenant: Some(e.tenant.clone()),
                        event_ids: Some(vec![e.id.clone()]),
                        ..Default::default()
                    };
                    for d in list(inbox, &selection).await? {
                        if reset_one(inbox, &d, now_ms).await? {
                            report.reset += 1;
                        }
                    }
                    let message = NewMessage::new(m.body.clone())
                        .group(&e.tenant)
                        .dedup(format!("{}#redrive#{now_ms}", e.id));
                    queues.send(queue, message).await?;
                    report.moved += 1;
                }
            }
            queues.delete(dlq, &m.receipt_handle).await?;
        }
    }
}

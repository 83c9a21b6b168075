//! Turning queued events into one TransactWriteItems, and reading what a
//! cancelled transaction says about whose fault it was.
//!
//! Action layout: `[head, event 1, writes of 1..., event 2, writes of 2...]`.
//! The head action is a Put conditioned on `attribute_not_exists(pk)` for a
//! tenant's first event, else an Update of `last_seq`/`last_hash`
//! conditioned on both being what the planner assumed. Conditioning on the
//! hash too means a transaction planned on a stale head can never commit,
//! even if another writer happened to reach the same seq, so the chain can
//! not fork.

use postbox_item::AttributeValue;
use postbox_store::StoreError;
use postbox_store::api::{
    CancellationReason, TransactPut, TransactUpdate, TransactWriteItem, TransactWriteItemsInput,
    Values,
};

use super::{EmitError, MAX_ACTIONS, MAX_TRANSACTION_BYTES};
use crate::chain::{self, EnvelopeFields, Hash};
use crate::envelope::Envelope;
use crate::lanes::InlineHandler;
use crate::layout;
use crate::writes::Write;

/// One event, its caller's writes and the INLINE handlers that add theirs
/// once its seq is known.
pub(crate) struct EventRequest {
    /// The envelope; `seq` is set by [`EventRequest::expand`].
    pub env: Envelope,
    /// The payload's canonical text.
    pub payload_text: String,
    /// The caller's writes.
    pub writes: Vec<Write>,
    /// Estimated transaction bytes of the event row and the caller's writes.
    pub bytes: usize,
    /// The INLINE subscriptions of the event's type: (name, handler).
    pub inline: Vec<(String, InlineHandler)>,
}

/// What an event adds to one planned transaction: the INLINE handlers'
/// writes for the seq it was planned at, and the totals.
pub(crate) struct Expanded {
    /// Writes the INLINE handlers added, after the caller's.
    pub added: Vec<Write>,
    /// The subscription that added each of them.
    pub added_by: Vec<String>,
    /// Actions: the event row, the caller's writes, the added writes.
    pub actions: usize,
    /// Estimated bytes.
    pub bytes: usize,
}

impl EventRequest {
    /// Actions before INLINE handlers ran.
    pub fn base_actions(&self) -> usize {
        1 + self.writes.len()
    }

    /// Gives the event `seq` and runs its INLINE handlers on it, so they
    /// see the envelope exactly as it will be committed. Runs again each
    /// time the event is planned (a retried batch may move it to another
    /// seq), so handlers must only compute writes. An error aborts this
    /// event alone.
    pub fn expand(&mut self, seq: u64, events_table: &str) -> Result<Expanded, EmitError> {
        self.env.seq = seq;
        let mut added = Vec::new();
        let mut added_by = Vec::new();
        for (name, handler) in &self.inline {
            let writes = handler(&self.env).map_err(|e| EmitError::InlineAborted {
                subscription: name.clone(),
                message: e.to_string(),
            })?;
            added_by.extend(writes.iter().map(|_| name.clone()));
            added.extend(writes);
        }
        for (i, w) in added.iter().enumerate() {
            if w.table() == events_table {
                return Err(EmitError::WriteOnEventsTable {
                    index: self.writes.len() + i,
                    write: w.describe(),
                });
            }
        }
        let actions = self.base_actions() + added.len();
        // One more for the head row.
        if actions + 1 > MAX_ACTIONS {
            return Err(EmitError::TooManyWrites {
                actions: actions + 1,
            });
        }
        let bytes = self.bytes + added.iter().map(Write::size).sum::<usize>();
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(EmitError::TransactionTooLarge { bytes });
        }
        Ok(Expanded {
            added,
            added_by,
            actions,
            bytes,
        })
    }

    /// Write `w` of the expanded event and the INLINE subscription that
    /// added it (None for the caller's own).
    pub fn write<'a>(
        &'a self,
        expanded: &'a Expanded,
        w: usize,
    ) -> Option<(&'a Write, Option<&'a str>)> {
        match self.writes.get(w) {
            Some(write) => Some((write, None)),
            None => {
                let i = w - self.writes.len();
                Some((
                    expanded.added.get(i)?,
                    expanded.added_by.get(i).map(String::as_str),
                ))
            }
        }
    }
}

/// A tenant's head as the planner assumes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub seq: u64,
    pub hash: Hash,
    pub exists: bool,
}

impl Head {
    pub const EMPTY: Head = Head {
        seq: 0,
        hash: chain::GENESIS,
        exists: false,
    };
}

/// Who owns an action of a planned transaction.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Owner {
    Head,
    Event,
    Write(usize, usize),
}

/// A planned transaction.
pub(crate) struct Plan {
    pub input: TransactWriteItemsInput,
    pub owners: Vec<Owner>,
    /// (seq, hash) per request, in order.
    pub links: Vec<(u64, Hash)>,
    pub new_head: Head,
}

pub(crate) fn plan<'a>(
    table: &str,
    tenant: &str,
    head: &Head,
    reqs: impl Iterator<Item = (&'a EventRequest, &'a Expanded)>,
) -> Plan {
    // Sized up front: a transaction item is large, and growing the vector
    // one doubling at a time copied them over and over.
    let reqs: Vec<_> = reqs.collect();
    let total = 1 + reqs.iter().map(|(_, x)| x.actions).sum::<usize>();
    let mut actions = Vec::with_capacity(total);
    actions.push(TransactWriteItem::default());
    let mut owners = Vec::with_capacity(total);
    owners.push(Owner::Head);
    let mut links = Vec::with_capacity(reqs.len());
    let (mut seq, mut hash) = (head.seq, head.hash);
    let mut scratch = String::with_capacity(2048);
    for (r, (req, expanded)) in reqs.into_iter().enumerate() {
        seq += 1;
        debug_assert_eq!(req.env.seq, seq, "expanded at the seq it is planned at");
        let f = EnvelopeFields {
            actor: &req.env.actor,
            causation_id: req.env.causation_id.as_deref(),
            correlation_id: &req.env.correlation_id,
            id: &req.env.id,
            occurred_at: &req.env.occurred_at,
            payload: &req.payload_text,
            seq,
            tenant,
            event_type: &req.env.event_type,
        };
        hash = chain::hash_envelope(&hash, &f, &mut scratch);
        actions.push(TransactWriteItem {
            put: Some(TransactPut {
                table_name: table.to_owned(),
                item: {
                    let mut item = layout::event_item(&f, chain::to_hex(&hash));
                    if let Some(t) = &req.env.trace {
                        item.insert(
                            postbox_trace::ATTRIBUTE.to_owned(),
                            AttributeValue::S(t.clone()),
                        );
                    }
                    item
                },
                condition_expression: Some("attribute_not_exists(pk)".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        });
        owners.push(Owner::Event);
        for (w, write) in req.writes.iter().chain(&expanded.added).enumerate() {
            actions.push(write.as_transact().clone());
            owners.push(Owner::Write(r, w));
        }
        links.push((seq, hash));
    }
    actions[0] = head_action(table, tenant, head, seq, &hash);
    Plan {
        input: TransactWriteItemsInput {
            transact_items: actions,
            client_request_token: None,
        },
        owners,
        links,
        new_head: Head {
            seq,
            hash,
            exists: true,
        },
    }
}

fn head_action(table: &str, tenant: &str, head: &Head, seq: u64, hash: &Hash) -> TransactWriteItem {
    let new_seq = AttributeValue::n(seq as i64);
    let new_hash = AttributeValue::S(chain::to_hex(hash));
    if !head.exists {
        let mut item = layout::key(layout::head_pk(tenant), layout::HEAD_SK);
        item.insert("last_seq".to_owned(), new_seq);
        item.insert("last_hash".to_owned(), new_hash);
        return TransactWriteItem {
            put: Some(TransactPut {
                table_name: table.to_owned(),
                item,
                condition_expression: Some("attribute_not_exists(pk)".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
    }
    let values = Values::from([
        (":s".to_owned(), new_seq),
        (":h".to_owned(), new_hash),
        (":ps".to_owned(), AttributeValue::n(head.seq as i64)),
        (
            ":ph".to_owned(),
            AttributeValue::S(chain::to_hex(&head.hash)),
        ),
    ]);
    TransactWriteItem {
        update: Some(TransactUpdate {
            table_name: table.to_owned(),
            key: layout::key(layout::head_pk(tenant), layout::HEAD_SK),
            update_expression: "SET last_seq = :s, last_hash = :h".to_owned(),
            condition_expression: Some("last_seq = :ps AND last_hash = :ph".to_owned()),
            expression_attribute_values: Some(values),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whose fault a failed transaction was.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The head (or an event row) was not as planned: someone else appended.
    Contention,
    /// Callers' own writes failed: (request, write, reason).
    Own(Vec<(usize, usize, CancellationReason)>),
    /// The request as a whole was refused; which event caused it is unknown.
    Invalid(StoreError),
    /// The store failed.
    Fatal(StoreError),
}

pub(crate) fn classify(err: StoreError, owners: &[Owner]) -> Failure {
    match err {
        StoreError::TransactionCanceled { reasons } => {
            let mut own = Vec::new();
            let mut engine_rows_refused = None;
            for (i, reason) in reasons.iter().enumerate() {
                if reason.code == "None" {
                    continue;
                }
                match owners.get(i) {
                    Some(Owner::Write(r, w)) => own.push((*r, *w, reason.clone())),
                    _ if matches!(
                        reason.code.as_str(),
                        "ConditionalCheckFailed" | "TransactionConflict"
                    ) => {}
                    _ => engine_rows_refused = Some(reason.clone()),
                }
            }
            if !own.is_empty() {
                Failure::Own(own)
            } else if let Some(r) = engine_rows_refused {
                Failure::Invalid(StoreError::Validation(format!(
                    "the event row or head was refused: {} {}",
                    r.code,
                    r.message.unwrap_or_default()
                )))
            } else {
                Failure::Contention
            }
        }
        e @ StoreError::Validation(_) => Failure::Invalid(e),
        e => Failure::Fatal(e),
    }
}

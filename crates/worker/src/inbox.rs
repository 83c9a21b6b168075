//! The inbox: claim rows and dead letters in one table, and the conditional
//! writes that move claims through the state machine of `claim`.
//!
//! Table layout (pk S, sk S; TTL on `ttl`):
//!
//! | row | pk | sk |
//! |---|---|---|
//! | claim | `IDEMP#<event_id>:<subscription>` | `CLAIM` |
//! | dead letter | `TENANT#<t>#DEADLETTER` | `<event_id>:<subscription>` |
//! | poison message | `POISON` | `<received ms, 20 digits>#<message id>` |
//!
//! Every transition is ONE conditional write (or one transaction): the claim
//! is a Put on `attribute_not_exists(pk)` when there is no row yet, and,
//! when that Put is refused by a row that may be claimed again, an
//! UpdateItem conditioned on [`CLAIM_CONDITION`] (a second request, only on
//! a retry or a takeover); everything after it is conditioned on
//! [`FENCE_CONDITION`], and completion commits the handler's writes in the
//! same TransactWriteItems, so they happen exactly once or not at all.
//! Written against [`ItemStore`], so it runs unchanged on DynamoDB.

use std::sync::Arc;

use postbox_engine::Write;
use postbox_item::{AttributeValue, Item};
use postbox_store::api::*;
use postbox_store::{ItemStore, StoreError};

use crate::claim::{
    self, CLAIM_CONDITION, ClaimKey, ClaimRow, ClaimTarget, Decision, FENCE_CONDITION, Lease,
    Status,
};
use crate::deadletter::{DeadLetter, dead_letter_pk};
use crate::error::{WorkerError, WorkerResult};

/// The default inbox table.
pub const DEFAULT_INBOX_TABLE: &str = postbox_topology::INBOX_TABLE;

/// What a claim attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller holds the claim; run the handler, then complete or fail.
    Claimed(ClaimRow),
    /// The condition refused the claim; the row as it was, and why.
    Refused(Decision, Option<ClaimRow>),
}

/// The inbox over an item store.
pub struct Inbox<S> {
    store: Arc<S>,
    table: String,
    retention_ms: u64,
}

/// CreateTable of an inbox named `table`: `pk` and `sk`, strings, on
/// demand (its TTL attribute, [`claim::attr::TTL`], is enabled after).
pub fn table_input(table: String) -> CreateTableInput {
    let key = |name: &str, key_type| KeySchemaElement {
        attribute_name: name.into(),
        key_type,
    };
    let def = |name: &str| AttributeDefinition {
        attribute_name: name.into(),
        attribute_type: ScalarType::S,
    };
    CreateTableInput {
        table_name: table,
        key_schema: vec![key("pk", KeyType::Hash), key("sk", KeyType::Range)],
        attribute_definitions: vec![def("pk"), def("sk")],
        billing_mode: Some("PAY_PER_REQUEST".into()),
        provisioned_throughput: None,
        stream_specification: None,
        ..Default::default()
    }
}

impl<S> Clone for Inbox<S> {
    fn clone(&self) -> Self {
        Inbox {
            store: self.store.clone(),
            table: self.table.clone(),
            retention_ms: self.retention_ms,
        }
    }
}

impl<S: ItemStore> Inbox<S> {
    /// The inbox in `table`; claim rows expire `retention_ms` after their
    /// last write (must exceed every way a message can come back, see
    /// `worker::check_retention`).
    pub fn new(store: Arc<S>, table: impl Into<String>, retention_ms: u64) -> Inbox<S> {
        Inbox {
            store,
            table: table.into(),
            retention_ms,
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// Creates the inbox table (pk, sk; TTL on `ttl`) if it is missing.
    pub async fn create_table(&self) -> WorkerResult<()> {
        let input = table_input(self.table.clone());
        match self.store.create_table(input).await {
            Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if self
            .store
            .describe_time_to_live(&self.table)
            .await?
            .is_none()
        {
            let spec = TimeToLiveSpecification {
                enabled: true,
                attribute_name: claim::attr::TTL.into(),
            };
            self.store.update_time_to_live(&self.table, spec).await?;
        }
        Ok(())
    }

    /// The claim row of `key`, if any.
    pub async fn get(&self, key: &ClaimKey) -> WorkerResult<Option<ClaimRow>> {
        let out = self
            .store
            .get_item(GetItemInput {
                table_name: self.table.clone(),
                key: key.item_key(),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?;
        Ok(out.item.as_ref().map(claim::from_item).transpose()?)
    }

    /// Tries to claim `target` at `now_ms` with `lease`: one conditional
    /// write, or two when a row is there.
    ///
    /// The first claim of an event (nearly every claim: the rest follow a
    /// crash, a failure or a lease taken over) is a Put of the whole new
    /// row on `attribute_not_exists(pk)`. Only when a row is there, and
    /// [`claim::decide`] finds it may be claimed, does the claim take the
    /// UpdateItem conditioned on [`CLAIM_CONDITION`], which keeps the row's
    /// attempts and history. Both are conditional, so a row that changes in
    /// between is still claimed at most once. The Put costs the store about
    /// half what the UpdateItem does: no row to decode, no 12 actions to
    /// apply, one short condition to compile.
    pub async fn claim(
        &self,
        target: &ClaimTarget,
        lease: &Lease,
        now_ms: u64,
        max_attempts: u32,
    ) -> WorkerResult<ClaimOutcome> {
        let fresh = claim::claimed(None, target, lease, now_ms, self.retention_ms);
        let put = PutItemInput {
            table_name: self.table.clone(),
            item: claim::to_item(&fresh),
            condition_expression: Some("attribute_not_exists(pk)".into()),
            return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure::AllOld,
            ..Default::default()
        };
        // Answered before it is durable where the store can, as the
        // UpdateItem below.
        match self.store.put_item_unsynced(put).await {
            Ok(_) => return Ok(ClaimOutcome::Claimed(fresh)),
            Err(StoreError::ConditionalCheckFailed { item }) => {
                // A row that does not decode is left to the UpdateItem, which
                // rewrites the fields a claim sets, as it always has.
                if let Some(Ok(row)) = item.as_ref().map(claim::from_item) {
                    match claim::decide(Some(&row), now_ms, max_attempts) {
                        Decision::Claim => {}
                        d => return Ok(ClaimOutcome::Refused(d, Some(row))),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
        self.reclaim(target, lease, now_ms, max_attempts).await
    }

    /// Claims `target` with the UpdateItem conditioned on
    /// [`CLAIM_CONDITION`] alone, without the Put first: what
    /// [`Inbox::claim`] does over a row that may be claimed again. Public so
    /// that tests check the store's condition itself, which `claim` only
    /// reaches once [`claim::decide`] has agreed.
    pub async fn reclaim(
        &self,
        target: &ClaimTarget,
        lease: &Lease,
        now_ms: u64,
        max_attempts: u32,
    ) -> WorkerResult<ClaimOutcome> {
        use claim::attr as a;
        let names = names(&[
            a::STATUS,
            a::LEASE_OWNER,
            a::LEASE_TOKEN,
            a::LEASE_EXPIRES_AT,
            a::TENANT,
            a::SEQ,
            a::EVENT_ID,
            a::SUBSCRIPTION,
            a::UPDATED_AT,
            a::CREATED_AT,
            a::ATTEMPTS,
            a::TTL,
        ]);
        let values = Values::from([
            (
                ":pending".to_owned(),
                AttributeValue::s(Status::Pending.as_str()),
            ),
            (
                ":failed".to_owned(),
                AttributeValue::s(Status::Failed.as_str()),
            ),
            (":now".to_owned(), num(now_ms)),
            (":max".to_owned(), num(u64::from(max_attempts))),
            (":owner".to_owned(), AttributeValue::s(&lease.owner)),
            (":token".to_owned(), AttributeValue::s(&lease.token)),
            (":expires".to_owned(), num(now_ms + lease.lease_ms)),
            (":tenant".to_owned(), AttributeValue::s(&target.tenant)),
            (":seq".to_owned(), num(target.seq)),
            (":event".to_owned(), AttributeValue::s(&target.key.event_id)),
            (
                ":sub".to_owned(),
                AttributeValue::s(&target.key.subscription),
            ),
            (":zero".to_owned(), num(0)),
            (
                ":ttl".to_owned(),
                num(claim::ttl_seconds(now_ms, self.retention_ms)),
            ),
        ]);
        // The condition names attributes without `#`: rewrite to placeholders
        // (`status` and `ttl` are DynamoDB reserved words).
        let condition = CLAIM_CONDITION
            .replace("lease_expires_at", "#lease_expires_at")
            .replace("attempts <", "#attempts <");
        let update = "SET #status = :pending, #lease_owner = :owner, #lease_token = :token, \
             #lease_expires_at = :expires, #tenant = :tenant, #seq = :seq, #event_id = :event, \
             #subscription = :sub, #updated_at = :now, #created_at = if_not_exists(#created_at, :now), \
             #attempts = if_not_exists(#attempts, :zero), #ttl = :ttl";
        let input = UpdateItemInput {
            table_name: self.table.clone(),
            key: target.key.item_key(),
            update_expression: Some(update.into()),
            condition_expression: Some(condition),
            expression_attribute_names: Some(names),
            expression_attribute_values: Some(values),
            return_values: ReturnValue::AllNew,
            return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure::AllOld,
            ..Default::default()
        };
        // Answered before it is durable where the store can: a claim lost
        // in a crash lets the handler run again, as an expired lease does,
        // and the completion, which waits to be durable, is logged after it.
        match self.store.update_item_unsynced(input).await {
            Ok(out) => {
                let item = out.attributes.ok_or_else(|| {
                    StoreError::Storage("UpdateItem ALL_NEW returned nothing".into())
                })?;
                Ok(ClaimOutcome::Claimed(claim::from_item(&item)?))
            }
            Err(StoreError::ConditionalCheckFailed { item }) => {
                let row = item.as_ref().map(claim::from_item).transpose()?;
                let decision = match claim::decide(row.as_ref(), now_ms, max_attempts) {
                    // The row changed between the condition and our decoding
                    // of it (cannot happen on one item), or the clocks
                    // disagree: report it as busy for now.
                    Decision::Claim => Decision::Busy { until: now_ms },
                    d => d,
                };
                Ok(ClaimOutcome::Refused(decision, row))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Completes `row` (held by the caller) at `now_ms`, committing the
    /// handler's `writes` in the same transaction. Refused with
    /// [`WorkerError::Fenced`] if the caller's lease was taken over, and with
    /// [`WorkerError::WriteRefused`] if a handler write's condition failed;
    /// either way nothing was written.
    pub async fn complete(
        &self,
        row: &ClaimRow,
        now_ms: u64,
        writes: Vec<Write>,
    ) -> WorkerResult<ClaimRow> {
        self.complete_with_result(row, now_ms, writes, None).await
    }

    /// [`Inbox::complete`], recording `result` (JSON text) in the claim.
    pub async fn complete_with_result(
        &self,
        row: &ClaimRow,
        now_ms: u64,
        writes: Vec<Write>,
        result: Option<String>,
    ) -> WorkerResult<ClaimRow> {
        let done = ClaimRow {
            result,
            ..claim::completed(row, now_ms)
        };
        let described: Vec<String> = writes.iter().map(Write::describe).collect();
        let mut items = vec![self.fenced_put(row, &done)];
        items.extend(writes.into_iter().map(Write::into_transact));
        self.transact(row, items, &described).await?;
        Ok(done)
    }

    /// Records a failed attempt of `row` (held by the caller): FAILED, or
    /// DEAD with its dead letter in the same transaction when the error is
    /// terminal or this was the last attempt.
    pub async fn fail(
        &self,
        row: &ClaimRow,
        now_ms: u64,
        error: &str,
        kind: claim::FailureKind,
        max_attempts: u32,
        event_type: &str,
    ) -> WorkerResult<ClaimRow> {
        let next = claim::failed(row, now_ms, error, kind, max_attempts);
        let mut items = vec![self.fenced_put(row, &next)];
        if next.status == Status::Dead {
            items.push(self.dead_letter_put(&next, event_type));
        }
        self.transact(row, items, &[]).await?;
        Ok(next)
    }

    /// Marks a FAILED claim with no attempts left DEAD, with its dead letter
    /// (the worker died between the last failure and the DEAD write, or
    /// `max_attempts` was lowered). Conditioned on the row being unchanged.
    pub async fn bury_exhausted(
        &self,
        row: &ClaimRow,
        now_ms: u64,
        event_type: &str,
    ) -> WorkerResult<ClaimRow> {
        let dead = claim::exhausted(row, now_ms);
        let mut put = TransactPut {
            table_name: self.table.clone(),
            item: claim::to_item(&dead),
            condition_expression: Some("#status = :failed AND #updated_at = :updated".into()),
            expression_attribute_names: Some(names(&[
                claim::attr::STATUS,
                claim::attr::UPDATED_AT,
            ])),
            expression_attribute_values: Some(Values::from([
                (
                    ":failed".to_owned(),
                    AttributeValue::s(Status::Failed.as_str()),
                ),
                (":updated".to_owned(), num(row.updated_at)),
            ])),
            ..Default::default()
        };
        put.return_values_on_condition_check_failure = ReturnValuesOnConditionCheckFailure::None;
        let items = vec![
            TransactWriteItem {
                put: Some(put),
                ..Default::default()
            },
            self.dead_letter_put(&dead, event_type),
        ];
        self.transact(row, items, &[]).await?;
        Ok(dead)
    }

    /// Extends the caller's lease on `row` to `now_ms + lease_ms`; fenced.
    pub async fn renew(
        &self,
        row: &ClaimRow,
        now_ms: u64,
        lease_ms: u64,
    ) -> WorkerResult<ClaimRow> {
        let next = claim::renewed(row, now_ms, lease_ms);
        self.transact(row, vec![self.fenced_put(row, &next)], &[])
            .await?;
        Ok(next)
    }

    /// Gives up the caller's claim on `row` before its handler ran: the
    /// lease ends at `now_ms`, so any worker may claim it again at once;
    /// attempts are untouched. Fenced like every transition.
    pub async fn release(&self, row: &ClaimRow, now_ms: u64) -> WorkerResult<ClaimRow> {
        self.renew(row, now_ms, 0).await
    }

    /// A tenant's dead letters, oldest event first.
    pub async fn dead_letters(&self, tenant: &str) -> WorkerResult<Vec<DeadLetter>> {
        let items = self.partition(dead_letter_pk(tenant)).await?;
        Ok(items.iter().filter_map(DeadLetter::from_item).collect())
    }

    /// Every poison row, oldest first.
    pub async fn poison_messages(&self) -> WorkerResult<Vec<Item>> {
        self.partition(crate::poison::POISON_PK.to_owned()).await
    }

    /// Every row of the inbox table's partition `pk`, in key order, read
    /// consistently, page after page.
    async fn partition(&self, pk: String) -> WorkerResult<Vec<Item>> {
        Ok(self
            .store
            .query_all(QueryInput {
                table_name: self.table.clone(),
                key_condition_expression: Some("pk = :pk".into()),
                expression_attribute_values: Some(Values::from([(
                    ":pk".to_owned(),
                    AttributeValue::S(pk),
                )])),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?)
    }

    /// Records a poison message.
    pub async fn record_poison(&self, item: Item) -> WorkerResult<()> {
        self.store
            .put_item(PutItemInput {
                table_name: self.table.clone(),
                item,
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    /// A Put of `next` over `row`, fenced on `row`'s lease token.
    fn fenced_put(&self, row: &ClaimRow, next: &ClaimRow) -> TransactWriteItem {
        TransactWriteItem {
            put: Some(TransactPut {
                table_name: self.table.clone(),
                item: claim::to_item(next),
                condition_expression: Some(FENCE_CONDITION.replace("lease_token", "#lease_token")),
                expression_attribute_names: Some(names(&[
                    claim::attr::STATUS,
                    claim::attr::LEASE_TOKEN,
                ])),
                expression_attribute_values: Some(Values::from([
                    (
                        ":pending".to_owned(),
                        AttributeValue::s(Status::Pending.as_str()),
                    ),
                    (":token".to_owned(), AttributeValue::s(&row.lease_token)),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn dead_letter_put(&self, dead: &ClaimRow, event_type: &str) -> TransactWriteItem {
        TransactWriteItem {
            put: Some(TransactPut {
                table_name: self.table.clone(),
                item: DeadLetter::of(dead, event_type).to_item(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Runs one transaction whose first action is the claim's; maps a
    /// refusal of that action to [`WorkerError::Fenced`] and of action
    /// `i + 1` to a refusal of handler write `i`.
    async fn transact(
        &self,
        row: &ClaimRow,
        items: Vec<TransactWriteItem>,
        described: &[String],
    ) -> WorkerResult<()> {
        let input = TransactWriteItemsInput {
            transact_items: items,
            client_request_token: None,
        };
        match self.store.transact_write_items(input).await {
            Ok(()) => Ok(()),
            Err(StoreError::TransactionCanceled { reasons }) => {
                if reasons.first().is_some_and(|r| r.code != "None") {
                    return Err(WorkerError::Fenced { key: row.key.pk() });
                }
                let (index, reason) = reasons
                    .iter()
                    .enumerate()
                    .skip(1)
                    .find(|(_, r)| r.code != "None")
                    .map(|(i, r)| (i - 1, r.code.clone()))
                    .unwrap_or((0, "unknown".into()));
                Err(WorkerError::WriteRefused {
                    index,
                    write: described
                        .get(index)
                        .cloned()
                        .unwrap_or_else(|| "dead letter".into()),
                    reason,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn names(attrs: &[&str]) -> Names {
    attrs
        .iter()
        .map(|a| (format!("#{a}"), (*a).to_owned()))
        .collect()
}

fn num(v: u64) -> AttributeValue {
    AttributeValue::n(v as i64)
}

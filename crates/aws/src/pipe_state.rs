//! A pipe's state on DynamoDB, in the relay-shards table: its lease (one
//! row, `sk = LEASE`: owner, fencing token, expiry) and a checkpoint per
//! stream shard (`sk = SHARD#<id>`: the stream's ARN, the last sequence
//! number relayed, whether the shard is finished).
//!
//! The lease is decided by the relay's own pure rule
//! (`postbox_relay::lease::decide`) and written with a condition on the row
//! it was decided from, so two relays racing for it cannot both win. Every
//! checkpoint move is one transaction with a condition check on the lease
//! row (this owner, this token, not expired): a relay that lost its lease
//! cannot move a checkpoint, so the new holder's position stands.

use std::collections::HashMap;
use std::time::Duration;

use postbox_item::{AttributeValue, Item};
use postbox_relay::lease::{Decision, Lease, decide};
use postbox_store::api::{
    AttributeDefinition, ConditionCheck, CreateTableInput, GetItemInput, KeySchemaElement, KeyType,
    PutItemInput, QueryInput, ScalarType, TransactPut, TransactWriteItem, TransactWriteItemsInput,
    UpdateItemInput,
};
use postbox_store::{ItemStore, StoreError};

use crate::DynamoStore;
use crate::lineage::ShardState;

/// The table (before the stack's prefix).
pub const TABLE: &str = postbox_topology::RELAY_SHARDS_TABLE;
const LEASE: &str = "LEASE";
const SHARD: &str = "SHARD#";

/// The table's definition: `pk` (the pipe) and `sk` (the row), on demand,
/// no stream.
pub fn table_input(table: impl Into<String>) -> CreateTableInput {
    let mut input = CreateTableInput::keyed_by(table, "pk");
    input.key_schema.push(KeySchemaElement {
        attribute_name: "sk".into(),
        key_type: KeyType::Range,
    });
    input.attribute_definitions.push(AttributeDefinition {
        attribute_name: "sk".into(),
        attribute_type: ScalarType::S,
    });
    input
}

/// A pipe's checkpoints as stored: per stream ARN, per shard.
pub type Checkpoints = HashMap<String, HashMap<String, ShardState>>;

/// Why a state write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another relay holds the lease now.
    #[error("the lease was lost to another relay")]
    LeaseLost,
    /// DynamoDB failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

fn key(pipe: &str, sk: &str) -> Item {
    Item::from([
        ("pk".to_owned(), AttributeValue::S(pipe.to_owned())),
        ("sk".to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::n(v as i64)
}

fn num(item: &Item, name: &str) -> u64 {
    item.get(name)
        .and_then(AttributeValue::as_n)
        .and_then(|n| n.to_i64())
        .unwrap_or(0)
        .max(0) as u64
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(AttributeValue::as_s)
}

fn flag(item: &Item, name: &str) -> bool {
    matches!(item.get(name), Some(AttributeValue::Bool(true)))
}

fn lease_of(item: &Item) -> Lease {
    Lease {
        owner: text(item, "owner").unwrap_or_default().to_owned(),
        token: num(item, "token"),
        expires_at: num(item, "expires_at"),
    }
}

fn values(pairs: &[(&str, AttributeValue)]) -> Option<Item> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

/// One pipe's state rows.
#[derive(Clone, Debug)]
pub struct PipeState {
    store: DynamoStore,
    table: String,
    pipe: String,
}

impl PipeState {
    /// Pipe `pipe`'s rows in `table` of `store`.
    pub fn new(store: DynamoStore, table: &str, pipe: &str) -> PipeState {
        PipeState {
            store,
            table: table.to_owned(),
            pipe: pipe.to_owned(),
        }
    }

    /// The lease row, read consistently.
    pub async fn lease(&self) -> Result<Option<Lease>, StoreError> {
        let out = self
            .store
            .get_item(GetItemInput {
                table_name: self.table.clone(),
                key: key(&self.pipe, LEASE),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?;
        Ok(out.item.as_ref().map(lease_of))
    }

    /// Takes (or keeps) the lease for `me` at `now` when it is free,
    /// expired or already `me`'s; the holder's row otherwise. Losing a race
    /// for the row answers the winner's row.
    pub async fn acquire(
        &self,
        me: &str,
        now: u64,
        duration: Duration,
    ) -> Result<Decision, StoreError> {
        let current = self.lease().await?;
        let decision = decide(current.as_ref(), me, now, duration);
        let Decision::Take(lease) = &decision else {
            return Ok(decision);
        };
        let mut item = key(&self.pipe, LEASE);
        item.insert("owner".into(), AttributeValue::S(lease.owner.clone()));
        item.insert("token".into(), n(lease.token));
        item.insert("expires_at".into(), n(lease.expires_at));
        let (condition, vals) = match &current {
            None => ("attribute_not_exists(pk)", None),
            Some(c) => (
                "#token = :token AND #owner = :owner",
                values(&[
                    (":token", n(c.token)),
                    (":owner", AttributeValue::S(c.owner.clone())),
                ]),
            ),
        };
        let put = self
            .store
            .put_item(PutItemInput {
                table_name: self.table.clone(),
                item,
                condition_expression: Some(condition.into()),
                expression_attribute_names: current.as_ref().map(|_| {
                    [("#token", "token"), ("#owner", "owner")]
                        .into_iter()
                        .map(|(a, b)| (a.to_owned(), b.to_owned()))
                        .collect()
                }),
                expression_attribute_values: vals,
                ..Default::default()
            })
            .await;
        match put {
            Ok(_) => Ok(decision),
            Err(StoreError::ConditionalCheckFailed { .. }) => Ok(match self.lease().await? {
                Some(l) => Decision::Held(l),
                None => Decision::Held(Lease {
                    owner: String::new(),
                    token: 0,
                    expires_at: now,
                }),
            }),
            Err(e) => Err(e),
        }
    }

    /// Extends `me`'s lease with `token` to `now + duration`; `LeaseLost`
    /// when the row names another owner or token, or has expired.
    pub async fn renew(
        &self,
        me: &str,
        token: u64,
        now: u64,
        duration: Duration,
    ) -> Result<(), StateError> {
        let result = self
            .store
            .update_item(UpdateItemInput {
                table_name: self.table.clone(),
                key: key(&self.pipe, LEASE),
                update_expression: Some("SET expires_at = :until".into()),
                condition_expression: Some(
                    "#owner = :me AND #token = :token AND expires_at > :now".into(),
                ),
                expression_attribute_names: Some(
                    [("#owner", "owner"), ("#token", "token")]
                        .into_iter()
                        .map(|(a, b)| (a.to_owned(), b.to_owned()))
                        .collect(),
                ),
                expression_attribute_values: values(&[
                    (":until", n(now + duration.as_millis() as u64)),
                    (":me", AttributeValue::S(me.to_owned())),
                    (":token", n(token)),
                    (":now", n(now)),
                ]),
                ..Default::default()
            })
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionalCheckFailed { .. }) => Err(StateError::LeaseLost),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives the lease up (expires it now) if `me` still holds it with
    /// `token`, so another relay takes over at once.
    pub async fn release(&self, me: &str, token: u64, now: u64) -> Result<(), StoreError> {
        match self.renew(me, token, now, Duration::ZERO).await {
            Ok(()) | Err(StateError::LeaseLost) => Ok(()),
            Err(StateError::Store(e)) => Err(e),
        }
    }

    /// Every checkpoint of the pipe, by stream ARN and shard.
    pub async fn checkpoints(&self) -> Result<Checkpoints, StoreError> {
        let items = self
            .store
            .query_all(QueryInput {
                table_name: self.table.clone(),
                key_condition_expression: Some("pk = :pipe AND begins_with(sk, :shard)".into()),
                expression_attribute_values: values(&[
                    (":pipe", AttributeValue::S(self.pipe.clone())),
                    (":shard", AttributeValue::S(SHARD.to_owned())),
                ]),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?;
        let mut out = Checkpoints::new();
        for item in &items {
            let (Some(sk), Some(arn)) = (text(item, "sk"), text(item, "stream")) else {
                continue;
            };
            let shard = sk.trim_start_matches(SHARD).to_owned();
            out.entry(arn.to_owned()).or_default().insert(
                shard,
                ShardState {
                    sequence: text(item, "sequence").map(str::to_owned),
                    finished: flag(item, "finished"),
                    latest: flag(item, "latest"),
                },
            );
        }
        Ok(out)
    }

    /// Records `state` for `shard` of stream `arn`, in one transaction with
    /// a check that `me` still holds the lease with `token` at `now`.
    pub async fn set_checkpoint(
        &self,
        lease: (&str, u64, u64),
        arn: &str,
        shard: &str,
        state: &ShardState,
    ) -> Result<(), StateError> {
        let (me, token, now) = lease;
        let mut item = key(&self.pipe, &format!("{SHARD}{shard}"));
        item.insert("stream".into(), AttributeValue::S(arn.to_owned()));
        if let Some(seq) = &state.sequence {
            item.insert("sequence".into(), AttributeValue::S(seq.clone()));
        }
        item.insert("finished".into(), AttributeValue::Bool(state.finished));
        item.insert("latest".into(), AttributeValue::Bool(state.latest));
        let check = ConditionCheck {
            table_name: self.table.clone(),
            key: key(&self.pipe, LEASE),
            condition_expression: "#owner = :me AND #token = :token AND expires_at > :now".into(),
            expression_attribute_names: Some(
                [("#owner", "owner"), ("#token", "token")]
                    .into_iter()
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .collect(),
            ),
            expression_attribute_values: values(&[
                (":me", AttributeValue::S(me.to_owned())),
                (":token", n(token)),
                (":now", n(now)),
            ]),
            ..Default::default()
        };
        let result = self
            .store
            .transact_write_items(TransactWriteItemsInput {
                transact_items: vec![
                    TransactWriteItem {
                        condition_check: Some(check),
                        ..Default::default()
                    },
                    TransactWriteItem {
                        put: Some(TransactPut {
                            table_name: self.table.clone(),
                            item,
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ],
                client_request_token: None,
            })
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(StoreError::TransactionCanceled { reasons })
                if reasons
                    .first()
                    .is_some_and(|r| r.code == "ConditionalCheckFailed") =>
            {
                Err(StateError::LeaseLost)
            }
            Err(e) => Err(e.into()),
        }
    }
}

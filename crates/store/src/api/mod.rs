//! The store's requests and responses, shaped exactly like DynamoDB's.
//!
//! Field names are DynamoDB's (PascalCase on the wire), so the wire endpoint
//! is a thin layer of (de)serialisation, and a backend on real DynamoDB maps
//! them one to one onto the AWS SDK. Parameters Postbox accepts but ignores
//! (capacity reporting, billing) are kept so unmodified clients can send them.

use std::collections::BTreeMap;

use postbox_item::{AttributeValue, Item};
use serde::{Deserialize, Serialize};

mod table;

pub use table::*;

/// `#name` placeholders to attribute names.
pub type Names = BTreeMap<String, String>;
/// `:value` placeholders to values.
pub type Values = BTreeMap<String, AttributeValue>;

/// Reads ExpressionAttributeValues, naming the placeholder whose value is
/// invalid as DynamoDB does.
fn expression_values<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Values>, D::Error> {
    let raw: Option<BTreeMap<String, serde_json::Value>> = Deserialize::deserialize(d)?;
    raw.map(|map| {
        map.into_iter()
            .map(|(k, v)| match AttributeValue::from_json(&v) {
                Ok(value) => Ok((k, value)),
                Err(e) => Err(serde::de::Error::custom(format!(
                    "ExpressionAttributeValues contains invalid value: {e} for key {k}"
                ))),
            })
            .collect()
    })
    .transpose()
}

/// What a write returns in `Attributes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReturnValue {
    #[default]
    None,
    AllOld,
    UpdatedOld,
    AllNew,
    UpdatedNew,
}

/// Whether a failed condition returns the item as it was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReturnValuesOnConditionCheckFailure {
    AllOld,
    #[default]
    None,
}

/// GetItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetItemInput {
    pub table_name: String,
    pub key: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_read: Option<bool>,
    /// Legacy AttributesToGet: refused (use ProjectionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes_to_get: Option<serde_json::Value>,
}

/// GetItem's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GetItemOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<Item>,
}

/// PutItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PutItemInput {
    pub table_name: String,
    pub item: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values: ReturnValue,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
    /// Legacy Expected: refused (use ConditionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<serde_json::Value>,
    /// Legacy ConditionalOperator: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditional_operator: Option<serde_json::Value>,
}

/// UpdateItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct UpdateItemInput {
    pub table_name: String,
    pub key: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values: ReturnValue,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
    /// Legacy Expected: refused (use ConditionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<serde_json::Value>,
    /// Legacy AttributeUpdates: refused (use UpdateExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribute_updates: Option<serde_json::Value>,
    /// Legacy ConditionalOperator: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditional_operator: Option<serde_json::Value>,
}

/// DeleteItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeleteItemInput {
    pub table_name: String,
    pub key: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values: ReturnValue,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
    /// Legacy Expected: refused (use ConditionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<serde_json::Value>,
    /// Legacy ConditionalOperator: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditional_operator: Option<serde_json::Value>,
}

/// The answer of PutItem, UpdateItem and DeleteItem.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WriteOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Item>,
}

/// ALL_ATTRIBUTES, ALL_PROJECTED_ATTRIBUTES, SPECIFIC_ATTRIBUTES or COUNT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Select {
    AllAttributes,
    AllProjectedAttributes,
    SpecificAttributes,
    Count,
}

/// Query.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueryInput {
    pub table_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_index_forward: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_start_key: Option<Item>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select: Option<Select>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_read: Option<bool>,
    /// Legacy KeyConditions: refused (use KeyConditionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_conditions: Option<serde_json::Value>,
    /// Legacy QueryFilter: refused (use FilterExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_filter: Option<serde_json::Value>,
    /// Legacy AttributesToGet: refused (use ProjectionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes_to_get: Option<serde_json::Value>,
    /// Legacy ConditionalOperator: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditional_operator: Option<serde_json::Value>,
}

/// Scan.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScanInput {
    pub table_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive_start_key: Option<Item>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select: Option<Select>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_segments: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_read: Option<bool>,
    /// Legacy ScanFilter: refused (use FilterExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_filter: Option<serde_json::Value>,
    /// Legacy AttributesToGet: refused (use ProjectionExpression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes_to_get: Option<serde_json::Value>,
    /// Legacy ConditionalOperator: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditional_operator: Option<serde_json::Value>,
}

/// The answer of Query and Scan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueryOutput {
    /// Absent when `Select` is COUNT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<Item>>,
    pub count: u64,
    pub scanned_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluated_key: Option<Item>,
}

/// A Query page whose items are still in the store's binary form
/// ([`postbox_item::encode_item`]), back to back in one buffer: the answer
/// of [`ItemStore::query_encoded`](crate::ItemStore::query_encoded). With
/// `Select: COUNT` it holds no items, only the counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedQueryOutput {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    pub count: u64,
    pub scanned_count: u64,
    pub last_evaluated_key: Option<Item>,
}

impl EncodedQueryOutput {
    /// Appends one encoded item.
    pub fn push(&mut self, encoded: &[u8]) {
        self.bytes.extend_from_slice(encoded);
        self.ends.push(self.bytes.len());
    }

    /// Makes room for `items` more items of `bytes` bytes in all.
    pub fn reserve(&mut self, bytes: usize, items: usize) {
        self.bytes.reserve(bytes);
        self.ends.reserve(items);
    }

    /// The encoded items, in the page's order.
    pub fn items(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.ends.iter().enumerate().map(|(i, &end)| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.bytes[start..end]
        })
    }

    /// How many items the page holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when the page holds no items.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl From<QueryOutput> for EncodedQueryOutput {
    /// Encodes the items of a Query page.
    fn from(out: QueryOutput) -> EncodedQueryOutput {
        let mut page = EncodedQueryOutput {
            count: out.count,
            scanned_count: out.scanned_count,
            last_evaluated_key: out.last_evaluated_key,
            ..Default::default()
        };
        for item in out.items.iter().flatten() {
            page.push(&postbox_item::encode_item(item));
        }
        page
    }
}

/// The keys and projection of one table in BatchGetItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeysAndAttributes {
    pub keys: Vec<Item>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_read: Option<bool>,
}

/// BatchGetItem (at most 100 keys).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchGetItemInput {
    pub request_items: BTreeMap<String, KeysAndAttributes>,
}

/// BatchGetItem's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchGetItemOutput {
    pub responses: BTreeMap<String, Vec<Item>>,
    pub unprocessed_keys: BTreeMap<String, serde_json::Value>,
}

/// A put inside BatchWriteItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PutRequest {
    pub item: Item,
}

/// A delete inside BatchWriteItem.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeleteRequest {
    pub key: Item,
}

/// One write of BatchWriteItem: exactly one of the two is set.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WriteRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put_request: Option<PutRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_request: Option<DeleteRequest>,
}

/// BatchWriteItem (at most 25 writes, no conditions).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchWriteItemInput {
    pub request_items: BTreeMap<String, Vec<WriteRequest>>,
}

/// BatchWriteItem's answer; the embedded store processes everything.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchWriteItemOutput {
    pub unprocessed_items: BTreeMap<String, serde_json::Value>,
}

/// A condition on an item inside a transaction, with no write.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ConditionCheck {
    pub table_name: String,
    pub key: Item,
    pub condition_expression: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
}

/// A put inside a transaction.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactPut {
    pub table_name: String,
    pub item: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
}

/// An update inside a transaction.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactUpdate {
    pub table_name: String,
    pub key: Item,
    pub update_expression: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
}

/// A delete inside a transaction.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactDelete {
    pub table_name: String,
    pub key: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "expression_values"
    )]
    pub expression_attribute_values: Option<Values>,
    #[serde(default)]
    pub return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure,
}

/// One action of TransactWriteItems: exactly one field is set.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactWriteItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_check: Option<ConditionCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put: Option<TransactPut>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<TransactDelete>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<TransactUpdate>,
}

impl TransactWriteItem {
    /// The table and the item it addresses (a Put's item, the key of the
    /// others), or None unless exactly one action is set.
    pub fn target(&self) -> Option<(&str, &Item)> {
        match self {
            TransactWriteItem {
                put: Some(p),
                update: None,
                delete: None,
                condition_check: None,
            } => Some((&p.table_name, &p.item)),
            TransactWriteItem {
                put: None,
                update: Some(u),
                delete: None,
                condition_check: None,
            } => Some((&u.table_name, &u.key)),
            TransactWriteItem {
                put: None,
                update: None,
                delete: Some(d),
                condition_check: None,
            } => Some((&d.table_name, &d.key)),
            TransactWriteItem {
                put: None,
                update: None,
                delete: None,
                condition_check: Some(c),
            } => Some((&c.table_name, &c.key)),
            _ => None,
        }
    }
}

/// TransactWriteItems: at most 100 actions and 4 MB, one action per item, all
/// or nothing.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactWriteItemsInput {
    pub transact_items: Vec<TransactWriteItem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_token: Option<String>,
}

/// A read inside TransactGetItems.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactGet {
    pub table_name: String,
    pub key: Item,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_expression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_attribute_names: Option<Names>,
}

/// One read of TransactGetItems.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactGetItem {
    pub get: TransactGet,
}

/// TransactGetItems: at most 100 reads, one consistent snapshot.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactGetItemsInput {
    pub transact_items: Vec<TransactGetItem>,
}

/// One answer of TransactGetItems (empty when the item does not exist).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ItemResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<Item>,
}

/// TransactGetItems' answer, in request order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TransactGetItemsOutput {
    pub responses: Vec<ItemResponse>,
}

/// Why one action of a cancelled transaction failed; `Code` is "None" for
/// actions that were fine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CancellationReason {
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<Item>,
}

/// INSERT, MODIFY or REMOVE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventName {
    Insert,
    Modify,
    Remove,
}

/// One committed change of a stream-enabled table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Position in the table's stream; strictly increasing in commit order.
    pub sequence_number: u64,
    pub event_name: EventName,
    /// Milliseconds since the Unix epoch at commit.
    pub approximate_creation_time_ms: u64,
    pub keys: Item,
    pub new_image: Option<Item>,
    pub old_image: Option<Item>,
    pub view_type: StreamViewType,
    /// Set when the TTL sweeper, not a client, removed the item.
    pub ttl_removal: bool,
    /// Size of keys and images, as DynamoDB reports `SizeBytes`.
    pub size_bytes: u64,
}

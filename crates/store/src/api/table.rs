//! The requests and responses of tables themselves, shaped like DynamoDB's:
//! keys, attribute definitions, streams, secondary indexes, CreateTable,
//! UpdateTable, tags, DescribeTable's answer and TTL.

use serde::{Deserialize, Serialize};

/// HASH or RANGE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum KeyType {
    Hash,
    Range,
}

/// One element of a table's key schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeySchemaElement {
    pub attribute_name: String,
    pub key_type: KeyType,
}

/// S, N or B: the type of a key attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScalarType {
    S,
    N,
    B,
}

/// Declares the type of a key attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeDefinition {
    pub attribute_name: String,
    pub attribute_type: ScalarType,
}

/// What a change-stream record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamViewType {
    KeysOnly,
    NewImage,
    OldImage,
    NewAndOldImages,
}

/// Whether a table has a change stream, and its view type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StreamSpecification {
    pub stream_enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_view_type: Option<StreamViewType>,
}

/// CreateTable.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CreateTableInput {
    pub table_name: String,
    pub key_schema: Vec<KeySchemaElement>,
    pub attribute_definitions: Vec<AttributeDefinition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_throughput: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_specification: Option<StreamSpecification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<Tag>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_secondary_indexes: Option<Vec<SecondaryIndex>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_secondary_indexes: Option<Vec<SecondaryIndex>>,
}

/// ALL, KEYS_ONLY or INCLUDE: which attributes an index holds besides the
/// keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProjectionType {
    All,
    KeysOnly,
    Include,
}

/// An index's projection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct IndexProjection {
    /// ALL, KEYS_ONLY or INCLUDE ([`ProjectionType`]); text, so that
    /// another value is refused with DynamoDB's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_key_attributes: Option<Vec<String>>,
}

/// A global or local secondary index as CreateTable (and UpdateTable's
/// `Create`) declares it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SecondaryIndex {
    pub index_name: String,
    pub key_schema: Vec<KeySchemaElement>,
    #[serde(default)]
    pub projection: IndexProjection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_throughput: Option<serde_json::Value>,
    /// On-demand limits: accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand_throughput: Option<serde_json::Value>,
}

/// One member of UpdateTable's `GlobalSecondaryIndexUpdates`: exactly one of
/// its fields is set.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GlobalSecondaryIndexUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<SecondaryIndex>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<IndexNamed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<serde_json::Value>,
}

/// `{"IndexName": ...}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct IndexNamed {
    pub index_name: String,
}

/// A table's tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    pub key: String,
    pub value: String,
}

/// UpdateTable: what Postbox can change (billing mode, provisioned
/// throughput, the stream, global secondary indexes); every other member is kept in `other` so it is
/// refused by name rather than ignored.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct UpdateTableInput {
    pub table_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_throughput: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_specification: Option<StreamSpecification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribute_definitions: Option<Vec<AttributeDefinition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_secondary_index_updates: Option<Vec<GlobalSecondaryIndexUpdate>>,
    #[serde(flatten)]
    pub other: std::collections::BTreeMap<String, serde_json::Value>,
}

impl CreateTableInput {
    /// An on-demand table keyed by one string partition key `key`, without
    /// a stream: the shape of most of Postbox's own tables.
    pub fn keyed_by(table: impl Into<String>, key: impl Into<String>) -> CreateTableInput {
        let key = key.into();
        CreateTableInput {
            table_name: table.into(),
            key_schema: vec![KeySchemaElement {
                attribute_name: key.clone(),
                key_type: KeyType::Hash,
            }],
            attribute_definitions: vec![AttributeDefinition {
                attribute_name: key,
                attribute_type: ScalarType::S,
            }],
            billing_mode: Some("PAY_PER_REQUEST".into()),
            ..Default::default()
        }
    }
}

/// A table as DescribeTable reports it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TableDescription {
    pub table_name: String,
    pub table_arn: String,
    pub table_status: String,
    /// Seconds since the Unix epoch.
    pub creation_date_time: f64,
    pub key_schema: Vec<KeySchemaElement>,
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub item_count: u64,
    pub table_size_bytes: u64,
    /// A UUID naming this table (a table created again under the same name
    /// has another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_id: Option<String>,
    /// Read and write capacity (zeros under on-demand), as DynamoDB shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_throughput: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_mode_summary: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_specification: Option<StreamSpecification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_stream_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_stream_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_secondary_indexes: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_secondary_indexes: Option<Vec<serde_json::Value>>,
}

/// The TTL setting of UpdateTimeToLive / DescribeTimeToLive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TimeToLiveSpecification {
    pub enabled: bool,
    pub attribute_name: String,
}

//! Table metadata: what CreateTable stored about a table, how it is checked,
//! and how DescribeTable reports it.
//!
//! The writer is the only code that changes metadata; it publishes the new
//! [`Catalog`] contents after the commit that wrote them, so readers and
//! request validation always see committed tables.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::api::{
    AttributeDefinition, CreateTableInput, KeySchemaElement, KeyType, ScalarType,
    StreamSpecification, StreamViewType, TableDescription, UpdateTableInput,
};

use super::arrival::{self, ArrivalIndex};
use super::index::{self, IndexMeta};
use super::validate;

/// One key attribute: its name and declared type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyAttribute {
    /// The attribute name.
    pub name: String,
    /// S, N or B.
    pub ty: ScalarType,
}

/// Everything the store keeps about one table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableMeta {
    /// Numeric id that prefixes every row of the table in the store file.
    pub id: u32,
    /// The table name.
    pub name: String,
    /// The partition (HASH) key.
    pub partition_key: KeyAttribute,
    /// The sort (RANGE) key, if any.
    pub sort_key: Option<KeyAttribute>,
    /// The attribute definitions as given at creation.
    pub attribute_definitions: Vec<AttributeDefinition>,
    /// Set when the table has a change stream.
    pub stream_view_type: Option<StreamViewType>,
    /// The TTL attribute, while TTL is enabled.
    pub ttl_attribute: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// PAY_PER_REQUEST or PROVISIONED, as given.
    pub billing_mode: String,
    /// Read and write capacity units of a PROVISIONED table, as given
    /// (absent from files written before it was kept).
    #[serde(default)]
    pub provisioned: Option<(u64, u64)>,
    /// The table's tags (absent from files written before tags were kept).
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
    /// When the current stream was enabled, if after the table's creation
    /// (UpdateTable): its label.
    #[serde(default)]
    pub stream_enabled_at_ms: Option<u64>,
    /// When UpdateTable last switched the table to PAY_PER_REQUEST (else:
    /// its creation, if it was created so).
    #[serde(default)]
    pub pay_per_request_since_ms: Option<u64>,
    /// The table's secondary indexes, local ones first (absent from files
    /// written before indexes were kept).
    #[serde(default)]
    pub indexes: Vec<IndexMeta>,
    /// Whether the table keeps its rows in arrival order (see `arrival`;
    /// absent from files written before the layout existed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub arrival_order: bool,
    /// The index of an arrival-ordered table's rows, built at open.
    #[serde(skip)]
    pub(crate) arrival: Option<Arc<ArrivalIndex>>,
}

/// A HASH (and RANGE) key schema in DynamoDB's shape.
pub(crate) fn key_schema_of(
    partition_key: &KeyAttribute,
    sort_key: Option<&KeyAttribute>,
) -> Vec<KeySchemaElement> {
    let element = |attr: &KeyAttribute, key_type| KeySchemaElement {
        attribute_name: attr.name.clone(),
        key_type,
    };
    std::iter::once(element(partition_key, KeyType::Hash))
        .chain(sort_key.map(|sk| element(sk, KeyType::Range)))
        .collect()
}

/// What DescribeTable counts: the table's items and bytes, and each
/// index's, in the order of [`TableMeta::indexes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Items and bytes of the table.
    pub table: (u64, u64),
    /// Items and bytes of each index.
    pub indexes: Vec<(u64, u64)>,
}

impl TableMeta {
    /// The key schema in DynamoDB's shape.
    pub fn key_schema(&self) -> Vec<KeySchemaElement> {
        key_schema_of(&self.partition_key, self.sort_key.as_ref())
    }

    /// The index called `name`.
    pub fn index(&self, name: &str) -> Option<&IndexMeta> {
        self.indexes.iter().find(|i| i.name == name)
    }

    /// The table's key attributes: its partition key, then its sort key.
    pub fn key_attributes(&self) -> impl Iterator<Item = &KeyAttribute> {
        std::iter::once(&self.partition_key).chain(self.sort_key.as_ref())
    }

    /// Whether the table can keep its rows in arrival order: it has no stream
    /// and no secondary index (see `arrival`).
    pub(crate) fn can_keep_arrival_order(&self) -> bool {
        self.stream_view_type.is_none() && self.indexes.is_empty()
    }

    /// True when `name` is one of the table's key attributes.
    pub fn is_key_attribute(&self, name: &str) -> bool {
        self.key_attributes().any(|k| k.name == name)
    }

    /// The stream label: the time the stream was enabled (the creation
    /// time, unless UpdateTable enabled it later).
    pub fn stream_label(&self) -> String {
        format!(
            "{}",
            self.stream_enabled_at_ms.unwrap_or(self.created_at_ms)
        )
    }

    /// The table's ARN, in the local account.
    pub fn arn(&self) -> String {
        format!("arn:aws:dynamodb:local:000000000000:table/{}", self.name)
    }

    /// A UUID (version 4 layout) derived from the table's name, store id and
    /// creation time: stable for the table, different for a table created
    /// again under its name.
    pub fn table_id(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.name.as_bytes());
        h.update(self.id.to_be_bytes());
        h.update(self.created_at_ms.to_be_bytes());
        let d = h.finalize();
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let hex = hex::encode(b);
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }

    /// DescribeTable's view, with the given item counts and sizes.
    pub fn describe(&self, status: &str, counts: &Counts) -> TableDescription {
        let (item_count, table_size_bytes) = counts.table;
        let indexes = |local: bool| {
            let described: Vec<_> = self
                .indexes
                .iter()
                .enumerate()
                .filter(|(_, i)| i.local == local)
                .map(|(n, i)| {
                    let (count, size) = counts.indexes.get(n).copied().unwrap_or((0, 0));
                    i.describe(self, count, size)
                })
                .collect();
            (!described.is_empty()).then_some(described)
        };
        let stream = self.stream_view_type.map(|v| StreamSpecification {
            stream_enabled: true,
            stream_view_type: Some(v),
        });
        TableDescription {
            table_name: self.name.clone(),
            table_arn: self.arn(),
            table_status: status.to_owned(),
            creation_date_time: self.created_at_ms as f64 / 1000.0,
            key_schema: self.key_schema(),
            attribute_definitions: self.attribute_definitions.clone(),
            item_count,
            table_size_bytes,
            table_id: Some(self.table_id()),
            provisioned_throughput: Some({
                let (read, write) = self.provisioned.unwrap_or((0, 0));
                serde_json::json!({
                    "NumberOfDecreasesToday": 0,
                    "ReadCapacityUnits": read,
                    "WriteCapacityUnits": write,
                })
            }),
            // A table that was ever on demand says so, and since when.
            billing_mode_summary: (self.billing_mode == "PAY_PER_REQUEST"
                || self.pay_per_request_since_ms.is_some())
            .then(|| {
                let since = self.pay_per_request_since_ms.unwrap_or(self.created_at_ms);
                serde_json::json!({
                    "BillingMode": self.billing_mode,
                    "LastUpdateToPayPerRequestDateTime": since as f64 / 1000.0,
                })
            }),
            latest_stream_arn: stream
                .as_ref()
                .map(|_| format!("{}/stream/{}", self.arn(), self.stream_label())),
            latest_stream_label: stream.as_ref().map(|_| self.stream_label()),
            stream_specification: stream,
            global_secondary_indexes: indexes(false),
            local_secondary_indexes: indexes(true),
        }
    }

    /// Builds the metadata of a new table, with DynamoDB's validation of
    /// CreateTable. `id` and `now_ms` are filled in by the writer.
    pub(crate) fn from_create(
        input: &CreateTableInput,
        id: u32,
        now_ms: u64,
    ) -> Result<TableMeta, StoreError> {
        validate::table_name(&input.table_name)?;
        let (pk, sk) = key_schema(&input.key_schema)?;
        let definitions = &input.attribute_definitions;
        for (i, d) in definitions.iter().enumerate() {
            if definitions[..i]
                .iter()
                .any(|e| e.attribute_name == d.attribute_name)
            {
                return Err(StoreError::validation(
                    "Cannot have two attributes with the same name",
                ));
            }
        }
        let typed = |name: &str| -> Result<KeyAttribute, StoreError> {
            definitions
                .iter()
                .find(|d| d.attribute_name == name)
                .map(|d| KeyAttribute { name: name.to_owned(), ty: d.attribute_type })
                .ok_or_else(|| {
                    StoreError::validation(format!(
                        "One or more parameter values were invalid: Some index key attributes are not defined in AttributeDefinitions. Keys: [{}], AttributeDefinitions: [{}]",
                        [Some(pk), sk].into_iter().flatten().collect::<Vec<_>>().join(", "),
                        definitions.iter().map(|d| d.attribute_name.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })
        };
        let partition_key = typed(pk)?;
        let sort_key = sk.map(typed).transpose()?;
        let indexed =
            input.global_secondary_indexes.is_some() || input.local_secondary_indexes.is_some();
        if !indexed && definitions.len() != 1 + sort_key.is_some() as usize {
            return Err(StoreError::validation(
                "One or more parameter values were invalid: Number of attributes in KeySchema does not exactly match number of attributes defined in AttributeDefinitions",
            ));
        }
        let billing_mode = billing_mode(input)?;
        let stream_view_type = stream_view_type(input.stream_specification.as_ref())?;
        let tags = match &input.tags {
            Some(tags) => {
                crate::tags::check_tags(tags)?;
                crate::tags::merged(&Default::default(), tags)?
            }
            None => Default::default(),
        };
        let mut meta = TableMeta {
            id,
            name: input.table_name.clone(),
            partition_key,
            sort_key,
            attribute_definitions: definitions.clone(),
            stream_view_type,
            ttl_attribute: None,
            created_at_ms: now_ms,
            provisioned: provisioned(input, &billing_mode),
            billing_mode,
            tags,
            stream_enabled_at_ms: None,
            pay_per_request_since_ms: None,
            indexes: Vec::new(),
            arrival_order: false,
            arrival: None,
        };
        if indexed {
            meta.indexes = index::declared_all(
                &meta,
                input.global_secondary_indexes.as_deref(),
                input.local_secondary_indexes.as_deref(),
                definitions,
            )?;
            if index::key_attribute_names(&meta, &meta.indexes).len() != definitions.len() {
                return Err(StoreError::validation(
                    "The number of attributes in key schema must match the number of attributes defined in attribute definitions.",
                ));
            }
            // Index ids follow the table's.
            for (n, i) in meta.indexes.iter_mut().enumerate() {
                i.id = id + 1 + n as u32;
            }
        }
        Ok(meta)
    }

    /// The metadata after UpdateTable `input` at `now_ms`, with DynamoDB's
    /// checks; whether the stream was turned off (its records go).
    pub(crate) fn updated(
        &self,
        input: &UpdateTableInput,
        now_ms: u64,
    ) -> Result<(TableMeta, bool), StoreError> {
        if let Some(name) = input.other.keys().next() {
            return Err(StoreError::validation(format!(
                "UpdateTable: {name} is not supported by Postbox (it changes billing mode, provisioned throughput, the stream and global secondary indexes)"
            )));
        }
        let mut next = self.clone();
        let mut changed = false;
        match (input.billing_mode.as_deref(), &input.provisioned_throughput) {
            (None, None) => {}
            (Some("PAY_PER_REQUEST"), Some(_)) => {
                return Err(StoreError::validation(
                    "One or more parameter values were invalid: Neither ReadCapacityUnits nor WriteCapacityUnits can be specified when BillingMode is PAY_PER_REQUEST",
                ));
            }
            (Some("PAY_PER_REQUEST"), None) => {
                next.billing_mode = "PAY_PER_REQUEST".into();
                next.provisioned = None;
                next.pay_per_request_since_ms = Some(now_ms);
                changed = true;
            }
            (Some("PROVISIONED") | None, Some(t)) => {
                if self.billing_mode == "PAY_PER_REQUEST" && input.billing_mode.is_none() {
                    return Err(StoreError::validation(
                        "One or more parameter values were invalid: ProvisionedThroughput cannot be specified for a PAY_PER_REQUEST table unless BillingMode is PROVISIONED",
                    ));
                }
                let (read, write) = capacity_units(t, "Table")?;
                if self.billing_mode == "PAY_PER_REQUEST" {
                    next.pay_per_request_since_ms =
                        Some(self.pay_per_request_since_ms.unwrap_or(self.created_at_ms));
                }
                next.billing_mode = "PROVISIONED".into();
                next.provisioned = Some((read, write));
                changed = true;
            }
            (Some("PROVISIONED"), None) => {
                return Err(StoreError::validation(
                    "No provisioned throughput specified for the table",
                ));
            }
            (Some(other), _) => {
                return Err(StoreError::validation(format!(
                    "1 validation error detected: Value '{other}' at 'billingMode' failed to satisfy constraint: Member must satisfy enum value set: [PROVISIONED, PAY_PER_REQUEST]"
                )));
            }
        }
        let mut stream_off = false;
        match &input.stream_specification {
            None => {}
            Some(StreamSpecification {
                stream_enabled: false,
                stream_view_type: Some(_),
            }) => {
                return Err(StoreError::validation(
                    "Invalid StreamViewType: Stream StreamEnabled was false but a StreamViewType was present.",
                ));
            }
            Some(StreamSpecification {
                stream_enabled: true,
                stream_view_type: None,
            }) => {
                return Err(StoreError::validation(
                    "Invalid StreamViewType: Stream ViewType must not be null or empty when enabling streams.",
                ));
            }
            Some(StreamSpecification {
                stream_enabled: true,
                stream_view_type: Some(v),
            }) => {
                if self.stream_view_type.is_some() {
                    return Err(StoreError::validation(
                        "Table already has an enabled stream",
                    ));
                }
                next.stream_view_type = Some(*v);
                next.stream_enabled_at_ms = Some(now_ms);
                changed = true;
            }
            Some(StreamSpecification {
                stream_enabled: false,
                stream_view_type: None,
            }) => {
                if self.stream_view_type.is_none() {
                    return Err(StoreError::validation("Table has no stream to disable"));
                }
                next.stream_view_type = None;
                stream_off = true;
                changed = true;
            }
        }
        if let Some(updates) = &input.global_secondary_index_updates {
            changed |= index_updates(&mut next, updates, input.attribute_definitions.as_deref())?;
        }
        if !changed {
            return Err(StoreError::validation("Nothing to update"));
        }
        if next.arrival_order && !next.can_keep_arrival_order() {
            return Err(StoreError::validation(format!(
                "Table {} keeps its rows in arrival order (the tag postbox:row-order), which has no stream and no secondary index",
                self.name
            )));
        }
        Ok((next, stream_off))
    }
}

/// UpdateTable's `GlobalSecondaryIndexUpdates` applied to `next`: one index
/// created (CREATING, with a backfill still to run; its id is given by the
/// writer) or deleted at a time, throughput of an existing one changed.
/// The table's attribute definitions become those its keys use. Returns
/// whether anything changed.
fn index_updates(
    next: &mut TableMeta,
    updates: &[crate::api::GlobalSecondaryIndexUpdate],
    definitions: Option<&[AttributeDefinition]>,
) -> Result<bool, StoreError> {
    let online = updates
        .iter()
        .filter(|u| u.create.is_some() || u.delete.is_some())
        .count();
    let building = next.indexes.iter().any(|i| i.backfilled_through.is_some());
    if online > 1 || (online == 1 && building) {
        return Err(StoreError::LimitExceeded(
            "Subscriber limit exceeded: Only 1 online index can be created or deleted simultaneously per table".into(),
        ));
    }
    let mut changed = false;
    for update in updates {
        match (&update.create, &update.delete, &update.update) {
            (Some(create), None, None) => {
                let Some(given) = definitions else {
                    return Err(StoreError::validation("No Attribute Schema Defined"));
                };
                let mut merged = next.attribute_definitions.clone();
                for d in given {
                    match merged.iter().find(|m| m.attribute_name == d.attribute_name) {
                        Some(m) if m.attribute_type != d.attribute_type => {
                            return Err(StoreError::validation(
                                "invalid attribute, SchemaElement redefined should be of same type as previously defined",
                            ));
                        }
                        Some(_) => {}
                        None => merged.push(d.clone()),
                    }
                }
                if next.index(&create.index_name).is_some() {
                    return Err(StoreError::validation(
                        "Attempting to create an index which already exists",
                    ));
                }
                if next.indexes.iter().filter(|i| !i.local).count() >= index::MAX_GLOBAL {
                    return Err(StoreError::LimitExceeded(format!(
                        "Subscriber limit exceeded: the table has {} global secondary indexes already",
                        index::MAX_GLOBAL
                    )));
                }
                let mut created = index::declared(next, create, false, &merged)?;
                created.backfilled_through = Some(Vec::new());
                next.attribute_definitions = merged;
                next.indexes.push(created);
                index::projected_within_limit(&next.indexes)?;
            }
            (None, Some(delete), None) => {
                let before = next.indexes.len();
                next.indexes
                    .retain(|i| i.local || i.name != delete.index_name);
                if next.indexes.len() == before {
                    return Err(not_found());
                }
            }
            (None, None, Some(update)) => {
                let name = update
                    .get("IndexName")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                let billing = next.billing_mode.clone();
                let Some(index) = next.indexes.iter_mut().find(|i| !i.local && i.name == name)
                else {
                    return Err(not_found());
                };
                let Some(t) = update.get("ProvisionedThroughput") else {
                    continue;
                };
                if billing != "PROVISIONED" {
                    return Err(index::throughput_on_demand(name));
                }
                index.provisioned = Some(capacity_units(t, "Index")?);
            }
            (None, None, None) => {
                return Err(StoreError::validation(
                    "Update global secondary index action is null",
                ));
            }
            _ => {
                return Err(StoreError::validation(
                    "One or more parameter values were invalid: Only one of Create, Update or Delete may be given in one GlobalSecondaryIndexUpdate",
                ));
            }
        }
        changed = true;
    }
    // Only the attributes some key uses stay defined.
    let used = index::key_attribute_names(next, &next.indexes);
    next.attribute_definitions
        .retain(|d| used.contains(&d.attribute_name));
    Ok(changed)
}

/// The HASH and optional RANGE attribute names of a key schema.
fn key_schema(schema: &[KeySchemaElement]) -> Result<(&str, Option<&str>), StoreError> {
    match schema {
        [] => Err(StoreError::validation(
            "1 validation error detected: Value '[]' at 'keySchema' failed to satisfy constraint: Member must have length greater than or equal to 1",
        )),
        [h, ..] if h.key_type != KeyType::Hash => Err(StoreError::validation(
            "Invalid KeySchema: The first KeySchemaElement is not a HASH key type",
        )),
        [h] => Ok((&h.attribute_name, None)),
        [_, r] if r.key_type != KeyType::Range => Err(StoreError::validation(
            "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type",
        )),
        [h, r] if h.attribute_name == r.attribute_name => Err(StoreError::validation(
            "Both the Hash Key and the Range Key element in the KeySchema have the same name",
        )),
        [h, r] => Ok((&h.attribute_name, Some(&r.attribute_name))),
        _ => Err(StoreError::validation(
            "1 validation error detected: Value at 'keySchema' failed to satisfy constraint: Member must have length less than or equal to 2",
        )),
    }
}

/// The capacity units a PROVISIONED table was created with.
fn provisioned(input: &CreateTableInput, mode: &str) -> Option<(u64, u64)> {
    let t = input
        .provisioned_throughput
        .as_ref()
        .filter(|_| mode == "PROVISIONED")?;
    Some(units(t))
}

/// The read and write units of a ProvisionedThroughput (0 when missing).
fn units(t: &serde_json::Value) -> (u64, u64) {
    let unit = |k: &str| t.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    (unit("ReadCapacityUnits"), unit("WriteCapacityUnits"))
}

/// [`units`], both at least 1, as UpdateTable and a provisioned index
/// need them; `what` is "Table" or "Index" in DynamoDB's message.
pub(crate) fn capacity_units(t: &serde_json::Value, what: &str) -> Result<(u64, u64), StoreError> {
    let (read, write) = units(t);
    if read < 1 || write < 1 {
        return Err(StoreError::validation(format!(
            "{what} read and write throughput must be at least 1, and cannot be null"
        )));
    }
    Ok((read, write))
}

fn billing_mode(input: &CreateTableInput) -> Result<String, StoreError> {
    let mode = input
        .billing_mode
        .clone()
        .unwrap_or_else(|| "PROVISIONED".to_owned());
    match (mode.as_str(), &input.provisioned_throughput) {
        ("PAY_PER_REQUEST", None) | ("PROVISIONED", Some(_)) => Ok(mode),
        ("PAY_PER_REQUEST", Some(_)) => Err(StoreError::validation(
            "One or more parameter values were invalid: Neither ReadCapacityUnits nor WriteCapacityUnits can be specified when BillingMode is PAY_PER_REQUEST",
        )),
        ("PROVISIONED", None) => Err(StoreError::validation(
            "No provisioned throughput specified for the table",
        )),
        (other, _) => Err(StoreError::validation(format!(
            "1 validation error detected: Value '{other}' at 'billingMode' failed to satisfy constraint: Member must satisfy enum value set: [PROVISIONED, PAY_PER_REQUEST]"
        ))),
    }
}

fn stream_view_type(
    spec: Option<&StreamSpecification>,
) -> Result<Option<StreamViewType>, StoreError> {
    match spec {
        None => Ok(None),
        Some(StreamSpecification {
            stream_enabled: true,
            stream_view_type: Some(v),
        }) => Ok(Some(*v)),
        Some(StreamSpecification {
            stream_enabled: true,
            stream_view_type: None,
        }) => Err(StoreError::validation(
            "One or more parameter values were invalid: StreamViewType is required when StreamEnabled is true",
        )),
        Some(StreamSpecification {
            stream_enabled: false,
            stream_view_type: None,
        }) => Ok(None),
        Some(StreamSpecification {
            stream_enabled: false,
            stream_view_type: Some(_),
        }) => Err(StoreError::validation(
            "One or more parameter values were invalid: StreamViewType cannot be specified when StreamEnabled is false",
        )),
    }
}

/// The committed tables, by name, shared by readers, request validation and
/// the writer.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    tables: RwLock<HashMap<String, Arc<TableMeta>>>,
    /// The names whose tables are created in arrival order
    /// (`EmbeddedOptions::arrival_tables`).
    arrival_tables: Vec<String>,
}

impl Catalog {
    /// A catalog holding `tables`.
    pub(crate) fn new(tables: impl IntoIterator<Item = TableMeta>) -> Catalog {
        Catalog {
            tables: RwLock::new(
                tables
                    .into_iter()
                    .map(|t| (t.name.clone(), Arc::new(t)))
                    .collect(),
            ),
            arrival_tables: Vec::new(),
        }
    }

    /// This catalog, creating the tables called `names` in arrival order.
    pub(crate) fn with_arrival_tables(mut self, names: Vec<String>) -> Catalog {
        self.arrival_tables = names;
        self
    }

    /// Whether a table created now as `meta` is kept in arrival order: its
    /// tag [`arrival::TAG`] asks for it (an error if the table has a stream
    /// or an index, or the tag another value than `arrival` or `key`), or,
    /// without the tag, the store's options name it and it has no stream
    /// and no index.
    pub(crate) fn in_arrival_order(&self, meta: &TableMeta) -> Result<bool, StoreError> {
        let possible = meta.can_keep_arrival_order();
        match meta.tags.get(arrival::TAG).map(String::as_str) {
            None => Ok(possible && self.arrival_tables.contains(&meta.name)),
            Some(arrival::KEY) => Ok(false),
            Some(arrival::ARRIVAL) if possible => Ok(true),
            Some(arrival::ARRIVAL) => Err(StoreError::validation(format!(
                "Table {}: the tag {}=arrival needs a table without a stream and without secondary indexes",
                meta.name,
                arrival::TAG
            ))),
            Some(other) => Err(StoreError::validation(format!(
                "The tag {} is arrival or key, not {other:?}",
                arrival::TAG
            ))),
        }
    }

    /// The table called `name`: a ValidationException for a name DynamoDB
    /// would never accept, ResourceNotFoundException for an unknown one.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<TableMeta>, StoreError> {
        validate::table_name(name)?;
        self.lookup(name).ok_or_else(not_found)
    }

    /// The table called `name`, if it exists.
    pub(crate) fn lookup(&self, name: &str) -> Option<Arc<TableMeta>> {
        self.tables.read().expect("catalog lock").get(name).cloned()
    }

    /// Every table, sorted by name.
    pub(crate) fn all(&self) -> Vec<Arc<TableMeta>> {
        let mut all: Vec<_> = self
            .tables
            .read()
            .expect("catalog lock")
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Publishes a committed change.
    pub(crate) fn apply(&self, change: CatalogChange) {
        let mut tables = self.tables.write().expect("catalog lock");
        match change {
            CatalogChange::Put(meta) => {
                tables.insert(meta.name.clone(), meta);
            }
            CatalogChange::Remove(name) => {
                tables.remove(&name);
            }
        }
    }
}

/// A change of table metadata made inside a write batch, published after
/// its commit.
#[derive(Clone, Debug)]
pub(crate) enum CatalogChange {
    Put(Arc<TableMeta>),
    Remove(String),
}

/// DynamoDB's error for an unknown table.
pub(crate) fn not_found() -> StoreError {
    StoreError::ResourceNotFound("Requested resource not found".to_owned())
}

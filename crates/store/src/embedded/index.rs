//! Secondary indexes: what CreateTable and UpdateTable declare, the rules
//! DynamoDB applies to them and to reads of them, where an index row lives
//! in the file, and the backfill of a new one.
//!
//! An index is kept in the items table under its own numeric id (drawn
//! from the same counter as table ids), one row per base item that has the
//! index's key attributes (a sparse index skips the others):
//!
//! `index id (u32 BE) ‖ partition(index pk) ‖ partition(index sk) ‖ base key`
//!
//! where `partition` is the self-delimiting, order-preserving encoding of
//! partition keys, so one index partition is contiguous and sorted by the
//! index sort key, and items with equal index keys stay distinct (and
//! ordered) by their base key. The row's value is the base item's key in
//! the file: a read follows it to the item and projects it, so an index
//! row changes only when the item enters, leaves or moves in the index.
//! Rows change in the same transaction as their item (`context`), so
//! index reads are exact where DynamoDB's global indexes are eventually
//! consistent.

use postbox_item::{AttributeValue, Item, encode_partition_key};
use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::api::{
    AttributeDefinition, IndexProjection, KeySchemaElement, KeyType, ProjectionType, SecondaryIndex,
};

use super::catalog::{KeyAttribute, TableMeta};
use super::keys;

/// Most global secondary indexes a table may have.
pub(crate) const MAX_GLOBAL: usize = 20;
/// Most local secondary indexes a table may have.
pub(crate) const MAX_LOCAL: usize = 5;
/// Most non-key attributes projected, over all of a table's indexes.
const MAX_PROJECTED: usize = 100;

/// One secondary index of a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexMeta {
    /// Numeric id that prefixes the index's rows in the items table.
    pub id: u32,
    /// The index name.
    pub name: String,
    /// A local index (same partition key as the table) rather than a
    /// global one.
    pub local: bool,
    /// The index's partition key.
    pub partition_key: KeyAttribute,
    /// The index's sort key, if any.
    pub sort_key: Option<KeyAttribute>,
    /// What the index holds besides the keys.
    pub projection: ProjectionType,
    /// The attributes an INCLUDE projection adds.
    #[serde(default)]
    pub non_key_attributes: Vec<String>,
    /// Read and write capacity of a global index on a PROVISIONED table.
    #[serde(default)]
    pub provisioned: Option<(u64, u64)>,
    /// While UpdateTable's backfill runs: the base-table row key it has
    /// indexed through (empty before the first chunk). None once ACTIVE.
    #[serde(default)]
    pub backfilled_through: Option<Vec<u8>>,
}

impl IndexMeta {
    /// The index's key schema in DynamoDB's shape.
    pub fn key_schema(&self) -> Vec<KeySchemaElement> {
        super::catalog::key_schema_of(&self.partition_key, self.sort_key.as_ref())
    }

    /// The index's key attributes: its partition key, then its sort key.
    pub fn key_attributes(&self) -> impl Iterator<Item = &KeyAttribute> {
        std::iter::once(&self.partition_key).chain(self.sort_key.as_ref())
    }

    /// True when `name` is one of the index's own key attributes.
    pub fn is_key_attribute(&self, name: &str) -> bool {
        self.key_attributes().any(|k| k.name == name)
    }

    /// Whether the index holds attribute `name` of `table`'s items: every
    /// attribute (ALL), else the table's and the index's keys and the
    /// included attributes.
    pub fn holds(&self, table: &TableMeta, name: &str) -> bool {
        self.projection == ProjectionType::All
            || table.is_key_attribute(name)
            || self.is_key_attribute(name)
            || self.non_key_attributes.iter().any(|a| a == name)
    }

    /// CREATING while the backfill runs, else ACTIVE.
    pub fn status(&self) -> &'static str {
        if self.backfilled_through.is_some() {
            "CREATING"
        } else {
            "ACTIVE"
        }
    }

    /// The item as the index holds it ([`IndexMeta::holds`]).
    pub fn project(&self, table: &TableMeta, item: &Item) -> Item {
        if self.projection == ProjectionType::All {
            return item.clone();
        }
        item.iter()
            .filter(|(name, _)| self.holds(table, name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// DescribeTable's entry for the index.
    pub fn describe(&self, table: &TableMeta, item_count: u64, size: u64) -> serde_json::Value {
        let mut projection = serde_json::json!({ "ProjectionType": self.projection });
        if self.projection == ProjectionType::Include {
            projection["NonKeyAttributes"] = serde_json::json!(self.non_key_attributes);
        }
        let mut out = serde_json::json!({
            "IndexName": self.name,
            "KeySchema": self.key_schema(),
            "Projection": projection,
            "IndexSizeBytes": size,
            "ItemCount": item_count,
            "IndexArn": format!("{}/index/{}", table.arn(), self.name),
        });
        if !self.local {
            out["IndexStatus"] = serde_json::json!(self.status());
            if self.backfilled_through.is_some() {
                out["Backfilling"] = serde_json::json!(true);
            }
            let (read, write) = self.provisioned.unwrap_or((0, 0));
            out["ProvisionedThroughput"] = serde_json::json!({
                "NumberOfDecreasesToday": 0,
                "ReadCapacityUnits": read,
                "WriteCapacityUnits": write,
            });
        }
        out
    }

    /// The row key of `item` (stored under `base_key`) in this index, or
    /// None when the item lacks an index key attribute (or holds one of
    /// another type, which writes refuse: see [`check_item`]).
    pub(crate) fn row_key(&self, item: &Item, base_key: &[u8]) -> Option<Vec<u8>> {
        let value =
            |attr: &KeyAttribute| item.get(&attr.name).filter(|v| keys::has_type(v, attr.ty));
        let pk = value(&self.partition_key)?;
        let sk = match &self.sort_key {
            Some(attr) => Some(value(attr)?),
            None => None,
        };
        let mut out = self.partition_prefix(pk);
        if let Some(sk) = sk {
            encode_partition_key(sk, &mut out).expect("typed above");
        }
        out.extend_from_slice(base_key);
        Some(out)
    }

    /// The prefix of every row of one index partition.
    pub(crate) fn partition_prefix(&self, pk: &AttributeValue) -> Vec<u8> {
        keys::partition_prefix(self.id, pk)
    }
}

/// The item's index key attributes must be of their declared types, not
/// empty, and within the key size limits: DynamoDB refuses such a write.
pub(crate) fn check_item(meta: &TableMeta, item: &Item) -> Result<(), StoreError> {
    for index in &meta.indexes {
        for (attr, limit) in index.key_attributes().zip([2048, 1024]) {
            let Some(v) = item.get(&attr.name) else {
                continue;
            };
            if !keys::has_type(v, attr.ty) {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Type mismatch for Index Key {} Expected: {:?} Actual: {} IndexName: {}",
                    attr.name,
                    attr.ty,
                    v.attribute_type().as_str(),
                    index.name
                )));
            }
            keys::not_empty_key(&attr.name, v, Some(&index.name))?;
            if v.size() > limit {
                return Err(StoreError::validation(if limit == 2048 {
                    "One or more parameter values were invalid: Hash primary key values must be under 2048 bytes, and range primary key values must be under 1024 bytes"
                } else {
                    "One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
                }));
            }
        }
    }
    Ok(())
}

fn invalid_name(name: &str) -> Option<StoreError> {
    let ok = (3..=255).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    (!ok).then(|| {
        StoreError::validation(
            "Invalid table/index name.  Table/index names must be between 3 and 255 characters long, and may contain only the characters a-z, A-Z, 0-9, '_', '-', and '.'",
        )
    })
}

/// The index's key attributes, looked up in the table's definitions.
fn index_keys(
    schema: &[KeySchemaElement],
    definitions: &[AttributeDefinition],
) -> Result<(KeyAttribute, Option<KeyAttribute>), StoreError> {
    let typed = |e: &KeySchemaElement| {
        definitions
            .iter()
            .find(|d| d.attribute_name == e.attribute_name)
            .map(|d| KeyAttribute {
                name: d.attribute_name.clone(),
                ty: d.attribute_type,
            })
            .ok_or_else(|| {
                StoreError::validation(format!(
                    "Attribute {} is not defined in AttributeDefinitions",
                    e.attribute_name
                ))
            })
    };
    match schema {
        [] => Err(StoreError::validation(
            "No defined key schema.  A key schema containing at least a hash key must be defined for all tables",
        )),
        [h, ..] if h.key_type != KeyType::Hash => Err(StoreError::validation(
            "No Hash Key specified in schema.  All Dynamo DB tables must have exactly one hash key",
        )),
        [h] => Ok((typed(h)?, None)),
        [h, r] if r.key_type != KeyType::Range => Err(StoreError::validation(format!(
            "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type: {}",
            h.attribute_name
        ))),
        [h, r] if h.attribute_name == r.attribute_name => Err(StoreError::validation(
            "Two keys can not have the same name",
        )),
        [h, r] => Ok((typed(h)?, Some(typed(r)?))),
        _ => Err(StoreError::validation(
            "1 validation error detected: Value at 'keySchema' failed to satisfy constraint: Member must have length less than or equal to 2",
        )),
    }
}

fn projection(p: &IndexProjection) -> Result<(ProjectionType, Vec<String>), StoreError> {
    let ty = match p.projection_type.as_deref() {
        None => {
            return Err(StoreError::validation(
                "Indexes must have a projection specified",
            ));
        }
        Some("ALL") => ProjectionType::All,
        Some("KEYS_ONLY") => ProjectionType::KeysOnly,
        Some("INCLUDE") => ProjectionType::Include,
        Some(_) => {
            return Err(StoreError::validation(
                "Projection type must be INCLUDE, ALL, or KEYS_ONLY",
            ));
        }
    };
    let non_key = p.non_key_attributes.clone().unwrap_or_default();
    match ty {
        ProjectionType::Include if non_key.is_empty() => Err(StoreError::validation(
            "If Projection type INCLUDE is specified, some non-key attributes to include in the projection must be specified as well",
        )),
        ProjectionType::All | ProjectionType::KeysOnly if p.non_key_attributes.is_some() => {
            Err(StoreError::validation(
                "No attributes should be specified to be projected unless projection type is INCLUDE",
            ))
        }
        _ => {
            for (i, a) in non_key.iter().enumerate() {
                if non_key[..i].contains(a) {
                    return Err(StoreError::validation(
                        "Cannot have two attributes with the same name",
                    ));
                }
            }
            Ok((ty, non_key))
        }
    }
}

/// DynamoDB's refusal of throughput for index `name` of a PAY_PER_REQUEST
/// table (at CreateTable and at UpdateTable).
pub(crate) fn throughput_on_demand(name: &str) -> StoreError {
    StoreError::validation(format!(
        "One or more parameter values were invalid: ProvisionedThroughput should not be specified for index: {name} when BillingMode is PAY_PER_REQUEST"
    ))
}

/// Builds one index from its declaration, with DynamoDB's rules for the
/// table `table` (whose keys and billing mode are already known). `id` is
/// filled in by the writer.
pub(crate) fn declared(
    table: &TableMeta,
    index: &SecondaryIndex,
    local: bool,
    definitions: &[AttributeDefinition],
) -> Result<IndexMeta, StoreError> {
    if let Some(e) = invalid_name(&index.index_name) {
        return Err(e);
    }
    if local
        && let [_, range] = index.key_schema.as_slice()
        && !definitions
            .iter()
            .any(|d| d.attribute_name == range.attribute_name)
    {
        return Err(StoreError::validation(
            "Local Secondary Index range key not specified in Attribute Definitions.Type unknown.",
        ));
    }
    let (partition_key, sort_key) = index_keys(&index.key_schema, definitions)?;
    if local {
        if table.sort_key.is_none() {
            return Err(StoreError::validation(
                "Local Secondary indices are not allowed on hash tables, only hash and range tables",
            ));
        }
        if partition_key.name != table.partition_key.name {
            return Err(StoreError::validation(
                "Local Secondary indices must have the same hash key as the main table",
            ));
        }
        if sort_key.is_none() {
            return Err(StoreError::validation(
                "Local secondary indices must have a range key",
            ));
        }
    }
    let (projection, non_key_attributes) = projection(&index.projection)?;
    let provisioned = match (
        local,
        table.billing_mode.as_str(),
        &index.provisioned_throughput,
    ) {
        (true, _, _) => None,
        (false, "PROVISIONED", None) => {
            return Err(StoreError::validation(
                "No provisioned throughput specified for the global secondary index",
            ));
        }
        (false, "PROVISIONED", Some(t)) => Some(super::catalog::capacity_units(t, "Index")?),
        (false, _, Some(_)) => return Err(throughput_on_demand(&index.index_name)),
        (false, _, None) => None,
    };
    Ok(IndexMeta {
        id: 0,
        name: index.index_name.clone(),
        local,
        partition_key,
        sort_key,
        projection,
        non_key_attributes,
        provisioned,
        backfilled_through: None,
    })
}

/// The indexes of CreateTable, checked together: names unique, counts and
/// projected attributes within DynamoDB's limits.
pub(crate) fn declared_all(
    table: &TableMeta,
    global: Option<&[SecondaryIndex]>,
    local: Option<&[SecondaryIndex]>,
    definitions: &[AttributeDefinition],
) -> Result<Vec<IndexMeta>, StoreError> {
    let mut out: Vec<IndexMeta> = Vec::new();
    for (list, is_local) in [(local, true), (global, false)] {
        let Some(list) = list else { continue };
        // An empty list of local indexes is no index; an empty list of
        // global ones is refused (as DynamoDB does both).
        if list.is_empty() && !is_local {
            return Err(StoreError::validation("GSI list is empty/invalid"));
        }
        if is_local && list.len() > MAX_LOCAL {
            return Err(StoreError::validation(format!(
                "Cannot have more than {MAX_LOCAL} local secondary indexes per table"
            )));
        }
        if !is_local && list.len() > MAX_GLOBAL {
            return Err(StoreError::validation(
                "GlobalSecondaryIndex count exceeds the per-table limit",
            ));
        }
        for index in list {
            let meta = declared(table, index, is_local, definitions)?;
            if let Some(twin) = out.iter().find(|i| i.name == meta.name) {
                return Err(StoreError::validation(match (twin.local, is_local) {
                    (true, true) => "Two local secondary indices have the same name",
                    (false, false) => "Two global secondary indices have the same name",
                    _ => {
                        "Local Secondary Indices AND Global Secondary Indices must have different names"
                    }
                }));
            }
            out.push(meta);
        }
    }
    projected_within_limit(&out)?;
    Ok(out)
}

/// At most 100 non-key attributes projected over all indexes.
pub(crate) fn projected_within_limit(indexes: &[IndexMeta]) -> Result<(), StoreError> {
    let projected: usize = indexes.iter().map(|i| i.non_key_attributes.len()).sum();
    if projected > MAX_PROJECTED {
        return Err(StoreError::validation(format!(
            "One or more parameter values were invalid: Number of projected attributes in all indexes exceeds limit of {MAX_PROJECTED}, number of projected attributes: {projected}"
        )));
    }
    Ok(())
}

/// Every key attribute the table and its indexes use.
pub(crate) fn key_attribute_names(table: &TableMeta, indexes: &[IndexMeta]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let index_keys = indexes.iter().flat_map(IndexMeta::key_attributes);
    for k in table.key_attributes().chain(index_keys) {
        if !names.contains(&k.name) {
            names.push(k.name.clone());
        }
    }
    names
}

// ---- reading an index ----

/// The index a Query or Scan names, with DynamoDB's rules for reading it.
pub(crate) fn read_index(
    meta: &TableMeta,
    name: Option<&str>,
    consistent: Option<bool>,
) -> Result<Option<IndexMeta>, StoreError> {
    let Some(name) = name else { return Ok(None) };
    let Some(index) = meta.index(name) else {
        return Err(StoreError::validation(format!(
            "The table does not have the specified index: {name}"
        )));
    };
    if !index.local && consistent == Some(true) {
        return Err(StoreError::validation(
            "Consistent reads are not supported on global secondary indexes",
        ));
    }
    if index.backfilled_through.is_some() {
        return Err(StoreError::validation(format!(
            "Cannot read from backfilling global secondary index: {name}"
        )));
    }
    Ok(Some(index.clone()))
}

/// The attributes of `names` that `index` does not hold, once each.
pub(crate) fn missing<'a>(
    meta: &TableMeta,
    index: &IndexMeta,
    names: impl Iterator<Item = &'a str>,
) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for name in names {
        if !index.holds(meta, name) && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// Items indexed per backfill commit: small enough that writes queued
/// behind a chunk wait a few milliseconds.
const BACKFILL_CHUNK: usize = 1000;

/// Runs the backfill of `meta`'s CREATING indexes to the end, one chunk per
/// commit, so writes to the table go on between chunks. UpdateTable starts
/// it; the sweeper resumes one a restart interrupted.
pub(crate) fn backfill(inner: &super::Inner, meta: &TableMeta) -> Result<(), StoreError> {
    loop {
        let (name, id) = (meta.name.clone(), meta.id);
        let more = inner
            .writer
            .submit_blocking(move |ctx| match ctx.table(&name) {
                Ok(current) if current.id == id => ctx.backfill(&current, BACKFILL_CHUNK),
                _ => Ok(false),
            })?;
        if !more {
            return Ok(());
        }
    }
}

//! Where an item lives in the store file: the byte key of an item, key
//! validation with DynamoDB's messages, and key ranges for Query and Scan.
//!
//! Layout: `table id (u32 BE) ‖ encode_partition_key(pk) ‖ encode_sort_key(sk)`.
//! The partition encoding is self-delimiting and the sort encoding
//! order-preserving, so one partition's items are contiguous and sorted by
//! sort key, and a table's items are contiguous.

use std::ops::Bound;

use postbox_expr::SortKeyCondition;
use postbox_item::{AttributeValue, Item, encode_partition_key, encode_sort_key};

use crate::StoreError;
use crate::api::ScalarType;

use super::catalog::{KeyAttribute, TableMeta};

/// The key bytes of the item with these key values.
pub(crate) fn encode(
    meta: &TableMeta,
    pk: &AttributeValue,
    sk: Option<&AttributeValue>,
) -> Vec<u8> {
    let mut out = partition_prefix(meta.id, pk);
    if let Some(sk) = sk {
        encode_sort_key(sk, &mut out).expect("key types are validated before encoding");
    }
    out
}

/// The prefix of every item of table `id`.
pub(crate) fn table_prefix(id: u32) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

/// The prefix of every item of one partition.
pub(crate) fn partition_prefix(id: u32, pk: &AttributeValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    out.extend_from_slice(&id.to_be_bytes());
    encode_partition_key(pk, &mut out).expect("key types are validated before encoding");
    out
}

/// The smallest byte string greater than every string starting with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    unreachable!("prefixes start with a table id below u32::MAX")
}

/// The encoded key of the item given as a `Key` parameter (GetItem,
/// UpdateItem, DeleteItem, batch and transaction actions): exactly the key
/// attributes, of the declared types.
pub(crate) fn key_param(meta: &TableMeta, key: &Item) -> Result<Vec<u8>, StoreError> {
    let expected = 1 + meta.sort_key.is_some() as usize;
    let mismatch = || StoreError::validation("The provided key element does not match the schema");
    if key.len() != expected {
        return Err(mismatch());
    }
    let pk = key_value(key, &meta.partition_key).ok_or_else(mismatch)?;
    let sk = meta
        .sort_key
        .as_ref()
        .map(|sk| key_value(key, sk).ok_or_else(mismatch))
        .transpose()?;
    not_empty(&meta.partition_key, pk)?;
    within_limit(meta, &meta.partition_key, pk)?;
    if let (Some(attr), Some(v)) = (&meta.sort_key, sk) {
        not_empty(attr, v)?;
        within_limit(meta, attr, v)?;
    }
    Ok(encode(meta, pk, sk))
}

/// The encoded key of an item being put: the key attributes must be present,
/// of the declared types and not empty.
pub(crate) fn item_key(meta: &TableMeta, item: &Item) -> Result<Vec<u8>, StoreError> {
    let pk = item_key_value(item, &meta.partition_key)?;
    within_limit(meta, &meta.partition_key, pk)?;
    let sk = meta
        .sort_key
        .as_ref()
        .map(|attr| item_key_value(item, attr))
        .transpose()?;
    if let (Some(attr), Some(v)) = (&meta.sort_key, sk) {
        within_limit(meta, attr, v)?;
    }
    Ok(encode(meta, pk, sk))
}

/// The key attributes of `item` (which holds them).
pub(crate) fn key_of(meta: &TableMeta, item: &Item) -> Item {
    let mut key = Item::new();
    for attr in meta.key_attributes() {
        if let Some(v) = item.get(&attr.name) {
            key.insert(attr.name.clone(), v.clone());
        }
    }
    key
}

/// True when `v` is of the declared key type.
pub(crate) fn has_type(v: &AttributeValue, ty: ScalarType) -> bool {
    matches!(
        (v, ty),
        (AttributeValue::S(_), ScalarType::S)
            | (AttributeValue::N(_), ScalarType::N)
            | (AttributeValue::B(_), ScalarType::B)
    )
}

fn key_value<'a>(key: &'a Item, attr: &KeyAttribute) -> Option<&'a AttributeValue> {
    key.get(&attr.name).filter(|v| has_type(v, attr.ty))
}

fn item_key_value<'a>(
    item: &'a Item,
    attr: &KeyAttribute,
) -> Result<&'a AttributeValue, StoreError> {
    let v = item.get(&attr.name).ok_or_else(|| {
        StoreError::validation(format!(
            "One or more parameter values were invalid: Missing the key {} in the item",
            attr.name
        ))
    })?;
    if !has_type(v, attr.ty) {
        return Err(StoreError::validation(format!(
            "One or more parameter values were invalid: Type mismatch for key {} expected: {:?} actual: {}",
            attr.name,
            attr.ty,
            v.attribute_type().as_str()
        )));
    }
    not_empty(attr, v)?;
    Ok(v)
}

/// Largest partition key value, in bytes.
const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// Largest sort key value, in bytes.
const MAX_SORT_KEY_BYTES: usize = 1024;

/// A key value's size limit: 2048 bytes for a partition key, 1024 for a
/// sort key.
fn within_limit(
    meta: &TableMeta,
    attr: &KeyAttribute,
    v: &AttributeValue,
) -> Result<(), StoreError> {
    let limit = if attr.name == meta.partition_key.name {
        MAX_PARTITION_KEY_BYTES
    } else {
        MAX_SORT_KEY_BYTES
    };
    if v.size() > limit {
        return Err(StoreError::validation(
            "One or more parameter values were invalid: Hash primary key values must be under 2048 bytes, and range primary key values must be under 1024 bytes",
        ));
    }
    Ok(())
}

fn not_empty(attr: &KeyAttribute, v: &AttributeValue) -> Result<(), StoreError> {
    not_empty_key(&attr.name, v, None)
}

/// A key value (of the table, or of index `index`) must not be an empty
/// string or binary; DynamoDB names the key, and the index if it is one.
pub(crate) fn not_empty_key(
    name: &str,
    v: &AttributeValue,
    index: Option<&str>,
) -> Result<(), StoreError> {
    let kind = match v {
        AttributeValue::S(s) if s.is_empty() => "string",
        AttributeValue::B(b) if b.is_empty() => "binary",
        _ => return Ok(()),
    };
    Err(StoreError::validation(match index {
        None => format!(
            "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty {kind} value. Key: {name}"
        ),
        Some(index) => format!(
            "One or more parameter values are not valid. A value specified for a secondary index key is not supported. The AttributeValue for a key attribute cannot contain an empty {kind} value. IndexName: {index}, IndexKey: {name}"
        ),
    }))
}

/// Byte bounds of the items of one partition that a sort-key condition can
/// match. The condition itself is still checked per item; the bounds only
/// keep the scan short.
pub(crate) fn sort_bounds(
    prefix: &[u8],
    sort: Option<&SortKeyCondition>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    bounds(prefix, sort, false)
}

/// [`sort_bounds`] for an index, whose sort key is encoded like a
/// partition key (self-delimiting, so the base key can follow it).
pub(crate) fn index_sort_bounds(
    prefix: &[u8],
    sort: Option<&SortKeyCondition>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    bounds(prefix, sort, true)
}

/// The bounds of [`sort_bounds`]; with `delimited`, a key holds more after
/// the sort key's encoding (an index row's base key), so the keys "at" a
/// value are all those that start with its encoding.
fn bounds(
    prefix: &[u8],
    sort: Option<&SortKeyCondition>,
    delimited: bool,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let at = |v: &AttributeValue| {
        let mut k = prefix.to_vec();
        let _ = if delimited {
            encode_partition_key(v, &mut k)
        } else {
            encode_sort_key(v, &mut k)
        };
        k
    };
    // Everything whose sort key sorts at or before `v`'s, and after it.
    let through = |v: &AttributeValue| match delimited {
        true => Bound::Excluded(prefix_end(&at(v))),
        false => Bound::Included(at(v)),
    };
    let after = |v: &AttributeValue| match delimited {
        true => Bound::Included(prefix_end(&at(v))),
        false => Bound::Excluded(at(v)),
    };
    let (start, end) = (
        Bound::Included(prefix.to_vec()),
        Bound::Excluded(prefix_end(prefix)),
    );
    match sort {
        None => (start, end),
        Some(SortKeyCondition::Eq(v)) => (Bound::Included(at(v)), through(v)),
        Some(SortKeyCondition::Lt(v)) => (start, Bound::Excluded(at(v))),
        Some(SortKeyCondition::Le(v)) => (start, through(v)),
        Some(SortKeyCondition::Gt(v)) => (after(v), end),
        Some(SortKeyCondition::Ge(v)) => (Bound::Included(at(v)), end),
        Some(SortKeyCondition::Between(lo, hi)) if at(lo) <= at(hi) => {
            (Bound::Included(at(lo)), through(hi))
        }
        Some(SortKeyCondition::Between(..)) => (
            Bound::Included(prefix.to_vec()),
            Bound::Excluded(prefix.to_vec()),
        ),
        Some(SortKeyCondition::BeginsWith(v)) => {
            let mut p = at(v);
            if delimited {
                // Without its terminator, the encoding is a prefix of
                // every value that begins with `v`.
                p.truncate(p.len() - 2);
            }
            let e = prefix_end(&p);
            (Bound::Included(p), Bound::Excluded(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ScalarType;

    fn meta() -> TableMeta {
        TableMeta {
            id: 7,
            name: "t".into(),
            partition_key: KeyAttribute {
                name: "pk".into(),
                ty: ScalarType::S,
            },
            sort_key: Some(KeyAttribute {
                name: "sk".into(),
                ty: ScalarType::N,
            }),
            attribute_definitions: vec![],
            stream_view_type: None,
            provisioned: None,
            ttl_attribute: None,
            created_at_ms: 0,
            billing_mode: "PAY_PER_REQUEST".into(),
            tags: Default::default(),
            stream_enabled_at_ms: None,
            pay_per_request_since_ms: None,
            indexes: Vec::new(),
            arrival_order: false,
            arrival: None,
        }
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn sort_keys_order_within_a_partition() {
        let m = meta();
        let a = encode(&m, &AttributeValue::s("p"), Some(&AttributeValue::n(-5)));
        let b = encode(&m, &AttributeValue::s("p"), Some(&AttributeValue::n(3)));
        let prefix = partition_prefix(7, &AttributeValue::s("p"));
        assert!(a < b && a.starts_with(&prefix) && b < prefix_end(&prefix));
    }

    #[test]
    fn key_params_must_match_the_schema_exactly() {
        let m = meta();
        let ok = item(&[("pk", AttributeValue::s("a")), ("sk", AttributeValue::n(1))]);
        assert!(key_param(&m, &ok).is_ok());
        let mut extra = ok.clone();
        extra.insert("x".into(), AttributeValue::n(1));
        assert!(
            key_param(&m, &extra)
                .unwrap_err()
                .to_string()
                .contains("does not match the schema")
        );
        let wrong = item(&[("pk", AttributeValue::n(1)), ("sk", AttributeValue::n(1))]);
        assert!(key_param(&m, &wrong).is_err());
        let empty = item(&[("pk", AttributeValue::s("")), ("sk", AttributeValue::n(1))]);
        assert!(
            key_param(&m, &empty)
                .unwrap_err()
                .to_string()
                .contains("empty string value. Key: pk")
        );
    }

    #[test]
    fn items_name_the_missing_or_mistyped_key() {
        let m = meta();
        let missing = item(&[("pk", AttributeValue::s("a"))]);
        assert!(
            item_key(&m, &missing)
                .unwrap_err()
                .to_string()
                .contains("Missing the key sk in the item")
        );
        let mistyped = item(&[
            ("pk", AttributeValue::s("a")),
            ("sk", AttributeValue::s("1")),
        ]);
        assert!(
            item_key(&m, &mistyped)
                .unwrap_err()
                .to_string()
                .contains("Type mismatch for key sk expected: N actual: S")
        );
    }
}

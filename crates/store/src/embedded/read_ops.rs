//! The point reads: GetItem, BatchGetItem and TransactGetItems (Query and
//! Scan are `range_ops`).
//!
//! Reads run on the caller's thread in a redb read transaction: a consistent
//! snapshot of the last commit that never waits for the writer. Expired
//! items are never returned (see `ttl`).

use std::collections::{BTreeMap, HashSet};

use postbox_expr::{Projection, parse_projection};
use postbox_item::Item;
use redb::{ReadOnlyTable, ReadTransaction, ReadableTable};

use crate::StoreError;
use crate::api::*;

use super::catalog::{Catalog, TableMeta};
use super::tables::{ITEMS, open_if_present};
use super::{arrival, keys, row, storage_err, ttl, validate};

/// The items table as a snapshot sees it.
pub(super) type ItemsTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// Opens the items table of a snapshot (absent in a brand-new file).
pub(super) fn items(txn: &ReadTransaction) -> Result<Option<ItemsTable>, StoreError> {
    open_if_present(txn, ITEMS)
}

/// The live item stored under `key`.
fn get_live(
    table: Option<&ItemsTable>,
    meta: &TableMeta,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<Item>, StoreError> {
    let Some(table) = table else { return Ok(None) };
    let Some(item) = stored_item(table, meta, key)? else {
        return Ok(None);
    };
    Ok((!ttl::is_expired(meta, &item, now_ms)).then_some(item))
}

/// The item `items` stores under the item key `key`, expired or not: under
/// the key itself, or, in a table kept in arrival order, where its index
/// finds it.
pub(super) fn stored_item<T>(
    items: &T,
    meta: &TableMeta,
    key: &[u8],
) -> Result<Option<Item>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    match &meta.arrival {
        Some(index) => arrival::find(items, meta, index, key),
        None => match items.get(key).map_err(storage_err)? {
            Some(bytes) => Ok(Some(row::item(bytes.value())?)),
            None => Ok(None),
        },
    }
}

/// A projection parsed from a read request with names only.
fn projection(src: Option<&str>, names: Option<&Names>) -> Result<Option<Projection>, StoreError> {
    validate::placeholder_maps(names, None, src.is_some())?;
    let mut ph = validate::placeholders(names, None);
    let projection = src
        .map(|s| parse_projection(s, &mut ph))
        .transpose()
        .map_err(validate::expr)?;
    ph.finish().map_err(validate::expr)?;
    Ok(projection)
}

fn projected(item: Item, projection: Option<&Projection>) -> Item {
    match projection {
        Some(p) => p.apply(&item),
        None => item,
    }
}

/// GetItem.
pub(crate) fn get_item(
    txn: &ReadTransaction,
    catalog: &Catalog,
    now_ms: u64,
    mut input: GetItemInput,
) -> Result<GetItemOutput, StoreError> {
    crate::legacy::get_item(&mut input)?;
    let projection = projection(
        input.projection_expression.as_deref(),
        input.expression_attribute_names.as_ref(),
    )?;
    let meta = catalog.get(&input.table_name)?;
    let key = keys::key_param(&meta, &input.key)?;
    let item = get_live(items(txn)?.as_ref(), &meta, &key, now_ms)?;
    Ok(GetItemOutput {
        item: item.map(|i| projected(i, projection.as_ref())),
    })
}

/// BatchGetItem: at most 100 keys, no key twice; every requested table
/// appears in the answer, with an empty list when nothing was found.
pub(crate) fn batch_get_item(
    txn: &ReadTransaction,
    catalog: &Catalog,
    now_ms: u64,
    input: BatchGetItemInput,
) -> Result<BatchGetItemOutput, StoreError> {
    if input.request_items.is_empty() {
        return Err(StoreError::validation(
            "1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Member must have length greater than or equal to 1",
        ));
    }
    let total: usize = input.request_items.values().map(|k| k.keys.len()).sum();
    if total > validate::MAX_BATCH_GET_KEYS {
        return Err(StoreError::validation(
            "Too many items requested for the BatchGetItem call",
        ));
    }
    let mut plans = Vec::new();
    for (table, request) in &input.request_items {
        if request.keys.is_empty() {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value '[]' at 'requestItems.{table}.member.keys' failed to satisfy constraint: Member must have length greater than or equal to 1"
            )));
        }
        let projection = projection(
            request.projection_expression.as_deref(),
            request.expression_attribute_names.as_ref(),
        )?;
        let meta = catalog.get(table)?;
        let mut seen = HashSet::new();
        let mut encoded = Vec::with_capacity(request.keys.len());
        for key in &request.keys {
            let bytes = keys::key_param(&meta, key)?;
            if !seen.insert(bytes.clone()) {
                return Err(StoreError::validation(
                    "Provided list of item keys contains duplicates",
                ));
            }
            encoded.push(bytes);
        }
        plans.push((table.clone(), meta, projection, encoded));
    }
    let items_table = items(txn)?;
    let mut responses = BTreeMap::new();
    for (table, meta, projection, encoded) in plans {
        let mut found = Vec::new();
        for key in encoded {
            if let Some(item) = get_live(items_table.as_ref(), &meta, &key, now_ms)? {
                found.push(projected(item, projection.as_ref()));
            }
        }
        responses.insert(table, found);
    }
    Ok(BatchGetItemOutput {
        responses,
        unprocessed_keys: BTreeMap::new(),
    })
}

/// TransactGetItems: at most 100 reads of distinct items from one snapshot.
pub(crate) fn transact_get_items(
    txn: &ReadTransaction,
    catalog: &Catalog,
    now_ms: u64,
    input: TransactGetItemsInput,
) -> Result<TransactGetItemsOutput, StoreError> {
    let n = input.transact_items.len();
    validate::transact_items(n)?;
    let mut plans = Vec::with_capacity(n);
    let mut seen = HashSet::new();
    for TransactGetItem { get } in &input.transact_items {
        let projection = projection(
            get.projection_expression.as_deref(),
            get.expression_attribute_names.as_ref(),
        )?;
        let meta = catalog.get(&get.table_name)?;
        let key = keys::key_param(&meta, &get.key)?;
        if !seen.insert((meta.id, key.clone())) {
            return Err(StoreError::validation(
                "Transaction request cannot include multiple operations on one item",
            ));
        }
        plans.push((meta, key, projection));
    }
    let items_table = items(txn)?;
    let mut responses = Vec::with_capacity(n);
    for (meta, key, projection) in plans {
        let item = get_live(items_table.as_ref(), &meta, &key, now_ms)?;
        responses.push(ItemResponse {
            item: item.map(|i| projected(i, projection.as_ref())),
        });
    }
    Ok(TransactGetItemsOutput { responses })
}

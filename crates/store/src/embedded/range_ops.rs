//! The range reads: Query and Scan, a page at a time.
//!
//! A page is one ordered walk of the items table from the request's start
//! (its partition's prefix, or the whole table for a Scan) up to the page's
//! limit, in a snapshot like every read (`read_ops`). Expired items are
//! never returned (see `ttl`).

use std::ops::Bound;
use std::sync::Arc;

use postbox_expr::{
    Condition, KeyCondition, Placeholders, Projection, SortKeyCondition, parse_filter,
    parse_key_condition, parse_projection,
};
use postbox_item::{AttributeValue, Item, RawValueRef, decode_item, item_size, visit_encoded_item};
use redb::ReadTransaction;

use crate::StoreError;
use crate::api::*;

use super::catalog::{Catalog, KeyAttribute, TableMeta};
use super::index::IndexMeta;
use super::{arrival, index, keys, row, storage_err, ttl, validate};

use super::read_ops::items;

/// What a Query or Scan page returns of each matching item.
enum Shape {
    All,
    /// The attributes the index holds (ALL_PROJECTED_ATTRIBUTES).
    IndexProjected,
    Projected(Projection),
    Count,
}

/// The parts of Query and Scan that are the same: select, filter, projection.
struct Page {
    meta: Arc<TableMeta>,
    /// The index read, if not the table: its rows lead to the items.
    index: Option<IndexMeta>,
    filter: Option<Condition>,
    shape: Shape,
    limit: Option<usize>,
    start: Option<Vec<u8>>,
}

impl Page {
    /// The sort key the read is ordered by.
    fn sort_key(&self) -> Option<&KeyAttribute> {
        match &self.index {
            Some(index) => index.sort_key.as_ref(),
            None => self.meta.sort_key.as_ref(),
        }
    }

    /// LastEvaluatedKey for `item`: the table's key, and the index's.
    fn last_key(&self, item: &Item) -> Item {
        let mut key = keys::key_of(&self.meta, item);
        if let Some(index) = &self.index {
            for attr in index.key_attributes() {
                if let Some(v) = item.get(&attr.name) {
                    key.insert(attr.name.clone(), v.clone());
                }
            }
        }
        key
    }
}

/// The Select, projection and filter rules of a read of `index`.
fn index_shape(
    meta: &TableMeta,
    index: &IndexMeta,
    select: Option<Select>,
    shape: Shape,
    filter: Option<&Condition>,
) -> Result<Shape, StoreError> {
    if !index.local
        && select == Some(Select::AllAttributes)
        && index.projection != ProjectionType::All
    {
        return Err(StoreError::validation(format!(
            "One or more parameter values were invalid: Select type ALL_ATTRIBUTES is not supported for global secondary index {} because its projection type is not ALL",
            index.name
        )));
    }
    if let Some(f) = filter {
        let missing = index::missing(meta, index, f.paths().into_iter().map(|p| p.top_level()));
        if !missing.is_empty() {
            return Err(StoreError::validation(format!(
                "One or more parameter values were invalid: Secondary index {} does not project one or more filter attributes: [{}]",
                index.name,
                missing.join(", ")
            )));
        }
    }
    match shape {
        Shape::Projected(p) if !index.local => {
            let missing = index::missing(meta, index, p.paths().iter().map(|p| p.top_level()));
            if !missing.is_empty() {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Global secondary index {} does not project [{}]",
                    index.name,
                    missing.join(", ")
                )));
            }
            Ok(Shape::Projected(p))
        }
        Shape::All if select != Some(Select::AllAttributes) => Ok(Shape::IndexProjected),
        other => Ok(other),
    }
}

/// The `Select` rules of Query and Scan.
fn shape(
    select: Option<Select>,
    projection: Option<Projection>,
    index: Option<&str>,
) -> Result<Shape, StoreError> {
    match (select, projection) {
        (None | Some(Select::AllAttributes), None) => Ok(Shape::All),
        (None | Some(Select::SpecificAttributes), Some(p)) => Ok(Shape::Projected(p)),
        (Some(Select::SpecificAttributes), None) => Err(StoreError::validation(
            "1 validation error detected: Must specify the AttributesToGet or ProjectionExpression when choosing to get SPECIFIC_ATTRIBUTES",
        )),
        (Some(Select::AllAttributes), Some(_)) => Err(StoreError::validation(
            "Cannot specify the ProjectionExpression when choosing to get ALL_ATTRIBUTES",
        )),
        (Some(Select::Count), None) => Ok(Shape::Count),
        (Some(Select::Count), Some(_)) => Err(StoreError::validation(
            "Cannot specify the ProjectionExpression when choosing to get COUNT",
        )),
        (Some(Select::AllProjectedAttributes), _) if index.is_none() => {
            Err(StoreError::validation(
                "ALL_PROJECTED_ATTRIBUTES can be used only when Querying using an IndexName",
            ))
        }
        (Some(Select::AllProjectedAttributes), _) => Ok(Shape::All),
    }
}

/// An ExclusiveStartKey must be exactly a key of the table; for an index,
/// the table's key and the index's.
fn start_key(
    meta: &TableMeta,
    index: Option<&IndexMeta>,
    key: Option<&Item>,
) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(key) = key else { return Ok(None) };
    let Some(index) = index else {
        return keys::key_param(meta, key).map(Some).map_err(|e| {
            StoreError::validation(format!("The provided starting key is invalid: {e}"))
        });
    };
    let invalid = || StoreError::validation("The provided starting key is invalid");
    let table_key: Item = key
        .iter()
        .filter(|(name, _)| meta.is_key_attribute(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if key
        .keys()
        .any(|name| !meta.is_key_attribute(name) && !index.is_key_attribute(name))
    {
        return Err(invalid());
    }
    let base = keys::key_param(meta, &table_key).map_err(|_| invalid())?;
    index.row_key(key, &base).map(Some).ok_or_else(invalid)
}

/// Parses the FilterExpression and ProjectionExpression shared by Query and
/// Scan, in that order, against the request's placeholders.
fn filter_and_projection(
    filter: Option<&str>,
    projection: Option<&str>,
    ph: &mut Placeholders<'_>,
) -> Result<(Option<Condition>, Option<Projection>), StoreError> {
    let filter = filter
        .map(|s| parse_filter(s, ph))
        .transpose()
        .map_err(validate::expr)?;
    let projection = projection
        .map(|s| parse_projection(s, ph))
        .transpose()
        .map_err(validate::expr)?;
    Ok((filter, projection))
}

/// Checks a Query request and plans its read.
fn plan_query(catalog: &Catalog, mut input: QueryInput) -> Result<QueryPlan, StoreError> {
    crate::legacy::query(&mut input)?;
    let names = input.expression_attribute_names.as_ref();
    let values = input.expression_attribute_values.as_ref();
    let Some(key_src) = input.key_condition_expression.as_deref() else {
        return Err(StoreError::validation(
            "Either the KeyConditions or KeyConditionExpression parameter must be specified in the request.",
        ));
    };
    validate::placeholder_maps(names, values, true)?;
    let limit = validate::limit(input.limit)?;
    let meta = catalog.get(&input.table_name)?;
    let index = index::read_index(&meta, input.index_name.as_deref(), input.consistent_read)?;
    let (pk, sk) = match &index {
        Some(i) => (&i.partition_key, i.sort_key.as_ref()),
        None => (&meta.partition_key, meta.sort_key.as_ref()),
    };
    let mut ph = validate::placeholders(names, values);
    let key_condition =
        parse_key_condition(key_src, &mut ph, &pk.name, sk.map(|sk| sk.name.as_str()))
            .map_err(validate::expr)?;
    let (filter, projection) = filter_and_projection(
        input.filter_expression.as_deref(),
        input.projection_expression.as_deref(),
        &mut ph,
    )?;
    ph.finish().map_err(validate::expr)?;
    key_condition_types(
        pk,
        sk,
        &key_condition,
        index.as_ref().map(|i| i.name.as_str()),
    )?;
    let is_query_key = |name: &str| pk.name == name || sk.is_some_and(|sk| sk.name == name);
    if let Some(path) = filter
        .as_ref()
        .and_then(|f| f.paths().into_iter().find(|p| is_query_key(p.top_level())))
    {
        return Err(StoreError::validation(format!(
            "Filter Expression can only contain non-primary key attributes: Primary key attribute: {}",
            path.top_level()
        )));
    }
    let mut shape = shape(input.select, projection, input.index_name.as_deref())?;
    if let Some(index) = &index {
        shape = index_shape(&meta, index, input.select, shape, filter.as_ref())?;
    }
    let start = start_key(&meta, index.as_ref(), input.exclusive_start_key.as_ref())?;
    let (prefix, (lo, hi)) = match &index {
        Some(index) => {
            let prefix = index.partition_prefix(&key_condition.partition);
            let bounds = keys::index_sort_bounds(&prefix, key_condition.sort.as_ref());
            (prefix, bounds)
        }
        None => {
            let prefix = keys::partition_prefix(meta.id, &key_condition.partition);
            let bounds = keys::sort_bounds(&prefix, key_condition.sort.as_ref());
            (prefix, bounds)
        }
    };
    if let Some(start) = &start
        && !start.starts_with(&prefix)
    {
        return Err(StoreError::validation(
            "The provided starting key is outside query boundaries based on provided conditions",
        ));
    }
    // A table in arrival order finds the partition's place at run time.
    let point = (meta.arrival.is_some() && index.is_none()).then(|| prefix.clone());
    Ok(QueryPlan {
        page: Page {
            meta,
            index,
            filter,
            shape,
            limit,
            start,
        },
        point,
        lo,
        hi,
        forward: input.scan_index_forward.unwrap_or(true),
        sort: key_condition.sort,
    })
}

/// A checked Query: the page rules, the byte range and the sort-key
/// condition each item must still meet.
struct QueryPlan {
    page: Page,
    /// The partition a Query of a table in arrival order reads (the first
    /// bytes of its items' keys).
    point: Option<Vec<u8>>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    forward: bool,
    sort: Option<SortKeyCondition>,
}

/// Query.
pub(crate) fn query(
    txn: &ReadTransaction,
    catalog: &Catalog,
    now_ms: u64,
    input: QueryInput,
) -> Result<QueryOutput, StoreError> {
    run_plan(txn, placed(txn, plan_query(catalog, input)?)?, now_ms)
}

/// `plan` with its byte range on the rows of the partition its point
/// names, for a table in arrival order: under the partition's place, in
/// sort-key order (an empty range when no row of it is stored).
fn placed(txn: &ReadTransaction, mut plan: QueryPlan) -> Result<QueryPlan, StoreError> {
    let (Some(partition), Some(index)) = (plan.point.take(), plan.page.meta.arrival.clone()) else {
        return Ok(plan);
    };
    let meta = plan.page.meta.clone();
    let Some(place) = partition_place(txn, &meta, &index, &partition)? else {
        let nowhere = arrival::row_key(meta.id, 0, &[]);
        plan.lo = Bound::Included(nowhere.clone());
        plan.hi = Bound::Excluded(nowhere);
        plan.page.start = None;
        return Ok(plan);
    };
    let prefix = arrival::row_key(meta.id, place, &[]);
    (plan.lo, plan.hi) = keys::sort_bounds(&prefix, plan.sort.as_ref());
    // The start key is in the partition (checked with the plan): its sort
    // key follows the partition's part.
    if let Some(start) = plan.page.start.take() {
        plan.page.start = Some(arrival::row_key(meta.id, place, &start[partition.len()..]));
    }
    Ok(plan)
}

/// The place of `partition` in `meta`'s table kept in arrival order, as the
/// snapshot `txn` has it: None when no row of it is stored.
fn partition_place(
    txn: &ReadTransaction,
    meta: &TableMeta,
    index: &arrival::ArrivalIndex,
    partition: &[u8],
) -> Result<Option<u64>, StoreError> {
    match items(txn)? {
        Some(table) => arrival::partition_place(&table, meta, index, partition),
        None => Ok(None),
    }
}

/// Runs a planned Query page, building its items.
fn run_plan(
    txn: &ReadTransaction,
    plan: QueryPlan,
    now_ms: u64,
) -> Result<QueryOutput, StoreError> {
    let QueryPlan {
        page,
        point: _,
        lo,
        hi,
        forward,
        sort,
    } = plan;
    let sort_key = page.sort_key().cloned();
    run_page(txn, &page, now_ms, lo, hi, forward, |item| {
        meets_sort(sort_key.as_ref(), sort.as_ref(), item)
    })
}

/// Whether `item` meets the Query's sort-key condition (an item without
/// the sort key does not).
fn meets_sort(
    sort_key: Option<&KeyAttribute>,
    sort: Option<&SortKeyCondition>,
    item: &Item,
) -> bool {
    sort.is_none_or(|c| {
        sort_key
            .and_then(|sk| item.get(&sk.name))
            .is_some_and(|v| c.matches(v))
    })
}

/// Query answered with the stored bytes of each item: the same plan, the
/// same rows and page boundaries as [`query`], but a page without a filter
/// or projection copies each item's bytes instead of building it (the bytes
/// are checked as `decode_item` checks them, so a damaged row fails the
/// same way). With a filter or projection the page is [`query`]'s, encoded.
pub(crate) fn query_encoded(
    txn: &ReadTransaction,
    catalog: &Catalog,
    now_ms: u64,
    input: QueryInput,
) -> Result<EncodedQueryOutput, StoreError> {
    let plan = placed(txn, plan_query(catalog, input)?)?;
    if plan.page.filter.is_some()
        || plan.page.index.is_some()
        || !matches!(plan.page.shape, Shape::All)
    {
        return Ok(run_plan(txn, plan, now_ms)?.into());
    }
    run_page_encoded(txn, plan, now_ms)
}

/// [`run_page`] for a page of whole items, copying their stored bytes.
fn run_page_encoded(
    txn: &ReadTransaction,
    plan: QueryPlan,
    now_ms: u64,
) -> Result<EncodedQueryOutput, StoreError> {
    let QueryPlan {
        page,
        point: _,
        lo,
        hi,
        forward,
        sort,
    } = plan;
    let mut out = EncodedQueryOutput::default();
    let Some(table) = items(txn)? else {
        return Ok(out);
    };
    let (lo, hi) = after_start(lo, hi, page.start.as_ref(), forward);
    if empty_range(&lo, &hi) {
        return Ok(out);
    }
    let range = table
        .range::<&[u8]>((as_slice(&lo), as_slice(&hi)))
        .map_err(storage_err)?;
    let mut iter: Box<dyn Iterator<Item = _>> = if forward {
        Box::new(range)
    } else {
        Box::new(range.rev())
    };
    let sk_name = page.meta.sort_key.as_ref().map(|sk| sk.name.as_bytes());
    let ttl_name = page.meta.ttl_attribute.as_ref().map(|a| a.as_bytes());
    let mut bytes_read = 0usize;
    let mut sort_text = AttributeValue::S(String::new());
    for row in iter.by_ref() {
        let (_, value) = row.map_err(storage_err)?;
        let bytes = row::item_bytes(value.value());
        // One walk: checks the bytes, sizes the item and finds the two
        // attributes the page needs (the last of a repeated name, as
        // decoding keeps).
        let (mut sort_value, mut ttl_value) = (None, None);
        let size = visit_encoded_item(bytes, |name, v| {
            if Some(name) == sk_name {
                sort_value = Some(v);
            }
            if Some(name) == ttl_name {
                ttl_value = Some(v);
            }
        })?;
        let expired = match ttl_value {
            Some(RawValueRef::Value(v)) => {
                ttl::value_expires_at(&v.to_value()?).is_some_and(|at| ttl::is_past(at, now_ms))
            }
            Some(RawValueRef::S(_)) | None => false,
        };
        let in_scope = match (&sort, sort_value) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(c), Some(RawValueRef::S(v))) => {
                // One string reused for every row's sort key.
                let AttributeValue::S(t) = &mut sort_text else {
                    unreachable!("sort_text is an S")
                };
                t.clear();
                // The walk checked the UTF-8; this cannot fail.
                t.push_str(
                    std::str::from_utf8(v)
                        .map_err(|_| StoreError::Storage("invalid UTF-8".into()))?,
                );
                c.matches(&sort_text)
            }
            (Some(c), Some(RawValueRef::Value(v))) => c.matches(&v.to_value()?),
        };
        if expired || !in_scope {
            continue;
        }
        out.scanned_count += 1;
        bytes_read += size;
        let stop = page.limit.is_some_and(|l| out.scanned_count as usize >= l)
            || bytes_read >= validate::MAX_PAGE_BYTES;
        if stop {
            out.last_evaluated_key = Some(keys::key_of(&page.meta, &decode_item(bytes)?));
        }
        if out.is_empty() {
            // Room for as many items like this one as the Limit asks for
            // (at most what a 1 MB page holds), so a long read does not
            // regrow the buffer along the way; without a Limit, for a few.
            let rows = page
                .limit
                .unwrap_or(16)
                .min(validate::MAX_PAGE_BYTES / size.max(1) + 1);
            out.reserve(
                rows.saturating_mul(bytes.len())
                    .min(validate::MAX_PAGE_BYTES + bytes.len()),
                rows,
            );
        }
        out.count += 1;
        out.push(bytes);
        if stop {
            break;
        }
    }
    Ok(out)
}

/// Scan, including parallel segments split by a hash of the partition key.
pub(crate) fn scan(
    txn: &ReadTransaction,
    catalog: &Catalog,
    now_ms: u64,
    mut input: ScanInput,
) -> Result<QueryOutput, StoreError> {
    crate::legacy::scan(&mut input)?;
    let names = input.expression_attribute_names.as_ref();
    let values = input.expression_attribute_values.as_ref();
    validate::placeholder_maps(
        names,
        values,
        input.filter_expression.is_some() || input.projection_expression.is_some(),
    )?;
    let limit = validate::limit(input.limit)?;
    let segment = segment(input.segment, input.total_segments)?;
    let meta = catalog.get(&input.table_name)?;
    let index = index::read_index(&meta, input.index_name.as_deref(), input.consistent_read)?;
    let mut ph = validate::placeholders(names, values);
    let (filter, projection) = filter_and_projection(
        input.filter_expression.as_deref(),
        input.projection_expression.as_deref(),
        &mut ph,
    )?;
    ph.finish().map_err(validate::expr)?;
    let mut shape = shape(input.select, projection, input.index_name.as_deref())?;
    if let Some(index) = &index {
        shape = index_shape(&meta, index, input.select, shape, filter.as_ref())?;
    }
    let mut start = start_key(&meta, index.as_ref(), input.exclusive_start_key.as_ref())?;
    if let (Some(key), Some(arrival)) = (&start, &meta.arrival) {
        // A table in arrival order is scanned in that order: the page goes
        // on after the start key's position in its partition, which must
        // still have a row.
        let partition = &key[..arrival::partition_len(key)];
        let Some(place) = partition_place(txn, &meta, arrival, partition)? else {
            return Err(StoreError::validation(format!(
                "The provided starting key is invalid: table {} keeps its items in arrival order and has no item in the start key's partition to go on after",
                meta.name
            )));
        };
        start = Some(arrival::row_key(meta.id, place, &key[partition.len()..]));
    }
    let prefix = keys::table_prefix(index.as_ref().map_or(meta.id, |i| i.id));
    let (lo, hi) = (
        Bound::Included(prefix.clone()),
        Bound::Excluded(keys::prefix_end(&prefix)),
    );
    let segment_key = index
        .as_ref()
        .map_or(&meta.partition_key, |i| &i.partition_key)
        .name
        .clone();
    let page = Page {
        meta,
        index,
        filter,
        shape,
        limit,
        start,
    };
    run_page(txn, &page, now_ms, lo, hi, true, |item| match segment {
        None => true,
        Some((segment, total)) => segment_of(&segment_key, item, total) == segment,
    })
}

/// Segment and TotalSegments: both or neither, segment below the total.
fn segment(segment: Option<i64>, total: Option<i64>) -> Result<Option<(u64, u64)>, StoreError> {
    match (segment, total) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(StoreError::validation(
            "The TotalSegments parameter is required but was not present in the request when Segment parameter is present",
        )),
        (None, Some(_)) => Err(StoreError::validation(
            "The Segment parameter is required but was not present in the request when parameter TotalSegments is present",
        )),
        (Some(_), Some(t)) if !(1..=1_000_000).contains(&t) => {
            Err(StoreError::validation(format!(
                "1 validation error detected: Value '{t}' at 'totalSegments' failed to satisfy constraint: Member must have value between 1 and 1000000"
            )))
        }
        (Some(s), Some(t)) if s < 0 || s >= t => Err(StoreError::validation(format!(
            "The Segment parameter is zero-based and must be less than parameter TotalSegments: Segment: {s} is not less than TotalSegments: {t}"
        ))),
        (Some(s), Some(t)) => Ok(Some((s as u64, t as u64))),
    }
}

/// The segment of an item: FNV-1a of its partition key's encoding.
fn segment_of(partition_key: &str, item: &Item, total: u64) -> u64 {
    let mut bytes = Vec::new();
    if let Some(pk) = item.get(partition_key) {
        let _ = postbox_item::encode_partition_key(pk, &mut bytes);
    }
    let hash = bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100000001b3)
    });
    hash % total
}

/// Key condition values must have the key attributes' declared types.
fn key_condition_types(
    pk: &KeyAttribute,
    sk: Option<&KeyAttribute>,
    kc: &KeyCondition,
    index: Option<&str>,
) -> Result<(), StoreError> {
    let mismatch = || {
        StoreError::validation(
            "One or more parameter values were invalid: Condition parameter type does not match schema type",
        )
    };
    if !keys::has_type(&kc.partition, pk.ty) {
        return Err(mismatch());
    }
    if let (Some(sort), Some(sk)) = (&kc.sort, sk) {
        if !sort.values().iter().all(|v| keys::has_type(v, sk.ty)) {
            return Err(mismatch());
        }
        if matches!(sort, SortKeyCondition::BeginsWith(_)) && sk.ty == ScalarType::N {
            return Err(StoreError::validation(
                "Invalid KeyConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: N",
            ));
        }
    }
    let empty = |v: &AttributeValue, name: &str| keys::not_empty_key(name, v, index);
    empty(&kc.partition, &pk.name)?;
    if let (Some(sort), Some(sk)) = (&kc.sort, sk) {
        sort.values()
            .into_iter()
            .try_for_each(|v| empty(v, &sk.name))?;
    }
    Ok(())
}

/// Narrows `(lo, hi)` to what comes after the exclusive start key in the
/// direction of reading.
fn after_start(
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    start: Option<&Vec<u8>>,
    forward: bool,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let Some(start) = start else { return (lo, hi) };
    let beyond = |b: &Bound<Vec<u8>>, forward: bool| match b {
        Bound::Unbounded => true,
        Bound::Included(x) | Bound::Excluded(x) => {
            if forward {
                start >= x
            } else {
                start <= x
            }
        }
    };
    if forward {
        let lo = if beyond(&lo, true) {
            Bound::Excluded(start.clone())
        } else {
            lo
        };
        (lo, hi)
    } else {
        let hi = if beyond(&hi, false) {
            Bound::Excluded(start.clone())
        } else {
            hi
        };
        (lo, hi)
    }
}

/// Reads one page: Limit counts items read before the filter, the page
/// stops at 1 MB, and LastEvaluatedKey names the last item read whenever
/// the page stopped early.
#[allow(clippy::too_many_arguments)]
fn run_page(
    txn: &ReadTransaction,
    page: &Page,
    now_ms: u64,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    forward: bool,
    in_scope: impl Fn(&Item) -> bool,
) -> Result<QueryOutput, StoreError> {
    let mut out = QueryOutput {
        items: (!matches!(page.shape, Shape::Count)).then(Vec::new),
        ..QueryOutput::default()
    };
    let Some(table) = items(txn)? else {
        return Ok(out);
    };
    let (lo, hi) = after_start(lo, hi, page.start.as_ref(), forward);
    if empty_range(&lo, &hi) {
        return Ok(out);
    }
    let range = table
        .range::<&[u8]>((as_slice(&lo), as_slice(&hi)))
        .map_err(storage_err)?;
    let mut bytes_read = 0usize;
    let mut iter: Box<dyn Iterator<Item = _>> = if forward {
        Box::new(range)
    } else {
        Box::new(range.rev())
    };
    for row in iter.by_ref() {
        let (_, value) = row.map_err(storage_err)?;
        let item = match &page.index {
            None => row::item(value.value())?,
            // An index row holds the key of its item.
            Some(_) => match table.get(value.value()).map_err(storage_err)? {
                Some(stored) => row::item(stored.value())?,
                None => continue,
            },
        };
        if ttl::is_expired(&page.meta, &item, now_ms) || !in_scope(&item) {
            continue;
        }
        // A global index holds only its projection; a local one reads
        // the rest from the table when asked.
        let item = match &page.index {
            Some(index) if !index.local => index.project(&page.meta, &item),
            _ => item,
        };
        out.scanned_count += 1;
        bytes_read += item_size(&item);
        let stop = page.limit.is_some_and(|l| out.scanned_count as usize >= l)
            || bytes_read >= validate::MAX_PAGE_BYTES;
        if stop {
            out.last_evaluated_key = Some(page.last_key(&item));
        }
        if page.filter.as_ref().is_none_or(|f| f.evaluate(Some(&item))) {
            out.count += 1;
            match &page.shape {
                Shape::All => out.items.as_mut().expect("items").push(item),
                Shape::IndexProjected => {
                    let index = page.index.as_ref().expect("an index read");
                    out.items
                        .as_mut()
                        .expect("items")
                        .push(index.project(&page.meta, &item));
                }
                Shape::Projected(p) => out.items.as_mut().expect("items").push(p.apply(&item)),
                Shape::Count => {}
            }
        }
        if stop {
            break;
        }
    }
    Ok(out)
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// True when no key lies between the bounds (redb panics on inverted ranges).
fn empty_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

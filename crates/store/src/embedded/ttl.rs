//! Time to live: when an item counts as expired, and the background sweeper
//! that deletes expired items and trims old stream records.
//!
//! Expiry follows DynamoDB: the TTL attribute holds an N of seconds since the
//! epoch; an item is expired once that time is in the past, except that
//! values more than five years in the past are ignored (DynamoDB never
//! deletes those). Postbox is stricter than DynamoDB in one way: reads never
//! return an expired item, even before the sweeper has deleted it, and a
//! write that finds an expired item treats it as absent (committing the TTL
//! removal, with its REMOVE stream record, just before the write).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use postbox_item::{AttributeValue, Item};
use redb::ReadableDatabase;

use crate::StoreError;

use super::arrival::{self, ArrivalIndex};
use super::catalog::TableMeta;
use super::tables::{ITEMS, TTL_INDEX};
use super::{Inner, storage_err};

/// DynamoDB ignores expiry times more than five years in the past.
const IGNORED_AFTER_SECS: u64 = 5 * 365 * 24 * 3600;
/// Items or records removed per write job, so a large backlog never holds
/// the writer for long.
const SWEEP_CHUNK: usize = 500;

/// The expiry second of `item`, when its table has TTL enabled and the item
/// has a usable TTL value.
pub(crate) fn expires_at(meta: &TableMeta, item: &Item) -> Option<u64> {
    let attr = meta.ttl_attribute.as_ref()?;
    value_expires_at(item.get(attr)?)
}

/// The expiry second a TTL attribute's value names, if it is usable.
pub(crate) fn value_expires_at(v: &AttributeValue) -> Option<u64> {
    let n = v.as_n()?;
    if n.is_negative() {
        return None;
    }
    let (_, mantissa, exponent) = n.parts();
    let secs = if exponent >= 0 {
        10u128
            .checked_pow(exponent as u32)
            .and_then(|p| p.checked_mul(mantissa))?
    } else {
        10u128
            .checked_pow(exponent.unsigned_abs())
            .map_or(0, |p| mantissa / p)
    };
    u64::try_from(secs).ok()
}

/// True when the expiry second `at` has passed at `now_ms` and is recent
/// enough for DynamoDB to act on.
pub(crate) fn is_past(at: u64, now_ms: u64) -> bool {
    let now = now_ms / 1000;
    at < now && at >= now.saturating_sub(IGNORED_AFTER_SECS)
}

/// True when `item` of `meta` has expired at `now_ms`.
pub(crate) fn is_expired(meta: &TableMeta, item: &Item, now_ms: u64) -> bool {
    expires_at(meta, item).is_some_and(|at| is_past(at, now_ms))
}

/// Runs the sweeper until `stop` says so (or its sender is dropped).
pub(crate) fn run_sweeper(inner: Arc<Inner>, interval: Duration, stop: Receiver<()>) {
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        if let Err(e) = sweep_once(&inner) {
            tracing::warn!(error = %e, "TTL sweep failed; retrying at the next interval");
        }
    }
}

/// One pass: deletes every expired item and trims every stream past its
/// retention, in chunks through the writer.
pub(crate) fn sweep_once(inner: &Inner) -> Result<(), StoreError> {
    for meta in inner.shared.catalog.all() {
        if meta.indexes.iter().any(|i| i.backfilled_through.is_some()) {
            super::index::backfill(inner, &meta)?;
        }
        if meta.ttl_attribute.is_some() {
            // In arrival order too: a file's older rows may be indexed there.
            while expire_chunk(inner, &meta)? == SWEEP_CHUNK {}
            if let Some(index) = &meta.arrival {
                expire_arrival(inner, &meta, index)?;
            }
        }
        if meta.stream_view_type.is_some() {
            while trim_chunk(inner, &meta)? == SWEEP_CHUNK {}
        }
    }
    Ok(())
}

/// Deletes up to one chunk of expired items of one table.
fn expire_chunk(inner: &Inner, meta: &Arc<TableMeta>) -> Result<usize, StoreError> {
    let now_ms = inner.shared.clock.now_ms();
    let now = now_ms / 1000;
    let due: Vec<Vec<u8>> = {
        let txn = inner.db.begin_read().map_err(storage_err)?;
        let Some(index) = super::tables::open_if_present(&txn, TTL_INDEX)? else {
            return Ok(0);
        };
        let lo = (meta.id, now.saturating_sub(IGNORED_AFTER_SECS), &[][..]);
        let hi = (meta.id, now, &[][..]);
        let mut due = Vec::new();
        for row in index.range(lo..hi).map_err(storage_err)? {
            let (k, _) = row.map_err(storage_err)?;
            due.push(k.value().2.to_vec());
            if due.len() == SWEEP_CHUNK {
                break;
            }
        }
        due
    };
    if due.is_empty() {
        return Ok(0);
    }
    let n = due.len();
    expire_keys(inner, meta, due)?;
    Ok(n)
}

/// Deletes the items of `meta`'s table with keys `keys` that have expired
/// by the time the writer runs the job (one job).
fn expire_keys(inner: &Inner, meta: &Arc<TableMeta>, keys: Vec<Vec<u8>>) -> Result<(), StoreError> {
    let meta = meta.clone();
    inner.writer.submit_blocking(move |ctx| {
        let Ok(meta) = ctx.resolve(&meta) else {
            return Ok(());
        };
        for key in keys {
            ctx.expire(&meta, key)?;
        }
        Ok(())
    })
}

/// Deletes the expired items of a table in arrival order: reads the rows of
/// every block of places with an expiry noted before now, deletes those
/// expired and notes when the rest expire (see `arrival`).
fn expire_arrival(
    inner: &Inner,
    meta: &Arc<TableMeta>,
    index: &ArrivalIndex,
) -> Result<(), StoreError> {
    let _one_at_a_time = index.sweeping();
    let now_ms = inner.shared.clock.now_ms();
    let now = now_ms / 1000;
    let mut after = None;
    // Marked before the read, so a write committed after it is noted
    // for the block's next sweep.
    while let Some(block) = index.begin_sweep(after, now) {
        after = Some(block);
        let mut due = Vec::new();
        let mut next: Option<u64> = None;
        {
            let txn = inner.db.begin_read().map_err(storage_err)?;
            let Some(items) = super::tables::open_if_present(&txn, ITEMS)? else {
                return Ok(());
            };
            let rows = arrival::block_rows(meta.id, block);
            for row in items
                .range(rows.start.as_slice()..rows.end.as_slice())
                .map_err(storage_err)?
            {
                let (_, v) = row.map_err(storage_err)?;
                match arrival::expiry_of_row(meta, v.value())? {
                    Some(at) if is_past(at, now_ms) => {
                        due.push(arrival::key_of_row(meta, v.value())?);
                    }
                    // Later, or so long ago that it is never deleted.
                    Some(at) if at >= now => next = Some(next.map_or(at, |n| n.min(at))),
                    _ => {}
                }
            }
        }
        // Held here, a write into the block commits after the read above.
        crate::faults::hit(crate::faults::ARRIVAL_SWEEP_READ);
        while !due.is_empty() {
            let chunk = due.drain(..due.len().min(SWEEP_CHUNK)).collect();
            expire_keys(inner, meta, chunk)?;
        }
        index.end_sweep(block, next);
    }
    Ok(())
}

/// Removes up to one chunk of stream records older than the retention.
fn trim_chunk(inner: &Inner, meta: &Arc<TableMeta>) -> Result<usize, StoreError> {
    let cutoff_ms = inner
        .shared
        .clock
        .now_ms()
        .saturating_sub(inner.shared.options.stream_retention.as_millis() as u64);
    if !oldest_record_before(inner, meta, cutoff_ms)? {
        // Nothing to trim: no write job, so no commit and no fsync.
        return Ok(0);
    }
    let meta = meta.clone();
    inner.writer.submit_blocking(move |ctx| {
        let Ok(meta) = ctx.resolve(&meta) else {
            return Ok(0);
        };
        ctx.trim_stream(&meta, cutoff_ms, SWEEP_CHUNK)
    })
}

/// True when the oldest retained record of `meta`'s stream was created
/// before `cutoff_ms`.
fn oldest_record_before(
    inner: &Inner,
    meta: &TableMeta,
    cutoff_ms: u64,
) -> Result<bool, StoreError> {
    let txn = inner.db.begin_read().map_err(storage_err)?;
    Ok(super::stream::oldest_time(&txn, meta.id)?.is_some_and(|at| at < cutoff_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::Number;

    #[test]
    fn expiry_reads_whole_seconds_and_ignores_ancient_values() {
        let now_ms = 2_000_000_000_000;
        assert!(is_past(1_999_999_999, now_ms));
        assert!(!is_past(2_000_000_000, now_ms));
        assert!(
            !is_past(1, now_ms),
            "more than five years ago: DynamoDB ignores it"
        );
        let meta: TableMeta = serde_json::from_value(serde_json::json!({
            "id": 1, "name": "t", "partition_key": {"name": "pk", "ty": "S"}, "sort_key": null,
            "attribute_definitions": [], "stream_view_type": null, "ttl_attribute": "ttl",
            "created_at_ms": 0, "billing_mode": "PAY_PER_REQUEST"
        }))
        .unwrap();
        let mut item = Item::new();
        item.insert(
            "ttl".into(),
            AttributeValue::N("1999999999.9".parse::<Number>().unwrap()),
        );
        assert_eq!(expires_at(&meta, &item), Some(1_999_999_999));
        assert!(is_expired(&meta, &item, now_ms));
        item.insert("ttl".into(), AttributeValue::s("1"));
        assert_eq!(expires_at(&meta, &item), None);
    }
}

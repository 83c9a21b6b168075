//! Change-stream records: what one committed change yields per view type,
//! the stored byte form, and reading a table's stream back.
//!
//! Records are stored in blocks, one row per table per commit: the key is
//! `(table id, sequence number of the block's first record)` and the value
//! the block's records, each as `len u32 BE ‖ record`, with consecutive
//! sequence numbers. One row per commit instead of one per record halves the
//! B-tree inserts of a write; all records of a block share the commit time,
//! so retention trims whole blocks.
//!
//! Record layout: `event u8 ‖ flags u8 (1 ttl, 2 new image, 4 old image,
//! 8 new image by reference) ‖ view u8 ‖ time_ms u64 BE ‖ size u64 BE ‖ keys
//! ‖ [new] ‖ [old]`, each item as `len u32 BE ‖ encode_item`.
//!
//! An insert's record does not copy the new item: it refers to the item's
//! row (flag 8), which the writer marks with the record's sequence number
//! (`row`). The item is the same bytes until it next changes, and the
//! change saves the replaced row's image for the record
//! (`tables::STREAM_IMAGES`), so a
//! reader gets the image from the row while the mark is the record's and
//! from the saved copy after. A table's inserts then write their items once
//! instead of twice (about 1.3 KB per event of the engine's log).

use postbox_item::{Item, decode_item, encode_item, item_size};
use redb::{ReadTransaction, ReadableTable};

use crate::StoreError;
use crate::api::{EventName, StreamRecord, StreamViewType};

use super::catalog::TableMeta;
use super::keys;
use super::recent::RecentImages;
use super::storage_err;
use super::tables::{STREAM, STREAM_HEADS, STREAM_IMAGES, open_if_present};
use super::{row, tables::ITEMS};

/// The record for a change from `old` to `new` (at least one present and the
/// two different), before it gets its sequence number.
#[cfg(test)]
pub(crate) fn record_for(
    meta: &TableMeta,
    view: StreamViewType,
    old: Option<&Item>,
    new: Option<&Item>,
    ttl_removal: bool,
    now_ms: u64,
) -> StreamRecord {
    let event_name = match (old, new) {
        (None, _) => EventName::Insert,
        (Some(_), Some(_)) => EventName::Modify,
        (Some(_), None) => EventName::Remove,
    };
    let keys = keys::key_of(
        meta,
        new.or(old).expect("a change has an old or a new image"),
    );
    let wants_new = matches!(
        view,
        StreamViewType::NewImage | StreamViewType::NewAndOldImages
    );
    let wants_old = matches!(
        view,
        StreamViewType::OldImage | StreamViewType::NewAndOldImages
    );
    let new_image = new.filter(|_| wants_new).cloned();
    let old_image = old.filter(|_| wants_old).cloned();
    let size_bytes = [Some(&keys), new_image.as_ref(), old_image.as_ref()]
        .into_iter()
        .flatten()
        .map(item_size)
        .sum::<usize>() as u64;
    StreamRecord {
        sequence_number: 0,
        event_name,
        approximate_creation_time_ms: now_ms,
        keys,
        new_image,
        old_image,
        view_type: view,
        ttl_removal,
        size_bytes,
    }
}

/// Whether the record of a change from `old` to `new` refers to the new
/// item's row instead of holding its image: an insert whose view has the
/// new image.
pub(crate) fn refers_to_row(view: StreamViewType, old: Option<&Item>, new: Option<&Item>) -> bool {
    old.is_none()
        && new.is_some()
        && matches!(
            view,
            StreamViewType::NewImage | StreamViewType::NewAndOldImages
        )
}

/// The stored form of the record of a change from `old` to `new`, written
/// straight from the items (no copies of the images); `new_bytes` is `new`
/// already encoded for the items table. With `by_ref` (see
/// [`refers_to_row`]) the new image is left out and the record refers to
/// the row.
pub(crate) fn encode_change(
    meta: &TableMeta,
    view: StreamViewType,
    old: Option<&Item>,
    new: Option<(&Item, &[u8])>,
    ttl_removal: bool,
    now_ms: u64,
    by_ref: bool,
) -> Vec<u8> {
    let event = match (old, new) {
        (None, _) => 0u8,
        (Some(_), Some(_)) => 1,
        (Some(_), None) => 2,
    };
    let keys = keys::key_of(
        meta,
        new.map(|(i, _)| i)
            .or(old)
            .expect("a change has an old or a new image"),
    );
    let new = new.filter(|_| {
        matches!(
            view,
            StreamViewType::NewImage | StreamViewType::NewAndOldImages
        )
    });
    let old = old.filter(|_| {
        matches!(
            view,
            StreamViewType::OldImage | StreamViewType::NewAndOldImages
        )
    });
    let size = item_size(&keys) + new.map_or(0, |(i, _)| item_size(i)) + old.map_or(0, item_size);
    let by_ref = by_ref && new.is_some();
    let copied = new.filter(|_| !by_ref);
    let mut out = Vec::with_capacity(64 + copied.map_or(0, |(_, b)| b.len()) * 2);
    out.push(event);
    out.push(
        ttl_removal as u8
            | (copied.is_some() as u8) << 1
            | (old.is_some() as u8) << 2
            | (by_ref as u8) << 3,
    );
    out.push(view_byte(view));
    out.extend_from_slice(&now_ms.to_be_bytes());
    out.extend_from_slice(&(size as u64).to_be_bytes());
    let mut put = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    put(&encode_item(&keys));
    if let Some((_, bytes)) = copied {
        put(bytes);
    }
    if let Some(old) = old {
        put(&encode_item(old));
    }
    out
}

fn view_byte(view: StreamViewType) -> u8 {
    match view {
        StreamViewType::KeysOnly => 0,
        StreamViewType::NewImage => 1,
        StreamViewType::OldImage => 2,
        StreamViewType::NewAndOldImages => 3,
    }
}

/// The stored form of a record (its sequence number is the row key).
#[cfg(test)]
pub(crate) fn encode(r: &StreamRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.push(match r.event_name {
        EventName::Insert => 0,
        EventName::Modify => 1,
        EventName::Remove => 2,
    });
    out.push(
        r.ttl_removal as u8
            | (r.new_image.is_some() as u8) << 1
            | (r.old_image.is_some() as u8) << 2,
    );
    out.push(view_byte(r.view_type));
    out.extend_from_slice(&r.approximate_creation_time_ms.to_be_bytes());
    out.extend_from_slice(&r.size_bytes.to_be_bytes());
    for item in [Some(&r.keys), r.new_image.as_ref(), r.old_image.as_ref()]
        .into_iter()
        .flatten()
    {
        let bytes = encode_item(item);
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

/// Finds the image a record refers to: (its sequence number, its keys) ->
/// the item.
pub(crate) type Resolve<'a> = dyn FnMut(u64, &Item) -> Result<Item, StoreError> + 'a;

/// Whether a reader wants the images of a record: (its sequence number,
/// its keys) -> yes or no. A record it does not want comes without them,
/// neither decoded nor looked up.
pub(crate) type Wanted<'a> = dyn FnMut(u64, &Item) -> bool + 'a;

/// Wants every record's images.
pub(crate) fn every(_: u64, _: &Item) -> bool {
    true
}

/// Decodes a record written by [`encode`] or [`encode_change`]; `resolve`
/// finds the image of a record that refers to its item's row. When
/// `wanted` refuses the record's keys, its images are left out.
pub(crate) fn decode(
    sequence_number: u64,
    bytes: &[u8],
    resolve: &mut Resolve<'_>,
    wanted: &mut Wanted<'_>,
) -> Result<StreamRecord, StoreError> {
    let corrupt = || StoreError::Storage(format!("corrupt stream record {sequence_number}"));
    if bytes.len() < 19 {
        return Err(corrupt());
    }
    let event_name = match bytes[0] {
        0 => EventName::Insert,
        1 => EventName::Modify,
        2 => EventName::Remove,
        _ => return Err(corrupt()),
    };
    let flags = bytes[1];
    let view_type = match bytes[2] {
        0 => StreamViewType::KeysOnly,
        1 => StreamViewType::NewImage,
        2 => StreamViewType::OldImage,
        3 => StreamViewType::NewAndOldImages,
        _ => return Err(corrupt()),
    };
    let time = u64::from_be_bytes(bytes[3..11].try_into().expect("8 bytes"));
    let size_bytes = u64::from_be_bytes(bytes[11..19].try_into().expect("8 bytes"));
    let mut rest = &bytes[19..];
    let mut next_item = || -> Result<Item, StoreError> {
        if rest.len() < 4 {
            return Err(corrupt());
        }
        let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let body = rest.get(4..4 + len).ok_or_else(corrupt)?;
        rest = &rest[4 + len..];
        Ok(decode_item(body)?)
    };
    let keys = next_item()?;
    let images = wanted(sequence_number, &keys);
    let new_image = if !images {
        None
    } else if flags & 2 != 0 {
        Some(next_item()?)
    } else if flags & 8 != 0 {
        Some(resolve(sequence_number, &keys)?)
    } else {
        None
    };
    let old_image = if images && flags & 4 != 0 {
        Some(next_item()?)
    } else {
        None
    };
    Ok(StreamRecord {
        sequence_number,
        event_name,
        approximate_creation_time_ms: time,
        keys,
        new_image,
        old_image,
        view_type,
        ttl_removal: flags & 1 != 0,
        size_bytes,
    })
}

/// (last sequence number, sequence trimmed through) of table `id`'s stream.
pub(crate) fn head(txn: &ReadTransaction, id: u32) -> Result<(u64, u64), StoreError> {
    let Some(heads) = open_if_present(txn, STREAM_HEADS)? else {
        return Ok((0, 0));
    };
    Ok(heads
        .get(id)
        .map_err(storage_err)?
        .map_or((0, 0), |g| g.value()))
}

/// The commit time of the oldest record `id`'s stream retains, read from
/// its block without decoding a record (so without resolving an image).
pub(crate) fn oldest_time(txn: &ReadTransaction, id: u32) -> Result<Option<u64>, StoreError> {
    let (_, trimmed) = head(txn, id)?;
    let Some(table) = open_if_present(txn, STREAM)? else {
        return Ok(None);
    };
    // Trimming removes whole blocks, so the oldest retained block starts
    // right after the trimmed sequence.
    let first = table
        .range((id, trimmed.saturating_add(1))..=(id, u64::MAX))
        .map_err(storage_err)?
        .next()
        .transpose()
        .map_err(storage_err)?;
    Ok(first.map(|(k, v)| block_time_and_len(k.value().1, v.value()).0))
}

/// Up to `limit` records of `meta`'s stream after sequence `after`, from a
/// snapshot, with the images of those `wanted` accepts.
pub(crate) fn read(
    txn: &ReadTransaction,
    meta: &TableMeta,
    after: u64,
    limit: usize,
    wanted: &mut Wanted<'_>,
    recent: Option<&RecentImages>,
) -> Result<Vec<StreamRecord>, StoreError> {
    let (_, trimmed) = head(txn, meta.id)?;
    if after != 0 && after < trimmed {
        return Err(StoreError::TrimmedData(format!(
            "The requested position {after} of the stream of table {} is older than its retention; records up to {trimmed} were trimmed. Read from the oldest retained record (position 0) instead.",
            meta.name
        )));
    }
    let Some(stream) = open_if_present(txn, STREAM)? else {
        return Ok(Vec::new());
    };
    let items = open_if_present(txn, ITEMS)?;
    let images = open_if_present(txn, STREAM_IMAGES)?;
    read_blocks(
        &stream,
        meta.id,
        after,
        limit,
        &mut resolver(meta, items.as_ref(), images.as_ref(), recent),
        wanted,
    )
}

/// Finds the image of `meta`'s records that refer to their rows: the one
/// the writer left in `recent` if it is still there, else the row while it
/// still carries the record's mark, else the image saved when the item
/// changed.
pub(crate) fn resolver<'a>(
    meta: &'a TableMeta,
    items: Option<&'a impl ReadableTable<&'static [u8], &'static [u8]>>,
    images: Option<&'a impl ReadableTable<(u32, u64), &'static [u8]>>,
    recent: Option<&'a RecentImages>,
) -> impl FnMut(u64, &Item) -> Result<Item, StoreError> + 'a {
    move |seq, keys_item| {
        if let Some(image) = recent.and_then(|r| r.take(meta.id, seq)) {
            return Ok(image);
        }
        if let Some(items) = items {
            let key = keys::item_key(meta, keys_item)?;
            if let Some(v) = items.get(key.as_slice()).map_err(storage_err)?
                && let (Some(mark), bytes) = row::split(v.value())
                && mark == seq
            {
                return Ok(decode_item(bytes)?);
            }
        }
        if let Some(images) = images
            && let Some(v) = images.get((meta.id, seq)).map_err(storage_err)?
        {
            return Ok(decode_item(v.value())?);
        }
        Err(StoreError::Storage(format!(
            "stream record {seq} of table {} refers to an item image that is not stored",
            meta.name
        )))
    }
}

/// Up to `limit` records of table `id` after sequence `after`, from the
/// blocks of `table` (a snapshot's or the writer's), with the images of
/// those `wanted` accepts.
pub(crate) fn read_blocks(
    table: &impl ReadableTable<(u32, u64), &'static [u8]>,
    id: u32,
    after: u64,
    limit: usize,
    resolve: &mut Resolve<'_>,
    wanted: &mut Wanted<'_>,
) -> Result<Vec<StreamRecord>, StoreError> {
    let start = after.saturating_add(1);
    let mut out = Vec::new();
    // The block holding `start` begins at or before it.
    let first = table
        .range((id, 0)..=(id, start))
        .map_err(storage_err)?
        .next_back();
    let first = first
        .transpose()
        .map_err(storage_err)?
        .map(|(k, v)| (k.value().1, v.value().to_vec()));
    let rest = table
        .range((id, start.saturating_add(1))..=(id, u64::MAX))
        .map_err(storage_err)?;
    let rest = rest.map(|row| {
        row.map(|(k, v)| (k.value().1, v.value().to_vec()))
            .map_err(storage_err)
    });
    for block in first.into_iter().map(Ok).chain(rest) {
        let (first_seq, bytes) = block?;
        for (seq, record) in block_records(first_seq, &bytes) {
            if out.len() >= limit {
                return Ok(out);
            }
            if seq >= start {
                out.push(decode(seq, record?, resolve, wanted)?);
            }
        }
    }
    Ok(out)
}

/// Appends one encoded record to a block.
pub(crate) fn block_append(block: &mut Vec<u8>, record: &[u8]) {
    block.extend_from_slice(&(record.len() as u32).to_be_bytes());
    block.extend_from_slice(record);
}

/// The records of a block with their sequence numbers.
pub(crate) fn block_records(
    first_seq: u64,
    block: &[u8],
) -> impl Iterator<Item = (u64, Result<&[u8], StoreError>)> {
    let mut rest = block;
    let mut seq = first_seq;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let this = seq;
        seq += 1;
        let len = rest
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize);
        match len.and_then(|len| rest.get(4..4 + len).map(|r| (len, r))) {
            Some((len, record)) => {
                rest = &rest[4 + len..];
                Some((this, Ok(record)))
            }
            None => {
                rest = &[];
                Some((
                    this,
                    Err(StoreError::Storage(format!(
                        "corrupt stream block at record {this}"
                    ))),
                ))
            }
        }
    })
}

/// Commit time of a block (all its records share it) and its record count.
pub(crate) fn block_time_and_len(first_seq: u64, block: &[u8]) -> (u64, u64) {
    let time = block
        .get(4 + 3..4 + 11)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
    (time, block_records(first_seq, block).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::AttributeValue;

    /// Table `t`, keyed by `pk`, with a stream of both images.
    fn meta() -> TableMeta {
        serde_json::from_value(serde_json::json!({
            "id": 1, "name": "t", "partition_key": {"name": "pk", "ty": "S"}, "sort_key": null,
            "attribute_definitions": [], "stream_view_type": "NEW_AND_OLD_IMAGES", "ttl_attribute": null,
            "created_at_ms": 0, "billing_mode": "PAY_PER_REQUEST"
        }))
        .unwrap()
    }

    #[test]
    fn encoding_a_change_matches_encoding_its_record() {
        let meta = meta();
        let mut old = Item::new();
        old.insert("pk".into(), AttributeValue::s("a"));
        let mut new = old.clone();
        new.insert("v".into(), AttributeValue::n(1));
        for view in [
            StreamViewType::KeysOnly,
            StreamViewType::NewImage,
            StreamViewType::OldImage,
            StreamViewType::NewAndOldImages,
        ] {
            let record = record_for(&meta, view, Some(&old), Some(&new), false, 5);
            let bytes = encode_change(
                &meta,
                view,
                Some(&old),
                Some((&new, &encode_item(&new))),
                false,
                5,
                false,
            );
            assert_eq!(bytes, encode(&record));
        }
    }

    #[test]
    fn blocks_hold_consecutive_records() {
        let mut block = Vec::new();
        block_append(&mut block, b"one");
        block_append(&mut block, b"three");
        let got: Vec<_> = block_records(7, &block)
            .map(|(s, r)| (s, r.unwrap().to_vec()))
            .collect();
        assert_eq!(got, vec![(7, b"one".to_vec()), (8, b"three".to_vec())]);
        assert!(block_records(1, &block[..6]).any(|(_, r)| r.is_err()));
    }

    #[test]
    fn records_round_trip() {
        let mut item = Item::new();
        item.insert("pk".into(), AttributeValue::s("a"));
        item.insert("v".into(), AttributeValue::n(3));
        let r = StreamRecord {
            sequence_number: 9,
            event_name: EventName::Modify,
            approximate_creation_time_ms: 1234,
            keys: item.clone(),
            new_image: Some(item.clone()),
            old_image: None,
            view_type: StreamViewType::NewImage,
            ttl_removal: true,
            size_bytes: 42,
        };
        let mut unused = |_: u64, _: &Item| -> Result<Item, StoreError> { unreachable!() };
        assert_eq!(decode(9, &encode(&r), &mut unused, &mut every).unwrap(), r);
    }

    #[test]
    fn a_record_whose_keys_are_not_wanted_comes_without_its_images() {
        let mut keys = Item::new();
        keys.insert("pk".into(), AttributeValue::s("a"));
        let mut image = keys.clone();
        image.insert("v".into(), AttributeValue::n(3));
        let r = StreamRecord {
            sequence_number: 9,
            event_name: EventName::Modify,
            approximate_creation_time_ms: 1234,
            keys: keys.clone(),
            new_image: Some(image.clone()),
            old_image: Some(image),
            view_type: StreamViewType::NewAndOldImages,
            ttl_removal: false,
            size_bytes: 42,
        };
        let mut unused = |_: u64, _: &Item| -> Result<Item, StoreError> { unreachable!() };
        let mut asked = Vec::new();
        let mut refuse = |seq: u64, k: &Item| {
            asked.push((seq, k.clone()));
            false
        };
        let got = decode(9, &encode(&r), &mut unused, &mut refuse).unwrap();
        assert_eq!(asked, [(9, keys)]);
        let without = StreamRecord {
            new_image: None,
            old_image: None,
            ..r.clone()
        };
        assert_eq!(got, without);
        // A record referring to its row is not resolved either.
        let by_ref = encode_change(
            &meta(),
            StreamViewType::NewImage,
            None,
            Some((&r.keys, &encode_item(&r.keys))),
            false,
            5,
            true,
        );
        let got = decode(10, &by_ref, &mut unused, &mut |_, _| false).unwrap();
        assert_eq!((got.new_image, got.old_image), (None, None));
    }
}

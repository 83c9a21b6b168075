//! Change-stream records: what one committed change yields per view type,
//! the stored byte form, and reading a table's stream back.
//!
//! Stored record layout (after the `(table id, sequence)` key):
//! `event u8 ‖ flags u8 (1 ttl, 2 new image, 4 old image) ‖ view u8 ‖
//! time_ms u64 BE ‖ size u64 BE ‖ keys ‖ [new] ‖ [old]`, each item as
//! `len u32 BE ‖ encode_item`.

use postbox_item::{Item, decode_item, encode_item, item_size};
use redb::ReadTransaction;

use crate::StoreError;
use crate::api::{EventName, StreamRecord, StreamViewType};

use super::catalog::TableMeta;
use super::keys;
use super::tables::{STREAM, STREAM_HEADS};
use super::storage_err;

/// The record for a change from `old` to `new` (at least one present and the
/// two different), before it gets its sequence number.
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
    let keys = keys::key_of(meta, new.or(old).expect("a change has an old or a new image"));
    let wants_new = matches!(view, StreamViewType::NewImage | StreamViewType::NewAndOldImages);
    let wants_old = matches!(view, StreamViewType::OldImage | StreamViewType::NewAndOldImages);
    let new_image = new.filter(|_| wants_new).cloned();
    let old_image = old.filter(|_| wants_old).cloned();
    let size_bytes = [Some(&keys), new_image.as_ref(), old_image.as_ref()].into_iter().flatten().map(item_size).sum::<usize>() as u64;
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

/// The stored form of a record (its sequence number is the row key).
pub(crate) fn encode(r: &StreamRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.push(match r.event_name {
        EventName::Insert => 0,
        EventName::Modify => 1,
        EventName::Remove => 2,
    });
    out.push(r.ttl_removal as u8 | (r.new_image.is_some() as u8) << 1 | (r.old_image.is_some() as u8) << 2);
    out.push(match r.view_type {
        StreamViewType::KeysOnly => 0,
        StreamViewType::NewImage => 1,
        StreamViewType::OldImage => 2,
        StreamViewType::NewAndOldImages => 3,
    });
    out.extend_from_slice(&r.approximate_creation_time_ms.to_be_bytes());
    out.extend_from_slice(&r.size_bytes.to_be_bytes());
    for item in [Some(&r.keys), r.new_image.as_ref(), r.old_image.as_ref()].into_iter().flatten() {
        let bytes = encode_item(item);
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

/// Decodes a record written by [`encode`].
pub(crate) fn decode(sequence_number: u64, bytes: &[u8]) -> Result<StreamRecord, StoreError> {
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
    let new_image = if flags & 2 != 0 { Some(next_item()?) } else { None };
    let old_image = if flags & 4 != 0 { Some(next_item()?) } else { None };
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
    let heads = match txn.open_table(STREAM_HEADS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((0, 0)),
        Err(e) => return Err(storage_err(e)),
    };
    Ok(heads.get(id).map_err(storage_err)?.map_or((0, 0), |g| g.value()))
}

/// Up to `limit` records of table `id` after sequence `after`.
pub(crate) fn read(txn: &ReadTransaction, meta: &TableMeta, after: u64, limit: usize) -> Result<Vec<StreamRecord>, StoreError> {
    let (_, trimmed) = head(txn, meta.id)?;
    if after != 0 && after < trimmed {
        return Err(StoreError::TrimmedData(format!(
            "The requested position {after} of the stream of table {} is older than its retention; records up to {trimmed} were trimmed. Read from the oldest retained record (position 0) instead.",
            meta.name
        )));
    }
    let stream = match txn.open_table(STREAM) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(storage_err(e)),
    };
    let mut out = Vec::new();
    let start = after.checked_add(1).ok_or_else(|| StoreError::validation("sequence number out of range"))?;
    for row in stream.range((meta.id, start)..=(meta.id, u64::MAX)).map_err(storage_err)? {
        if out.len() >= limit {
            break;
        }
        let (k, v) = row.map_err(storage_err)?;
        out.push(decode(k.value().1, v.value())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::AttributeValue;

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
        assert_eq!(decode(9, &encode(&r)).unwrap(), r);
    }
}

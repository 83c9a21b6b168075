//! The stored form of an item row.
//!
//! A row is `encode_item`'s bytes, or, for an item whose insert record in its
//! table's stream refers to the row instead of holding a copy of the item
//! (see `stream`), `0x00 ‖ record sequence u64 BE ‖ encode_item's bytes`.
//! A stored item has at least its key attributes, so `encode_item`'s bytes
//! never start with 0x00 (an attribute count of zero), and rows written
//! before references existed read as they always did.
//!
//! The marker stays until the item next changes; the writer then saves the
//! image the replaced row held for that record (`tables::STREAM_IMAGES`).

/// The first byte of a row whose insert record refers to it.
const BY_REF: u8 = 0;

/// Length of the marker and sequence number in front of the item.
const HEADER: usize = 9;

/// The sequence number of the stream record that refers to this row (if one
/// does) and the row's item bytes.
pub(crate) fn split(value: &[u8]) -> (Option<u64>, &[u8]) {
    match value {
        [BY_REF, rest @ ..] if rest.len() >= HEADER - 1 => {
            let seq = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
            (Some(seq), &rest[8..])
        }
        _ => (None, value),
    }
}

/// The row's item bytes (`encode_item`'s form).
pub(crate) fn item_bytes(value: &[u8]) -> &[u8] {
    split(value).1
}

/// The row's item, decoded.
pub(crate) fn item(value: &[u8]) -> Result<postbox_item::Item, postbox_item::ItemError> {
    postbox_item::decode_item(item_bytes(value))
}

/// The row of `item` (`encode_item`'s bytes) that stream record `seq`
/// refers to.
pub(crate) fn referred(seq: u64, item: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + item.len());
    out.push(BY_REF);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(item);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::{AttributeValue, Item, encode_item};

    #[test]
    fn a_referred_row_splits_back_and_a_plain_one_is_left_alone() {
        let item = Item::from([("pk".to_owned(), AttributeValue::s("a"))]);
        let bytes = encode_item(&item);
        assert_ne!(bytes[0], BY_REF, "an item never starts with the marker");
        assert_eq!(split(&bytes), (None, bytes.as_slice()));
        let row = referred(42, &bytes);
        assert_eq!(split(&row), (Some(42), bytes.as_slice()));
        assert_eq!(item_bytes(&row), bytes.as_slice());
    }
}

//! Order-preserving byte encodings of key values.
//!
//! The embedded store keeps items in one ordered map; a table's items of one
//! partition are contiguous and ordered by sort key, because byte-wise order
//! of these encodings agrees with DynamoDB's order: strings by UTF-8 bytes,
//! binary by unsigned bytes, numbers numerically.

use crate::{AttributeType, AttributeValue, ItemError};

/// Appends the order-preserving encoding of a key value (S, N or B) to `out`.
/// Sort keys are the last component of a stored key, so strings and binaries
/// need no terminator.
pub fn encode_sort_key(v: &AttributeValue, out: &mut Vec<u8>) -> Result<(), ItemError> {
    match v {
        AttributeValue::S(s) => out.extend_from_slice(s.as_bytes()),
        AttributeValue::B(b) => out.extend_from_slice(b),
        AttributeValue::N(n) => n.encode_ordered(out),
        other => {
            return Err(ItemError::validation(format!(
                "Key attributes must be S, N or B, not {}",
                other.attribute_type().as_str()
            )));
        }
    }
    Ok(())
}

/// Appends a self-delimiting, order-preserving encoding of a partition key
/// value: a type byte, the value's bytes with every 0x00 escaped as
/// 0x00 0xFF, and the terminator 0x00 0x01. No encoding is a prefix of
/// another, so a partition is one contiguous range, and partition keys that
/// share a prefix (`TENANT#t#EVENT` and `TENANT#t#HEAD`) sit side by side in
/// the file, so one commit touching both dirties neighbouring pages.
pub fn encode_partition_key(v: &AttributeValue, out: &mut Vec<u8>) -> Result<(), ItemError> {
    let tag = match v.attribute_type() {
        AttributeType::S => b's',
        AttributeType::N => b'n',
        AttributeType::B => b'b',
        other => {
            return Err(ItemError::validation(format!(
                "Key attributes must be S, N or B, not {}",
                other.as_str()
            )));
        }
    };
    let mut raw = Vec::new();
    encode_sort_key(v, &mut raw)?;
    out.reserve(raw.len() + 3);
    out.push(tag);
    for b in raw {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_and_binary_order_is_bytewise() {
        let enc = |v: AttributeValue| {
            let mut out = Vec::new();
            encode_sort_key(&v, &mut out).unwrap();
            out
        };
        assert!(enc(AttributeValue::s("a")) < enc(AttributeValue::s("ab")));
        assert!(enc(AttributeValue::s("Z")) < enc(AttributeValue::s("a")));
        assert!(enc(AttributeValue::B(vec![0x7f])) < enc(AttributeValue::B(vec![0x80])));
        assert!(encode_sort_key(&AttributeValue::Bool(true), &mut Vec::new()).is_err());
    }

    #[test]
    fn partition_encoding_is_prefix_free() {
        let mut a = Vec::new();
        encode_partition_key(&AttributeValue::s("ab"), &mut a).unwrap();
        let mut b = Vec::new();
        encode_partition_key(&AttributeValue::s("a"), &mut b).unwrap();
        assert!(!a.starts_with(&b));
        // Embedded zero bytes cannot forge a terminator.
        let (mut c, mut d) = (Vec::new(), Vec::new());
        encode_partition_key(&AttributeValue::B(vec![0, 1]), &mut c).unwrap();
        encode_partition_key(&AttributeValue::B(vec![0]), &mut d).unwrap();
        assert!(!c.starts_with(&d));
        assert!(a > b, "byte order is kept");
    }
}

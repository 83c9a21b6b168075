//! Digests and identifiers: the MD5s SQS answers with (clients check them),
//! the SHA-256 of content-based deduplication, message ids and receipt
//! handles.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use md5::{Digest, Md5};
use sha2::Sha256;

use crate::message::MessageAttributes;

/// MD5 of `data`, lowercase hex.
pub fn md5_hex(data: &[u8]) -> String {
    hex::encode(Md5::digest(data))
}

/// SHA-256 of `data`, lowercase hex (content-based deduplication ids).
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The MD5 SQS computes over message attributes: for each attribute in name
/// order, the length-prefixed (4 bytes, big-endian) name, then data type,
/// then 1 and the length-prefixed string value or 2 and the binary value.
pub fn md5_of_attributes(attributes: &MessageAttributes) -> Option<String> {
    if attributes.is_empty() {
        return None;
    }
    let mut buf = Vec::new();
    for (name, value) in attributes {
        push_prefixed(&mut buf, name.as_bytes());
        push_prefixed(&mut buf, value.data_type.as_bytes());
        match (&value.binary_value, &value.string_value) {
            (Some(b), _) => {
                buf.push(2);
                push_prefixed(&mut buf, b);
            }
            (None, Some(s)) => {
                buf.push(1);
                push_prefixed(&mut buf, s.as_bytes());
            }
            (None, None) => {}
        }
    }
    Some(md5_hex(&buf))
}

/// The MD5 of the AWSTraceHeader system attribute, computed like
/// [`md5_of_attributes`].
pub fn md5_of_trace_header(header: &str) -> String {
    let mut buf = Vec::new();
    push_prefixed(&mut buf, b"AWSTraceHeader");
    push_prefixed(&mut buf, b"String");
    buf.push(1);
    push_prefixed(&mut buf, header.as_bytes());
    md5_hex(&buf)
}

fn push_prefixed(buf: &mut Vec<u8>, data: &[u8]) {
    buf.extend_from_slice(&(data.len() as u32).to_be_bytes());
    buf.extend_from_slice(data);
}

/// A new message id: a random UUID (version 4), as SQS's are.
pub fn new_message_id() -> String {
    let mut b: [u8; 16] = fastrand::u128(..).to_be_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    message_id_from_bits(u128::from_be_bytes(b))
}

/// A message id (a UUID) as 128 bits, for compact bookkeeping; `None` when
/// it is not a UUID.
pub fn message_id_bits(id: &str) -> Option<u128> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    if id.len() != 36 || hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

/// A message id from [`message_id_bits`].
pub fn message_id_from_bits(bits: u128) -> String {
    let h = hex::encode(bits.to_be_bytes());
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// What a receipt handle names: one receive of one message of one queue.
/// `token` is drawn at each receive, so an earlier receive's handle no
/// longer matches once the message is received again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The queue's internal id.
    pub queue_id: u64,
    /// The message's position in its queue.
    pub seq: u64,
    /// The token of the receive that made the handle.
    pub token: u64,
}

const RECEIPT_MAGIC: &[u8; 4] = b"PBR1";

impl Receipt {
    /// The handle clients see.
    pub fn encode(&self) -> String {
        let mut buf = Vec::with_capacity(28);
        buf.extend_from_slice(RECEIPT_MAGIC);
        buf.extend_from_slice(&self.queue_id.to_be_bytes());
        buf.extend_from_slice(&self.seq.to_be_bytes());
        buf.extend_from_slice(&self.token.to_be_bytes());
        URL_SAFE_NO_PAD.encode(buf)
    }

    /// Reads a handle back; `None` when it is not one of ours.
    pub fn decode(handle: &str) -> Option<Receipt> {
        let bytes = URL_SAFE_NO_PAD.decode(handle).ok()?;
        if bytes.len() != 28 || &bytes[..4] != RECEIPT_MAGIC {
            return None;
        }
        let word = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(Receipt {
            queue_id: word(4),
            seq: word(12),
            token: word(20),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageAttributeValue;

    #[test]
    fn md5_of_body_is_plain_md5() {
        assert_eq!(md5_hex(b"hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn md5_of_attributes_matches_sqs() {
        // Computed with the algorithm of the SQS developer guide.
        let mut attrs = MessageAttributes::new();
        attrs.insert(
            "s".into(),
            MessageAttributeValue {
                data_type: "String".into(),
                string_value: Some("hello".into()),
                binary_value: None,
            },
        );
        let mut buf = Vec::new();
        buf.extend_from_slice(&[0, 0, 0, 1, b's', 0, 0, 0, 6]);
        buf.extend_from_slice(b"String");
        buf.extend_from_slice(&[1, 0, 0, 0, 5]);
        buf.extend_from_slice(b"hello");
        assert_eq!(md5_of_attributes(&attrs).unwrap(), md5_hex(&buf));
        assert_eq!(md5_of_attributes(&MessageAttributes::new()), None);
    }

    #[test]
    fn sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn message_ids_look_like_uuids() {
        let id = new_message_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_message_id());
        assert_eq!(message_id_from_bits(message_id_bits(&id).unwrap()), id);
        assert_eq!(message_id_bits("not-an-id"), None);
    }

    #[test]
    fn receipts_round_trip_and_refuse_garbage() {
        let r = Receipt {
            queue_id: 3,
            seq: 99,
            token: 0xdead_beef,
        };
        assert_eq!(Receipt::decode(&r.encode()), Some(r));
        assert_eq!(Receipt::decode("not-a-receipt-handle"), None);
        assert_eq!(Receipt::decode(""), None);
    }
}

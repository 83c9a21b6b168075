//! The byte layout of a message payload.
//!
//! ```text
//! version: u8 (1: the body inline; 2: the body by reference)
//! sent_at: u64 BE (ms)
//! then, each as u32 BE length + UTF-8 (length u32::MAX = absent):
//!   message id, group id, deduplication id, dead-letter source queue,
//!   AWSTraceHeader, message attributes (JSON),
//! version 1: body
//! version 2: the item's table, its key (DynamoDB JSON), then the body's
//!   length (u32 BE) and CRC-32 (u32 BE)
//! ```
//!
//! The body is last so that loading the schedule on open can stop before it.
//! A body by reference is the DynamoDB JSON of an item that never changes
//! (an event row): the receive writes it from the item again and checks it
//! against the length and CRC kept here.

use crate::message::MessageAttributes;

const VERSION: u8 = 1;
const VERSION_BY_REFERENCE: u8 = 2;
const ABSENT: u32 = u32::MAX;

/// The immutable part of a message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    /// The id SQS answered the send with.
    pub message_id: String,
    /// FIFO message group.
    pub group: Option<String>,
    /// FIFO deduplication id (given or content-based).
    pub dedup_id: Option<String>,
    /// When it was sent (ms).
    pub sent_at: u64,
    /// The queue it was dead-lettered from, while it sits in a dead-letter queue.
    pub dead_letter_source: Option<String>,
    /// The AWSTraceHeader system attribute.
    pub trace_header: Option<String>,
    /// User message attributes.
    pub attributes: MessageAttributes,
    /// The body (empty when decoded without it, or kept by reference).
    pub body: String,
    /// Where the body is, when it is kept by reference.
    pub body_of: Option<BodyRef>,
    /// Bytes of body and attributes, as SQS counts them.
    pub size: u32,
}

/// A body kept as the DynamoDB JSON of an item of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyRef {
    /// The item's table.
    pub table: String,
    /// Its key, as DynamoDB JSON.
    pub key: String,
    /// The body's length in bytes.
    pub len: u32,
    /// The body's CRC-32.
    pub crc: u32,
}

impl BodyRef {
    /// Whether `body` is the body this reference was made for.
    pub fn matches(&self, body: &str) -> bool {
        body.len() == self.len as usize && crc32fast::hash(body.as_bytes()) == self.crc
    }
}

impl Payload {
    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let attrs = if self.attributes.is_empty() {
            None
        } else {
            Some(serde_json::to_string(&self.attributes).expect("attributes serialise"))
        };
        let mut out = Vec::with_capacity(64 + self.body.len());
        out.push(match self.body_of {
            Some(_) => VERSION_BY_REFERENCE,
            None => VERSION,
        });
        out.extend_from_slice(&self.sent_at.to_be_bytes());
        let body = match &self.body_of {
            Some(r) => [Some(r.table.as_str()), Some(r.key.as_str())],
            None => [Some(self.body.as_str()), None],
        };
        for field in [
            Some(self.message_id.as_str()),
            self.group.as_deref(),
            self.dedup_id.as_deref(),
            self.dead_letter_source.as_deref(),
            self.trace_header.as_deref(),
            attrs.as_deref(),
        ]
        .into_iter()
        .chain(body.into_iter().flatten().map(Some))
        {
            match field {
                Some(s) => {
                    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
                None => out.extend_from_slice(&ABSENT.to_be_bytes()),
            }
        }
        if let Some(r) = &self.body_of {
            out.extend_from_slice(&r.len.to_be_bytes());
            out.extend_from_slice(&r.crc.to_be_bytes());
        }
        out
    }

    /// Sets the send time in encoded bytes (it is known only at commit,
    /// while encoding happens before, off the writer thread).
    pub fn patch_sent_at(encoded: &mut [u8], sent_at: u64) {
        encoded[1..9].copy_from_slice(&sent_at.to_be_bytes());
    }

    /// The table and key of the item encoded `bytes` keep their body as,
    /// read without decoding the rest; None for a body kept inline.
    pub fn reference(bytes: &[u8]) -> Result<Option<(&str, postbox_item::Item)>, String> {
        if bytes.first() != Some(&VERSION_BY_REFERENCE) {
            return Ok(None);
        }
        let mut r = Reader { bytes, at: 9 };
        for _ in 0..6 {
            match r.len()? {
                ABSENT => {}
                n => {
                    r.take(n as usize)?;
                }
            }
        }
        let mut text = || -> Result<&str, String> {
            let n = r.len()?;
            std::str::from_utf8(r.take(n as usize)?)
                .map_err(|_| "message payload is not UTF-8".to_owned())
        };
        let table = text()?;
        let key = text()?;
        let key = postbox_item::scalar_item_from_json_text(key)
            .ok_or_else(|| format!("corrupt body reference key {key}"))?;
        Ok(Some((table, key)))
    }

    /// Reads a payload back.
    pub fn decode(bytes: &[u8]) -> Result<Payload, String> {
        Self::read(bytes, true)
    }

    /// Reads everything but the body (its size is still known).
    pub fn decode_without_body(bytes: &[u8]) -> Result<Payload, String> {
        Self::read(bytes, false)
    }

    fn read(bytes: &[u8], with_body: bool) -> Result<Payload, String> {
        let mut r = Reader { bytes, at: 0 };
        let by_reference = match r.take(1)? {
            [VERSION] => false,
            [VERSION_BY_REFERENCE] => true,
            _ => return Err("unknown message payload version".to_owned()),
        };
        let sent_at = u64::from_be_bytes(r.take(8)?.try_into().expect("8 bytes"));
        let message_id = r.string()?.unwrap_or_default();
        let group = r.string()?;
        let dedup_id = r.string()?;
        let dead_letter_source = r.string()?;
        let trace_header = r.string()?;
        let attributes: MessageAttributes = match r.string()? {
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| format!("corrupt message attributes: {e}"))?,
            None => MessageAttributes::new(),
        };
        let (body, body_of, body_len) = if by_reference {
            let table = r.string()?.ok_or("a body reference without its table")?;
            let key = r.string()?.ok_or("a body reference without its key")?;
            let len = r.len()?;
            let crc = r.len()?;
            let body_of = BodyRef {
                table,
                key,
                len,
                crc,
            };
            (String::new(), Some(body_of), len as usize)
        } else if with_body {
            let body = r.string()?.unwrap_or_default();
            let len = body.len();
            (body, None, len)
        } else {
            (String::new(), None, r.len()? as usize)
        };
        let size = (body_len + crate::message::attributes_size(&attributes)) as u32;
        Ok(Payload {
            message_id,
            group,
            dedup_id,
            sent_at,
            dead_letter_source,
            trace_header,
            attributes,
            body,
            body_of,
            size,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or("truncated message payload")?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn len(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn string(&mut self) -> Result<Option<String>, String> {
        let len = self.len()?;
        if len == ABSENT {
            return Ok(None);
        }
        let raw = self.take(len as usize)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| "message payload is not UTF-8".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageAttributeValue;

    #[test]
    fn round_trip() {
        let mut p = Payload {
            message_id: "id".into(),
            group: Some("g".into()),
            dedup_id: None,
            sent_at: 42,
            dead_letter_source: Some("src".into()),
            trace_header: None,
            attributes: MessageAttributes::new(),
            body: "héllo".into(),
            body_of: None,
            size: 0,
        };
        p.attributes.insert(
            "b".into(),
            MessageAttributeValue {
                data_type: "Binary".into(),
                string_value: None,
                binary_value: Some(vec![0, 255]),
            },
        );
        p.size = (p.body.len() + 1 + 6 + 2) as u32;
        assert_eq!(Payload::decode(&p.encode()).unwrap(), p);
        let mut bytes = p.encode();
        Payload::patch_sent_at(&mut bytes, 7);
        assert_eq!(Payload::decode(&bytes).unwrap().sent_at, 7);
        let header = Payload::decode_without_body(&p.encode()).unwrap();
        assert_eq!(header.body, "");
        assert_eq!(header.size, p.size);
        assert!(Payload::decode(&p.encode()[..10]).is_err());
    }

    #[test]
    fn a_body_by_reference_keeps_the_item_and_the_body_s_length_and_crc() {
        let body = r#"{"id":{"S":"e1"}}"#;
        let p = Payload {
            message_id: "id".into(),
            group: Some("acme".into()),
            dedup_id: Some("e1".into()),
            sent_at: 42,
            body_of: Some(BodyRef {
                table: "events".into(),
                key: r#"{"pk":{"S":"TENANT#acme#EVENT"},"sk":{"S":"1"}}"#.into(),
                len: body.len() as u32,
                crc: crc32fast::hash(body.as_bytes()),
            }),
            size: body.len() as u32,
            ..Payload::default()
        };
        let bytes = p.encode();
        assert_eq!(bytes[0], VERSION_BY_REFERENCE);
        assert_eq!(Payload::decode(&bytes).unwrap(), p);
        assert_eq!(Payload::decode_without_body(&bytes).unwrap().size, p.size);
        let (table, key) = Payload::reference(&bytes).unwrap().unwrap();
        assert_eq!(table, "events");
        assert_eq!(
            postbox_item::json::item_to_string(&key),
            p.body_of.as_ref().unwrap().key
        );
        assert_eq!(Payload::reference(&Payload::default().encode()), Ok(None));
        let r = p.body_of.as_ref().unwrap();
        assert!(r.matches(body));
        assert!(!r.matches(r#"{"id":{"S":"e2"}}"#));
        assert!(!r.matches(r#"{"id":{"S":"e1"}} "#));
        assert!(Payload::decode(&bytes[..bytes.len() - 2]).is_err());
    }
}

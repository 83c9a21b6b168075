//! Messages as senders give them and receivers get them, with SQS's rules
//! for bodies and message attributes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{QueueError, QueueResult};

/// Most message attributes on one message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;

/// One message attribute value: `DataType` is `String`, `Number` or
/// `Binary`, optionally followed by `.label`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MessageAttributeValue {
    /// `String`, `Number` or `Binary`, with an optional custom label.
    pub data_type: String,
    /// The value of String and Number attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    /// The value of Binary attributes (raw bytes; base64 on the wire).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "base64_bytes"
    )]
    pub binary_value: Option<Vec<u8>>,
}

/// A message attribute map, ordered by name as SQS digests it.
pub type MessageAttributes = BTreeMap<String, MessageAttributeValue>;

/// A message to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewMessage {
    /// The body (1 byte to the queue's MaximumMessageSize with the attributes).
    pub body: String,
    /// Per-message delay in seconds (standard queues only).
    pub delay_seconds: Option<u32>,
    /// User message attributes.
    pub attributes: MessageAttributes,
    /// The AWSTraceHeader system attribute, if given.
    pub trace_header: Option<String>,
    /// FIFO: the message group (required). Standard queues accept and ignore it.
    pub group_id: Option<String>,
    /// FIFO: the deduplication id (else content-based deduplication must be on).
    pub deduplication_id: Option<String>,
    /// The item whose DynamoDB JSON `body` is, when the item never changes
    /// (an event row): the queue then stores this reference, not the body,
    /// and a receive writes the body from the item again. Never set from
    /// the wire.
    pub body_of: Option<ItemRef>,
}

/// An item of the store the queues live in: a message's body written
/// from it (see [`NewMessage::body_of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemRef {
    /// The item's table.
    pub table: String,
    /// Its key.
    pub key: postbox_item::Item,
}

impl NewMessage {
    /// A message with just a body.
    pub fn new(body: impl Into<String>) -> NewMessage {
        NewMessage {
            body: body.into(),
            ..NewMessage::default()
        }
    }

    /// Sets the message group.
    pub fn group(mut self, group: impl Into<String>) -> NewMessage {
        self.group_id = Some(group.into());
        self
    }

    /// Sets the deduplication id.
    pub fn dedup(mut self, id: impl Into<String>) -> NewMessage {
        self.deduplication_id = Some(id.into());
        self
    }

    /// The size SQS counts against MaximumMessageSize: the body's UTF-8 bytes
    /// plus every attribute's name, type and value.
    pub fn size(&self) -> usize {
        self.body.len() + attributes_size(&self.attributes)
    }

    /// Checks the body and attributes (everything that needs no queue).
    pub fn validate(&self) -> QueueResult<()> {
        if self.body.is_empty() {
            return Err(QueueError::MissingParameter(
                "The request must contain the parameter MessageBody.".into(),
            ));
        }
        check_characters(
            &self.body,
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )?;
        validate_attributes(&self.attributes)?;
        if let Some(h) = &self.trace_header {
            check_characters(h, "The AWSTraceHeader holds invalid characters.")?;
        }
        Ok(())
    }
}

/// Bytes of a message attribute map as SQS counts them.
pub fn attributes_size(attributes: &MessageAttributes) -> usize {
    attributes
        .iter()
        .map(|(name, v)| {
            name.len()
                + v.data_type.len()
                + v.string_value.as_ref().map_or(0, String::len)
                + v.binary_value.as_ref().map_or(0, Vec::len)
        })
        .sum()
}

/// Refuses text with characters outside the set SQS allows:
/// `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`.
/// (A Rust `str` cannot hold lone surrogates; the JSON decoder refuses them.)
pub fn check_characters(text: &str, message: &str) -> QueueResult<()> {
    if characters_allowed(text) {
        Ok(())
    } else {
        Err(QueueError::InvalidMessageContents(message.to_owned()))
    }
}

/// Whether every character of `text` is in the set SQS allows.
fn characters_allowed(text: &str) -> bool {
    let allowed = |c: char| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..);
    // In UTF-8 only two kinds of character are refused: control bytes and
    // U+FFFE/U+FFFF, which start with 0xEF. A byte scan settles most texts;
    // it has no early exit inside a 64-byte chunk, so it is vectorised
    // (a relayed event's body is scanned twice, at the relay's pre-check and
    // at the send; a byte-at-a-time scan was 1.5% of an emit's server CPU).
    let suspect =
        |b: u8| u8::from(b < 0x20 && b != b'\t' && b != b'\n' && b != b'\r') | u8::from(b == 0xEF);
    let settled = text
        .as_bytes()
        .chunks(64)
        .all(|chunk| chunk.iter().fold(0, |seen, &b| seen | suspect(b)) == 0);
    settled || text.chars().all(allowed)
}

fn validate_attributes(attributes: &MessageAttributes) -> QueueResult<()> {
    if attributes.len() > MAX_MESSAGE_ATTRIBUTES {
        return Err(QueueError::invalid(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MAX_MESSAGE_ATTRIBUTES}].",
            attributes.len()
        )));
    }
    for (name, value) in attributes {
        validate_attribute_name(name)?;
        validate_attribute_value(name, value)?;
    }
    Ok(())
}

fn validate_attribute_name(name: &str) -> QueueResult<()> {
    let bad = |why: &str| QueueError::invalid(format!("Message attribute name '{name}' {why}"));
    if name.is_empty() {
        return Err(QueueError::invalid(
            "The request must contain non-empty message attribute name.",
        ));
    }
    if name.len() > 256 {
        return Err(bad("must be at most 256 characters long."));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(bad(
            "can only contain alphanumeric characters, hyphens, underscores and periods.",
        ));
    }
    if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        return Err(bad(
            "must not start or end with a period, or have two periods in a row.",
        ));
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        return Err(bad(
            "must not start with AWS-reserved prefix 'AWS.' or 'Amazon.'.",
        ));
    }
    Ok(())
}

fn validate_attribute_value(name: &str, value: &MessageAttributeValue) -> QueueResult<()> {
    let kind = value.data_type.split('.').next().unwrap_or("");
    let label_ok = value.data_type.len() <= 256;
    match kind {
        "String" | "Number" if label_ok => {
            let Some(s) = value.string_value.as_deref().filter(|s| !s.is_empty()) else {
                return Err(QueueError::invalid(format!(
                    "Message attribute '{name}' must contain a non-empty value of message attribute type '{kind}'."
                )));
            };
            if !characters_allowed(s) {
                return Err(QueueError::InvalidMessageContents(format!(
                    "Message attribute '{name}' holds characters outside the allowed set."
                )));
            }
            if kind == "Number" && !is_number(s) {
                return Err(QueueError::invalid(format!(
                    "Can't cast the value of message (user) attribute '{name}' to a number."
                )));
            }
        }
        "Binary" if label_ok => {
            if value.binary_value.as_ref().is_none_or(Vec::is_empty) {
                return Err(QueueError::invalid(format!(
                    "Message attribute '{name}' must contain a non-empty value of message attribute type 'Binary'."
                )));
            }
        }
        _ => {
            return Err(QueueError::invalid(format!(
                "The type of message (user) attribute '{name}' is invalid. You must use only the following supported type prefixes: Binary, Number, String."
            )));
        }
    }
    Ok(())
}

/// A decimal number with at most 38 significant digits, as SQS's Number.
fn is_number(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_ok = !(int.is_empty() && frac.is_empty())
        && int.chars().all(|c| c.is_ascii_digit())
        && frac.chars().all(|c| c.is_ascii_digit());
    let exp_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
    });
    let significant = format!("{int}{frac}")
        .trim_start_matches('0')
        .trim_end_matches('0')
        .len();
    digits_ok && exp_ok && significant <= 38
}

/// A received message, as ReceiveMessage answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The id given at send.
    pub message_id: String,
    /// The handle of this receive; only the latest one deletes.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// All message attributes (the wire layer selects the names asked for).
    pub attributes: MessageAttributes,
    /// System attributes by SQS name (SentTimestamp, ApproximateReceiveCount, ...).
    pub system: BTreeMap<String, String>,
}

/// The answer to one send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendResult {
    /// The new message's id, or the original's on a deduplicated send.
    pub message_id: String,
    /// FIFO: the sequence number (the original's on a deduplicated send).
    pub sequence_number: Option<String>,
    /// MD5 of the body, hex.
    pub md5_of_body: String,
    /// MD5 of the message attributes, hex, when there are any.
    pub md5_of_attributes: Option<String>,
    /// MD5 of the system attributes (AWSTraceHeader), hex, when given.
    pub md5_of_system_attributes: Option<String>,
}

mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| STANDARD.decode(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(t: &str, v: &str) -> MessageAttributeValue {
        MessageAttributeValue {
            data_type: t.into(),
            string_value: Some(v.into()),
            binary_value: None,
        }
    }

    fn with_attr(name: &str, v: MessageAttributeValue) -> NewMessage {
        let mut m = NewMessage::new("m");
        m.attributes.insert(name.into(), v);
        m
    }

    #[test]
    fn body_characters() {
        for bad in [
            "a\u{0}b",
            "\u{1}",
            "bell\u{7}",
            "\u{b}",
            "x\u{FFFE}",
            "x\u{FFFF}",
            // Past the first 64 bytes, and across a chunk's edge.
            &format!("{}\u{1}", "x".repeat(200)),
            &format!("{}\u{FFFE}", "x".repeat(63)),
        ] {
            assert!(
                matches!(
                    NewMessage::new(bad).validate(),
                    Err(QueueError::InvalidMessageContents(_))
                ),
                "{bad:?}"
            );
        }
        for good in [
            "tab\tnl\ncr\r",
            "del\u{7f}\u{e000}\u{fffd}",
            "emoji \u{1F600}",
            " ",
            // A byte 0xEF that starts an allowed character, past 64 bytes.
            &format!("{}\u{F000}\u{FFFD}", "x".repeat(100)),
        ] {
            NewMessage::new(good).validate().unwrap();
        }
        assert!(NewMessage::new("").validate().is_err());
    }

    #[test]
    fn attribute_names() {
        for bad in [
            "has space",
            ".lead",
            "trail.",
            "two..dots",
            "AWS.x",
            "amazon.y",
            "",
        ] {
            assert!(
                with_attr(bad, attr("String", "v")).validate().is_err(),
                "{bad:?}"
            );
        }
        with_attr("ok_name-1.x", attr("String", "v"))
            .validate()
            .unwrap();
        with_attr(&"a".repeat(256), attr("String", "v"))
            .validate()
            .unwrap();
        assert!(
            with_attr(&"a".repeat(257), attr("String", "v"))
                .validate()
                .is_err()
        );
    }

    #[test]
    fn attribute_values() {
        assert!(with_attr("a", attr("String", "")).validate().is_err());
        assert!(with_attr("a", attr("Text", "v")).validate().is_err());
        assert!(with_attr("a", attr("", "v")).validate().is_err());
        assert!(with_attr("n", attr("Number", "twelve")).validate().is_err());
        with_attr("n", attr("Number", "1.5e3")).validate().unwrap();
        with_attr("n", attr("Number.int", "-12.50"))
            .validate()
            .unwrap();
        with_attr("n", attr("Number", &"9".repeat(38)))
            .validate()
            .unwrap();
        assert!(
            with_attr("n", attr("Number", &"9".repeat(39)))
                .validate()
                .is_err()
        );
        let binary = MessageAttributeValue {
            data_type: "Binary.gif".into(),
            string_value: None,
            binary_value: Some(vec![1]),
        };
        with_attr("b", binary).validate().unwrap();
    }

    #[test]
    fn size_counts_attribute_parts() {
        let m = with_attr("attr", attr("String", "0123456789"));
        assert_eq!(m.size(), 1 + 4 + 6 + 10);
    }
}

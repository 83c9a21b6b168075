//! JSON text written directly: strings escaped with a search that skips
//! plain runs at once, items in DynamoDB JSON and `serde_json::Value`s,
//! in exactly the bytes `serde_json` writes for them.
//!
//! Kilobyte strings are common (an event's payload is stored as its JSON
//! text in one string attribute), and serde_json escapes a string a byte
//! at a time: the relay turning each event into its message and the HTTP
//! emit's answer spent most of their serialisation there.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::{AttributeValue, Item};

/// Appends `s` as a JSON string literal: `"` and `\` escaped, the five
/// short escapes for control characters, `\u00xx` (lowercase hex) for the
/// other controls, everything else as is. This is both what serde_json
/// writes and what ECMAScript's `JSON.stringify` writes for a Rust string.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    write_string_contents(out, s);
    out.push('"');
}

/// [`write_string`] without the quotes.
pub fn write_string_contents(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(i) = next_escaped(bytes, start) {
        let b = bytes[i];
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            _ => None,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// The first byte from `from` on that a string escapes: a quote, a
/// backslash or a control character. Long runs without one are found by
/// vector searches.
pub fn next_escaped(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = &bytes[from..];
    if rest.len() < 32 {
        // Most strings are short (keys, ids, names): a plain loop finds
        // the byte before a vector search would have started.
        return rest
            .iter()
            .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
            .map(|at| from + at);
    }
    let run = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let at = first_control(&rest[..run]).unwrap_or(run);
    (at < rest.len()).then_some(from + at)
}

/// Where the first control character (a byte under 0x20) of `bytes` is.
/// Chunks are scanned without an early exit, which is vectorised, and the
/// place is looked for only in a chunk that has one.
fn first_control(bytes: &[u8]) -> Option<usize> {
    let controls = |chunk: &[u8]| chunk.iter().fold(false, |seen, &b| seen | (b < 0x20));
    let chunk = bytes.chunks(64).position(controls)?;
    let at = bytes[chunk * 64..].iter().position(|&b| b < 0x20)?;
    Some(chunk * 64 + at)
}

/// Appends `value` as `serde_json::to_string(value)` writes it (compact,
/// an object's members in the map's order).
pub fn write_value(out: &mut String, value: &serde_json::Value) {
    use serde_json::Value;
    use std::fmt::Write as _;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // A number's `Display` is its serialisation (integers as they
        // are, doubles in their shortest round-trip digits).
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// `item` in DynamoDB JSON, as `serde_json::to_string(item)` writes it.
pub fn item_to_string(item: &Item) -> String {
    // Its stored size and a type wrapper's bytes per attribute: enough
    // for most items, so the text is not copied as it grows.
    let mut out = String::with_capacity(crate::item_size(item) + 16 * item.len() + 16);
    write_item(&mut out, item);
    out
}

/// Appends `item` in DynamoDB JSON, as serde_json writes it.
pub fn write_item(out: &mut String, item: &Item) {
    out.push('{');
    for (i, (name, value)) in item.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push(':');
        write_attribute(out, value);
    }
    out.push('}');
}

/// The item `bytes` encode (the store's codec) in DynamoDB JSON: exactly
/// `item_to_string(&decode_item(bytes)?)`, written from the bytes without
/// building the item when its names are in ascending order, as a stored
/// item's are (otherwise it is decoded first, so a repeated name keeps its
/// last value as decoding does).
pub fn encoded_item_to_string(bytes: &[u8]) -> Result<String, crate::ItemError> {
    use crate::ValueRef;
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() + 64);
    out.push('{');
    let mut previous: Option<&str> = None;
    for attribute in crate::encoded_attributes(bytes) {
        let (name, value) = attribute?;
        if previous.is_some_and(|p| p >= name) {
            return Ok(item_to_string(&crate::decode_item(bytes)?));
        }
        if previous.is_some() {
            out.push(',');
        }
        previous = Some(name);
        write_string(&mut out, name);
        out.push(':');
        match value {
            ValueRef::S(s) => {
                out.push_str("{\"S\":");
                write_string(&mut out, s);
                out.push('}');
            }
            ValueRef::N(n) => {
                let _ = write!(out, "{{\"N\":\"{n}\"}}");
            }
            ValueRef::B(b) => {
                out.push_str("{\"B\":\"");
                BASE64.encode_string(b, &mut out);
                out.push_str("\"}");
            }
            ValueRef::Bool(b) => out.push_str(if b {
                "{\"BOOL\":true}"
            } else {
                "{\"BOOL\":false}"
            }),
            ValueRef::Null => out.push_str("{\"NULL\":true}"),
            ValueRef::Encoded(..) => write_attribute(&mut out, &value.to_value()?),
        }
    }
    out.push('}');
    Ok(out)
}

/// Appends `{"<tag>":[...` (the caller closes the brace) with `write`
/// writing each element.
fn write_list<'a, T: 'a>(
    out: &mut String,
    tag: &str,
    items: impl IntoIterator<Item = &'a T>,
    write: impl Fn(&mut String, &'a T),
) {
    out.push_str("{\"");
    out.push_str(tag);
    out.push_str("\":[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write(out, item);
    }
    out.push(']');
}

/// Appends one attribute value in DynamoDB JSON (`{"S":"..."}` and so
/// on), as serde_json writes it.
pub fn write_attribute(out: &mut String, value: &AttributeValue) {
    use std::fmt::Write as _;
    match value {
        AttributeValue::S(s) => {
            out.push_str("{\"S\":");
            write_string(out, s);
        }
        AttributeValue::N(n) => {
            // A number's text has no character JSON escapes.
            let _ = write!(out, "{{\"N\":\"{n}\"");
        }
        AttributeValue::B(b) => {
            out.push_str("{\"B\":\"");
            BASE64.encode_string(b, out);
            out.push('"');
        }
        AttributeValue::Bool(b) => out.push_str(if *b {
            "{\"BOOL\":true"
        } else {
            "{\"BOOL\":false"
        }),
        AttributeValue::Null => out.push_str("{\"NULL\":true"),
        AttributeValue::M(m) => {
            out.push_str("{\"M\":");
            write_item(out, m);
        }
        AttributeValue::L(l) => write_list(out, "L", l, write_attribute),
        AttributeValue::Ss(set) => write_list(out, "SS", set, |out, s| write_string(out, s)),
        AttributeValue::Ns(set) => write_list(out, "NS", set, |out, n| {
            let _ = write!(out, "\"{n}\"");
        }),
        AttributeValue::Bs(set) => write_list(out, "BS", set, |out, b| {
            out.push('"');
            BASE64.encode_string(b, out);
            out.push('"');
        }),
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Number;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Strings with every kind of character a string escapes or not:
    /// controls, quotes, backslashes, DEL, multi-byte characters, and
    /// plain runs longer than a scan chunk.
    fn text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            "[\\x00-\\x1f\"\\\\\\x7f]",
            "[a-z ]{0,70}",
            "[\u{e9}\u{2028}\u{ffff}\u{1f600}\u{10ffff}]",
        ];
        prop::collection::vec(piece, 0..12).prop_map(|p| p.concat())
    }

    fn number() -> impl Strategy<Value = Number> {
        (any::<i64>(), -20i32..20).prop_map(|(m, e)| {
            format!("{m}E{e}")
                .parse::<Number>()
                .unwrap_or_else(|_| "0".parse().expect("a number"))
        })
    }

    fn attribute() -> impl Strategy<Value = AttributeValue> {
        let leaf = prop_oneof![
            text().prop_map(AttributeValue::S),
            number().prop_map(AttributeValue::N),
            prop::collection::vec(any::<u8>(), 0..40).prop_map(AttributeValue::B),
            any::<bool>().prop_map(AttributeValue::Bool),
            Just(AttributeValue::Null),
            prop::collection::btree_set(text(), 1..4).prop_map(AttributeValue::Ss),
            prop::collection::btree_set(number(), 1..4).prop_map(AttributeValue::Ns),
            prop::collection::btree_set(prop::collection::vec(any::<u8>(), 0..9), 1..4)
                .prop_map(AttributeValue::Bs),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
                prop::collection::btree_map(text(), inner, 0..4).prop_map(AttributeValue::M),
            ]
        })
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(text(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn an_encoded_item_with_names_out_of_order_is_written_as_it_decodes() {
        // {"b": S "x", "a": S "y"} and {"a": S "x", "a": S "yy"}: decoding
        // sorts the first and keeps the last value of the second.
        let unsorted = [2, 1, b'b', 0, 1, b'x', 1, b'a', 0, 1, b'y'];
        assert_eq!(
            encoded_item_to_string(&unsorted).unwrap(),
            r#"{"a":{"S":"y"},"b":{"S":"x"}}"#
        );
        let repeated = [2, 1, b'a', 0, 1, b'x', 1, b'a', 0, 2, b'y', b'y'];
        assert_eq!(
            encoded_item_to_string(&repeated).unwrap(),
            r#"{"a":{"S":"yy"}}"#
        );
        assert!(encoded_item_to_string(&repeated[..5]).is_err());
    }

    proptest! {
        /// The item writer is held to serde_json's bytes, which is what
        /// every reader of these texts was written against.
        #[test]
        fn an_item_is_written_as_serde_json_writes_it(
            item in prop::collection::btree_map(text(), attribute(), 0..6)
        ) {
            let want = serde_json::to_string(&item).expect("items serialise");
            prop_assert_eq!(item_to_string(&item), want);
        }

        /// Written from the bytes, an item reads as written from the item.
        #[test]
        fn an_encoded_item_is_written_as_its_item_is(
            item in prop::collection::btree_map(text(), attribute(), 0..6)
        ) {
            let bytes = crate::encode_item(&item);
            prop_assert_eq!(encoded_item_to_string(&bytes).unwrap(), item_to_string(&item));
        }

        #[test]
        fn a_json_value_is_written_as_serde_json_writes_it(value in json_value()) {
            let mut got = String::new();
            write_value(&mut got, &value);
            prop_assert_eq!(got, serde_json::to_string(&value).expect("values serialise"));
        }

        #[test]
        fn the_first_control_is_the_first_byte_under_0x20(
            mut bytes in prop::collection::vec(0x20u8..0x80, 0..300),
            controls in prop::collection::vec((0usize..300, 0u8..0x20), 0..3),
        ) {
            for (at, c) in controls {
                bytes.insert(at.min(bytes.len()), c);
            }
            let want = bytes.iter().position(|&b| b < 0x20);
            prop_assert_eq!(first_control(&bytes), want);
        }

        #[test]
        fn a_string_is_escaped_as_serde_json_escapes_it(s in text()) {
            let mut got = String::new();
            write_string(&mut got, &s);
            prop_assert_eq!(got, serde_json::to_string(&s).expect("strings serialise"));
        }
    }

    #[test]
    fn every_control_character_and_the_edges() {
        let every: String = (0u8..0x80).map(char::from).collect();
        let long = format!("{}\u{1}{}\"", "x".repeat(130), "y".repeat(64));
        for s in [every.as_str(), long.as_str(), "", "\"", "\\", "\u{7f}"] {
            let mut got = String::new();
            write_string(&mut got, s);
            assert_eq!(got, serde_json::to_string(s).unwrap(), "{s:?}");
        }
        let item: Item = BTreeMap::from([
            (
                "e".to_owned(),
                AttributeValue::Ss(BTreeSet::from(["".to_owned()])),
            ),
            ("m".to_owned(), AttributeValue::M(BTreeMap::new())),
            ("l".to_owned(), AttributeValue::L(Vec::new())),
        ]);
        assert_eq!(item_to_string(&item), serde_json::to_string(&item).unwrap());
    }
}

//! The events table: its key schema and the rows the engine writes.
//!
//! | row | pk | sk | attributes |
//! |---|---|---|---|
//! | head | `TENANT#<t>#HEAD` | `HEAD` | `last_seq` (N), `last_hash` (S, hex) |
//! | event | `TENANT#<t>#EVENT` | seq, 20 digits, zero-padded | every envelope field, `hash` |
//! | verified checkpoint | `TENANT#<t>#VERIFIED` | `VERIFIED` | `seq` (N), `hash` (S), `verified_at` (S) |
//!
//! Event attributes: `id`, `type`, `tenant`, `correlation_id`, `actor`,
//! `occurred_at` (S); `seq` (N); `causation_id` (S, or NULL when absent);
//! `payload` (S: the payload's RFC 8785 text, so the stored bytes are the
//! hashed bytes and doubles beyond DynamoDB's number range still fit);
//! `hash` (S, 64 hex). A plain Query on the event pk returns the log in
//! order. Event rows are only ever created (condition
//! `attribute_not_exists(pk)`), never updated or deleted.

use postbox_item::{
    AttributeType, AttributeValue, Item, Number, RawValueRef, ValueRef,
    visit_encoded_item_unchecked,
};
use postbox_store::api::{
    AttributeDefinition, CreateTableInput, KeySchemaElement, KeyType, ScalarType,
    StreamSpecification, StreamViewType,
};

use crate::chain::EnvelopeFields;

pub use postbox_topology::keys::{
    HEAD_SK, PK, SK, VERIFIED_SK, event_pk, head_pk, seq_sk, tenant_of_head_pk, verified_pk,
};

/// A key item.
pub fn key(pk: String, sk: &str) -> Item {
    Item::from([
        (PK.to_owned(), AttributeValue::S(pk)),
        (SK.to_owned(), AttributeValue::s(sk)),
    ])
}

/// CreateTable for the events table: pk and sk strings, stream with new and
/// old images (the relay reads it).
pub fn create_events_table(name: &str) -> CreateTableInput {
    let attr = |n: &str| AttributeDefinition {
        attribute_name: n.to_owned(),
        attribute_type: ScalarType::S,
    };
    CreateTableInput {
        table_name: name.to_owned(),
        key_schema: vec![
            KeySchemaElement {
                attribute_name: PK.to_owned(),
                key_type: KeyType::Hash,
            },
            KeySchemaElement {
                attribute_name: SK.to_owned(),
                key_type: KeyType::Range,
            },
        ],
        attribute_definitions: vec![attr(PK), attr(SK)],
        billing_mode: Some("PAY_PER_REQUEST".to_owned()),
        provisioned_throughput: None,
        stream_specification: Some(StreamSpecification {
            stream_enabled: true,
            stream_view_type: Some(StreamViewType::NewAndOldImages),
        }),
        ..Default::default()
    }
}

/// The event row of an envelope.
pub fn event_item(f: &EnvelopeFields<'_>, hash_hex: String) -> Item {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    Item::from([
        (PK.to_owned(), AttributeValue::S(event_pk(f.tenant))),
        (SK.to_owned(), AttributeValue::S(seq_sk(f.seq))),
        ("id".to_owned(), s(f.id)),
        ("type".to_owned(), s(f.event_type)),
        ("tenant".to_owned(), s(f.tenant)),
        ("seq".to_owned(), AttributeValue::n(f.seq as i64)),
        ("correlation_id".to_owned(), s(f.correlation_id)),
        (
            "causation_id".to_owned(),
            f.causation_id.map_or(AttributeValue::Null, s),
        ),
        ("actor".to_owned(), s(f.actor)),
        ("occurred_at".to_owned(), s(f.occurred_at)),
        ("payload".to_owned(), s(f.payload)),
        ("hash".to_owned(), AttributeValue::S(hash_hex)),
    ])
}

/// `item_size` of the row [`event_item`] builds, computed from the fields
/// without building it: emit checks every event against the item limit
/// before it has a seq or a hash, and building a 1 KB row only to measure it
/// cost as much as building the real one.
pub fn event_item_size(f: &EnvelopeFields<'_>) -> usize {
    let s = |name: &str, len: usize| name.len() + len;
    use postbox_topology::keys::{EVENT_SUFFIX, TENANT_PREFIX};
    s(
        PK,
        TENANT_PREFIX.len() + f.tenant.len() + EVENT_SUFFIX.len(),
    ) + s(SK, seq_sk(f.seq).len())
        + s("id", f.id.len())
        + s("type", f.event_type.len())
        + s("tenant", f.tenant.len())
        + s("seq", AttributeValue::n(f.seq as i64).size())
        + s("correlation_id", f.correlation_id.len())
        + s("causation_id", f.causation_id.map_or(1, str::len))
        + s("actor", f.actor.len())
        + s("occurred_at", f.occurred_at.len())
        + s("payload", f.payload.len())
        + s("hash", 64)
}

/// Why a stored event row cannot be read back as an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedRow(pub String);

/// An attribute of a stored event row, as the envelope reader sees it:
/// the same whether it comes from a built [`Item`] or from encoded bytes.
#[derive(Clone, Copy)]
enum Field<'a> {
    S(&'a str),
    N(Number),
    Null,
    Other(AttributeType),
    /// An S whose bytes are not UTF-8 (only from bytes that do not decode).
    BadText,
}

impl<'a> Field<'a> {
    fn of_value(v: &'a AttributeValue) -> Field<'a> {
        match v {
            AttributeValue::S(s) => Field::S(s),
            AttributeValue::N(n) => Field::N(*n),
            AttributeValue::Null => Field::Null,
            other => Field::Other(other.attribute_type()),
        }
    }

    fn of_ref(v: ValueRef<'a>) -> Field<'a> {
        match v {
            ValueRef::S(s) => Field::S(s),
            ValueRef::N(n) => Field::N(n),
            ValueRef::Null => Field::Null,
            other => Field::Other(other.attribute_type()),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Field::S(_) => "S",
            Field::N(_) => "N",
            Field::Null => "NULL",
            Field::Other(t) => t.as_str(),
            Field::BadText => "S of invalid UTF-8",
        }
    }
}

fn get_s<'a>(
    get: &impl Fn(&str) -> Option<Field<'a>>,
    name: &str,
) -> Result<&'a str, MalformedRow> {
    match get(name) {
        Some(Field::S(s)) => Ok(s),
        Some(other) => Err(MalformedRow(format!(
            "attribute {name} is {} instead of S",
            other.type_name()
        ))),
        None => Err(MalformedRow(format!("attribute {name} is missing"))),
    }
}

/// The envelope fields of a stored event row (borrowing from it), the seq
/// its sort key says, and its stored hash text.
pub fn fields_of(item: &Item) -> Result<(EnvelopeFields<'_>, u64, &str), MalformedRow> {
    if let Some(name) = item.keys().find(|n| {
        !is_event_attribute(n.as_bytes())
            && !is_trace(
                n.as_bytes(),
                match item.get(*n) {
                    Some(AttributeValue::S(t)) => Some(t.as_bytes()),
                    _ => None,
                },
            )
    }) {
        return Err(not_an_event_attribute(name.as_bytes()));
    }
    fields_from(|name| item.get(name).map(Field::of_value))
}

/// Whether an event row has an attribute of this name. A row with any
/// other attribute was changed after the engine wrote it (rows are only
/// ever created): the chain does not cover what was added, so the row is
/// reported instead of passing as intact.
fn is_event_attribute(name: &[u8]) -> bool {
    name == PK.as_bytes() || slot_of(name).is_some()
}

/// The one attribute a row may carry beside the chained ones: the W3C
/// `traceparent` its emit kept ([`postbox_trace::ATTRIBUTE`]), as the engine
/// writes it. It says nothing the log says (only where its spans went), so
/// the chain need not cover it; any other value there marks a changed row.
fn is_trace(name: &[u8], value: Option<&[u8]>) -> bool {
    name == postbox_trace::ATTRIBUTE.as_bytes()
        && value
            .and_then(|v| std::str::from_utf8(v).ok())
            .is_some_and(|t| {
                postbox_trace::parse(t).is_some_and(|c| postbox_trace::format(&c) == t)
            })
}

fn not_an_event_attribute(name: &[u8]) -> MalformedRow {
    MalformedRow(format!(
        "attribute {} is not part of an event row",
        String::from_utf8_lossy(name)
    ))
}

/// The slot of each attribute [`fields_of`] reads, for
/// [`fields_of_encoded`]'s one pass.
fn slot_of(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"sk" => 0,
        b"seq" => 1,
        b"causation_id" => 2,
        b"actor" => 3,
        b"correlation_id" => 4,
        b"id" => 5,
        b"occurred_at" => 6,
        b"payload" => 7,
        b"tenant" => 8,
        b"type" => 9,
        b"hash" => 10,
        _ => return None,
    })
}

/// [`fields_of`] for an event row in the store's encoded form
/// ([`postbox_item::encode_item`]), read in one borrowed walk without
/// building the item: the same answer for the same row, down to the error
/// message. The walk trusts the bytes to decode (the store checks every
/// item it hands out) and checks the UTF-8 of the strings it uses only;
/// bytes that do not decode are malformed.
pub fn fields_of_encoded(bytes: &[u8]) -> Result<(EnvelopeFields<'_>, u64, &str), MalformedRow> {
    let mut slots: [Option<RawValueRef<'_>>; 11] = [None; 11];
    let mut foreign: Option<&[u8]> = None;
    visit_encoded_item_unchecked(bytes, |name, value| {
        // A repeated name: the last one wins, as when decoding.
        if let Some(i) = slot_of(name) {
            slots[i] = Some(value);
        } else if name != PK.as_bytes()
            && foreign.is_none()
            && !is_trace(
                name,
                match value {
                    RawValueRef::S(b) => Some(b),
                    RawValueRef::Value(_) => None,
                },
            )
        {
            // Names come in order, so this is the one `fields_of` names.
            foreign = Some(name);
        }
    })
    .map_err(|e| MalformedRow(e.to_string()))?;
    if let Some(name) = foreign {
        return Err(not_an_event_attribute(name));
    }
    fields_from(|name| {
        Some(match slots[slot_of(name.as_bytes())?]? {
            RawValueRef::S(b) => std::str::from_utf8(b).map_or(Field::BadText, Field::S),
            RawValueRef::Value(v) => Field::of_ref(v),
        })
    })
}

/// The checks of [`fields_of`], over any way of looking attributes up.
fn fields_from<'a>(
    get: impl Fn(&str) -> Option<Field<'a>>,
) -> Result<(EnvelopeFields<'a>, u64, &'a str), MalformedRow> {
    let sk = get_s(&get, SK)?;
    let row_seq: u64 = sk
        .parse()
        .map_err(|_| MalformedRow(format!("sort key {sk:?} is not a sequence number")))?;
    let seq = match get("seq") {
        Some(Field::N(n)) => n
            .to_i64()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| MalformedRow(format!("attribute seq {n} is not a sequence number")))?,
        _ => return Err(MalformedRow("attribute seq is missing or not N".to_owned())),
    };
    let causation_id = match get("causation_id") {
        Some(Field::S(s)) => Some(s),
        Some(Field::Null) | None => None,
        Some(_) => {
            return Err(MalformedRow(
                "attribute causation_id is neither S nor NULL".to_owned(),
            ));
        }
    };
    let fields = EnvelopeFields {
        actor: get_s(&get, "actor")?,
        causation_id,
        correlation_id: get_s(&get, "correlation_id")?,
        id: get_s(&get, "id")?,
        occurred_at: get_s(&get, "occurred_at")?,
        payload: get_s(&get, "payload")?,
        seq,
        tenant: get_s(&get, "tenant")?,
        event_type: get_s(&get, "type")?,
    };
    Ok((fields, row_seq, get_s(&get, "hash")?))
}

/// A stored event row as an [`Envelope`](crate::envelope::Envelope) and its
/// hash, e.g. for a worker turning a stream image back into an event.
pub fn envelope_of(item: &Item) -> Result<(crate::envelope::Envelope, String), MalformedRow> {
    let (f, _, hash) = fields_of(item)?;
    let payload = crate::json::parse(f.payload).map_err(|e| MalformedRow(e.to_string()))?;
    Ok((
        crate::envelope::Envelope {
            id: f.id.to_owned(),
            event_type: f.event_type.to_owned(),
            tenant: f.tenant.to_owned(),
            seq: f.seq,
            correlation_id: f.correlation_id.to_owned(),
            causation_id: f.causation_id.map(str::to_owned),
            actor: f.actor.to_owned(),
            occurred_at: f.occurred_at.to_owned(),
            payload,
            trace: match item.get(postbox_trace::ATTRIBUTE) {
                Some(AttributeValue::S(t)) => Some(t.clone()),
                _ => None,
            },
        },
        hash.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::item_size;

    /// Good event rows: with and without a cause, escapes, non-ASCII.
    fn good_rows() -> Vec<Item> {
        [
            (1, None, r#"{"a":"x"}"#),
            (
                7,
                Some("01JDQ4Z8Y3"),
                r#"{"b":[1,2.5,"\u0001é\n"],"c":null}"#,
            ),
            (12, Some(""), "{}"),
        ]
        .into_iter()
        .map(|(seq, causation, payload)| {
            let f = EnvelopeFields {
                actor: "user:é\"q\"",
                causation_id: causation,
                correlation_id: "corr",
                id: "01JDQ4Z8Y3V5X7W9T1R3P5N7M9",
                occurred_at: "2026-11-29T19:20:08.123Z",
                payload,
                seq,
                tenant: "t-1",
                event_type: "ORDER_PLACED",
            };
            event_item(&f, "ab".repeat(32))
        })
        .collect()
    }

    /// Every attribute [`fields_of`] reads (and one it does not) removed,
    /// or replaced by a value of each type and a few awkward values.
    fn tampered_rows(row: &Item) -> Vec<Item> {
        let values = [
            AttributeValue::s(""),
            AttributeValue::s("x"),
            AttributeValue::s("00000000000000000007"),
            AttributeValue::s("-1"),
            AttributeValue::n(7),
            AttributeValue::n(-7),
            AttributeValue::N("1.5".parse().unwrap()),
            AttributeValue::N("1E+30".parse().unwrap()),
            AttributeValue::Null,
            AttributeValue::Bool(true),
            AttributeValue::B(vec![1, 2]),
            AttributeValue::L(vec![AttributeValue::s("x")]),
            AttributeValue::M(Item::from([("seq".to_owned(), AttributeValue::n(1))])),
            AttributeValue::Ss(["a".to_owned()].into()),
            AttributeValue::Ns([Number::from(1)].into()),
            AttributeValue::Bs([vec![1]].into()),
            AttributeValue::s(TRACE),
            AttributeValue::s(TRACE.to_uppercase()),
        ];
        let mut out = Vec::new();
        let names = ROW_NAMES
            .iter()
            .copied()
            .chain([PK, "extra", postbox_trace::ATTRIBUTE]);
        for name in names {
            let mut gone = row.clone();
            gone.remove(name);
            out.push(gone);
            for v in &values {
                let mut changed = row.clone();
                changed.insert(name.to_owned(), v.clone());
                out.push(changed);
            }
        }
        out
    }

    const ROW_NAMES: [&str; 11] = [
        SK,
        "seq",
        "causation_id",
        "actor",
        "correlation_id",
        "id",
        "occurred_at",
        "payload",
        "tenant",
        "type",
        "hash",
    ];

    #[test]
    fn encoded_rows_read_as_built_rows_good_and_tampered() {
        let mut rows = 0;
        let mut refused = 0;
        for good in good_rows() {
            for row in std::iter::once(good.clone()).chain(tampered_rows(&good)) {
                let bytes = postbox_item::encode_item(&row);
                assert_eq!(fields_of_encoded(&bytes), fields_of(&row), "{row:?}");
                refused += fields_of(&row).is_err() as usize;
                rows += 1;
            }
            // Every byte of the stored form changed: whatever still decodes
            // reads the same both ways. What does not decode never reaches
            // this reader (the store refuses it, as Query does: see the
            // store's query_encoded tests); reading it must not panic.
            let bytes = postbox_item::encode_item(&good);
            for at in 0..bytes.len() {
                for flip in [0x01, 0x20, 0x80, 0xff] {
                    let mut damaged = bytes.clone();
                    damaged[at] ^= flip;
                    match postbox_item::decode_item(&damaged) {
                        Ok(item) => {
                            assert_eq!(fields_of_encoded(&damaged), fields_of(&item), "byte {at}")
                        }
                        Err(_) => {
                            let _ = fields_of_encoded(&damaged);
                        }
                    }
                    rows += 1;
                }
            }
        }
        assert!(
            rows > 2000 && refused > 400,
            "{rows} rows, {refused} refused"
        );
    }

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_row_may_carry_its_traceparent_and_nothing_else_beside_the_chain() {
        let mut row = good_rows()[0].clone();
        row.insert("trace".into(), AttributeValue::s(TRACE));
        let (envelope, _) = envelope_of(&row).unwrap();
        assert_eq!(envelope.trace.as_deref(), Some(TRACE));
        assert!(fields_of_encoded(&postbox_item::encode_item(&row)).is_ok());
        for bad in [
            AttributeValue::s("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"),
            AttributeValue::s(TRACE.to_uppercase()),
            AttributeValue::n(1),
        ] {
            row.insert("trace".into(), bad);
            let e = fields_of(&row).unwrap_err();
            assert_eq!(e.0, "attribute trace is not part of an event row");
            assert_eq!(fields_of_encoded(&postbox_item::encode_item(&row)), Err(e));
        }
    }

    #[test]
    fn a_repeated_name_reads_as_decoding_keeps_it() {
        // Stored forms never repeat a name, but damaged bytes can: the last
        // one is the one decoding keeps, so it is the one read.
        let row = &good_rows()[0];
        let mut bytes = postbox_item::encode_item(row);
        // Append a second "actor" and bump the attribute count.
        bytes[0] += 1;
        bytes.extend_from_slice(&[5, b'a', b'c', b't', b'o', b'r', 0, 2, b'z', b'z']);
        let decoded = postbox_item::decode_item(&bytes).unwrap();
        assert_eq!(decoded["actor"].as_s(), Some("zz"));
        assert_eq!(fields_of_encoded(&bytes), fields_of(&decoded));
        assert_eq!(fields_of_encoded(&bytes).unwrap().0.actor, "zz");
    }

    #[test]
    fn event_item_size_is_the_size_of_the_built_row() {
        for (seq, causation) in [
            (1, None),
            (u64::MAX / 2, Some("01JDQ4Z8Y3")),
            (42, Some("")),
        ] {
            let f = EnvelopeFields {
                actor: "user:é",
                causation_id: causation,
                correlation_id: "corr",
                id: "01JDQ4Z8Y3V5X7W9T1R3P5N7M9",
                occurred_at: "2026-11-29T19:20:08.123Z",
                payload: r#"{"a":"x"}"#,
                seq,
                tenant: "t-1",
                event_type: "ORDER_PLACED",
            };
            let row = event_item(&f, "0".repeat(64));
            assert_eq!(event_item_size(&f), item_size(&row), "seq {seq}");
        }
    }
}

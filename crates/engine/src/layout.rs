//! The events table: its key schema and the rows the engine writes (SPEC §3).
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

use postbox_item::{AttributeValue, Item};
use postbox_store::api::{
    AttributeDefinition, CreateTableInput, KeySchemaElement, KeyType, ScalarType,
    StreamSpecification, StreamViewType,
};

use crate::chain::EnvelopeFields;

/// Partition key attribute.
pub const PK: &str = "pk";
/// Sort key attribute.
pub const SK: &str = "sk";
/// Sort key of head rows.
pub const HEAD_SK: &str = "HEAD";
/// Sort key of verified-checkpoint rows.
pub const VERIFIED_SK: &str = "VERIFIED";

/// pk of a tenant's head row.
pub fn head_pk(tenant: &str) -> String {
    format!("TENANT#{tenant}#HEAD")
}
/// pk of a tenant's event rows.
pub fn event_pk(tenant: &str) -> String {
    format!("TENANT#{tenant}#EVENT")
}
/// pk of a tenant's verified checkpoint.
pub fn verified_pk(tenant: &str) -> String {
    format!("TENANT#{tenant}#VERIFIED")
}
/// The sort key of event `seq`.
pub fn seq_sk(seq: u64) -> String {
    format!("{seq:020}")
}

/// The tenant of a head-row pk.
pub fn tenant_of_head_pk(pk: &str) -> Option<&str> {
    pk.strip_prefix("TENANT#")?.strip_suffix("#HEAD")
}

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
    s(PK, "TENANT#".len() + f.tenant.len() + "#EVENT".len())
        + s(SK, seq_sk(f.seq).len())
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

fn get_s<'a>(item: &'a Item, name: &str) -> Result<&'a str, MalformedRow> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Ok(s),
        Some(other) => Err(MalformedRow(format!(
            "attribute {name} is {} instead of S",
            other.attribute_type().as_str()
        ))),
        None => Err(MalformedRow(format!("attribute {name} is missing"))),
    }
}

/// The envelope fields of a stored event row (borrowing from it), the seq
/// its sort key says, and its stored hash text.
pub fn fields_of(item: &Item) -> Result<(EnvelopeFields<'_>, u64, &str), MalformedRow> {
    let sk = get_s(item, SK)?;
    let row_seq: u64 = sk
        .parse()
        .map_err(|_| MalformedRow(format!("sort key {sk:?} is not a sequence number")))?;
    let seq = match item.get("seq") {
        Some(AttributeValue::N(n)) => n
            .to_i64()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| MalformedRow(format!("attribute seq {n} is not a sequence number")))?,
        _ => return Err(MalformedRow("attribute seq is missing or not N".to_owned())),
    };
    let causation_id = match item.get("causation_id") {
        Some(AttributeValue::S(s)) => Some(s.as_str()),
        Some(AttributeValue::Null) | None => None,
        Some(_) => {
            return Err(MalformedRow(
                "attribute causation_id is neither S nor NULL".to_owned(),
            ));
        }
    };
    let fields = EnvelopeFields {
        actor: get_s(item, "actor")?,
        causation_id,
        correlation_id: get_s(item, "correlation_id")?,
        id: get_s(item, "id")?,
        occurred_at: get_s(item, "occurred_at")?,
        payload: get_s(item, "payload")?,
        seq,
        tenant: get_s(item, "tenant")?,
        event_type: get_s(item, "type")?,
    };
    Ok((fields, row_seq, get_s(item, "hash")?))
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
        },
        hash.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::item_size;

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

//! Poison messages: bodies that cannot be turned back into an event.
//!
//! Such a message can never succeed, and in a FIFO queue it would block its
//! whole group (its tenant) until the queue's redrive moved it. It is
//! recorded in the global `POISON` partition of the inbox table, with the
//! body and the reason, and deleted at once.

use postbox_engine::Envelope;
use postbox_item::{AttributeValue, Item, item_from_json, scalar_item_from_json_text};

/// pk of the global poison partition.
pub const POISON_PK: &str = "POISON";

/// Largest body kept in a poison row; the rest is cut (a row has 400 KB).
pub const MAX_KEPT_BODY: usize = 256 * 1024;

/// Turns a message body (the raw NewImage of an event row, in DynamoDB
/// JSON, as the default events pipe sends it) back into an envelope.
pub fn parse_body(body: &str) -> Result<Envelope, String> {
    // An event row holds S, N and NULL values only; anything else, and
    // every error, is read again the long way for its answer.
    let image = match scalar_item_from_json_text(body) {
        Some(image) => image,
        None => {
            let json: serde_json::Value =
                serde_json::from_str(body).map_err(|e| format!("body is not JSON: {e}"))?;
            item_from_json(&json).map_err(|e| format!("body is not a DynamoDB JSON item: {e}"))?
        }
    };
    let (envelope, _hash) = postbox_engine::layout::envelope_of(&image)
        .map_err(|e| format!("body is not an event row: {}", e.0))?;
    Ok(envelope)
}

/// The poison row of message `message_id` received at `now_ms`.
pub fn poison_item(queue: &str, message_id: &str, body: &str, reason: &str, now_ms: u64) -> Item {
    let mut end = body.len().min(MAX_KEPT_BODY);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    Item::from([
        ("pk".to_owned(), AttributeValue::s(POISON_PK)),
        (
            "sk".to_owned(),
            AttributeValue::S(format!("{now_ms:020}#{message_id}")),
        ),
        ("queue".to_owned(), AttributeValue::s(queue)),
        ("message_id".to_owned(), AttributeValue::s(message_id)),
        ("body".to_owned(), AttributeValue::s(&body[..end])),
        ("reason".to_owned(), AttributeValue::s(reason)),
        ("received_at".to_owned(), AttributeValue::n(now_ms as i64)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_with_the_reason() {
        assert!(parse_body("not json").unwrap_err().contains("not JSON"));
        assert!(parse_body("[1]").unwrap_err().contains("DynamoDB JSON"));
        assert!(
            parse_body(r#"{"pk": {"S": "x"}}"#)
                .unwrap_err()
                .contains("not an event row")
        );
    }

    #[test]
    fn an_event_row_is_read_straight_from_its_text() {
        // As the relay's events pipe sends it: the row's NewImage, with no
        // cause (a NULL) and with one.
        for causation_id in [None, Some("01JDQ4Z8Y3")] {
            let f = postbox_engine::chain::EnvelopeFields {
                actor: "user:1",
                causation_id,
                correlation_id: "corr",
                id: "01JDQ4Z8Y3V5X7W9T1R3P5N7M9",
                occurred_at: "2026-11-29T19:20:08.123Z",
                payload: r#"{"n":1}"#,
                seq: 7,
                tenant: "t-1",
                event_type: "ORDER_PLACED",
            };
            let row = postbox_engine::layout::event_item(&f, "ab".repeat(32));
            let body = postbox_item::item_to_json(&row).to_string();
            assert_eq!(scalar_item_from_json_text(&body), Some(row), "{body}");
            assert_eq!(
                parse_body(&body).unwrap().causation_id.as_deref(),
                causation_id
            );
        }
    }

    #[test]
    fn long_bodies_are_cut_on_a_char_boundary() {
        let body = "é".repeat(MAX_KEPT_BODY);
        let item = poison_item("q", "m", &body, "r", 5);
        assert!(item["body"].as_s().unwrap().len() <= MAX_KEPT_BODY);
    }
}

//! A received message as the worker carries it: its body parsed once, into
//! the event it holds or the reason it is poison, beside what settling the
//! message needs. The rest of the message (attributes, and the body text of
//! an event) is dropped at the parse.

use postbox_engine::Envelope;
use postbox_queue::ReceivedMessage;

use super::settle::Settle;
use crate::poison;

/// A received message, its body parsed.
pub(super) struct Received {
    /// What deleting the message or changing its visibility needs.
    pub(super) settle: Settle,
    /// What the body turned out to be.
    pub(super) body: Body,
}

/// What a message's body turned out to be.
#[derive(Debug)]
pub(super) enum Body {
    /// An event row's NewImage, read back into its envelope.
    Event(Envelope),
    /// No event: the body as received, kept for the poison record, and why.
    Poison { text: String, reason: String },
}

impl Received {
    /// Parses `m`'s body; the one place a body is parsed.
    pub(super) fn parse(m: ReceivedMessage) -> Received {
        let body = match poison::parse_body(&m.body) {
            Ok(envelope) => Body::Event(envelope),
            Err(reason) => Body::Poison {
                text: m.body,
                reason,
            },
        };
        Received {
            settle: Settle {
                message_id: m.message_id,
                receipt_handle: m.receipt_handle,
            },
            body,
        }
    }

    /// The event, unless the body is poison.
    pub(super) fn envelope(&self) -> Option<&Envelope> {
        match &self.body {
            Body::Event(e) => Some(e),
            Body::Poison { .. } => None,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A message as the events pipe sends event `seq` of `tenant`: the
    /// row's NewImage in DynamoDB JSON, group = tenant.
    pub(in crate::worker) fn event(tenant: &str, seq: u64, event_type: &str) -> ReceivedMessage {
        let id = format!("01JDQ4Z8Y3V5X7W9T1R3P5N{seq:03}");
        let f = postbox_engine::chain::EnvelopeFields {
            actor: "user:1",
            causation_id: None,
            correlation_id: "corr",
            id: &id,
            occurred_at: "2026-11-29T19:20:08.123Z",
            payload: r#"{"n":1}"#,
            seq,
            tenant,
            event_type,
        };
        let row = postbox_engine::layout::event_item(&f, "ab".repeat(32));
        message(tenant, &id, postbox_item::item_to_json(&row).to_string())
    }

    /// A message of group `group` with `body` as it is.
    pub(in crate::worker) fn message(group: &str, id: &str, body: String) -> ReceivedMessage {
        ReceivedMessage {
            message_id: format!("m-{id}"),
            receipt_handle: format!("r-{id}"),
            body,
            attributes: BTreeMap::new(),
            system: BTreeMap::from([("MessageGroupId".to_owned(), group.to_owned())]),
        }
    }

    #[test]
    fn an_event_body_becomes_its_envelope_and_the_message_keeps_what_settling_needs() {
        let r = Received::parse(event("acme", 7, "ORDER_PLACED"));
        let e = r.envelope().expect("an event");
        assert_eq!(
            (e.tenant.as_str(), e.seq, e.event_type.as_str()),
            ("acme", 7, "ORDER_PLACED")
        );
        assert_eq!(e.payload, serde_json::json!({"n": 1}));
        assert_eq!(r.settle.message_id, "m-01JDQ4Z8Y3V5X7W9T1R3P5N007");
        assert_eq!(r.settle.receipt_handle, "r-01JDQ4Z8Y3V5X7W9T1R3P5N007");
    }

    #[test]
    fn a_body_that_is_no_event_is_poison_with_its_text_kept_verbatim() {
        let r = Received::parse(message("acme", "x", "{not an event".into()));
        assert!(r.envelope().is_none());
        match &r.body {
            Body::Poison { text, reason } => {
                assert_eq!(text, "{not an event");
                assert!(reason.contains("not JSON"), "{reason}");
            }
            Body::Event(e) => panic!("parsed as an event: {e:?}"),
        }
        // A JSON item that is no event row is poison too.
        let r = Received::parse(message("acme", "y", r#"{"pk": {"S": "x"}}"#.into()));
        assert!(
            matches!(&r.body, Body::Poison { reason, .. } if reason.contains("not an event row"))
        );
    }
}

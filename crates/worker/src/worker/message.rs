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

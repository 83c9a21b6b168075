//! Which of a group's messages may be claimed together.

use postbox_engine::Envelope;
use postbox_queue::ReceivedMessage;

use crate::poison;

/// The envelopes of a group's messages if the batched path may take it:
/// every body an event, one tenant, seqs contiguous and ascending (so an
/// earlier event of the batch is the predecessor of the next). Anything
/// else (poison, a gap, a replayed duplicate) goes one by one.
pub(super) fn batchable(messages: &[ReceivedMessage]) -> Option<Vec<Envelope>> {
    let envelopes: Vec<Envelope> = messages
        .iter()
        .map(|m| poison::parse_body(&m.body).ok())
        .collect::<Option<_>>()?;
    let ordered = envelopes
        .windows(2)
        .all(|w| w[0].tenant == w[1].tenant && w[0].seq + 1 == w[1].seq);
    ordered.then_some(envelopes)
}

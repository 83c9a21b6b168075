//! A batch's messages by group, and which of a group's messages may be
//! claimed together.

use postbox_engine::Envelope;
use postbox_queue::ReceivedMessage;

use super::message::Received;

/// A batch's messages by message group (the tenant, as the events pipe
/// sends them): groups in the order of their first message, each group's
/// messages in the order received.
pub(super) fn by_group(messages: Vec<ReceivedMessage>) -> Vec<Vec<ReceivedMessage>> {
    let mut groups: Vec<(String, Vec<ReceivedMessage>)> = Vec::new();
    for m in messages {
        let group = m.system.get("MessageGroupId").cloned().unwrap_or_default();
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, ms)) => ms.push(m),
            None => groups.push((group, vec![m])),
        }
    }
    groups.into_iter().map(|(_, ms)| ms).collect()
}

/// The envelopes of a group's messages if the batched path may take it:
/// every body an event, one tenant, seqs contiguous and ascending (so an
/// earlier event of the batch is the predecessor of the next). Anything
/// else (poison, a gap, a replayed duplicate) goes one by one.
pub(super) fn batchable(group: &[Received]) -> Option<Vec<&Envelope>> {
    let envelopes: Vec<&Envelope> = group
        .iter()
        .map(Received::envelope)
        .collect::<Option<_>>()?;
    let ordered = envelopes
        .windows(2)
        .all(|w| w[0].tenant == w[1].tenant && w[0].seq + 1 == w[1].seq);
    ordered.then_some(envelopes)
}

//! Batching: a batch's messages split by message group, and a group cut
//! into chunks whose claims are taken together, with the ordering decision
//! that comes with it: which (event, subscription) pairs must check their
//! predecessor and which follow one earlier in the same chunk.

use std::ops::Range;

use postbox_engine::glob::Glob;
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

/// Consecutive messages of a group whose claims are taken together.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Chunk {
    /// The messages, by their index in the group.
    pub(super) messages: Range<usize>,
    /// The chunk's (event, subscription) pairs, by message then by
    /// subscription.
    pub(super) pairs: Vec<Pair>,
}

/// One (event, subscription) of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pair {
    /// The message, by its index in the group.
    pub(super) message: usize,
    /// The subscription, by its index among the worker's.
    pub(super) subscription: usize,
    /// Whether it must wait for the subscription's previous matching event:
    /// not when that event is earlier in the same chunk (a chunk's seqs
    /// are contiguous, so it is the predecessor, and it settles first or
    /// the group stops before this one).
    pub(super) check_order: bool,
}

/// How a group is taken: in one chunk when `batch` is on and the group
/// [`qualifies`], else a chunk per message, a batch of one. `globs` are
/// the worker's subscriptions, by index.
pub(super) fn chunks(group: &[Received], globs: &[&Glob], batch: bool) -> Vec<Chunk> {
    if batch && qualifies(group) {
        vec![chunk(group, 0..group.len(), globs)]
    } else {
        (0..group.len())
            .map(|i| chunk(group, i..i + 1, globs))
            .collect()
    }
}

/// Whether a group's messages may be claimed together: every body an
/// event, one tenant, seqs contiguous and ascending (so an earlier event of
/// the group is the predecessor of the next). Not so with a poison body, a
/// gap, or a replayed duplicate.
pub(super) fn qualifies(group: &[Received]) -> bool {
    let Some(envelopes) = group
        .iter()
        .map(Received::envelope)
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    envelopes
        .windows(2)
        .all(|w| w[0].tenant == w[1].tenant && w[0].seq + 1 == w[1].seq)
}

/// The chunk of `messages`: each event paired with every subscription
/// that matches its type; poison pairs with none.
fn chunk(group: &[Received], messages: Range<usize>, globs: &[&Glob]) -> Chunk {
    let mut pairs = Vec::new();
    let mut matched_earlier = vec![false; globs.len()];
    for i in messages.clone() {
        let Some(envelope) = group[i].envelope() else {
            continue;
        };
        for (s, glob) in globs.iter().enumerate() {
            if glob.matches(&envelope.event_type) {
                pairs.push(Pair {
                    message: i,
                    subscription: s,
                    check_order: !matched_earlier[s],
                });
                matched_earlier[s] = true;
            }
        }
    }
    Chunk { messages, pairs }
}

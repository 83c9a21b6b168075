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

#[cfg(test)]
mod tests {
    use super::super::message::tests::{event, message};
    use super::*;

    fn parsed(messages: Vec<ReceivedMessage>) -> Vec<Received> {
        messages.into_iter().map(Received::parse).collect()
    }

    /// `(message, subscription, check_order)` of each pair of `chunk`.
    fn pairs(chunk: &Chunk) -> Vec<(usize, usize, bool)> {
        chunk
            .pairs
            .iter()
            .map(|p| (p.message, p.subscription, p.check_order))
            .collect()
    }

    #[test]
    fn groups_keep_the_order_of_their_first_message_and_their_own_order() {
        let batch = vec![
            event("acme", 1, "ORDER_PLACED"),
            event("globex", 1, "ORDER_PLACED"),
            event("acme", 2, "ORDER_PLACED"),
            message("", "a", "{}".into()),
            event("globex", 2, "ORDER_PLACED"),
            event("acme", 3, "ORDER_PLACED"),
        ];
        let groups: Vec<Vec<String>> = by_group(batch)
            .into_iter()
            .map(|g| g.into_iter().map(|m| m.message_id).collect())
            .collect();
        let id = |seq: u64| format!("m-01JDQ4Z8Y3V5X7W9T1R3P5N{seq:03}");
        assert_eq!(
            groups,
            vec![
                vec![id(1), id(2), id(3)],
                vec![id(1), id(2)],
                vec!["m-a".to_owned()],
            ]
        );
    }

    #[test]
    fn only_contiguous_events_of_one_tenant_qualify() {
        let q = |ms: Vec<ReceivedMessage>| qualifies(&parsed(ms));
        let e = |tenant, seq| event(tenant, seq, "ORDER_PLACED");
        assert!(q(vec![e("acme", 4)]), "one event");
        assert!(q(vec![e("acme", 4), e("acme", 5), e("acme", 6)]));
        assert!(!q(vec![e("acme", 4), e("acme", 6)]), "a gap");
        assert!(!q(vec![e("acme", 4), e("acme", 4)]), "a duplicate");
        assert!(!q(vec![e("acme", 5), e("acme", 4)]), "out of order");
        assert!(!q(vec![e("acme", 1), e("globex", 2)]), "two tenants");
        let poison = message("acme", "p", "junk".into());
        assert!(!q(vec![e("acme", 4), poison]), "a poison body");
    }

    #[test]
    fn a_qualifying_group_is_one_chunk_where_only_each_subscriptions_first_event_checks_its_predecessor()
     {
        let (ship, mail) = (Glob::new("ORDER_*"), Glob::new("*"));
        let group = parsed(vec![
            event("acme", 3, "ORDER_PLACED"),
            event("acme", 4, "PAYMENT_COMPLETED"),
            event("acme", 5, "ORDER_PLACED"),
        ]);
        let chunks = chunks(&group, &[&ship, &mail], true);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].messages, 0..3);
        assert_eq!(
            pairs(&chunks[0]),
            vec![
                (0, 0, true),
                (0, 1, true),
                // ship does not match a payment; mail follows seq 3.
                (1, 1, false),
                // ship's predecessor in the log is seq 3, in this chunk.
                (2, 0, false),
                (2, 1, false),
            ]
        );
    }

    #[test]
    fn without_batching_each_message_is_a_chunk_whose_pairs_all_check_their_predecessor() {
        let ship = Glob::new("ORDER_*");
        let group = parsed(vec![
            event("acme", 3, "ORDER_PLACED"),
            event("acme", 4, "ORDER_PLACED"),
        ]);
        let chunks = chunks(&group, &[&ship], false);
        let got: Vec<_> = chunks
            .iter()
            .map(|c| (c.messages.clone(), pairs(c)))
            .collect();
        assert_eq!(
            got,
            vec![(0..1, vec![(0, 0, true)]), (1..2, vec![(1, 0, true)])]
        );
    }

    #[test]
    fn a_group_with_poison_goes_in_chunks_of_one_and_poison_pairs_with_nobody() {
        let ship = Glob::new("ORDER_*");
        let group = parsed(vec![
            message("acme", "p", "{not an event".into()),
            event("acme", 1, "ORDER_PLACED"),
            event("acme", 2, "PAYMENT_COMPLETED"),
        ]);
        let chunks = chunks(&group, &[&ship], true);
        let got: Vec<_> = chunks
            .iter()
            .map(|c| (c.messages.clone(), pairs(c)))
            .collect();
        assert_eq!(
            got,
            vec![
                (0..1, vec![]),
                (1..2, vec![(1, 0, true)]),
                // Matched by no subscription: delivered to nobody.
                (2..3, vec![]),
            ]
        );
    }
}

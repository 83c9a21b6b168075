//! The core's rules, checked over values with a hand-moved clock.

use std::sync::Arc;

use super::*;

const VT: u64 = 30_000;

fn meta(group: Option<&str>, sent_at: u64, delay_ms: u64) -> MessageMeta {
    MessageMeta {
        group: group.map(Arc::from),
        sent_at,
        size: 1,
        state: MessageState {
            visible_at: sent_at + delay_ms,
            ..MessageState::default()
        },
    }
}

/// A queue with messages sent at time 0: `(group, count)` per group, in order.
fn fifo_with(groups: &[(&str, usize)]) -> QueueCore {
    let mut q = QueueCore::new(true, 1);
    for (g, n) in groups {
        for _ in 0..*n {
            let seq = q.take_seq();
            q.insert(seq, meta(Some(g), 0, 0));
        }
    }
    q
}

fn seqs(r: &Receive) -> Vec<u64> {
    r.received.iter().map(|(s, _)| *s).collect()
}

fn receipt(seq: u64, token: u64) -> Receipt {
    Receipt {
        queue_id: 1,
        seq,
        token,
    }
}

#[test]
fn fifo_hands_out_a_group_in_order_and_blocks_it_while_in_flight() {
    let mut q = fifo_with(&[("a", 3)]);
    assert_eq!(seqs(&q.receive(0, 1, VT, 1, None)), vec![1]);
    // a2 waits behind a1 in flight.
    assert!(q.receive(0, 10, VT, 2, None).received.is_empty());
    assert_eq!(q.delete(&receipt(1, 1), 0).unwrap(), Deleted::Removed(1));
    assert_eq!(seqs(&q.receive(0, 10, VT, 3, None)), vec![2, 3]);
}

#[test]
fn fifo_other_groups_proceed_while_one_is_blocked() {
    let mut q = fifo_with(&[("a", 2), ("b", 2)]);
    assert_eq!(seqs(&q.receive(0, 1, VT, 1, None)), vec![1]);
    assert_eq!(seqs(&q.receive(0, 10, VT, 2, None)), vec![3, 4]);
    assert!(q.receive(0, 10, VT, 3, None).received.is_empty());
}

#[test]
fn fifo_redelivers_in_order_after_the_visibility_timeout() {
    let mut q = fifo_with(&[("a", 2)]);
    assert_eq!(seqs(&q.receive(0, 10, VT, 1, None)), vec![1, 2]);
    assert!(q.receive(VT - 1, 10, VT, 2, None).received.is_empty());
    let again = q.receive(VT, 10, VT, 3, None);
    assert_eq!(seqs(&again), vec![1, 2]);
    assert_eq!(again.received[0].1.receive_count, 2);
    assert_eq!(again.received[0].1.first_receive_at, 0);
}

#[test]
fn fifo_group_stays_blocked_by_a_later_in_flight_message() {
    let mut q = fifo_with(&[("a", 2)]);
    q.receive(0, 10, VT, 1, None);
    // a1 made visible again while a2 is still in flight: nothing is handed out.
    q.change_visibility(&receipt(1, 1), 0, 0).unwrap();
    assert!(q.receive(0, 10, VT, 2, None).received.is_empty());
    q.delete(&receipt(2, 1), 0).unwrap();
    assert_eq!(seqs(&q.receive(0, 10, VT, 3, None)), vec![1]);
}

#[test]
fn zero_visibility_does_not_hand_a_message_twice_in_one_receive() {
    let mut q = QueueCore::new(false, 1);
    let seq = q.take_seq();
    q.insert(seq, meta(None, 0, 0));
    assert_eq!(seqs(&q.receive(0, 10, 0, 1, None)), vec![1]);
    assert_eq!(seqs(&q.receive(0, 10, 0, 2, None)), vec![1]);
    let mut f = fifo_with(&[("a", 1)]);
    assert_eq!(seqs(&f.receive(0, 10, 0, 1, None)), vec![1]);
}

#[test]
fn standard_delay_and_counts() {
    let mut q = QueueCore::new(false, 1);
    for delay in [0, 0, 60_000] {
        let seq = q.take_seq();
        q.insert(seq, meta(None, 0, delay));
    }
    q.receive(0, 1, VT, 1, None);
    let c = q.counts(0, u64::MAX);
    assert_eq!((c.visible, c.in_flight, c.delayed), (1, 1, 1));
    assert_eq!(q.next_ready_after(0), Some(VT));
    assert_eq!(seqs(&q.receive(60_000, 10, VT, 2, None)).len(), 3);
}

#[test]
fn stale_handles() {
    let mut q = QueueCore::new(false, 1);
    let seq = q.take_seq();
    q.insert(seq, meta(None, 0, 0));
    q.receive(0, 1, 0, 7, None);
    q.receive(0, 1, VT, 8, None);
    // The first receive's handle no longer deletes: success, message kept.
    assert_eq!(q.delete(&receipt(1, 7), 0).unwrap(), Deleted::Nothing);
    assert_eq!(q.len(), 1);
    assert_eq!(
        q.change_visibility(&receipt(1, 7), 0, 0),
        Err(QueueError::MessageNotInflight)
    );
    assert_eq!(q.delete(&receipt(1, 8), 0).unwrap(), Deleted::Removed(1));
    assert_eq!(q.delete(&receipt(1, 8), 0).unwrap(), Deleted::Nothing);
}

#[test]
fn fifo_handle_expires_with_the_visibility_timeout() {
    let mut q = fifo_with(&[("a", 1)]);
    q.receive(0, 1, VT, 1, None);
    assert!(matches!(
        q.delete(&receipt(1, 1), VT),
        Err(QueueError::InvalidParameterValue(_))
    ));
    assert_eq!(
        q.delete(&receipt(1, 1), VT - 1).unwrap(),
        Deleted::Removed(1)
    );
}

#[test]
fn change_visibility_needs_a_message_in_flight() {
    let mut q = QueueCore::new(false, 1);
    let seq = q.take_seq();
    q.insert(seq, meta(None, 0, 0));
    q.receive(0, 1, VT, 1, None);
    let s = q.change_visibility(&receipt(1, 1), 10_000, 5_000).unwrap();
    assert_eq!(s.visible_at, 15_000);
    assert!(q.receive(14_999, 1, VT, 2, None).received.is_empty());
    assert_eq!(seqs(&q.receive(15_000, 1, VT, 3, None)), vec![1]);
    // Received again: the first handle no longer acts.
    assert_eq!(
        q.change_visibility(&receipt(1, 1), 15_000, 0),
        Err(QueueError::MessageNotInflight)
    );
    // The latest handle still acts after its timeout ran out.
    assert!(q.change_visibility(&receipt(1, 3), 50_000, 10_000).is_ok());
    assert!(q.receive(55_000, 1, VT, 4, None).received.is_empty());
}

#[test]
fn visibility_extends_to_twelve_hours_after_the_receive_and_no_further() {
    const HOUR: u64 = 3_600_000;
    let mut q = QueueCore::new(false, 1);
    let seq = q.take_seq();
    q.insert(seq, meta(None, 0, 0));
    let received = 5_000;
    // Hidden for two hours: still in flight when extended an hour later.
    q.receive(received, 1, 2 * HOUR, 1, None);
    // An hour later, 11 hours more ends exactly 12 hours after the receive.
    let s = q
        .change_visibility(&receipt(1, 1), received + HOUR, 11 * HOUR)
        .unwrap();
    assert_eq!(s.visible_at, received + 12 * HOUR);
    // A second further is refused, as SQS refuses it, and changes nothing.
    let refused = q.change_visibility(&receipt(1, 1), received + HOUR + 1_000, 11 * HOUR);
    match refused {
        Err(QueueError::InvalidParameterValue(m)) => assert_eq!(
            m,
            "Value 39600 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(q.get(1).unwrap().state.visible_at, received + 12 * HOUR);
    // The next receive starts a new 12 hours.
    let again = received + 12 * HOUR;
    assert_eq!(seqs(&q.receive(again, 1, 2 * HOUR, 2, None)), vec![1]);
    assert!(
        q.change_visibility(&receipt(1, 2), again + HOUR, 11 * HOUR)
            .is_ok()
    );
    // Past its 12 hours, the latest handle may still make it visible now.
    assert!(
        q.change_visibility(&receipt(1, 2), again + 13 * HOUR, 0)
            .is_ok()
    );
    assert!(
        q.change_visibility(&receipt(1, 2), again + 13 * HOUR, 1_000)
            .is_err()
    );
}

#[test]
fn a_message_loaded_in_flight_has_no_receive_time_to_bound_it() {
    let mut q = QueueCore::new(false, 1);
    let seq = q.take_seq();
    // As the file gives it back: received once, the receive time not kept.
    let mut m = meta(None, 0, 0);
    m.state = MessageState {
        visible_at: VT,
        receive_count: 1,
        first_receive_at: 0,
        token: 7,
        received_at: 0,
    };
    q.insert(seq, m);
    assert!(
        q.change_visibility(&receipt(1, 7), 20 * 3_600_000, 43_200_000)
            .is_ok()
    );
}

#[test]
fn redrive_after_max_receive_count() {
    let mut q = fifo_with(&[("a", 2)]);
    for token in 1..=2 {
        let r = q.receive(0, 1, 0, token, Some(2));
        assert_eq!(seqs(&r), vec![1]);
    }
    // The third receive moves a1 out and hands out a2.
    let r = q.receive(0, 1, 0, 3, Some(2));
    assert_eq!(
        r.dead_lettered.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(r.dead_lettered[0].1.state.receive_count, 2);
    assert_eq!(seqs(&r), vec![2]);
}

#[test]
fn retention_expires_oldest_first() {
    let mut q = QueueCore::new(false, 1);
    for sent in [0, 30_000] {
        let seq = q.take_seq();
        q.insert(seq, meta(None, sent, 0));
    }
    assert!(!q.has_expired(59_999, 60_000));
    assert_eq!(q.expire(61_000, 60_000, 10), vec![1]);
    assert_eq!(q.counts(61_000, 60_000).visible, 1);
    assert_eq!(q.counts(61_000, 60_000).oldest_sent_at, Some(30_000));
}

#[test]
fn dedup_window() {
    let mut d = DedupTable::default();
    let x = dedup_key(false, "g", "x");
    d.insert(
        x,
        DedupEntry {
            message_id: 7,
            seq: 4,
            expires_at: 300_000,
        },
    );
    assert_eq!(d.get(x, 299_999).unwrap().message_id, 7);
    assert!(d.get(x, 300_000).is_none());
    // Remembered again after it expired: the old expiry does not forget it.
    d.insert(
        x,
        DedupEntry {
            message_id: 8,
            seq: 5,
            expires_at: 600_000,
        },
    );
    // The first remembrance is forgotten in the file, the entry stays.
    assert_eq!(d.expire(300_000, 10), vec![(300_000, x)]);
    assert_eq!(d.get(x, 300_000).unwrap().message_id, 8);
    assert_eq!(d.expire(600_000, 10), vec![(600_000, x)]);
    assert!(d.is_empty());
    assert_ne!(dedup_key(true, "g", "x"), dedup_key(true, "h", "x"));
    assert_eq!(dedup_key(false, "g", "x"), dedup_key(false, "h", "x"));
}

#[test]
fn purge_and_remove_leave_no_trace_in_the_schedule() {
    let mut q = fifo_with(&[("a", 2), ("b", 1)]);
    q.remove(1);
    assert_eq!(seqs(&q.receive(0, 10, VT, 1, None)), vec![2, 3]);
    assert_eq!(q.purge().len(), 2);
    assert!(!q.has_ready(u64::MAX));
    assert!(q.groups.is_empty());
}

#[test]
fn a_groups_messages_share_its_name() {
    // Each message arrives with a name of its own (a send's, a loaded row's).
    let q = fifo_with(&[("tenant-1", 3), ("tenant-2", 1)]);
    let name = |seq| q.get(seq).and_then(|m| m.group.clone()).unwrap();
    let seqs: Vec<u64> = q.messages.keys().copied().collect();
    assert!(Arc::ptr_eq(&name(seqs[0]), &name(seqs[1])));
    assert!(Arc::ptr_eq(&name(seqs[0]), &name(seqs[2])));
    assert_eq!(&*name(seqs[3]), "tenant-2");
    let (entry, _) = q.groups.get_key_value("tenant-1").unwrap();
    assert!(Arc::ptr_eq(entry, &name(seqs[0])));
}

//! Model-based property test of the pure core: random sends, receives,
//! deletes, visibility changes and clock moves, checked against a plain
//! model of what SQS promises:
//! - no message is handed out while it is in flight;
//! - FIFO: no message is handed out while another of its group is in
//!   flight; a message is handed out only together with, and after, every
//!   earlier message of its group that still exists; and a receive finds
//!   something whenever some group could give;
//! - deletes and visibility changes follow the receipt-handle rules;
//! - no message is lost or invented;
//! - the counts (visible, in flight, delayed, oldest) are the model's, with
//!   delayed sends, retention, expiry and a clock set back.

use std::collections::BTreeMap;
use std::sync::Arc;

use postbox_queue::QueueError;
use postbox_queue::core::{Deleted, MessageMeta, MessageState, QueueCore};
use postbox_queue::digest::Receipt;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Send {
        group: u8,
        delay_s: u64,
    },
    Receive {
        max: usize,
        visibility_s: u64,
    },
    Delete {
        pick: usize,
    },
    ChangeVisibility {
        pick: usize,
        visibility_s: u64,
    },
    Advance {
        ms: u64,
    },
    /// A wall clock set back.
    Back {
        ms: u64,
    },
    Expire {
        max: usize,
    },
    Count,
}

/// Retention in the model: a few advances expire a message.
const RETENTION_MS: u64 = 60_000;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4, prop_oneof![3 => Just(0u64), 1 => 1u64..40]).prop_map(|(group, delay_s)| Op::Send { group, delay_s }),
        3 => (1usize..=10, 0u64..3).prop_map(|(max, v)| Op::Receive { max, visibility_s: v * 10 }),
        2 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        1 => (any::<usize>(), 0u64..3).prop_map(|(pick, v)| Op::ChangeVisibility { pick, visibility_s: v * 10 }),
        2 => (0u64..25_000).prop_map(|ms| Op::Advance { ms }),
        1 => (0u64..5_000).prop_map(|ms| Op::Back { ms }),
        1 => (1usize..4).prop_map(|max| Op::Expire { max }),
        2 => Just(Op::Count),
    ]
}

/// What the model knows of a live message.
#[derive(Clone, Copy, Debug)]
struct Model {
    group: u8,
    sent_at: u64,
    visible_at: u64,
    receive_count: u32,
    token: u64,
}

fn run(fifo: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut core = QueueCore::new(fifo, 1);
    let mut live: BTreeMap<u64, Model> = BTreeMap::new();
    let mut receipts: Vec<Receipt> = Vec::new();
    let mut now = 1_000u64;
    let mut token = 0u64;
    for op in ops {
        match op {
            Op::Send { group, delay_s } => {
                // FIFO queues take no per-message delay.
                let delay_ms = if fifo { 0 } else { delay_s * 1000 };
                let seq = core.take_seq();
                let meta = MessageMeta {
                    group: Some(Arc::from(format!("g{group}"))),
                    sent_at: now,
                    size: 1,
                    state: MessageState {
                        visible_at: now + delay_ms,
                        ..MessageState::default()
                    },
                };
                core.insert(seq, meta);
                live.insert(
                    seq,
                    Model {
                        group,
                        sent_at: now,
                        visible_at: now + delay_ms,
                        receive_count: 0,
                        token: 0,
                    },
                );
            }
            Op::Receive { max, visibility_s } => {
                token += 1;
                let r = core.receive(now, max, visibility_s * 1000, token, None);
                let got: Vec<u64> = r.received.iter().map(|(s, _)| *s).collect();
                prop_assert!(got.len() <= max);
                for (i, seq) in got.iter().enumerate() {
                    let m = live.get(seq).copied();
                    prop_assert!(m.is_some(), "handed out a message that does not exist");
                    let m = m.unwrap();
                    prop_assert!(
                        m.visible_at <= now,
                        "message {} handed out while in flight",
                        seq
                    );
                    if fifo {
                        for (other, o) in &live {
                            let in_flight = o.receive_count > 0 && o.visible_at > now;
                            prop_assert!(
                                !(o.group == m.group && in_flight && !got.contains(other)),
                                "FIFO: {} handed out while {} of its group is in flight",
                                seq,
                                other
                            );
                        }
                        for (earlier, e) in live.range(..seq) {
                            if e.group == m.group {
                                prop_assert!(
                                    got[..i].contains(earlier),
                                    "FIFO: {} handed out before earlier {} of its group",
                                    seq,
                                    earlier
                                );
                            }
                        }
                    }
                }
                if got.is_empty() && max > 0 {
                    prop_assert!(
                        !could_give(fifo, &live, now),
                        "a receive found nothing although a message was ready"
                    );
                }
                for seq in got {
                    let m = live.get_mut(&seq).unwrap();
                    m.visible_at = now + visibility_s * 1000;
                    m.receive_count += 1;
                    m.token = token;
                    receipts.push(Receipt {
                        queue_id: 1,
                        seq,
                        token,
                    });
                }
            }
            Op::Delete { pick } if !receipts.is_empty() => {
                let receipt = receipts[pick % receipts.len()];
                let expected = match live.get(&receipt.seq) {
                    None => Ok(false),
                    Some(m) if m.token != receipt.token => {
                        if fifo {
                            Err(())
                        } else {
                            Ok(false)
                        }
                    }
                    Some(m) if fifo && m.visible_at <= now => Err(()),
                    Some(_) => Ok(true),
                };
                let got = core.delete(&receipt, now);
                match (expected, got) {
                    (Ok(true), Ok(Deleted::Removed(seq))) => {
                        prop_assert_eq!(seq, receipt.seq);
                        live.remove(&seq);
                    }
                    (Ok(false), Ok(Deleted::Nothing)) => {}
                    (Err(()), Err(QueueError::InvalidParameterValue(_))) => {}
                    (want, got) => {
                        prop_assert!(false, "delete: expected {:?}, got {:?}", want, got)
                    }
                }
            }
            Op::ChangeVisibility { pick, visibility_s } if !receipts.is_empty() => {
                let receipt = receipts[pick % receipts.len()];
                let got = core.change_visibility(&receipt, now, visibility_s * 1000);
                match live.get_mut(&receipt.seq) {
                    Some(m) if m.token == receipt.token => {
                        prop_assert!(
                            got.is_ok(),
                            "the latest handle changes visibility: {:?}",
                            got
                        );
                        m.visible_at = now + visibility_s * 1000;
                    }
                    _ => prop_assert!(got.is_err()),
                }
            }
            Op::Advance { ms } => now += ms,
            Op::Back { ms } => now = now.saturating_sub(ms),
            Op::Expire { max } => {
                let mut doomed: Vec<(u64, u64)> = live
                    .iter()
                    .filter(|(_, m)| m.sent_at + RETENTION_MS <= now)
                    .map(|(seq, m)| (m.sent_at, *seq))
                    .collect();
                doomed.sort();
                doomed.truncate(max);
                let expected: Vec<u64> = doomed.iter().map(|(_, seq)| *seq).collect();
                prop_assert_eq!(core.expire(now, RETENTION_MS, max), expected.clone());
                for seq in expected {
                    live.remove(&seq);
                }
            }
            Op::Count => {
                let got = core.counts(now, RETENTION_MS);
                let (mut visible, mut in_flight, mut delayed) = (0, 0, 0);
                let mut oldest: Option<u64> = None;
                for m in live.values().filter(|m| m.sent_at + RETENTION_MS > now) {
                    oldest = Some(oldest.map_or(m.sent_at, |o| o.min(m.sent_at)));
                    if m.visible_at <= now {
                        visible += 1;
                    } else if m.receive_count > 0 {
                        in_flight += 1;
                    } else {
                        delayed += 1;
                    }
                }
                prop_assert_eq!(
                    (got.visible, got.in_flight, got.delayed, got.oldest_sent_at),
                    (visible, in_flight, delayed, oldest),
                    "counts at {}",
                    now
                );
            }
            _ => {}
        }
        prop_assert_eq!(core.len(), live.len(), "messages lost or invented");
    }
    Ok(())
}

/// Whether the model says a receive at `now` must find a message.
fn could_give(fifo: bool, live: &BTreeMap<u64, Model>, now: u64) -> bool {
    if !fifo {
        return live.values().any(|m| m.visible_at <= now);
    }
    // A group can give when, in order, its messages up to and including
    // the first one never received are all visible: none in flight, and
    // the next one sent no later than `now` (a clock set back sees sends
    // from its future).
    let mut heads: BTreeMap<u8, (bool, bool)> = BTreeMap::new();
    for m in live.values() {
        let (ok, done) = heads.entry(m.group).or_insert((true, false));
        if *done {
            continue;
        }
        *ok &= m.visible_at <= now;
        *done = m.receive_count == 0 || !*ok;
    }
    heads.values().any(|(ok, _)| *ok)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn fifo_core_keeps_sqs_promises(ops in proptest::collection::vec(op(), 1..120)) {
        run(true, ops)?;
    }

    #[test]
    fn standard_core_keeps_sqs_promises(ops in proptest::collection::vec(op(), 1..120)) {
        run(false, ops)?;
    }
}

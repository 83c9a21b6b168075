//! The pure core: one queue's scheduling state and SQS's rules over it, as
//! functions of the state and a `now` passed in. No I/O, no clock.
//!
//! The core holds every message's metadata (not its body) and answers what
//! to hand out, delete, hide or expire; the storage layer writes the same
//! change to the redb file in the same write transaction.
//!
//! Scheduling: every receivable unit is a *lane* in one ordered set keyed by
//! `(ready_at, order)`. In a standard queue each message is its own lane, so
//! in-flight and delayed messages simply sit in the set at the time they
//! become visible. In a FIFO queue each message group is one lane whose
//! `ready_at` is the time no message of the group is in flight any more and
//! its head is visible; a receive takes messages from the head of a ready
//! group in order, so while any message of a group is in flight no later
//! message of that group is handed out, and other groups proceed.

mod dedup;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

pub use dedup::{DEDUP_WINDOW_MS, DedupEntry, DedupKey, DedupTable, dedup_key};

use crate::digest::Receipt;
use crate::error::{QueueError, QueueResult};

/// The part of a message that changes after it is sent; stored beside the
/// immutable payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageState {
    /// When the message can next be received (ms since the epoch): its send
    /// time plus delay, or the end of its current visibility timeout.
    pub visible_at: u64,
    /// How many times it was handed out.
    pub receive_count: u32,
    /// When it was first handed out (meaningless while `receive_count` is 0).
    pub first_receive_at: u64,
    /// The token of the latest receive; only that receive's handle acts.
    pub token: u64,
    /// When the latest receive handed it out (ms), which bounds how far its
    /// visibility can be extended. Kept in memory only: 0 for a message
    /// loaded from the file, whose extensions are then not bounded.
    pub received_at: u64,
}

/// How long after a receive a message can stay hidden, whatever its
/// visibility changes (SQS: 12 hours).
pub const MAX_HIDDEN_AFTER_RECEIVE_MS: u64 = 43_200_000;

impl MessageState {
    /// Received and its visibility timeout not yet over.
    pub fn in_flight(&self, now: u64) -> bool {
        self.receive_count > 0 && self.visible_at > now
    }
}

/// What the core keeps of a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageMeta {
    /// The message group (FIFO only).
    pub group: Option<Arc<str>>,
    /// When it was first sent (ms); retention counts from here.
    pub sent_at: u64,
    /// Bytes of body and attributes, for the metrics.
    pub size: u32,
    /// The changing part.
    pub state: MessageState,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Lane {
    /// A standard queue's message.
    One(u64),
    /// A FIFO queue's message group.
    Group(Arc<str>),
}

#[derive(Debug, Default)]
struct Group {
    seqs: BTreeSet<u64>,
    key: Option<(u64, u64)>,
}

/// The outcome of [`QueueCore::receive`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Receive {
    /// Messages handed out, in order, with their new state.
    pub received: Vec<(u64, MessageState)>,
    /// Messages past the redrive policy's maxReceiveCount, removed from this
    /// queue: the caller moves them to the dead-letter queue.
    pub dead_lettered: Vec<(u64, MessageMeta)>,
}

/// What a DeleteMessage did.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The message was removed.
    Removed(u64),
    /// Nothing to do: the message is gone, or (standard queues) the handle
    /// is not the latest one, which SQS answers with success.
    Nothing,
}

/// Message counts as GetQueueAttributes reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Available for retrieval.
    pub visible: u64,
    /// Received and not yet deleted or visible again.
    pub in_flight: u64,
    /// Sent with a delay that has not passed.
    pub delayed: u64,
    /// Sent time of the oldest message (ms), if any.
    pub oldest_sent_at: Option<u64>,
}

impl Counts {
    /// The count a message in `state` falls in at `now`.
    fn of(&mut self, state: &MessageState, now: u64) -> &mut u64 {
        if state.in_flight(now) {
            &mut self.in_flight
        } else if state.visible_at > now {
            &mut self.delayed
        } else {
            &mut self.visible
        }
    }
}

/// One queue's scheduling state.
#[derive(Debug)]
pub struct QueueCore {
    fifo: bool,
    messages: BTreeMap<u64, MessageMeta>,
    ready: BTreeSet<(u64, u64, Lane)>,
    groups: HashMap<Arc<str>, Group>,
    by_sent: BTreeSet<(u64, u64)>,
    next_seq: u64,
    hidden: Hidden,
    /// Messages counting has looked at one by one (see [`QueueCore::walked`]).
    walked: u64,
    /// FIFO deduplication ids seen in the last 5 minutes.
    pub dedup: DedupTable,
}

/// The messages hidden after a moving time, kept as each message changes
/// so that counting them is not a walk of the queue.
///
/// Every message whose `visible_at` is after `watermark` is in `received`
/// (received at least once: in flight) or `unreceived` (delayed), by its
/// `visible_at`; none at or before it is. Moving the watermark to `now`
/// drops the entries that became visible, each once, so counts at `now`
/// are the two totals (see [`QueueCore::counts`]).
#[derive(Debug, Default)]
struct Hidden {
    watermark: u64,
    received: BTreeMap<u64, u64>,
    received_n: u64,
    unreceived: BTreeMap<u64, u64>,
    unreceived_n: u64,
}

impl Hidden {
    fn side(&mut self, state: &MessageState) -> (&mut BTreeMap<u64, u64>, &mut u64) {
        if state.receive_count > 0 {
            (&mut self.received, &mut self.received_n)
        } else {
            (&mut self.unreceived, &mut self.unreceived_n)
        }
    }

    fn add(&mut self, state: &MessageState) {
        if state.visible_at > self.watermark {
            let (map, n) = self.side(state);
            *map.entry(state.visible_at).or_default() += 1;
            *n += 1;
        }
    }

    fn remove(&mut self, state: &MessageState) {
        if state.visible_at > self.watermark {
            let (map, n) = self.side(state);
            if let Some(c) = map.get_mut(&state.visible_at) {
                *c -= 1;
                *n -= 1;
                if *c == 0 {
                    map.remove(&state.visible_at);
                }
            } else {
                debug_assert!(false, "a hidden message was not kept");
            }
        }
    }

    /// Moves the watermark to `now` if that is later.
    fn advance(&mut self, now: u64) {
        if now <= self.watermark {
            return;
        }
        for (map, n) in [
            (&mut self.received, &mut self.received_n),
            (&mut self.unreceived, &mut self.unreceived_n),
        ] {
            while let Some(first) = map.first_entry() {
                if *first.key() > now {
                    break;
                }
                *n -= first.remove();
            }
        }
        self.watermark = now;
    }
}

impl QueueCore {
    /// An empty queue whose first message gets sequence `first_seq`.
    pub fn new(fifo: bool, first_seq: u64) -> QueueCore {
        QueueCore {
            fifo,
            messages: BTreeMap::new(),
            ready: BTreeSet::new(),
            groups: HashMap::new(),
            by_sent: BTreeSet::new(),
            next_seq: first_seq.max(1),
            hidden: Hidden::default(),
            walked: 0,
            dedup: DedupTable::default(),
        }
    }

    /// Whether this is a FIFO queue.
    pub fn fifo(&self) -> bool {
        self.fifo
    }

    /// Number of messages held, in any state.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True when the queue holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// A message's metadata.
    pub fn get(&self, seq: u64) -> Option<&MessageMeta> {
        self.messages.get(&seq)
    }

    /// The sequence the next message gets, taken.
    pub fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Adds a message under `seq` (new, loaded from the file, or moved from
    /// another queue). `seq` must be above every sequence held.
    pub fn insert(&mut self, seq: u64, mut meta: MessageMeta) {
        self.next_seq = self.next_seq.max(seq + 1);
        self.by_sent.insert((meta.sent_at, seq));
        // A new message's send time is the clock's: moving the watermark
        // there keeps a message visible at once out of `hidden`.
        self.hidden.advance(meta.sent_at);
        self.hidden.add(&meta.state);
        let state = meta.state;
        // A FIFO message shares its group's name with the group's entry
        // rather than holding a copy of its own (an allocation per message
        // for as long as it waits), found in the same lookup.
        let group = match &meta.group {
            Some(g) if self.fifo => {
                let entry = self.groups.entry(g.clone());
                let name = entry.key().clone();
                entry.or_default().seqs.insert(seq);
                meta.group = Some(name.clone());
                Some(name)
            }
            _ => None,
        };
        self.messages.insert(seq, meta);
        match group {
            None => {
                self.ready.insert((state.visible_at, seq, Lane::One(seq)));
            }
            Some(g) => self.rekey_group(&g),
        }
    }

    /// Removes a message wherever it is; returns its metadata.
    pub fn remove(&mut self, seq: u64) -> Option<MessageMeta> {
        let meta = self.messages.remove(&seq)?;
        self.by_sent.remove(&(meta.sent_at, seq));
        self.hidden.remove(&meta.state);
        match (&meta.group, self.fifo) {
            (Some(g), true) => {
                if let Some(group) = self.groups.get_mut(g) {
                    group.seqs.remove(&seq);
                }
                self.rekey_group(&g.clone());
            }
            _ => {
                self.ready
                    .remove(&(meta.state.visible_at, seq, Lane::One(seq)));
            }
        }
        Some(meta)
    }

    /// Hands out up to `max` messages visible at `now`, hiding each for
    /// `visibility_ms` and stamping it with `token`. A message already
    /// received `max_receive_count` times is dead-lettered instead.
    pub fn receive(
        &mut self,
        now: u64,
        max: usize,
        visibility_ms: u64,
        token: u64,
        max_receive_count: Option<u32>,
    ) -> Receive {
        self.hidden.advance(now);
        let mut out = Receive::default();
        let mut touched: HashSet<Lane> = HashSet::new();
        while out.received.len() < max {
            let wanted = max - out.received.len();
            let lanes: Vec<Lane> = self
                .ready
                .iter()
                .take_while(|(at, _, _)| *at <= now)
                .filter(|(_, _, lane)| !touched.contains(lane))
                .take(wanted)
                .map(|(_, _, lane)| lane.clone())
                .collect();
            if lanes.is_empty() {
                break;
            }
            for lane in lanes {
                touched.insert(lane.clone());
                // Walks the lane in order with a cursor: a group may hold many
                // messages, of which a receive looks at a few.
                let mut cursor = 0;
                while out.received.len() < max {
                    let next = match &lane {
                        Lane::One(seq) => (cursor == 0).then_some(*seq),
                        Lane::Group(g) => self
                            .groups
                            .get(g)
                            .and_then(|gr| gr.seqs.range(cursor..).next().copied()),
                    };
                    let Some(seq) = next else { break };
                    cursor = seq + 1;
                    let Some(meta) = self.messages.get(&seq) else {
                        continue;
                    };
                    if meta.state.visible_at > now {
                        break; // the rest of a group waits behind this one
                    }
                    if max_receive_count.is_some_and(|limit| meta.state.receive_count >= limit) {
                        let meta = self.remove(seq).expect("present");
                        out.dead_lettered.push((seq, meta));
                        continue;
                    }
                    let mut state = meta.state;
                    if state.receive_count == 0 {
                        state.first_receive_at = now;
                    }
                    state.receive_count += 1;
                    state.visible_at = now + visibility_ms;
                    state.token = token;
                    state.received_at = now;
                    self.set_state(seq, state);
                    out.received.push((seq, state));
                }
            }
        }
        out
    }

    /// Deletes the message `receipt` names, by SQS's rules.
    pub fn delete(&mut self, receipt: &Receipt, now: u64) -> QueueResult<Deleted> {
        let Some(meta) = self.messages.get(&receipt.seq) else {
            return Ok(Deleted::Nothing);
        };
        if meta.state.token != receipt.token || meta.state.receive_count == 0 {
            if self.fifo {
                return Err(expired());
            }
            return Ok(Deleted::Nothing);
        }
        if self.fifo && !meta.state.in_flight(now) {
            // A FIFO message whose visibility timeout passed may already be
            // another consumer's; its old handle no longer deletes it.
            return Err(expired());
        }
        self.remove(receipt.seq);
        Ok(Deleted::Removed(receipt.seq))
    }

    /// Sets a received message's remaining visibility to `timeout_ms` from
    /// `now`; returns its new state. Refused when that would hide the
    /// message for longer than 12 hours after the receive the handle is of.
    pub fn change_visibility(
        &mut self,
        receipt: &Receipt,
        now: u64,
        timeout_ms: u64,
    ) -> QueueResult<MessageState> {
        let Some(meta) = self.messages.get(&receipt.seq) else {
            return Err(QueueError::ReceiptHandleIsInvalid(format!(
                "The input receipt handle \"{}\" is not a valid receipt handle.",
                receipt.encode()
            )));
        };
        // The latest receive's handle may still change the timeout after it
        // ran out, as long as nobody received the message again.
        if meta.state.token != receipt.token || meta.state.receive_count == 0 {
            return Err(QueueError::MessageNotInflight);
        }
        // In whole seconds, as the API counts: a change within the
        // receive's first second may still ask for the full 12 hours. A
        // timeout of 0 hides nothing and is always taken.
        let received_at = meta.state.received_at;
        let elapsed_s = now.saturating_sub(received_at) / 1000;
        if received_at != 0
            && timeout_ms > 0
            && elapsed_s + timeout_ms / 1000 > MAX_HIDDEN_AFTER_RECEIVE_MS / 1000
        {
            return Err(QueueError::invalid(format!(
                "Value {} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [{} seconds]",
                timeout_ms / 1000,
                MAX_HIDDEN_AFTER_RECEIVE_MS / 1000
            )));
        }
        let mut state = meta.state;
        state.visible_at = now + timeout_ms;
        self.set_state(receipt.seq, state);
        Ok(state)
    }

    /// Removes up to `max` messages sent `retention_ms` or longer before
    /// `now`, oldest first.
    pub fn expire(&mut self, now: u64, retention_ms: u64, max: usize) -> Vec<u64> {
        let doomed: Vec<u64> = self
            .by_sent
            .iter()
            .take_while(|(sent, _)| sent.saturating_add(retention_ms) <= now)
            .take(max)
            .map(|(_, seq)| *seq)
            .collect();
        for seq in &doomed {
            self.remove(*seq);
        }
        doomed
    }

    /// True when a message expired by `now` under `retention_ms`.
    pub fn has_expired(&self, now: u64, retention_ms: u64) -> bool {
        self.by_sent
            .first()
            .is_some_and(|(sent, _)| sent.saturating_add(retention_ms) <= now)
    }

    /// Removes every message; returns their sequences.
    pub fn purge(&mut self) -> Vec<u64> {
        let all: Vec<u64> = self.messages.keys().copied().collect();
        self.hidden = Hidden {
            watermark: self.hidden.watermark,
            ..Hidden::default()
        };
        self.messages.clear();
        self.ready.clear();
        self.groups.clear();
        self.by_sent.clear();
        all
    }

    /// The messages a move task may take now: visible ones, oldest first.
    pub fn movable(&self, now: u64, max: usize) -> Vec<u64> {
        self.messages
            .iter()
            .filter(|(_, m)| !m.state.in_flight(now))
            .take(max)
            .map(|(s, _)| *s)
            .collect()
    }

    /// Whether a receive at `now` would find a message (or one to
    /// dead-letter).
    pub fn has_ready(&self, now: u64) -> bool {
        self.ready.first().is_some_and(|(at, _, _)| *at <= now)
    }

    /// The earliest time after `now` when a lane becomes ready, if any: a
    /// long poll waits at most until then before looking again.
    pub fn next_ready_after(&self, now: u64) -> Option<u64> {
        // `Lane::One(0)` is the smallest lane, so this starts at the first
        // entry after `now`.
        self.ready
            .range((now.saturating_add(1), 0, Lane::One(0))..)
            .next()
            .map(|(at, _, _)| *at)
    }

    /// Counts messages by state at `now`, leaving out those expired under
    /// `retention_ms`. The in-flight and delayed ones are kept as they
    /// change ([`Hidden`]); only messages past retention that the expiry
    /// task has not removed yet are looked at one by one. A clock earlier
    /// than a time the core has seen (a wall clock set back) counts by a
    /// walk of every message.
    pub fn counts(&mut self, now: u64, retention_ms: u64) -> Counts {
        if now < self.hidden.watermark {
            return self.walk_counts(now, retention_ms);
        }
        self.hidden.advance(now);
        let hidden = self.hidden.received_n + self.hidden.unreceived_n;
        let mut c = Counts {
            visible: (self.messages.len() as u64).saturating_sub(hidden),
            in_flight: self.hidden.received_n,
            delayed: self.hidden.unreceived_n,
            oldest_sent_at: None,
        };
        for &(sent_at, seq) in &self.by_sent {
            if sent_at.saturating_add(retention_ms) > now {
                c.oldest_sent_at = Some(sent_at);
                break;
            }
            self.walked += 1;
            let n = c.of(&self.messages[&seq].state, now);
            *n = n.saturating_sub(1);
        }
        c
    }

    /// [`QueueCore::counts`] by looking at every message.
    fn walk_counts(&mut self, now: u64, retention_ms: u64) -> Counts {
        self.walked += self.messages.len() as u64;
        let mut c = Counts::default();
        for meta in self.messages.values() {
            if meta.sent_at.saturating_add(retention_ms) <= now {
                continue;
            }
            c.oldest_sent_at = Some(
                c.oldest_sent_at
                    .map_or(meta.sent_at, |o: u64| o.min(meta.sent_at)),
            );
            *c.of(&meta.state, now) += 1;
        }
        c
    }

    /// How many messages counting has looked at one by one since the core
    /// was made: tests use it to show that counting a deep queue is not a
    /// walk of it.
    pub fn walked(&self) -> u64 {
        self.walked
    }

    fn set_state(&mut self, seq: u64, state: MessageState) {
        let meta = self.messages.get_mut(&seq).expect("present");
        let old = meta.state;
        meta.state = state;
        self.hidden.remove(&old);
        self.hidden.add(&state);
        match (&meta.group, self.fifo) {
            (Some(g), true) => {
                let g = g.clone();
                self.rekey_group(&g);
            }
            _ => {
                self.ready.remove(&(old.visible_at, seq, Lane::One(seq)));
                self.ready.insert((state.visible_at, seq, Lane::One(seq)));
            }
        }
    }

    /// Recomputes a group's place in the ready set: ready when none of its
    /// received messages is in flight and its first unreceived one is
    /// visible; ordered by its oldest message.
    fn rekey_group(&mut self, g: &Arc<str>) {
        let Some(group) = self.groups.get_mut(g) else {
            return;
        };
        if let Some((at, order)) = group.key.take() {
            self.ready.remove(&(at, order, Lane::Group(g.clone())));
        }
        let Some(&first) = group.seqs.first() else {
            self.groups.remove(g);
            return;
        };
        let mut at = 0;
        for seq in &group.seqs {
            let state = self.messages[seq].state;
            at = at.max(state.visible_at);
            if state.receive_count == 0 {
                break;
            }
        }
        group.key = Some((at, first));
        self.ready.insert((at, first, Lane::Group(g.clone())));
    }
}

fn expired() -> QueueError {
    QueueError::InvalidParameterValue(
        "Value for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
            .to_owned(),
    )
}

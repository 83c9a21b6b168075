//! What goes into one delivery commit ([`Commit`]): the records it takes
//! the checkpoint over, and what they become — queue messages grouped by
//! queue, log lines, dead letters — with the counts the pipe's stats add
//! once the commit is made. Pure: nothing here touches the store.

use std::path::PathBuf;

use postbox_queue::NewMessage;

use super::batch::Planned;
use super::stats::CommitCounts;
use crate::plan::{DeadReason, Delivery, Outcome, QueueMessage, dead_letter};

/// Everything one commit writes: from checkpoint `from` to `to`.
#[derive(Debug, PartialEq)]
pub(super) struct Commit {
    pub(super) from: u64,
    pub(super) to: u64,
    /// Per queue, in order: messages and the index of their record.
    pub(super) sends: Vec<(String, Vec<(usize, NewMessage)>)>,
    pub(super) logs: Vec<(PathBuf, String)>,
    pub(super) dead: Vec<(usize, DeadReason)>,
    pub(super) delivered: u64,
    pub(super) filtered: u64,
}

impl Commit {
    /// A commit of no records, after checkpoint `from`.
    pub(super) fn new(from: u64) -> Commit {
        Commit {
            from,
            to: from,
            sends: Vec::new(),
            logs: Vec::new(),
            dead: Vec::new(),
            delivered: 0,
            filtered: 0,
        }
    }

    /// A commit of records `batch` of `planned`, as planned, after
    /// checkpoint `from`.
    pub(super) fn of_batch(planned: &[Planned], batch: &[usize], from: u64) -> Commit {
        let mut c = Commit::new(from);
        batch.iter().for_each(|&i| c.add(i, &planned[i], None));
        c
    }

    /// A commit of every record of `planned`, as planned, after checkpoint
    /// `from`. The outcomes are moved out (each record is left filtered),
    /// saving a copy of every message body.
    pub(super) fn taking_all(planned: &mut [Planned], from: u64) -> Commit {
        let mut c = Commit::new(from);
        for (i, p) in planned.iter_mut().enumerate() {
            let outcome = std::mem::replace(&mut p.outcome, Outcome::Filtered);
            c.add_outcome(i, p.seq, outcome, None);
        }
        c
    }

    /// Whether the commit moves the checkpoint (else it writes nothing).
    pub(super) fn moves(&self) -> bool {
        self.to != self.from
    }

    fn send(&mut self, index: usize, m: QueueMessage) {
        match self.sends.iter_mut().find(|(q, _)| *q == m.queue) {
            Some((_, list)) => list.push((index, m.message)),
            None => self.sends.push((m.queue, vec![(index, m.message)])),
        }
    }

    /// Adds record `index` as planned (or as dead with `dead`).
    pub(super) fn add(&mut self, index: usize, record: &Planned, dead: Option<DeadReason>) {
        self.add_outcome(index, record.seq, record.outcome.clone(), dead);
    }

    /// [`Commit::add`] taking the outcome by value (the fast path moves it,
    /// saving a copy of every message body).
    pub(super) fn add_outcome(
        &mut self,
        index: usize,
        seq: u64,
        outcome: Outcome,
        dead: Option<DeadReason>,
    ) {
        self.to = seq;
        match (dead, outcome) {
            (Some(reason), _) => self.dead.push((index, reason)),
            (None, Outcome::Filtered) => self.filtered += 1,
            (None, Outcome::Dead(reason)) => self.dead.push((index, reason)),
            (None, Outcome::Deliver(list)) => {
                self.delivered += 1;
                for d in list {
                    match d {
                        Delivery::Queue(m) => self.send(index, m),
                        Delivery::Log { path, line } => self.logs.push((path, line)),
                    }
                }
            }
        }
    }

    /// The dead letters of the commit's dead records (`planned` holds the
    /// records, read from `table`), for dead-letter queue `dlq` of pipe
    /// `pipe`, at `now_ms`.
    pub(super) fn dead_letters(
        &self,
        pipe: &str,
        table: &str,
        dlq: &str,
        planned: &[Planned],
        now_ms: u64,
    ) -> Vec<QueueMessage> {
        self.dead
            .iter()
            .map(|(i, r)| {
                planned[*i].with_view(table, |view| dead_letter(pipe, dlq, view, r, now_ms))
            })
            .collect()
    }

    /// What the pipe's counters add once this commit is made.
    pub(super) fn counts(&self) -> CommitCounts {
        CommitCounts {
            filtered: self.filtered,
            delivered: self.delivered,
            logs: self.logs.len(),
            sends: self.sends.iter().map(|(_, l)| l.len()).sum(),
            dead: self.dead.iter().map(|(_, r)| r.clone()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::relay::batch::tests::planned;
    use crate::template::TemplateError;

    fn to(queue: &str, body: &str) -> Delivery {
        Delivery::Queue(QueueMessage {
            queue: queue.to_owned(),
            message: NewMessage::new(body),
        })
    }

    fn log(line: &str) -> Delivery {
        Delivery::Log {
            path: "l.jsonl".into(),
            line: line.to_owned(),
        }
    }

    fn bodies(list: &[(usize, NewMessage)]) -> Vec<(usize, &str)> {
        list.iter().map(|(i, m)| (*i, m.body.as_str())).collect()
    }

    fn round() -> Vec<Planned> {
        vec![
            planned(11, Outcome::Filtered),
            planned(
                12,
                Outcome::Deliver(vec![to("a", "1a"), log("1l"), to("b", "1b")]),
            ),
            planned(13, Outcome::Deliver(vec![to("a", "2a")])),
            planned(
                14,
                Outcome::Dead(DeadReason::Template(TemplateError::Invalid("t".into()))),
            ),
        ]
    }

    #[test]
    fn records_are_added_as_planned_with_sends_grouped_by_queue() {
        let p = round();
        let c = Commit::of_batch(&p, &[0, 1, 2, 3], 10);
        assert_eq!((c.from, c.to), (10, 14));
        assert!(c.moves());
        assert_eq!((c.filtered, c.delivered), (1, 2));
        let queues: Vec<_> = c
            .sends
            .iter()
            .map(|(q, l)| (q.as_str(), bodies(l)))
            .collect();
        assert_eq!(
            queues,
            [("a", vec![(1, "1a"), (2, "2a")]), ("b", vec![(1, "1b")])]
        );
        assert_eq!(c.logs, [(PathBuf::from("l.jsonl"), "1l".to_owned())]);
        assert!(matches!(c.dead[..], [(3, DeadReason::Template(_))]));
        // Only the batch's records: the checkpoint stops at its last one.
        let c = Commit::of_batch(&p, &[0, 1], 10);
        assert_eq!((c.to, c.delivered, c.sends.len()), (12, 1, 2));
        assert!(!Commit::of_batch(&p, &[], 10).moves());
    }

    #[test]
    fn taking_all_the_records_is_adding_each_as_planned() {
        let mut p = round();
        let by_batch = Commit::of_batch(&p, &[0, 1, 2, 3], 10);
        let taken = Commit::taking_all(&mut p, 10);
        assert_eq!(taken, by_batch);
        assert!(p.iter().all(|p| p.outcome == Outcome::Filtered));
        // The records themselves stay, for their dead letters.
        assert_eq!(p[3].id, "t#14");
    }

    #[test]
    fn a_dead_reason_given_overrides_the_plan() {
        let p = round();
        let mut c = Commit::new(10);
        let failed = || Some(DeadReason::Delivery("refused".into()));
        c.add(1, &p[1], failed());
        c.add(2, &p[2], None);
        c.add(3, &p[3], failed());
        assert_eq!(c.delivered, 1);
        assert_eq!(c.sends.len(), 1);
        assert!(c.logs.is_empty());
        assert_eq!(
            c.dead,
            [
                (1, DeadReason::Delivery("refused".into())),
                (3, DeadReason::Delivery("refused".into()))
            ]
        );
    }

    #[test]
    fn counts_are_what_the_commit_holds() {
        let c = Commit::of_batch(&round(), &[0, 1, 2, 3], 10);
        let k = c.counts();
        assert_eq!((k.filtered, k.delivered, k.logs, k.sends), (1, 2, 1, 3));
        assert!(matches!(k.dead[..], [DeadReason::Template(_)]));
    }

    #[test]
    fn dead_letters_name_their_record_and_reason() {
        let mut p = round();
        p[3].record.event_name = postbox_store::api::EventName::Remove;
        let c = Commit::of_batch(&p, &[0, 1, 2, 3], 10);
        let letters = c.dead_letters("pipe", "t", "dlq.fifo", &p, 0);
        let [letter] = &letters[..] else {
            panic!("{letters:?}")
        };
        assert_eq!(letter.queue, "dlq.fifo");
        assert_eq!(letter.message.group_id.as_deref(), Some("pipe"));
        let body: Value = serde_json::from_str(&letter.message.body).unwrap();
        assert_eq!(body["recordId"], "t#14");
        assert_eq!(body["errorCode"], "TemplateError");
        assert_eq!(body["record"]["eventName"], "REMOVE");
        assert_eq!(body["record"]["dynamodb"]["Keys"]["pk"]["S"], "k14");
    }
}

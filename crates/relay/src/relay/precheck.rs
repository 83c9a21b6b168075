//! Pre-checks: before a batch goes into a commit, its queue messages are
//! checked as SendMessage will check them — the queue exists, body and
//! attributes are valid, the size is within the queue's maximum, FIFO group
//! and deduplication ids are valid — so a batch the queue would refuse is
//! retried, bisected or dead-lettered by the relay instead of being refused
//! inside the commit, where retrying would hold the store's writer.
//!
//! The facts a check needs of a queue (its maximum size, whether it
//! deduplicates on content) are looked up once and kept for a second
//! ([`FactsCache`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use postbox_queue::{NewMessage, Queues};

use super::batch::Planned;
use super::runner::Runner;
use crate::plan::{Delivery, Outcome};

/// How long looked-up queue facts are used before they are looked up again.
const FACTS_FOR: Duration = Duration::from_secs(1);

/// SQS's default MaximumMessageSize, for a queue that does not say.
const DEFAULT_MAX_SIZE: usize = 262_144;

/// The queue facts a pre-check needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct QueueFacts {
    pub(super) max_size: usize,
    pub(super) content_dedup: bool,
}

impl QueueFacts {
    /// The queue attributes a pre-check needs.
    fn attribute_names() -> [String; 2] {
        [
            "MaximumMessageSize".to_owned(),
            "ContentBasedDeduplication".to_owned(),
        ]
    }

    /// The facts in a queue's attributes (as [`Self::attribute_names`]
    /// asks for them); a missing or unreadable maximum size is SQS's default.
    fn from_attributes(attrs: &BTreeMap<String, String>) -> QueueFacts {
        QueueFacts {
            max_size: attrs
                .get("MaximumMessageSize")
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MAX_SIZE),
            content_dedup: attrs
                .get("ContentBasedDeduplication")
                .is_some_and(|v| v == "true"),
        }
    }
}

/// Queue facts by queue name (`None`: the queue does not exist).
pub(super) type Facts = HashMap<String, Option<QueueFacts>>;

/// Queue facts kept between rounds, dropped after [`FACTS_FOR`]: looking
/// them up per round would cost a queue walk per few records at low
/// latency.
pub(super) struct FactsCache(Mutex<(Instant, Facts)>);

impl FactsCache {
    pub(super) fn new() -> FactsCache {
        FactsCache(Mutex::new((Instant::now(), HashMap::new())))
    }

    /// Takes the facts out for a round; none when they are too old.
    pub(super) fn take(&self) -> Facts {
        self.take_at(Instant::now())
    }

    /// [`FactsCache::take`] at time `now`.
    fn take_at(&self, now: Instant) -> Facts {
        let mut cached = self.0.lock().expect("facts lock");
        if now.saturating_duration_since(cached.0) > FACTS_FOR {
            *cached = (now, HashMap::new());
        }
        std::mem::take(&mut cached.1)
    }

    /// Puts a round's facts back for the next rounds.
    pub(super) fn put(&self, facts: Facts) {
        self.0.lock().expect("facts lock").1 = facts;
    }
}

/// The facts of `queue`; `None` when it does not exist.
fn queue_facts(queues: &Queues, queue: &str) -> Option<QueueFacts> {
    let attrs = queues
        .queue_attributes(queue, &QueueFacts::attribute_names())
        .ok()?;
    Some(QueueFacts::from_attributes(&attrs))
}

impl Runner {
    /// Checks a batch's messages against their queues as SendMessage would.
    pub(super) fn precheck(
        &self,
        planned: &[Planned],
        batch: &[usize],
        facts: &mut Facts,
    ) -> Result<(), String> {
        check_batch(planned, batch, facts, |q| queue_facts(&self.queues, q))
    }
}

/// Checks the queue messages of records `batch` of `planned` as
/// SendMessage would: the first failure, naming its record. `lookup` gives
/// the facts of a queue not yet in `facts`.
fn check_batch(
    planned: &[Planned],
    batch: &[usize],
    facts: &mut Facts,
    mut lookup: impl FnMut(&str) -> Option<QueueFacts>,
) -> Result<(), String> {
    for &i in batch {
        let Outcome::Deliver(list) = &planned[i].outcome else {
            continue;
        };
        for d in list {
            let Delivery::Queue(m) = d else { continue };
            let f = facts
                .entry(m.queue.clone())
                .or_insert_with(|| lookup(&m.queue))
                .clone();
            let Some(f) = f else {
                return Err(format!(
                    "record {}: queue {} does not exist",
                    planned[i].id, m.queue
                ));
            };
            check_message(&m.queue, &m.message, &f)
                .map_err(|e| format!("record {}: {e}", planned[i].id))?;
        }
    }
    Ok(())
}

/// SendMessage's checks of one message, as the queue will apply them.
fn check_message(queue: &str, m: &NewMessage, f: &QueueFacts) -> Result<(), String> {
    m.validate().map_err(|e| format!("queue {queue}: {e}"))?;
    if m.size() > f.max_size {
        return Err(format!(
            "queue {queue}: the message is {} bytes, over the queue's maximum of {}",
            m.size(),
            f.max_size
        ));
    }
    let id_ok = |id: &str| {
        !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation())
    };
    if queue.ends_with(".fifo") {
        match &m.group_id {
            Some(g) if id_ok(g) => {}
            Some(g) => {
                return Err(format!(
                    "queue {queue}: MessageGroupId {g:?} must be 1-128 letters, digits or punctuation"
                ));
            }
            None => {
                return Err(format!(
                    "queue {queue}: a FIFO message needs a MessageGroupId"
                ));
            }
        }
        match &m.deduplication_id {
            Some(d) if id_ok(d) => {}
            Some(d) => {
                return Err(format!(
                    "queue {queue}: MessageDeduplicationId {d:?} must be 1-128 letters, digits or punctuation"
                ));
            }
            None if f.content_dedup => {}
            None => {
                return Err(format!(
                    "queue {queue}: no MessageDeduplicationId and content-based deduplication is off"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DeadReason, QueueMessage};
    use crate::relay::batch::tests::planned;

    const FACTS: QueueFacts = QueueFacts {
        max_size: 100,
        content_dedup: false,
    };

    #[test]
    fn queue_facts_default_to_sqs_and_read_the_attributes() {
        assert_eq!(
            QueueFacts::from_attributes(&BTreeMap::new()),
            QueueFacts {
                max_size: 262_144,
                content_dedup: false
            }
        );
        let attrs = |size: &str, dedup: &str| {
            BTreeMap::from([
                ("MaximumMessageSize".to_owned(), size.to_owned()),
                ("ContentBasedDeduplication".to_owned(), dedup.to_owned()),
            ])
        };
        assert_eq!(
            QueueFacts::from_attributes(&attrs("1024", "true")),
            QueueFacts {
                max_size: 1024,
                content_dedup: true
            }
        );
        assert_eq!(
            QueueFacts::from_attributes(&attrs("big", "false")),
            QueueFacts {
                max_size: 262_144,
                content_dedup: false
            }
        );
    }

    #[test]
    fn messages_are_checked_as_send_message_would() {
        let ok = |queue: &str, m: NewMessage, f: &QueueFacts| check_message(queue, &m, f);
        assert_eq!(ok("q", NewMessage::new("x".repeat(100)), &FACTS), Ok(()));
        let e = ok("q", NewMessage::new("x".repeat(101)), &FACTS).unwrap_err();
        assert!(
            e.contains("101 bytes, over the queue's maximum of 100"),
            "{e}"
        );
        let e = ok("q", NewMessage::new(""), &FACTS).unwrap_err();
        assert!(e.starts_with("queue q: "), "{e}");
        // Group and deduplication ids matter on FIFO queues only.
        assert_eq!(ok("q", NewMessage::new("x"), &FACTS), Ok(()));
        let e = ok("q.fifo", NewMessage::new("x"), &FACTS).unwrap_err();
        assert!(e.contains("needs a MessageGroupId"), "{e}");
        let e = ok("q.fifo", NewMessage::new("x").group("a b"), &FACTS).unwrap_err();
        assert!(e.contains("MessageGroupId \"a b\""), "{e}");
        let e = ok("q.fifo", NewMessage::new("x").group("a"), &FACTS).unwrap_err();
        assert!(e.contains("content-based deduplication is off"), "{e}");
        let dedup = QueueFacts {
            content_dedup: true,
            ..FACTS
        };
        assert_eq!(
            ok("q.fifo", NewMessage::new("x").group("a"), &dedup),
            Ok(())
        );
        let long = NewMessage::new("x").group("a").dedup("d".repeat(129));
        let e = ok("q.fifo", long, &dedup).unwrap_err();
        assert!(e.contains("MessageDeduplicationId"), "{e}");
        let fine = NewMessage::new("x").group("a-1").dedup("d".repeat(128));
        assert_eq!(ok("q.fifo", fine, &FACTS), Ok(()));
    }

    fn to(queue: &str, body: &str) -> Delivery {
        Delivery::Queue(QueueMessage {
            queue: queue.to_owned(),
            message: NewMessage::new(body),
        })
    }

    #[test]
    fn a_batch_fails_on_its_first_refused_message_naming_the_record() {
        let records = [
            planned(1, Outcome::Deliver(vec![to("q", "fine")])),
            // Not delivered: their messages are not checked.
            planned(2, Outcome::Filtered),
            planned(3, Outcome::Dead(DeadReason::Delivery("x".into()))),
            planned(4, Outcome::Deliver(vec![to("q", "fine"), to("gone", "x")])),
            planned(5, Outcome::Deliver(vec![to("q", "")])),
        ];
        let mut looked_up = Vec::new();
        let mut lookup = |q: &str| {
            looked_up.push(q.to_owned());
            (q != "gone").then_some(FACTS)
        };
        let mut facts = Facts::new();
        assert_eq!(
            check_batch(&records, &[0, 1, 2], &mut facts, &mut lookup),
            Ok(())
        );
        assert_eq!(
            check_batch(&records, &[0, 1, 2, 3, 4], &mut facts, &mut lookup),
            Err("record t#4: queue gone does not exist".to_owned())
        );
        let e = check_batch(&records, &[4], &mut facts, &mut lookup).unwrap_err();
        assert!(e.starts_with("record t#5: queue q: "), "{e}");
        // Each queue was looked up once; its facts were kept, absence too.
        assert_eq!(looked_up, ["q", "gone"]);
        assert_eq!(facts.get("gone"), Some(&None));
    }

    #[test]
    fn cached_facts_last_a_second() {
        let cache = FactsCache::new();
        let start = cache.0.lock().unwrap().0;
        cache.put(Facts::from([("q".to_owned(), Some(FACTS))]));
        let taken = cache.take_at(start + FACTS_FOR);
        assert_eq!(taken.get("q"), Some(&Some(FACTS)));
        // Taken out for the round: the next round looks up afresh.
        assert!(cache.take_at(start + FACTS_FOR).is_empty());
        cache.put(taken);
        assert!(cache.take_at(start + FACTS_FOR * 2).is_empty());
    }
}

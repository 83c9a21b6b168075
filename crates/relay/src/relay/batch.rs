//! Records as the relay holds them between reading and committing: each
//! read record with its plan ([`Planned`]), and the records cut into
//! delivery batches. A batch is the unit of pre-check, retry and bisection:
//! a contiguous run of records, so whatever part of a round is committed,
//! the checkpoint moves over a contiguous range.

use std::collections::BTreeMap;

use crate::config::{PipeSpec, Rule};
use crate::plan::{Outcome, RecordView, plan};
use crate::template::Images;
use postbox_store::api::StreamRecord;

/// A record read and planned.
pub(super) struct Planned {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) created_ms: u64,
    pub(super) outcome: Outcome,
    /// The record as read, for its dead letter.
    pub(super) record: StreamRecord,
}

impl Planned {
    /// The whole record in the Pipe's JSON form (its plan read only what
    /// the pipe needs), with `json` borrowed by the view handed to `f`.
    pub(super) fn with_view<T>(&self, table: &str, f: impl FnOnce(RecordView<'_>) -> T) -> T {
        let json = crate::record::to_json(table, &self.record);
        f(RecordView {
            json: &json,
            id: &self.id,
            created_ms: self.created_ms,
            images: None,
        })
    }

    /// Whether the record has deliveries (possibly none: a bus event no
    /// rule matched), as opposed to being filtered out or dead.
    pub(super) fn delivers(&self) -> bool {
        matches!(self.outcome, Outcome::Deliver(_))
    }
}

/// Plans each of `records`, read from `pipe`'s table, at time `now_ms`.
/// Those whose sequence numbers are in `refused` (ascending) were refused
/// on their keys ([`PipeSpec::keys_allow`]) and read without images: they
/// are filtered out.
///
/// Each record's JSON holds only what the pipe's filters and templates
/// read of its images ([`PipeSpec::projection`]); a whole image goes into a message
/// straight from the item.
pub(super) fn plan_records(
    pipe: &PipeSpec,
    buses: &BTreeMap<String, Vec<Rule>>,
    records: Vec<StreamRecord>,
    refused: &[u64],
    now_ms: u64,
) -> Vec<Planned> {
    let table = &pipe.table;
    let projection = pipe.projection();
    let mut refused = refused.iter().copied().peekable();
    records
        .into_iter()
        .map(|r| {
            let id = crate::record::record_id(table, r.sequence_number);
            if refused.next_if_eq(&r.sequence_number).is_some() {
                return Planned {
                    seq: r.sequence_number,
                    id,
                    created_ms: r.approximate_creation_time_ms,
                    outcome: Outcome::Filtered,
                    record: r,
                };
            }
            let json = crate::record::to_json_projected(table, &r, &projection);
            let view = RecordView {
                json: &json,
                id: &id,
                created_ms: r.approximate_creation_time_ms,
                images: Some(Images::of(&r)),
            };
            // A record of a traced event: the relay's hop in its trace.
            let traced = postbox_trace::enabled()
                .then(|| json["dynamodb"]["NewImage"][postbox_trace::ATTRIBUTE]["S"].as_str())
                .flatten();
            let outcome = match traced {
                Some(trace) => {
                    let span = tracing::info_span!("relay", pipe = %pipe.name, record = %id);
                    postbox_trace::follow(&span, Some(trace));
                    span.in_scope(|| plan(pipe, buses, view, now_ms))
                }
                None => plan(pipe, buses, view, now_ms),
            };
            Planned {
                seq: r.sequence_number,
                id,
                created_ms: r.approximate_creation_time_ms,
                outcome,
                record: r,
            }
        })
        .collect()
}

/// Splits records into delivery batches: contiguous runs holding at most
/// `size` delivering records (filtered and dead records ride along, so the
/// checkpoint always moves over a contiguous range).
pub(super) fn batches(planned: &[Planned], size: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut delivering = 0;
    for (i, p) in planned.iter().enumerate() {
        if p.delivers() && delivering == size {
            out.push(std::mem::take(&mut current));
            delivering = 0;
        }
        delivering += usize::from(p.delivers());
        current.push(i);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use postbox_item::{AttributeValue, Item};
    use postbox_store::api::{EventName, StreamViewType};

    use super::*;
    use crate::RelayConfig;
    use crate::plan::{DeadReason, Delivery};

    /// A planned record `t#seq` with `outcome` (for this module's tests and
    /// its siblings').
    pub(in crate::relay) fn planned(seq: u64, outcome: Outcome) -> Planned {
        Planned {
            seq,
            id: format!("t#{seq}"),
            created_ms: 0,
            outcome,
            record: StreamRecord {
                sequence_number: seq,
                event_name: EventName::Insert,
                approximate_creation_time_ms: 0,
                keys: Item::from([("pk".to_owned(), AttributeValue::s(format!("k{seq}")))]),
                new_image: None,
                old_image: None,
                view_type: StreamViewType::KeysOnly,
                ttl_removal: false,
                size_bytes: 0,
            },
        }
    }

    /// `D` delivers (nothing), `F` is filtered, `X` is dead.
    fn records(shape: &str) -> Vec<Planned> {
        shape
            .chars()
            .enumerate()
            .map(|(i, c)| {
                let outcome = match c {
                    'D' => Outcome::Deliver(Vec::new()),
                    'F' => Outcome::Filtered,
                    _ => Outcome::Dead(DeadReason::Delivery("x".into())),
                };
                planned(i as u64 + 1, outcome)
            })
            .collect()
    }

    #[test]
    fn batches_hold_at_most_size_delivering_records_in_order() {
        let b = batches(&records(&"D".repeat(25)), 10);
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
        assert_eq!(b.concat(), (0..25).collect::<Vec<_>>());
    }

    #[test]
    fn filtered_and_dead_records_ride_along_in_the_batch_they_fall_in() {
        assert_eq!(
            batches(&records("DFXDDF"), 2),
            [vec![0, 1, 2, 3], vec![4, 5]]
        );
        // A batch is cut only before a delivering record: what follows the
        // last one stays with it.
        assert_eq!(batches(&records("DDFF"), 2), [vec![0, 1, 2, 3]]);
        assert_eq!(batches(&records("FFF"), 1), [vec![0, 1, 2]]);
        assert!(batches(&records(""), 10).is_empty());
    }

    #[test]
    fn records_are_planned_at_the_given_time_with_their_ids() {
        let config = RelayConfig::from_toml(
            r#"
[pipes.p]
source = "t"
filters = ['{"dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}}}}']
target = { queue = "q" }
"#,
        )
        .unwrap();
        let pipe = &config.pipes[0];
        let record = |seq: u64, status: &str| {
            let keys = Item::from([("pk".to_owned(), AttributeValue::s(format!("k{seq}")))]);
            let mut image = keys.clone();
            image.insert("status".into(), AttributeValue::s(status));
            StreamRecord {
                sequence_number: seq,
                event_name: EventName::Insert,
                approximate_creation_time_ms: 1_000 * seq,
                keys,
                new_image: Some(image),
                old_image: None,
                view_type: StreamViewType::NewImage,
                ttl_removal: false,
                size_bytes: 0,
            }
        };
        let read = vec![record(7, "PENDING"), record(8, "DONE")];
        let p = plan_records(pipe, &config.buses, read.clone(), &[], 7_000);
        assert_eq!(
            p.iter()
                .map(|p| (p.seq, p.id.as_str(), p.created_ms))
                .collect::<Vec<_>>(),
            [(7, "t#7", 7_000), (8, "t#8", 8_000)]
        );
        let Outcome::Deliver(list) = &p[0].outcome else {
            panic!("{:?}", p[0].outcome)
        };
        let [Delivery::Queue(m)] = &list[..] else {
            panic!("{list:?}")
        };
        assert_eq!(m.queue, "q");
        let body: serde_json::Value = serde_json::from_str(&m.message.body).unwrap();
        assert_eq!(body["dynamodb"]["NewImage"]["pk"]["S"], "k7");
        assert_eq!(p[1].outcome, Outcome::Filtered);
        // Planned a day later, the matching record is too old.
        let late = plan_records(pipe, &config.buses, read, &[], 7_000 + 86_400_000 * 2);
        assert!(matches!(
            late[0].outcome,
            Outcome::Dead(DeadReason::TooOld { .. })
        ));
    }
}

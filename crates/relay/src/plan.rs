//! What one stream record becomes for a pipe: filtered out, a list of
//! deliveries (queue messages, log lines), or a dead letter with its reason.
//! Pure: the clock is passed in, nothing is sent.

use std::collections::BTreeMap;

use postbox_item::AttributeValue;
use postbox_queue::{ItemRef, NewMessage};
use serde_json::{Value, json};

use crate::config::{PipeSpec, PipeTarget, Rule};
use crate::template::{RenderContext, TemplateError};

pub(crate) use crate::delivery::queue_message;
pub use crate::delivery::{Delivery, QueueMessage};

/// Why a record goes to the dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadReason {
    /// The input template (or a group/dedup id template) failed.
    Template(TemplateError),
    /// The record is older than the pipe's maximum record age.
    TooOld {
        /// Its age in seconds.
        age_seconds: u64,
        /// The pipe's maximum.
        max_seconds: u64,
    },
    /// Delivery failed on every retry, and bisection isolated the record.
    Delivery(String),
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeadReason::Template(e) => write!(f, "{e}"),
            DeadReason::TooOld {
                age_seconds,
                max_seconds,
            } => {
                write!(
                    f,
                    "the record is {age_seconds} s old, older than the pipe's maximum record age of {max_seconds} s"
                )
            }
            DeadReason::Delivery(e) => write!(f, "delivery failed after every retry: {e}"),
        }
    }
}

impl DeadReason {
    /// A short stable code for counters and the dead letter's `errorCode`.
    pub fn code(&self) -> &'static str {
        match self {
            DeadReason::Template(_) => "TemplateError",
            DeadReason::TooOld { .. } => "MaximumRecordAgeExceeded",
            DeadReason::Delivery(_) => "DeliveryFailed",
        }
    }
}

/// What a record becomes.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// No filter matched: nothing to do.
    Filtered,
    /// Deliver these (possibly none: a bus event no rule matched).
    Deliver(Vec<Delivery>),
    /// Send the record to the dead-letter queue.
    Dead(DeadReason),
}

/// A stream record as the planner needs it.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    /// The record in the Pipe's JSON form.
    pub json: &'a Value,
    /// `table#sequence`, for messages.
    pub id: &'a str,
    /// Commit time in ms since the epoch.
    pub created_ms: u64,
    /// The record's images as items, when it was read here: templates
    /// write a whole image from them, and `json` may then hold only what
    /// [`crate::record::Projection`] keeps.
    pub images: Option<crate::template::Images<'a>>,
}

/// Plans `record` for `pipe` at time `now_ms`.
pub fn plan(
    pipe: &PipeSpec,
    buses: &BTreeMap<String, Vec<Rule>>,
    record: RecordView<'_>,
    now_ms: u64,
) -> Outcome {
    if !crate::pattern::any_matches(&pipe.filters, record.json) {
        return Outcome::Filtered;
    }
    let age_ms = now_ms.saturating_sub(record.created_ms);
    if age_ms > pipe.max_record_age.as_millis() as u64 {
        return Outcome::Dead(DeadReason::TooOld {
            age_seconds: age_ms / 1000,
            max_seconds: pipe.max_record_age.as_secs(),
        });
    }
    let cx = RenderContext {
        pipe_name: &pipe.name,
        record_id: record.id,
        ingestion_time_ms: record.created_ms,
        images: record.images,
    };
    match deliveries(pipe, buses, record, &cx) {
        Ok(d) => Outcome::Deliver(d),
        Err(e) => Outcome::Dead(DeadReason::Template(e)),
    }
}

/// The event row a message's body is, when the body is that row's whole
/// image: the queue then keeps a reference to the row instead of a copy.
/// Only the engine writes event rows and it never changes one, so the
/// row's image stays the body for as long as the message lives.
fn event_row(pipe: &PipeSpec, cx: &RenderContext<'_>) -> Option<ItemRef> {
    use postbox_topology::keys::{EVENT_SUFFIX, PK, SK, TENANT_PREFIX};
    if pipe.table != postbox_topology::EVENTS_TABLE || !pipe.template.is_whole_new_image() {
        return None;
    }
    let new = cx.images?.new?;
    let pk = new.get(PK)?;
    let sk = new.get(SK)?;
    match pk {
        AttributeValue::S(pk) if pk.starts_with(TENANT_PREFIX) && pk.ends_with(EVENT_SUFFIX) => {}
        _ => return None,
    }
    let key = [(PK.to_owned(), pk.clone()), (SK.to_owned(), sk.clone())];
    Some(ItemRef {
        table: pipe.table.clone(),
        key: key.into_iter().collect(),
    })
}

fn deliveries(
    pipe: &PipeSpec,
    buses: &BTreeMap<String, Vec<Rule>>,
    record: RecordView<'_>,
    cx: &RenderContext<'_>,
) -> Result<Vec<Delivery>, TemplateError> {
    let body = pipe.template.render(record.json, cx)?;
    match &pipe.target {
        PipeTarget::Queue(q) => {
            let mut delivery = queue_message(q, body, record.json, cx, "<$.eventID>")?;
            delivery.message.body_of = event_row(pipe, cx);
            Ok(vec![Delivery::Queue(delivery)])
        }
        PipeTarget::Bus {
            bus,
            detail_type,
            source,
        } => {
            // A JSON input becomes the event's detail; text is carried as a string.
            let detail = serde_json::from_str(&body).unwrap_or(Value::String(body));
            let event = crate::bus::event(
                &pipe.name,
                record.id,
                detail_type,
                source,
                record.created_ms,
                detail,
            );
            let mut out = Vec::new();
            crate::bus::route(buses, bus, &event, cx, &mut out)?;
            Ok(out)
        }
    }
}

/// Largest dead letter body before the record is cut down to its keys.
const MAX_DEAD_LETTER_BYTES: usize = 200 * 1024;

/// The dead letter of a record: the record itself, why it failed, and when.
/// FIFO dead-letter queues get the pipe as group and the record as
/// deduplication id.
pub fn dead_letter(
    pipe: &str,
    dlq: &str,
    record: RecordView<'_>,
    reason: &DeadReason,
    now_ms: u64,
) -> QueueMessage {
    let body = json!({
        "pipe": pipe,
        "recordId": record.id,
        "errorCode": reason.code(),
        "reason": reason.to_string(),
        "failedAt": crate::record::rfc3339(now_ms),
        "record": record.json,
    });
    let mut body = body.to_string();
    if body.len() > MAX_DEAD_LETTER_BYTES {
        // A queue message holds at most 256 KiB and a record can be larger
        // (two 400 KB images): keep the keys, which find it in the table.
        let keys = json!({
            "eventName": record.json["eventName"],
            "dynamodb": {"Keys": record.json["dynamodb"]["Keys"], "SequenceNumber": record.json["dynamodb"]["SequenceNumber"]},
        });
        body = json!({
            "pipe": pipe,
            "recordId": record.id,
            "errorCode": reason.code(),
            "reason": reason.to_string(),
            "failedAt": crate::record::rfc3339(now_ms),
            "recordTruncated": true,
            "record": keys,
        })
        .to_string();
    }
    let mut message = NewMessage::new(body);
    if dlq.ends_with(".fifo") {
        message.group_id = Some(pipe.to_owned());
        message.deduplication_id = Some(
            record
                .id
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation())
                .take(128)
                .collect(),
        );
    }
    QueueMessage {
        queue: dlq.to_owned(),
        message,
    }
}

/// `postbox pipe test`: runs pipe `pipe_name`'s filters and templates over
/// one record (the Pipe's JSON form, as DynamoDB Streams gives it) and says
/// what would happen, in words. `Err` when the record would fail, with the
/// reason (e.g. the template path that does not resolve).
pub fn test_record(
    config: &crate::config::RelayConfig,
    pipe_name: &str,
    record: &Value,
) -> Result<TestReport, TestError> {
    let Some(pipe) = config.pipe(pipe_name) else {
        let names: Vec<&str> = config.pipes.iter().map(|p| p.name.as_str()).collect();
        return Err(TestError::Input(format!(
            "no pipe {pipe_name:?} in the config (pipes: {})",
            names.join(", ")
        )));
    };
    let mut out = String::new();
    for w in &pipe.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    let created_ms = record["dynamodb"]["ApproximateCreationDateTime"]
        .as_f64()
        .map_or(0, |s| (s * 1000.0) as u64);
    let seq = record["dynamodb"]["SequenceNumber"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    let id = crate::record::record_id(&pipe.table, seq);
    let view = RecordView {
        json: record,
        id: &id,
        created_ms,
        images: None,
    };
    let outcome = plan(pipe, &config.buses, view, created_ms);
    let filtered = matches!(outcome, Outcome::Filtered);
    match outcome {
        Outcome::Filtered => out.push_str(&format!(
            "filtered out: none of the {} filter(s) of pipe {} matches\n",
            pipe.filters.len(),
            pipe.name
        )),
        Outcome::Dead(reason) => {
            return Err(TestError::Dead(
                format!(
                    "the record would go to the dead-letter queue {}: {reason}\n{out}",
                    pipe.dead_letter_queue
                )
                .trim_end()
                .to_owned(),
            ));
        }
        Outcome::Deliver(list) if list.is_empty() => out
            .push_str("matched, but no rule of the bus matches the event: nothing is delivered\n"),
        Outcome::Deliver(list) => {
            for d in list {
                match d {
                    Delivery::Queue(QueueMessage { queue, message }) => {
                        out.push_str(&format!("queue {queue}"));
                        if let Some(g) = &message.group_id {
                            out.push_str(&format!(" (MessageGroupId {g}"));
                            if let Some(d) = &message.deduplication_id {
                                out.push_str(&format!(", MessageDeduplicationId {d}"));
                            }
                            out.push(')');
                        }
                        out.push_str(&format!(":\n{}\n", message.body));
                    }
                    Delivery::Log { path, line } => {
                        out.push_str(&format!("log {}:\n{line}\n", path.display()))
                    }
                }
            }
        }
    }
    Ok(TestReport {
        filtered,
        text: out,
    })
}

/// What `postbox pipe test` found for a record that is not dead-lettered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestReport {
    /// No filter of the pipe matched the record (nothing would be sent).
    pub filtered: bool,
    /// What would happen, in words (warnings first).
    pub text: String,
}

impl std::fmt::Display for TestReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// [`test_record`] over a record given as JSON text.
pub fn test_record_text(
    config: &crate::config::RelayConfig,
    pipe_name: &str,
    text: &str,
) -> Result<TestReport, TestError> {
    let record: Value = serde_json::from_str(text)
        .map_err(|e| TestError::Input(format!("the record is not JSON: {e}")))?;
    if !record.is_object() {
        return Err(TestError::Input(
            "the record must be a JSON object: one DynamoDB stream record as a Pipe receives it"
                .to_owned(),
        ));
    }
    test_record(config, pipe_name, &record)
}

/// Why `postbox pipe test` did not pass a record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TestError {
    /// The request is wrong: no such pipe, a record that is not one.
    #[error("{0}")]
    Input(String),
    /// The record would go to the dead-letter queue, with the reason.
    #[error("{0}")]
    Dead(String),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::RelayConfig;

    const CONFIG: &str = r#"
[pipes.jobs]
source = "jobs"
filters = ['{"dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}}}}']
input_template = '{"jobId": "<$.dynamodb.NewImage.jobId.S>"}'
target = { queue = "jobs.fifo", message_group_id = "<$.dynamodb.NewImage.tenant.S>" }
"#;

    fn record(image: serde_json::Value) -> serde_json::Value {
        json!({"eventName": "INSERT", "eventID": "7", "dynamodb": {"SequenceNumber": "000000000000000000007", "NewImage": image}})
    }

    #[test]
    fn oversized_dead_letters_keep_the_keys() {
        let big = record(json!({"blob": {"S": "x".repeat(300 * 1024)}}));
        let view = RecordView {
            json: &big,
            id: "jobs#7",
            created_ms: 0,
            images: None,
        };
        let m = dead_letter(
            "jobs",
            "jobs-dlq",
            view,
            &DeadReason::Delivery("too big".into()),
            0,
        );
        assert!(m.message.body.len() < 1024, "{}", m.message.body.len());
        let body: serde_json::Value = serde_json::from_str(&m.message.body).unwrap();
        assert_eq!(body["recordTruncated"], true);
        assert_eq!(
            body["record"]["dynamodb"]["SequenceNumber"],
            "000000000000000000007"
        );
    }

    #[test]
    fn pipe_test_shows_the_message_or_the_error() {
        let c = RelayConfig::from_toml(CONFIG).unwrap();
        let ok = record(
            json!({"status": {"S": "PENDING"}, "jobId": {"S": "j1"}, "tenant": {"S": "acme"}}),
        );
        assert_eq!(
            test_record(&c, "jobs", &ok).unwrap().text,
            "queue jobs.fifo (MessageGroupId acme, MessageDeduplicationId 7):\n{\"jobId\": \"j1\"}\n"
        );
        let filtered = record(json!({"status": {"S": "DONE"}}));
        assert!(
            test_record(&c, "jobs", &filtered)
                .unwrap()
                .text
                .starts_with("filtered out")
        );
        let bad = record(json!({"status": {"S": "PENDING"}, "tenant": {"S": "acme"}}));
        assert_eq!(
            test_record(&c, "jobs", &bad).unwrap_err().to_string(),
            "the record would go to the dead-letter queue jobs-dlq: input template path $.dynamodb.NewImage.jobId.S does not resolve in record jobs#7"
        );
        assert!(
            matches!(test_record(&c, "nope", &ok), Err(TestError::Input(m)) if m.contains("no pipe \"nope\""))
        );
    }

    /// The message of `image` written by the events table's whole-image
    /// pipe (the default events pipe's template, without its filter).
    fn events_message(template: &str, image: serde_json::Value) -> NewMessage {
        let mut pipe = crate::config::default_events_pipe(postbox_topology::EVENTS_TABLE, "q.fifo");
        pipe.filters.clear();
        pipe.template = crate::template::Template::parse(template).unwrap();
        let item = postbox_item::item_from_json(&image).unwrap();
        let json = record(image);
        let view = RecordView {
            json: &json,
            id: "postbox_events#7",
            created_ms: 0,
            images: Some(crate::template::Images {
                new: Some(&item),
                old: None,
            }),
        };
        match plan(&pipe, &BTreeMap::new(), view, 0) {
            Outcome::Deliver(d) => match d.as_slice() {
                [Delivery::Queue(q)] => q.message.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_an_event_row_s_whole_image_goes_by_reference() {
        use postbox_topology::keys::{event_pk, verified_pk};
        let event = json!({"pk": {"S": event_pk("acme")}, "sk": {"S": "00000000000000000001"},
            "id": {"S": "e1"}, "tenant": {"S": "acme"}});
        let m = events_message("<$.dynamodb.NewImage>", event.clone());
        let key = json!({"pk": {"S": event_pk("acme")}, "sk": {"S": "00000000000000000001"}});
        assert_eq!(
            m.body_of,
            Some(ItemRef {
                table: postbox_topology::EVENTS_TABLE.to_owned(),
                key: postbox_item::item_from_json(&key).unwrap(),
            })
        );
        assert_eq!(
            m.body,
            postbox_item::json::item_to_string(&postbox_item::item_from_json(&event).unwrap())
        );
        // Another template, or a row the engine rewrites: copied.
        let copied = events_message(r#"{"e": <$.dynamodb.NewImage>}"#, event);
        assert_eq!(copied.body_of, None);
        let checkpoint = json!({"pk": {"S": verified_pk("acme")}, "sk": {"S": "VERIFIED"},
            "tenant": {"S": "acme"}, "id": {"S": "x"}});
        assert_eq!(
            events_message("<$.dynamodb.NewImage>", checkpoint).body_of,
            None
        );
    }
}

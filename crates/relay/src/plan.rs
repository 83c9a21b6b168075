//! What one stream record becomes for a pipe: filtered out, a list of
//! deliveries (queue messages, log lines), or a dead letter with its reason.
//! Pure: the clock is passed in, nothing is sent.

use std::collections::BTreeMap;
use std::path::PathBuf;

use postbox_queue::NewMessage;
use serde_json::{Value, json};

use crate::config::{PipeSpec, PipeTarget, QueueTarget, Rule};
use crate::template::{RenderContext, Template, TemplateError};

/// One thing to deliver.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// A message for a queue.
    Queue(QueueMessage),
    /// A line for a JSON-lines log file.
    Log {
        /// The file.
        path: PathBuf,
        /// The line, without its newline.
        line: String,
    },
}

/// A message and the queue it goes to.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueMessage {
    /// The queue's name.
    pub queue: String,
    /// The message.
    pub message: NewMessage,
}

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
            DeadReason::TooOld { age_seconds, max_seconds } => {
                write!(f, "the record is {age_seconds} s old, older than the pipe's maximum record age of {max_seconds} s")
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
}

/// Plans `record` for `pipe` at time `now_ms`.
pub fn plan(pipe: &PipeSpec, buses: &BTreeMap<String, Vec<Rule>>, record: RecordView<'_>, now_ms: u64) -> Outcome {
    if !crate::pattern::any_matches(&pipe.filters, record.json) {
        return Outcome::Filtered;
    }
    let age_ms = now_ms.saturating_sub(record.created_ms);
    if age_ms > pipe.max_record_age.as_millis() as u64 {
        return Outcome::Dead(DeadReason::TooOld { age_seconds: age_ms / 1000, max_seconds: pipe.max_record_age.as_secs() });
    }
    let cx = RenderContext { pipe_name: &pipe.name, record_id: record.id, ingestion_time_ms: record.created_ms };
    match deliveries(pipe, buses, record, &cx) {
        Ok(d) => Outcome::Deliver(d),
        Err(e) => Outcome::Dead(DeadReason::Template(e)),
    }
}

fn deliveries(
    pipe: &PipeSpec,
    buses: &BTreeMap<String, Vec<Rule>>,
    record: RecordView<'_>,
    cx: &RenderContext<'_>,
) -> Result<Vec<Delivery>, TemplateError> {
    let body = pipe.template.render(record.json, cx)?;
    match &pipe.target {
        PipeTarget::Queue(q) => Ok(vec![Delivery::Queue(queue_message(q, body, record.json, cx, "<$.eventID>")?)]),
        PipeTarget::Bus { bus, detail_type, source } => {
            // A JSON input becomes the event's detail; text is carried as a string.
            let detail = serde_json::from_str(&body).unwrap_or(Value::String(body));
            let event = crate::bus::event(&pipe.name, record.id, detail_type, source, record.created_ms, detail);
            let mut out = Vec::new();
            crate::bus::route(buses, bus, &event, cx, &mut out)?;
            Ok(out)
        }
    }
}

/// The message for queue target `q`: group and deduplication ids rendered
/// over `doc` (a FIFO queue without a dedup template deduplicates on
/// `default_dedup`, so a redelivered record is not enqueued twice).
pub(crate) fn queue_message(
    q: &QueueTarget,
    body: String,
    doc: &Value,
    cx: &RenderContext<'_>,
    default_dedup: &str,
) -> Result<QueueMessage, TemplateError> {
    let mut message = NewMessage::new(body);
    if q.fifo {
        let render = |t: Option<&Template>| -> Result<Option<String>, TemplateError> { t.map(|t| t.render(doc, cx)).transpose() };
        message.group_id = render(q.group_id.as_ref())?;
        message.deduplication_id = match render(q.dedup_id.as_ref())? {
            Some(id) => Some(id),
            None => Some(Template::parse(default_dedup).expect("valid").render(doc, cx)?),
        };
    }
    Ok(QueueMessage { queue: q.queue.clone(), message })
}

/// The dead letter of a record: the record itself, why it failed, and when.
/// FIFO dead-letter queues get the pipe as group and the record as
/// deduplication id.
pub fn dead_letter(pipe: &str, dlq: &str, record: RecordView<'_>, reason: &DeadReason, now_ms: u64) -> QueueMessage {
    let body = json!({
        "pipe": pipe,
        "recordId": record.id,
        "errorCode": reason.code(),
        "reason": reason.to_string(),
        "failedAt": crate::record::rfc3339(now_ms),
        "record": record.json,
    });
    let mut message = NewMessage::new(body.to_string());
    if dlq.ends_with(".fifo") {
        message.group_id = Some(pipe.to_owned());
        message.deduplication_id = Some(record.id.chars().filter(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation()).take(128).collect());
    }
    QueueMessage { queue: dlq.to_owned(), message }
}

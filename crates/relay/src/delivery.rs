//! What a pipe delivers: a queue message or a log line, and how a queue
//! target's message is made (its group and deduplication ids rendered).
//! Shared by the planning of a record (`plan`) and the event buses (`bus`).

use std::path::PathBuf;

use postbox_queue::NewMessage;
use serde_json::Value;

use crate::config::QueueTarget;
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
        let render = |t: Option<&Template>| -> Result<Option<String>, TemplateError> {
            t.map(|t| t.render(doc, cx)).transpose()
        };
        message.group_id = render(q.group_id.as_ref())?;
        message.deduplication_id = match render(q.dedup_id.as_ref())? {
            Some(id) => Some(id),
            None => Some(
                Template::parse(default_dedup)
                    .expect("valid")
                    .render(doc, cx)?,
            ),
        };
    }
    Ok(QueueMessage {
        queue: q.queue.clone(),
        message,
    })
}

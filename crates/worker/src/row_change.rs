//! The row-change consumer (lane BEST_EFFORT): delivers changes of
//! entity tables to the catalog's BEST_EFFORT subscriptions.
//!
//! The relay's row-change pipes forward each stream record of a declared
//! entity's item, whole, to a standard queue. Any number of consumers
//! receive from it: a record's type is `row:<ENTITY>:<INSERT|MODIFY|REMOVE>`
//! (ENTITY the item's `pk` before the first `#`), every BEST_EFFORT handler
//! whose glob matches it runs, and the message is deleted whatever they
//! returned. No order, no claims, no retries, no dead letters: a failing
//! handler is logged and counted and never holds anything back. A message
//! the queue hands out again (a consumer died, or a batch outlived the
//! visibility timeout) runs its handlers again: handlers on this lane must
//! tolerate seeing a change twice.
//!
//! A batch's handlers run concurrently, each as its own task with a time
//! limit, so one slow or panicking handler costs only itself.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use postbox_engine::catalog::{Catalog, Lane, ROW_PREFIX};
use postbox_engine::glob::Glob;
use postbox_item::{AttributeValue, Item, item_from_json};
use postbox_queue::{QueueClient, ReceiveOptions, ReceivedMessage};
use postbox_stats::add;
use serde_json::Value;

use crate::error::{WorkerError, WorkerResult};
use crate::handler::HandlerError;

/// The standard queue the relay's default row-change pipes fill.
pub const DEFAULT_ROW_CHANGES_QUEUE: &str = postbox_topology::ROW_CHANGES_QUEUE;

/// One change of an entity's item, as its stream record told it.
#[derive(Clone, Debug, PartialEq)]
pub struct RowChange {
    /// `row:<ENTITY>:<OP>`, what subscription globs match.
    pub row_type: String,
    /// The item's `pk` before the first `#`.
    pub entity: String,
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub op: String,
    /// The table, from the record's stream ARN (None if it names none).
    pub table: Option<String>,
    /// The item's key attributes.
    pub keys: Item,
    /// The item after the change (absent on REMOVE, or by the stream's view type).
    pub new_image: Option<Item>,
    /// The item before the change (absent on INSERT, or by the stream's view type).
    pub old_image: Option<Item>,
    /// The stream record's sequence number, as the record wrote it.
    pub sequence_number: String,
    /// Whether the store's TTL sweeper removed the item.
    pub ttl_removal: bool,
}

/// One run of a BEST_EFFORT handler.
#[derive(Clone, Debug)]
pub struct RowDelivery {
    /// The change.
    pub change: RowChange,
    /// The subscription it is delivered to.
    pub subscription: String,
}

/// A row-change handler's future; its error is logged and counted, never retried.
pub type RowHandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// A BEST_EFFORT handler.
pub type RowHandler = Arc<dyn Fn(RowDelivery) -> RowHandlerFuture + Send + Sync>;

/// A [`RowHandler`] from an async closure.
pub fn row_handler<F, Fut>(f: F) -> RowHandler
where
    F: Fn(RowDelivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    Arc::new(move |d| Box::pin(f(d)))
}

/// How a row-change consumer runs.
#[derive(Clone, Debug)]
pub struct RowChangeOptions {
    /// The standard queue the row-change pipes fill.
    pub queue: String,
    /// Long-poll wait of a receive, seconds (0..=20).
    pub wait_seconds: i64,
    /// Visibility of a received batch, seconds; longer than `handler_timeout`
    /// so a batch is settled before the queue hands it out again.
    pub visibility_seconds: i64,
    /// Longest a handler may run; past it the run is abandoned and counted
    /// as failed.
    pub handler_timeout: Duration,
}

impl Default for RowChangeOptions {
    fn default() -> Self {
        RowChangeOptions {
            queue: DEFAULT_ROW_CHANGES_QUEUE.into(),
            wait_seconds: 1,
            visibility_seconds: 60,
            handler_timeout: Duration::from_secs(30),
        }
    }
}

postbox_stats::counters! {
    /// A row-change consumer's counters.
    pub struct RowChangeStats;
    struct Counters {
        /// Messages received.
        received,
        /// Messages deleted.
        deleted,
        /// Handler runs that returned Ok.
        handled,
        /// Handler runs that failed, panicked or timed out (logged; not retried).
        failed,
        /// Row changes no subscription matched.
        delivered_to_nobody,
        /// Bodies that are no row-change record (logged and deleted).
        unparsable,
        /// Deletes the queue refused (the messages come back and run again).
        settle_failures,
    }
}

struct Bound {
    name: String,
    glob: Glob,
    handler: RowHandler,
}

struct Inner<Q> {
    queues: Q,
    options: RowChangeOptions,
    subscriptions: Vec<Bound>,
    counters: Counters,
    /// "Delivered to nobody", logged once a minute per row type.
    nobody: postbox_engine::throttle::Throttle,
}

/// The BEST_EFFORT dispatcher. Cheap to clone; clones share counters.
pub struct RowChangeConsumer<Q> {
    inner: Arc<Inner<Q>>,
}

impl<Q> Clone for RowChangeConsumer<Q> {
    fn clone(&self) -> Self {
        RowChangeConsumer {
            inner: self.inner.clone(),
        }
    }
}

/// What one batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowBatchReport {
    /// Messages received.
    pub received: usize,
    /// Messages deleted.
    pub deleted: usize,
}

impl<Q: QueueClient> RowChangeConsumer<Q> {
    /// A consumer for the catalog's BEST_EFFORT subscriptions, with
    /// `handlers` by the catalog's handler reference. Refuses to start when
    /// one's handler is missing or the queue cannot be read.
    pub async fn new(
        queues: Q,
        catalog: &Catalog,
        handlers: HashMap<String, RowHandler>,
        options: RowChangeOptions,
    ) -> WorkerResult<RowChangeConsumer<Q>> {
        let mut subscriptions = Vec::new();
        for s in catalog
            .subscriptions
            .iter()
            .filter(|s| s.lane == Lane::BestEffort)
        {
            let handler = handlers.get(&s.handler).cloned().ok_or_else(|| {
                WorkerError::Config(format!(
                    "BEST_EFFORT subscription {:?} names handler {:?}, which is not registered with the row-change consumer",
                    s.name, s.handler
                ))
            })?;
            subscriptions.push(Bound {
                name: s.name.clone(),
                glob: Glob::new(&s.glob),
                handler,
            });
        }
        queues
            .queue_attributes(&options.queue, &["QueueArn".to_owned()])
            .await
            .map_err(|e| {
                WorkerError::Config(format!(
                    "the row-change queue {} cannot be read ({e}); create it, or start the relay's row-change pipes first",
                    options.queue
                ))
            })?;
        Ok(RowChangeConsumer {
            inner: Arc::new(Inner {
                queues,
                options,
                subscriptions,
                counters: Counters::default(),
                nobody: Default::default(),
            }),
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> RowChangeStats {
        self.inner.counters.snapshot()
    }

    /// Runs batches until `stop` turns true; a failed receive is logged and
    /// retried after a pause.
    pub async fn run(&self, stop: tokio::sync::watch::Receiver<bool>) {
        postbox_queue::consume(
            "row-change consumer",
            1,
            stop,
            || self.receive(),
            |messages| {
                let me = self.clone();
                async move {
                    if let Err(e) = me.process_batch(messages).await {
                        tracing::error!(error = %e, "row-change batch failed; its messages come back after their visibility timeout");
                    }
                }
            },
        )
        .await
    }

    /// Receives one batch (up to 10 messages) and processes it.
    pub async fn run_once(&self) -> WorkerResult<RowBatchReport> {
        let messages = self.receive().await?;
        self.process_batch(messages).await
    }

    /// Receives up to 10 messages, hidden for the visibility timeout.
    async fn receive(&self) -> WorkerResult<Vec<ReceivedMessage>> {
        let o = &self.inner.options;
        let options = ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(o.visibility_seconds),
            wait_time_seconds: Some(o.wait_seconds),
            ..Default::default()
        };
        Ok(self.inner.queues.receive(&o.queue, options).await?)
    }

    /// Runs every matching handler of every message concurrently, then
    /// deletes the whole batch, whatever the handlers returned.
    pub async fn process_batch(
        &self,
        messages: Vec<ReceivedMessage>,
    ) -> WorkerResult<RowBatchReport> {
        let c = &self.inner.counters;
        add(&c.received, messages.len());
        let timeout = self.inner.options.handler_timeout;
        let mut runs = tokio::task::JoinSet::new();
        for m in &messages {
            let change = match parse_record(&m.body) {
                Ok(change) => change,
                Err(reason) => {
                    tracing::error!(message_id = %m.message_id, reason, "not a row-change record; dropped");
                    add(&c.unparsable, 1);
                    continue;
                }
            };
            let mut matched = false;
            for s in &self.inner.subscriptions {
                if !s.glob.matches(&change.row_type) {
                    continue;
                }
                matched = true;
                let run = (s.handler)(RowDelivery {
                    change: change.clone(),
                    subscription: s.name.clone(),
                });
                let label = (s.name.clone(), change.row_type.clone());
                runs.spawn(async move { (label, tokio::time::timeout(timeout, run).await) });
            }
            if !matched {
                if let Some(held_back) = self
                    .inner
                    .nobody
                    .admit(&change.row_type, std::time::Instant::now())
                {
                    tracing::warn!(r#type = %change.row_type, held_back, "row change delivered to nobody (logged once a minute per type)");
                }
                add(&c.delivered_to_nobody, 1);
            }
        }
        while let Some(joined) = runs.join_next().await {
            match joined {
                Ok((_, Ok(Ok(())))) => add(&c.handled, 1),
                Ok(((subscription, row_type), Ok(Err(e)))) => {
                    tracing::warn!(%subscription, r#type = %row_type, error = %e, "row-change handler failed; not retried");
                    add(&c.failed, 1);
                }
                Ok(((subscription, row_type), Err(_))) => {
                    tracing::warn!(%subscription, r#type = %row_type, ?timeout, "row-change handler timed out; abandoned");
                    add(&c.failed, 1);
                }
                Err(e) => {
                    tracing::error!(error = %e, "row-change handler panicked");
                    add(&c.failed, 1);
                }
            }
        }
        let deleted = self.delete(&messages).await;
        Ok(RowBatchReport {
            received: messages.len(),
            deleted,
        })
    }

    /// Deletes the batch; a refusal is counted (the message comes back and
    /// runs again, which this lane allows).
    async fn delete(&self, messages: &[ReceivedMessage]) -> usize {
        if messages.is_empty() {
            return 0;
        }
        let c = &self.inner.counters;
        let handles = messages.iter().map(|m| m.receipt_handle.clone()).collect();
        let results = match self
            .inner
            .queues
            .delete_batch(&self.inner.options.queue, handles)
            .await
        {
            Ok(results) => results,
            Err(e) => vec![Err(e); messages.len()],
        };
        let mut deleted = 0;
        for (m, r) in messages.iter().zip(results) {
            match r {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(message_id = %m.message_id, error = %e, "the queue refused to delete a row change; it will run again");
                    add(&c.settle_failures, 1);
                }
            }
        }
        add(&c.deleted, deleted);
        deleted
    }
}

/// A stream record in the Pipe's JSON form back into a [`RowChange`].
pub fn parse_record(body: &str) -> Result<RowChange, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let op = v
        .get("eventName")
        .and_then(Value::as_str)
        .filter(|n| matches!(*n, "INSERT" | "MODIFY" | "REMOVE"))
        .ok_or("eventName is not INSERT, MODIFY or REMOVE")?
        .to_owned();
    let dynamodb = v.get("dynamodb").ok_or("no dynamodb section")?;
    let image = |name: &str| -> Result<Option<Item>, String> {
        dynamodb
            .get(name)
            .map(|j| item_from_json(j).map_err(|e| format!("dynamodb.{name}: {e}")))
            .transpose()
    };
    let keys = image("Keys")?.ok_or("no dynamodb.Keys")?;
    let Some(AttributeValue::S(pk)) = keys.get("pk") else {
        return Err("dynamodb.Keys has no string pk".into());
    };
    let entity = pk.split('#').next().unwrap_or_default().to_owned();
    if entity.is_empty() {
        return Err(format!("pk {pk:?} names no entity before its first '#'"));
    }
    let table = v
        .get("eventSourceARN")
        .and_then(Value::as_str)
        .and_then(|arn| arn.split(":table/").nth(1))
        .and_then(|rest| rest.split('/').next())
        .map(str::to_owned);
    Ok(RowChange {
        row_type: format!("{ROW_PREFIX}{entity}:{op}"),
        new_image: image("NewImage")?,
        old_image: image("OldImage")?,
        sequence_number: dynamodb
            .get("SequenceNumber")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        ttl_removal: v
            .pointer("/userIdentity/principalId")
            .and_then(Value::as_str)
            == Some("dynamodb.amazonaws.com"),
        entity,
        op,
        table,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_comes_from_the_event_name_and_the_pk_prefix() {
        let body = r#"{"eventName":"MODIFY","eventSourceARN":"arn:aws:dynamodb:us-east-1:000000000000:table/contacts/stream/embedded",
            "dynamodb":{"Keys":{"pk":{"S":"CONTACT#7#x"}},"NewImage":{"pk":{"S":"CONTACT#7#x"},"v":{"N":"2"}},
            "OldImage":{"pk":{"S":"CONTACT#7#x"}},"SequenceNumber":"000000000000000000042"}}"#;
        let c = parse_record(body).unwrap();
        assert_eq!(
            (c.row_type.as_str(), c.entity.as_str(), c.op.as_str()),
            ("row:CONTACT:MODIFY", "CONTACT", "MODIFY")
        );
        assert_eq!(c.table.as_deref(), Some("contacts"));
        assert_eq!(c.sequence_number, "000000000000000000042");
        assert!(c.new_image.is_some() && c.old_image.is_some() && !c.ttl_removal);
    }

    #[test]
    fn what_is_no_row_change_record_says_why() {
        let cases = [
            ("nope", "not JSON"),
            (r#"{"eventName":"UPSERT","dynamodb":{}}"#, "eventName"),
            (r#"{"eventName":"INSERT"}"#, "no dynamodb"),
            (
                r#"{"eventName":"INSERT","dynamodb":{"Keys":{"id":{"S":"a"}}}}"#,
                "no string pk",
            ),
            (
                r##"{"eventName":"INSERT","dynamodb":{"Keys":{"pk":{"S":"#a"}}}}"##,
                "names no entity",
            ),
        ];
        for (body, want) in cases {
            let e = parse_record(body).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
        }
    }
}

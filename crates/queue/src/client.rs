//! [`QueueClient`]: the queue operations the relay, the worker and the
//! operator tools need, so they run against the embedded [`Queues`] in the
//! same process or against any SQS-compatible endpoint over the wire.
//!
//! Errors keep SQS's codes ([`QueueError`](crate::QueueError)) whichever side produced them.

use std::collections::BTreeMap;
use std::future::Future;

use crate::error::QueueResult;
use crate::message::{NewMessage, ReceivedMessage, SendResult};
use crate::queues::{Queues, ReceiveOptions};

/// SQS's message operations, as Postbox's own components use them.
pub trait QueueClient: Clone + Send + Sync + 'static {
    /// ReceiveMessage: up to `options.max_messages`, long-polling up to
    /// `options.wait_time_seconds`.
    fn receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> impl Future<Output = QueueResult<Vec<ReceivedMessage>>> + Send;

    /// SendMessageBatch: up to 10 messages; one result per message, in order.
    fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<SendResult>>>> + Send;

    /// DeleteMessageBatch: up to 10 receipt handles; one result per handle.
    fn delete_batch(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<()>>>> + Send;

    /// ChangeMessageVisibilityBatch: up to 10 `(receipt handle, seconds)`.
    fn change_visibility_batch(
        &self,
        queue: &str,
        entries: Vec<(String, i64)>,
    ) -> impl Future<Output = QueueResult<Vec<QueueResult<()>>>> + Send;

    /// GetQueueAttributes for the names given (`All` for every one).
    fn queue_attributes(
        &self,
        queue: &str,
        names: &[String],
    ) -> impl Future<Output = QueueResult<BTreeMap<String, String>>> + Send;

    /// SendMessage.
    fn send(
        &self,
        queue: &str,
        message: NewMessage,
    ) -> impl Future<Output = QueueResult<SendResult>> + Send {
        async move {
            self.send_batch(queue, vec![message])
                .await?
                .pop()
                .expect("one result per message")
        }
    }

    /// DeleteMessage.
    fn delete(
        &self,
        queue: &str,
        receipt_handle: &str,
    ) -> impl Future<Output = QueueResult<()>> + Send {
        let handles = vec![receipt_handle.to_owned()];
        async move {
            self.delete_batch(queue, handles)
                .await?
                .pop()
                .expect("one result per handle")
        }
    }

    /// ChangeMessageVisibility.
    fn change_visibility(
        &self,
        queue: &str,
        receipt_handle: &str,
        timeout_seconds: i64,
    ) -> impl Future<Output = QueueResult<()>> + Send {
        let entries = vec![(receipt_handle.to_owned(), timeout_seconds)];
        async move {
            self.change_visibility_batch(queue, entries)
                .await?
                .pop()
                .expect("one result per entry")
        }
    }
}

impl QueueClient for Queues {
    async fn receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> QueueResult<Vec<ReceivedMessage>> {
        Queues::receive(self, queue, options).await
    }

    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> QueueResult<Vec<QueueResult<SendResult>>> {
        Queues::send_batch(self, queue, messages).await
    }

    async fn delete_batch(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        Queues::delete_batch(self, queue, handles).await
    }

    async fn change_visibility_batch(
        &self,
        queue: &str,
        entries: Vec<(String, i64)>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        Queues::change_visibility_batch(self, queue, entries).await
    }

    async fn queue_attributes(
        &self,
        queue: &str,
        names: &[String],
    ) -> QueueResult<BTreeMap<String, String>> {
        Queues::queue_attributes(self, queue, names)
    }
}

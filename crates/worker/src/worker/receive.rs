//! The worker's receive loop ([`postbox_queue::consume`]): receives batches of up to 10 messages from the events
//! queue, keeps up to [`WorkerOptions::batches_in_flight`] of them running,
//! splits each batch by message group (tenant), runs the groups
//! concurrently and applies their settlements together.
//!
//! [`WorkerOptions::batches_in_flight`]: super::WorkerOptions::batches_in_flight

use std::sync::atomic::Ordering;
use std::time::Instant;

use postbox_queue::{QueueClient, ReceiveOptions, ReceivedMessage};
use postbox_store::ItemStore;

use super::settle::Settlement;
use super::{Worker, group};
use crate::error::WorkerResult;

/// What one batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Messages received.
    pub received: usize,
    /// Messages deleted.
    pub deleted: usize,
}

impl<S: ItemStore, Q: QueueClient> Worker<S, Q> {
    /// Runs batches until `stop` turns true, up to
    /// [`WorkerOptions::batches_in_flight`] at once. A failed batch is
    /// logged and the loop goes on (after a pause if the receive failed):
    /// its messages stay in the queue and come back after their visibility
    /// timeout, so nothing is lost by going on.
    ///
    /// [`WorkerOptions::batches_in_flight`]: super::WorkerOptions::batches_in_flight
    pub async fn run(&self, stop: tokio::sync::watch::Receiver<bool>) {
        postbox_queue::consume(
            "worker",
            self.inner.options.batches_in_flight,
            stop,
            || self.receive(),
            |messages| {
                let w = self.clone();
                async move { w.log_batch(w.process_batch(messages).await) }
            },
        )
        .await
    }

    fn log_batch(&self, result: WorkerResult<BatchReport>) {
        if let Err(e) = result {
            tracing::error!(error = %e, "worker batch failed; its messages come back after their visibility timeout");
        }
    }

    /// Receives up to 10 messages, hidden for the lease.
    async fn receive(&self) -> WorkerResult<Vec<ReceivedMessage>> {
        let o = &self.inner.options;
        let options = ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(self.lease_seconds()),
            wait_time_seconds: Some(o.wait_seconds),
            // Same process as the store (a client over the wire ignores
            // it): a crash that loses the receive takes this worker too,
            // and the claim that follows is logged after it.
            answer_before_sync: true,
            ..Default::default()
        };
        Ok(self.inner.queues.receive(&o.queue, options).await?)
    }

    /// Receives one batch (up to 10 messages) and processes it.
    pub async fn run_once(&self) -> WorkerResult<BatchReport> {
        let messages = self.receive().await?;
        self.process_batch(messages).await
    }

    /// Processes received messages: each message group (tenant) in order,
    /// different groups concurrently. A group whose message was not settled
    /// has its later messages put back untouched.
    pub async fn process_batch(&self, messages: Vec<ReceivedMessage>) -> WorkerResult<BatchReport> {
        // The messages were received just before: their 12 hours of
        // visibility at most count from about now.
        let since = Instant::now();
        let received = messages.len();
        self.inner
            .counters
            .received
            .fetch_add(received as u64, Ordering::Relaxed);
        let mut groups = group::by_group(messages);
        let mut results = Vec::new();
        if groups.len() == 1 {
            let ms = groups.pop().unwrap_or_default();
            results.push(self.process_group(ms).await);
        } else {
            let mut tasks = tokio::task::JoinSet::new();
            for ms in groups {
                let w = self.clone();
                tasks.spawn(async move { w.process_group(ms).await });
            }
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok(r) => results.push(r),
                    Err(panic) => std::panic::resume_unwind(panic.into_panic()),
                }
            }
        }
        // Every group's settlement is applied before an error is returned:
        // what completed is deleted rather than received again for nothing.
        let mut settlement = Settlement::default();
        let mut first_error = None;
        for (s, error) in results {
            settlement.extend(s);
            if let Some(e) = error {
                first_error.get_or_insert(e);
            }
        }
        let deleted = self.apply(settlement, since).await;
        match first_error {
            Some(e) => Err(e),
            None => Ok(BatchReport { received, deleted }),
        }
    }
}

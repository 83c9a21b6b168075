//! The job runner: receives `{"jobId": ...}` messages from `jobs.fifo`,
//! claims the job with ONE conditional write, runs it, records the outcome
//! and deletes the message.
//!
//! The claim is an UpdateItem to RUNNING (attempts + 1, this runner, a
//! lease) conditioned on "the job exists, has attempts left, and is PENDING
//! or RUNNING under an expired lease". So a job another runner holds, or a
//! finished one, is never claimed again, however often its message comes
//! back; a runner that died mid-job is taken over when its lease ends; and
//! no job runs more than `max_attempts` times. Every later write is fenced
//! on (RUNNING, this runner, this attempt), so a runner whose lease was
//! taken over cannot overwrite the new holder's result.
//!
//! A failed attempt puts the job back to PENDING and leaves the message in
//! the queue to come back after `retry_delay`; the last allowed attempt
//! marks it FAILED instead. The message is deleted once the job is final.
//!
//! Known limit: the lease is not renewed while the work runs, so work must
//! finish within `lease` (the example's work is instant).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use postbox_engine::envelope::{format_timestamp, new_event_id, now_ms};
use postbox_item::{AttributeValue, Item};
use postbox_queue::{QueueClient, ReceiveOptions, ReceivedMessage};
use postbox_stats::bump;
use postbox_store::api::{GetItemInput, ReturnValue, UpdateItemInput, Values};
use postbox_store::{ItemStore, StoreError};

use super::job::{JOBS_TABLE, Job, JobStatus, job_key, number};
use super::pipes::JOBS_QUEUE;
use crate::error::ExampleError;

/// A job's work: the report's URL, or why this attempt failed.
pub type Work =
    Arc<dyn Fn(Job) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync>;

/// [`Work`] from an async closure.
pub fn work<F, Fut>(f: F) -> Work
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, String>> + Send + 'static,
{
    Arc::new(move |job| Box::pin(f(job)))
}

/// The example's work: the report is "written" to a URL named after the
/// tenant, branch and job.
pub fn fake_report() -> Work {
    work(|job: Job| async move {
        Ok(format!(
            "https://reports.example.com/{}/{}/{}.csv",
            job.tenant, job.branch, job.id
        ))
    })
}

/// How a runner runs.
#[derive(Clone, Debug)]
pub struct RunnerOptions {
    /// This runner's name, recorded on the jobs it claims.
    pub owner: String,
    /// The queue it drains.
    pub queue: String,
    /// Runs of one job at most; the last failure marks it FAILED.
    pub max_attempts: u32,
    /// How long a claim holds off other runners (and the message's
    /// visibility while the job runs).
    pub lease: Duration,
    /// When a failed attempt's message comes back.
    pub retry_delay: Duration,
    /// Long-poll wait of a receive, seconds (0..=20).
    pub wait_seconds: i64,
}

impl Default for RunnerOptions {
    fn default() -> RunnerOptions {
        RunnerOptions {
            owner: format!("report-runner-{}", new_event_id(now_ms())),
            queue: JOBS_QUEUE.to_owned(),
            max_attempts: 5,
            lease: Duration::from_secs(30),
            retry_delay: Duration::from_secs(1),
            wait_seconds: 1,
        }
    }
}

postbox_stats::counters! {
    /// What a runner did so far.
    pub struct RunnerStats;
    struct Counters {
        /// Messages received.
        received,
        /// Jobs this runner brought to SUCCEEDED.
        succeeded,
        /// Attempts that failed and were put back for a retry.
        retried,
        /// Jobs marked FAILED after their last attempt.
        failed,
        /// Messages of jobs already finished or held by another runner.
        duplicates,
        /// Messages of jobs that no longer exist (expired) or never did.
        gone,
        /// Messages whose body names no job, deleted.
        poison,
        /// Outcomes refused because another runner took the job over.
        fenced,
    }
}

/// What the claim found.
enum Claim {
    /// This runner holds the job.
    Claimed(Job),
    /// Another runner holds it until this time (ms).
    Busy(u64),
    /// It is SUCCEEDED or FAILED.
    Finished,
    /// It is not there (expired, or never existed).
    Gone,
    /// Its attempts are used up but it is not FAILED yet (a runner died on
    /// its last attempt).
    Exhausted(Job),
}

/// The job runner. Cheap to clone; clones share counters.
pub struct JobRunner<S, Q> {
    inner: Arc<Inner<S, Q>>,
}

impl<S, Q> Clone for JobRunner<S, Q> {
    fn clone(&self) -> Self {
        JobRunner {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<S, Q> {
    store: Arc<S>,
    queues: Q,
    options: RunnerOptions,
    work: Work,
    counters: Counters,
}

impl<S: ItemStore, Q: QueueClient> JobRunner<S, Q> {
    /// A runner over the jobs in `store`, draining `queues`' jobs queue.
    pub fn new(store: Arc<S>, queues: Q, options: RunnerOptions, work: Work) -> JobRunner<S, Q> {
        JobRunner {
            inner: Arc::new(Inner {
                store,
                queues,
                options,
                work,
                counters: Counters::default(),
            }),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> RunnerStats {
        self.inner.counters.snapshot()
    }

    /// Runs batches until `stop` turns true; a failed batch is retried
    /// after a pause (its messages come back after their visibility).
    pub async fn run(&self, stop: tokio::sync::watch::Receiver<bool>) {
        postbox_queue::consume(
            "report runner",
            1,
            stop,
            || self.receive(),
            |messages| {
                let me = self.clone();
                async move {
                    if let Err(e) = me.handle_all(&messages).await {
                        eprintln!("report runner {}: batch failed, its messages come back after their visibility: {e}", me.inner.options.owner);
                    }
                }
            },
        )
        .await
    }

    /// Receives up to 10 messages and handles them in order; returns how
    /// many were received.
    pub async fn run_once(&self) -> Result<usize, ExampleError> {
        let messages = self.receive().await?;
        self.handle_all(&messages).await?;
        Ok(messages.len())
    }

    /// Receives up to 10 messages, hidden for the lease.
    async fn receive(&self) -> Result<Vec<ReceivedMessage>, ExampleError> {
        let o = &self.inner.options;
        let options = ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(seconds(o.lease)),
            wait_time_seconds: Some(o.wait_seconds),
            ..Default::default()
        };
        Ok(self.inner.queues.receive(&o.queue, options).await?)
    }

    /// Handles `messages` in order, stopping at the first failure.
    async fn handle_all(&self, messages: &[ReceivedMessage]) -> Result<(), ExampleError> {
        for m in messages {
            bump(&self.inner.counters.received);
            self.handle(m).await?;
        }
        Ok(())
    }

    async fn handle(&self, m: &ReceivedMessage) -> Result<(), ExampleError> {
        let c = &self.inner.counters;
        let Some(job_id) = job_id_of(&m.body) else {
            bump(&c.poison);
            return self.delete(m).await;
        };
        match self.claim(&job_id).await? {
            Claim::Claimed(job) => self.execute(job, m).await,
            Claim::Busy(until) => {
                bump(&c.duplicates);
                let wait = until.saturating_sub(now_ms()).div_ceil(1000).max(1);
                self.inner
                    .queues
                    .change_visibility(&self.inner.options.queue, &m.receipt_handle, wait as i64)
                    .await?;
                Ok(())
            }
            Claim::Finished => {
                bump(&c.duplicates);
                self.delete(m).await
            }
            Claim::Gone => {
                bump(&c.gone);
                self.delete(m).await
            }
            Claim::Exhausted(job) => {
                let error = format!(
                    "gave up after {} attempts; the last one did not finish",
                    job.attempts
                );
                let condition = "#status = :seen AND attempts >= :max";
                let values = [
                    (":seen", AttributeValue::s(job.status.as_str())),
                    (
                        ":max",
                        AttributeValue::n(i64::from(self.inner.options.max_attempts)),
                    ),
                ];
                if self
                    .finish(&job, JobStatus::Failed, &error, condition, &values)
                    .await?
                {
                    bump(&c.failed);
                }
                self.delete(m).await
            }
        }
    }

    /// Runs a claimed job and records the outcome.
    async fn execute(&self, job: Job, m: &ReceivedMessage) -> Result<(), ExampleError> {
        let c = &self.inner.counters;
        let o = &self.inner.options;
        let outcome = (self.inner.work)(job.clone()).await;
        let fence = "#status = :running AND runner = :owner AND attempts = :attempt";
        let values = [
            (":running", AttributeValue::s(JobStatus::Running.as_str())),
            (":owner", AttributeValue::s(&o.owner)),
            (":attempt", AttributeValue::n(i64::from(job.attempts))),
        ];
        let (status, detail) = match outcome {
            Ok(url) => (JobStatus::Succeeded, url),
            Err(e) if job.attempts >= o.max_attempts => (JobStatus::Failed, e),
            Err(e) => (JobStatus::Pending, e),
        };
        if !self.finish(&job, status, &detail, fence, &values).await? {
            // Another runner took the job over; its message is its business.
            bump(&c.fenced);
            return Ok(());
        }
        match status {
            JobStatus::Pending => {
                bump(&c.retried);
                self.inner
                    .queues
                    .change_visibility(&o.queue, &m.receipt_handle, seconds(o.retry_delay))
                    .await?;
                Ok(())
            }
            JobStatus::Succeeded => {
                bump(&c.succeeded);
                self.delete(m).await
            }
            _ => {
                bump(&c.failed);
                self.delete(m).await
            }
        }
    }

    /// The claim: one conditional UpdateItem to RUNNING.
    async fn claim(&self, job_id: &str) -> Result<Claim, ExampleError> {
        let o = &self.inner.options;
        let now = now_ms();
        let input = UpdateItemInput {
            table_name: JOBS_TABLE.into(),
            key: job_key(job_id),
            update_expression: Some(
                "SET #status = :running, attempts = attempts + :one, runner = :owner, \
                 lease_until = :until, updated_at = :ts"
                    .into(),
            ),
            condition_expression: Some(
                "attribute_exists(pk) AND attempts < :max \
                 AND (#status = :pending OR (#status = :running AND lease_until < :now))"
                    .into(),
            ),
            expression_attribute_names: Some([("#status".to_owned(), "status".to_owned())].into()),
            expression_attribute_values: Some(values(&[
                (":running", AttributeValue::s(JobStatus::Running.as_str())),
                (":pending", AttributeValue::s(JobStatus::Pending.as_str())),
                (":one", AttributeValue::n(1)),
                (":owner", AttributeValue::s(&o.owner)),
                (":until", number(now + o.lease.as_millis() as u64)),
                (":now", number(now)),
                (":ts", AttributeValue::s(format_timestamp(now))),
                (":max", AttributeValue::n(i64::from(o.max_attempts))),
            ])),
            return_values: ReturnValue::AllNew,
            ..Default::default()
        };
        match self.inner.store.update_item(input).await {
            Ok(out) => {
                let item = out.attributes.unwrap_or_default();
                Ok(Claim::Claimed(decode(&item)?))
            }
            Err(StoreError::ConditionalCheckFailed { .. }) => {
                let item = self
                    .inner
                    .store
                    .get_item(GetItemInput {
                        table_name: JOBS_TABLE.into(),
                        key: job_key(job_id),
                        consistent_read: Some(true),
                        ..Default::default()
                    })
                    .await?
                    .item;
                let Some(item) = item else {
                    return Ok(Claim::Gone);
                };
                let job = decode(&item)?;
                Ok(match job.status {
                    s if s.is_final() => Claim::Finished,
                    _ if job.attempts >= o.max_attempts => Claim::Exhausted(job),
                    _ => Claim::Busy(job.lease_until.unwrap_or(now)),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Moves `job` to `status` (SUCCEEDED with `detail` as its result, or
    /// PENDING/FAILED with `detail` as its error) if `condition` holds;
    /// returns whether it did.
    async fn finish(
        &self,
        job: &Job,
        status: JobStatus,
        detail: &str,
        condition: &str,
        extra: &[(&str, AttributeValue)],
    ) -> Result<bool, ExampleError> {
        let now = now_ms();
        let field = if status == JobStatus::Succeeded {
            "#result"
        } else {
            "#error"
        };
        // A job back to PENDING has no holder; a final one no lease.
        let remove = if status == JobStatus::Pending {
            " REMOVE lease_until, runner"
        } else {
            " REMOVE lease_until"
        };
        let mut vals = vec![
            (":status", AttributeValue::s(status.as_str())),
            (":detail", AttributeValue::s(detail)),
            (":ts", AttributeValue::s(format_timestamp(now))),
        ];
        vals.extend(extra.iter().cloned());
        let update = format!("SET #status = :status, {field} = :detail, updated_at = :ts{remove}");
        let input = UpdateItemInput {
            table_name: JOBS_TABLE.into(),
            key: job_key(&job.id),
            update_expression: Some(update),
            condition_expression: Some(condition.to_owned()),
            expression_attribute_names: Some(
                [
                    ("#status".to_owned(), "status".to_owned()),
                    (field.to_owned(), field[1..].to_owned()),
                ]
                .into(),
            ),
            expression_attribute_values: Some(values(&vals)),
            ..Default::default()
        };
        match self.inner.store.update_item(input).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionalCheckFailed { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete(&self, m: &ReceivedMessage) -> Result<(), ExampleError> {
        self.inner
            .queues
            .delete(&self.inner.options.queue, &m.receipt_handle)
            .await?;
        Ok(())
    }
}

/// The job id of a `{"jobId": "..."}` body.
fn job_id_of(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let id = v.get("jobId")?.as_str()?;
    (!id.is_empty()).then(|| id.to_owned())
}

fn decode(item: &Item) -> Result<Job, ExampleError> {
    Job::from_item(item).map_err(|m| ExampleError::Unexpected(format!("a job row: {m}")))
}

fn values(pairs: &[(&str, AttributeValue)]) -> Values {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// Whole seconds, at least 1 for a non-zero duration, as SQS wants them.
fn seconds(d: Duration) -> i64 {
    d.as_millis().div_ceil(1000) as i64
}

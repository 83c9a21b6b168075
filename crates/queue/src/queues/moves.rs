//! Moving messages out of a dead-letter queue: SQS's message move tasks
//! (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask), and
//! [`Queues::move_messages`] for moving selected messages at once.
//!
//! A moved message keeps its id, body and attributes, goes to the end of the
//! destination (for FIFO, the end of its group) and starts over there:
//! visible at once, receive count 0. Tasks live in memory: a restart ends
//! them (messages already moved stay moved; a new task moves the rest).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postbox_store::embedded::WriteContext;

use crate::attributes::arn_queue_name;
use crate::core::MessageState;
use crate::error::{QueueError, QueueResult};
use crate::stats::Counters;
use crate::storage::{StorageResult, Tables};

use super::{Inner, QueueHandle, Queues, insert_message};

/// Messages moved per commit when no rate is set.
const CHUNK: usize = 100;

/// The state of a move task, as ListMessageMoveTasks reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveTaskStatus {
    /// Moving.
    Running,
    /// Every message that was there when it started is moved.
    Completed,
    /// Stopped by CancelMessageMoveTask.
    Cancelled,
    /// Stopped by an error (see the failure reason).
    Failed,
}

impl MoveTaskStatus {
    /// SQS's name of the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            MoveTaskStatus::Running => "RUNNING",
            MoveTaskStatus::Completed => "COMPLETED",
            MoveTaskStatus::Cancelled => "CANCELLED",
            MoveTaskStatus::Failed => "FAILED",
        }
    }
}

/// A message move task.
#[derive(Debug)]
pub struct MoveTask {
    /// The handle CancelMessageMoveTask takes.
    pub handle: String,
    /// The dead-letter queue's ARN.
    pub source_arn: String,
    /// Where messages go, if not back to their source queues.
    pub destination_arn: Option<String>,
    /// Messages per second, if limited.
    pub max_per_second: Option<u32>,
    /// Messages in the dead-letter queue when the task started.
    pub to_move: u64,
    /// When it started (ms).
    pub started_at: u64,
    source: String,
    destination: Option<String>,
    moved: AtomicU64,
    cancel: AtomicBool,
    status: Mutex<(MoveTaskStatus, Option<String>)>,
}

impl MoveTask {
    /// Messages moved so far.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::SeqCst)
    }

    /// The status and, when failed, why.
    pub fn status(&self) -> (MoveTaskStatus, Option<String>) {
        self.status.lock().expect("task lock").clone()
    }

    fn finish(&self, status: MoveTaskStatus, reason: Option<String>) {
        *self.status.lock().expect("task lock") = (status, reason);
    }
}

impl Queues {
    /// Starts moving the messages of dead-letter queue `source_arn` back to
    /// their source queues, or to `destination_arn`. Returns the task handle.
    pub async fn start_move_task(
        &self,
        source_arn: &str,
        destination_arn: Option<String>,
        max_per_second: Option<i64>,
    ) -> QueueResult<String> {
        let source = self.inner.queue_by_arn(source_arn)?;
        if self.inner.sources_of(&source.name).is_empty() {
            return Err(QueueError::invalid(
                "Source queue must be configured as a Dead Letter Queue.",
            ));
        }
        let destination = match &destination_arn {
            Some(arn) => {
                let d = self.inner.queue_by_arn(arn)?;
                if d.id == source.id {
                    return Err(QueueError::invalid(
                        "The destination queue must not be the source queue.",
                    ));
                }
                if d.lock().core.fifo() != source.lock().core.fifo() {
                    return Err(QueueError::invalid(
                        "The destination queue must be of the same type as the source queue.",
                    ));
                }
                Some(d.name.clone())
            }
            None => None,
        };
        let rate = match max_per_second {
            Some(r) if !(1..=500).contains(&r) => {
                return Err(QueueError::invalid(format!(
                    "Value {r} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be between 1 and 500."
                )));
            }
            other => other.map(|r| r as u32),
        };
        let task = {
            let mut tasks = self.inner.tasks.lock().expect("tasks lock");
            let running = tasks
                .iter()
                .any(|t| t.source == source.name && t.status().0 == MoveTaskStatus::Running);
            if running {
                return Err(QueueError::UnsupportedOperation(
                    "There is already a task running. Only one active task is allowed for a source queue arn at a given time.".into(),
                ));
            }
            let task = Arc::new(MoveTask {
                handle: crate::digest::new_message_id(),
                source_arn: source_arn.to_owned(),
                destination_arn,
                max_per_second: rate,
                to_move: source.lock().core.len() as u64,
                started_at: self.inner.now(),
                source: source.name.clone(),
                destination,
                moved: AtomicU64::new(0),
                cancel: AtomicBool::new(false),
                status: Mutex::new((MoveTaskStatus::Running, None)),
            });
            tasks.push(task.clone());
            task
        };
        tokio::spawn(run_task(self.inner.clone(), task.clone()));
        Ok(task.handle.clone())
    }

    /// The most recent move tasks of dead-letter queue `source_arn`, newest
    /// first, at most `max` (1 to 10).
    pub fn list_move_tasks(&self, source_arn: &str, max: i64) -> QueueResult<Vec<Arc<MoveTask>>> {
        if !(1..=10).contains(&max) {
            return Err(QueueError::invalid(format!(
                "Value {max} for parameter MaxResults is invalid. Reason: must be between 1 and 10."
            )));
        }
        let source = self.inner.queue_by_arn(source_arn)?;
        let tasks = self.inner.tasks.lock().expect("tasks lock");
        Ok(tasks
            .iter()
            .rev()
            .filter(|t| t.source == source.name)
            .take(max as usize)
            .cloned()
            .collect())
    }

    /// Cancels a running move task; returns how many messages it moved.
    pub fn cancel_move_task(&self, handle: &str) -> QueueResult<u64> {
        let tasks = self.inner.tasks.lock().expect("tasks lock");
        let task = tasks
            .iter()
            .find(|t| t.handle == handle && t.status().0 == MoveTaskStatus::Running)
            .ok_or_else(|| {
                QueueError::ResourceNotFound(format!(
                    "Task does not exist or is not running: {handle}"
                ))
            })?;
        task.cancel.store(true, Ordering::SeqCst);
        task.finish(MoveTaskStatus::Cancelled, None);
        Ok(task.moved())
    }

    /// Moves messages out of dead-letter queue `dlq` at once: those whose
    /// ids are in `message_ids` (all visible ones when `None`), to
    /// `destination` or back to their source queues. Returns how many moved.
    pub async fn move_messages(
        &self,
        dlq: &str,
        destination: Option<&str>,
        message_ids: Option<Vec<String>>,
    ) -> QueueResult<u64> {
        let source = self.inner.handle(dlq)?;
        if let Some(d) = destination {
            self.inner.handle(d)?;
        }
        let inner = self.inner.clone();
        let destination = destination.map(str::to_owned);
        let moved = self
            .inner
            .submit(move |ctx| {
                move_in(
                    &inner,
                    ctx,
                    &source,
                    destination.as_deref(),
                    usize::MAX,
                    message_ids.as_deref(),
                )
            })
            .await?;
        Ok(moved as u64)
    }
}

impl Inner {
    fn queue_by_arn(&self, arn: &str) -> QueueResult<Arc<QueueHandle>> {
        let name = arn_queue_name(arn).ok_or_else(|| {
            QueueError::invalid(format!("Value {arn} for parameter SourceArn is invalid."))
        })?;
        self.lookup(name).ok_or_else(|| {
            QueueError::ResourceNotFound(format!(
                "The resource that you specified for the ARN {arn} doesn't exist."
            ))
        })
    }
}

async fn run_task(inner: Arc<Inner>, task: Arc<MoveTask>) {
    let chunk = task.max_per_second.map_or(CHUNK, |r| r as usize);
    loop {
        if task.cancel.load(Ordering::SeqCst) {
            return;
        }
        let Some(source) = inner.lookup(&task.source) else {
            task.finish(
                MoveTaskStatus::Failed,
                Some("The source queue was deleted.".into()),
            );
            return;
        };
        let i = inner.clone();
        let destination = task.destination.clone();
        let result = inner
            .submit(move |ctx| move_in(&i, ctx, &source, destination.as_deref(), chunk, None))
            .await;
        match result {
            Ok(0) => {
                task.finish(MoveTaskStatus::Completed, None);
                return;
            }
            Ok(n) => {
                task.moved.fetch_add(n as u64, Ordering::SeqCst);
            }
            Err(e) => {
                task.finish(MoveTaskStatus::Failed, Some(e.to_string()));
                return;
            }
        }
        if task.max_per_second.is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Moves up to `max` visible messages of `source` (only those with ids in
/// `only`, when given) to `destination` or their source queues.
fn move_in(
    inner: &Inner,
    ctx: &mut WriteContext<'_>,
    source: &QueueHandle,
    destination: Option<&str>,
    max: usize,
    only: Option<&[String]>,
) -> StorageResult<QueueResult<usize>> {
    let now = ctx.now_ms();
    let mut tables = Tables::open(ctx.transaction())?;
    let candidates = {
        let s = source.lock();
        if s.deleted {
            return Ok(Err(QueueError::QueueDoesNotExist));
        }
        s.core
            .movable(now, if only.is_some() { usize::MAX } else { max })
    };
    // Everything is checked before the first write.
    let mut plan = Vec::new();
    for seq in candidates {
        let payload = tables.payload(source.id, seq)?;
        if only.is_some_and(|ids| !ids.contains(&payload.message_id)) {
            continue;
        }
        let target_name = match destination {
            Some(d) => d.to_owned(),
            None => match &payload.dead_letter_source {
                Some(s) => s.clone(),
                None => continue, // never dead-lettered: it has no source to go back to
            },
        };
        let Some(target) = inner.lookup(&target_name) else {
            return Ok(Err(QueueError::ResourceNotFound(format!(
                "The destination queue {target_name} does not exist."
            ))));
        };
        if target.lock().core.fifo() != source.lock().core.fifo() {
            return Ok(Err(QueueError::invalid(
                "The destination queue must be of the same type as the source queue.",
            )));
        }
        plan.push((seq, payload, target));
        if plan.len() == max {
            break;
        }
    }
    let moved = plan.len();
    for (seq, mut payload, target) in plan {
        source.lock().core.remove(seq);
        tables.remove_message(source.id, seq)?;
        payload.dead_letter_source = None;
        let mut shared = target.lock();
        let state = MessageState {
            visible_at: now,
            ..Default::default()
        };
        insert_message(
            &mut tables,
            &target,
            &mut shared,
            &payload,
            &payload.encode(),
            state,
        )?;
        drop(shared);
        target.moved_from(source);
        target.wake(1);
    }
    Counters::add(&source.counters.moved, moved);
    Ok(Ok(moved))
}

//! ReceiveMessage: handing out messages inside a commit, redriving those
//! received too often, and long polling that sleeps until a send wakes it
//! (or a hidden message becomes visible), never polling in a loop. A long
//! poll of a consumer in the store's own process
//! (`ReceiveOptions::answer_before_sync`) parks instead, and the next send
//! hands it messages inside the send's own commit (`hand_off`): the send
//! and the receive cost one writer round trip, not two.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use postbox_store::embedded::WriteContext;
use tokio::sync::oneshot;

use crate::core::MessageState;
use crate::digest::Receipt;
use crate::error::{QueueError, QueueResult};
use crate::message::ReceivedMessage;
use crate::stats::Counters;
use crate::storage::{BodyRef, Payload, StorageResult, Tables, not_indexed};

use super::send::sequence_number;
use super::{Inner, QueueHandle, Queues, insert_message};

/// ReceiveMessage's parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// At most this many messages (1 to 10; default 1).
    pub max_messages: Option<i64>,
    /// Visibility timeout for these messages (default: the queue's).
    pub visibility_timeout: Option<i64>,
    /// Long-poll wait in seconds, 0 to 20 (default: the queue's
    /// ReceiveMessageWaitTimeSeconds).
    pub wait_time_seconds: Option<i64>,
    /// FIFO: a retry with the same id during the visibility timeout gets
    /// the same messages and receipt handles.
    pub receive_request_attempt_id: Option<String>,
    /// Not a ReceiveMessage parameter, for consumers in the store's own
    /// process: answer once the receive is committed, before the commit
    /// log's fsync (`EmbeddedStore::submit_unsynced`). A crash in between
    /// loses the receive, so its messages are visible again at once rather
    /// than after their visibility timeout; that is harmless only when
    /// whoever held them died in the same crash. Never set it on behalf of
    /// a consumer in another process (the SQS endpoint does not), which
    /// would then hold messages someone else can receive. Such a receive's
    /// long poll may be handed its messages inside a send's commit.
    pub answer_before_sync: bool,
}

impl Queues {
    /// Receives messages, waiting up to the long-poll time for some to
    /// arrive. Returns an empty list when none came.
    pub async fn receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> QueueResult<Vec<ReceivedMessage>> {
        let handle = self.inner.handle(queue)?;
        let max = bounded(
            "MaxNumberOfMessages",
            options.max_messages.unwrap_or(1),
            1,
            10,
        )? as usize;
        let (default_vt, default_wait) = {
            let s = handle.lock();
            (
                s.record.config.visibility_timeout,
                s.record.config.receive_message_wait_time_seconds,
            )
        };
        let vt = bounded(
            "VisibilityTimeout",
            options.visibility_timeout.unwrap_or(default_vt as i64),
            0,
            43_200,
        )?;
        let wait = bounded(
            "WaitTimeSeconds",
            options.wait_time_seconds.unwrap_or(default_wait as i64),
            0,
            20,
        )?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
        let attempt = options
            .receive_request_attempt_id
            .filter(|_| handle.lock().core.fifo());
        if let Some(id) = &attempt {
            let (h, id) = (handle.clone(), id.clone());
            if let Some(again) = self
                .inner
                .submit(move |ctx| repeat_attempt(ctx, &h, &id))
                .await?
            {
                return self.inner.messages(&handle, again);
            }
        }
        // Only an in-process consumer's poll waits where a send can hand it
        // messages: the send's commit is not synced when it is answered.
        let park = options.answer_before_sync && attempt.is_none();
        // Set when a send took this poll and its batch failed: the next look
        // goes to the store, which says what happened to it.
        let mut ask_the_store = false;
        loop {
            // Registered before looking, so a send between the look and the
            // wait still wakes us.
            let notified = handle.arrivals.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.inner.now();
            let (ready, next) = {
                let s = handle.lock();
                if s.deleted {
                    return Err(QueueError::QueueDoesNotExist);
                }
                let retention = s.record.config.message_retention_period as u64 * 1000;
                (
                    s.core.has_ready(now) || s.core.has_expired(now, retention),
                    s.core.next_ready_after(now),
                )
            };
            if ready || std::mem::take(&mut ask_the_store) {
                let inner = self.inner.clone();
                let h = handle.clone();
                let attempt = attempt.clone();
                let receive = move |ctx: &mut WriteContext<'_>| {
                    receive_in(&inner, ctx, &h, max, vt * 1000, attempt)
                };
                let got = if options.answer_before_sync {
                    self.inner.submit_unsynced(receive).await?
                } else {
                    self.inner.submit(receive).await?
                };
                if !got.is_empty() {
                    return self.answer(&handle, got, options.answer_before_sync).await;
                }
                // Someone else took them: wait like an empty queue (never
                // retry at once, which could spin).
            }
            let until = match next {
                Some(at) => {
                    deadline.min(tokio::time::Instant::now() + Duration::from_millis(at - now))
                }
                None => deadline,
            };
            if tokio::time::Instant::now() >= deadline {
                // A wake-up this receive took but did not use goes to the next waiter.
                if notified.as_mut().enable() {
                    handle.wake(1);
                }
                return Ok(Vec::new());
            }
            if !park {
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            // An in-process consumer parks, so that a send can hand it
            // messages inside the send's own commit (`hand_off`): one
            // writer round trip fewer between a send and its consumer.
            let parked = Unpark::park(&handle, max, vt * 1000);
            let mut answer = parked.answer;
            tokio::select! {
                got = &mut answer => match got {
                    Ok(got) => return self.answer(&handle, got, true).await,
                    // The batch of the send that took this poll failed (the
                    // send took it off the list, so there is no place to
                    // give up).
                    Err(_) => {
                        ask_the_store = true;
                        continue;
                    }
                },
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(until) => {}
            }
            if !parked.guard.unpark() {
                // A send took this poll: its commit answers it (or, if the
                // commit failed, drops the answer) without waiting on us.
                match answer.await {
                    Ok(got) => return self.answer(&handle, got, true).await,
                    Err(_) => ask_the_store = true,
                }
            }
        }
    }

    /// The messages a receive got. One answered before its sync waits
    /// until what the messages were sent after is synced.
    async fn answer(
        &self,
        handle: &QueueHandle,
        got: Vec<Handed>,
        before_sync: bool,
    ) -> QueueResult<Vec<ReceivedMessage>> {
        if before_sync {
            // What sent these messages may have read commits not yet
            // synced (see `QueueHandle::sent_after`).
            let mark = handle.sent_after.load(Ordering::Acquire);
            self.inner.store.wait_synced_to(mark).await?;
        }
        // Wake-ups are one per ten arrivals: a receive that leaves ready
        // messages behind passes its wake-up on.
        if handle.lock().core.has_ready(self.inner.now()) {
            handle.wake(1);
        }
        self.inner.messages(handle, got)
    }
}

/// A long poll parked on a queue, waiting for a send to hand it messages.
pub(crate) struct Parked {
    id: u64,
    max: usize,
    visibility_ms: u64,
    answer: oneshot::Sender<Vec<Handed>>,
    /// The poll's runtime: messages handed to a poll that is gone by the
    /// commit are made visible again from a task on it.
    runtime: tokio::runtime::Handle,
}

/// A parked poll's place in the queue's list, taken out when the poll
/// stops waiting (or is dropped) unless a send took it first.
struct Unpark<'h> {
    handle: &'h QueueHandle,
    id: u64,
}

struct ParkedPoll<'h> {
    guard: Unpark<'h>,
    answer: oneshot::Receiver<Vec<Handed>>,
}

impl<'h> Unpark<'h> {
    fn park(handle: &'h QueueHandle, max: usize, visibility_ms: u64) -> ParkedPoll<'h> {
        let id = handle.next_park.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        handle
            .parked
            .lock()
            .expect("parked polls lock")
            .push_back(Parked {
                id,
                max,
                visibility_ms,
                answer: tx,
                runtime: tokio::runtime::Handle::current(),
            });
        ParkedPoll {
            guard: Unpark { handle, id },
            answer: rx,
        }
    }

    /// Takes the poll out of the list; false if a send had taken it.
    fn unpark(&self) -> bool {
        let mut parked = self.handle.parked.lock().expect("parked polls lock");
        match parked.iter().position(|p| p.id == self.id) {
            Some(at) => {
                parked.remove(at);
                true
            }
            None => false,
        }
    }
}

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.unpark();
    }
}

/// Inside a send's commit, after its messages are in: hands ready messages
/// to the polls parked on `handle`, oldest first, as a receive of theirs
/// in this same commit would, and answers each once the commit is made.
/// Returns how many messages were handed out.
pub(super) fn hand_off(
    inner: &Arc<Inner>,
    ctx: &mut WriteContext<'_>,
    handle: &QueueHandle,
) -> StorageResult<usize> {
    let mut handed = 0;
    loop {
        let next = {
            let mut parked = handle.parked.lock().expect("parked polls lock");
            // A poll dropped before it could unpark is skipped.
            while parked.front().is_some_and(|p| p.answer.is_closed()) {
                parked.pop_front();
            }
            parked.pop_front()
        };
        let Some(poll) = next else { break };
        let got = if handle.lock().core.has_ready(ctx.now_ms()) {
            receive_in(inner, ctx, handle, poll.max, poll.visibility_ms, None)?
        } else {
            Ok(Vec::new())
        };
        match got {
            Ok(got) if !got.is_empty() => {
                handed += got.len();
                let (answer, runtime) = (poll.answer, poll.runtime);
                let queues = Queues {
                    inner: inner.clone(),
                };
                let (name, id) = (handle.name.clone(), handle.id);
                ctx.on_commit(move || {
                    if let Err(got) = answer.send(got) {
                        // The poll was dropped (its consumer stopped) after
                        // this send took it: nobody holds these messages.
                        runtime.spawn(release(queues, name, id, got));
                    }
                });
            }
            Ok(_) => {
                // Nothing is ready, or only messages of groups in flight:
                // the poll keeps its place.
                handle
                    .parked
                    .lock()
                    .expect("parked polls lock")
                    .push_front(poll);
                break;
            }
            // The queue was deleted: the poll, woken, finds out itself.
            Err(_) => break,
        }
    }
    Ok(handed)
}

fn bounded(name: &str, v: i64, min: i64, max: i64) -> QueueResult<u64> {
    if v < min || v > max {
        return Err(QueueError::invalid(format!(
            "Value {v} for parameter {name} is invalid. Reason: Must be between {min} and {max}, if provided."
        )));
    }
    Ok(v as u64)
}

/// Hands out up to `max` messages inside a commit.
fn receive_in(
    inner: &Arc<Inner>,
    ctx: &mut WriteContext<'_>,
    handle: &QueueHandle,
    max: usize,
    visibility_ms: u64,
    attempt: Option<String>,
) -> StorageResult<QueueResult<Vec<Handed>>> {
    let now = ctx.now_ms();
    let mut tables = Tables::open(ctx.transaction())?;
    // The dead-letter queue is looked up before the source is locked: the
    // writer never waits for the registry while holding a queue.
    let policy = handle.lock().record.config.redrive_policy.clone();
    let dlq = policy.as_ref().and_then(|p| {
        inner
            .lookup(&p.dead_letter_queue)
            .map(|d| (d, p.max_receive_count))
    });
    let mut shared = handle.lock();
    if shared.deleted {
        return Ok(Err(QueueError::QueueDoesNotExist));
    }
    let retention = shared.record.config.message_retention_period as u64 * 1000;
    for seq in shared.core.expire(now, retention, super::SWEEP_BATCH) {
        tables.remove_message(handle.id, seq)?;
        Counters::add(&handle.counters.expired, 1);
    }
    let token = fastrand::u64(..);
    let r = shared.core.receive(
        now,
        max,
        visibility_ms,
        token,
        dlq.as_ref().map(|(_, n)| *n),
    );
    if let Some(id) = attempt
        && !r.received.is_empty()
    {
        shared.attempts.retain(|_, a| a.expires_at > now);
        let seqs = r.received.iter().map(|(s, _)| *s).collect();
        shared.attempts.insert(
            id,
            super::Attempt {
                expires_at: now + visibility_ms,
                token,
                seqs,
            },
        );
    }
    let mut out = Vec::with_capacity(r.received.len());
    for (seq, state) in &r.received {
        tables.put_meta(
            handle.id,
            *seq,
            shared.core.get(*seq).ok_or_else(|| not_indexed(*seq))?,
        )?;
        out.push(Handed::read(ctx, &mut tables, handle.id, *seq, *state)?);
    }
    drop(shared);
    Counters::add(&handle.counters.received, out.len());
    if let Some((dlq, _)) = dlq
        && !r.dead_lettered.is_empty()
    {
        let mut target = dlq.lock();
        for (seq, meta) in &r.dead_lettered {
            let mut payload = tables.payload(handle.id, *seq)?;
            tables.remove_message(handle.id, *seq)?;
            payload.dead_letter_source = Some(handle.name.clone());
            if target.core.fifo() {
                // SQS: in a FIFO dead-letter queue a message's deduplication
                // id is its message id.
                payload.dedup_id = Some(payload.message_id.clone());
            }
            // In the dead-letter queue the message is visible at once and
            // keeps its send time (retention counts from the original send)
            // and receive count.
            let state = MessageState {
                visible_at: now,
                ..meta.state
            };
            insert_message(
                &mut tables,
                &dlq,
                &mut target,
                &payload,
                &payload.encode(),
                state,
            )?;
        }
        drop(target);
        dlq.moved_from(handle);
        Counters::add(&handle.counters.dead_lettered, r.dead_lettered.len());
        dlq.wake(r.dead_lettered.len());
    }
    Ok(Ok(out))
}

/// A retried FIFO receive: the messages the attempt handed out, if its
/// visibility timeout has not passed and they are still its own.
fn repeat_attempt(
    ctx: &mut WriteContext<'_>,
    handle: &QueueHandle,
    id: &str,
) -> StorageResult<QueueResult<Option<Vec<Handed>>>> {
    let now = ctx.now_ms();
    let mut tables = Tables::open(ctx.transaction())?;
    let shared = handle.lock();
    let Some(attempt) = shared.attempts.get(id).filter(|a| a.expires_at > now) else {
        return Ok(Ok(None));
    };
    let mut out = Vec::new();
    for seq in &attempt.seqs {
        match shared.core.get(*seq) {
            Some(meta) if meta.state.token == attempt.token && meta.state.in_flight(now) => {
                out.push(Handed::read(ctx, &mut tables, handle.id, *seq, meta.state)?);
            }
            _ => {}
        }
    }
    Ok(Ok(if out.is_empty() { None } else { Some(out) }))
}

/// Makes messages handed to a poll that no longer waits visible again at
/// once, as a consumer that gives them back does (their receive counts
/// stay raised, as after any receive).
async fn release(queues: Queues, queue: String, queue_id: u64, handed: Vec<Handed>) {
    let entries: Vec<(String, i64)> = handed
        .iter()
        .map(|h| {
            let receipt = Receipt {
                queue_id,
                seq: h.seq,
                token: h.state.token,
            };
            (receipt.encode(), 0)
        })
        .collect();
    for chunk in entries.chunks(10) {
        if let Err(e) = queues.change_visibility_batch(&queue, chunk.to_vec()).await {
            tracing::warn!(queue = %queue, error = %e, "messages handed to a long poll that had stopped stay hidden until their visibility timeout");
        }
    }
}

/// A message handed out inside a commit, turned into a [`ReceivedMessage`]
/// after it (decoding and formatting stay off the writer thread).
struct Handed {
    seq: u64,
    state: MessageState,
    payload: Vec<u8>,
    /// For a body kept by reference, its item's encoded bytes as this
    /// commit reads them.
    item: Option<Result<Option<Vec<u8>>, String>>,
}

impl Handed {
    /// Message `seq` of queue `id` and, when its body is kept by reference,
    /// the item it names, read in the commit that hands it out: the
    /// writer's transaction holds it already, where a snapshot of the
    /// receiver's own would begin a read transaction per receive.
    fn read(
        ctx: &WriteContext<'_>,
        tables: &mut Tables<'_>,
        id: u64,
        seq: u64,
        state: MessageState,
    ) -> StorageResult<Handed> {
        let payload = tables.payload_bytes(id, seq)?;
        let item = match Payload::reference(&payload) {
            Ok(None) => None,
            Ok(Some((table, key))) => {
                Some(ctx.get_item_encoded(table, &key).map_err(|e| e.to_string()))
            }
            Err(e) => Some(Err(e)),
        };
        Ok(Handed {
            seq,
            state,
            payload,
            item,
        })
    }
}

impl Inner {
    fn messages(
        &self,
        handle: &QueueHandle,
        handed: Vec<Handed>,
    ) -> QueueResult<Vec<ReceivedMessage>> {
        let fifo = handle.lock().core.fifo();
        handed
            .into_iter()
            .map(|h| {
                let mut payload = Payload::decode(&h.payload).map_err(QueueError::Storage)?;
                if let Some(r) = payload.body_of.take() {
                    payload.body = body_by_reference(handle, h.seq, &r, h.item)?;
                }
                Ok(received_message(
                    self, handle, h.seq, &h.state, payload, fifo,
                ))
            })
            .collect()
    }
}

/// The body of message `seq`, kept as `r`, written from the item its
/// receive's commit read and checked against the length and CRC the send
/// kept: an item gone or changed is an error, never another body.
fn body_by_reference(
    handle: &QueueHandle,
    seq: u64,
    r: &BodyRef,
    item: Option<Result<Option<Vec<u8>>, String>>,
) -> QueueResult<String> {
    let fail = |why: &str| {
        QueueError::Storage(format!(
            "message {seq} of queue {}: its body is item {} of table {}, which {why}",
            handle.name, r.key, r.table
        ))
    };
    let item = match item {
        Some(Ok(Some(item))) => item,
        Some(Ok(None)) => return Err(fail("no longer exists")),
        Some(Err(e)) => return Err(fail(&format!("cannot be read: {e}"))),
        None => return Err(fail("was not read with it")),
    };
    let body = postbox_item::json::encoded_item_to_string(&item)
        .map_err(|e| fail(&format!("does not decode ({e})")))?;
    if !r.matches(&body) {
        return Err(fail("has changed since the message was sent"));
    }
    Ok(body)
}

fn received_message(
    inner: &Inner,
    handle: &QueueHandle,
    seq: u64,
    state: &MessageState,
    payload: Payload,
    fifo: bool,
) -> ReceivedMessage {
    let token = state.token;
    let mut system = BTreeMap::new();
    system.insert("SenderId".to_owned(), inner.options.account_id.clone());
    system.insert("SentTimestamp".to_owned(), payload.sent_at.to_string());
    system.insert(
        "ApproximateReceiveCount".to_owned(),
        state.receive_count.to_string(),
    );
    system.insert(
        "ApproximateFirstReceiveTimestamp".to_owned(),
        state.first_receive_at.to_string(),
    );
    if let Some(h) = &payload.trace_header {
        system.insert("AWSTraceHeader".to_owned(), h.clone());
    }
    if let Some(src) = &payload.dead_letter_source {
        system.insert("DeadLetterQueueSourceArn".to_owned(), inner.arn(src));
    }
    if fifo {
        system.insert("SequenceNumber".to_owned(), sequence_number(seq));
        if let Some(g) = &payload.group {
            system.insert("MessageGroupId".to_owned(), g.clone());
        }
        if let Some(d) = &payload.dedup_id {
            system.insert("MessageDeduplicationId".to_owned(), d.clone());
        }
    } else if let Some(g) = &payload.group {
        system.insert("MessageGroupId".to_owned(), g.clone());
    }
    ReceivedMessage {
        message_id: payload.message_id,
        receipt_handle: Receipt {
            queue_id: handle.id,
            seq,
            token,
        }
        .encode(),
        body: payload.body,
        attributes: payload.attributes,
        system,
    }
}

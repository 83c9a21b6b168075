//! SendMessage and SendMessageBatch: validation off the writer thread, then
//! deduplication and enqueueing inside the commit.

use postbox_store::embedded::WriteContext;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::core::DedupEntry;
use crate::core::{DEDUP_WINDOW_MS, dedup_key};
use crate::digest::{
    md5_hex, md5_of_attributes, md5_of_trace_header, message_id_bits, message_id_from_bits,
    new_message_id, sha256_hex,
};
use crate::error::{QueueError, QueueResult};
use crate::message::{NewMessage, SendResult};
use crate::stats::Counters;
use crate::storage::{BodyRef, Payload, StorageResult, Tables};

use super::receive::hand_off;
use super::{Inner, QueueHandle, Queues, insert_message, remember_dedup};

/// Longest MessageGroupId and MessageDeduplicationId.
const MAX_ID_LEN: usize = 128;

/// A validated message, ready to commit.
pub(crate) struct Prepared {
    payload: Payload,
    /// `payload` encoded, its send time patched in at commit.
    encoded: Vec<u8>,
    delay_ms: u64,
    dedup_key: Option<crate::core::DedupKey>,
    answer: SendResult,
}

impl Queues {
    /// Sends one message.
    pub async fn send(&self, queue: &str, message: NewMessage) -> QueueResult<SendResult> {
        self.send_batch(queue, vec![message])
            .await?
            .pop()
            .expect("one result per message")
    }

    /// Sends up to 10 messages in one commit; one result per message, in
    /// order (a failed entry does not stop the others).
    pub async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> QueueResult<Vec<QueueResult<SendResult>>> {
        let handle = self.inner.handle(queue)?;
        let prepared = prepare(&handle, messages, true);
        let inner = self.inner.clone();
        self.inner
            .submit(move |ctx| {
                let mark = inner.store.committed_mark();
                commit(&inner, ctx, &handle, prepared, mark)
            })
            .await
    }
}

/// Validates each message against the queue and builds what will be stored.
/// With `digests` each answer carries the MD5s SendMessage returns; a send
/// inside a caller's transaction answers only message ids and skips them.
pub(crate) fn prepare(
    handle: &QueueHandle,
    messages: Vec<NewMessage>,
    digests: bool,
) -> Vec<QueueResult<Prepared>> {
    let config = handle.lock().record.config.clone();
    messages
        .into_iter()
        .map(|m| {
            m.validate()?;
            let size = m.size();
            if size > config.maximum_message_size as usize {
                return Err(QueueError::invalid(format!(
                    "One or more parameters are invalid. Reason: Message must be shorter than {} bytes.",
                    config.maximum_message_size
                )));
            }
            let delay = match (m.delay_seconds, config.fifo) {
                (Some(d), _) if d > 900 => {
                    return Err(QueueError::invalid(format!(
                        "Value {d} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."
                    )));
                }
                (Some(d), true) if d > 0 => {
                    return Err(QueueError::invalid(format!(
                        "Value {d} for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."
                    )));
                }
                (Some(d), false) => d,
                _ => config.delay_seconds,
            };
            let (group, dedup_id) = if config.fifo { fifo_ids(&m, config.content_based_deduplication)? } else { standard_ids(&m)? };
            let key = dedup_id.as_deref().map(|id| {
                dedup_key(config.dedup_per_group(), group.as_deref().unwrap_or(""), id)
            });
            let answer = SendResult {
                message_id: new_message_id(),
                sequence_number: None,
                md5_of_body: match digests {
                    true => md5_hex(m.body.as_bytes()),
                    false => String::new(),
                },
                md5_of_attributes: digests.then(|| md5_of_attributes(&m.attributes)).flatten(),
                md5_of_system_attributes: m
                    .trace_header
                    .as_deref()
                    .filter(|_| digests)
                    .map(md5_of_trace_header),
            };
            let body_of = m.body_of.map(|item| BodyRef {
                table: item.table,
                key: postbox_item::json::item_to_string(&item.key),
                len: m.body.len() as u32,
                crc: crc32fast::hash(m.body.as_bytes()),
            });
            let payload = Payload {
                message_id: answer.message_id.clone(),
                group,
                dedup_id,
                sent_at: 0,
                dead_letter_source: None,
                trace_header: m.trace_header,
                attributes: m.attributes,
                body: if body_of.is_some() { String::new() } else { m.body },
                body_of,
                size: size as u32,
            };
            let encoded = payload.encode();
            Ok(Prepared { payload, encoded, delay_ms: delay as u64 * 1000, dedup_key: key, answer })
        })
        .collect()
}

/// A FIFO message needs a group and a deduplication id (or content-based
/// deduplication).
fn fifo_ids(m: &NewMessage, content_based: bool) -> QueueResult<(Option<String>, Option<String>)> {
    let Some(group) = &m.group_id else {
        return Err(QueueError::MissingParameter(
            "The request must contain the parameter MessageGroupId.".into(),
        ));
    };
    check_id("MessageGroupId", group)?;
    let dedup = match &m.deduplication_id {
        Some(id) => {
            check_id("MessageDeduplicationId", id)?;
            id.clone()
        }
        None if content_based => sha256_hex(m.body.as_bytes()),
        None => {
            return Err(QueueError::invalid(
                "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
            ));
        }
    };
    Ok((Some(group.clone()), Some(dedup)))
}

/// A standard queue accepts a MessageGroupId (fair queues); a
/// deduplication id applies only to FIFO queues and is ignored.
fn standard_ids(m: &NewMessage) -> QueueResult<(Option<String>, Option<String>)> {
    if let Some(g) = &m.group_id {
        check_id("MessageGroupId", g)?;
    }
    Ok((m.group_id.clone(), None))
}

/// Group and deduplication ids: 1 to 128 alphanumeric or punctuation characters.
fn check_id(name: &str, id: &str) -> QueueResult<()> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation());
    if ok {
        Ok(())
    } else {
        Err(QueueError::invalid(format!(
            "Value {id} for parameter {name} is invalid. Reason: {name} can only include alphanumeric and punctuation characters. 1 to 128 in length."
        )))
    }
}

/// Enqueues prepared messages inside a commit: a deduplicated one answers
/// with the original's id and sequence number and is not enqueued again.
/// `mark` is the store's `committed_mark` inside this operation (see
/// `QueueHandle::sent_after`). Long polls parked on the queue get the
/// messages in the same commit (`receive::hand_off`); the rest wake waiters.
pub(crate) fn commit(
    inner: &Arc<Inner>,
    ctx: &mut WriteContext<'_>,
    handle: &QueueHandle,
    prepared: Vec<QueueResult<Prepared>>,
    mark: u64,
) -> StorageResult<QueueResult<Vec<QueueResult<SendResult>>>> {
    let now = ctx.now_ms();
    let mut tables = Tables::open(ctx.transaction())?;
    let mut shared = handle.lock();
    if shared.deleted {
        return Ok(Err(QueueError::QueueDoesNotExist));
    }
    let fifo = shared.core.fifo();
    let mut out = Vec::with_capacity(prepared.len());
    let mut enqueued = 0;
    for p in prepared {
        let Prepared {
            mut payload,
            mut encoded,
            delay_ms,
            dedup_key,
            mut answer,
        } = match p {
            Ok(p) => p,
            Err(e) => {
                out.push(Err(e));
                continue;
            }
        };
        if let Some(key) = dedup_key
            && let Some(original) = shared.core.dedup.get(key, now)
        {
            answer.message_id = message_id_from_bits(original.message_id);
            answer.sequence_number = Some(sequence_number(original.seq));
            out.push(Ok(answer));
            continue;
        }
        payload.sent_at = now;
        Payload::patch_sent_at(&mut encoded, now);
        let state = crate::core::MessageState {
            visible_at: now + delay_ms,
            ..Default::default()
        };
        let seq = insert_message(&mut tables, handle, &mut shared, &payload, &encoded, state)?;
        if let Some(key) = dedup_key {
            let message_id =
                message_id_bits(&payload.message_id).expect("new message ids are UUIDs");
            let entry = DedupEntry {
                message_id,
                seq,
                expires_at: now + DEDUP_WINDOW_MS,
            };
            remember_dedup(&mut tables, handle, &mut shared, key, entry)?;
        }
        if fifo {
            answer.sequence_number = Some(sequence_number(seq));
        }
        enqueued += 1;
        out.push(Ok(answer));
    }
    drop(tables);
    drop(shared);
    if enqueued > 0 {
        handle.sent_after.fetch_max(mark, Ordering::Release);
        Counters::add(&handle.counters.sent, enqueued);
        let handed = hand_off(inner, ctx, handle)?;
        // One receive takes up to ten; a receive that leaves more behind
        // wakes the next waiter (see `receive`). A hand-off may have taken
        // older messages rather than these: while any are ready, wake one.
        let left = enqueued.saturating_sub(handed).div_ceil(10);
        if handle.lock().core.has_ready(ctx.now_ms()) {
            handle.wake(left.max(1));
        }
    }
    Ok(Ok(out))
}

/// A FIFO SequenceNumber as SQS writes it: a long decimal string.
pub(crate) fn sequence_number(seq: u64) -> String {
    format!("{seq:020}")
}

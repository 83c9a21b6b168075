//! What a consumer does with a received message: DeleteMessage(Batch) and
//! ChangeMessageVisibility(Batch), by receipt handle.

use crate::core::Deleted;
use crate::digest::Receipt;
use crate::error::{QueueError, QueueResult};
use crate::stats::Counters;
use crate::storage::{Tables, not_indexed};

use super::Queues;

impl Queues {
    /// Deletes the message a receipt handle names.
    pub async fn delete(&self, queue: &str, receipt_handle: &str) -> QueueResult<()> {
        self.delete_batch(queue, vec![receipt_handle.to_owned()])
            .await?
            .pop()
            .expect("one result per handle")
    }

    /// Deletes up to 10 messages in one commit; one result per handle.
    pub async fn delete_batch(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        let handle = self.inner.handle(queue)?;
        let receipts: Vec<QueueResult<Receipt>> =
            handles.iter().map(|h| decode(h, handle.id)).collect();
        let h = handle.clone();
        self.inner
            .submit(move |ctx| {
                let now = ctx.now_ms();
                let mut tables = Tables::open(ctx.transaction())?;
                let mut shared = h.lock();
                if shared.deleted {
                    return Ok(Err(QueueError::QueueDoesNotExist));
                }
                let mut out = Vec::with_capacity(receipts.len());
                let mut deleted = 0;
                let mut groups = std::collections::HashSet::new();
                for r in receipts {
                    let group = r
                        .as_ref()
                        .ok()
                        .and_then(|r| shared.core.get(r.seq))
                        .and_then(|m| m.group.clone());
                    let result = match r.and_then(|r| shared.core.delete(&r, now)) {
                        Ok(Deleted::Removed(seq)) => {
                            tables.remove_message(h.id, seq)?;
                            deleted += 1;
                            groups.extend(group);
                            Ok(())
                        }
                        Ok(Deleted::Nothing) => Ok(()),
                        Err(e) => Err(e),
                    };
                    out.push(result);
                }
                let fifo = shared.core.fifo();
                drop(shared);
                Counters::add(&h.counters.deleted, deleted);
                if fifo {
                    // A delete may release a FIFO group a long poll waits
                    // for; one receive takes up to ten groups, and passes
                    // the wake-up on when it leaves more behind.
                    h.wake(groups.len().div_ceil(10));
                }
                Ok(Ok(out))
            })
            .await
    }

    /// Changes the visibility timeout of a received message.
    pub async fn change_visibility(
        &self,
        queue: &str,
        receipt_handle: &str,
        timeout_seconds: i64,
    ) -> QueueResult<()> {
        self.change_visibility_batch(queue, vec![(receipt_handle.to_owned(), timeout_seconds)])
            .await?
            .pop()
            .expect("one result per handle")
    }

    /// Changes the visibility of up to 10 messages in one commit; one result
    /// per entry.
    pub async fn change_visibility_batch(
        &self,
        queue: &str,
        entries: Vec<(String, i64)>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        let handle = self.inner.handle(queue)?;
        let checked: Vec<QueueResult<(Receipt, u64)>> = entries
            .iter()
            .map(|(h, t)| {
                let receipt = decode(h, handle.id)?;
                if !(0..=43_200).contains(t) {
                    return Err(QueueError::invalid(format!(
                        "Value {t} for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200, if provided."
                    )));
                }
                Ok((receipt, *t as u64 * 1000))
            })
            .collect();
        let h = handle.clone();
        self.inner
            .submit(move |ctx| {
                let now = ctx.now_ms();
                let mut tables = Tables::open(ctx.transaction())?;
                let mut shared = h.lock();
                if shared.deleted {
                    return Ok(Err(QueueError::QueueDoesNotExist));
                }
                let mut out = Vec::with_capacity(checked.len());
                let mut released = 0;
                for entry in checked {
                    let result = match entry.and_then(|(r, ms)| {
                        shared.core.change_visibility(&r, now, ms).map(|s| (r, s))
                    }) {
                        Ok((r, state)) => {
                            let meta = shared.core.get(r.seq).ok_or_else(|| not_indexed(r.seq))?;
                            tables.put_meta(h.id, r.seq, meta)?;
                            released += usize::from(state.visible_at <= now);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    };
                    out.push(result);
                }
                drop(shared);
                h.wake(released);
                Ok(Ok(out))
            })
            .await
    }
}

/// A receipt handle of this queue, or ReceiptHandleIsInvalid.
fn decode(handle: &str, queue_id: u64) -> QueueResult<Receipt> {
    match Receipt::decode(handle) {
        Some(r) if r.queue_id == queue_id => Ok(r),
        _ => Err(QueueError::ReceiptHandleIsInvalid(format!(
            "The input receipt handle \"{handle}\" is not a valid receipt handle."
        ))),
    }
}

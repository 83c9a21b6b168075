//! [`Queues`]: the embedded queues' API, over the core and the store.
//!
//! Every change runs as an operation inside the store's group-commit write
//! transaction (`EmbeddedStore::submit`): the operation updates the queue's
//! in-memory core and writes the same change to the queue tables. The core
//! is only touched on the store's single writer thread, so operations on a
//! queue are serialised in commit order; readers (attributes, stats, long
//! polls deciding whether to try) lock it briefly. A caller is answered only
//! after the commit, so a handed-out message is durably in flight before its
//! consumer sees it.
//!
//! Operations validate everything before their first write and never fail
//! after it. A storage error fails the store's whole batch and stops the
//! store for good; the in-memory cores may then be ahead of the file, but no
//! later write can commit and a restart rebuilds them from the file.
//!
//! The cores hold every message's metadata (not its body): memory grows
//! with the backlog, about a hundred bytes per message, and opening the file
//! reads every message header once.

mod control;
mod moves;
mod receive;
mod send;
mod settle;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use postbox_store::StoreError;
use postbox_store::embedded::{EmbeddedStore, WriteContext};
use postbox_store::{Clock, SystemClock};
use tokio::sync::Notify;

pub use moves::{MoveTask, MoveTaskStatus};
pub use receive::ReceiveOptions;

use crate::core::{DedupEntry, MessageMeta, QueueCore};
use crate::error::{QueueError, QueueResult};
use crate::stats::Counters;
use crate::storage::{QueueRecord, StorageResult, Tables};

/// How the queues run.
#[derive(Clone)]
pub struct QueuesOptions {
    /// The account id in queue URLs and ARNs.
    pub account_id: String,
    /// The region in ARNs.
    pub region: String,
    /// The source of "now" for async decisions (long polls, counts, the
    /// sweeper). Must be the clock the store was opened with: operations
    /// inside a commit use the store's clock.
    pub clock: Arc<dyn Clock>,
    /// How often expired messages and deduplication ids are removed.
    pub sweep_interval: Duration,
}

impl Default for QueuesOptions {
    fn default() -> Self {
        QueuesOptions {
            account_id: "000000000000".to_owned(),
            region: "us-east-1".to_owned(),
            clock: Arc::new(SystemClock),
            sweep_interval: Duration::from_secs(1),
        }
    }
}

impl std::fmt::Debug for QueuesOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuesOptions")
            .field("account_id", &self.account_id)
            .field("region", &self.region)
            .field("sweep_interval", &self.sweep_interval)
            .finish_non_exhaustive()
    }
}

/// One queue's live state.
pub(crate) struct QueueHandle {
    pub id: u64,
    pub name: String,
    pub state: Mutex<QueueShared>,
    /// Long polls wait here; woken one per message that became receivable
    /// (not all at once: a herd of waiters would all race for one message).
    pub arrivals: Notify,
    pub counters: Counters,
    /// The newest `EmbeddedStore::committed_mark` a send into this queue
    /// was made after. A sender inside a write operation (the relay) may
    /// have read commits not yet synced; a receive answered before its own
    /// sync waits until this mark is synced, so no consumer acts on a
    /// message whose cause a crash could still take back.
    pub sent_after: AtomicU64,
    /// In-process long polls a send hands messages to inside its own
    /// commit (see `receive::hand_off`), oldest first.
    pub parked: Mutex<std::collections::VecDeque<receive::Parked>>,
    /// The id of the next long poll parked here.
    pub next_park: AtomicU64,
}

pub(crate) struct QueueShared {
    pub record: QueueRecord,
    pub core: QueueCore,
    pub deleted: bool,
    /// When the last PurgeQueue ran (ms): one purge per 60 s.
    pub last_purge: Option<u64>,
    /// FIFO ReceiveRequestAttemptIds: what each receive handed out, so a
    /// retry during the visibility timeout gets the same messages.
    pub attempts: std::collections::HashMap<String, Attempt>,
}

/// What one FIFO receive attempt handed out.
pub(crate) struct Attempt {
    pub expires_at: u64,
    pub token: u64,
    pub seqs: Vec<u64>,
}

impl QueueHandle {
    pub fn lock(&self) -> MutexGuard<'_, QueueShared> {
        self.state.lock().expect("queue state lock")
    }

    /// Wakes up to `n` waiting receives (at most 10: one receive takes up
    /// to 10 messages).
    pub fn wake(&self, n: usize) {
        for _ in 0..n.min(10) {
            self.arrivals.notify_one();
        }
    }

    /// Messages moved here from `source` keep what they were sent after
    /// (see [`QueueHandle::sent_after`]).
    pub fn moved_from(&self, source: &QueueHandle) {
        let mark = source.sent_after.load(Ordering::Acquire);
        self.sent_after.fetch_max(mark, Ordering::Release);
    }

    /// Wakes every waiting receive (the queue changed for all of them).
    pub fn wake_all(&self) {
        self.arrivals.notify_waiters();
    }
}

pub(crate) struct Inner {
    pub store: EmbeddedStore,
    pub options: QueuesOptions,
    pub registry: RwLock<BTreeMap<String, Arc<QueueHandle>>>,
    pub tasks: Mutex<Vec<Arc<MoveTask>>>,
    /// Messages counting looked at one by one: see
    /// [`Queues::messages_counted`].
    pub messages_counted: std::sync::atomic::AtomicU64,
}

/// The embedded queues: SQS's semantics in the store's file. Cheap to clone.
#[derive(Clone)]
pub struct Queues {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues").finish_non_exhaustive()
    }
}

impl Queues {
    /// Loads the queues kept in `store`'s file and starts the sweeper that
    /// removes expired messages and deduplication ids. Needs a Tokio runtime.
    ///
    /// Open the queues of a store once and share the handle (it is cheap to
    /// clone): each `Queues` keeps its own in-memory schedule, and two of
    /// them on one store would not see each other's changes.
    ///
    /// The store must have been opened with the queues' tables
    /// ([`crate::tables`]), so that its commit log replays their changes.
    pub async fn open(store: EmbeddedStore, options: QueuesOptions) -> QueueResult<Queues> {
        if !store.keeps(crate::storage::OWNER) {
            return Err(QueueError::Storage(
                "the store was opened without the queues' tables: open it with \
                 EmbeddedOptions::keeping(postbox_queue::tables())"
                    .to_owned(),
            ));
        }
        let loaded = store.submit(load).await?;
        let registry = loaded
            .into_iter()
            .map(|h| (h.name.clone(), Arc::new(h)))
            .collect();
        let inner = Arc::new(Inner {
            store,
            options,
            registry: RwLock::new(registry),
            tasks: Mutex::new(Vec::new()),
            messages_counted: std::sync::atomic::AtomicU64::new(0),
        });
        tokio::spawn(sweep_loop(Arc::downgrade(&inner)));
        Ok(Queues { inner })
    }

    /// The account id in URLs and ARNs.
    pub fn account_id(&self) -> &str {
        &self.inner.options.account_id
    }

    /// The ARN of queue `name`.
    pub fn arn(&self, name: &str) -> String {
        self.inner.arn(name)
    }

    /// Sends `messages` to `queue` inside the caller's write operation, so
    /// they commit (or not) with whatever else it writes, e.g. a relay's
    /// stream checkpoint. All or nothing: if the queue is missing or any
    /// message is invalid, nothing is written and the queue error is
    /// returned. Call it last in the operation (its writes are not staged)
    /// and do not fail the operation after it returned `Ok(Ok(_))`. The
    /// answer is each message's id (a repeated FIFO deduplication id answers
    /// the first message's); the MD5 digests a SendMessage answers with are
    /// not computed.
    ///
    /// [`Queues::prepare_send`] then [`Queues::send_prepared_in`] do the
    /// same with the validation and encoding off the store's writer.
    pub fn send_in(
        &self,
        ctx: &mut WriteContext<'_>,
        queue: &str,
        messages: Vec<crate::message::NewMessage>,
    ) -> Result<QueueResult<Vec<String>>, StoreError> {
        match self.prepare_send(queue, messages) {
            Ok(prepared) => self.send_prepared_in(ctx, prepared),
            Err(e) => Ok(Err(e)),
        }
    }

    /// The first half of [`Queues::send_in`], for the caller's own thread:
    /// validates `messages` against `queue` (all or nothing) and encodes
    /// them, so the store's writer only enqueues.
    pub fn prepare_send(
        &self,
        queue: &str,
        messages: Vec<crate::message::NewMessage>,
    ) -> QueueResult<PreparedSend> {
        let handle = self.inner.handle(queue)?;
        let messages = send::prepare(&handle, messages, false)
            .into_iter()
            .collect::<QueueResult<Vec<_>>>()?;
        Ok(PreparedSend { handle, messages })
    }

    /// The second half of [`Queues::send_in`], inside the caller's write
    /// operation, with the same rules. A queue deleted since it was
    /// prepared answers `QueueDoesNotExist` and nothing is written.
    pub fn send_prepared_in(
        &self,
        ctx: &mut WriteContext<'_>,
        prepared: PreparedSend,
    ) -> Result<QueueResult<Vec<String>>, StoreError> {
        let PreparedSend { handle, messages } = prepared;
        let messages = messages.into_iter().map(Ok).collect();
        let mark = self.inner.store.committed_mark();
        Ok(
            send::commit(&self.inner, ctx, &handle, messages, mark)?.map(|results| {
                results
                    .into_iter()
                    .map(|r| r.expect("all valid").message_id)
                    .collect()
            }),
        )
    }
}

/// Messages validated and encoded for one queue by
/// [`Queues::prepare_send`], waiting for [`Queues::send_prepared_in`].
pub struct PreparedSend {
    handle: Arc<QueueHandle>,
    messages: Vec<send::Prepared>,
}

impl PreparedSend {
    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True when it holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

impl std::fmt::Debug for PreparedSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSend")
            .field("messages", &self.messages.len())
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub fn arn(&self, name: &str) -> String {
        format!(
            "arn:aws:sqs:{}:{}:{name}",
            self.options.region, self.options.account_id
        )
    }

    pub fn now(&self) -> u64 {
        self.options.clock.now_ms()
    }

    pub fn lookup(&self, name: &str) -> Option<Arc<QueueHandle>> {
        self.registry
            .read()
            .expect("registry lock")
            .get(name)
            .cloned()
    }

    pub fn handle(&self, name: &str) -> QueueResult<Arc<QueueHandle>> {
        self.lookup(name).ok_or(QueueError::QueueDoesNotExist)
    }

    /// The handle of queue `id` if it still exists (checked inside a commit:
    /// it may have been deleted since the request was validated).
    pub fn live(&self, handle: &Arc<QueueHandle>) -> QueueResult<()> {
        if handle.lock().deleted {
            Err(QueueError::QueueDoesNotExist)
        } else {
            Ok(())
        }
    }

    /// Runs an operation on `handle`'s queue in the next group commit, after
    /// checking, inside that commit, that an earlier operation of the same
    /// batch did not delete the queue.
    pub async fn submit_live<T, F>(
        self: &Arc<Self>,
        handle: Arc<QueueHandle>,
        op: F,
    ) -> QueueResult<T>
    where
        F: FnOnce(&mut WriteContext<'_>, &Arc<QueueHandle>) -> StorageResult<QueueResult<T>>
            + Send
            + 'static,
        T: Send + 'static,
    {
        let inner = self.clone();
        self.submit(move |ctx| {
            if let Err(e) = inner.live(&handle) {
                return Ok(Err(e));
            }
            op(ctx, &handle)
        })
        .await
    }

    /// Runs a queue operation in the next group commit.
    pub async fn submit<T, F>(&self, op: F) -> QueueResult<T>
    where
        F: FnOnce(&mut WriteContext<'_>) -> StorageResult<QueueResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.store.submit(op).await?
    }

    /// [`Inner::submit`], answered once the commit is made rather than once
    /// it is synced (`EmbeddedStore::submit_unsynced`): for receives that
    /// ask for it (`ReceiveOptions::answer_before_sync`).
    pub async fn submit_unsynced<T, F>(&self, op: F) -> QueueResult<T>
    where
        F: FnOnce(&mut WriteContext<'_>) -> StorageResult<QueueResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.store.submit_unsynced(op).await?
    }
}

/// Adds a message to `handle`'s queue: its rows and its core entry.
/// `encoded` is `payload` encoded (its send time included).
pub(crate) fn insert_message(
    tables: &mut Tables<'_>,
    handle: &QueueHandle,
    shared: &mut QueueShared,
    payload: &crate::storage::Payload,
    encoded: &[u8],
    state: crate::core::MessageState,
) -> StorageResult<u64> {
    let seq = shared.core.take_seq();
    let meta = MessageMeta {
        group: payload.group.as_deref().map(Arc::from),
        sent_at: payload.sent_at,
        size: payload.size,
        state,
    };
    tables.put_message(handle.id, seq, encoded, &meta)?;
    shared.core.insert(seq, meta);
    Ok(seq)
}

/// Rebuilds every queue's core from the file.
fn load(ctx: &mut WriteContext<'_>) -> StorageResult<Vec<QueueHandle>> {
    let now = ctx.now_ms();
    let mut tables = Tables::open(ctx.transaction())?;
    tables.move_dedup_by_key()?;
    tables.move_states()?;
    let mut out = Vec::new();
    for record in tables.all_queues()? {
        let mut core = QueueCore::new(record.config.fifo, first_seq(now));
        tables.dedup_entries(record.id, |key, entry| core.dedup.insert(key, entry))?;
        tables.messages(record.id, |seq, meta| core.insert(seq, meta))?;
        out.push(new_handle(record, core));
    }
    Ok(out)
}

/// Where a queue's sequence numbers start after open or creation: above
/// anything handed out before as long as fewer than 1,000 messages per
/// millisecond were sent (FIFO sequence numbers only ever grow, even after
/// the queue was emptied and the process restarted).
pub(crate) fn first_seq(now: u64) -> u64 {
    now.saturating_mul(1000)
}

pub(crate) fn new_handle(record: QueueRecord, core: QueueCore) -> QueueHandle {
    QueueHandle {
        id: record.id,
        name: record.name.clone(),
        state: Mutex::new(QueueShared {
            record,
            core,
            deleted: false,
            last_purge: None,
            attempts: std::collections::HashMap::new(),
        }),
        arrivals: Notify::new(),
        counters: Counters::default(),
        sent_after: AtomicU64::new(0),
        parked: Mutex::new(std::collections::VecDeque::new()),
        next_park: AtomicU64::new(0),
    }
}

/// Removes expired messages and deduplication ids, a bounded amount per
/// commit, until the queues are dropped.
async fn sweep_loop(inner: Weak<Inner>) {
    loop {
        let Some(i) = inner.upgrade() else { return };
        let interval = i.options.sweep_interval;
        let handles: Vec<Arc<QueueHandle>> = i
            .registry
            .read()
            .expect("registry lock")
            .values()
            .cloned()
            .collect();
        let now = i.now();
        for h in handles {
            // Each commit removes a bounded amount; a busy queue may need
            // many per tick to keep up with what expires.
            for _ in 0..MAX_SWEEPS_PER_TICK {
                let due = {
                    let s = h.lock();
                    let retention = s.record.config.message_retention_period as u64 * 1000;
                    !s.deleted
                        && (s.core.has_expired(now, retention) || s.core.dedup.has_expired(now))
                };
                if !due {
                    break;
                }
                let h2 = h.clone();
                if let Err(e) = i.submit(move |ctx| sweep_queue(ctx, &h2).map(Ok)).await {
                    tracing::warn!(queue = %h.name, error = %e, "queue sweep failed");
                    break;
                }
            }
        }
        drop(i);
        tokio::time::sleep(interval).await;
    }
}

/// Most messages or deduplication ids removed in one sweep commit.
const SWEEP_BATCH: usize = 1000;

/// Most sweep commits per queue per sweep interval (so up to 100,000
/// expiries a second with the default interval).
const MAX_SWEEPS_PER_TICK: usize = 100;

/// Removes a queue's expired messages and deduplication ids (bounded).
pub(crate) fn sweep_queue(ctx: &mut WriteContext<'_>, h: &QueueHandle) -> StorageResult<()> {
    let now = ctx.now_ms();
    let mut tables = Tables::open(ctx.transaction())?;
    let mut s = h.lock();
    if s.deleted {
        return Ok(());
    }
    let retention = s.record.config.message_retention_period as u64 * 1000;
    let expired = s.core.expire(now, retention, SWEEP_BATCH);
    for seq in &expired {
        tables.remove_message(h.id, *seq)?;
    }
    Counters::add(&h.counters.expired, expired.len());
    for (at, key) in s.core.dedup.expire(now, SWEEP_BATCH) {
        tables.remove_dedup(h.id, at, key)?;
    }
    Ok(())
}

/// Remembers a deduplication id in the core and the file.
pub(crate) fn remember_dedup(
    tables: &mut Tables<'_>,
    handle: &QueueHandle,
    shared: &mut QueueShared,
    key: crate::core::DedupKey,
    entry: DedupEntry,
) -> StorageResult<()> {
    tables.put_dedup(handle.id, key, &entry)?;
    shared.core.dedup.insert(key, entry);
    Ok(())
}

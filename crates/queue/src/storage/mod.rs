//! The queues' redb tables in the store's file, and their byte layout.
//!
//! Tables (all prefixed `postbox_queue_` so they never meet the item
//! store's):
//! - `queues`: queue name -> JSON [`QueueRecord`] (id, configuration, times);
//! - `system`: counters, e.g. the next queue id;
//! - `payloads`: `(queue id, seq)` -> the immutable part of a message
//!   ([`Payload`], layout in `codec`); `seq` is the send order, so a FIFO
//!   group's messages are in order within the queue's range;
//! - `metas`: `(queue id, seq)` -> `(visible_at, receive_count,
//!   first_receive_at, token, sent_at, size, group)`: what a queue keeps of
//!   a message in memory, its state (the first four) rewritten by a receive
//!   or visibility change. The queue's index is rebuilt from it at open
//!   without reading a payload. (Files of earlier versions keep the state
//!   alone in `states`: moved at open, reading each payload once.)
//! - `dedup_by_expiry`: `(queue id, expires_at, 128-bit dedup key)` ->
//!   `(seq, 128-bit message id)`. Ids are looked up in the queue's memory;
//!   the file only rebuilds it at open, so its rows are ordered by expiry:
//!   a send appends at the end and the sweep trims the start, instead of
//!   each touching a random page of a table of millions of rows. (Files of
//!   earlier versions keep them in `dedup`, keyed by id: moved at open.)
//!
//! Every write happens inside the store's group-commit transaction through
//! `EmbeddedStore::submit`, so a queue change can commit together with item
//! writes and stream checkpoints. The store is opened with [`tables`], so
//! that its commit log can replay these tables after a crash.

mod codec;

use std::collections::BTreeMap;
use std::sync::Arc;

use postbox_store::embedded::{LoggedTable as Table, TableOpener, TableSet};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

pub use codec::{BodyRef, Payload};

use crate::attributes::QueueConfig;
use crate::core::{DedupEntry, DedupKey, MessageMeta, MessageState};

/// Queue name -> JSON queue record.
pub(crate) const QUEUES: TableDefinition<&str, &str> = TableDefinition::new("postbox_queue_queues");
/// Counters of the queues (the next queue id).
pub(crate) const SYSTEM: TableDefinition<&str, u64> = TableDefinition::new("postbox_queue_system");
/// (queue id, seq) -> the immutable part of a message.
pub(crate) const PAYLOADS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("postbox_queue_payloads");
/// (queue id, seq) -> (visible_at, receive_count, first_receive_at, token):
/// the layout before [`METAS`], read once at open to move its rows.
pub(crate) const STATES: TableDefinition<(u64, u64), (u64, u32, u64, u64)> =
    TableDefinition::new("postbox_queue_states");
/// (queue id, seq) -> (visible_at, receive_count, first_receive_at, token,
/// sent_at, size, group).
pub(crate) const METAS: TableDefinition<(u64, u64), MetaRow<'static>> =
    TableDefinition::new("postbox_queue_metas");

/// A row of [`METAS`].
type MetaRow<'a> = (u64, u32, u64, u64, u64, u32, Option<&'a str>);
/// (queue id, dedup key) -> (seq, expires_at, message id): the layout
/// before [`DEDUP`], read once at open to move its rows.
pub(crate) const DEDUP_BY_KEY: TableDefinition<(u64, u128), (u64, u64, u128)> =
    TableDefinition::new("postbox_queue_dedup");
/// (queue id, expires_at, dedup key) -> (seq, message id).
pub(crate) const DEDUP: TableDefinition<(u64, u64, u128), (u64, u128)> =
    TableDefinition::new("postbox_queue_dedup_by_expiry");

/// The owner of the queues' [`TableSet`].
pub(crate) const OWNER: &str = "postbox_queue";

/// The queues' tables with the codes the store's commit log names them by
/// (never reused: a log written by an older build must still replay). A
/// store that holds queues is opened with them:
/// `EmbeddedOptions::default().keeping(postbox_queue::tables())`.
pub fn tables() -> TableSet {
    TableSet::new(OWNER)
        .table(16, QUEUES)
        .table(17, SYSTEM)
        .table(18, PAYLOADS)
        .table(19, STATES)
        .table(20, DEDUP_BY_KEY)
        .table(21, DEDUP)
        .table(22, METAS)
}

const NEXT_QUEUE_ID: &str = "next_queue_id";

/// A queue as stored in `queues`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueueRecord {
    /// Internal id, never reused; keys the queue's rows.
    pub id: u64,
    /// The queue's name.
    pub name: String,
    /// Its attributes.
    pub config: QueueConfig,
    /// Creation time (ms).
    pub created_at: u64,
    /// Last SetQueueAttributes (ms).
    pub modified_at: u64,
    /// Cost-allocation tags (kept and listed; they change no behaviour).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A storage failure, in the store's terms (it fails the batch).
pub(crate) type StorageResult<T> = Result<T, postbox_store::StoreError>;

pub(crate) fn storage_err(e: impl std::fmt::Display) -> postbox_store::StoreError {
    postbox_store::StoreError::Storage(format!("queue tables: {e}"))
}

/// The error of a message whose state changed but that its queue's index
/// does not hold (a bug: nothing is written).
pub(crate) fn not_indexed(seq: u64) -> postbox_store::StoreError {
    storage_err(format!(
        "message {seq} changed state but is not in its queue's index"
    ))
}

type MetasTable<'t> = Table<'t, (u64, u64), MetaRow<'static>>;
type DedupTable<'t> = Table<'t, (u64, u64, u128), (u64, u128)>;

/// The queue tables of one write transaction, each opened on first use
/// (an operation touches two or three of them; opening costs a lookup).
pub(crate) struct Tables<'t> {
    txn: TableOpener<'t>,
    queues: Option<Table<'t, &'static str, &'static str>>,
    system: Option<Table<'t, &'static str, u64>>,
    payloads: Option<Table<'t, (u64, u64), &'static [u8]>>,
    metas: Option<MetasTable<'t>>,
    dedup: Option<DedupTable<'t>>,
}

/// Opens `$field` of `$self` from `$def` unless it is open.
macro_rules! table {
    ($self:ident, $field:ident, $def:expr) => {{
        if $self.$field.is_none() {
            $self.$field = Some($self.txn.open_table($def)?);
        }
        $self.$field.as_mut().expect("opened above")
    }};
}

impl<'t> Tables<'t> {
    pub fn open(txn: TableOpener<'t>) -> StorageResult<Tables<'t>> {
        Ok(Tables {
            txn,
            queues: None,
            system: None,
            payloads: None,
            metas: None,
            dedup: None,
        })
    }

    /// Takes the next queue id.
    pub fn next_queue_id(&mut self) -> StorageResult<u64> {
        let system = table!(self, system, SYSTEM);
        let id = system
            .get(NEXT_QUEUE_ID)
            .map_err(storage_err)?
            .map_or(1, |g| g.value());
        system.insert(NEXT_QUEUE_ID, id + 1).map_err(storage_err)?;
        Ok(id)
    }

    pub fn put_queue(&mut self, record: &QueueRecord) -> StorageResult<()> {
        let json = serde_json::to_string(record).expect("queue records serialise");
        table!(self, queues, QUEUES)
            .insert(record.name.as_str(), json.as_str())
            .map_err(storage_err)?;
        Ok(())
    }

    /// Every stored queue.
    pub fn all_queues(&mut self) -> StorageResult<Vec<QueueRecord>> {
        let mut out = Vec::new();
        for row in table!(self, queues, QUEUES).iter().map_err(storage_err)? {
            let (name, json) = row.map_err(storage_err)?;
            let record = serde_json::from_str(json.value()).map_err(|e| {
                storage_err(format!("corrupt record of queue {}: {e}", name.value()))
            })?;
            out.push(record);
        }
        Ok(out)
    }

    /// Removes a queue and all its rows.
    pub fn drop_queue(&mut self, record: &QueueRecord) -> StorageResult<()> {
        self.remove_all_messages(record.id)?;
        let id = record.id;
        table!(self, dedup, DEDUP)
            .delete_range((id, 0, 0)..=(id, u64::MAX, u128::MAX))
            .map_err(storage_err)?;
        table!(self, queues, QUEUES)
            .remove(record.name.as_str())
            .map_err(storage_err)?;
        Ok(())
    }

    pub fn remove_all_messages(&mut self, id: u64) -> StorageResult<()> {
        table!(self, payloads, PAYLOADS)
            .delete_range((id, 0)..=(id, u64::MAX))
            .map_err(storage_err)?;
        table!(self, metas, METAS)
            .delete_range((id, 0)..=(id, u64::MAX))
            .map_err(storage_err)?;
        Ok(())
    }

    /// Stores a message: its encoded payload and what the queue keeps of it.
    pub fn put_message(
        &mut self,
        id: u64,
        seq: u64,
        encoded: &[u8],
        meta: &MessageMeta,
    ) -> StorageResult<()> {
        table!(self, payloads, PAYLOADS)
            .insert((id, seq), encoded)
            .map_err(storage_err)?;
        self.put_meta(id, seq, meta)
    }

    /// A message's payload bytes, decoded by the caller off the writer thread.
    pub fn payload_bytes(&mut self, id: u64, seq: u64) -> StorageResult<Vec<u8>> {
        self.with_payload(id, seq, |bytes| Ok(bytes.to_vec()))
    }

    /// Runs `f` on the stored payload of message `seq` of queue `id`; a
    /// scheduled message without one is a storage error.
    fn with_payload<T>(
        &mut self,
        id: u64,
        seq: u64,
        f: impl FnOnce(&[u8]) -> StorageResult<T>,
    ) -> StorageResult<T> {
        let bytes = table!(self, payloads, PAYLOADS)
            .get((id, seq))
            .map_err(storage_err)?
            .ok_or_else(|| {
                storage_err(format!(
                    "message {seq} of queue {id} is scheduled but has no payload"
                ))
            })?;
        f(bytes.value())
    }

    /// Stores what the queue keeps of message `seq` (after a send, or a
    /// change of its state).
    pub fn put_meta(&mut self, id: u64, seq: u64, m: &MessageMeta) -> StorageResult<()> {
        let s = &m.state;
        let row = (
            s.visible_at,
            s.receive_count,
            s.first_receive_at,
            s.token,
            m.sent_at,
            m.size,
            m.group.as_deref(),
        );
        table!(self, metas, METAS)
            .insert((id, seq), row)
            .map_err(storage_err)?;
        Ok(())
    }

    pub fn payload(&mut self, id: u64, seq: u64) -> StorageResult<Payload> {
        self.with_payload(id, seq, |bytes| Payload::decode(bytes).map_err(storage_err))
    }

    pub fn remove_message(&mut self, id: u64, seq: u64) -> StorageResult<()> {
        table!(self, payloads, PAYLOADS)
            .remove((id, seq))
            .map_err(storage_err)?;
        table!(self, metas, METAS)
            .remove((id, seq))
            .map_err(storage_err)?;
        Ok(())
    }

    pub fn put_dedup(&mut self, id: u64, key: DedupKey, e: &DedupEntry) -> StorageResult<()> {
        table!(self, dedup, DEDUP)
            .insert((id, e.expires_at, key), (e.seq, e.message_id))
            .map_err(storage_err)?;
        Ok(())
    }

    /// Forgets the remembrance of `key` that expires at `at`.
    pub fn remove_dedup(&mut self, id: u64, at: u64, key: DedupKey) -> StorageResult<()> {
        table!(self, dedup, DEDUP)
            .remove((id, at, key))
            .map_err(storage_err)?;
        Ok(())
    }

    /// Moves the rows of the table keyed by id (files of earlier
    /// versions) into the table keyed by expiry, and empties it.
    pub fn move_dedup_by_key(&mut self) -> StorageResult<()> {
        if !self.txn.exists(DEDUP_BY_KEY)? {
            return Ok(());
        }
        let mut old = self.txn.open_table(DEDUP_BY_KEY)?;
        let mut rows = Vec::new();
        for row in old.iter().map_err(storage_err)? {
            let (k, v) = row.map_err(storage_err)?;
            rows.push((k.value(), v.value()));
        }
        if rows.is_empty() {
            return Ok(());
        }
        old.delete_range((0, 0)..=(u64::MAX, u128::MAX))
            .map_err(storage_err)?;
        for ((id, key), (seq, expires_at, message_id)) in rows {
            let entry = DedupEntry {
                message_id,
                seq,
                expires_at,
            };
            self.put_dedup(id, key, &entry)?;
        }
        Ok(())
    }

    /// A queue's messages in sequence order, as the queue keeps them, each
    /// handed to `each` as it is read (a queue's backlog is never held twice).
    pub fn messages(
        &mut self,
        id: u64,
        mut each: impl FnMut(u64, MessageMeta),
    ) -> StorageResult<()> {
        for row in table!(self, metas, METAS)
            .range((id, 0)..=(id, u64::MAX))
            .map_err(storage_err)?
        {
            let (k, v) = row.map_err(storage_err)?;
            let (visible_at, receive_count, first_receive_at, token, sent_at, size, group) =
                v.value();
            let state = MessageState {
                visible_at,
                receive_count,
                first_receive_at,
                token,
                // Not stored: extensions of a message in flight across a
                // reopen are not bounded.
                received_at: 0,
            };
            each(
                k.value().1,
                MessageMeta {
                    group: group.map(Arc::from),
                    sent_at,
                    size,
                    state,
                },
            );
        }
        Ok(())
    }

    /// Moves the rows of `states` (files of earlier versions) into
    /// [`METAS`], reading each message's payload once for the rest, and
    /// empties it.
    pub fn move_states(&mut self) -> StorageResult<()> {
        if !self.txn.exists(STATES)? {
            return Ok(());
        }
        let mut old = self.txn.open_table(STATES)?;
        let mut moved = Vec::new();
        for row in old.iter().map_err(storage_err)? {
            let (k, v) = row.map_err(storage_err)?;
            let (id, seq) = k.value();
            moved.push((id, seq, v.value()));
        }
        if moved.is_empty() {
            return Ok(());
        }
        old.delete_range((0, 0)..=(u64::MAX, u64::MAX))
            .map_err(storage_err)?;
        for (id, seq, (visible_at, receive_count, first_receive_at, token)) in moved {
            let payload = self.with_payload(id, seq, |bytes| {
                Payload::decode_without_body(bytes).map_err(storage_err)
            })?;
            let meta = MessageMeta {
                group: payload.group.as_deref().map(Arc::from),
                sent_at: payload.sent_at,
                size: payload.size,
                state: MessageState {
                    visible_at,
                    receive_count,
                    first_receive_at,
                    token,
                    received_at: 0,
                },
            };
            self.put_meta(id, seq, &meta)?;
        }
        Ok(())
    }

    /// A queue's deduplication entries, in expiry order, each handed to
    /// `each` as it is read.
    pub fn dedup_entries(
        &mut self,
        id: u64,
        mut each: impl FnMut(DedupKey, DedupEntry),
    ) -> StorageResult<()> {
        for row in table!(self, dedup, DEDUP)
            .range((id, 0, 0)..=(id, u64::MAX, u128::MAX))
            .map_err(storage_err)?
        {
            let (k, v) = row.map_err(storage_err)?;
            let (_, expires_at, key) = k.value();
            let (seq, message_id) = v.value();
            each(
                key,
                DedupEntry {
                    message_id,
                    seq,
                    expires_at,
                },
            );
        }
        Ok(())
    }
}

//! The queues' redb tables in the store's file, and their byte layout.
//!
//! Tables (all prefixed `postbox_queue_` so they never meet the item
//! store's):
//! - `queues`: queue name -> JSON [`QueueRecord`] (id, configuration, times);
//! - `system`: counters, e.g. the next queue id;
//! - `payloads`: `(queue id, seq)` -> the immutable part of a message
//!   ([`Payload`], layout in `codec`); `seq` is the send order, so a FIFO
//!   group's messages are in order within the queue's range;
//! - `states`: `(queue id, seq)` -> `(visible_at, receive_count,
//!   first_receive_at, token)`, the part a receive or visibility change
//!   rewrites: the in-flight/visibility index is rebuilt from it on open;
//! - `dedup`: `(queue id, dedup key)` -> `(seq, expires_at, message id)`.
//!
//! Every write happens inside the store's group-commit transaction through
//! `EmbeddedStore::submit`, so a queue change can commit together with item
//! writes and stream checkpoints.

mod codec;

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

pub use codec::Payload;

use crate::attributes::QueueConfig;
use crate::core::{DedupEntry, MessageState};

pub(crate) const QUEUES: TableDefinition<&str, &str> = TableDefinition::new("postbox_queue_queues");
pub(crate) const SYSTEM: TableDefinition<&str, u64> = TableDefinition::new("postbox_queue_system");
pub(crate) const PAYLOADS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("postbox_queue_payloads");
pub(crate) const STATES: TableDefinition<(u64, u64), (u64, u32, u64, u64)> =
    TableDefinition::new("postbox_queue_states");
pub(crate) const DEDUP: TableDefinition<(u64, &str), (u64, u64, &str)> = TableDefinition::new("postbox_queue_dedup");

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
}

/// A storage failure, in the store's terms (it fails the batch).
pub(crate) type StorageResult<T> = Result<T, postbox_store::StoreError>;

pub(crate) fn storage_err(e: impl std::fmt::Display) -> postbox_store::StoreError {
    postbox_store::StoreError::Storage(format!("queue tables: {e}"))
}

/// The queue tables, opened in one write transaction.
pub(crate) struct Tables<'t> {
    pub queues: Table<'t, &'static str, &'static str>,
    pub system: Table<'t, &'static str, u64>,
    pub payloads: Table<'t, (u64, u64), &'static [u8]>,
    pub states: Table<'t, (u64, u64), (u64, u32, u64, u64)>,
    pub dedup: Table<'t, (u64, &'static str), (u64, u64, &'static str)>,
}

impl<'t> Tables<'t> {
    pub fn open(txn: &'t WriteTransaction) -> StorageResult<Tables<'t>> {
        Ok(Tables {
            queues: txn.open_table(QUEUES).map_err(storage_err)?,
            system: txn.open_table(SYSTEM).map_err(storage_err)?,
            payloads: txn.open_table(PAYLOADS).map_err(storage_err)?,
            states: txn.open_table(STATES).map_err(storage_err)?,
            dedup: txn.open_table(DEDUP).map_err(storage_err)?,
        })
    }

    /// Takes the next queue id.
    pub fn next_queue_id(&mut self) -> StorageResult<u64> {
        let id = self.system.get(NEXT_QUEUE_ID).map_err(storage_err)?.map_or(1, |g| g.value());
        self.system.insert(NEXT_QUEUE_ID, id + 1).map_err(storage_err)?;
        Ok(id)
    }

    pub fn put_queue(&mut self, record: &QueueRecord) -> StorageResult<()> {
        let json = serde_json::to_string(record).expect("queue records serialise");
        self.queues.insert(record.name.as_str(), json.as_str()).map_err(storage_err)?;
        Ok(())
    }

    /// Every stored queue.
    pub fn all_queues(&self) -> StorageResult<Vec<QueueRecord>> {
        let mut out = Vec::new();
        for row in self.queues.iter().map_err(storage_err)? {
            let (name, json) = row.map_err(storage_err)?;
            let record = serde_json::from_str(json.value())
                .map_err(|e| storage_err(format!("corrupt record of queue {}: {e}", name.value())))?;
            out.push(record);
        }
        Ok(out)
    }

    /// Removes a queue and all its rows.
    pub fn drop_queue(&mut self, record: &QueueRecord) -> StorageResult<()> {
        self.remove_all_messages(record.id)?;
        let id = record.id;
        self.dedup.retain_in((id, "")..(id + 1, ""), |_, _| false).map_err(storage_err)?;
        self.queues.remove(record.name.as_str()).map_err(storage_err)?;
        Ok(())
    }

    pub fn remove_all_messages(&mut self, id: u64) -> StorageResult<()> {
        self.payloads.retain_in((id, 0)..=(id, u64::MAX), |_, _| false).map_err(storage_err)?;
        self.states.retain_in((id, 0)..=(id, u64::MAX), |_, _| false).map_err(storage_err)?;
        Ok(())
    }

    pub fn put_message(&mut self, id: u64, seq: u64, payload: &Payload, state: &MessageState) -> StorageResult<()> {
        self.payloads.insert((id, seq), payload.encode().as_slice()).map_err(storage_err)?;
        self.put_state(id, seq, state)
    }

    pub fn put_state(&mut self, id: u64, seq: u64, s: &MessageState) -> StorageResult<()> {
        self.states
            .insert((id, seq), (s.visible_at, s.receive_count, s.first_receive_at, s.token))
            .map_err(storage_err)?;
        Ok(())
    }

    pub fn payload(&self, id: u64, seq: u64) -> StorageResult<Payload> {
        let bytes = self.payloads.get((id, seq)).map_err(storage_err)?.ok_or_else(|| {
            storage_err(format!("message {seq} of queue {id} is scheduled but has no payload"))
        })?;
        Payload::decode(bytes.value()).map_err(storage_err)
    }

    pub fn remove_message(&mut self, id: u64, seq: u64) -> StorageResult<()> {
        self.payloads.remove((id, seq)).map_err(storage_err)?;
        self.states.remove((id, seq)).map_err(storage_err)?;
        Ok(())
    }

    pub fn put_dedup(&mut self, id: u64, key: &str, e: &DedupEntry) -> StorageResult<()> {
        self.dedup.insert((id, key), (e.seq, e.expires_at, e.message_id.as_str())).map_err(storage_err)?;
        Ok(())
    }

    pub fn remove_dedup(&mut self, id: u64, key: &str) -> StorageResult<()> {
        self.dedup.remove((id, key)).map_err(storage_err)?;
        Ok(())
    }

    /// A queue's messages in sequence order: `(seq, payload, state)`.
    pub fn messages(&self, id: u64) -> StorageResult<Vec<(u64, Payload, MessageState)>> {
        let mut out = Vec::new();
        let mut states = self.states.range((id, 0)..=(id, u64::MAX)).map_err(storage_err)?;
        for row in self.payloads.range((id, 0)..=(id, u64::MAX)).map_err(storage_err)? {
            let (k, v) = row.map_err(storage_err)?;
            let seq = k.value().1;
            let (sk, sv) = states
                .next()
                .ok_or_else(|| storage_err(format!("message {seq} of queue {id} has no state")))?
                .map_err(storage_err)?;
            if sk.value().1 != seq {
                return Err(storage_err(format!("message {seq} of queue {id} has no state")));
            }
            let (visible_at, receive_count, first_receive_at, token) = sv.value();
            let state = MessageState { visible_at, receive_count, first_receive_at, token };
            out.push((seq, Payload::decode_without_body(v.value()).map_err(storage_err)?, state));
        }
        Ok(out)
    }

    /// A queue's deduplication entries.
    pub fn dedup_entries(&self, id: u64) -> StorageResult<Vec<(String, DedupEntry)>> {
        let mut out = Vec::new();
        for row in self.dedup.range((id, "")..(id + 1, "")).map_err(storage_err)? {
            let (k, v) = row.map_err(storage_err)?;
            let (seq, expires_at, message_id) = v.value();
            out.push((k.value().1.to_owned(), DedupEntry { message_id: message_id.to_owned(), seq, expires_at }));
        }
        Ok(out)
    }
}

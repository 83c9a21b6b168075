//! The names Postbox's own resources go by, defined once.
//!
//! A node is a handful of tables and queues that several crates must agree
//! on: the engine writes the events table, the relay's default pipe reads
//! its stream into the events queue, the workers receive from that queue and
//! claim in the inbox table, the API and the wire policy guard all of them.
//! Each name is a constant here, and [`Topology`] gathers them into the one
//! value a node is assembled from; no other crate spells them.
//!
//! [`keys`] holds the event log's key layout (which rows a tenant's log is
//! made of, and how their keys are spelled), for the same reason: the
//! engine writes those keys, the relay's filter and the wire policy
//! recognise them.

pub mod keys;

/// Every table Postbox keeps for itself starts with this; applications'
/// tables may not.
pub const TABLE_PREFIX: &str = "postbox_";
/// Every queue Postbox keeps for itself starts with this.
pub const QUEUE_PREFIX: &str = "postbox";

/// The event log: head, event and verified-checkpoint rows of every tenant.
pub const EVENTS_TABLE: &str = "postbox_events";
/// The FIFO queue the relay fills from the events table's stream, grouped by
/// tenant.
pub const EVENTS_QUEUE: &str = "postbox-events.fifo";
/// The events queue's dead-letter queue.
pub const EVENTS_DLQ: &str = "postbox-events-dlq.fifo";
/// Where the relay's default events pipe puts records it could not deliver.
pub const EVENTS_RELAY_DLQ: &str = "events-relay-dlq";
/// The standard queue the default row-change pipes fill.
pub const ROW_CHANGES_QUEUE: &str = "postbox-row-changes";
/// The inbox: one claim per (event, subscription).
pub const INBOX_TABLE: &str = "postbox_inbox";
/// API tokens, stored hashed.
pub const TOKENS_TABLE: &str = "postbox_tokens";
/// Idempotency keys of emits and the events they answered with.
pub const REQUESTS_TABLE: &str = "postbox_requests";
/// Access keys of the wire protocols (SigV4).
pub const ACCESS_KEYS_TABLE: &str = "postbox_access_keys";
/// Leases of relay pipes, so one relay runs each pipe.
pub const RELAY_LEASES_TABLE: &str = "postbox_relay_leases";
/// On AWS, the relay's state per pipe: its lease and a checkpoint per
/// DynamoDB Streams shard (pk = pipe, sk = `LEASE` or `SHARD#<id>`).
pub const RELAY_SHARDS_TABLE: &str = "postbox_relay_shards";

/// The tables and queues of one node. [`Topology::default`] is the
/// standard set; a test or a second node in one store may rename them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// See [`EVENTS_TABLE`].
    pub events_table: String,
    /// See [`EVENTS_QUEUE`].
    pub events_queue: String,
    /// See [`EVENTS_DLQ`].
    pub events_dlq: String,
    /// See [`EVENTS_RELAY_DLQ`].
    pub events_relay_dlq: String,
    /// See [`ROW_CHANGES_QUEUE`].
    pub row_changes_queue: String,
    /// See [`INBOX_TABLE`].
    pub inbox_table: String,
    /// See [`TOKENS_TABLE`].
    pub tokens_table: String,
    /// See [`REQUESTS_TABLE`].
    pub requests_table: String,
    /// See [`ACCESS_KEYS_TABLE`].
    pub access_keys_table: String,
    /// See [`RELAY_LEASES_TABLE`].
    pub relay_leases_table: String,
    /// See [`RELAY_SHARDS_TABLE`].
    pub relay_shards_table: String,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            events_table: EVENTS_TABLE.to_owned(),
            events_queue: EVENTS_QUEUE.to_owned(),
            events_dlq: EVENTS_DLQ.to_owned(),
            events_relay_dlq: EVENTS_RELAY_DLQ.to_owned(),
            row_changes_queue: ROW_CHANGES_QUEUE.to_owned(),
            inbox_table: INBOX_TABLE.to_owned(),
            tokens_table: TOKENS_TABLE.to_owned(),
            requests_table: REQUESTS_TABLE.to_owned(),
            access_keys_table: ACCESS_KEYS_TABLE.to_owned(),
            relay_leases_table: RELAY_LEASES_TABLE.to_owned(),
            relay_shards_table: RELAY_SHARDS_TABLE.to_owned(),
        }
    }
}

/// Whether `table` is one of Postbox's own (by its prefix).
pub fn is_reserved_table(table: &str) -> bool {
    table.starts_with(TABLE_PREFIX)
}

/// Whether `queue` is one of Postbox's own (by its prefix).
pub fn is_reserved_queue(queue: &str) -> bool {
    queue.starts_with(QUEUE_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_table_is_reserved_and_every_queue_but_the_relay_dlq() {
        let t = Topology::default();
        for table in [
            &t.events_table,
            &t.inbox_table,
            &t.tokens_table,
            &t.requests_table,
            &t.access_keys_table,
            &t.relay_leases_table,
        ] {
            assert!(is_reserved_table(table), "{table}");
        }
        for queue in [&t.events_queue, &t.events_dlq, &t.row_changes_queue] {
            assert!(is_reserved_queue(queue), "{queue}");
        }
        // The relay's DLQ is named like a user's pipe DLQ (`<pipe>-relay-dlq`)
        // so an operator may read and redrive it.
        assert!(!is_reserved_queue(&t.events_relay_dlq));
        assert!(!is_reserved_table("orders") && !is_reserved_table("postbox"));
    }

    #[test]
    fn the_events_queue_is_fifo_and_so_is_its_dlq() {
        assert!(EVENTS_QUEUE.ends_with(".fifo") && EVENTS_DLQ.ends_with(".fifo"));
    }
}

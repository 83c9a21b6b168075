//! Postbox's embedded queues: SQS's semantics (FIFO and standard queues,
//! visibility timeouts, long polling, dead-letter queues, retention,
//! deduplication) stored in the item store's redb file, so that moving a
//! stream record into a queue and advancing the reader's checkpoint can be
//! one local transaction ([`Queues::send_in`]).
//!
//! Code map:
//! - [`core`]: the pure scheduling state of one queue (FIFO groups,
//!   visibility, redrive, retention, deduplication), functions of `now`;
//! - `storage`: the queue tables in the store's file, their layout, and
//!   [`tables`], the set the store is opened with to keep them;
//! - `queues`: [`Queues`], the async API over core and storage that the wire
//!   layer and the engine use;
//! - [`attributes`]: queue attributes, their bounds and defaults;
//! - [`message`]: messages and SQS's rules for bodies and attributes;
//! - [`digest`]: MD5s, SHA-256, message ids and receipt handles;
//! - [`stats`]: depth, in-flight, oldest age and counters;
//! - `clock`: a clock tests can move forward at run time;
//! - `consume`: the receive loop every consumer of a queue runs.
//!
//! Architecture Invariant: a message is handed to a consumer only after the
//! commit that made it in flight; no message is in flight for two consumers
//! at once, across crashes included.

#![warn(missing_docs)]

pub mod attributes;
mod client;
mod clock;
mod consume;
pub mod core;
pub mod digest;
mod error;
pub mod message;
mod queues;
pub mod stats;
mod storage;
#[cfg(feature = "test-support")]
pub mod testing;

pub use client::QueueClient;
pub use clock::ShiftedClock;
pub use consume::consume;
pub use error::{QueueError, QueueResult};
pub use message::{
    ItemRef, MessageAttributeValue, MessageAttributes, NewMessage, ReceivedMessage, SendResult,
};
pub use queues::{MoveTask, MoveTaskStatus, PreparedSend, Queues, QueuesOptions, ReceiveOptions};
pub use stats::QueueStats;
pub use storage::tables;

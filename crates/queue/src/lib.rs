//! Postbox's embedded queues: SQS's semantics over the item store's file.
//!
//! Code map:
//! - [`core`]: the pure scheduling state of one queue (FIFO groups,
//!   visibility, redrive, retention, deduplication), functions of `now`;
//! - `attributes`: queue attributes, their bounds and defaults;
//! - `message`: messages and SQS's rules for bodies and attributes;
//! - `digest`: MD5s, SHA-256, message ids and receipt handles.

pub mod attributes;
pub mod core;
pub mod digest;
mod error;
pub mod message;

pub use error::{QueueError, QueueResult};

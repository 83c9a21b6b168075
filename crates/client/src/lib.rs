//! Postbox's item store and queues over the wire.
//!
//! Workers, relays and operator tools that run as their own processes do
//! not open the store's redb file (one writing process per file): they reach
//! the process that owns it, `postbox serve`, through the AWS JSON 1.0
//! protocols it speaks, exactly as they reach DynamoDB and SQS on AWS.
//!
//! Code map:
//! - [`endpoint`]: one HTTP/1 server, a small keep-alive pool, a deadline
//!   per call; knows nothing of DynamoDB or SQS;
//! - `store`: [`RemoteStore`], an [`ItemStore`](postbox_store::ItemStore)
//!   over `DynamoDB_20120810.*`;
//! - `queues`: [`RemoteQueues`], a [`QueueClient`](postbox_queue::QueueClient)
//!   over `AmazonSQS.*`.
//!
//! Architecture Invariant: an error answer comes back as the same
//! [`StoreError`](postbox_store::StoreError) or
//! [`QueueError`](postbox_queue::QueueError) variant the server's backend
//! produced (cancellation reasons included), so code written against the
//! embedded store behaves the same over the wire; a call that got no answer
//! is `Unavailable`, never a panic and never a guess at the outcome.

#![warn(missing_docs)]

pub mod endpoint;
mod queues;
mod store;

pub use endpoint::{Credentials, Endpoint, EndpointOptions, InvalidEndpoint};
pub use queues::RemoteQueues;
pub use store::RemoteStore;

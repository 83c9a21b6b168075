//! Postbox's runnable examples, on the embedded default:
//!
//! - [`payments`]: a PAYMENT_COMPLETED event, committed with the payment
//!   row, fanned out through the relay and the FIFO queue to four DURABLE
//!   handlers (order mirror, shipment, notification, tag update), one of
//!   them flaky; every store effect happens exactly once.
//! - [`reports`]: an asynchronous report-job API (`POST /reports` with an
//!   Idempotency-Key, `GET /reports/{jobId}`), a pipe turning PENDING jobs
//!   into queue messages, a job runner, and a pipe turning the
//!   RUNNING -> SUCCEEDED transition into a ReportReady event that a bus
//!   rule logs.
//!
//! Each example is two things: the parts a node mounts (the catalog and
//! handlers, the router, the relay config, the runner), and a `run`
//! function that starts a [`postbox_node::Node`] with them in a directory,
//! drives it end to end, prints what happened and returns a report that
//! tests assert on.
//!
//! # Running the examples on a node
//!
//! [`application`] is both examples as one application of a node: the
//! payment catalog and its DURABLE handlers, the report routes (tenant
//! tokens only), the pipes and the runner; [`embedded_application`] adds
//! the setup that creates their tables and queues in the node's store.
//! `postbox serve --examples` starts exactly this:
//!
//! ```no_run
//! # async fn start() -> Result<(), String> {
//! use postbox_node::{Node, NodeOptions};
//!
//! let (catalog, handlers) = postbox_examples::embedded_application("data".as_ref());
//! let node = Node::start(NodeOptions::new("data", catalog, handlers)).await?;
//! // `node.api_router` serves the HTTP API with the report routes.
//! node.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! This crate is a leaf: nothing in Postbox depends on it. It is the one
//! library crate besides the server that speaks HTTP (the report-job API is
//! an axum router), because the example is an HTTP API.

mod application;
mod assembly;
mod error;
pub mod payments;
pub mod reports;

pub use application::{application, code_handlers, embedded_application};
pub use error::ExampleError;

/// A table the examples need: its CreateTable request and the attribute
/// its items expire by, if they do.
#[derive(Clone, Debug)]
pub struct ExampleTable {
    /// How the table is made (keyed by `pk`; a stream where a pipe reads it).
    pub input: postbox_store::api::CreateTableInput,
    /// The TTL attribute.
    pub ttl: Option<&'static str>,
}

/// Every table of both examples, for a store the examples do not create
/// themselves (`postbox init --backend aws --examples`).
pub fn tables() -> Vec<ExampleTable> {
    payments::TABLES
        .iter()
        .chain(reports::TABLES.iter())
        .map(|(name, spec)| ExampleTable {
            input: assembly::table_input(name, *spec),
            ttl: spec.ttl,
        })
        .collect()
}

/// The relay configuration of both examples: the default events pipe and
/// the two report pipes, whose bus rule appends ReportReady events to `log`.
pub fn pipes_toml(log: &std::path::Path) -> String {
    format!("{}\n{}", payments::PIPES_TOML, reports::pipes_toml(log))
}

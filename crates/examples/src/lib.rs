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
//! Each example is two things: the parts a server assembly mounts (the
//! catalog and handlers, the router, the relay config, the runner), and a
//! `run` function that assembles them in a directory, drives them end to
//! end, prints what happened and returns a report that tests assert on.
//!
//! # Mounting the examples in a server
//!
//! The order matters: the relay checks, when it starts, that the tables its
//! pipes read exist with streams, so the tables come first.
//!
//! ```no_run
//! # async fn mount() -> Result<(), postbox_examples::ExampleError> {
//! use std::sync::Arc;
//! use postbox_examples::{payments, reports};
//! use postbox_queue::{Queues, QueuesOptions};
//! use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
//!
//! let store = EmbeddedStore::open("data/postbox.redb", EmbeddedOptions::default())?;
//! let queues = Queues::open(store.clone(), QueuesOptions::default()).await?;
//! let shared = Arc::new(store.clone());
//! // 1. The applications' tables and the jobs queue.
//! payments::create_tables(&*shared).await?;
//! reports::create_tables(&*shared).await?;
//! reports::create_queues(&queues).await?;
//! // 2. The engine on the payment catalog (no INLINE or LOCAL handlers),
//! //    and the DURABLE handlers for `Worker::new(.., &payments::catalog(), durable, ..)`.
//! let engine = payments::engine(shared.clone()).await?;
//! let durable = payments::handlers();
//! // 3. The relay config: the default events pipe and the two report pipes.
//! let log = std::path::Path::new("data/report-ready.jsonl");
//! let pipes = postbox_examples::pipes_toml(log);
//! // 4. The report runner and the report routes, to merge into the server's router.
//! let (stop, stopped) = tokio::sync::watch::channel(false);
//! let runner = reports::JobRunner::new(
//!     shared.clone(),
//!     queues.clone(),
//!     reports::RunnerOptions::default(),
//!     reports::fake_report(),
//! );
//! tokio::spawn(async move { runner.run(stopped).await });
//! let routes = reports::router(reports::ReportsApi::new(shared, reports::ApiOptions::default()));
//! # let _ = (engine, durable, pipes, stop, routes);
//! # Ok(()) }
//! ```
//!
//! This crate is a leaf: nothing in Postbox depends on it. It is the one
//! library crate besides the server that speaks HTTP (the report-job API is
//! an axum router), because the example is an HTTP API.

mod assembly;
mod error;
pub mod payments;
pub mod reports;

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

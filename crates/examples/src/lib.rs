//! Postbox's runnable examples, on the embedded default (SPEC §10):
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
//! This crate is a leaf: nothing in Postbox depends on it. It is the one
//! library crate besides the server that speaks HTTP (the report-job API is
//! an axum router), because the example is an HTTP API.

mod assembly;
mod error;
pub mod payments;
pub mod reports;

pub use error::ExampleError;

//! Postbox's durable worker: delivers every event to every matching DURABLE
//! subscription through an idempotent inbox, so a crash, a flaky dependency
//! or a replay never loses work and never repeats a completed effect.
//!
//! Code map, by concept:
//! - [`claim`]: the claim state machine, pure, with the clock passed in;
//! - [`inbox`]: claim rows and their conditional writes (claim, complete
//!   with the handler's writes, fail, renew) on any [`postbox_store::ItemStore`];
//! - [`deadletter`]: tenant-scoped dead-letter rows;
//! - [`poison`]: bodies that are no event, recorded globally and dropped;
//! - [`handler`]: what a handler receives and returns;
//! - [`pull`]: the handler of `pull` subscriptions, whose consumers take
//!   and settle deliveries over HTTP;
//! - [`replay`]: listing and replaying dead letters (the runbook);
//! - [`report`]: the reconciliation report;
//! - [`row_change`]: the row-change consumer, the BEST_EFFORT lane's
//!   dispatcher (no order, no claims, no dead letters);
//! - [`worker`]: the loop: receive, parse, order, claim, run, complete, delete;
//! - [`faults`]: named fault-injection points (feature `faults`).
//!
//! Architecture Invariant: a claim is completed in the same transaction as
//! the handler's store writes, conditioned on the caller's lease token; a
//! message is deleted only when every matching subscription is COMPLETED or
//! DEAD.

pub mod claim;
pub mod deadletter;
mod error;
pub mod faults;
pub mod handler;
pub mod inbox;
pub mod poison;
pub mod pull;
pub mod replay;
pub mod report;
pub mod row_change;
pub mod worker;

pub use claim::{ClaimKey, ClaimRow, Status};
pub use error::{WorkerError, WorkerResult};
pub use handler::{Delivery, Handler, HandlerError, handler};
pub use inbox::{ClaimOutcome, Inbox};
pub use pull::PullHub;
pub use row_change::{
    RowChangeConsumer, RowChangeOptions, RowChangeStats, RowHandler, row_handler,
};
pub use worker::{CompletionHook, Worker, WorkerOptions, WorkerStats};

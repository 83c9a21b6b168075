//! Named fault-injection points in the worker's path (TiKV-style fail
//! points), compiled only with the `faults` feature or in unit tests. The
//! mechanism is [`postbox_store::faults`]; the worker's points are named here.
//!
//! A test (or a child process it starts) arms a point by name; when the
//! worker reaches it, the point takes its action. The crash test arms
//! `worker::after_claim` with [`Action::Kill`] in a child process, so the
//! process dies by SIGKILL with the claim taken and the
//! handler's effect not committed.
//!
//! Points: [`AFTER_CLAIM`], [`AFTER_HANDLER_BEFORE_COMPLETE`],
//! [`AFTER_COMPLETE_BEFORE_DELETE`].

/// After a claim was taken, before the handler runs.
pub const AFTER_CLAIM: &str = "worker::after_claim";
/// After the handler returned, before its completion commits.
pub const AFTER_HANDLER_BEFORE_COMPLETE: &str = "worker::after_handler_before_complete";
/// After the completion committed, before the message is deleted.
pub const AFTER_COMPLETE_BEFORE_DELETE: &str = "worker::after_complete_before_delete";

pub use postbox_store::faults::*;

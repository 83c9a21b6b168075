//! The Postbox event engine: emit events atomically with the caller's own
//! writes, the per-tenant hash chain, the catalog and the reachability
//! contract, and the in-process lanes (INLINE and LOCAL).
//!
//! Code map, by concept:
//! - [`json`]: I-JSON payload parsing and checks (numbers that survive a double);
//! - [`canonical`]: RFC 8785 canonical JSON; [`chain`]: the hash chain;
//! - [`envelope`]: the event envelope, the request [`Context`], event ids;
//! - [`glob`]: fnmatchcase globs; [`schema`]: the JSON Schema subset;
//! - [`catalog`]: the TOML catalog; [`contract`]: the reachability contract;
//! - [`layout`]: the events table rows; [`writes`]: callers' extra writes;
//! - [`emit`]: the engine, emit and the per-tenant group-commit batcher;
//! - [`lanes`]: INLINE and LOCAL handlers and the counters;
//! - [`verify`]: recomputing chains with a checkpoint.
//!
//! Everything that talks to storage is generic over
//! [`postbox_store::ItemStore`], so the DynamoDB backend works unchanged.

pub mod canonical;
pub mod catalog;
pub mod chain;
pub mod contract;
pub mod emit;
pub mod envelope;
pub mod glob;
pub mod json;
pub mod lanes;
pub mod layout;
pub mod schema;
pub mod verify;
pub mod writes;

pub use catalog::{Catalog, Lane};
pub use emit::{EmitError, Emitted, Engine, EngineBuilder, EngineOptions, StartError};
pub use envelope::{Context, Envelope};
pub use lanes::{HandlerError, Stats};
pub use verify::{Problem, Progress, TenantReport, VerifyError, VerifyOptions};
pub use writes::Write;

/// A JSON value, as payloads and reports use it.
pub use serde_json::Value as JsonValue;

/// `value` as indented JSON, for reports (so the CLI needs no JSON crate).
pub fn to_pretty_json(value: &JsonValue) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

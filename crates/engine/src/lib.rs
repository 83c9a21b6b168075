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
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use postbox_engine::{Catalog, Context, Engine, Write};
//! use postbox_item::{AttributeValue, Item};
//! use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
//!
//! let store = Arc::new(EmbeddedStore::open("postbox.redb", EmbeddedOptions::default())?);
//! let catalog = Catalog::load("catalog.toml")?;
//! // Refuses to start if a subscription could never run.
//! let engine = Engine::builder(store, catalog)
//!     .inline("orders::mirror", |event| Ok(vec![]))
//!     .local("crm::tag", |event| async move { Ok(()) })
//!     .build()
//!     .await?;
//! // Once per request: tenant, actor, correlation id.
//! let ctx = Context::new("acme", "user:7")?.with_correlation_id("req-42");
//! let order = Item::from([("pk".to_owned(), AttributeValue::s("ORDER#1"))]);
//! let emitted = engine
//!     .emit_json(&ctx, "PAYMENT_COMPLETED", r#"{"order_id": "1", "amount": 500, "currency": "EUR"}"#,
//!         vec![Write::put("orders", order).condition("attribute_not_exists(pk)")])
//!     .await?;
//! println!("seq {} hash {}", emitted.envelope.seq, emitted.hash);
//! # Ok(()) }
//! ```

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
pub mod throttle;
pub mod verify;
pub mod writes;

pub use catalog::{Catalog, Lane};
pub use emit::{
    AFTER_COMMIT_BEFORE_RETURN, EmitError, Emitted, Engine, EngineBuilder, EngineOptions, RECORD,
    StartError,
};
pub use envelope::{Context, Envelope};
pub use lanes::{HandlerError, InlineHandler, Stats};
pub use verify::{Problem, Progress, TenantReport, VerifyError, VerifyOptions};
pub use writes::Write;

/// A JSON value, as payloads and reports use it.
pub use serde_json::Value as JsonValue;

/// `value` as indented JSON, for reports (so the CLI needs no JSON crate).
pub fn to_pretty_json(value: &JsonValue) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

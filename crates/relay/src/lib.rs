//! Postbox's relay: what an EventBridge Pipe does — read a table's change
//! stream, keep the records an event pattern selects, reshape them with an
//! input template, and deliver them to a queue or an event bus — with none
//! of the Pipe's silent failure modes: a template path that does not
//! resolve fails the record (it goes to the dead-letter queue, named),
//! retries are bounded, and the checkpoint moves only with the delivery.
//!
//! Code map, by concept:
//! - [`pattern`]: EventBridge event patterns (pure);
//! - [`template`]: input templates, `<$.path>` placeholders (pure);
//! - [`record`]: a stream record as the Pipe sees it, in DynamoDB JSON;
//! - [`config`]: pipes and buses in the TOML config, validated;
//! - [`bus`]: event buses, their rules and targets (routing, pure);
//! - [`plan`]: what one record becomes: messages, log lines or a dead letter;
//! - [`lease`]: the reader lease that keeps two relays from both delivering;
//! - [`relay`]: the loop — wait, filter, template, deliver, retry, bisect.
//!
//! The source is read through `postbox_store::ChangeStreams` (any backend's
//! stream); delivery commits are, for now, the embedded backend's
//! `EmbeddedStore::submit` with the embedded queues.
//!
//! Architecture Invariant: the relay never advances its checkpoint before
//! the target accepted the batch; on the embedded backend the enqueue and the
//! checkpoint move commit in one transaction, fenced by the lease.

pub mod bus;
pub mod config;
pub mod delivery;
pub mod lease;
pub mod pattern;
pub mod plan;
pub mod record;
pub mod relay;
pub mod template;

pub use config::{ConfigError, RelayConfig};
pub use pattern::{Pattern, PatternError, PatternWarning};
pub use relay::{PipeStats, Relay, RelayError, RelayOptions};
pub use template::{Template, TemplateError};

//! Postbox's composition root: one embedded node built from options.
//!
//! [`Node::start`] opens the store file and its queues and starts
//! everything `postbox serve` runs in one process: the engine, the relay
//! (the default events pipe, the BEST_EFFORT lane's row-change pipes and
//! any configured pipes), the durable workers and row-change consumers,
//! background verification, the HTTP API and the AWS wire endpoints.
//! `postbox serve` and `postbox bench` start it; the AWS node
//! (`postbox serve --backend aws`) shares its [`Handlers`], its reading of
//! durable handlers ([`durable_handlers`]) and of pipes
//! ([`node_relay_config`]).

mod durable;
mod node;
mod pipes;
pub mod verifier;

pub use durable::{durable_handlers, pull_hub, webhook_options};
pub use node::*;
pub use pipes::{node_relay_config, start_relay};

//! Durable handlers: what they receive and what they return.
//!
//! A handler gets the event in its tenant's context and returns the store
//! writes it wants; the inbox commits them in the same transaction as the
//! claim's completion, so store effects happen exactly once. Effects outside
//! the store must use [`Delivery::idempotency_key`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use postbox_engine::{Context, Envelope, Write};

use crate::claim::FailureKind;

/// One delivery of an event to a subscription.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The event.
    pub envelope: Envelope,
    /// The subscription it is delivered to.
    pub subscription: String,
    /// `<event_id>:<subscription>`: pass it to external systems so a retried
    /// delivery does not repeat their effect.
    pub idempotency_key: String,
    /// The event's tenant context (same tenant and correlation id, caused by
    /// the event, acting as `subscription:<name>`): emit follow-up events with it.
    pub context: Context,
    /// Failed attempts before this one.
    pub attempt: u32,
    /// A small result to record in the claim when this delivery completes
    /// (a pull consumer's `complete` sets it).
    pub result: ResultSlot,
}

/// Most bytes of a result recorded in a claim.
pub const MAX_RESULT_BYTES: usize = 4096;

/// Where a handler leaves the result its completion records; shared by a
/// delivery's clones.
#[derive(Clone, Debug, Default)]
pub struct ResultSlot(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl ResultSlot {
    /// Records `text` (JSON, at most [`MAX_RESULT_BYTES`]) for the completion.
    pub fn record(&self, text: String) {
        *self.0.lock().expect("result slot") = Some(text);
    }

    /// The recorded result, taken out.
    pub fn take(&self) -> Option<String> {
        self.0.lock().expect("result slot").take()
    }
}

/// Why a handler failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth retrying: the message stays in the queue and comes back after
    /// a backoff, until the subscription's attempts are used up.
    #[error("{0}")]
    Retryable(String),
    /// Will fail the same way again: dead-lettered at once.
    #[error("{0}")]
    Terminal(String),
    /// Worth retrying, but not before this long (a `Retry-After` the
    /// dependency asked for); the retry waits at least this and at least
    /// the subscription's backoff.
    #[error("{0}")]
    RetryAfter(String, std::time::Duration),
    /// Not run: the claim is released with its attempts untouched and the
    /// message becomes visible again (a pull delivery no consumer took
    /// before its node stopped).
    #[error("{0}")]
    Released(String),
}

impl HandlerError {
    /// A retryable error.
    pub fn retryable(msg: impl Into<String>) -> HandlerError {
        HandlerError::Retryable(msg.into())
    }
    /// A terminal error.
    pub fn terminal(msg: impl Into<String>) -> HandlerError {
        HandlerError::Terminal(msg.into())
    }
    /// A retryable error that should not be retried before `after`.
    pub fn retry_after(msg: impl Into<String>, after: std::time::Duration) -> HandlerError {
        HandlerError::RetryAfter(msg.into(), after)
    }
    /// Its kind, for the claim state machine.
    pub fn kind(&self) -> FailureKind {
        match self {
            HandlerError::Retryable(_)
            | HandlerError::RetryAfter(..)
            | HandlerError::Released(_) => FailureKind::Retryable,
            HandlerError::Terminal(_) => FailureKind::Terminal,
        }
    }
    /// Its message.
    pub fn message(&self) -> &str {
        match self {
            HandlerError::Retryable(m)
            | HandlerError::Terminal(m)
            | HandlerError::RetryAfter(m, _)
            | HandlerError::Released(m) => m,
        }
    }
    /// The least wait before a retry the dependency asked for, if any.
    pub fn min_delay(&self) -> Option<std::time::Duration> {
        match self {
            HandlerError::RetryAfter(_, d) => Some(*d),
            _ => None,
        }
    }
}

/// A handler's future: its writes, or why it failed.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Vec<Write>, HandlerError>> + Send>>;

/// A durable handler.
pub type Handler = Arc<dyn Fn(Delivery) -> HandlerFuture + Send + Sync>;

/// A [`Handler`] from an async closure.
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<Write>, HandlerError>> + Send + 'static,
{
    Arc::new(move |d| Box::pin(f(d)))
}

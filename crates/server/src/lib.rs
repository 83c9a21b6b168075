//! Postbox's network surface.
//!
//! One HTTP listener serves the AWS JSON wire protocols at the root path,
//! dispatched by the `X-Amz-Target` header, so an unmodified AWS client needs
//! nothing but `--endpoint-url`:
//! - `DynamoDB_20120810.<Operation>`: the item store ([`dynamodb`]);
//! - `DynamoDBStreams_20120810.<Operation>`: its change streams ([`streams`]);
//! - `AmazonSQS.<Action>`: the embedded queues ([`sqs`]), when the server is
//!   built with them ([`app`]).
//!
//! With a test clock ([`Services::test_clock`]), `POST /_postbox/test/clock`
//! with `{"advance_seconds": N}` moves the store's and the queues' time
//! forward, for conformance cases about retention and delays.
//!
//! Requests are never authenticated against AWS credentials: any signature is
//! accepted, as DynamoDB Local does. The listener is meant for loopback.

pub mod dynamodb;
mod sqs;
mod streams;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use postbox_queue::{Queues, ShiftedClock};
use postbox_store::{ChangeStreams, ItemStore};

pub use wire::WireError;

/// Largest request body accepted: a 100-action transaction may carry 4 MB of
/// items plus expressions and JSON overhead.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// What the server needs from a store.
pub trait Backend: ItemStore + ChangeStreams + Clone {}
impl<T: ItemStore + ChangeStreams + Clone> Backend for T {}

/// What one server serves.
#[derive(Clone)]
pub struct Services<S> {
    /// The item store and its streams.
    pub store: S,
    /// The queues, if served.
    pub queues: Option<Queues>,
    /// A clock the test endpoint may move forward, if enabled.
    pub test_clock: Option<Arc<ShiftedClock>>,
}

/// The router serving every wire protocol of `services` at `/`.
pub fn app<S: Backend>(services: Services<S>) -> Router {
    Router::new()
        .route("/", post(dispatch::<S>))
        .route("/_postbox/test/clock", post(advance_clock::<S>))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(services)
}

async fn dispatch<S: Backend>(
    State(services): State<Services<S>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (service, operation) = target.split_once('.').unwrap_or((target, ""));
    match (service, &services.queues) {
        ("DynamoDB_20120810", _) => dynamodb::handle(&services.store, operation, &body).await,
        ("DynamoDBStreams_20120810", _) => streams::handle(&services.store, operation, &body).await,
        ("AmazonSQS", Some(queues)) => sqs::handle(queues, &headers, operation, &body).await,
        _ => WireError::unknown_operation(target).into_response(),
    }
}

async fn advance_clock<S: Backend>(State(services): State<Services<S>>, body: Bytes) -> Response {
    let Some(clock) = &services.test_clock else {
        return (
            axum::http::StatusCode::NOT_FOUND,
            "the test clock is not enabled (postbox serve --test-clock)",
        )
            .into_response();
    };
    let seconds = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("advance_seconds").and_then(serde_json::Value::as_f64))
        .filter(|s| *s >= 0.0);
    match seconds {
        Some(s) => {
            clock.advance_ms((s * 1000.0) as u64);
            if let Some(queues) = &services.queues {
                queues.time_moved();
            }
            axum::http::StatusCode::NO_CONTENT.into_response()
        }
        None => (
            axum::http::StatusCode::BAD_REQUEST,
            "expected {\"advance_seconds\": N}",
        )
            .into_response(),
    }
}

/// Serves `app` (see [`app`]) on `listener` until `shutdown` resolves.
pub async fn serve(
    app: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    // Answers go out at once: with Nagle's algorithm a response written
    // while an earlier segment waits for its (delayed) ACK sits up to 40 ms.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds `addr`, returning the listener and the address actually bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

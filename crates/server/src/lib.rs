//! Postbox's network surface.
//!
//! One HTTP listener serves the AWS JSON wire protocols at the root path,
//! dispatched by the `X-Amz-Target` header, so an unmodified AWS client needs
//! nothing but `--endpoint-url`:
//! - `DynamoDB_20120810.<Operation>`: the item store ([`dynamodb`]);
//! - `DynamoDBStreams_20120810.<Operation>`: its change streams ([`streams`]).
//!
//! Requests are never authenticated against AWS credentials: any signature is
//! accepted, as DynamoDB Local does. The listener is meant for loopback.

pub mod dynamodb;
mod streams;
mod wire;

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use postbox_store::{ChangeStreams, ItemStore};

pub use wire::WireError;

/// Largest request body accepted: a 100-action transaction may carry 4 MB of
/// items plus expressions and JSON overhead.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// What the server needs from a store.
pub trait Backend: ItemStore + ChangeStreams + Clone {}
impl<T: ItemStore + ChangeStreams + Clone> Backend for T {}

/// The router serving every wire protocol at `/`.
pub fn router<S: Backend>(store: S) -> Router {
    Router::new()
        .route("/", post(dispatch::<S>))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(store)
}

async fn dispatch<S: Backend>(State(store): State<S>, headers: HeaderMap, body: Bytes) -> Response {
    let target = headers.get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or("");
    let (service, operation) = target.split_once('.').unwrap_or((target, ""));
    match service {
        "DynamoDB_20120810" => dynamodb::handle(&store, operation, &body).await,
        "DynamoDBStreams_20120810" => streams::handle(&store, operation, &body).await,
        _ => WireError::unknown_operation(target).into_response(),
    }
}

/// Serves `router` on `addr` until `shutdown` resolves. Returns the bound
/// address through `bound` (useful with port 0).
pub async fn serve<S: Backend>(
    store: S,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(store)).with_graceful_shutdown(shutdown).await
}

/// Binds `addr`, returning the listener and the address actually bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

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
//! Requests must be signed with AWS Signature Version 4 by an access key
//! Postbox issued ([`auth`]), unless the services say [`WireAuth::None`]
//! (DynamoDB Local's behaviour, for loopback and tests). Whatever the key,
//! Postbox's own tables and queues are out of reach except for the reads
//! and claim writes its tools need ([`policy`]).

pub mod auth;
pub mod dynamodb;
pub mod policy;
mod sqs;
mod streams;
mod tenant_scope;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use postbox_queue::{Queues, ShiftedClock};
use postbox_store::{ChangeStreams, ItemStore};

pub use auth::{
    AccessKey, AccessKeyInfo, WireAuth, create_access_key, list_access_keys, revoke_access_key,
};
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
    /// How requests are authenticated.
    pub auth: WireAuth,
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
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (service, operation) = target.split_once('.').unwrap_or((target, ""));
    let WireAuth::SigV4(sigv4) = &services.auth else {
        return route(&services, &headers, target, &body).await;
    };
    let caller = match sigv4
        .check(&services.store, &method, &uri, &headers, &body, service)
        .await
    {
        Ok(caller) => caller,
        Err(denied) => {
            tracing::debug!(target, ?denied, "wire request refused");
            return denied.into_response();
        }
    };
    // Parsed once for the checks; the operation itself reads the bytes.
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let mut allowed = match service {
        "DynamoDB_20120810" => policy::check_dynamodb(&caller, operation, parsed.as_ref()),
        "DynamoDBStreams_20120810" => policy::check_streams(&caller, operation, parsed.as_ref()),
        "AmazonSQS" => policy::check_sqs(&caller, operation, parsed.as_ref()),
        _ => Ok(()),
    };
    // A tenant-scoped key reaches its tenant's items and nothing else.
    if allowed.is_ok()
        && let Some(tenant) = &caller.tenant
    {
        allowed = tenant_scope::check(&services.store, tenant, service, operation, parsed).await;
    }
    if let Err(denied) = allowed {
        tracing::info!(target, key = %caller.key_id, ?denied, "wire request refused");
        return denied.into_response();
    }
    let response = route(&services, &headers, target, &body).await;
    if matches!(operation, "ListTables" | "ListStreams") && response.status().is_success() {
        return filtered(operation, response).await;
    }
    response
}

/// Longest wait for a wire request's whole body.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why a request body could not be read ([`read_limited`]).
#[derive(Debug)]
pub enum BodyError {
    /// It did not arrive within the time allowed.
    TooSlow,
    /// It is longer than the limit.
    TooLarge,
    /// It is malformed (a broken chunked encoding, a connection cut mid-body).
    Broken(String),
}

/// A request's whole body, at most `limit` bytes, within `timeout`: what
/// every listener of Postbox reads bodies with, each answering the errors
/// in its own protocol's shape.
pub async fn read_limited(
    body: axum::body::Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(BodyError::TooSlow),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                || e.to_string().contains("length limit");
            Err(if too_large {
                BodyError::TooLarge
            } else {
                BodyError::Broken(e.to_string())
            })
        }
    }
}

/// A wire request's body, at most [`MAX_REQUEST_BYTES`], within
/// [`BODY_TIMEOUT`]; otherwise an error in the protocols' own JSON shape
/// (not a plain-text 413).
async fn read_body(body: axum::body::Body) -> Result<Bytes, WireError> {
    use axum::http::StatusCode;
    read_limited(body, MAX_REQUEST_BYTES, BODY_TIMEOUT)
        .await
        .map_err(|e| match e {
            BodyError::TooSlow => WireError::with_status(
                StatusCode::REQUEST_TIMEOUT,
                "RequestTimeout",
                format!(
                    "the request body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            ),
            BodyError::TooLarge => WireError::with_status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!("the request body is over the {MAX_REQUEST_BYTES}-byte limit"),
            ),
            BodyError::Broken(e) => {
                WireError::serialization(format!("the request body could not be read: {e}"))
            }
        })
}

/// A listing answer without the tables the wire must not see.
async fn filtered(operation: &str, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return WireError::client("InternalServerError", "cannot read the listing").into_response();
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return WireError::client("InternalServerError", "the listing is not JSON").into_response();
    };
    policy::filter_listing(operation, &mut value);
    Response::from_parts(parts, axum::body::Body::from(value.to_string()))
}

async fn route<S: Backend>(
    services: &Services<S>,
    headers: &HeaderMap,
    target: &str,
    body: &Bytes,
) -> Response {
    let (service, operation) = target.split_once('.').unwrap_or((target, ""));
    match (service, &services.queues) {
        ("DynamoDB_20120810", _) => dynamodb::handle(&services.store, operation, body).await,
        ("DynamoDBStreams_20120810", _) => streams::handle(&services.store, operation, body).await,
        ("AmazonSQS", Some(queues)) => sqs::handle(queues, headers, operation, body).await,
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

/// What one listener allows its connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; one accepted beyond it is closed at once
    /// (so a flood of idle sockets cannot take every file descriptor).
    pub max_connections: usize,
    /// Longest wait for a request's whole header, and for the next request
    /// on an idle keep-alive connection: a client that sends its header a
    /// byte at a time, or holds a connection open without using it, is
    /// closed after it.
    pub header_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            header_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// Serves `app` (see [`app`]) on `listener` until `shutdown` resolves, with
/// the default [`Limits`].
pub async fn serve(
    app: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(app, listener, shutdown, Limits::default(), None).await
}

/// TLS for a listener: the server's certificate chain and private key.
pub type Tls = tokio_rustls::TlsAcceptor;

/// Reads a PEM certificate chain and private key (`--tls-cert`,
/// `--tls-key`) into a [`Tls`] acceptor; the error names the file and what
/// is wrong with it.
pub fn load_tls(cert: &std::path::Path, key: &std::path::Path) -> Result<Tls, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the certificate chain {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the private key {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS setup failed: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("the certificate and key do not make a TLS identity: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` until `shutdown` resolves, within `limits`,
/// over TLS when `tls` is given; then stops accepting and waits for the
/// requests in flight.
pub async fn serve_with(
    app: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    limits: Limits,
    tls: Option<Tls>,
) -> std::io::Result<()> {
    use hyper_util::rt::TokioTimer;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    let mut refused: u64 = 0;
    // Every connection's task, so that those still open after the graceful
    // wait end with the server rather than with the process.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was accepted: wait a little instead of spinning.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(%peer, refused, max = limits.max_connections, "connection cap reached: closing new connections");
            }
            drop(stream);
            continue;
        };
        // Answers go out at once: with Nagle's algorithm a response written
        // while an earlier segment waits for its (delayed) ACK sits up to 40 ms.
        let _ = stream.set_nodelay(true);
        let (app, builder, watcher, tls) = (
            app.clone(),
            builder.clone(),
            graceful.watcher(),
            tls.clone(),
        );
        connections.spawn(async move {
            let result = match tls {
                None => serve_conn(&builder, watcher, stream, app).await,
                Some(acceptor) => {
                    // The handshake counts against the header timeout.
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(tls_stream)) => serve_conn(&builder, watcher, tls_stream, app).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    // Requests in flight finish; a stream that never ends (the log's SSE)
    // is not waited for longer than this, and is then cut: its task holds
    // the app, and with it the store the caller waits to close.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), graceful.shutdown()).await;
    connections.shutdown().await;
    Ok(())
}

/// Serves HTTP/1 on one connection, watched for graceful shutdown.
async fn serve_conn<I>(
    builder: &hyper::server::conn::http1::Builder,
    watcher: hyper_util::server::graceful::Watcher,
    io: I,
    app: Router,
) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(app);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    watcher.watch(conn).await
}

/// Binds `addr`, returning the listener and the address actually bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

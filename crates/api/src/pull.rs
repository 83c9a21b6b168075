//! Pull consumers: `POST /v1/subscriptions/{name}/receive|complete|fail|extend`.
//!
//! A DURABLE subscription whose handler is `pull` is run by whoever asks
//! for its deliveries here, in any language, with the inbox's guarantees
//! (`postbox_worker::pull` holds the semantics). A tenant token receives and
//! settles only its tenant's deliveries; an admin token all tenants'.

use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use postbox_queue::QueueClient;
use postbox_store::ItemStore;
use postbox_worker::HandlerError;
use postbox_worker::pull::{self, PullError, PullHub};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::body::{parse_json, read_body};
use crate::{Api, ApiError, Caller};

/// The hub serving `name`, or why there is none: 404 for a subscription the
/// catalog lacks, 400 for one that is not `pull`, 503 when this node runs
/// no workers.
fn hub<'a, S: ItemStore, Q: QueueClient>(
    api: &'a Api<S, Q>,
    name: &str,
) -> Result<&'a PullHub, ApiError> {
    let sub = crate::ops::subscription(api.inner.engine.catalog(), name)?;
    if sub.handler != pull::PULL_HANDLER {
        return Err(ApiError::bad_request(
            "not_pull",
            format!(
                "subscription {name:?} is not a pull subscription (its handler is {:?}; a pull subscription has handler = \"pull\" and lane = \"DURABLE\")",
                sub.handler
            ),
        ));
    }
    match &api.inner.sources.pull {
        Some(hub) if hub.serves(name) => Ok(hub),
        _ => Err(ApiError::unavailable(
            "this node runs no workers, so it hands out no deliveries (start postbox serve with --workers 1 or more)",
            5,
        )),
    }
}

fn refused(e: PullError) -> ApiError {
    match e {
        PullError::NotPull(_) => ApiError::bad_request("not_pull", e.to_string()),
        PullError::BadHandle(_) => ApiError::bad_request("invalid_handle", e.to_string()),
        PullError::Gone => ApiError::new(StatusCode::CONFLICT, "lease_lost", e.to_string()),
    }
}

/// Seconds in `1..=max`, or a 400 naming the field.
fn seconds(
    field: &str,
    value: Option<f64>,
    default: f64,
    min: f64,
    max: f64,
) -> Result<Duration, ApiError> {
    let v = value.unwrap_or(default);
    if !v.is_finite() || v < min || v > max {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!("{field} must be between {min} and {max} seconds; it is {v}"),
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The body of a receive.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReceiveRequest {
    // A number, not `usize`: the API's JSON reader gives 0 as a float.
    max: Option<f64>,
    wait_seconds: Option<f64>,
    lease_seconds: Option<f64>,
}

/// `POST /v1/subscriptions/{name}/receive`: up to `max` deliveries (1-10,
/// default 1), waiting up to `wait_seconds` (0-20, default 20) for the
/// first, each leased for `lease_seconds` (1-43200, default 30).
pub(crate) async fn receive<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let body = read_body(&api, body).await?;
    let req: ReceiveRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReceiveRequest::default()
    } else {
        parse_json(&body)?
    };
    let max = req.max.unwrap_or(1.0);
    if max.fract() != 0.0 || !(1.0..=pull::MAX_RECEIVE as f64).contains(&max) {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "max must be between 1 and {}; it is {max}",
                pull::MAX_RECEIVE
            ),
        ));
    }
    let max = max as usize;
    let wait = seconds(
        "wait_seconds",
        req.wait_seconds,
        20.0,
        0.0,
        pull::MAX_WAIT.as_secs_f64(),
    )?;
    let lease = seconds(
        "lease_seconds",
        req.lease_seconds,
        30.0,
        1.0,
        pull::MAX_LEASE.as_secs_f64(),
    )?;
    let hub = hub(&api, &name)?;
    let got = hub
        .receive(&name, caller.tenant.as_deref(), max, wait, lease)
        .await
        .map_err(refused)?;
    let deliveries: Vec<Value> = got
        .into_iter()
        .map(|h| {
            json!({
                "handle": h.handle,
                "subscription": h.subscription,
                "event": h.envelope,
                "attempt": h.attempt,
                "idempotency_key": h.idempotency_key,
                "lease_expires_at_ms": h.lease_expires_at_ms,
                "traceparent": h.traceparent,
            })
        })
        .collect();
    Ok(Json(json!({ "deliveries": deliveries })))
}

/// The body of a complete.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteRequest {
    handle: String,
    /// A small JSON result recorded in the claim.
    result: Option<Value>,
}

/// `POST /v1/subscriptions/{name}/complete`, optionally with a `result`
/// (any JSON, at most 4 KB as compact text) recorded in the claim, where
/// `GET /v1/events/{seq}` shows it.
pub(crate) async fn complete<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let body = read_body(&api, body).await?;
    let req: CompleteRequest = parse_json(&body)?;
    let hub = hub(&api, &name)?;
    match req.result {
        None | Some(Value::Null) => hub.complete(&name, &req.handle, caller.tenant.as_deref()),
        Some(result) => {
            let text = result.to_string();
            let max = postbox_worker::handler::MAX_RESULT_BYTES;
            if text.len() > max {
                return Err(ApiError::bad_request(
                    "result_too_large",
                    format!(
                        "the result is {} bytes as compact JSON; a claim records at most {max}",
                        text.len()
                    ),
                ));
            }
            hub.complete_with_result(&name, &req.handle, caller.tenant.as_deref(), text)
        }
    }
    .map_err(refused)?;
    Ok(Json(json!({ "completed": true })))
}

/// The body of a fail.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailRequest {
    handle: String,
    error: String,
    #[serde(default)]
    terminal: bool,
    retry_after_seconds: Option<f64>,
}

/// `POST /v1/subscriptions/{name}/fail`: retried after the subscription's
/// backoff (and at least `retry_after_seconds`), or dead-lettered at once
/// when `terminal`.
pub(crate) async fn fail<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let body = read_body(&api, body).await?;
    let req: FailRequest = parse_json(&body)?;
    if req.error.trim().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "error must say why the delivery failed",
        ));
    }
    if req.error.len() > 4096 {
        return Err(ApiError::bad_request(
            "invalid_request",
            "error is at most 4096 bytes",
        ));
    }
    let error = match (req.terminal, req.retry_after_seconds) {
        (true, Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "a terminal failure is not retried: give terminal or retry_after_seconds, not both",
            ));
        }
        (true, None) => HandlerError::terminal(req.error),
        (false, Some(s)) => HandlerError::retry_after(
            req.error,
            seconds("retry_after_seconds", Some(s), 0.0, 0.0, 43_200.0)?,
        ),
        (false, None) => HandlerError::retryable(req.error),
    };
    let hub = hub(&api, &name)?;
    hub.fail(&name, &req.handle, caller.tenant.as_deref(), error)
        .map_err(refused)?;
    Ok(Json(json!({ "failed": true })))
}

/// The body of an extend.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendRequest {
    handle: String,
    lease_seconds: f64,
}

/// `POST /v1/subscriptions/{name}/extend`: the lease ends `lease_seconds`
/// from now.
pub(crate) async fn extend<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let body = read_body(&api, body).await?;
    let req: ExtendRequest = parse_json(&body)?;
    let lease = seconds(
        "lease_seconds",
        Some(req.lease_seconds),
        30.0,
        1.0,
        pull::MAX_LEASE.as_secs_f64(),
    )?;
    let hub = hub(&api, &name)?;
    let until = hub
        .extend(&name, &req.handle, caller.tenant.as_deref(), lease)
        .map_err(refused)?;
    Ok(Json(json!({ "lease_expires_at_ms": until })))
}

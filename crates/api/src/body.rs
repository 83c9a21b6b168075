//! Request bodies: read within the configured size and time, and parsed
//! as I-JSON with messages that say what is wrong. Every endpoint that
//! takes a body reads it here; a header's text is read here too.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use postbox_queue::QueueClient;
use postbox_store::ItemStore;
use serde_json::Value;

use crate::{Api, ApiError};

/// Parses a JSON request body (I-JSON: numbers must survive a double) into `T`.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    from_value(parse_value(body)?)
}

/// A parsed request body as `T`; a body of another shape is refused with
/// serde's account of what is wrong.
pub(crate) fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| {
        ApiError::bad_request(
            "invalid_request",
            format!("the request body is not valid: {e}"),
        )
    })
}

/// Parses a JSON request body (I-JSON) into its tree. A `Value` wanted as
/// it is comes from here, not from [`parse_json`], which would build the
/// tree a second time from the first.
pub(crate) fn parse_value(body: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("invalid_json", "the request body is not UTF-8"))?;
    postbox_engine::json::parse(text).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            e.to_string().replacen("payload", "the request body", 1),
        )
    })
}

/// Reads a body up to the configured limit, within the configured time
/// (`ApiConfig::body_timeout`): over the limit is 413, too slow 408 (a
/// client sending its body a byte at a time does not hold the connection),
/// a malformed body (a broken chunked encoding, a connection cut mid-body)
/// 400.
pub(crate) async fn read_body<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    body: Body,
) -> Result<Bytes, ApiError> {
    use postbox_server::BodyError;
    let limit = api.inner.config.max_body_bytes;
    let timeout = api.inner.config.body_timeout;
    postbox_server::read_limited(body, limit, timeout)
        .await
        .map_err(|e| match e {
            BodyError::TooSlow => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    timeout.as_millis()
                ),
            ),
            BodyError::TooLarge => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is over the {limit}-byte limit"),
            ),
            BodyError::Broken(e) => ApiError::bad_request(
                "invalid_body",
                format!("the request body could not be read: {e}"),
            ),
        })
}

/// The text of header `name`, if sent; 400 when it is not visible ASCII.
pub(crate) fn header(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str().map(str::to_owned).map_err(|_| {
                ApiError::bad_request(
                    "invalid_header",
                    format!("the {name} header is not visible ASCII"),
                )
            })
        })
        .transpose()
}

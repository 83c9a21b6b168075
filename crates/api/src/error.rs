//! The API's error body: `{"error": {"code": "...", "message": "..."}}` with
//! a status that says whose fault it is.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use postbox_store::StoreError;
use serde_json::json;

/// A failed request.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable machine-readable code, e.g. `unknown_event_type`.
    pub code: &'static str,
    /// What is wrong and, where it helps, what to do.
    pub message: String,
    /// Seconds a client should wait before retrying, if any.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// 400: the request is wrong.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }
    /// 404: not there, or not this caller's.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    /// 401: no valid token.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    /// 403: a valid token of the wrong kind.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    /// 429: too many at once; retry after `retry_after` seconds.
    pub fn too_many(code: &'static str, message: impl Into<String>, retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
        }
    }
    /// 503 with Retry-After.
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Validation(m) => ApiError::bad_request("invalid_request", m),
            StoreError::ResourceNotFound(m) => ApiError::not_found(m),
            StoreError::Storage(m) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage_failure",
                format!("the store failed: {m}"),
            ),
            // The store could not be reached: retryable, and a write may or
            // may not have happened (an emit retried with its
            // Idempotency-Key answers the event if it did).
            StoreError::Unavailable(m) => ApiError::unavailable(m, 1),
            other => ApiError::new(StatusCode::CONFLICT, "conflict", other.to_string()),
        }
    }
}

impl From<postbox_worker::WorkerError> for ApiError {
    fn from(e: postbox_worker::WorkerError) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"postbox\""),
            );
        }
        response
    }
}

/// Paths the API does not have.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no such endpoint: {}", uri.path()))
}

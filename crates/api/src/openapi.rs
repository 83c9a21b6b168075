//! The OpenAPI 3.1 document of the API, served at `/v1/openapi.json`.
//!
//! It is a file (`crates/api/openapi.json`) so it reads as documentation; a
//! test checks that its paths and methods are exactly [`crate::ROUTES`].

use axum::http::header;
use axum::response::IntoResponse;

use crate::Caller;

/// The document's text.
pub const DOCUMENT: &str = include_str!("../openapi.json");

/// `GET /v1/openapi.json`.
pub(crate) async fn serve(_caller: Caller) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}

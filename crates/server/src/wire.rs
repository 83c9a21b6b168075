//! JSON 1.0 request decoding and response/error encoding shared by the AWS
//! protocols.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use postbox_item::item_to_json;
use postbox_store::StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// An error in the shape AWS JSON protocols use: a status, a `__type` and a
/// message, plus type-specific fields.
#[derive(Debug)]
pub struct WireError {
    status: StatusCode,
    body: Value,
}

impl WireError {
    /// A client error of the given DynamoDB type.
    pub fn client(code: &str, message: impl Into<String>) -> WireError {
        WireError {
            status: StatusCode::BAD_REQUEST,
            body: json!({"__type": format!("com.amazonaws.dynamodb.v20120810#{code}"), "message": message.into()}),
        }
    }

    /// An error with its own status (413 for a body over the limit, 408
    /// for one that did not arrive in time).
    pub fn with_status(status: StatusCode, code: &str, message: impl Into<String>) -> WireError {
        WireError {
            status,
            ..WireError::client(code, message)
        }
    }

    /// The answer to a target this server does not implement.
    pub fn unknown_operation(target: &str) -> WireError {
        WireError::client(
            "UnknownOperationException",
            format!("Unknown operation {target:?}"),
        )
    }

    /// A body that is not valid JSON for the operation. A validation
    /// message of DynamoDB's own that a value's parser raised goes out as
    /// it is; other parse errors say the request is invalid. Neither names
    /// a line and column of the body (DynamoDB's never do).
    pub fn serialization(message: impl std::fmt::Display) -> WireError {
        let text = message.to_string();
        let bare = match text.rfind(" at line ") {
            Some(at)
                if text[at + 9..].split_once(" column ").is_some_and(|(l, c)| {
                    !l.is_empty()
                        && !c.is_empty()
                        && l.bytes().chain(c.bytes()).all(|b| b.is_ascii_digit())
                }) =>
            {
                &text[..at]
            }
            _ => text.as_str(),
        };
        // serde's own words (a field missing, a variant unknown, a type
        // wrong) say the request is malformed; anything else was raised by
        // a value's parser in DynamoDB's words.
        let serde = [
            "missing field `",
            "unknown field `",
            "unknown variant `",
            "duplicate field `",
            "invalid type:",
            "invalid value:",
            "invalid length",
            "expected ",
            "EOF while parsing",
            "trailing characters",
            "key must be a string",
        ];
        if !serde.iter().any(|p| bare.starts_with(p)) {
            WireError::client("ValidationException", bare)
        } else {
            WireError::client("ValidationException", format!("Invalid request: {bare}"))
        }
    }
}

impl From<StoreError> for WireError {
    fn from(e: StoreError) -> WireError {
        let code = e.code();
        let message = e.to_string();
        match e {
            StoreError::Storage(_) => WireError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                body: json!({"__type": format!("com.amazonaws.dynamodb.v20120810#{code}"), "message": message}),
            },
            // Only a store that is itself a client of another server says
            // this; pass it on as the 503 it is.
            StoreError::Unavailable(_) => WireError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                body: json!({"__type": format!("com.amazonaws.dynamodb.v20120810#{code}"), "message": message}),
            },
            StoreError::ConditionalCheckFailed { item } => {
                let mut err = WireError::client(code, message);
                if let Some(item) = item {
                    err.body["Item"] = item_to_json(&item);
                }
                err
            }
            StoreError::TransactionCanceled { reasons } => WireError {
                status: StatusCode::BAD_REQUEST,
                body: json!({
                    "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
                    "Message": message,
                    "CancellationReasons": serde_json::to_value(&reasons).unwrap_or(Value::Null),
                }),
            },
            _ => WireError::client(code, message),
        }
    }
}

impl IntoResponse for WireError {
    fn into_response(self) -> Response {
        json_response(self.status, &self.body)
    }
}

/// A 200 answer with a JSON body.
pub fn ok<T: Serialize>(body: &T) -> Response {
    match serde_json::to_value(body) {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => WireError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: json!({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": e.to_string()}),
        }
        .into_response(),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    resp
}

/// Decodes a request body; an empty body is read as `{}`.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(WireError::serialization)
}

/// Runs one operation: decode, call, encode the answer or the error.
pub async fn call<I, O, Fut>(body: &[u8], f: impl FnOnce(I) -> Fut) -> Response
where
    I: DeserializeOwned,
    O: Serialize,
    Fut: std::future::Future<Output = Result<O, WireError>>,
{
    match decode::<I>(body) {
        Ok(input) => match f(input).await {
            Ok(out) => ok(&out),
            Err(e) => e.into_response(),
        },
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_is_worded_as_dynamodb_words_it() {
        let e = WireError::serialization(
            "One or more parameter values were invalid: An string set  may not be empty at line 1 column 120",
        );
        assert_eq!(
            e.body["message"],
            "One or more parameter values were invalid: An string set  may not be empty"
        );
        let e = WireError::serialization("missing field `TableName` at line 1 column 2");
        assert_eq!(
            e.body["message"],
            "Invalid request: missing field `TableName`"
        );
        // Not a location: kept.
        let e = WireError::serialization("expected value at line one column 2");
        assert_eq!(
            e.body["message"],
            "Invalid request: expected value at line one column 2"
        );
    }
}

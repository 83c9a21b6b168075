//! The store's errors, one variant per DynamoDB error kind.

use postbox_item::{Item, ItemError};

use crate::api::CancellationReason;

/// A failed store operation. Each variant is one DynamoDB error type, so the
/// wire layer and an AWS-backed store map them one to one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The request is malformed or breaks a limit (ValidationException).
    #[error("{0}")]
    Validation(String),
    /// A single-item write's condition was false (ConditionalCheckFailedException).
    #[error("The conditional request failed")]
    ConditionalCheckFailed {
        /// The item as it was, when the request asked for it.
        item: Option<Item>,
    },
    /// A transaction was cancelled; one reason per action, in order
    /// (TransactionCanceledException).
    #[error("Transaction cancelled, please refer cancellation reasons for specific reasons [{}]", .reasons.iter().map(|r| r.code.as_str()).collect::<Vec<_>>().join(", "))]
    TransactionCanceled {
        /// One per action of the request.
        reasons: Vec<CancellationReason>,
    },
    /// The table does not exist (ResourceNotFoundException).
    #[error("{0}")]
    ResourceNotFound(String),
    /// The table already exists (ResourceInUseException).
    #[error("{0}")]
    ResourceInUse(String),
    /// A per-table limit, such as one index created or deleted at a time
    /// (LimitExceededException).
    #[error("{0}")]
    LimitExceeded(String),
    /// A stream position that is no longer retained (TrimmedDataAccessException).
    #[error("{0}")]
    TrimmedData(String),
    /// A TransactWriteItems reused a ClientRequestToken of the last ten
    /// minutes for a different request (IdempotentParameterMismatchException).
    #[error("{0}")]
    IdempotentParameterMismatch(String),
    /// The store could not read or write its file. The store stops accepting
    /// writes after one of these rather than limp on (InternalServerError).
    #[error("storage failure: {0}")]
    Storage(String),
    /// The store could not be reached: a remote store's server is down, the
    /// connection broke or the call timed out. Retryable; a write that got
    /// this answer may or may not have been applied (ServiceUnavailable).
    #[error("{0}")]
    Unavailable(String),
}

impl StoreError {
    /// A validation error with the given message.
    pub fn validation(msg: impl Into<String>) -> StoreError {
        StoreError::Validation(msg.into())
    }

    /// True when the same call may succeed later: the store was
    /// unreachable. Every other error is the answer to the request itself.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// DynamoDB's short error type name, e.g. `ValidationException`.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Validation(_) => "ValidationException",
            StoreError::ConditionalCheckFailed { .. } => "ConditionalCheckFailedException",
            StoreError::TransactionCanceled { .. } => "TransactionCanceledException",
            StoreError::ResourceNotFound(_) => "ResourceNotFoundException",
            StoreError::ResourceInUse(_) => "ResourceInUseException",
            StoreError::LimitExceeded(_) => "LimitExceededException",
            StoreError::TrimmedData(_) => "TrimmedDataAccessException",
            StoreError::IdempotentParameterMismatch(_) => "IdempotentParameterMismatchException",
            StoreError::Storage(_) => "InternalServerError",
            StoreError::Unavailable(_) => "ServiceUnavailable",
        }
    }
}

impl From<ItemError> for StoreError {
    fn from(e: ItemError) -> StoreError {
        match e {
            ItemError::Validation(m) => StoreError::Validation(m),
            ItemError::Corrupt(m) => StoreError::Storage(m),
        }
    }
}

//! The queues' errors, one variant per SQS error code.
//!
//! The wire layer needs three things from each error: the error shape name
//! the JSON protocol puts in `__type` (`QueueDoesNotExist`), the legacy query
//! code AWS SDKs still map by (`AWS.SimpleQueueService.NonExistentQueue`,
//! sent in the `x-amzn-query-error` header), and whether the sender is at
//! fault. [`QueueError::code`] and [`QueueError::query_code`] give them.

use postbox_store::StoreError;

/// A failed queue operation. The variant names are SQS's error codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The queue named or addressed does not exist.
    #[error("The specified queue does not exist.")]
    QueueDoesNotExist,
    /// CreateQueue of an existing name with different attribute values.
    #[error("A queue already exists with the same name and a different value for attribute {0}")]
    QueueNameExists(String),
    /// A parameter has a value SQS does not accept.
    #[error("{0}")]
    InvalidParameterValue(String),
    /// A required parameter is missing.
    #[error("{0}")]
    MissingParameter(String),
    /// A queue attribute name that does not exist.
    #[error("Unknown Attribute {0}.")]
    InvalidAttributeName(String),
    /// A queue attribute value out of range or malformed.
    #[error("{0}")]
    InvalidAttributeValue(String),
    /// A message body with characters outside the allowed set.
    #[error("{0}")]
    InvalidMessageContents(String),
    /// The receipt handle is not one this queue gave out, or has expired.
    #[error("{0}")]
    ReceiptHandleIsInvalid(String),
    /// ChangeMessageVisibility of a message that is not in flight.
    #[error("Message does not exist or is not available for visibility timeout change.")]
    MessageNotInflight,
    /// A batch request without entries.
    #[error("There should be at least one {0} in the request.")]
    EmptyBatchRequest(String),
    /// A batch request with more than 10 entries.
    #[error("Maximum number of entries per request are 10. You have sent {0}.")]
    TooManyEntriesInBatchRequest(usize),
    /// Two entries of a batch share an id.
    #[error("Id {0} repeated.")]
    BatchEntryIdsNotDistinct(String),
    /// A batch entry id that is empty, too long or has other characters than
    /// alphanumerics, `-` and `_`.
    #[error(
        "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."
    )]
    InvalidBatchEntryId,
    /// The messages of a batch together exceed the queue's maximum size.
    #[error("Batch requests cannot be longer than {0} bytes. You have sent {1} bytes.")]
    BatchRequestTooLong(usize, usize),
    /// A second PurgeQueue within 60 seconds.
    #[error("{0}")]
    PurgeQueueInProgress(String),
    /// An action the queue cannot do (for example a second move task).
    #[error("{0}")]
    UnsupportedOperation(String),
    /// A move task or other resource that does not exist.
    #[error("{0}")]
    ResourceNotFound(String),
    /// The store could not read or write its file; the store stops accepting
    /// writes after one of these.
    #[error("storage failure: {0}")]
    Storage(String),
    /// The queues could not be reached: a remote endpoint is down, the
    /// connection broke or the call timed out. Retryable; a send or delete
    /// that got this answer may or may not have been applied.
    #[error("{0}")]
    Unavailable(String),
}

impl QueueError {
    /// The variant for an SQS error code (the JSON protocol's or the legacy
    /// query code), with the parts the variant carries taken back out of the
    /// message its `Display` wrote; `None` for a code SQS does not have.
    /// Every client of SQS (over the wire or through the AWS SDK) decodes
    /// errors with it.
    pub fn from_code(code: &str, message: String) -> Option<QueueError> {
        let between = |prefix: &str, suffix: &str| {
            message
                .strip_prefix(prefix)
                .and_then(|m| m.strip_suffix(suffix))
                .map(str::to_owned)
        };
        Some(match code {
            "QueueDoesNotExist" | "AWS.SimpleQueueService.NonExistentQueue" => {
                QueueError::QueueDoesNotExist
            }
            "QueueNameExists" | "QueueAlreadyExists" => QueueError::QueueNameExists(
                between(
                    "A queue already exists with the same name and a different value for attribute ",
                    "",
                )
                .unwrap_or(message),
            ),
            "InvalidParameterValue" => QueueError::InvalidParameterValue(message),
            "MissingParameter" => QueueError::MissingParameter(message),
            "InvalidAttributeName" => {
                QueueError::InvalidAttributeName(between("Unknown Attribute ", ".").unwrap_or(message))
            }
            "InvalidAttributeValue" => QueueError::InvalidAttributeValue(message),
            "InvalidMessageContents" => QueueError::InvalidMessageContents(message),
            "ReceiptHandleIsInvalid" => QueueError::ReceiptHandleIsInvalid(message),
            "MessageNotInflight" | "AWS.SimpleQueueService.MessageNotInflight" => {
                QueueError::MessageNotInflight
            }
            "EmptyBatchRequest" | "AWS.SimpleQueueService.EmptyBatchRequest" => {
                QueueError::EmptyBatchRequest(
                    between("There should be at least one ", " in the request.").unwrap_or(message),
                )
            }
            "TooManyEntriesInBatchRequest" | "AWS.SimpleQueueService.TooManyEntriesInBatchRequest" => {
                QueueError::TooManyEntriesInBatchRequest(
                    between(
                        "Maximum number of entries per request are 10. You have sent ",
                        ".",
                    )
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0),
                )
            }
            "BatchEntryIdsNotDistinct" | "AWS.SimpleQueueService.BatchEntryIdsNotDistinct" => {
                QueueError::BatchEntryIdsNotDistinct(between("Id ", " repeated.").unwrap_or(message))
            }
            "InvalidBatchEntryId" | "AWS.SimpleQueueService.InvalidBatchEntryId" => {
                QueueError::InvalidBatchEntryId
            }
            "BatchRequestTooLong" | "AWS.SimpleQueueService.BatchRequestTooLong" => {
                let sizes = between("Batch requests cannot be longer than ", " bytes.")
                    .and_then(|m| {
                        let (max, sent) = m.split_once(" bytes. You have sent ")?;
                        Some((max.parse().ok()?, sent.parse().ok()?))
                    })
                    .unwrap_or((0, 0));
                QueueError::BatchRequestTooLong(sizes.0, sizes.1)
            }
            "PurgeQueueInProgress" | "AWS.SimpleQueueService.PurgeQueueInProgress" => {
                QueueError::PurgeQueueInProgress(message)
            }
            "UnsupportedOperation"
            | "AWS.SimpleQueueService.UnsupportedOperation"
            | "InvalidAction" => QueueError::UnsupportedOperation(message),
            "ResourceNotFoundException" => QueueError::ResourceNotFound(message),
            "InternalError" | "InternalFailure" => QueueError::Storage(
                message
                    .strip_prefix("storage failure: ")
                    .map(str::to_owned)
                    .unwrap_or(message),
            ),
            "ServiceUnavailable" => QueueError::Unavailable(message),
            "RequestThrottled" | "ThrottlingException" => {
                QueueError::Unavailable(format!("{code}: {message}"))
            }
            _ => return None,
        })
    }

    /// The error shape name, as the JSON protocol's `__type` ends.
    pub fn code(&self) -> &'static str {
        match self {
            QueueError::QueueDoesNotExist => "QueueDoesNotExist",
            QueueError::QueueNameExists(_) => "QueueNameExists",
            QueueError::InvalidParameterValue(_) => "InvalidParameterValue",
            QueueError::MissingParameter(_) => "MissingParameter",
            QueueError::InvalidAttributeName(_) => "InvalidAttributeName",
            QueueError::InvalidAttributeValue(_) => "InvalidAttributeValue",
            QueueError::InvalidMessageContents(_) => "InvalidMessageContents",
            QueueError::ReceiptHandleIsInvalid(_) => "ReceiptHandleIsInvalid",
            QueueError::MessageNotInflight => "MessageNotInflight",
            QueueError::EmptyBatchRequest(_) => "EmptyBatchRequest",
            QueueError::TooManyEntriesInBatchRequest(_) => "TooManyEntriesInBatchRequest",
            QueueError::BatchEntryIdsNotDistinct(_) => "BatchEntryIdsNotDistinct",
            QueueError::InvalidBatchEntryId => "InvalidBatchEntryId",
            QueueError::BatchRequestTooLong(..) => "BatchRequestTooLong",
            QueueError::UnsupportedOperation(_) => "UnsupportedOperation",
            QueueError::PurgeQueueInProgress(_) => "PurgeQueueInProgress",
            QueueError::ResourceNotFound(_) => "ResourceNotFoundException",
            QueueError::Storage(_) => "InternalError",
            QueueError::Unavailable(_) => "ServiceUnavailable",
        }
    }

    /// The legacy query-protocol code that SDKs map errors by (the first part
    /// of the `x-amzn-query-error` header).
    pub fn query_code(&self) -> &'static str {
        match self {
            QueueError::QueueDoesNotExist => "AWS.SimpleQueueService.NonExistentQueue",
            QueueError::QueueNameExists(_) => "QueueAlreadyExists",
            QueueError::MessageNotInflight => "AWS.SimpleQueueService.MessageNotInflight",
            QueueError::EmptyBatchRequest(_) => "AWS.SimpleQueueService.EmptyBatchRequest",
            QueueError::TooManyEntriesInBatchRequest(_) => {
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
            }
            QueueError::BatchEntryIdsNotDistinct(_) => {
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
            }
            QueueError::InvalidBatchEntryId => "AWS.SimpleQueueService.InvalidBatchEntryId",
            QueueError::BatchRequestTooLong(..) => "AWS.SimpleQueueService.BatchRequestTooLong",
            QueueError::UnsupportedOperation(_) => "AWS.SimpleQueueService.UnsupportedOperation",
            QueueError::PurgeQueueInProgress(_) => "AWS.SimpleQueueService.PurgeQueueInProgress",
            other => other.code(),
        }
    }

    /// The HTTP status SQS answers this error with.
    pub fn http_status(&self) -> u16 {
        match self {
            QueueError::ResourceNotFound(_) => 404,
            QueueError::PurgeQueueInProgress(_) => 403,
            QueueError::Storage(_) => 500,
            QueueError::Unavailable(_) => 503,
            _ => 400,
        }
    }

    /// True when the caller is at fault (SQS's `Sender` type), false for the
    /// server's own failures (`Receiver`).
    pub fn sender_fault(&self) -> bool {
        !matches!(self, QueueError::Storage(_) | QueueError::Unavailable(_))
    }

    /// True when the same call may succeed later: the queues were
    /// unreachable. Every other error is the answer to the request itself.
    pub fn is_retryable(&self) -> bool {
        matches!(self, QueueError::Unavailable(_))
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> QueueError {
        QueueError::InvalidParameterValue(msg.into())
    }
}

impl From<StoreError> for QueueError {
    fn from(e: StoreError) -> QueueError {
        QueueError::Storage(e.to_string())
    }
}

/// Result of a queue call.
pub type QueueResult<T> = Result<T, QueueError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_codes_are_the_legacy_ones() {
        assert_eq!(
            QueueError::QueueDoesNotExist.query_code(),
            "AWS.SimpleQueueService.NonExistentQueue"
        );
        assert_eq!(
            QueueError::QueueNameExists(String::new()).query_code(),
            "QueueAlreadyExists"
        );
        assert_eq!(
            QueueError::InvalidAttributeName("x".into()).query_code(),
            "InvalidAttributeName"
        );
    }
}

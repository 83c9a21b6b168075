//! DynamoDB's errors as the store's: one `StoreError` variant per error
//! code, with DynamoDB's own message, so callers behave the same on either
//! backend. What no variant names (throttling left after the SDK's retries,
//! a network failure, a 5xx) is `Unavailable`, retryable, and names the
//! operation and the code.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::CancellationReason as SdkReason;
use postbox_item::Item;
use postbox_store::StoreError;
use postbox_store::api::CancellationReason;

use crate::convert::from_sdk_opt;

/// Maps an SDK error of operation `op` by its error code.
pub(crate) fn map<E, R>(op: &str, e: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let service = matches!(e, SdkError::ServiceError(_));
    let code = e.code().unwrap_or("").to_owned();
    let message = e.message().unwrap_or("").to_owned();
    if !service {
        return StoreError::Unavailable(format!(
            "{op}: DynamoDB did not answer: {}",
            aws_sdk_dynamodb::error::DisplayErrorContext(&e)
        ));
    }
    by_code(op, &code, message)
}

/// The variant for an error code.
pub(crate) fn by_code(op: &str, code: &str, message: String) -> StoreError {
    match code {
        "ValidationException" => StoreError::Validation(message),
        "ConditionalCheckFailedException" => StoreError::ConditionalCheckFailed { item: None },
        "ResourceNotFoundException" => StoreError::ResourceNotFound(message),
        "ResourceInUseException" => StoreError::ResourceInUse(message),
        "TrimmedDataAccessException" => StoreError::TrimmedData(message),
        "IdempotentParameterMismatchException" => StoreError::IdempotentParameterMismatch(message),
        "TransactionCanceledException" => StoreError::TransactionCanceled {
            reasons: Vec::new(),
        },
        _ => StoreError::Unavailable(format!("{op}: {code}: {message}")),
    }
}

/// A condition failure with the item DynamoDB returned for it.
pub(crate) fn condition_failed(
    item: Option<&std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>,
) -> StoreError {
    match from_sdk_opt(item) {
        Ok(item) => StoreError::ConditionalCheckFailed { item },
        Err(e) => e,
    }
}

/// A cancelled transaction with one reason per action, as the embedded
/// store gives them (`None` codes become DynamoDB's `"None"`).
pub(crate) fn cancelled(reasons: &[SdkReason]) -> StoreError {
    let mut out = Vec::with_capacity(reasons.len());
    for r in reasons {
        let item: Option<Item> = match from_sdk_opt(r.item()) {
            Ok(i) => i,
            Err(e) => return e,
        };
        out.push(CancellationReason {
            code: r.code().unwrap_or("None").to_owned(),
            message: r.message().map(str::to_owned),
            item,
        });
    }
    StoreError::TransactionCanceled { reasons: out }
}

/// Whether a cancelled transaction failed only because another one was
/// writing the same items: worth trying again, unlike a failed condition.
pub(crate) fn only_conflicts(reasons: &[CancellationReason]) -> bool {
    reasons.iter().any(|r| r.code == "TransactionConflict")
        && reasons
            .iter()
            .all(|r| r.code == "TransactionConflict" || r.code == "None")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str) -> CancellationReason {
        CancellationReason {
            code: code.into(),
            message: None,
            item: None,
        }
    }

    #[test]
    fn codes_map_to_the_embedded_stores_variants() {
        let m = || "msg".to_owned();
        assert!(
            matches!(by_code("PutItem", "ValidationException", m()), StoreError::Validation(s) if s == "msg")
        );
        assert!(matches!(
            by_code("GetItem", "ResourceNotFoundException", m()),
            StoreError::ResourceNotFound(_)
        ));
        assert!(matches!(
            by_code("CreateTable", "ResourceInUseException", m()),
            StoreError::ResourceInUse(_)
        ));
        let throttled = by_code("PutItem", "ProvisionedThroughputExceededException", m());
        assert!(throttled.is_retryable());
        assert!(
            throttled
                .to_string()
                .contains("PutItem: ProvisionedThroughputExceededException")
        );
    }

    #[test]
    fn only_a_conflict_is_worth_a_retry() {
        assert!(only_conflicts(&[
            reason("None"),
            reason("TransactionConflict")
        ]));
        assert!(!only_conflicts(&[
            reason("ConditionalCheckFailed"),
            reason("TransactionConflict")
        ]));
        assert!(!only_conflicts(&[reason("None"), reason("None")]));
    }

    #[test]
    fn reasons_keep_their_order_and_items() {
        let sdk = [
            SdkReason::builder().code("None").build(),
            SdkReason::builder()
                .code("ConditionalCheckFailed")
                .message("The conditional request failed")
                .item("pk", aws_sdk_dynamodb::types::AttributeValue::S("a".into()))
                .build(),
        ];
        let StoreError::TransactionCanceled { reasons } = cancelled(&sdk) else {
            panic!()
        };
        assert_eq!(reasons[0].code, "None");
        assert_eq!(reasons[1].code, "ConditionalCheckFailed");
        assert!(
            reasons[1]
                .item
                .as_ref()
                .is_some_and(|i| i.contains_key("pk"))
        );
    }
}

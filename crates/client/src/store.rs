//! [`RemoteStore`]: the item store over DynamoDB's JSON 1.0 protocol.
//!
//! Requests and answers are the `postbox_store::api` shapes, which are
//! DynamoDB's own, so each operation is one serialise, one POST and one
//! deserialise. Error answers are turned back into the [`StoreError`]
//! variant the server encoded (see `decode_error`), so a caller sees the
//! same error, cancellation reasons included, as with the embedded store.

use postbox_item::Item;
use postbox_store::api::*;
use postbox_store::{ItemStore, StoreError, StoreResult};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::endpoint::Endpoint;

const TARGET_PREFIX: &str = "DynamoDB_20120810";

/// An [`ItemStore`] on a server that speaks DynamoDB's JSON protocol
/// (`postbox serve`, DynamoDB Local). Cheap to clone.
///
/// A server that cannot be reached, a broken connection or a timeout is
/// [`StoreError::Unavailable`]; calls are never retried here, because only
/// the caller knows whether repeating a write whose answer was lost is safe.
#[derive(Clone, Debug)]
pub struct RemoteStore {
    endpoint: Endpoint,
}

impl RemoteStore {
    /// A store reached through `endpoint`.
    pub fn new(endpoint: Endpoint) -> RemoteStore {
        RemoteStore { endpoint }
    }

    /// The endpoint this store talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    async fn call<I: Serialize, O: DeserializeOwned>(
        &self,
        operation: &str,
        input: &I,
    ) -> StoreResult<O> {
        let target = format!("{TARGET_PREFIX}.{operation}");
        let body = serde_json::to_vec(input)
            .map_err(|e| StoreError::validation(format!("cannot encode {operation}: {e}")))?;
        let answer = self
            .endpoint
            .call(&target, body, std::time::Duration::ZERO)
            .await
            .map_err(|u| StoreError::Unavailable(u.0))?;
        if answer.status != 200 {
            return Err(decode_error(answer.status, &answer.body));
        }
        serde_json::from_slice(&answer.body).map_err(|e| {
            StoreError::Storage(format!(
                "the answer of {} to {operation} is not DynamoDB's shape: {e}",
                self.endpoint.url()
            ))
        })
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TableName<'a> {
    table_name: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TableDescriptionOutput {
    table_description: TableDescription,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeTableOutput {
    table: TableDescription,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListTablesOutput {
    table_names: Vec<String>,
    last_evaluated_table_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TimeToLiveOutput {
    time_to_live_specification: TimeToLiveSpecification,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeTimeToLiveOutput {
    time_to_live_description: TimeToLiveDescription,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TimeToLiveDescription {
    time_to_live_status: String,
    attribute_name: Option<String>,
}

impl ItemStore for RemoteStore {
    async fn create_table(&self, input: CreateTableInput) -> StoreResult<TableDescription> {
        let out: TableDescriptionOutput = self.call("CreateTable", &input).await?;
        Ok(out.table_description)
    }

    async fn describe_table(&self, table_name: &str) -> StoreResult<TableDescription> {
        let out: DescribeTableOutput = self
            .call("DescribeTable", &TableName { table_name })
            .await?;
        Ok(out.table)
    }

    async fn delete_table(&self, table_name: &str) -> StoreResult<TableDescription> {
        let out: TableDescriptionOutput =
            self.call("DeleteTable", &TableName { table_name }).await?;
        Ok(out.table_description)
    }

    async fn list_tables(&self) -> StoreResult<Vec<String>> {
        let mut names = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let mut input = json!({ "Limit": 100 });
            if let Some(s) = &start {
                input["ExclusiveStartTableName"] = json!(s);
            }
            let page: ListTablesOutput = self.call("ListTables", &input).await?;
            names.extend(page.table_names);
            match page.last_evaluated_table_name {
                Some(last) => start = Some(last),
                None => return Ok(names),
            }
        }
    }

    async fn update_time_to_live(
        &self,
        table_name: &str,
        spec: TimeToLiveSpecification,
    ) -> StoreResult<TimeToLiveSpecification> {
        let input = json!({ "TableName": table_name, "TimeToLiveSpecification": spec });
        let out: TimeToLiveOutput = self.call("UpdateTimeToLive", &input).await?;
        Ok(out.time_to_live_specification)
    }

    async fn describe_time_to_live(&self, table_name: &str) -> StoreResult<Option<String>> {
        let out: DescribeTimeToLiveOutput = self
            .call("DescribeTimeToLive", &TableName { table_name })
            .await?;
        let d = out.time_to_live_description;
        Ok(match d.time_to_live_status.as_str() {
            "ENABLED" | "ENABLING" => d.attribute_name,
            _ => None,
        })
    }

    async fn get_item(&self, input: GetItemInput) -> StoreResult<GetItemOutput> {
        self.call("GetItem", &input).await
    }

    async fn put_item(&self, input: PutItemInput) -> StoreResult<WriteOutput> {
        self.call("PutItem", &input).await
    }

    async fn update_item(&self, input: UpdateItemInput) -> StoreResult<WriteOutput> {
        self.call("UpdateItem", &input).await
    }

    async fn delete_item(&self, input: DeleteItemInput) -> StoreResult<WriteOutput> {
        self.call("DeleteItem", &input).await
    }

    async fn query(&self, input: QueryInput) -> StoreResult<QueryOutput> {
        self.call("Query", &input).await
    }

    async fn scan(&self, input: ScanInput) -> StoreResult<QueryOutput> {
        self.call("Scan", &input).await
    }

    async fn batch_get_item(&self, input: BatchGetItemInput) -> StoreResult<BatchGetItemOutput> {
        self.call("BatchGetItem", &input).await
    }

    async fn batch_write_item(
        &self,
        input: BatchWriteItemInput,
    ) -> StoreResult<BatchWriteItemOutput> {
        self.call("BatchWriteItem", &input).await
    }

    async fn transact_write_items(&self, input: TransactWriteItemsInput) -> StoreResult<()> {
        let _: Value = self.call("TransactWriteItems", &input).await?;
        Ok(())
    }

    async fn transact_get_items(
        &self,
        input: TransactGetItemsInput,
    ) -> StoreResult<TransactGetItemsOutput> {
        self.call("TransactGetItems", &input).await
    }
}

/// An error answer as DynamoDB encodes it: `__type` ending in `#<Code>`, a
/// `message` (`Message` for TransactionCanceledException), and the failed
/// item or the cancellation reasons where the error carries them.
#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(rename = "__type", default)]
    kind: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(rename = "Message", default)]
    message_upper: Option<String>,
    #[serde(rename = "Item", default)]
    item: Option<Item>,
    #[serde(rename = "CancellationReasons", default)]
    cancellation_reasons: Option<Vec<CancellationReason>>,
}

/// The [`StoreError`] a non-200 answer stands for: the inverse of the
/// server's encoding (`postbox-server`'s `WireError`), so the variant, its
/// message, the failed item and the cancellation reasons come back as the
/// embedded store produced them.
pub(crate) fn decode_error(status: u16, body: &[u8]) -> StoreError {
    let Ok(err) = serde_json::from_slice::<ErrorBody>(body) else {
        let text = String::from_utf8_lossy(body);
        return if status >= 500 {
            StoreError::Unavailable(format!("the server answered {status}: {text}"))
        } else {
            StoreError::Validation(format!("the server answered {status}: {text}"))
        };
    };
    let code = err.kind.rsplit('#').next().unwrap_or_default();
    let message = err.message.or(err.message_upper).unwrap_or_default();
    match code {
        "ValidationException" | "SerializationException" => StoreError::Validation(message),
        "ConditionalCheckFailedException" => StoreError::ConditionalCheckFailed { item: err.item },
        "TransactionCanceledException" => StoreError::TransactionCanceled {
            reasons: err.cancellation_reasons.unwrap_or_default(),
        },
        "ResourceNotFoundException" => StoreError::ResourceNotFound(message),
        "ResourceInUseException" => StoreError::ResourceInUse(message),
        "TrimmedDataAccessException" => StoreError::TrimmedData(message),
        "IdempotentParameterMismatchException" => StoreError::IdempotentParameterMismatch(message),
        "InternalServerError" => StoreError::Storage(
            message
                .strip_prefix("storage failure: ")
                .map(str::to_owned)
                .unwrap_or(message),
        ),
        "ServiceUnavailable" => StoreError::Unavailable(message),
        "ThrottlingException"
        | "ProvisionedThroughputExceededException"
        | "RequestLimitExceeded" => StoreError::Unavailable(format!("{code}: {message}")),
        _ if status >= 500 => StoreError::Unavailable(format!("{code} ({status}): {message}")),
        _ => StoreError::Validation(format!("{code}: {message}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use http_body_util::BodyExt;
    use postbox_item::AttributeValue;
    use postbox_server::WireError;

    /// Encodes `e` exactly as the server does and decodes it back.
    async fn round_trip(e: StoreError) -> StoreError {
        let response = WireError::from(e).into_response();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        decode_error(status, &body)
    }

    #[tokio::test]
    async fn every_store_error_survives_the_wire() {
        let item: Item = [("pk".to_owned(), AttributeValue::S("a".into()))].into();
        let errors = [
            StoreError::validation("One or more parameter values were invalid"),
            StoreError::ConditionalCheckFailed { item: None },
            StoreError::ConditionalCheckFailed {
                item: Some(item.clone()),
            },
            StoreError::TransactionCanceled {
                reasons: vec![
                    CancellationReason {
                        code: "None".into(),
                        message: None,
                        item: None,
                    },
                    CancellationReason {
                        code: "ConditionalCheckFailed".into(),
                        message: Some("The conditional request failed".into()),
                        item: Some(item),
                    },
                ],
            },
            StoreError::ResourceNotFound("Requested resource not found".into()),
            StoreError::ResourceInUse("Table already exists: t".into()),
            StoreError::TrimmedData("trimmed".into()),
            StoreError::IdempotentParameterMismatch("token reused".into()),
            StoreError::Storage("disk full".into()),
            StoreError::Unavailable("upstream down".into()),
        ];
        for e in errors {
            let expected = format!("{e:?}");
            assert_eq!(format!("{:?}", round_trip(e).await), expected);
        }
    }

    #[test]
    fn answers_that_are_not_dynamodb_errors() {
        assert!(matches!(
            decode_error(502, b"<html>bad gateway</html>"),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            decode_error(400, b"nonsense"),
            StoreError::Validation(_)
        ));
        let e = decode_error(
            400,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#UnknownOperationException","message":"Unknown operation"}"#,
        );
        assert!(
            matches!(&e, StoreError::Validation(m) if m.starts_with("UnknownOperationException")),
            "{e:?}"
        );
        let e = decode_error(
            400,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow down"}"#,
        );
        assert!(e.is_retryable(), "{e:?}");
    }
}

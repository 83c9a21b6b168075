//! `DynamoDB_20120810.*`: the item store's operations on the wire.

use axum::response::{IntoResponse, Response};
use postbox_store::ItemStore;
use postbox_store::api::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::wire::{WireError, call, ok};

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TableNameInput {
    table_name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ResourceArnInput {
    resource_arn: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TagResourceInput {
    resource_arn: String,
    tags: Vec<Tag>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UntagResourceInput {
    resource_arn: String,
    tag_keys: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ListTablesInput {
    exclusive_start_table_name: Option<String>,
    limit: Option<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ListTablesOutput {
    table_names: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_evaluated_table_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateTimeToLiveInput {
    table_name: String,
    time_to_live_specification: TimeToLiveSpecification,
}

/// Handles one DynamoDB operation.
pub async fn handle<S: ItemStore>(store: &S, operation: &str, body: &[u8]) -> Response {
    macro_rules! op {
        ($method:ident) => {
            call(body, |input| async move {
                store.$method(input).await.map_err(WireError::from)
            })
            .await
        };
    }
    match operation {
        "GetItem" => op!(get_item),
        "PutItem" => op!(put_item),
        "UpdateItem" => op!(update_item),
        "DeleteItem" => op!(delete_item),
        "Query" => op!(query),
        "Scan" => op!(scan),
        "BatchGetItem" => op!(batch_get_item),
        "BatchWriteItem" => op!(batch_write_item),
        "TransactGetItems" => op!(transact_get_items),
        "TransactWriteItems" => {
            call(body, |input| async move {
                store
                    .transact_write_items(input)
                    .await
                    .map(|()| json!({}))
                    .map_err(WireError::from)
            })
            .await
        }
        "CreateTable" => {
            call(body, |input: CreateTableInput| async move {
                let d = store.create_table(input).await?;
                Ok::<_, WireError>(json!({ "TableDescription": d }))
            })
            .await
        }
        "DescribeTable" => {
            call(body, |input: TableNameInput| async move {
                let d = store.describe_table(&input.table_name).await?;
                Ok::<_, WireError>(json!({ "Table": d }))
            })
            .await
        }
        "DeleteTable" => {
            call(body, |input: TableNameInput| async move {
                let d = store.delete_table(&input.table_name).await?;
                Ok::<_, WireError>(json!({ "TableDescription": d }))
            })
            .await
        }
        "ListTables" => {
            call(body, |input: ListTablesInput| async move {
                list_tables(store, input).await
            })
            .await
        }
        "UpdateTimeToLive" => {
            call(body, |input: UpdateTimeToLiveInput| async move {
                let spec = store
                    .update_time_to_live(&input.table_name, input.time_to_live_specification)
                    .await?;
                Ok::<_, WireError>(json!({ "TimeToLiveSpecification": spec }))
            })
            .await
        }
        "DescribeTimeToLive" => {
            call(body, |input: TableNameInput| async move {
                let desc = match store.describe_time_to_live(&input.table_name).await? {
                    Some(attr) => json!({"TimeToLiveStatus": "ENABLED", "AttributeName": attr}),
                    None => json!({"TimeToLiveStatus": "DISABLED"}),
                };
                Ok::<_, WireError>(json!({ "TimeToLiveDescription": desc }))
            })
            .await
        }
        "UpdateTable" => {
            call(body, |input: UpdateTableInput| async move {
                let d = store.update_table(input).await?;
                Ok::<_, WireError>(json!({ "TableDescription": d }))
            })
            .await
        }
        "TagResource" => {
            call(body, |input: TagResourceInput| async move {
                store.tag_resource(&input.resource_arn, input.tags).await?;
                Ok::<_, WireError>(json!({}))
            })
            .await
        }
        "UntagResource" => {
            call(body, |input: UntagResourceInput| async move {
                store
                    .untag_resource(&input.resource_arn, input.tag_keys)
                    .await?;
                Ok::<_, WireError>(json!({}))
            })
            .await
        }
        "ListTagsOfResource" => {
            call(body, |input: ResourceArnInput| async move {
                let tags = store.list_tags_of_resource(&input.resource_arn).await?;
                Ok::<_, WireError>(json!({ "Tags": tags }))
            })
            .await
        }
        // Point-in-time recovery is not kept: the store's own commit log
        // recovers it after a crash, but there is no restore to a time.
        "DescribeContinuousBackups" => {
            call(body, |input: TableNameInput| async move {
                if store.key_schema(&input.table_name).await.is_err() {
                    return Err(WireError::client(
                        "TableNotFoundException",
                        format!("Table not found: {}", input.table_name),
                    ));
                }
                Ok::<_, WireError>(json!({"ContinuousBackupsDescription": {
                    "ContinuousBackupsStatus": "ENABLED",
                    "PointInTimeRecoveryDescription": {"PointInTimeRecoveryStatus": "DISABLED"},
                }}))
            })
            .await
        }
        // DynamoDB's default quotas; the embedded store enforces none of them.
        "DescribeLimits" => ok(&json!({
            "AccountMaxReadCapacityUnits": 80000,
            "AccountMaxWriteCapacityUnits": 80000,
            "TableMaxReadCapacityUnits": 40000,
            "TableMaxWriteCapacityUnits": 40000,
        })),
        "DescribeEndpoints" => {
            ok(&json!({"Endpoints": [{"Address": "localhost", "CachePeriodInMinutes": 1440}]}))
        }
        other => {
            WireError::unknown_operation(&format!("DynamoDB_20120810.{other}")).into_response()
        }
    }
}

async fn list_tables<S: ItemStore>(
    store: &S,
    input: ListTablesInput,
) -> Result<ListTablesOutput, WireError> {
    let limit = match input.limit {
        None => 100,
        Some(l @ 1..=100) => l as usize,
        Some(l) => {
            return Err(WireError::client(
                "ValidationException",
                format!(
                    "1 validation error detected: Value '{l}' at 'limit' failed to satisfy constraint: Member must have value less than or equal to 100 and greater than or equal to 1"
                ),
            ));
        }
    };
    let mut names = store.list_tables().await?;
    names.sort();
    let start = match &input.exclusive_start_table_name {
        Some(s) => names.partition_point(|n| n <= s),
        None => 0,
    };
    let page: Vec<String> = names[start..].iter().take(limit).cloned().collect();
    let last = (start + page.len() < names.len())
        .then(|| page.last().cloned())
        .flatten();
    Ok(ListTablesOutput {
        table_names: page,
        last_evaluated_table_name: last,
    })
}

//! What a signed request may do to Postbox's own tables and queues.
//!
//! Tables whose names start with `postbox_` are Postbox's. On the wire:
//! - [`EVENTS_TABLE`]: an admin key may read it (GetItem, Query, Scan,
//!   BatchGetItem, TransactGetItems, DescribeTable, DescribeTimeToLive and
//!   its stream), so `postbox verify` works remotely, and may put the verify
//!   checkpoint rows (`pk = TENANT#<tenant>#VERIFIED`, `sk = VERIFIED`) that
//!   `postbox verify` records. Nothing else writes it but the engine.
//! - [`INBOX_TABLE`]: the durable workers' claims. An admin key may read and
//!   write its items and create it and set its TTL (what `postbox worker`
//!   does: claim rows, dead letters, poison records); it may not delete it.
//! - every other `postbox_` table (the API tokens, the access keys, the
//!   idempotency records, the queues' and the relay's state): refused for
//!   every operation and every key, and left out of ListTables and
//!   ListStreams.
//!
//! Queues whose names start with `postbox` are Postbox's (the events queue,
//! its DLQ, the row-changes queue): a key may receive, delete and change the
//! visibility of their messages and read their attributes (the workers'
//! part), but not send to them, purge, delete, create or reconfigure them,
//! nor move messages into or out of them. Only the engine and the relay
//! write events and their messages.

use serde_json::Value;

use crate::auth::{ACCESS_KEYS_TABLE, Caller, Denied};

/// The events table the engine writes.
pub const EVENTS_TABLE: &str = postbox_topology::EVENTS_TABLE;
/// The durable workers' claims table.
pub const INBOX_TABLE: &str = postbox_topology::INBOX_TABLE;
/// Prefix of Postbox's own tables.
pub const TABLE_PREFIX: &str = postbox_topology::TABLE_PREFIX;
/// Prefix of Postbox's own queues.
pub const QUEUE_PREFIX: &str = postbox_topology::QUEUE_PREFIX;

/// Whether a wire caller may see `table` at all.
pub fn table_visible(table: &str) -> bool {
    !table.starts_with(TABLE_PREFIX) || table == EVENTS_TABLE || table == INBOX_TABLE
}

fn denied_table(operation: &str, table: &str) -> Denied {
    Denied::AccessDenied(format!(
        "User is not authorized to perform: dynamodb:{operation} on resource: table/{table}: {table} is Postbox's own table{}",
        if table == ACCESS_KEYS_TABLE || !table_visible(table) {
            " and is never reachable through the wire protocols"
        } else if table == EVENTS_TABLE {
            "; only the engine writes events (an admin key may read them)"
        } else {
            "; an admin key may read and write its items but not delete it"
        }
    ))
}

const READS: &[&str] = &[
    "GetItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "TransactGetItems",
    "DescribeTable",
    "DescribeTimeToLive",
];

/// Checks a DynamoDB operation against Postbox's tables.
///
/// `body` is the request parsed as JSON, None when it is not JSON.
pub(crate) fn check_dynamodb(
    caller: &Caller,
    operation: &str,
    body: Option<&Value>,
) -> Result<(), Denied> {
    let Some(body) = body else {
        // Not JSON: the operation refuses it before touching anything.
        return Ok(());
    };
    // Every action of a transaction or batch is judged on its own.
    for table in dynamodb_tables(operation, body) {
        if !table.starts_with(TABLE_PREFIX) {
            continue;
        }
        let allowed = caller.admin
            && match table.as_str() {
                EVENTS_TABLE => {
                    READS.contains(&operation)
                        || (operation == "PutItem" && is_checkpoint(&body["Item"]))
                }
                INBOX_TABLE => operation != "DeleteTable",
                _ => false,
            };
        if !allowed {
            return Err(denied_table(operation, &table));
        }
    }
    Ok(())
}

/// Checks a DynamoDB Streams operation against Postbox's tables.
pub(crate) fn check_streams(
    caller: &Caller,
    operation: &str,
    body: Option<&Value>,
) -> Result<(), Denied> {
    let Some(body) = body else {
        return Ok(());
    };
    let table = match operation {
        "ListStreams" => body["TableName"].as_str().map(str::to_owned),
        "DescribeStream" | "GetShardIterator" => body["StreamArn"]
            .as_str()
            .and_then(crate::streams::table_of_arn)
            .map(str::to_owned),
        "GetRecords" => body["ShardIterator"]
            .as_str()
            .and_then(crate::streams::table_of_iterator),
        _ => None,
    };
    match table {
        Some(t) if t.starts_with(TABLE_PREFIX) && !(caller.admin && table_visible(&t)) => {
            Err(denied_table(operation, &t))
        }
        _ => Ok(()),
    }
}

/// Checks an SQS action against Postbox's queues.
pub(crate) fn check_sqs(
    _caller: &Caller,
    action: &str,
    body: Option<&Value>,
) -> Result<(), Denied> {
    let Some(body) = body else {
        return Ok(());
    };
    let refused = [
        "SendMessage",
        "SendMessageBatch",
        "PurgeQueue",
        "DeleteQueue",
        "CreateQueue",
        "SetQueueAttributes",
        "StartMessageMoveTask",
    ];
    if !refused.contains(&action) {
        return Ok(());
    }
    let mut names = Vec::new();
    if let Some(url) = body["QueueUrl"].as_str() {
        names.push(url.trim_end_matches('/').rsplit('/').next().unwrap_or(url));
    }
    if let Some(name) = body["QueueName"].as_str() {
        names.push(name);
    }
    for arn in ["SourceArn", "DestinationArn"] {
        if let Some(a) = body[arn].as_str() {
            names.push(a.rsplit(':').next().unwrap_or(a));
        }
    }
    match names.into_iter().find(|n| n.starts_with(QUEUE_PREFIX)) {
        Some(queue) => Err(Denied::AccessDenied(format!(
            "User is not authorized to perform: sqs:{action} on resource: {queue}: it is Postbox's own queue; only the engine and the relay send to it, and its configuration is Postbox's"
        ))),
        None => Ok(()),
    }
}

/// The tables a DynamoDB request names.
fn dynamodb_tables(operation: &str, body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match operation {
        "BatchGetItem" | "BatchWriteItem" => {
            if let Some(items) = body["RequestItems"].as_object() {
                for t in items.keys() {
                    out.push(t.clone());
                }
            }
        }
        "TransactGetItems" | "TransactWriteItems" => {
            for action in body["TransactItems"].as_array().into_iter().flatten() {
                if let Some(action) = action.as_object() {
                    for a in action.values() {
                        if let Some(t) = a["TableName"].as_str() {
                            out.push(t.to_owned());
                        }
                    }
                }
            }
        }
        _ => {
            if let Some(t) = body["TableName"].as_str() {
                out.push(t.to_owned());
            }
            // Tagging names its table by ARN.
            if let Some(t) = body["ResourceArn"]
                .as_str()
                .and_then(|arn| postbox_store::tags::table_of_arn(arn).ok())
            {
                out.push(t.to_owned());
            }
        }
    }
    out
}

/// Whether `item` is a verify checkpoint row of the events table.
fn is_checkpoint(item: &Value) -> bool {
    use postbox_topology::keys::{PK, SK, VERIFIED_SK, tenant_of_verified_pk};
    let pk = item[PK]["S"].as_str().unwrap_or("");
    item[SK]["S"].as_str() == Some(VERIFIED_SK) && tenant_of_verified_pk(pk).is_some()
}

/// Removes Postbox's hidden tables from a ListTables or ListStreams answer.
pub(crate) fn filter_listing(operation: &str, body: &mut Value) {
    match operation {
        "ListTables" => {
            if let Some(names) = body["TableNames"].as_array_mut() {
                names.retain(|n| n.as_str().is_none_or(table_visible));
            }
        }
        "ListStreams" => {
            if let Some(streams) = body["Streams"].as_array_mut() {
                streams.retain(|s| s["TableName"].as_str().is_none_or(table_visible));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn admin() -> Caller {
        Caller {
            key_id: "AKIATEST".into(),
            admin: true,
            tenant: None,
        }
    }

    fn dynamodb(op: &str, body: Value) -> Result<(), Denied> {
        check_dynamodb(&admin(), op, Some(&body))
    }

    #[test]
    fn admin_keys_read_events_and_write_only_checkpoints() {
        assert!(dynamodb("Query", json!({"TableName": EVENTS_TABLE})).is_ok());
        assert!(dynamodb("Scan", json!({"TableName": EVENTS_TABLE})).is_ok());
        let checkpoint = json!({"TableName": EVENTS_TABLE, "Item": {"pk": {"S": "TENANT#acme#VERIFIED"}, "sk": {"S": "VERIFIED"}, "seq": {"N": "3"}}});
        assert!(dynamodb("PutItem", checkpoint).is_ok());
        let event = json!({"TableName": EVENTS_TABLE, "Item": {"pk": {"S": "TENANT#acme#EVENTS"}, "sk": {"S": "00000000000000000001"}}});
        assert!(matches!(
            dynamodb("PutItem", event),
            Err(Denied::AccessDenied(_))
        ));
        for op in [
            "UpdateItem",
            "DeleteItem",
            "DeleteTable",
            "UpdateTimeToLive",
        ] {
            assert!(
                matches!(
                    dynamodb(op, json!({"TableName": EVENTS_TABLE})),
                    Err(Denied::AccessDenied(_))
                ),
                "{op}"
            );
        }
        let batch = json!({"RequestItems": {"orders": [], EVENTS_TABLE: []}});
        assert!(dynamodb("BatchWriteItem", batch.clone()).is_err());
        assert!(dynamodb("BatchGetItem", batch).is_ok());
        let tx = json!({"TransactItems": [{"Put": {"TableName": "orders"}}, {"Delete": {"TableName": EVENTS_TABLE}}]});
        assert!(dynamodb("TransactWriteItems", tx).is_err());
    }

    #[test]
    fn hidden_tables_are_refused_for_every_operation() {
        for table in [
            postbox_topology::TOKENS_TABLE,
            ACCESS_KEYS_TABLE,
            "postbox_queue_messages",
        ] {
            for op in ["GetItem", "Scan", "PutItem", "DescribeTable", "CreateTable"] {
                assert!(
                    dynamodb(op, json!({"TableName": table})).is_err(),
                    "{op} {table}"
                );
            }
            let tx = json!({"TransactItems": [{"Get": {"TableName": table}}]});
            assert!(dynamodb("TransactGetItems", tx).is_err());
        }
        assert!(dynamodb("PutItem", json!({"TableName": "orders"})).is_ok());
    }

    #[test]
    fn the_inbox_is_the_workers_but_cannot_be_deleted() {
        for op in [
            "CreateTable",
            "PutItem",
            "UpdateItem",
            "Query",
            "UpdateTimeToLive",
        ] {
            assert!(
                dynamodb(op, json!({"TableName": INBOX_TABLE})).is_ok(),
                "{op}"
            );
        }
        assert!(dynamodb("DeleteTable", json!({"TableName": INBOX_TABLE})).is_err());
    }

    #[test]
    fn own_queues_take_no_messages_from_the_wire() {
        let url = json!({"QueueUrl": format!("http://h/000000000000/{}", postbox_topology::EVENTS_QUEUE), "MessageBody": "x"});
        let b = Some(&url);
        assert!(check_sqs(&admin(), "SendMessage", b).is_err());
        assert!(check_sqs(&admin(), "PurgeQueue", b).is_err());
        assert!(check_sqs(&admin(), "ReceiveMessage", b).is_ok());
        assert!(check_sqs(&admin(), "DeleteMessage", b).is_ok());
        let other = json!({"QueueUrl": "http://h/000000000000/orders"});
        assert!(check_sqs(&admin(), "SendMessage", Some(&other)).is_ok());
        let create = json!({"QueueName": "postbox-x"});
        assert!(check_sqs(&admin(), "CreateQueue", Some(&create)).is_err());
    }

    #[test]
    fn listings_leave_out_hidden_tables() {
        let mut tables = json!({"TableNames": ["orders", ACCESS_KEYS_TABLE, EVENTS_TABLE, INBOX_TABLE, postbox_topology::TOKENS_TABLE]});
        filter_listing("ListTables", &mut tables);
        assert_eq!(
            tables["TableNames"],
            json!(["orders", EVENTS_TABLE, INBOX_TABLE])
        );
    }
}

//! `DynamoDBStreams_20120810.*`: change streams on the wire.
//!
//! The embedded store keeps one ordered stream per table, exposed as a single
//! open shard. A shard iterator is an opaque token naming the table and the
//! last sequence number already read, so iterators survive server restarts
//! and never hold state on the server.

use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use postbox_item::item_to_json;
use postbox_store::api::{EventName, StreamRecord, TableDescription};
use postbox_store::{ChangeStreams, ItemStore, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::wire::{WireError, call};

/// The id of the one shard of every embedded stream.
const SHARD_ID: &str = "shardId-00000000000000000001-00000001";
/// Region reported in stream records, as DynamoDB Local does for local data.
const REGION: &str = "ddblocal";
/// GetRecords' default and maximum page size.
const MAX_RECORDS: usize = 1000;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ListStreamsInput {
    table_name: Option<String>,
    limit: Option<usize>,
    exclusive_start_stream_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeStreamInput {
    stream_arn: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetShardIteratorInput {
    stream_arn: String,
    shard_id: String,
    shard_iterator_type: String,
    sequence_number: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetRecordsInput {
    shard_iterator: String,
    limit: Option<usize>,
}

/// Handles one DynamoDB Streams operation.
pub async fn handle<S: ItemStore + ChangeStreams>(
    store: &S,
    operation: &str,
    body: &[u8],
) -> Response {
    match operation {
        "ListStreams" => call(body, |i| list_streams(store, i)).await,
        "DescribeStream" => call(body, |i| describe_stream(store, i)).await,
        "GetShardIterator" => call(body, |i| get_shard_iterator(store, i)).await,
        "GetRecords" => call(body, |i| get_records(store, i)).await,
        other => WireError::unknown_operation(&format!("DynamoDBStreams_20120810.{other}"))
            .into_response(),
    }
}

fn validation(msg: impl Into<String>) -> WireError {
    WireError::client("ValidationException", msg)
}

fn not_found(arn: &str) -> WireError {
    WireError::client(
        "ResourceNotFoundException",
        format!("Requested resource not found: Stream: {arn} not found"),
    )
}

/// The table name in a stream ARN (`...:table/<name>/stream/<label>`).
pub(crate) fn table_of_arn(arn: &str) -> Option<&str> {
    arn.split_once(":table/")
        .and_then(|(_, rest)| rest.split_once("/stream/"))
        .map(|(name, _)| name)
}

/// The table a shard iterator reads.
pub(crate) fn table_of_iterator(it: &str) -> Option<String> {
    decode_iterator(it).map(|(table, _)| table)
}

/// The table a stream ARN (`...:table/<name>/stream/<label>`) belongs to.
async fn table_of_stream<S: ItemStore>(
    store: &S,
    arn: &str,
) -> Result<TableDescription, WireError> {
    let name = table_of_arn(arn).ok_or_else(|| validation(format!("Invalid StreamArn: {arn}")))?;
    let table = store
        .describe_table(name)
        .await
        .map_err(|_| not_found(arn))?;
    match &table.latest_stream_arn {
        Some(latest) if latest == arn => Ok(table),
        _ => Err(not_found(arn)),
    }
}

async fn list_streams<S: ItemStore>(
    store: &S,
    input: ListStreamsInput,
) -> Result<Value, WireError> {
    let mut names = store.list_tables().await?;
    names.sort();
    let mut streams = Vec::new();
    for name in names {
        if input.table_name.as_ref().is_some_and(|t| *t != name) {
            continue;
        }
        let table = store.describe_table(&name).await?;
        if let (Some(arn), Some(label)) = (table.latest_stream_arn, table.latest_stream_label) {
            streams.push(json!({"StreamArn": arn, "TableName": name, "StreamLabel": label}));
        }
    }
    if let Some(start) = &input.exclusive_start_stream_arn
        && let Some(pos) = streams
            .iter()
            .position(|s| s["StreamArn"] == *start.as_str())
    {
        streams.drain(..=pos);
    }
    let limit = input.limit.unwrap_or(100).clamp(1, 100);
    let last = (streams.len() > limit).then(|| streams[limit - 1]["StreamArn"].clone());
    streams.truncate(limit);
    let mut out = json!({ "Streams": streams });
    if let Some(last) = last {
        out["LastEvaluatedStreamArn"] = last;
    }
    Ok(out)
}

async fn describe_stream<S: ItemStore + ChangeStreams>(
    store: &S,
    input: DescribeStreamInput,
) -> Result<Value, WireError> {
    let table = table_of_stream(store, &input.stream_arn).await?;
    let view = table
        .stream_specification
        .as_ref()
        .and_then(|s| s.stream_view_type);
    let first = store
        .read_stream(&table.table_name, 0, 1)
        .await?
        .first()
        .map_or(1, |r| r.sequence_number);
    Ok(json!({
        "StreamDescription": {
            "StreamArn": input.stream_arn,
            "StreamLabel": table.latest_stream_label,
            "StreamStatus": "ENABLED",
            "StreamViewType": view,
            "CreationRequestDateTime": table.creation_date_time,
            "TableName": table.table_name,
            "KeySchema": table.key_schema,
            "Shards": [{
                "ShardId": SHARD_ID,
                "SequenceNumberRange": {"StartingSequenceNumber": format_sequence(first)},
            }],
        }
    }))
}

/// Sequence numbers on the wire: decimal strings of 21 digits, which sort
/// lexicographically in the same order as numerically.
fn format_sequence(n: u64) -> String {
    format!("{n:021}")
}

fn parse_sequence(s: &str) -> Result<u64, WireError> {
    s.parse()
        .map_err(|_| validation(format!("Invalid SequenceNumber: {s}")))
}

fn encode_iterator(table: &str, after: u64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{after}|{table}"))
}

fn decode_iterator(it: &str) -> Option<(String, u64)> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(it).ok()?).ok()?;
    let (after, table) = raw.split_once('|')?;
    Some((table.to_owned(), after.parse().ok()?))
}

async fn get_shard_iterator<S: ItemStore + ChangeStreams>(
    store: &S,
    input: GetShardIteratorInput,
) -> Result<Value, WireError> {
    let table = table_of_stream(store, &input.stream_arn).await?;
    if input.shard_id != SHARD_ID {
        return Err(WireError::client(
            "ResourceNotFoundException",
            format!(
                "Requested resource not found: Shard: {} in Stream: {} not found",
                input.shard_id, input.stream_arn
            ),
        ));
    }
    let sequence = || {
        input
            .sequence_number
            .as_deref()
            .ok_or_else(|| validation("SequenceNumber is required for this ShardIteratorType"))
            .and_then(parse_sequence)
    };
    let after = match input.shard_iterator_type.as_str() {
        "TRIM_HORIZON" => 0,
        "LATEST" => store.stream_head(&table.table_name).await?,
        "AT_SEQUENCE_NUMBER" => sequence()?.saturating_sub(1),
        "AFTER_SEQUENCE_NUMBER" => sequence()?,
        other => {
            return Err(validation(format!(
                "1 validation error detected: Value '{other}' at 'shardIteratorType' failed to satisfy constraint: Member must satisfy enum value set: [AFTER_SEQUENCE_NUMBER, AT_SEQUENCE_NUMBER, TRIM_HORIZON, LATEST]"
            )));
        }
    };
    Ok(json!({ "ShardIterator": encode_iterator(&table.table_name, after) }))
}

async fn get_records<S: ChangeStreams>(
    store: &S,
    input: GetRecordsInput,
) -> Result<Value, WireError> {
    let (table, after) = decode_iterator(&input.shard_iterator)
        .ok_or_else(|| validation("Invalid ShardIterator"))?;
    let limit = input.limit.unwrap_or(MAX_RECORDS).clamp(1, MAX_RECORDS);
    let records = store.read_stream(&table, after, limit).await.map_err(|e| match e {
        StoreError::ResourceNotFound(_) => WireError::client(
            "ResourceNotFoundException",
            format!("Requested resource not found: the table {table} of this shard iterator no longer exists"),
        ),
        other => other.into(),
    })?;
    let next = records.last().map_or(after, |r| r.sequence_number);
    Ok(json!({
        "Records": records.iter().map(record_json).collect::<Vec<_>>(),
        "NextShardIterator": encode_iterator(&table, next),
    }))
}

/// One stream record as DynamoDB Streams renders it.
fn record_json(r: &StreamRecord) -> Value {
    let mut dynamodb = json!({
        "ApproximateCreationDateTime": (r.approximate_creation_time_ms / 1000) as f64,
        "Keys": item_to_json(&r.keys),
        "SequenceNumber": format_sequence(r.sequence_number),
        "SizeBytes": r.size_bytes,
        "StreamViewType": r.view_type,
    });
    if let Some(img) = &r.new_image {
        dynamodb["NewImage"] = item_to_json(img);
    }
    if let Some(img) = &r.old_image {
        dynamodb["OldImage"] = item_to_json(img);
    }
    let event_name = match r.event_name {
        EventName::Insert => "INSERT",
        EventName::Modify => "MODIFY",
        EventName::Remove => "REMOVE",
    };
    let mut out = json!({
        "eventID": format!("{:032x}", r.sequence_number),
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": dynamodb,
    });
    if r.ttl_removal {
        out["userIdentity"] = json!({"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"});
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterators_round_trip_and_reject_garbage() {
        let it = encode_iterator("orders|x", 42);
        assert_eq!(decode_iterator(&it), Some(("orders|x".to_owned(), 42)));
        assert_eq!(decode_iterator("not an iterator!"), None);
    }

    #[test]
    fn sequence_numbers_sort_as_strings() {
        assert!(format_sequence(9) < format_sequence(10));
        assert_eq!(parse_sequence(&format_sequence(123)).unwrap(), 123);
    }
}

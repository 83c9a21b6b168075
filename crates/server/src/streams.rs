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
    limit: Option<i64>,
    exclusive_start_stream_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeStreamInput {
    stream_arn: String,
    limit: Option<i64>,
    exclusive_start_shard_id: Option<String>,
    shard_filter: Option<ShardFilter>,
}

/// DescribeStream's filter: the children of one shard.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ShardFilter {
    #[serde(rename = "Type")]
    kind: Option<String>,
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
    limit: Option<i64>,
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

/// A `Limit` of at least 1 and at most `max`, with DynamoDB Streams'
/// messages; `default` when absent.
fn limit(given: Option<i64>, default: usize, max: usize, over: &str) -> Result<usize, WireError> {
    match given {
        None => Ok(default),
        Some(n) if n < 1 => Err(validation(format!(
            "1 validation error detected: Value '{n}' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1"
        ))),
        Some(n) if n as u64 > max as u64 => Err(validation(format!(
            "One or more parameter values were invalid: {over}"
        ))),
        Some(n) => Ok(n as usize),
    }
}

/// The table a stream ARN (`...:table/<name>/stream/<label>`) belongs to,
/// from the catalog (no item count: stream calls are frequent).
async fn table_of_stream<S: ItemStore>(
    store: &S,
    arn: &str,
) -> Result<TableDescription, WireError> {
    let name = table_of_arn(arn).ok_or_else(|| not_found(arn))?;
    let table = store
        .describe_table_uncounted(name)
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
        let table = store.describe_table_uncounted(&name).await?;
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
    let limit = limit(
        input.limit,
        100,
        100,
        "Limit cannot be greater than the maximum allowed size: 100",
    )?;
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
    limit(
        input.limit,
        100,
        100,
        "Limit cannot be greater than the maximum: 100",
    )?;
    if let Some(start) = &input.exclusive_start_shard_id {
        length_within("exclusiveStartShardId", start, 28, 65)?;
    }
    if let Some(kind) = input.shard_filter.as_ref().and_then(|f| f.kind.as_deref())
        && kind != "CHILD_SHARDS"
    {
        return Err(validation(
            "1 validation error detected: Value 'null' at 'shardFilter.type' failed to satisfy constraint: Member must be CHILD_SHARDS",
        ));
    }
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
            // The one shard, unless the page starts after it or the
            // filter asks for children (it has none).
            "Shards": if input.shard_filter.is_some()
                || input.exclusive_start_shard_id.as_deref().is_some_and(|s| s >= SHARD_ID)
            {
                vec![]
            } else {
                vec![json!({
                    "ShardId": SHARD_ID,
                    "SequenceNumberRange": {"StartingSequenceNumber": format_sequence(first)},
                })]
            },
        }
    }))
}

/// Member `member` (`value`) must be `min` to `max` characters long, as
/// shard ids (28 to 65) and sequence numbers (21 to 40) are.
fn length_within(member: &str, value: &str, min: usize, max: usize) -> Result<(), WireError> {
    let bound = if value.len() < min {
        format!("greater than or equal to {min}")
    } else if value.len() > max {
        format!("less than or equal to {max}")
    } else {
        return Ok(());
    };
    Err(validation(format!(
        "1 validation error detected: Value '{value}' at '{member}' failed to satisfy constraint: Member must have length {bound}"
    )))
}

/// Sequence numbers on the wire: decimal strings of 21 digits, which sort
/// lexicographically in the same order as numerically.
fn format_sequence(n: u64) -> String {
    format!("{n:021}")
}

fn parse_sequence(s: &str) -> Result<u64, WireError> {
    length_within("sequenceNumber", s, 21, 40)?;
    s.parse().map_err(|_| {
        validation(format!(
            "One or more parameter values were invalid: Invalid SequenceNumber: {s}"
        ))
    })
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
            .ok_or_else(|| {
                validation("One or more parameter values were invalid: Invalid SequenceNumber")
            })
            .and_then(parse_sequence)
    };
    if matches!(
        input.shard_iterator_type.as_str(),
        "TRIM_HORIZON" | "LATEST"
    ) && input.sequence_number.is_some()
    {
        return Err(validation(
            "One or more parameter values were invalid: SequenceNumber should not be passed for this iterator type",
        ));
    }
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
    let limit = limit(
        input.limit,
        MAX_RECORDS,
        MAX_RECORDS,
        "Limit should be less than or equal to 1000",
    )?;
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

    /// DescribeStream, GetShardIterator and ListStreams read the catalog,
    /// never count the table (a consumer calls them often); a pager that
    /// passes the last shard as ExclusiveStartShardId gets no shards.
    #[tokio::test]
    async fn stream_calls_visit_no_item_and_paging_shards_ends() {
        use postbox_store::api::{
            CreateTableInput, PutItemInput, StreamSpecification, StreamViewType,
        };
        use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
        let dir = tempfile::tempdir().unwrap();
        let store =
            EmbeddedStore::open(dir.path().join("s.redb"), EmbeddedOptions::default()).unwrap();
        let mut create = CreateTableInput::keyed_by("orders", "pk");
        create.stream_specification = Some(StreamSpecification {
            stream_enabled: true,
            stream_view_type: Some(StreamViewType::KeysOnly),
        });
        let arn = store
            .create_table(create)
            .await
            .unwrap()
            .latest_stream_arn
            .unwrap();
        for i in 0..300 {
            let item = [(
                "pk".to_owned(),
                postbox_item::AttributeValue::s(format!("o{i}")),
            )]
            .into();
            store
                .put_item(PutItemInput {
                    table_name: "orders".into(),
                    item,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        let answer = |op: &'static str, body: Value| {
            let store = store.clone();
            async move {
                let response = handle(&store, op, body.to_string().as_bytes()).await;
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
                    .await
                    .unwrap();
                (status, serde_json::from_slice::<Value>(&bytes).unwrap())
            }
        };
        let before = store.rows_ranged();
        let (status, d) = answer("DescribeStream", json!({"StreamArn": arn})).await;
        assert_eq!(status, 200, "{d}");
        let shard = d["StreamDescription"]["Shards"][0]["ShardId"]
            .as_str()
            .unwrap()
            .to_owned();
        let (_, next) = answer(
            "DescribeStream",
            json!({"StreamArn": arn, "ExclusiveStartShardId": shard}),
        )
        .await;
        assert_eq!(next["StreamDescription"]["Shards"], json!([]), "{next}");
        let (status, it) = answer(
            "GetShardIterator",
            json!({"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "LATEST"}),
        )
        .await;
        assert_eq!(status, 200, "{it}");
        let (_, list) = answer("ListStreams", json!({})).await;
        assert_eq!(list["Streams"].as_array().unwrap().len(), 1, "{list}");
        assert_eq!(
            store.rows_ranged() - before,
            0,
            "stream calls counted the table"
        );
        // DescribeTable does count (exactly), which the counter sees.
        store.describe_table("orders").await.unwrap();
        assert_eq!(store.rows_ranged() - before, 300);
    }

    #[test]
    fn sequence_numbers_sort_as_strings() {
        assert!(format_sequence(9) < format_sequence(10));
        assert_eq!(parse_sequence(&format_sequence(123)).unwrap(), 123);
    }
}

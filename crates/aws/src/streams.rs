//! Reading DynamoDB Streams with the official SDK: a table's stream, its
//! shards (every page of DescribeStream), shard iterators and pages of
//! records, each record in the Pipe's JSON form (what filters match and
//! input templates address, as `postbox_relay::record` gives it on the
//! embedded store).
//!
//! Errors that change what the reader does are told apart: an expired
//! iterator (get a fresh one from the checkpoint), trimmed data (records
//! the retention removed before they were read: a gap) and a stream that
//! is gone; the rest are transient and retried by the caller.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{AttributeValue as Av, Record, ShardIteratorType};
use postbox_item::{AttributeValue, Item, Number, item_to_json};
use serde_json::{Map, Value};

/// One shard of a stream, as DescribeStream lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The shard's id.
    pub id: String,
    /// The shard it was split from, if any.
    pub parent: Option<String>,
    /// Whether the shard is closed (it has an ending sequence number): once
    /// read to its end it has no more records.
    pub closed: bool,
}

/// Where an iterator starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// The oldest record the stream retains.
    TrimHorizon,
    /// Only records written after the iterator is taken.
    Latest,
    /// After this sequence number (a checkpoint).
    After(String),
}

/// A record read from a shard.
#[derive(Clone, Debug)]
pub struct StreamRecord {
    /// Its sequence number in the shard (decimal text, up to 40 digits).
    pub sequence: String,
    /// Commit time, ms since the epoch (DynamoDB gives seconds).
    pub created_ms: u64,
    /// The record in the Pipe's JSON form.
    pub json: Value,
}

/// One GetRecords answer.
#[derive(Debug)]
pub struct Page {
    /// The records, in the shard's order.
    pub records: Vec<StreamRecord>,
    /// The iterator for the next page; `None` once a closed shard is read
    /// to its end.
    pub next: Option<String>,
}

/// Why reading failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The iterator is older than 15 minutes: take a new one.
    #[error("the shard iterator expired")]
    Expired,
    /// The position is older than the stream's retention (24 hours): the
    /// records between it and the oldest retained are lost to this reader.
    #[error("the records asked for are past the stream's retention: {0}")]
    Trimmed(String),
    /// The stream or shard does not exist (the stream was disabled, or
    /// replaced by a new one).
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (throttling after the SDK's retries, network): retry.
    #[error("{0}")]
    Other(String),
}

/// What the relay reads a stream through: DynamoDB Streams ([`Streams`]),
/// or in tests a scripted stream that splits shards, expires iterators
/// and trims records, which the local services never do.
pub trait StreamSource: Clone + Send + Sync + 'static {
    /// Every shard of stream `arn`.
    fn shards(&self, arn: &str) -> impl Future<Output = Result<Vec<Shard>, ReadError>> + Send;
    /// An iterator on `shard` of stream `arn` at `start`.
    fn iterator(
        &self,
        arn: &str,
        shard: &str,
        start: &Start,
    ) -> impl Future<Output = Result<String, ReadError>> + Send;
    /// Up to `limit` records from `iterator`.
    fn records(
        &self,
        arn: &str,
        iterator: &str,
        limit: i32,
    ) -> impl Future<Output = Result<Page, ReadError>> + Send;
}

/// A DynamoDB Streams client.
#[derive(Clone, Debug)]
pub struct Streams {
    client: Client,
}

impl StreamSource for Streams {
    async fn shards(&self, arn: &str) -> Result<Vec<Shard>, ReadError> {
        Streams::shards(self, arn).await
    }

    async fn iterator(&self, arn: &str, shard: &str, start: &Start) -> Result<String, ReadError> {
        Streams::iterator(self, arn, shard, start).await
    }

    async fn records(&self, arn: &str, iterator: &str, limit: i32) -> Result<Page, ReadError> {
        Streams::records(self, arn, iterator, limit).await
    }
}

impl Streams {
    /// A client from the SDK's configuration (endpoint variable:
    /// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`).
    pub fn new(config: &aws_config::SdkConfig) -> Streams {
        Streams {
            client: Client::new(config),
        }
    }

    /// Every shard of stream `arn`, following DescribeStream's pages.
    pub async fn shards(&self, arn: &str) -> Result<Vec<Shard>, ReadError> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let answer = self
                .client
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(after.clone())
                .send()
                .await
                .map_err(|e| {
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception())
                    {
                        ReadError::NotFound(arn.to_owned())
                    } else {
                        ReadError::Other(DisplayErrorContext(e).to_string())
                    }
                })?;
            let Some(description) = answer.stream_description() else {
                return Err(ReadError::Other(format!(
                    "DescribeStream of {arn} answered no description"
                )));
            };
            for s in description.shards() {
                let Some(id) = s.shard_id() else { continue };
                out.push(Shard {
                    id: id.to_owned(),
                    parent: s.parent_shard_id().map(str::to_owned),
                    closed: s
                        .sequence_number_range()
                        .and_then(|r| r.ending_sequence_number())
                        .is_some(),
                });
            }
            match description.last_evaluated_shard_id() {
                // A server that repeats the last page would page forever.
                Some(last) if after.as_deref() != Some(last) => after = Some(last.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    /// An iterator on shard `shard` of stream `arn` at `start`.
    pub async fn iterator(
        &self,
        arn: &str,
        shard: &str,
        start: &Start,
    ) -> Result<String, ReadError> {
        let (kind, sequence) = match start {
            Start::TrimHorizon => (ShardIteratorType::TrimHorizon, None),
            Start::Latest => (ShardIteratorType::Latest, None),
            Start::After(s) => (ShardIteratorType::AfterSequenceNumber, Some(s.clone())),
        };
        let answer = self
            .client
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(sequence)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(s) if s.is_trimmed_data_access_exception() => {
                    ReadError::Trimmed(format!("shard {shard} at {start:?}"))
                }
                Some(s) if s.is_resource_not_found_exception() => {
                    ReadError::NotFound(format!("shard {shard} of {arn}"))
                }
                _ => ReadError::Other(DisplayErrorContext(e).to_string()),
            })?;
        answer
            .shard_iterator()
            .map(str::to_owned)
            .ok_or_else(|| ReadError::NotFound(format!("shard {shard} of {arn} has no iterator")))
    }

    /// Up to `limit` records from `iterator`.
    pub async fn records(&self, arn: &str, iterator: &str, limit: i32) -> Result<Page, ReadError> {
        let answer = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(s) if s.is_expired_iterator_exception() => ReadError::Expired,
                Some(s) if s.is_trimmed_data_access_exception() => {
                    ReadError::Trimmed(s.to_string())
                }
                Some(s) if s.is_resource_not_found_exception() => {
                    ReadError::NotFound(s.to_string())
                }
                _ => ReadError::Other(DisplayErrorContext(e).to_string()),
            })?;
        let mut records = Vec::new();
        for r in answer.records() {
            records.push(to_record(arn, r).map_err(ReadError::Other)?);
        }
        Ok(Page {
            records,
            next: answer.next_shard_iterator().map(str::to_owned),
        })
    }
}

/// `record` of stream `arn` in the Pipe's JSON form.
pub fn to_record(arn: &str, record: &Record) -> Result<StreamRecord, String> {
    let Some(change) = record.dynamodb() else {
        return Err("a stream record without its change (`dynamodb`)".to_owned());
    };
    let sequence = change
        .sequence_number()
        .ok_or("a stream record without a sequence number")?
        .to_owned();
    let created_ms = change
        .approximate_creation_date_time()
        .map_or(0, |t| t.to_millis().unwrap_or(0).max(0) as u64);
    let mut dynamodb = Map::new();
    dynamodb.insert(
        "ApproximateCreationDateTime".into(),
        serde_json::json!((created_ms / 1000) as f64),
    );
    if let Some(keys) = change.keys() {
        dynamodb.insert("Keys".into(), item_to_json(&to_item(keys)?));
    }
    if let Some(image) = change.new_image() {
        dynamodb.insert("NewImage".into(), item_to_json(&to_item(image)?));
    }
    if let Some(image) = change.old_image() {
        dynamodb.insert("OldImage".into(), item_to_json(&to_item(image)?));
    }
    dynamodb.insert("SequenceNumber".into(), Value::String(sequence.clone()));
    if let Some(size) = change.size_bytes() {
        dynamodb.insert("SizeBytes".into(), Value::from(size));
    }
    if let Some(view) = change.stream_view_type() {
        dynamodb.insert(
            "StreamViewType".into(),
            Value::String(view.as_str().to_owned()),
        );
    }
    let text = |v: Option<&str>| Value::String(v.unwrap_or_default().to_owned());
    let mut out = Map::new();
    out.insert("eventID".into(), text(record.event_id()));
    out.insert(
        "eventName".into(),
        text(record.event_name().map(|n| n.as_str())),
    );
    out.insert("eventVersion".into(), text(record.event_version()));
    out.insert("eventSource".into(), text(record.event_source()));
    out.insert("awsRegion".into(), text(record.aws_region()));
    out.insert("dynamodb".into(), Value::Object(dynamodb));
    out.insert("eventSourceARN".into(), Value::String(arn.to_owned()));
    if let Some(who) = record.user_identity() {
        out.insert(
            "userIdentity".into(),
            serde_json::json!({"type": who.r#type(), "principalId": who.principal_id()}),
        );
    }
    Ok(StreamRecord {
        sequence,
        created_ms,
        json: Value::Object(out),
    })
}

fn to_item(map: &HashMap<String, Av>) -> Result<Item, String> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), to_value(v)?)))
        .collect()
}

fn number(text: &str) -> Result<Number, String> {
    text.parse::<Number>()
        .map_err(|e| format!("a stream record holds a number Postbox cannot read ({text}): {e}"))
}

fn to_value(v: &Av) -> Result<AttributeValue, String> {
    Ok(match v {
        Av::S(s) => AttributeValue::S(s.clone()),
        Av::N(n) => AttributeValue::N(number(n)?),
        Av::B(b) => AttributeValue::B(b.as_ref().to_vec()),
        Av::Bool(b) => AttributeValue::Bool(*b),
        Av::Null(_) => AttributeValue::Null,
        Av::M(m) => AttributeValue::M(to_item(m)?),
        Av::L(l) => AttributeValue::L(l.iter().map(to_value).collect::<Result<_, _>>()?),
        Av::Ss(s) => AttributeValue::Ss(s.iter().cloned().collect()),
        Av::Ns(s) => AttributeValue::Ns(s.iter().map(|n| number(n)).collect::<Result<_, _>>()?),
        Av::Bs(s) => AttributeValue::Bs(s.iter().map(|b| b.as_ref().to_vec()).collect()),
        other => {
            return Err(format!(
                "a stream record holds a value of a type Postbox does not know: {other:?}"
            ));
        }
    })
}

/// Sequence numbers compare as numbers (they are decimal text of varying
/// length).
pub fn sequence_after(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    (a.len(), a) > (b.len(), b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_as_numbers_not_text() {
        assert!(sequence_after("100", "99"));
        assert!(!sequence_after("99", "100"));
        assert!(sequence_after("000000000000000000200", "199"));
        assert!(!sequence_after("5", "5"));
    }
}

//! `AmazonSQS.*`: the embedded queues on SQS's JSON protocol.
//!
//! Requests carry `X-Amz-Target: AmazonSQS.<Action>` and a JSON body with
//! SQS's member names; answers are JSON 1.0. Queue URLs are
//! `http://<Host header>/<account>/<name>`, so they point back at whatever
//! address the client used. Errors are `{"__type": "com.amazonaws.sqs#Code",
//! "message": ...}` plus the `x-amzn-query-error: <legacy code>;Sender`
//! header that AWS SDKs map to their modelled exceptions (so botocore reports
//! `AWS.SimpleQueueService.NonExistentQueue` for QueueDoesNotExist, as it
//! does against SQS).

use std::collections::{BTreeMap, HashSet};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use postbox_queue::attributes::MAX_MESSAGE_SIZE;
use postbox_queue::digest::md5_of_attributes;
use postbox_queue::{
    MessageAttributeValue, MessageAttributes, NewMessage, QueueError, Queues, ReceiveOptions,
    ReceivedMessage,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// Most entries in one batch request.
const MAX_BATCH: usize = 10;

/// Handles one SQS action.
pub async fn handle(queues: &Queues, headers: &HeaderMap, action: &str, body: &[u8]) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_owned();
    let ctx = Ctx { queues, host };
    match ctx.run(action, body).await {
        Ok(value) => json_response(StatusCode::OK, &value, None),
        Err(fail) => fail.into_response(),
    }
}

/// Why a request failed.
enum Fail {
    Queue(QueueError),
    UnknownAction(String),
}

impl From<QueueError> for Fail {
    fn from(e: QueueError) -> Fail {
        Fail::Queue(e)
    }
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        let (status, code, query_code, fault, message) = match self {
            Fail::Queue(e) => {
                let status =
                    StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
                let fault = if e.sender_fault() {
                    "Sender"
                } else {
                    "Receiver"
                };
                (status, e.code(), e.query_code(), fault, e.to_string())
            }
            Fail::UnknownAction(a) => (
                StatusCode::BAD_REQUEST,
                "InvalidAction",
                "InvalidAction",
                "Sender",
                format!("The action {a} is not valid for this endpoint."),
            ),
        };
        let body = json!({"__type": format!("com.amazonaws.sqs#{code}"), "message": message});
        json_response(status, &body, Some(format!("{query_code};{fault}")))
    }
}

fn json_response(status: StatusCode, body: &Value, query_error: Option<String>) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    if let Some(q) = query_error.and_then(|q| HeaderValue::from_str(&q).ok()) {
        resp.headers_mut().insert("x-amzn-query-error", q);
    }
    resp
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, Fail> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        // A lone surrogate (\ud800) is valid JSON but no Unicode scalar; SQS
        // refuses such text as it refuses any character outside its set.
        let text = e.to_string();
        if text.contains("surrogate") || text.contains("hex escape") {
            Fail::Queue(QueueError::InvalidMessageContents(
                "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF".into(),
            ))
        } else {
            Fail::Queue(QueueError::InvalidParameterValue(format!("Invalid request: {text}")))
        }
    })
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct Input {
    queue_url: Option<String>,
    queue_name: Option<String>,
    queue_name_prefix: Option<String>,
    attributes: Option<BTreeMap<String, String>>,
    attribute_names: Option<Vec<String>>,
    message_system_attribute_names: Option<Vec<String>>,
    message_attribute_names: Option<Vec<String>>,
    max_number_of_messages: Option<i64>,
    visibility_timeout: Option<i64>,
    wait_time_seconds: Option<i64>,
    receipt_handle: Option<String>,
    max_results: Option<i64>,
    next_token: Option<String>,
    source_arn: Option<String>,
    destination_arn: Option<String>,
    max_number_of_messages_per_second: Option<i64>,
    task_handle: Option<String>,
    receive_request_attempt_id: Option<String>,
    /// CreateQueue's tags (SQS spells this member in lower case).
    #[serde(rename = "tags")]
    tags: Option<BTreeMap<String, String>>,
    /// TagQueue's tags.
    #[serde(rename = "Tags")]
    tags_upper: Option<BTreeMap<String, String>>,
    tag_keys: Option<Vec<String>>,
    #[serde(flatten)]
    message: MessageInput,
}

/// A message to send: SendMessage's members, or one SendMessageBatch entry.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct MessageInput {
    id: Option<String>,
    message_body: Option<String>,
    delay_seconds: Option<i64>,
    message_attributes: Option<MessageAttributes>,
    message_system_attributes: Option<BTreeMap<String, MessageAttributeValue>>,
    message_deduplication_id: Option<String>,
    message_group_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Batch<T> {
    queue_url: Option<String>,
    #[serde(default)]
    entries: Vec<T>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct HandleEntry {
    id: String,
    receipt_handle: String,
    visibility_timeout: Option<i64>,
}

struct Ctx<'a> {
    queues: &'a Queues,
    host: String,
}

impl Ctx<'_> {
    async fn run(&self, action: &str, body: &[u8]) -> Result<Value, Fail> {
        match action {
            "SendMessageBatch" => return self.send_batch(decode(body)?).await,
            "DeleteMessageBatch" => return self.delete_batch(decode(body)?).await,
            "ChangeMessageVisibilityBatch" => {
                return self.change_visibility_batch(decode(body)?).await;
            }
            _ => {}
        }
        let input: Input = decode(body)?;
        let q = self.queues;
        match action {
            "CreateQueue" => {
                let name = input.queue_name.unwrap_or_default();
                if name.is_empty() {
                    return Err(missing("QueueName"));
                }
                q.create_queue_tagged(
                    &name,
                    input.attributes.unwrap_or_default(),
                    input.tags.unwrap_or_default(),
                )
                .await?;
                Ok(json!({"QueueUrl": self.url(&name)}))
            }
            "GetQueueUrl" => {
                let name = input
                    .queue_name
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| missing("QueueName"))?;
                q.queue_exists(&name)?;
                Ok(json!({"QueueUrl": self.url(&name)}))
            }
            "ListQueues" => self.list_queues(&input),
            "DeleteQueue" => {
                q.delete_queue(&queue_name(&input.queue_url)?).await?;
                Ok(json!({}))
            }
            "PurgeQueue" => {
                q.purge_queue(&queue_name(&input.queue_url)?).await?;
                Ok(json!({}))
            }
            "GetQueueAttributes" => {
                let names = input.attribute_names.unwrap_or_default();
                let attrs = q.queue_attributes(&queue_name(&input.queue_url)?, &names)?;
                Ok(if attrs.is_empty() {
                    json!({})
                } else {
                    json!({"Attributes": attrs})
                })
            }
            "SetQueueAttributes" => {
                let name = queue_name(&input.queue_url)?;
                q.set_queue_attributes(&name, input.attributes.unwrap_or_default())
                    .await?;
                Ok(json!({}))
            }
            "SendMessage" => {
                let name = queue_name(&input.queue_url)?;
                let message = new_message(input.message)?;
                let sent = q.send(&name, message).await?;
                Ok(send_result(&sent))
            }
            "ReceiveMessage" => self.receive(input).await,
            "DeleteMessage" => {
                let name = queue_name(&input.queue_url)?;
                let handle = input
                    .receipt_handle
                    .filter(|h| !h.is_empty())
                    .ok_or_else(|| missing("ReceiptHandle"))?;
                q.delete(&name, &handle).await?;
                Ok(json!({}))
            }
            "ChangeMessageVisibility" => {
                let name = queue_name(&input.queue_url)?;
                let handle = input
                    .receipt_handle
                    .filter(|h| !h.is_empty())
                    .ok_or_else(|| missing("ReceiptHandle"))?;
                let timeout = input
                    .visibility_timeout
                    .ok_or_else(|| missing("VisibilityTimeout"))?;
                q.change_visibility(&name, &handle, timeout).await?;
                Ok(json!({}))
            }
            "ListDeadLetterSourceQueues" => {
                let sources = q.dead_letter_sources(&queue_name(&input.queue_url)?)?;
                let urls: Vec<String> = sources.iter().map(|n| self.url(n)).collect();
                Ok(json!({"queueUrls": urls}))
            }
            "StartMessageMoveTask" => {
                let source = input.source_arn.ok_or_else(|| missing("SourceArn"))?;
                let handle = q
                    .start_move_task(
                        &source,
                        input.destination_arn,
                        input.max_number_of_messages_per_second,
                    )
                    .await?;
                Ok(json!({"TaskHandle": handle}))
            }
            "ListMessageMoveTasks" => {
                let source = input.source_arn.ok_or_else(|| missing("SourceArn"))?;
                let tasks = q.list_move_tasks(&source, input.max_results.unwrap_or(1))?;
                let results: Vec<Value> = tasks.iter().map(|t| move_task(t)).collect();
                Ok(json!({"Results": results}))
            }
            "CancelMessageMoveTask" => {
                let handle = input.task_handle.ok_or_else(|| missing("TaskHandle"))?;
                let moved = q.cancel_move_task(&handle)?;
                Ok(json!({"ApproximateNumberOfMessagesMoved": moved}))
            }
            "TagQueue" => {
                q.tag_queue(
                    &queue_name(&input.queue_url)?,
                    input.tags_upper.unwrap_or_default(),
                )
                .await?;
                Ok(json!({}))
            }
            "UntagQueue" => {
                q.untag_queue(
                    &queue_name(&input.queue_url)?,
                    input.tag_keys.unwrap_or_default(),
                )
                .await?;
                Ok(json!({}))
            }
            "ListQueueTags" => {
                let tags = q.queue_tags(&queue_name(&input.queue_url)?)?;
                Ok(if tags.is_empty() {
                    json!({})
                } else {
                    json!({"Tags": tags})
                })
            }
            other => Err(Fail::UnknownAction(other.to_owned())),
        }
    }

    fn url(&self, name: &str) -> String {
        format!("http://{}/{}/{name}", self.host, self.queues.account_id())
    }

    fn list_queues(&self, input: &Input) -> Result<Value, Fail> {
        let names = self
            .queues
            .list_queues(input.queue_name_prefix.as_deref().unwrap_or(""));
        let after = match &input.next_token {
            Some(t) => Some(
                URL_SAFE_NO_PAD
                    .decode(t)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        QueueError::InvalidParameterValue("Invalid NextToken value.".into())
                    })?,
            ),
            None => None,
        };
        let limit = match input.max_results {
            Some(m) if !(1..=1000).contains(&m) => {
                return Err(QueueError::InvalidParameterValue(format!(
                    "Value {m} for parameter MaxResults is invalid. Reason: MaxResults must be an integer between 1 and 1000."
                ))
                .into());
            }
            Some(m) => m as usize,
            None => 1000,
        };
        let rest: Vec<&String> = names
            .iter()
            .filter(|n| after.as_ref().is_none_or(|a| *n > a))
            .collect();
        let page: Vec<String> = rest.iter().take(limit).map(|n| self.url(n)).collect();
        let mut out = Map::new();
        if !page.is_empty() {
            out.insert("QueueUrls".into(), json!(page));
        }
        if input.max_results.is_some() && rest.len() > limit {
            out.insert(
                "NextToken".into(),
                json!(URL_SAFE_NO_PAD.encode(rest[limit - 1].as_bytes())),
            );
        }
        Ok(Value::Object(out))
    }

    async fn receive(&self, input: Input) -> Result<Value, Fail> {
        let name = queue_name(&input.queue_url)?;
        let options = ReceiveOptions {
            max_messages: input.max_number_of_messages,
            visibility_timeout: input.visibility_timeout,
            wait_time_seconds: input.wait_time_seconds,
            receive_request_attempt_id: input.receive_request_attempt_id,
            // A consumer over the wire outlives a crash of this process:
            // what it received must stay hidden for the visibility timeout.
            answer_before_sync: false,
        };
        let messages = self.queues.receive(&name, options).await?;
        let mut system_names: Vec<String> =
            input.message_system_attribute_names.unwrap_or_default();
        system_names.extend(input.attribute_names.unwrap_or_default());
        let attribute_names = input.message_attribute_names.unwrap_or_default();
        let out: Vec<Value> = messages
            .into_iter()
            .map(|m| message_json(m, &system_names, &attribute_names))
            .collect();
        Ok(if out.is_empty() {
            json!({})
        } else {
            json!({"Messages": out})
        })
    }

    async fn send_batch(&self, batch: Batch<MessageInput>) -> Result<Value, Fail> {
        let name = queue_name(&batch.queue_url)?;
        self.queues.queue_exists(&name)?;
        check_batch(
            &batch.entries,
            |e| e.id.as_deref().unwrap_or(""),
            "SendMessageBatchRequestEntry",
        )?;
        let total: usize = batch
            .entries
            .iter()
            .map(|e| {
                e.message_body.as_ref().map_or(0, String::len)
                    + e.message_attributes
                        .as_ref()
                        .map_or(0, postbox_queue::message::attributes_size)
            })
            .sum();
        if total > MAX_MESSAGE_SIZE as usize {
            return Err(QueueError::BatchRequestTooLong(MAX_MESSAGE_SIZE as usize, total).into());
        }
        let mut ids = Vec::new();
        let mut messages = Vec::new();
        let mut failed = Vec::new();
        for entry in batch.entries {
            let id = entry.id.clone().unwrap_or_default();
            match new_message(entry) {
                Ok(m) => {
                    ids.push(id);
                    messages.push(m);
                }
                Err(e) => failed.push(failure(&id, &e)),
            }
        }
        let results = if messages.is_empty() {
            Vec::new()
        } else {
            self.queues.send_batch(&name, messages).await?
        };
        let mut successful = Vec::new();
        for (id, result) in ids.iter().zip(results) {
            match result {
                Ok(sent) => {
                    let mut v = send_result(&sent);
                    v["Id"] = json!(id);
                    successful.push(v);
                }
                Err(e) => failed.push(failure(id, &e)),
            }
        }
        Ok(json!({"Successful": successful, "Failed": failed}))
    }

    async fn delete_batch(&self, batch: Batch<HandleEntry>) -> Result<Value, Fail> {
        let name = queue_name(&batch.queue_url)?;
        self.queues.queue_exists(&name)?;
        check_batch(
            &batch.entries,
            |e| e.id.as_str(),
            "DeleteMessageBatchRequestEntry",
        )?;
        let handles = batch
            .entries
            .iter()
            .map(|e| e.receipt_handle.clone())
            .collect();
        let results = self.queues.delete_batch(&name, handles).await?;
        Ok(batch_outcome(
            batch.entries.iter().map(|e| e.id.as_str()),
            results,
        ))
    }

    async fn change_visibility_batch(&self, batch: Batch<HandleEntry>) -> Result<Value, Fail> {
        let name = queue_name(&batch.queue_url)?;
        self.queues.queue_exists(&name)?;
        check_batch(
            &batch.entries,
            |e| e.id.as_str(),
            "ChangeMessageVisibilityBatchRequestEntry",
        )?;
        let mut ids = Vec::new();
        let mut entries = Vec::new();
        let mut failed = Vec::new();
        for e in &batch.entries {
            match e.visibility_timeout {
                Some(t) => {
                    ids.push(e.id.as_str());
                    entries.push((e.receipt_handle.clone(), t));
                }
                None => failed.push(failure(
                    &e.id,
                    &QueueError::MissingParameter(
                        "The request must contain the parameter VisibilityTimeout.".into(),
                    ),
                )),
            }
        }
        let results = if entries.is_empty() {
            Vec::new()
        } else {
            self.queues.change_visibility_batch(&name, entries).await?
        };
        let mut out = batch_outcome(ids.into_iter(), results);
        if let Some(list) = out["Failed"].as_array_mut() {
            list.extend(failed);
        }
        Ok(out)
    }
}

fn missing(param: &str) -> Fail {
    Fail::Queue(missing_parameter(param))
}

fn missing_parameter(param: &str) -> QueueError {
    QueueError::MissingParameter(format!("The request must contain the parameter {param}."))
}

/// The queue name at the end of a queue URL (`http://host/account/name`).
fn queue_name(url: &Option<String>) -> Result<String, Fail> {
    let url = url
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| missing("QueueUrl"))?;
    Ok(url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(url)
        .to_owned())
}

fn new_message(m: MessageInput) -> Result<NewMessage, QueueError> {
    let body = m
        .message_body
        .ok_or_else(|| missing_parameter("MessageBody"))?;
    let delay_seconds = match m.delay_seconds {
        Some(d) if !(0..=900).contains(&d) => {
            return Err(QueueError::InvalidParameterValue(format!(
                "Value {d} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."
            )));
        }
        other => other.map(|d| d as u32),
    };
    let trace_header = match m.message_system_attributes {
        Some(mut system) => {
            let trace = system.remove("AWSTraceHeader");
            if let Some(other) = system.keys().next() {
                return Err(QueueError::InvalidParameterValue(format!(
                    "Message system attribute name '{other}' is invalid."
                )));
            }
            trace.and_then(|t| t.string_value)
        }
        None => None,
    };
    Ok(NewMessage {
        body,
        delay_seconds,
        attributes: m.message_attributes.unwrap_or_default(),
        trace_header,
        group_id: m.message_group_id,
        deduplication_id: m.message_deduplication_id,
        body_of: None,
    })
}

fn send_result(sent: &postbox_queue::SendResult) -> Value {
    let mut v = json!({"MessageId": sent.message_id, "MD5OfMessageBody": sent.md5_of_body});
    if let Some(md5) = &sent.md5_of_attributes {
        v["MD5OfMessageAttributes"] = json!(md5);
    }
    if let Some(md5) = &sent.md5_of_system_attributes {
        v["MD5OfMessageSystemAttributes"] = json!(md5);
    }
    if let Some(seq) = &sent.sequence_number {
        v["SequenceNumber"] = json!(seq);
    }
    v
}

/// A received message with the system and message attributes asked for.
fn message_json(m: ReceivedMessage, system_names: &[String], attribute_names: &[String]) -> Value {
    let all_system = system_names.iter().any(|n| n == "All");
    let system: BTreeMap<&String, &String> = m
        .system
        .iter()
        .filter(|(k, _)| all_system || system_names.contains(k))
        .collect();
    let selected: MessageAttributes = m
        .attributes
        .into_iter()
        .filter(|(name, _)| wants_attribute(attribute_names, name))
        .collect();
    let mut v = json!({
        "MessageId": m.message_id,
        "ReceiptHandle": m.receipt_handle,
        "MD5OfBody": postbox_queue::digest::md5_hex(m.body.as_bytes()),
        "Body": m.body,
    });
    if !system.is_empty() {
        v["Attributes"] = json!(system);
    }
    if let Some(md5) = md5_of_attributes(&selected) {
        v["MD5OfMessageAttributes"] = json!(md5);
        v["MessageAttributes"] = serde_json::to_value(&selected).unwrap_or(Value::Null);
    }
    v
}

/// MessageAttributeNames: `All` or `.*` for every attribute, `prefix.*` for
/// those under a prefix, else exact (case-sensitive) names.
fn wants_attribute(names: &[String], name: &str) -> bool {
    names.iter().any(|n| {
        n == "All"
            || n == ".*"
            || n == name
            || n.strip_suffix(".*").is_some_and(|prefix| {
                name.strip_prefix(prefix)
                    .is_some_and(|r| r.starts_with('.'))
            })
    })
}

/// SQS's batch rules: 1 to 10 entries with distinct ids of up to 80
/// alphanumerics, hyphens and underscores.
fn check_batch<T>(
    entries: &[T],
    id: impl Fn(&T) -> &str,
    entry_name: &str,
) -> Result<(), QueueError> {
    if entries.is_empty() {
        return Err(QueueError::EmptyBatchRequest(entry_name.to_owned()));
    }
    if entries.len() > MAX_BATCH {
        return Err(QueueError::TooManyEntriesInBatchRequest(entries.len()));
    }
    let mut seen = HashSet::new();
    for e in entries {
        let id = id(e);
        let valid = !id.is_empty()
            && id.len() <= 80
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(QueueError::InvalidBatchEntryId);
        }
        if !seen.insert(id) {
            return Err(QueueError::BatchEntryIdsNotDistinct(id.to_owned()));
        }
    }
    Ok(())
}

fn failure(id: &str, e: &QueueError) -> Value {
    json!({"Id": id, "SenderFault": e.sender_fault(), "Code": e.code(), "Message": e.to_string()})
}

fn batch_outcome<'a>(
    ids: impl Iterator<Item = &'a str>,
    results: Vec<Result<(), QueueError>>,
) -> Value {
    let mut successful = Vec::new();
    let mut failed = Vec::new();
    for (id, r) in ids.zip(results) {
        match r {
            Ok(()) => successful.push(json!({"Id": id})),
            Err(e) => failed.push(failure(id, &e)),
        }
    }
    json!({"Successful": successful, "Failed": failed})
}

fn move_task(t: &postbox_queue::MoveTask) -> Value {
    let (status, reason) = t.status();
    let mut v = json!({
        "Status": status.as_str(),
        "SourceArn": t.source_arn,
        "ApproximateNumberOfMessagesMoved": t.moved(),
        "ApproximateNumberOfMessagesToMove": t.to_move,
        "StartedTimestamp": t.started_at,
    });
    if status == postbox_queue::MoveTaskStatus::Running {
        v["TaskHandle"] = json!(t.handle);
    }
    if let Some(d) = &t.destination_arn {
        v["DestinationArn"] = json!(d);
    }
    if let Some(r) = t.max_per_second {
        v["MaxNumberOfMessagesPerSecond"] = json!(r);
    }
    if let Some(r) = reason {
        v["FailureReason"] = json!(r);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_name_selection() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(wants_attribute(&names(&["All"]), "x"));
        assert!(wants_attribute(&names(&[".*"]), "x"));
        assert!(wants_attribute(&names(&["app.*"]), "app.x"));
        assert!(!wants_attribute(&names(&["app.*"]), "apple"));
        assert!(!wants_attribute(&names(&["a"]), "A"));
    }

    #[test]
    fn batch_rules() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let check = |v: Vec<String>| check_batch(&v, |s| s.as_str(), "Entry");
        assert!(matches!(
            check(ids(&[])),
            Err(QueueError::EmptyBatchRequest(_))
        ));
        assert!(matches!(
            check((0..11).map(|i| i.to_string()).collect()),
            Err(QueueError::TooManyEntriesInBatchRequest(11))
        ));
        assert!(matches!(
            check(ids(&["a", "a"])),
            Err(QueueError::BatchEntryIdsNotDistinct(_))
        ));
        assert!(matches!(
            check(ids(&["a b"])),
            Err(QueueError::InvalidBatchEntryId)
        ));
        assert!(check(ids(&["a-1", "b_2"])).is_ok());
    }

    #[test]
    fn queue_names_from_urls() {
        assert_eq!(
            queue_name(&Some("http://127.0.0.1:8000/000000000000/q1".into())).ok(),
            Some("q1".into())
        );
        assert!(queue_name(&None).is_err());
    }
}

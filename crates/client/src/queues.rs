//! [`RemoteQueues`]: the queues over SQS's JSON protocol.
//!
//! Queues are addressed by name, as with the embedded queues; the queue URL
//! the protocol wants is resolved once with GetQueueUrl and cached. Error
//! answers, whole-request and per batch entry, are turned back into the
//! [`QueueError`] the server encoded (see `decode_error`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postbox_queue::{
    MessageAttributes, NewMessage, QueueClient, QueueError, QueueResult, ReceiveOptions,
    ReceivedMessage, SendResult,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::endpoint::Endpoint;

const TARGET_PREFIX: &str = "AmazonSQS";

/// A [`QueueClient`] on a server that speaks SQS's JSON protocol
/// (`postbox serve`, an SQS-compatible emulator). Cheap to clone; clones
/// share the connection pool and the queue URL cache.
///
/// A server that cannot be reached, a broken connection or a timeout is
/// [`QueueError::Unavailable`]; calls are never retried here.
#[derive(Clone, Debug)]
pub struct RemoteQueues {
    endpoint: Endpoint,
    urls: Arc<Mutex<HashMap<String, String>>>,
}

impl RemoteQueues {
    /// Queues reached through `endpoint`.
    pub fn new(endpoint: Endpoint) -> RemoteQueues {
        RemoteQueues {
            endpoint,
            urls: Arc::default(),
        }
    }

    /// The endpoint these queues are reached through.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The URL of queue `name`, from the cache or GetQueueUrl.
    pub async fn queue_url(&self, name: &str) -> QueueResult<String> {
        if let Some(url) = self.urls.lock().expect("url cache").get(name) {
            return Ok(url.clone());
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Out {
            queue_url: String,
        }
        let out: Out = self
            .call("GetQueueUrl", json!({ "QueueName": name }), Duration::ZERO)
            .await?;
        self.urls
            .lock()
            .expect("url cache")
            .insert(name.to_owned(), out.queue_url.clone());
        Ok(out.queue_url)
    }

    /// Calls `action` on queue `queue`, forgetting its cached URL when the
    /// server says it no longer exists (it may be created again later).
    async fn call_on<O: DeserializeOwned>(
        &self,
        queue: &str,
        action: &str,
        mut body: Value,
        extra_wait: Duration,
    ) -> QueueResult<O> {
        body["QueueUrl"] = json!(self.queue_url(queue).await?);
        let result = self.call(action, body, extra_wait).await;
        if let Err(QueueError::QueueDoesNotExist) = &result {
            self.urls.lock().expect("url cache").remove(queue);
        }
        result
    }

    async fn call<O: DeserializeOwned>(
        &self,
        action: &str,
        body: Value,
        extra_wait: Duration,
    ) -> QueueResult<O> {
        let target = format!("{TARGET_PREFIX}.{action}");
        let answer = self
            .endpoint
            .call(&target, body.to_string().into_bytes(), extra_wait)
            .await
            .map_err(|u| QueueError::Unavailable(u.0))?;
        if answer.status != 200 {
            return Err(decode_error(answer.status, &answer.body));
        }
        serde_json::from_slice(&answer.body).map_err(|e| {
            QueueError::Storage(format!(
                "the answer of {} to {action} is not SQS's shape: {e}",
                self.endpoint.url()
            ))
        })
    }

    /// A batch call: entries get ids "0".."n-1", and the answer's
    /// Successful/Failed lists are put back in entry order.
    async fn batch<T: DeserializeOwned>(
        &self,
        queue: &str,
        action: &str,
        entries: Vec<Value>,
    ) -> QueueResult<Vec<QueueResult<T>>> {
        let n = entries.len();
        let out: BatchOutput<T> = self
            .call_on(queue, action, json!({ "Entries": entries }), Duration::ZERO)
            .await?;
        let mut results: Vec<Option<QueueResult<T>>> = (0..n).map(|_| None).collect();
        for ok in out.successful {
            if let Some(slot) = entry_index(&ok.id, n).map(|i| &mut results[i]) {
                *slot = Some(Ok(ok.result));
            }
        }
        for failed in out.failed {
            if let Some(slot) = entry_index(&failed.id, n).map(|i| &mut results[i]) {
                *slot = Some(Err(error_from_code(&failed.code, failed.message)));
            }
        }
        Ok(results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    Err(QueueError::Storage(format!(
                        "{action} answered nothing for entry {i}"
                    )))
                })
            })
            .collect())
    }
}

fn entry_index(id: &str, n: usize) -> Option<usize> {
    id.parse::<usize>().ok().filter(|i| *i < n)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BatchOutput<T> {
    #[serde(default = "Vec::new")]
    successful: Vec<Succeeded<T>>,
    #[serde(default)]
    failed: Vec<FailedEntry>,
}

#[derive(Deserialize)]
struct Succeeded<T> {
    #[serde(rename = "Id")]
    id: String,
    #[serde(flatten)]
    result: T,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct FailedEntry {
    id: String,
    code: String,
    #[serde(default)]
    message: String,
}

/// One SendMessageBatch result.
#[derive(Deserialize)]
struct Sent {
    #[serde(rename = "MessageId")]
    message_id: String,
    #[serde(rename = "SequenceNumber", default)]
    sequence_number: Option<String>,
    #[serde(rename = "MD5OfMessageBody")]
    md5_of_body: String,
    #[serde(rename = "MD5OfMessageAttributes", default)]
    md5_of_attributes: Option<String>,
    #[serde(rename = "MD5OfMessageSystemAttributes", default)]
    md5_of_system_attributes: Option<String>,
}

/// A successful delete or visibility change carries nothing but its id.
#[derive(Deserialize)]
struct Done {}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceiveOutput {
    #[serde(default)]
    messages: Vec<WireMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireMessage {
    message_id: String,
    receipt_handle: String,
    body: String,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
    #[serde(default)]
    message_attributes: MessageAttributes,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AttributesOutput {
    #[serde(default)]
    attributes: BTreeMap<String, String>,
}

fn send_entry(id: usize, m: NewMessage) -> Value {
    let mut v = json!({ "Id": id.to_string(), "MessageBody": m.body });
    if let Some(d) = m.delay_seconds {
        v["DelaySeconds"] = json!(d);
    }
    if !m.attributes.is_empty() {
        v["MessageAttributes"] = serde_json::to_value(&m.attributes).unwrap_or(Value::Null);
    }
    if let Some(t) = m.trace_header {
        v["MessageSystemAttributes"] =
            json!({ "AWSTraceHeader": { "DataType": "String", "StringValue": t } });
    }
    if let Some(g) = m.group_id {
        v["MessageGroupId"] = json!(g);
    }
    if let Some(d) = m.deduplication_id {
        v["MessageDeduplicationId"] = json!(d);
    }
    v
}

impl QueueClient for RemoteQueues {
    async fn receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> QueueResult<Vec<ReceivedMessage>> {
        // Every attribute, as the embedded queues hand them out.
        let mut body = json!({
            "MessageSystemAttributeNames": ["All"],
            "MessageAttributeNames": ["All"],
        });
        if let Some(n) = options.max_messages {
            body["MaxNumberOfMessages"] = json!(n);
        }
        if let Some(v) = options.visibility_timeout {
            body["VisibilityTimeout"] = json!(v);
        }
        if let Some(w) = options.wait_time_seconds {
            body["WaitTimeSeconds"] = json!(w);
        }
        if let Some(id) = options.receive_request_attempt_id {
            body["ReceiveRequestAttemptId"] = json!(id);
        }
        // A long poll answers after its wait (the queue's default wait when
        // none is given, at most 20 s), so the deadline grows by that much.
        let wait = Duration::from_secs(options.wait_time_seconds.unwrap_or(20).clamp(0, 20) as u64);
        let out: ReceiveOutput = self.call_on(queue, "ReceiveMessage", body, wait).await?;
        Ok(out
            .messages
            .into_iter()
            .map(|m| ReceivedMessage {
                message_id: m.message_id,
                receipt_handle: m.receipt_handle,
                body: m.body,
                attributes: m.message_attributes,
                system: m.attributes,
            })
            .collect())
    }

    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> QueueResult<Vec<QueueResult<SendResult>>> {
        let entries = messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| send_entry(i, m))
            .collect();
        let results: Vec<QueueResult<Sent>> =
            self.batch(queue, "SendMessageBatch", entries).await?;
        Ok(results
            .into_iter()
            .map(|r| {
                r.map(|s| SendResult {
                    message_id: s.message_id,
                    sequence_number: s.sequence_number,
                    md5_of_body: s.md5_of_body,
                    md5_of_attributes: s.md5_of_attributes,
                    md5_of_system_attributes: s.md5_of_system_attributes,
                })
            })
            .collect())
    }

    async fn delete_batch(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        let entries = handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| json!({ "Id": i.to_string(), "ReceiptHandle": h }))
            .collect();
        let results: Vec<QueueResult<Done>> =
            self.batch(queue, "DeleteMessageBatch", entries).await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    async fn change_visibility_batch(
        &self,
        queue: &str,
        entries: Vec<(String, i64)>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        let entries = entries
            .into_iter()
            .enumerate()
            .map(|(i, (h, t))| {
                json!({ "Id": i.to_string(), "ReceiptHandle": h, "VisibilityTimeout": t })
            })
            .collect();
        let results: Vec<QueueResult<Done>> = self
            .batch(queue, "ChangeMessageVisibilityBatch", entries)
            .await?;
        Ok(results.into_iter().map(|r| r.map(|_| ())).collect())
    }

    async fn queue_attributes(
        &self,
        queue: &str,
        names: &[String],
    ) -> QueueResult<BTreeMap<String, String>> {
        let out: AttributesOutput = self
            .call_on(
                queue,
                "GetQueueAttributes",
                json!({ "AttributeNames": names }),
                Duration::ZERO,
            )
            .await?;
        Ok(out.attributes)
    }
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(rename = "__type", default)]
    kind: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(rename = "Message", default)]
    message_upper: Option<String>,
}

/// The [`QueueError`] a non-200 answer stands for: `__type` ending in
/// `#<Code>` and a `message`, as the server's SQS layer encodes them.
pub(crate) fn decode_error(status: u16, body: &[u8]) -> QueueError {
    let Ok(err) = serde_json::from_slice::<ErrorBody>(body) else {
        let text = String::from_utf8_lossy(body).into_owned();
        return if status >= 500 {
            QueueError::Unavailable(format!("the server answered {status}: {text}"))
        } else {
            QueueError::InvalidParameterValue(format!("the server answered {status}: {text}"))
        };
    };
    let code = err.kind.rsplit('#').next().unwrap_or_default();
    let message = err.message.or(err.message_upper).unwrap_or_default();
    if status >= 500 && QueueError::from_code(code, message.clone()).is_none() {
        return QueueError::Unavailable(format!("{code} ({status}): {message}"));
    }
    error_from_code(code, message)
}

/// The variant for an SQS error code; a code SQS does not have is kept in
/// an InvalidParameterValue's message.
fn error_from_code(code: &str, message: String) -> QueueError {
    QueueError::from_code(code, message.clone())
        .unwrap_or_else(|| QueueError::InvalidParameterValue(format!("{code}: {message}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant, encoded as the server's SQS layer encodes it (a
    /// whole-request error and a batch entry's failure), decodes back to
    /// itself.
    #[test]
    fn every_queue_error_survives_the_wire() {
        let errors = [
            QueueError::QueueDoesNotExist,
            QueueError::QueueNameExists("VisibilityTimeout".into()),
            QueueError::InvalidParameterValue("Value 0 for parameter x is invalid.".into()),
            QueueError::MissingParameter("The request must contain the parameter QueueUrl.".into()),
            QueueError::InvalidAttributeName("Nope".into()),
            QueueError::InvalidAttributeValue("Invalid value for the parameter Policy.".into()),
            QueueError::InvalidMessageContents("Invalid characters found.".into()),
            QueueError::ReceiptHandleIsInvalid("The input receipt handle is invalid.".into()),
            QueueError::MessageNotInflight,
            QueueError::EmptyBatchRequest("SendMessageBatchRequestEntry".into()),
            QueueError::TooManyEntriesInBatchRequest(11),
            QueueError::BatchEntryIdsNotDistinct("a-1".into()),
            QueueError::InvalidBatchEntryId,
            QueueError::BatchRequestTooLong(262144, 300000),
            QueueError::PurgeQueueInProgress(
                "Only one PurgeQueue operation is allowed every 60 seconds.".into(),
            ),
            QueueError::UnsupportedOperation("A move task is already running.".into()),
            QueueError::ResourceNotFound("The task handle does not exist.".into()),
            QueueError::Storage("disk full".into()),
            QueueError::Unavailable("upstream down".into()),
        ];
        for e in errors {
            let body = json!({"__type": format!("com.amazonaws.sqs#{}", e.code()), "message": e.to_string()});
            let decoded = decode_error(e.http_status(), body.to_string().as_bytes());
            assert_eq!(decoded, e);
            assert_eq!(error_from_code(e.code(), e.to_string()), e);
        }
    }

    #[test]
    fn answers_that_are_not_sqs_errors() {
        assert!(matches!(
            decode_error(503, b"overloaded"),
            QueueError::Unavailable(_)
        ));
        assert!(matches!(
            decode_error(500, br#"{"__type":"com.amazonaws.sqs#Boom","message":"x"}"#),
            QueueError::Unavailable(_)
        ));
        assert_eq!(
            decode_error(
                400,
                br#"{"__type":"com.amazonaws.sqs#InvalidAction","message":"The action X is not valid for this endpoint."}"#
            ),
            QueueError::UnsupportedOperation("The action X is not valid for this endpoint.".into())
        );
    }
}

//! The queues on Amazon SQS: [`SqsQueues`] implements [`QueueClient`] with
//! SQS's own batch operations, so the worker, the operator tools and the
//! relay's targets run on SQS unchanged.
//!
//! Queues are named as Postbox names them, behind the stack's prefix
//! (`<prefix><name>`); their URLs are looked up once (GetQueueUrl) and
//! kept, and forgotten when SQS says the queue does not exist. Errors keep
//! SQS's codes ([`QueueError::from_code`]); what no variant names is
//! `Unavailable`, naming the operation.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types as sdk;
use postbox_queue::{
    MessageAttributeValue, NewMessage, QueueClient, QueueError, QueueResult, ReceiveOptions,
    ReceivedMessage, SendResult,
};

/// The queues of one stack on SQS. Cheap to clone.
#[derive(Clone)]
pub struct SqsQueues {
    client: Client,
    prefix: Arc<str>,
    urls: Arc<Mutex<HashMap<String, String>>>,
    counters: crate::sdk_counters::SdkCounters,
}

impl std::fmt::Debug for SqsQueues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsQueues")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Maps an SDK error of operation `op` by its error code.
fn map<E, R>(op: &str, e: SdkError<E, R>) -> QueueError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    if !matches!(e, SdkError::ServiceError(_)) {
        return QueueError::Unavailable(format!(
            "{op}: SQS did not answer: {}",
            aws_sdk_sqs::error::DisplayErrorContext(&e)
        ));
    }
    let code = e.code().unwrap_or("").to_owned();
    let message = e.message().unwrap_or("").to_owned();
    QueueError::from_code(&code, message.clone())
        .unwrap_or_else(|| QueueError::Unavailable(format!("{op}: {code}: {message}")))
}

/// A batch entry's failure.
fn failed(e: &sdk::BatchResultErrorEntry) -> QueueError {
    let message = e.message().unwrap_or("").to_owned();
    QueueError::from_code(e.code(), message.clone())
        .unwrap_or_else(|| QueueError::InvalidParameterValue(format!("{}: {message}", e.code())))
}

/// Puts batch results in request order: entry `i` has id `i`.
fn in_order<T>(
    n: usize,
    ok: impl IntoIterator<Item = (String, T)>,
    errors: &[sdk::BatchResultErrorEntry],
) -> Vec<QueueResult<T>> {
    let mut out: Vec<Option<QueueResult<T>>> = (0..n).map(|_| None).collect();
    for (id, v) in ok {
        if let Some(slot) = id.parse::<usize>().ok().and_then(|i| out.get_mut(i)) {
            *slot = Some(Ok(v));
        }
    }
    for e in errors {
        if let Some(slot) = e.id().parse::<usize>().ok().and_then(|i| out.get_mut(i)) {
            *slot = Some(Err(failed(e)));
        }
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(QueueError::Unavailable(
                    "SQS answered a batch without a result for every entry".into(),
                ))
            })
        })
        .collect()
}

fn attribute_to_sdk(v: &MessageAttributeValue) -> QueueResult<sdk::MessageAttributeValue> {
    sdk::MessageAttributeValue::builder()
        .data_type(&v.data_type)
        .set_string_value(v.string_value.clone())
        .set_binary_value(v.binary_value.clone().map(Blob::new))
        .build()
        .map_err(|e| QueueError::InvalidParameterValue(e.to_string()))
}

impl SqsQueues {
    /// The queues of `config`'s account whose names start with `prefix`.
    pub fn new(config: &aws_config::SdkConfig, prefix: &str) -> SqsQueues {
        let counters = crate::sdk_counters::SdkCounters::default();
        SqsQueues {
            client: Client::from_conf(
                aws_sdk_sqs::config::Builder::from(config)
                    .interceptor(counters.clone())
                    .build(),
            ),
            prefix: prefix.into(),
            urls: Arc::default(),
            counters,
        }
    }

    /// What the SDK retried, and how often SQS throttled, so far.
    pub fn sdk_stats(&self) -> crate::SdkStats {
        self.counters.stats()
    }

    /// The SDK client, for what the trait does not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// SQS's name of Postbox's queue `queue`.
    pub fn name(&self, queue: &str) -> String {
        format!("{}{queue}", self.prefix)
    }

    /// The URL of queue `queue`, looked up once.
    async fn url(&self, queue: &str) -> QueueResult<String> {
        if let Some(url) = self.urls.lock().expect("urls").get(queue) {
            return Ok(url.clone());
        }
        let out = self
            .client
            .get_queue_url()
            .queue_name(self.name(queue))
            .send()
            .await
            .map_err(|e| map("GetQueueUrl", e))?;
        let url = out
            .queue_url()
            .ok_or_else(|| QueueError::Unavailable("GetQueueUrl answered no QueueUrl".into()))?
            .to_owned();
        self.urls
            .lock()
            .expect("urls")
            .insert(queue.to_owned(), url.clone());
        Ok(url)
    }

    /// Forgets a queue's URL after SQS said it does not exist (it may be
    /// created again, with another URL).
    fn forget<T>(&self, queue: &str, r: QueueResult<T>) -> QueueResult<T> {
        if matches!(r, Err(QueueError::QueueDoesNotExist)) {
            self.urls.lock().expect("urls").remove(queue);
        }
        r
    }
}

impl QueueClient for SqsQueues {
    async fn receive(
        &self,
        queue: &str,
        options: ReceiveOptions,
    ) -> QueueResult<Vec<ReceivedMessage>> {
        let url = self.url(queue).await?;
        let clamp = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
        let sent = self
            .client
            .receive_message()
            .queue_url(url)
            .set_max_number_of_messages(options.max_messages.map(clamp))
            .set_visibility_timeout(options.visibility_timeout.map(clamp))
            .set_wait_time_seconds(options.wait_time_seconds.map(clamp))
            .set_receive_request_attempt_id(options.receive_request_attempt_id)
            .message_system_attribute_names(sdk::MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| map("ReceiveMessage", e));
        let out = self.forget(queue, sent)?;
        Ok(out
            .messages()
            .iter()
            .map(|m| ReceivedMessage {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                attributes: m
                    .message_attributes()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            MessageAttributeValue {
                                data_type: v.data_type().to_owned(),
                                string_value: v.string_value().map(str::to_owned),
                                binary_value: v.binary_value().map(|b| b.as_ref().to_vec()),
                            },
                        )
                    })
                    .collect(),
                system: m
                    .attributes()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                    .collect(),
            })
            .collect())
    }

    async fn send_batch(
        &self,
        queue: &str,
        messages: Vec<NewMessage>,
    ) -> QueueResult<Vec<QueueResult<SendResult>>> {
        let url = self.url(queue).await?;
        let n = messages.len();
        let mut entries = Vec::with_capacity(n);
        for (i, m) in messages.into_iter().enumerate() {
            let mut attributes = HashMap::new();
            for (k, v) in &m.attributes {
                attributes.insert(k.clone(), attribute_to_sdk(v)?);
            }
            let system = match &m.trace_header {
                Some(t) => Some(HashMap::from([(
                    sdk::MessageSystemAttributeNameForSends::AwsTraceHeader,
                    sdk::MessageSystemAttributeValue::builder()
                        .data_type("String")
                        .string_value(t)
                        .build()
                        .map_err(|e| QueueError::InvalidParameterValue(e.to_string()))?,
                )])),
                None => None,
            };
            entries.push(
                sdk::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(m.body)
                    .set_delay_seconds(m.delay_seconds.map(|d| d.min(i32::MAX as u32) as i32))
                    .set_message_attributes((!attributes.is_empty()).then_some(attributes))
                    .set_message_system_attributes(system)
                    .set_message_group_id(m.group_id)
                    .set_message_deduplication_id(m.deduplication_id)
                    .build()
                    .map_err(|e| QueueError::InvalidParameterValue(e.to_string()))?,
            );
        }
        let sent = self
            .client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| map("SendMessageBatch", e));
        let out = self.forget(queue, sent)?;
        let ok = out.successful().iter().map(|r| {
            (
                r.id().to_owned(),
                SendResult {
                    message_id: r.message_id().to_owned(),
                    sequence_number: r.sequence_number().map(str::to_owned),
                    md5_of_body: r.md5_of_message_body().to_owned(),
                    md5_of_attributes: r.md5_of_message_attributes().map(str::to_owned),
                    md5_of_system_attributes: r
                        .md5_of_message_system_attributes()
                        .map(str::to_owned),
                },
            )
        });
        Ok(in_order(n, ok, out.failed()))
    }

    async fn delete_batch(
        &self,
        queue: &str,
        handles: Vec<String>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        let url = self.url(queue).await?;
        let n = handles.len();
        let entries = handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                sdk::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .build()
                    .map_err(|e| QueueError::InvalidParameterValue(e.to_string()))
            })
            .collect::<QueueResult<Vec<_>>>()?;
        let sent = self
            .client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| map("DeleteMessageBatch", e));
        let out = self.forget(queue, sent)?;
        let ok = out.successful().iter().map(|r| (r.id().to_owned(), ()));
        Ok(in_order(n, ok, out.failed()))
    }

    async fn change_visibility_batch(
        &self,
        queue: &str,
        entries: Vec<(String, i64)>,
    ) -> QueueResult<Vec<QueueResult<()>>> {
        let url = self.url(queue).await?;
        let n = entries.len();
        let entries = entries
            .into_iter()
            .enumerate()
            .map(|(i, (h, secs))| {
                sdk::ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .visibility_timeout(secs.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
                    .build()
                    .map_err(|e| QueueError::InvalidParameterValue(e.to_string()))
            })
            .collect::<QueueResult<Vec<_>>>()?;
        let sent = self
            .client
            .change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| map("ChangeMessageVisibilityBatch", e));
        let out = self.forget(queue, sent)?;
        let ok = out.successful().iter().map(|r| (r.id().to_owned(), ()));
        Ok(in_order(n, ok, out.failed()))
    }

    async fn queue_attributes(
        &self,
        queue: &str,
        names: &[String],
    ) -> QueueResult<BTreeMap<String, String>> {
        let url = self.url(queue).await?;
        let sent = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .set_attribute_names(Some(
                names
                    .iter()
                    .map(|n| sdk::QueueAttributeName::from(n.as_str()))
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| map("GetQueueAttributes", e));
        let out = self.forget(queue, sent)?;
        Ok(out
            .attributes()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(id: &str, code: &str) -> sdk::BatchResultErrorEntry {
        sdk::BatchResultErrorEntry::builder()
            .id(id)
            .code(code)
            .sender_fault(true)
            .message("m")
            .build()
            .unwrap()
    }

    #[test]
    fn batch_results_come_back_in_request_order() {
        let ok = vec![("2".to_owned(), 'c'), ("0".to_owned(), 'a')];
        let out = in_order(3, ok, &[error("1", "ReceiptHandleIsInvalid")]);
        assert_eq!(out[0], Ok('a'));
        assert_eq!(out[1], Err(QueueError::ReceiptHandleIsInvalid("m".into())));
        assert_eq!(out[2], Ok('c'));
    }

    #[test]
    fn an_entry_without_a_result_is_an_error_not_a_success() {
        let out = in_order(2, vec![("0".to_owned(), ())], &[]);
        assert!(out[0].is_ok());
        assert!(matches!(out[1], Err(QueueError::Unavailable(_))));
    }

    #[test]
    fn an_unknown_entry_code_keeps_its_code() {
        let e = failed(&error("0", "SomethingNew"));
        assert_eq!(
            e,
            QueueError::InvalidParameterValue("SomethingNew: m".into())
        );
    }
}

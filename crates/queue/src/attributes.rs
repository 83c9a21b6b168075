//! Queue attributes: their defaults, SQS's bounds, parsing from the string
//! map CreateQueue and SetQueueAttributes take, and rendering back.
//!
//! A [`QueueConfig`] is what a queue is configured with; counts and
//! timestamps that GetQueueAttributes also reports are added by the caller.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{QueueError, QueueResult};

/// Default visibility timeout: 30 s.
pub const DEFAULT_VISIBILITY_TIMEOUT: u32 = 30;
/// Default retention: 4 days.
pub const DEFAULT_RETENTION: u32 = 345_600;
/// Largest message, and the default limit: 1 MiB.
pub const MAX_MESSAGE_SIZE: u32 = 1_048_576;

/// Attributes whose values are kept and echoed without interpretation
/// (access policy and encryption: outside what the embedded queues do).
const OPAQUE: [&str; 4] = [
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
];

/// Attributes GetQueueAttributes computes; they cannot be set.
pub(crate) const COMPUTED: [&str; 6] = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
];

/// A queue's redrive policy: after `max_receive_count` receives a message
/// moves to the dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedrivePolicy {
    /// The dead-letter queue's name.
    pub dead_letter_queue: String,
    /// The dead-letter queue's ARN, as given.
    pub dead_letter_target_arn: String,
    /// Receives after which a message is moved (1 to 1,000).
    pub max_receive_count: u32,
}

/// How a queue is configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// FIFO (true) or standard.
    pub fifo: bool,
    /// Seconds new messages stay invisible (0 to 900).
    pub delay_seconds: u32,
    /// Largest message in bytes (1,024 to 1,048,576).
    pub maximum_message_size: u32,
    /// Seconds a message is kept (60 to 1,209,600).
    pub message_retention_period: u32,
    /// Default long-poll wait of ReceiveMessage (0 to 20).
    pub receive_message_wait_time_seconds: u32,
    /// Default visibility timeout (0 to 43,200).
    pub visibility_timeout: u32,
    /// FIFO: deduplicate by the SHA-256 of the body when no id is given.
    pub content_based_deduplication: bool,
    /// FIFO: `queue` (the default) or `messageGroup`; reported once set.
    pub deduplication_scope: Option<String>,
    /// FIFO: `perQueue` (the default) or `perMessageGroupId`; reported once set.
    pub fifo_throughput_limit: Option<String>,
    /// Where messages go after too many receives.
    pub redrive_policy: Option<RedrivePolicy>,
    /// Which queues may use this one as their dead-letter queue (JSON, kept as given).
    pub redrive_allow_policy: Option<String>,
    /// Policy and encryption attributes, kept as given.
    pub opaque: BTreeMap<String, String>,
}

impl QueueConfig {
    /// The defaults of a new queue.
    pub fn new(fifo: bool) -> QueueConfig {
        QueueConfig {
            fifo,
            delay_seconds: 0,
            maximum_message_size: MAX_MESSAGE_SIZE,
            message_retention_period: DEFAULT_RETENTION,
            receive_message_wait_time_seconds: 0,
            visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT,
            content_based_deduplication: false,
            deduplication_scope: None,
            fifo_throughput_limit: None,
            redrive_policy: None,
            redrive_allow_policy: None,
            opaque: BTreeMap::new(),
        }
    }

    /// FIFO: whether deduplication ids are scoped to the message group.
    pub fn dedup_per_group(&self) -> bool {
        self.deduplication_scope.as_deref() == Some("messageGroup")
    }

    /// Whether this queue's RedriveAllowPolicy lets the queue `source_arn`
    /// use it as its dead-letter queue (`allowAll` when there is none).
    pub fn allows_source(&self, source_arn: &str) -> bool {
        let Some(policy) = &self.redrive_allow_policy else {
            return true;
        };
        let json: serde_json::Value = serde_json::from_str(policy).unwrap_or_default();
        match json.get("redrivePermission").and_then(|v| v.as_str()) {
            Some("denyAll") => false,
            Some("byQueue") => json
                .get("sourceQueueArns")
                .and_then(|v| v.as_array())
                .is_some_and(|arns| arns.iter().any(|a| a.as_str() == Some(source_arn))),
            _ => true,
        }
    }

    /// Applies `attributes` (as SetQueueAttributes or CreateQueue give them),
    /// all or nothing. `creating` allows `FifoQueue`.
    pub fn apply(
        &mut self,
        attributes: &BTreeMap<String, String>,
        creating: bool,
    ) -> QueueResult<()> {
        let mut next = self.clone();
        for (name, value) in attributes {
            next.apply_one(name, value, creating)?;
        }
        if next.fifo
            && next.fifo_throughput_limit.as_deref() == Some("perMessageGroupId")
            && !next.dedup_per_group()
        {
            return Err(QueueError::InvalidAttributeValue(
                "Invalid value for the parameter FifoThroughputLimit. Reason: You can specify perMessageGroupId only when DeduplicationScope is messageGroup.".into(),
            ));
        }
        *self = next;
        Ok(())
    }

    fn apply_one(&mut self, name: &str, value: &str, creating: bool) -> QueueResult<()> {
        let fifo_only = matches!(
            name,
            "ContentBasedDeduplication" | "DeduplicationScope" | "FifoThroughputLimit"
        );
        if fifo_only && !self.fifo {
            return Err(QueueError::InvalidAttributeName(name.to_owned()));
        }
        match name {
            "DelaySeconds" => self.delay_seconds = bounded(name, value, 0, 900)?,
            "MaximumMessageSize" => {
                self.maximum_message_size = bounded(name, value, 1024, MAX_MESSAGE_SIZE)?
            }
            "MessageRetentionPeriod" => {
                self.message_retention_period = bounded(name, value, 60, 1_209_600)?
            }
            "ReceiveMessageWaitTimeSeconds" => {
                self.receive_message_wait_time_seconds = bounded(name, value, 0, 20)?
            }
            "VisibilityTimeout" => self.visibility_timeout = bounded(name, value, 0, 43_200)?,
            "ContentBasedDeduplication" => self.content_based_deduplication = boolean(name, value)?,
            "DeduplicationScope" => {
                self.deduplication_scope = Some(one_of(name, value, &["queue", "messageGroup"])?)
            }
            "FifoThroughputLimit" => {
                self.fifo_throughput_limit =
                    Some(one_of(name, value, &["perQueue", "perMessageGroupId"])?);
            }
            "FifoQueue" => {
                // Only CreateQueue may name it, and only with the kind it creates.
                if !creating || boolean(name, value)? != self.fifo {
                    return Err(QueueError::InvalidAttributeValue(format!(
                        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.{}",
                        ""
                    )));
                }
            }
            "RedrivePolicy" => self.redrive_policy = redrive_policy(value)?,
            "RedriveAllowPolicy" => self.redrive_allow_policy = redrive_allow_policy(value)?,
            _ if OPAQUE.contains(&name) => {
                self.opaque.insert(name.to_owned(), value.to_owned());
            }
            _ => return Err(QueueError::InvalidAttributeName(name.to_owned())),
        }
        Ok(())
    }

    /// The configured attributes as GetQueueAttributes reports them.
    pub fn render(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        out.insert("DelaySeconds".to_owned(), self.delay_seconds.to_string());
        out.insert(
            "MaximumMessageSize".to_owned(),
            self.maximum_message_size.to_string(),
        );
        out.insert(
            "MessageRetentionPeriod".to_owned(),
            self.message_retention_period.to_string(),
        );
        out.insert(
            "ReceiveMessageWaitTimeSeconds".to_owned(),
            self.receive_message_wait_time_seconds.to_string(),
        );
        out.insert(
            "VisibilityTimeout".to_owned(),
            self.visibility_timeout.to_string(),
        );
        if self.fifo {
            out.insert("FifoQueue".to_owned(), "true".to_owned());
            out.insert(
                "ContentBasedDeduplication".to_owned(),
                self.content_based_deduplication.to_string(),
            );
            if let Some(scope) = &self.deduplication_scope {
                out.insert("DeduplicationScope".to_owned(), scope.clone());
            }
            if let Some(limit) = &self.fifo_throughput_limit {
                out.insert("FifoThroughputLimit".to_owned(), limit.clone());
            }
        }
        if let Some(p) = &self.redrive_policy {
            out.insert(
                "RedrivePolicy".to_owned(),
                redrive_policy_text(&p.dead_letter_target_arn, p.max_receive_count),
            );
        }
        if let Some(p) = &self.redrive_allow_policy {
            out.insert("RedriveAllowPolicy".to_owned(), p.clone());
        }
        out.extend(self.opaque.clone());
        out
    }

    /// The attribute names `apply` accepts that CreateQueue compares with an
    /// existing queue: the ones in `attributes` whose values differ.
    pub fn first_conflict(
        &self,
        attributes: &BTreeMap<String, String>,
    ) -> QueueResult<Option<String>> {
        let mut wanted = self.clone();
        wanted.apply(attributes, true)?;
        let (mine, theirs) = (self.render(), wanted.render());
        Ok(attributes
            .keys()
            .find(|name| mine.get(*name) != theirs.get(*name))
            .cloned())
    }
}

/// An integer attribute within SQS's bounds.
fn bounded(name: &str, value: &str, min: u32, max: u32) -> QueueResult<u32> {
    match value.trim().parse::<i64>() {
        Ok(v) if v >= min as i64 && v <= max as i64 => Ok(v as u32),
        _ => Err(QueueError::InvalidAttributeValue(format!(
            "Invalid value for the parameter {name}. Reason: must be an integer between {min} and {max}."
        ))),
    }
}

fn boolean(name: &str, value: &str) -> QueueResult<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(QueueError::InvalidAttributeValue(format!(
            "Invalid value for the parameter {name}."
        ))),
    }
}

fn one_of(name: &str, value: &str, allowed: &[&str]) -> QueueResult<String> {
    if allowed.contains(&value) {
        Ok(value.to_owned())
    } else {
        Err(QueueError::InvalidAttributeValue(format!(
            "Invalid value for the parameter {name}."
        )))
    }
}

/// The RedrivePolicy attribute's value: a message moves to the queue of
/// `dead_letter_target_arn` after `max_receive_count` receives.
pub fn redrive_policy_text(dead_letter_target_arn: &str, max_receive_count: u32) -> String {
    serde_json::json!({
        "deadLetterTargetArn": dead_letter_target_arn,
        "maxReceiveCount": max_receive_count,
    })
    .to_string()
}

/// Parses a RedrivePolicy; an empty value removes the policy.
fn redrive_policy(value: &str) -> QueueResult<Option<RedrivePolicy>> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let invalid = |why: &str| {
        QueueError::InvalidAttributeValue(format!(
            "Value {value} for parameter RedrivePolicy is invalid. Reason: {why}"
        ))
    };
    let json: serde_json::Value = serde_json::from_str(value)
        .map_err(|_| invalid("Redrive policy is not a valid JSON map."))?;
    let arn = json
        .get("deadLetterTargetArn")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            invalid("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
        })?;
    let count = match json.get("maxReceiveCount") {
        Some(serde_json::Value::Number(n)) => n.as_i64(),
        Some(serde_json::Value::String(s)) => s.parse::<i64>().ok(),
        _ => {
            return Err(invalid(
                "Redrive policy does not contain mandatory attribute: maxReceiveCount.",
            ));
        }
    };
    let count = match count {
        Some(c) if (1..=1000).contains(&c) => c as u32,
        _ => {
            return Err(invalid(
                "Invalid value for maxReceiveCount: must be an integer from 1 to 1000.",
            ));
        }
    };
    let queue = arn_queue_name(arn)
        .ok_or_else(|| invalid("Dead-letter target ARN is not a valid queue ARN."))?;
    Ok(Some(RedrivePolicy {
        dead_letter_queue: queue.to_owned(),
        dead_letter_target_arn: arn.to_owned(),
        max_receive_count: count,
    }))
}

fn redrive_allow_policy(value: &str) -> QueueResult<Option<String>> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let json: serde_json::Value = serde_json::from_str(value).map_err(|_| {
        QueueError::InvalidAttributeValue(format!(
            "Value {value} for parameter RedriveAllowPolicy is invalid."
        ))
    })?;
    match json.get("redrivePermission").and_then(|v| v.as_str()) {
        Some("allowAll" | "denyAll" | "byQueue") => Ok(Some(value.to_owned())),
        _ => Err(QueueError::InvalidAttributeValue(format!(
            "Value {value} for parameter RedriveAllowPolicy is invalid. Reason: redrivePermission must be allowAll, denyAll or byQueue."
        ))),
    }
}

/// The queue name at the end of an SQS ARN (`arn:aws:sqs:region:account:name`).
pub fn arn_queue_name(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "sqs", _, _, name] if !name.is_empty() => Some(name),
        _ => None,
    }
}

/// Checks a queue name: 1 to 80 characters, alphanumerics, `-` and `_`, and
/// for FIFO queues the `.fifo` suffix (counted in the 80).
pub fn validate_queue_name(name: &str, fifo: bool) -> QueueResult<()> {
    let stem = if fifo {
        name.strip_suffix(".fifo").ok_or_else(|| {
            QueueError::invalid("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
        })?
    } else {
        name
    };
    let ok_chars = stem
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if stem.is_empty() || name.len() > 80 || !ok_chars {
        return Err(QueueError::invalid(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn bounds_follow_sqs() {
        let mut c = QueueConfig::new(false);
        for (name, ok, bad) in [
            ("VisibilityTimeout", ["0", "43200"], ["-1", "43201"]),
            (
                "MessageRetentionPeriod",
                ["60", "1209600"],
                ["59", "1209601"],
            ),
            ("DelaySeconds", ["0", "900"], ["-1", "901"]),
            ("ReceiveMessageWaitTimeSeconds", ["0", "20"], ["-1", "21"]),
            (
                "MaximumMessageSize",
                ["1024", "1048576"],
                ["1023", "1048577"],
            ),
        ] {
            for v in ok {
                c.apply(&map(&[(name, v)]), false).unwrap();
            }
            for v in bad {
                assert!(matches!(
                    c.apply(&map(&[(name, v)]), false),
                    Err(QueueError::InvalidAttributeValue(_))
                ));
            }
        }
    }

    #[test]
    fn one_bad_value_applies_nothing() {
        let mut c = QueueConfig::new(false);
        assert!(
            c.apply(
                &map(&[("VisibilityTimeout", "10"), ("DelaySeconds", "901")]),
                false
            )
            .is_err()
        );
        assert_eq!(c.visibility_timeout, 30);
    }

    #[test]
    fn fifo_attributes_only_on_fifo() {
        let mut c = QueueConfig::new(false);
        assert!(matches!(
            c.apply(&map(&[("ContentBasedDeduplication", "true")]), false),
            Err(QueueError::InvalidAttributeName(_))
        ));
        let mut f = QueueConfig::new(true);
        f.apply(&map(&[("ContentBasedDeduplication", "true")]), false)
            .unwrap();
        assert!(f.content_based_deduplication);
        assert!(
            f.apply(&map(&[("FifoThroughputLimit", "perMessageGroupId")]), false)
                .is_err()
        );
    }

    #[test]
    fn conflicts_only_for_named_attributes_that_differ() {
        let mut c = QueueConfig::new(false);
        c.apply(&map(&[("VisibilityTimeout", "60")]), true).unwrap();
        assert_eq!(c.first_conflict(&map(&[])).unwrap(), None);
        assert_eq!(
            c.first_conflict(&map(&[("VisibilityTimeout", "60")]))
                .unwrap(),
            None
        );
        assert_eq!(
            c.first_conflict(&map(&[("DelaySeconds", "0")])).unwrap(),
            None
        );
        assert_eq!(
            c.first_conflict(&map(&[("VisibilityTimeout", "45")]))
                .unwrap()
                .as_deref(),
            Some("VisibilityTimeout")
        );
    }

    #[test]
    fn redrive_policy_parses_numbers_and_strings() {
        let mut c = QueueConfig::new(false);
        let arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
        c.apply(
            &map(&[(
                "RedrivePolicy",
                &format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"3"}}"#),
            )]),
            false,
        )
        .unwrap();
        assert_eq!(c.redrive_policy.as_ref().unwrap().max_receive_count, 3);
        assert_eq!(c.redrive_policy.as_ref().unwrap().dead_letter_queue, "dlq");
        assert!(
            c.apply(
                &map(&[(
                    "RedrivePolicy",
                    r#"{"deadLetterTargetArn":"x","maxReceiveCount":0}"#
                )]),
                false
            )
            .is_err()
        );
        c.apply(&map(&[("RedrivePolicy", "")]), false).unwrap();
        assert!(c.redrive_policy.is_none());
    }

    #[test]
    fn queue_names() {
        assert!(validate_queue_name("ok_name-9", false).is_ok());
        assert!(validate_queue_name(&"a".repeat(80), false).is_ok());
        assert!(validate_queue_name(&"a".repeat(81), false).is_err());
        assert!(validate_queue_name("f.fifo", false).is_err());
        assert!(validate_queue_name("f.fifo", true).is_ok());
        assert!(validate_queue_name("nosuffix", true).is_err());
        assert!(validate_queue_name(&format!("{}.fifo", "a".repeat(75)), true).is_ok());
        assert!(validate_queue_name(&format!("{}.fifo", "a".repeat(76)), true).is_err());
        assert!(validate_queue_name("", false).is_err());
        assert!(validate_queue_name("has space", false).is_err());
    }
}

//! The control plane through the API: creating (idempotent, conflicting),
//! listing, attributes, tags, purging and deleting queues.

mod common;

use common::*;
use postbox_queue::{NewMessage, QueueError};

#[tokio::test]
async fn create_is_idempotent_for_the_same_attributes() {
    let e = env().await;
    e.queues
        .create_queue("q", attrs(&[("VisibilityTimeout", "60")]))
        .await
        .unwrap();
    e.queues
        .create_queue("q", attrs(&[("VisibilityTimeout", "60")]))
        .await
        .unwrap();
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let r = e
        .queues
        .create_queue("q", attrs(&[("VisibilityTimeout", "45")]))
        .await;
    assert!(matches!(r, Err(QueueError::QueueNameExists(_))));
    assert!(matches!(
        e.queues.create_queue("x.fifo", attrs(&[])).await,
        Err(QueueError::InvalidParameterValue(_))
    ));
    assert!(matches!(
        e.queues
            .create_queue("n", attrs(&[("NoSuchAttribute", "1")]))
            .await,
        Err(QueueError::InvalidAttributeName(_))
    ));
    assert_eq!(e.queues.list_queues(""), ["q"]);
}

#[tokio::test]
async fn attributes_report_configuration_and_counts() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    e.queues
        .set_queue_attributes("q", attrs(&[("DelaySeconds", "3")]))
        .await
        .unwrap();
    e.queues.send("q", NewMessage::new("m")).await.unwrap();
    let all = e.queues.queue_attributes("q", &["All".into()]).unwrap();
    assert_eq!(all["DelaySeconds"], "3");
    assert_eq!(all["ApproximateNumberOfMessagesDelayed"], "1");
    assert_eq!(all["QueueArn"], "arn:aws:sqs:us-east-1:000000000000:q");
    assert!(!all.contains_key("FifoQueue"));
    assert!(e.queues.queue_attributes("q", &[]).unwrap().is_empty());
    assert!(!all.contains_key("ApproximateAgeOfOldestMessage"));
    e.clock.advance_ms(7_500);
    let age = e
        .queues
        .queue_attributes("q", &["ApproximateAgeOfOldestMessage".into()])
        .unwrap();
    assert_eq!(age["ApproximateAgeOfOldestMessage"], "7");
    assert!(matches!(
        e.queues
            .set_queue_attributes("q", attrs(&[("FifoQueue", "true")]))
            .await,
        Err(QueueError::InvalidAttributeValue(_))
    ));
}

/// Counting walks every message under the queue's lock, which sends wait
/// for: asking for a queue's configuration or ARN (as the relay does once a
/// second) must not walk a deep queue; asking for a count still counts.
#[tokio::test]
async fn only_a_count_walks_the_queues_messages() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    for i in 0..300 {
        e.queues
            .send("q", NewMessage::new(format!("m{i}")))
            .await
            .unwrap();
    }
    let before = e.queues.messages_counted();
    let names = [
        "MaximumMessageSize".to_owned(),
        "ContentBasedDeduplication".to_owned(),
        "QueueArn".to_owned(),
        "CreatedTimestamp".to_owned(),
    ];
    let facts = e.queues.queue_attributes("q", &names).unwrap();
    assert_eq!(facts["MaximumMessageSize"], "1048576");
    assert_eq!(facts["QueueArn"], "arn:aws:sqs:us-east-1:000000000000:q");
    assert_eq!(
        e.queues.messages_counted() - before,
        0,
        "configuration alone walked the queue"
    );
    let counts = e
        .queues
        .queue_attributes("q", &["ApproximateNumberOfMessages".into()])
        .unwrap();
    assert_eq!(counts["ApproximateNumberOfMessages"], "300");
    assert_eq!(e.queues.messages_counted() - before, 300);
    let all = e.queues.queue_attributes("q", &["All".into()]).unwrap();
    assert_eq!(all["ApproximateNumberOfMessages"], "300");
    assert_eq!(e.queues.stats("q").unwrap().visible, 300);
    assert_eq!(e.queues.messages_counted() - before, 900);
}

#[tokio::test]
async fn tags_are_kept() {
    let e = env().await;
    e.queues
        .create_queue_tagged("q", attrs(&[]), attrs(&[("team", "billing")]))
        .await
        .unwrap();
    e.queues
        .tag_queue("q", attrs(&[("env", "test")]))
        .await
        .unwrap();
    e.queues
        .untag_queue("q", vec!["team".into()])
        .await
        .unwrap();
    assert_eq!(e.queues.queue_tags("q").unwrap(), attrs(&[("env", "test")]));
}

#[tokio::test]
async fn purge_once_a_minute_and_delete() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    e.queues.send("q", NewMessage::new("m")).await.unwrap();
    e.queues.purge_queue("q").await.unwrap();
    assert_eq!(e.queues.stats("q").unwrap().visible, 0);
    assert!(matches!(
        e.queues.purge_queue("q").await,
        Err(QueueError::PurgeQueueInProgress(_))
    ));
    e.clock.advance_ms(60_000);
    e.queues.purge_queue("q").await.unwrap();
    e.queues.delete_queue("q").await.unwrap();
    assert!(matches!(
        e.queues.send("q", NewMessage::new("m")).await,
        Err(QueueError::QueueDoesNotExist)
    ));
    assert!(matches!(
        e.queues.delete_queue("q").await,
        Err(QueueError::QueueDoesNotExist)
    ));
}

//! The control plane through the API: creating (idempotent, conflicting),
//! listing, attributes, tags, purging and deleting queues.

mod common;

use common::*;
use postbox_queue::{NewMessage, QueueError, ReceiveOptions};

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

/// Counts are kept as messages change, not counted by a walk under the
/// queue's lock (which its sends wait for): counting a deep queue with
/// messages visible, in flight and delayed looks at none of them, however
/// it is asked (a count attribute, `All`, the metrics' stats).
#[tokio::test]
async fn counting_a_deep_queue_walks_none_of_its_messages() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    for i in 0..300 {
        e.queues
            .send("q", NewMessage::new(format!("m{i}")))
            .await
            .unwrap();
    }
    for i in 0..5 {
        let mut delayed = NewMessage::new(format!("d{i}"));
        delayed.delay_seconds = Some(60);
        e.queues.send("q", delayed).await.unwrap();
    }
    let options = ReceiveOptions {
        max_messages: Some(10),
        ..ReceiveOptions::default()
    };
    assert_eq!(e.queues.receive("q", options).await.unwrap().len(), 10);
    let before = e.queues.messages_counted();
    let names = [
        "MaximumMessageSize".to_owned(),
        "QueueArn".to_owned(),
        "ApproximateNumberOfMessages".to_owned(),
        "ApproximateNumberOfMessagesNotVisible".to_owned(),
        "ApproximateNumberOfMessagesDelayed".to_owned(),
    ];
    let facts = e.queues.queue_attributes("q", &names).unwrap();
    assert_eq!(facts["MaximumMessageSize"], "1048576");
    assert_eq!(facts["QueueArn"], "arn:aws:sqs:us-east-1:000000000000:q");
    assert_eq!(facts["ApproximateNumberOfMessages"], "290");
    assert_eq!(facts["ApproximateNumberOfMessagesNotVisible"], "10");
    assert_eq!(facts["ApproximateNumberOfMessagesDelayed"], "5");
    let all = e.queues.queue_attributes("q", &["All".into()]).unwrap();
    assert_eq!(all["ApproximateNumberOfMessages"], "290");
    let stats = e.queues.stats("q").unwrap();
    assert_eq!(
        (stats.visible, stats.in_flight, stats.delayed),
        (290, 10, 5)
    );
    assert_eq!(
        e.queues.messages_counted() - before,
        0,
        "counting walked the queue's messages"
    );
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

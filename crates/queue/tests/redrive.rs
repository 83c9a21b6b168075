//! Dead-letter queues: redrive at maxReceiveCount, and moving messages back
//! (all, by a move task, or selected ones).

mod common;

use common::*;
use postbox_queue::{MoveTaskStatus, NewMessage, QueueError, Queues};

async fn with_dlq(queues: &Queues, fifo: bool) -> (&'static str, &'static str) {
    let (src, dlq) = if fifo {
        ("src.fifo", "dlq.fifo")
    } else {
        ("src", "dlq")
    };
    let kind = if fifo {
        vec![("FifoQueue", "true")]
    } else {
        vec![]
    };
    queues.create_queue(dlq, attrs(&kind)).await.unwrap();
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        queues.arn(dlq)
    );
    let mut a = kind.clone();
    a.push(("RedrivePolicy", &policy));
    queues.create_queue(src, attrs(&a)).await.unwrap();
    (src, dlq)
}

#[tokio::test]
async fn redrive_after_max_receive_count_then_move_back() {
    let e = env().await;
    let (src, dlq) = with_dlq(&e.queues, false).await;
    e.queues.send(src, NewMessage::new("poison")).await.unwrap();
    for _ in 0..2 {
        assert_eq!(
            bodies(&e.queues.receive(src, recv(1, Some(0))).await.unwrap()),
            ["poison"]
        );
    }
    assert!(
        e.queues
            .receive(src, recv(1, Some(0)))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(e.queues.stats(src).unwrap().dead_lettered, 1);
    let dead = e.queues.receive(dlq, recv(1, Some(0))).await.unwrap();
    assert_eq!(dead[0].system["ApproximateReceiveCount"], "3");
    assert!(dead[0].system["DeadLetterQueueSourceArn"].ends_with(":src"));
    assert_eq!(e.queues.dead_letter_sources(dlq).unwrap(), ["src"]);

    let task = e
        .queues
        .start_move_task(&e.queues.arn(dlq), None, None)
        .await
        .unwrap();
    for _ in 0..500 {
        if e.queues.list_move_tasks(&e.queues.arn(dlq), 1).unwrap()[0]
            .status()
            .0
            != MoveTaskStatus::Running
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let tasks = e.queues.list_move_tasks(&e.queues.arn(dlq), 10).unwrap();
    assert_eq!(tasks[0].handle, task);
    assert_eq!(tasks[0].status().0, MoveTaskStatus::Completed);
    assert_eq!(tasks[0].moved(), 1);
    let back = e.queues.receive(src, recv(1, None)).await.unwrap();
    assert_eq!(bodies(&back), ["poison"]);
    assert_eq!(back[0].system["ApproximateReceiveCount"], "1");
}

#[tokio::test]
async fn fifo_redrive_keeps_group_order_in_the_dlq() {
    let e = env().await;
    let (src, dlq) = with_dlq(&e.queues, true).await;
    for b in ["a1", "a2"] {
        e.queues.send(src, grouped(b, "a")).await.unwrap();
    }
    for _ in 0..2 {
        let got = e.queues.receive(src, recv(10, Some(0))).await.unwrap();
        assert_eq!(bodies(&got), ["a1", "a2"]);
    }
    assert!(
        e.queues
            .receive(src, recv(10, Some(0)))
            .await
            .unwrap()
            .is_empty()
    );
    let dead = e.queues.receive(dlq, recv(10, None)).await.unwrap();
    assert_eq!(bodies(&dead), ["a1", "a2"]);
    assert_eq!(dead[0].system["MessageDeduplicationId"], dead[0].message_id);
    assert_eq!(dead[0].system["MessageGroupId"], "a");
}

#[tokio::test]
async fn selected_messages_move_back() {
    let e = env().await;
    let (src, dlq) = with_dlq(&e.queues, false).await;
    for b in ["x", "y"] {
        e.queues.send(src, NewMessage::new(b)).await.unwrap();
    }
    for _ in 0..3 {
        e.queues.receive(src, recv(10, Some(0))).await.unwrap();
    }
    let dead = e.queues.receive(dlq, recv(10, Some(0))).await.unwrap();
    assert_eq!(dead.len(), 2);
    let x = dead
        .iter()
        .find(|m| m.body == "x")
        .unwrap()
        .message_id
        .clone();
    assert_eq!(
        e.queues
            .move_messages(dlq, None, Some(vec![x.clone()]))
            .await
            .unwrap(),
        1
    );
    let back = e.queues.receive(src, recv(10, None)).await.unwrap();
    assert_eq!(bodies(&back), ["x"]);
    assert_eq!(back[0].message_id, x);
    assert_eq!(e.queues.stats(dlq).unwrap().visible, 1);
}

#[tokio::test]
async fn redrive_policy_rules() {
    let e = env().await;
    e.queues
        .create_queue("f.fifo", attrs(&[("FifoQueue", "true")]))
        .await
        .unwrap();
    let to_fifo = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        e.queues.arn("f.fifo")
    );
    let r = e
        .queues
        .create_queue("std", attrs(&[("RedrivePolicy", &to_fifo)]))
        .await;
    assert!(matches!(r, Err(QueueError::InvalidAttributeValue(_))));
    let missing = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        e.queues.arn("nosuch")
    );
    let r = e
        .queues
        .create_queue("std", attrs(&[("RedrivePolicy", &missing)]))
        .await;
    assert!(matches!(r, Err(QueueError::InvalidAttributeValue(_))));
    let r = e
        .queues
        .start_move_task(&e.queues.arn("f.fifo"), None, None)
        .await;
    assert!(matches!(r, Err(QueueError::InvalidParameterValue(_))));

    let only_a = format!(
        r#"{{"redrivePermission":"byQueue","sourceQueueArns":["{}"]}}"#,
        e.queues.arn("a")
    );
    e.queues
        .create_queue("picky-dlq", attrs(&[("RedriveAllowPolicy", &only_a)]))
        .await
        .unwrap();
    let to_picky = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        e.queues.arn("picky-dlq")
    );
    e.queues
        .create_queue("a", attrs(&[("RedrivePolicy", &to_picky)]))
        .await
        .unwrap();
    let r = e
        .queues
        .create_queue("b", attrs(&[("RedrivePolicy", &to_picky)]))
        .await;
    assert!(matches!(r, Err(QueueError::InvalidAttributeValue(_))));
}

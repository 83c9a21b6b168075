//! Bodies kept by reference ([`NewMessage::body_of`]): the queue stores the
//! item's key and the body's length and CRC, a receive writes the body from
//! the item again, and an item that changed or went is an error naming the
//! message, never another body.

mod common;

use common::*;
use postbox_item::item_from_json;
use postbox_item::json::item_to_string;
use postbox_queue::{ItemRef, NewMessage, QueueError, Queues};
use postbox_store::ItemStore;
use serde_json::{Value, json};

async fn events_table(e: &Env) {
    let input = serde_json::from_value(json!({
        "TableName": "events",
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"}
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"}
        ],
        "BillingMode": "PAY_PER_REQUEST"
    }))
    .unwrap();
    e.store.create_table(input).await.unwrap();
}

/// Puts event `sk` with `data` and answers its DynamoDB JSON.
async fn put_event(e: &Env, sk: &str, data: &str) -> String {
    let item = json!({"pk": {"S": "TENANT#acme#EVENT"}, "sk": {"S": sk}, "data": {"S": data}});
    let input = serde_json::from_value(json!({"TableName": "events", "Item": item})).unwrap();
    e.store.put_item(input).await.unwrap();
    item_to_string(&item_from_json(&item).unwrap())
}

fn by_reference(body: &str, sk: &str) -> NewMessage {
    let key: Value = json!({"pk": {"S": "TENANT#acme#EVENT"}, "sk": {"S": sk}});
    NewMessage {
        body_of: Some(ItemRef {
            table: "events".into(),
            key: item_from_json(&key).unwrap(),
        }),
        ..NewMessage::new(body).group("acme").dedup(sk)
    }
}

async fn receive_one(queues: &Queues, queue: &str) -> Result<Vec<String>, QueueError> {
    queues
        .receive(queue, recv(10, Some(0)))
        .await
        .map(|m| bodies(&m))
}

#[tokio::test]
async fn a_body_by_reference_is_received_as_its_item_s_json() {
    let e = env().await;
    events_table(&e).await;
    fifo(&e.queues, "events.fifo").await;
    let one = put_event(&e, "1", &"x".repeat(1024)).await;
    let two = put_event(&e, "2", "second").await;
    e.queues
        .send_batch(
            "events.fifo",
            vec![by_reference(&one, "1"), by_reference(&two, "2")],
        )
        .await
        .unwrap();
    assert_eq!(
        receive_one(&e.queues, "events.fifo").await.unwrap(),
        [one, two]
    );
}

#[tokio::test]
async fn a_body_whose_item_changed_or_went_is_an_error_not_another_body() {
    let e = env().await;
    events_table(&e).await;
    fifo(&e.queues, "changed.fifo").await;
    fifo(&e.queues, "gone.fifo").await;
    let body = put_event(&e, "1", "aaaa").await;
    e.queues
        .send("changed.fifo", by_reference(&body, "1"))
        .await
        .unwrap();
    // Same length, other bytes: only the kept CRC tells them apart.
    put_event(&e, "1", "bbbb").await;
    let err = receive_one(&e.queues, "changed.fifo").await.unwrap_err();
    assert!(
        matches!(&err, QueueError::Storage(why) if why.contains("has changed since the message was sent") && why.contains("queue changed.fifo")),
        "{err:?}"
    );

    let body = put_event(&e, "2", "cccc").await;
    e.queues
        .send("gone.fifo", by_reference(&body, "2"))
        .await
        .unwrap();
    let input = serde_json::from_value(json!({
        "TableName": "events",
        "Key": {"pk": {"S": "TENANT#acme#EVENT"}, "sk": {"S": "2"}}
    }))
    .unwrap();
    e.store.delete_item(input).await.unwrap();
    let err = receive_one(&e.queues, "gone.fifo").await.unwrap_err();
    assert!(
        matches!(&err, QueueError::Storage(why) if why.contains("no longer exists")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_body_by_reference_survives_dead_lettering_and_moving_back() {
    let e = env().await;
    events_table(&e).await;
    let body = put_event(&e, "1", "poison").await;
    e.queues
        .create_queue("dlq.fifo", attrs(&[("FifoQueue", "true")]))
        .await
        .unwrap();
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        e.queues.arn("dlq.fifo")
    );
    let a = [("FifoQueue", "true"), ("RedrivePolicy", policy.as_str())];
    e.queues.create_queue("src.fifo", attrs(&a)).await.unwrap();
    e.queues
        .send("src.fifo", by_reference(&body, "1"))
        .await
        .unwrap();
    assert_eq!(
        receive_one(&e.queues, "src.fifo").await.unwrap(),
        std::slice::from_ref(&body)
    );
    // The second receive moves it to the dead-letter queue.
    assert!(receive_one(&e.queues, "src.fifo").await.unwrap().is_empty());
    assert_eq!(
        receive_one(&e.queues, "dlq.fifo").await.unwrap(),
        std::slice::from_ref(&body)
    );
    e.queues
        .start_move_task(&e.queues.arn("dlq.fifo"), None, None)
        .await
        .unwrap();
    for _ in 0..100 {
        if e.queues.stats("src.fifo").unwrap().visible == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(receive_one(&e.queues, "src.fifo").await.unwrap(), [body]);
}

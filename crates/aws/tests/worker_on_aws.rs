//! The durable worker on AWS: events emitted on DynamoDB, delivered through
//! an SQS FIFO queue as the default events pipe delivers them (the event
//! row's image, group = tenant, dedup id = event id), claimed in an inbox on
//! DynamoDB, and completed with the handler's writes, once each.
//!
//! Needs DynamoDB Local and an SQS server: `scripts/test` runs it with
//! `POSTBOX_TEST_DYNAMODB_ENDPOINT` and `POSTBOX_TEST_SQS_ENDPOINT` set.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::config;
use postbox_aws::{DynamoStore, SqsQueues};
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, Envelope, Write, layout};
use postbox_item::{AttributeValue, Item, item_to_json};
use postbox_queue::{NewMessage, QueueClient};
use postbox_store::ItemStore;
use postbox_store::api::{CreateTableInput, GetItemInput};
use postbox_worker::{Worker, WorkerOptions, handler};

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]

[[subscriptions]]
name = "mirror"
glob = "ORDER_*"
lane = "DURABLE"
handler = "orders::mirror"

[[subscriptions]]
name = "audit"
glob = "ORDER_*"
lane = "DURABLE"
handler = "orders::audit"
"#;

const QUEUE: &str = "events.fifo";

/// What the default events pipe does with one event row, with `dedup` as
/// the message's deduplication id (the pipe uses the event id).
async fn pipe(store: &DynamoStore, queues: &SqsQueues, e: &Envelope, dedup: &str) {
    let row = store
        .get_item(GetItemInput {
            table_name: postbox_topology::EVENTS_TABLE.into(),
            key: layout::key(layout::event_pk(&e.tenant), &layout::seq_sk(e.seq)),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await
        .unwrap()
        .item
        .expect("the event row");
    let body = item_to_json(&row).to_string();
    queues
        .send(QUEUE, NewMessage::new(body).group(&e.tenant).dedup(dedup))
        .await
        .unwrap();
}

fn effect(subscription: &str, e: &Envelope) -> Write {
    let key = format!("{}#{subscription}#{}", e.tenant, e.seq);
    Write::put(
        "effects",
        Item::from([("pk".to_owned(), AttributeValue::S(key))]),
    )
    .condition("attribute_not_exists(pk)")
}

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn every_event_reaches_every_subscription_once_on_dynamodb_and_sqs() {
    let prefix = format!("t{}-worker-", fastrand::u32(..));
    let store = Arc::new(DynamoStore::new(
        &config("POSTBOX_TEST_DYNAMODB_ENDPOINT").await,
        &prefix,
    ));
    let queues = SqsQueues::new(&config("POSTBOX_TEST_SQS_ENDPOINT").await, &prefix);
    queues
        .client()
        .create_queue()
        .queue_name(queues.name(QUEUE))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap();
    store
        .create_table(CreateTableInput::keyed_by("effects", "pk"))
        .await
        .unwrap();
    let catalog = Catalog::from_toml(CATALOG, "test").unwrap();
    let engine = Engine::builder(store.clone(), catalog.clone())
        .build()
        .await
        .unwrap();

    let mut events = Vec::new();
    for tenant in ["acme", "globex"] {
        let ctx = Context::new(tenant, "tester").unwrap();
        for i in 0..5 {
            let e = engine
                .emit(&ctx, "ORDER_PLACED", serde_json::json!({ "i": i }), vec![])
                .await
                .unwrap()
                .envelope;
            events.push(e);
        }
    }
    for e in &events {
        pipe(&store, &queues, e, &e.id).await;
    }
    // The same event again under another deduplication id, so SQS delivers
    // it twice (as after its five-minute deduplication window): the inbox
    // on DynamoDB must keep the effect from happening a second time.
    let again = format!("{}-again", events[0].id);
    pipe(&store, &queues, &events[0], &again).await;

    let runs = Arc::new(AtomicUsize::new(0));
    let mut handlers = HashMap::new();
    for (name, sub) in [("orders::mirror", "mirror"), ("orders::audit", "audit")] {
        let runs = runs.clone();
        handlers.insert(
            name.to_owned(),
            handler(move |d: postbox_worker::Delivery| {
                runs.fetch_add(1, Ordering::SeqCst);
                let write = effect(sub, &d.envelope);
                async move { Ok(vec![write]) }
            }),
        );
    }
    let worker = Worker::new(
        store.clone(),
        queues.clone(),
        &catalog,
        handlers,
        WorkerOptions {
            owner: "w1".into(),
            queue: QUEUE.into(),
            wait_seconds: 0,
            order_wait_seconds: 0,
            ..WorkerOptions::default()
        },
    )
    .await
    .unwrap();
    // Until the queue is empty: every message settled and deleted.
    let left = || common::depth(&queues, QUEUE);
    for _ in 0..50 {
        worker.run_once().await.unwrap();
        if left().await == 0 {
            break;
        }
    }
    assert_eq!(left().await, 0, "messages left in the queue");
    assert_eq!(worker.stats().completed, 20, "{:?}", worker.stats());
    assert_eq!(runs.load(Ordering::SeqCst), 20, "a handler ran twice");
    for e in &events {
        for sub in ["mirror", "audit"] {
            let key = format!("{}#{sub}#{}", e.tenant, e.seq);
            let got = store
                .get_item(GetItemInput {
                    table_name: "effects".into(),
                    key: Item::from([("pk".to_owned(), AttributeValue::S(key.clone()))]),
                    consistent_read: Some(true),
                    ..Default::default()
                })
                .await
                .unwrap();
            assert!(got.item.is_some(), "no effect {key}");
        }
    }
}

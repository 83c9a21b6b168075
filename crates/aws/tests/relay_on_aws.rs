//! The relay on AWS: events emitted on DynamoDB, read from DynamoDB
//! Streams by the default events pipe and delivered to the SQS FIFO queue,
//! once each, in order per tenant, with one relay holding the pipe; and the
//! whole path on AWS, emit to relay to worker to the handler's write.
//!
//! Needs DynamoDB Local and an SQS server: `scripts/test` runs it with
//! `POSTBOX_TEST_DYNAMODB_ENDPOINT` and `POSTBOX_TEST_SQS_ENDPOINT` set.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Stack;

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn emitted_events_reach_the_fifo_queue_once_each_in_order_per_tenant() {
    let stack = Stack::new("relay").await;
    let emitted = stack.emit(&["acme", "globex"], 6).await;
    // Two relays on one pipe: the lease lets one deliver.
    let (a, b) = (stack.relay("relay-a").await, stack.relay("relay-b").await);
    assert_eq!(stack.wait_for(12).await, 12);
    // Records emitted while the relay runs come too.
    let more = stack.emit(&["acme"], 3).await;
    assert_eq!(stack.wait_for(15).await, 15);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let holders = [&a, &b].iter().filter(|r| r.stats()[0].holds_lease).count();
    assert_eq!(holders, 1, "{:?} {:?}", a.stats(), b.stats());
    let delivered: u64 = [&a, &b].iter().map(|r| r.stats()[0].delivered).sum();
    assert_eq!(delivered, 15, "{:?} {:?}", a.stats(), b.stats());
    let gaps: u64 = [&a, &b].iter().map(|r| r.stats()[0].gaps).sum();
    assert_eq!(gaps, 0, "{:?} {:?}", a.stats(), b.stats());
    a.shutdown().await;
    b.shutdown().await;

    let got = stack.drain().await;
    assert_eq!(got.len(), 15, "{got:?}");
    let mut per_tenant: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (tenant, _, seq) in &got {
        per_tenant.entry(tenant.clone()).or_default().push(*seq);
    }
    assert_eq!(per_tenant["acme"], (1..=9).collect::<Vec<_>>());
    assert_eq!(per_tenant["globex"], (1..=6).collect::<Vec<_>>());
    let ids: std::collections::BTreeSet<&str> = got.iter().map(|(_, id, _)| id.as_str()).collect();
    for e in emitted.iter().chain(&more) {
        assert!(
            ids.contains(e.id.as_str()),
            "event {} was not delivered",
            e.id
        );
    }
}

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn a_restarted_relay_goes_on_from_its_checkpoint() {
    let stack = Stack::new("restart").await;
    stack.emit(&["acme"], 4).await;
    let relay = stack.relay("relay-1").await;
    assert_eq!(stack.wait_for(4).await, 4);
    relay.shutdown().await;
    stack.emit(&["acme"], 3).await;
    // Another process, with the first one's checkpoint and no lease to wait for.
    // Stopped after its page, its counts are final: a relay that began
    // before the checkpoint would have counted the first four again.
    let relay = stack.relay("relay-2").await;
    let stats = relay.stats_source();
    assert_eq!(stack.wait_for(7).await, 7);
    relay.shutdown().await;
    assert_eq!(stats()[0].delivered, 3, "{:?}", stats());
    let seqs: Vec<u64> = stack.drain().await.into_iter().map(|(_, _, s)| s).collect();
    assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn a_replaced_stream_is_reported_as_a_gap_and_the_new_one_is_read() {
    let stack = Stack::new("gap").await;
    stack.emit(&["acme"], 2).await;
    let relay = stack.relay("relay-1").await;
    assert_eq!(stack.wait_for(2).await, 2);
    relay.shutdown().await;
    // The stream disabled and enabled again: a new stream, a new ARN.
    let table = stack.store.name(postbox_topology::EVENTS_TABLE);
    for enabled in [false, true] {
        let mut spec =
            aws_sdk_dynamodb::types::StreamSpecification::builder().stream_enabled(enabled);
        if enabled {
            spec = spec.stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages);
        }
        stack
            .store
            .client()
            .update_table()
            .table_name(&table)
            .stream_specification(spec.build().unwrap())
            .send()
            .await
            .unwrap();
    }
    stack.emit(&["acme"], 2).await;
    let relay = stack.relay("relay-2").await;
    assert_eq!(stack.wait_for(4).await, 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = relay.stats()[0].clone();
    relay.shutdown().await;
    assert_eq!(stats.gaps, 1, "{stats:?}");
    assert_eq!(stats.delivered, 2, "{stats:?}");
    let seqs: Vec<u64> = stack.drain().await.into_iter().map(|(_, _, s)| s).collect();
    assert_eq!(seqs, (1..=4).collect::<Vec<_>>());
}

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn the_whole_path_on_aws_runs_each_handler_once_per_event() {
    use postbox_item::{AttributeValue, Item};
    use postbox_store::ItemStore;
    use postbox_store::api::{CreateTableInput, GetItemInput};
    use postbox_worker::{Worker, WorkerOptions, handler};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let stack = Stack::new("path").await;
    stack
        .store
        .create_table(CreateTableInput::keyed_by("effects", "pk"))
        .await
        .unwrap();
    let emitted = stack.emit(&["acme", "globex"], 4).await;
    let relay = stack.relay("relay-1").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handlers = std::collections::HashMap::from([(
        "orders::mirror".to_owned(),
        handler(move |d: postbox_worker::Delivery| {
            counted.fetch_add(1, Ordering::SeqCst);
            let key = format!("{}#{}", d.envelope.tenant, d.envelope.seq);
            let write = postbox_engine::Write::put(
                "effects",
                Item::from([("pk".to_owned(), AttributeValue::S(key))]),
            )
            .condition("attribute_not_exists(pk)");
            async move { Ok(vec![write]) }
        }),
    )]);
    let worker = Worker::new(
        Arc::new(stack.store.clone()),
        stack.queues.clone(),
        &stack.catalog,
        handlers,
        WorkerOptions {
            owner: "w1".into(),
            queue: postbox_topology::EVENTS_QUEUE.into(),
            wait_seconds: 1,
            order_wait_seconds: 0,
            ..WorkerOptions::default()
        },
    )
    .await
    .unwrap();
    for _ in 0..100 {
        worker.run_once().await.unwrap();
        if worker.stats().completed >= 8 {
            break;
        }
    }
    relay.shutdown().await;
    assert_eq!(worker.stats().completed, 8, "{:?}", worker.stats());
    assert_eq!(runs.load(Ordering::SeqCst), 8, "a handler ran twice");
    for e in &emitted {
        let got = stack
            .store
            .get_item(GetItemInput {
                table_name: "effects".into(),
                key: Item::from([(
                    "pk".to_owned(),
                    AttributeValue::S(format!("{}#{}", e.tenant, e.seq)),
                )]),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(got.item.is_some(), "no effect for {}#{}", e.tenant, e.seq);
    }
}

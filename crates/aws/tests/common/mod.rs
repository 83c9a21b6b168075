//! What the relay tests on AWS share: a stack under a fresh prefix on
//! DynamoDB Local and an SQS server, the engine on it, and a reader of the
//! events queue.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use postbox_aws::{DynamoStore, SqsQueues, Streams, StreamsRelay, StreamsRelayOptions};
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, Envelope};
use postbox_queue::{QueueClient, ReceiveOptions};
use postbox_relay::RelayConfig;
use postbox_store::ItemStore;

pub const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]

[[subscriptions]]
name = "mirror"
glob = "ORDER_*"
lane = "DURABLE"
handler = "orders::mirror"
"#;

/// The relay config of a node: the default events pipe.
pub const PIPES: &str = "[relay]\nevents_pipe = true\nlease_seconds = 3\n";

pub async fn config(var: &str) -> aws_config::SdkConfig {
    let endpoint = std::env::var(var)
        .unwrap_or_else(|_| panic!("{var}: the URL of the local service (scripts/test starts it)"));
    postbox_aws::local_config(&endpoint).await
}

/// Messages in `queue` of `queues`, visible or not.
pub async fn depth(queues: &SqsQueues, queue: &str) -> u64 {
    let attrs = queues
        .queue_attributes(queue, &["All".to_owned()])
        .await
        .unwrap();
    let n = |k: &str| {
        attrs
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    n("ApproximateNumberOfMessages") + n("ApproximateNumberOfMessagesNotVisible")
}

/// A stack under its own prefix: the engine's tables, the relay's state
/// table, the events FIFO queue and the relay's dead-letter queue.
pub struct Stack {
    pub store: DynamoStore,
    pub streams: Streams,
    pub queues: SqsQueues,
    pub engine: Engine<DynamoStore>,
    pub catalog: Catalog,
}

impl Stack {
    pub async fn new(name: &str) -> Stack {
        let prefix = format!("t{}-{name}-", fastrand::u32(..));
        let dynamo = config("POSTBOX_TEST_DYNAMODB_ENDPOINT").await;
        let store = DynamoStore::new(&dynamo, &prefix);
        let streams = Streams::new(&dynamo);
        let queues = SqsQueues::new(&config("POSTBOX_TEST_SQS_ENDPOINT").await, &prefix);
        for (queue, fifo) in [
            (postbox_topology::EVENTS_QUEUE, true),
            (postbox_topology::EVENTS_RELAY_DLQ, false),
        ] {
            let mut create = queues
                .client()
                .create_queue()
                .queue_name(queues.name(queue));
            if fifo {
                create = create.attributes(QueueAttributeName::FifoQueue, "true");
            }
            create.send().await.unwrap();
        }
        store
            .create_table(postbox_aws::pipe_state::table_input(
                postbox_aws::pipe_state::TABLE,
            ))
            .await
            .unwrap();
        let catalog = Catalog::from_toml(CATALOG, "test").unwrap();
        let engine = Engine::builder(Arc::new(store.clone()), catalog.clone())
            .build()
            .await
            .unwrap();
        Stack {
            store,
            streams,
            queues,
            engine,
            catalog,
        }
    }

    /// A relay running the default events pipe as `owner`.
    pub async fn relay(&self, owner: &str) -> StreamsRelay {
        StreamsRelay::start(
            self.store.clone(),
            self.streams.clone(),
            self.queues.clone(),
            RelayConfig::from_toml(PIPES).unwrap(),
            StreamsRelayOptions {
                owner: owner.into(),
                poll: Duration::from_millis(50),
                ..StreamsRelayOptions::default()
            },
        )
        .await
        .unwrap()
    }

    /// `n` events for each of `tenants`, in order.
    pub async fn emit(&self, tenants: &[&str], n: usize) -> Vec<Envelope> {
        let mut out = Vec::new();
        for tenant in tenants {
            let ctx = Context::new(*tenant, "tester").unwrap();
            for i in 0..n {
                out.push(
                    self.engine
                        .emit(&ctx, "ORDER_PLACED", serde_json::json!({ "i": i }), vec![])
                        .await
                        .unwrap()
                        .envelope,
                );
            }
        }
        out
    }

    /// Messages in `queue` (visible or not).
    pub async fn depth(&self, queue: &str) -> u64 {
        depth(&self.queues, queue).await
    }

    /// Waits until the events queue holds `n` messages (or 30 s pass).
    pub async fn wait_for(&self, n: u64) -> u64 {
        let queue = postbox_topology::EVENTS_QUEUE;
        for _ in 0..300 {
            if self.depth(queue).await >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.depth(queue).await
    }

    /// Every message of the events queue as `(group, event id, seq)`, in
    /// the order received, each deleted once read.
    pub async fn drain(&self) -> Vec<(String, String, u64)> {
        let queue = postbox_topology::EVENTS_QUEUE;
        let mut out = Vec::new();
        let mut empty = 0;
        while empty < 3 {
            let got = self
                .queues
                .receive(
                    queue,
                    ReceiveOptions {
                        max_messages: Some(10),
                        wait_time_seconds: Some(0),
                        visibility_timeout: Some(30),
                        ..ReceiveOptions::default()
                    },
                )
                .await
                .unwrap();
            if got.is_empty() {
                empty += 1;
                continue;
            }
            for m in got {
                let row: serde_json::Value = serde_json::from_str(&m.body).unwrap();
                let event = postbox_item::item_from_json(&row).unwrap();
                let text = |k: &str| match event.get(k) {
                    Some(postbox_item::AttributeValue::S(s)) => s.clone(),
                    Some(postbox_item::AttributeValue::N(n)) => n.to_string(),
                    other => panic!("event row without {k}: {other:?}"),
                };
                out.push((text("tenant"), text("id"), text("seq").parse().unwrap()));
                self.queues.delete(queue, &m.receipt_handle).await.unwrap();
            }
        }
        out
    }
}

//! Throughput and latency of the embedded store, durable (fsync) and with a
//! no-fsync baseline measured in the same run:
//!
//! - PutItem, one writer awaiting each write;
//! - TransactWriteItems of 3 actions (conditional put of an entity, put of
//!   its event row, update of a per-writer head: the shape of an emit), one
//!   writer and 64 concurrent writers (what group commit is for), the latter
//!   with each writer's keys in its own partitions and with time-ordered keys;
//! - Query of one partition of 1,000 items (median of repeated runs).
//!
//! Run with `cargo bench -p postbox-store`; it takes about half a minute.

// The allocator the `postbox` binary ships with.
#[global_allocator]
static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::*;
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore};
use serde_json::{Value, json};

const PHASE: Duration = Duration::from_secs(2);
const CONCURRENT: usize = 64;

use postbox_store::testing::from_json as req;

/// Latencies of one phase, and how long it ran.
struct Sample {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Sample {
    fn row(&self, name: &str, durability: &str) {
        self.row_with(name, durability, "");
    }

    fn row_with(&self, name: &str, durability: &str, note: &str) {
        let mut l = self.latencies.clone();
        l.sort();
        let pct =
            |p: f64| l[((l.len() as f64 * p) as usize).min(l.len() - 1)].as_secs_f64() * 1000.0;
        println!(
            "{name:<52} {durability:<9} {:>10.0} {:>9.3} {:>9.3}  {note}",
            l.len() as f64 / self.elapsed.as_secs_f64(),
            pct(0.50),
            pct(0.99)
        );
    }
}

async fn open(dir: &tempfile::TempDir, durability: Durability) -> EmbeddedStore {
    let options = EmbeddedOptions {
        durability,
        ..EmbeddedOptions::default()
    };
    let store =
        EmbeddedStore::open(dir.path().join(format!("{durability:?}.redb")), options).unwrap();
    store
        .create_table(req(json!({
            "TableName": "bench",
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        })))
        .await
        .unwrap();
    store
}

fn payload() -> Value {
    json!({"S": "x".repeat(100)})
}

async fn single_puts(store: &EmbeddedStore) -> Sample {
    let (start, mut latencies) = (Instant::now(), Vec::new());
    let mut i = 0u64;
    while start.elapsed() < PHASE {
        let t = Instant::now();
        store
            .put_item(req(json!({"TableName": "bench", "Item": {"pk": {"S": format!("put#{i}")}, "sk": {"S": "0"}, "data": payload()}})))
            .await
            .unwrap();
        latencies.push(t.elapsed());
        i += 1;
    }
    Sample {
        latencies,
        elapsed: start.elapsed(),
    }
}

/// Where a transaction's new items go in the key space.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Each writer has its own order and event partitions: a commit of 64
    /// transactions touches about 3 x 64 different B-tree leaves (the worst
    /// case for page writes per commit).
    PerWriter,
    /// New orders and events get time-ordered ids (as ULIDs or a log's
    /// sequence numbers are), so one commit's new rows share a few leaves.
    TimeOrdered,
}

/// Built from the API types directly: the benchmark measures the store, not
/// JSON decoding (the wire server's cost). `i` is the writer's counter, `g`
/// a counter over all writers.
fn transaction(phase: &str, keys: Keys, writer: usize, i: u64, g: u64) -> TransactWriteItemsInput {
    let s = |v: String| AttributeValue::S(v);
    let data = AttributeValue::S("x".repeat(100));
    let (order_pk, event_pk, event_sk) = match keys {
        Keys::PerWriter => (
            format!("order#{phase}#{writer}#{i}"),
            format!("events#{phase}#{writer}"),
            format!("{i:020}"),
        ),
        Keys::TimeOrdered => (
            format!("order#{phase}#{g:020}"),
            format!("events#{phase}"),
            format!("{g:020}"),
        ),
    };
    let order: Item = [
        ("pk", s(order_pk)),
        ("sk", s("0".into())),
        ("data", data.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let event: Item = [("pk", s(event_pk)), ("sk", s(event_sk)), ("data", data)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let head: Item = [
        ("pk", s(format!("head#{phase}#{writer}"))),
        ("sk", s("HEAD".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    TransactWriteItemsInput {
        transact_items: vec![
            TransactWriteItem {
                put: Some(TransactPut {
                    table_name: "bench".into(),
                    item: order,
                    condition_expression: Some("attribute_not_exists(pk)".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            TransactWriteItem {
                put: Some(TransactPut {
                    table_name: "bench".into(),
                    item: event,
                    ..Default::default()
                }),
                ..Default::default()
            },
            TransactWriteItem {
                update: Some(TransactUpdate {
                    table_name: "bench".into(),
                    key: head,
                    update_expression: "SET last_seq = :i".into(),
                    expression_attribute_values: Some(
                        [(":i".to_owned(), AttributeValue::N((i as i64).into()))].into(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ],
        client_request_token: None,
    }
}

async fn transactions(store: &EmbeddedStore, writers: usize, keys: Keys) -> Sample {
    let start = Instant::now();
    let phase = format!(
        "{writers}{}",
        if keys == Keys::PerWriter { "w" } else { "t" }
    );
    let global = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, phase, global) = (store.clone(), phase.clone(), global.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while start.elapsed() < PHASE {
                    let input =
                        transaction(&phase, keys, w, i, global.fetch_add(1, Ordering::Relaxed));
                    let t = Instant::now();
                    store.transact_write_items(input).await.unwrap();
                    latencies.push(t.elapsed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Sample {
        latencies,
        elapsed: start.elapsed(),
    }
}

async fn query_1000(store: &EmbeddedStore) -> Sample {
    for chunk in 0..40 {
        let writes: Vec<Value> = (0..25)
            .map(|j| json!({"PutRequest": {"Item": {"pk": {"S": "q"}, "sk": {"S": format!("{:06}", chunk * 25 + j)}, "data": payload()}}}))
            .collect();
        store
            .batch_write_item(req(json!({"RequestItems": {"bench": writes}})))
            .await
            .unwrap();
    }
    let query: QueryInput = req(
        json!({"TableName": "bench", "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "q"}}}),
    );
    let (start, mut latencies) = (Instant::now(), Vec::new());
    for _ in 0..200 {
        let t = Instant::now();
        let out = store.query(query.clone()).await.unwrap();
        latencies.push(t.elapsed());
        assert_eq!(out.count, 1000);
    }
    Sample {
        latencies,
        elapsed: start.elapsed(),
    }
}

fn main() {
    postbox_alloc::tune();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        println!(
            "{:<52} {:<9} {:>10} {:>9} {:>9}",
            "operation", "commit", "ops/s", "p50 ms", "p99 ms"
        );
        let mut stores = Vec::new();
        for durability in [Durability::Durable, Durability::NoFsync] {
            stores.push((
                open(&dir, durability).await,
                if durability == Durability::Durable {
                    "fsync"
                } else {
                    "no-fsync"
                },
            ));
        }
        for (store, label) in &stores {
            single_puts(store).await.row("PutItem, 1 writer", label);
        }
        for (store, label) in &stores {
            transactions(store, 1, Keys::PerWriter)
                .await
                .row("TransactWriteItems (3 actions), 1 writer", label);
        }
        for (keys, name) in [
            (
                Keys::PerWriter,
                "TransactWriteItems (3), 64 writers, per-writer keys",
            ),
            (
                Keys::TimeOrdered,
                "TransactWriteItems (3), 64 writers, time-ordered",
            ),
        ] {
            for (store, label) in &stores {
                let before = store.writer_stats();
                let sample = transactions(store, CONCURRENT, keys).await;
                let after = store.writer_stats();
                let per_commit = (after.operations - before.operations) as f64
                    / (after.commits - before.commits).max(1) as f64;
                sample.row_with(name, label, &format!("{per_commit:.1} per commit"));
            }
        }
        let sample = query_1000(&stores[0].0).await;
        sample.row("Query, 1,000 items of one partition", "-");
    });
}

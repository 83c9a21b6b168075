//! What an emitted event costs on DynamoDB, in write capacity units as
//! DynamoDB reports them (ReturnConsumedCapacity): a transaction bills 2 WRU
//! per item per started KB, and a tenant's pending events share one
//! transaction, so the head row's 2 WRU are paid once per batch.
//!
//! Prints, at batch caps of 1, 10, 20 and 50 (run with `--nocapture`),
//! the WRU per event AWS bills, computed from the stored items' sizes, and
//! the figure DynamoDB Local reports (it charges a flat 2 units per
//! transaction, whatever it holds, so it is not the bill). `scripts/test`
//! runs it against DynamoDB Local with `POSTBOX_TEST_DYNAMODB_ENDPOINT` set.

use std::sync::Arc;

use postbox_aws::DynamoStore;
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, EngineOptions};
use postbox_item::{AttributeValue, item_size};
use postbox_store::ItemStore;
use postbox_store::api::{QueryInput, Values};

const CATALOG: &str = r#"
[[event_types]]
name = "NOTE"
producers = ["p"]
"#;

/// What one batch cap costs.
#[derive(Debug)]
struct Cost {
    transactions: u64,
    /// WRU per event as AWS bills a transaction: 2 per item per started KB.
    billed: f64,
    /// WRU per event as DynamoDB Local reported them.
    reported: f64,
}

/// 2 WRU per started KB of an item written in a transaction.
fn transactional_wru(bytes: usize) -> f64 {
    2.0 * bytes.div_ceil(1024).max(1) as f64
}

/// The sizes of tenant `acme`'s event rows and of its head row.
async fn sizes(store: &DynamoStore) -> (Vec<usize>, usize) {
    let table = postbox_topology::EVENTS_TABLE;
    let mut rows = Vec::new();
    let mut start = None;
    loop {
        let page = store
            .query(QueryInput {
                table_name: table.into(),
                key_condition_expression: Some("pk = :p".into()),
                expression_attribute_values: Some(Values::from([(
                    ":p".to_owned(),
                    AttributeValue::S(postbox_topology::keys::event_pk("acme")),
                )])),
                exclusive_start_key: start.take(),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await
            .unwrap();
        rows.extend(page.items.unwrap_or_default().iter().map(item_size));
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    let head = store
        .get_item(postbox_store::api::GetItemInput {
            table_name: table.into(),
            key: postbox_engine::layout::key(
                postbox_topology::keys::head_pk("acme"),
                postbox_topology::keys::HEAD_SK,
            ),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await
        .unwrap()
        .item
        .expect("the head row");
    (rows, item_size(&head))
}

/// The cost of `events` emitted at once by one tenant with batches capped
/// at `cap`.
async fn cost(endpoint: &str, cap: usize, events: usize) -> Cost {
    let config = postbox_aws::local_config(endpoint).await;
    let prefix = format!("t{}-cost{cap}-", fastrand::u32(..));
    let store = Arc::new(DynamoStore::new(&config, &prefix));
    let engine = Engine::builder(store.clone(), Catalog::from_toml(CATALOG, "test").unwrap())
        .options(EngineOptions {
            max_batch_events: cap,
            // Concurrent transactions on one head conflict on DynamoDB.
            pipeline_depth: 1,
            ..EngineOptions::default()
        })
        .build()
        .await
        .unwrap();
    let before = (
        store.stats().write_capacity_units,
        engine.stats().transactions,
    );
    let engine = Arc::new(engine);
    let emits: Vec<_> = (0..events)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let ctx = Context::new("acme", "tester").unwrap();
                engine
                    .emit(&ctx, "NOTE", serde_json::json!({ "n": i }), vec![])
                    .await
                    .unwrap()
            })
        })
        .collect();
    for e in emits {
        e.await.unwrap();
    }
    let reported = store.stats().write_capacity_units - before.0;
    let transactions = engine.stats().transactions - before.1;
    let (rows, head) = sizes(&store).await;
    assert_eq!(rows.len(), events);
    let billed = rows.iter().map(|&b| transactional_wru(b)).sum::<f64>()
        + transactions as f64 * transactional_wru(head);
    Cost {
        transactions,
        billed: billed / events as f64,
        reported: reported / events as f64,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local: scripts/test runs it"]
async fn batching_a_tenants_events_pays_the_head_row_once_per_transaction() {
    let endpoint = std::env::var("POSTBOX_TEST_DYNAMODB_ENDPOINT").expect(
        "POSTBOX_TEST_DYNAMODB_ENDPOINT: the URL of a DynamoDB Local (scripts/test starts one)",
    );
    println!(
        "{:>9} {:>7} {:>13} {:>17} {:>19}",
        "batch cap", "events", "transactions", "WRU/event billed", "WRU/event reported"
    );
    let events = 200;
    let mut per_cap = Vec::new();
    for cap in [1, 10, 20, 50] {
        let c = cost(&endpoint, cap, events).await;
        println!(
            "{cap:>9} {events:>7} {:>13} {:>17.3} {:>19.3}",
            c.transactions, c.billed, c.reported
        );
        per_cap.push((cap, c));
    }
    // One event per transaction: the head row and the event row, each
    // under 1 KB, 2 WRU each.
    assert_eq!(per_cap[0].1.transactions, events as u64);
    assert_eq!(per_cap[0].1.billed, 4.0, "{per_cap:?}");
    // Batched, the head row is paid once per transaction. With 200 emits
    // started at once, batches fill toward the cap; how full depends on how
    // fast the emitting tasks are scheduled (a loaded machine starts them
    // later, and the first batches leave part full), so the bound allows
    // half-full batches: unbatched emits would take 200 transactions.
    for (cap, c) in &per_cap[1..] {
        assert!(
            c.transactions <= 2 * (events / cap) as u64 + 2,
            "cap {cap}: {c:?}: batches did not fill"
        );
    }
    for (cap, c) in &per_cap[2..] {
        assert!(c.billed <= 2.2, "cap {cap}: {c:?}");
    }
}

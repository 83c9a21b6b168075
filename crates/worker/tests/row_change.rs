//! The BEST_EFFORT lane end to end: an entity table's change goes through
//! the relay's row-change pipe to the standard queue, and the row-change
//! consumer runs every matching handler once, whatever they return.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use postbox_item::item_from_json;
use postbox_relay::config::default_row_change_pipes;
use postbox_relay::{Relay, RelayConfig, RelayOptions};
use postbox_store::ItemStore;
use postbox_store::api::*;
use postbox_worker::row_change::{DEFAULT_ROW_CHANGES_QUEUE, RowDelivery};
use postbox_worker::{
    HandlerError, RowChangeConsumer, RowChangeOptions, RowChangeStats, RowHandler, row_handler,
};
use serde_json::json;

const CONTACTS: &str = "contacts";

fn best_effort(name: &str, glob: &str) -> String {
    format!(
        "[[subscriptions]]\nname = \"{name}\"\nglob = \"{glob}\"\nlane = \"BEST_EFFORT\"\nhandler = \"h::{name}\"\n"
    )
}

/// The store with a `contacts` table (stream on), the relay running its
/// row-change pipe, and a consumer with `handlers`.
async fn setup(
    subscriptions: &str,
    handlers: Vec<(&str, RowHandler)>,
    options: RowChangeOptions,
) -> (Env, Relay, RowChangeConsumer<postbox_queue::Queues>) {
    let entities = "[[entities]]\nname = \"CONTACT\"\ntable = \"contacts\"\n\n";
    let env = env(catalog(&format!("{entities}{subscriptions}"))).await;
    env.store
        .create_table(CreateTableInput {
            stream_specification: Some(StreamSpecification {
                stream_enabled: true,
                stream_view_type: Some(StreamViewType::NewAndOldImages),
            }),
            ..CreateTableInput::keyed_by(CONTACTS, "pk")
        })
        .await
        .unwrap();
    let entities: Vec<(&str, &str)> = env
        .catalog
        .entities
        .iter()
        .filter_map(|e| Some((e.name.as_str(), e.table.as_deref()?)))
        .collect();
    let mut config = RelayConfig::from_toml("").unwrap();
    config.pipes = default_row_change_pipes(&entities, DEFAULT_ROW_CHANGES_QUEUE);
    let relay = Relay::start(
        (*env.store).clone(),
        env.queues.clone(),
        config,
        RelayOptions::default(),
    )
    .await
    .unwrap();
    let handlers = handlers
        .into_iter()
        .map(|(name, h)| (format!("h::{name}"), h))
        .collect::<HashMap<_, _>>();
    let consumer = RowChangeConsumer::new(env.queues.clone(), &env.catalog, handlers, options)
        .await
        .unwrap();
    (env, relay, consumer)
}

fn options() -> RowChangeOptions {
    RowChangeOptions {
        wait_seconds: 0,
        ..RowChangeOptions::default()
    }
}

async fn put(env: &Env, pk: &str, v: &str) {
    let item = item_from_json(&json!({"pk": {"S": pk}, "v": {"S": v}})).unwrap();
    env.store
        .put_item(PutItemInput {
            table_name: CONTACTS.into(),
            item,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Runs the consumer until it has received `n` messages (the relay
/// delivers in the background) and the queue is empty.
async fn consume(c: &RowChangeConsumer<postbox_queue::Queues>, n: u64) -> RowChangeStats {
    for _ in 0..500 {
        let report = c.run_once().await.unwrap();
        if report.received == 0 && c.stats().received >= n {
            return c.stats();
        }
        if report.received == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    panic!("received {:?}, wanted {n}", c.stats());
}

type Seen = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

fn recording(seen: &Seen) -> RowHandler {
    let seen = seen.clone();
    row_handler(move |d: RowDelivery| {
        let v = d
            .change
            .new_image
            .as_ref()
            .and_then(|i| i.get("v"))
            .and_then(|v| v.as_s().map(str::to_owned));
        seen.lock()
            .unwrap()
            .push((d.subscription.clone(), d.change.row_type.clone(), v));
        async { Ok(()) }
    })
}

#[tokio::test]
async fn a_row_change_reaches_every_matching_handler() {
    let (all, inserts): (Seen, Seen) = Default::default();
    let subs = format!(
        "{}{}",
        best_effort("index", "row:CONTACT:*"),
        best_effort("welcome", "row:CONTACT:INSERT")
    );
    let handlers = vec![("index", recording(&all)), ("welcome", recording(&inserts))];
    let (env, relay, consumer) = setup(&subs, handlers, options()).await;
    put(&env, "CONTACT#1", "a").await;
    put(&env, "CONTACT#1", "b").await;
    let stats = consume(&consumer, 2).await;
    let mut all = all.lock().unwrap().clone();
    all.sort();
    let row = |s: &str, t: &str, v: &str| (s.to_owned(), t.to_owned(), Some(v.to_owned()));
    assert_eq!(
        all,
        vec![
            row("index", "row:CONTACT:INSERT", "a"),
            row("index", "row:CONTACT:MODIFY", "b"),
        ]
    );
    assert_eq!(
        *inserts.lock().unwrap(),
        vec![row("welcome", "row:CONTACT:INSERT", "a")]
    );
    assert_eq!((stats.handled, stats.failed, stats.deleted), (3, 0, 2));
    relay.shutdown().await;
}

#[tokio::test]
async fn a_failing_handler_is_counted_and_neither_blocks_nor_retries() {
    let calls = Arc::new(Mutex::new(0u32));
    let seen: Seen = Default::default();
    let c = calls.clone();
    let failing = row_handler(move |_| {
        *c.lock().unwrap() += 1;
        async { Err(HandlerError::retryable("search cluster down")) }
    });
    let panicking = row_handler(|_| async { panic!("handler bug") });
    let hanging = row_handler(|_| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    });
    let subs = format!(
        "{}{}{}{}",
        best_effort("failing", "row:CONTACT:*"),
        best_effort("panicking", "row:CONTACT:*"),
        best_effort("hanging", "row:CONTACT:*"),
        best_effort("ok", "row:CONTACT:*")
    );
    let handlers = vec![
        ("failing", failing),
        ("panicking", panicking),
        ("hanging", hanging),
        ("ok", recording(&seen)),
    ];
    let options = RowChangeOptions {
        handler_timeout: Duration::from_millis(50),
        visibility_seconds: 1,
        ..options()
    };
    let (env, relay, consumer) = setup(&subs, handlers, options).await;
    for i in 0..3 {
        put(&env, &format!("CONTACT#{i}"), "x").await;
    }
    let stats = consume(&consumer, 3).await;
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "the good handler saw every change"
    );
    assert_eq!(
        (
            stats.handled,
            stats.failed,
            stats.deleted,
            stats.settle_failures
        ),
        (3, 9, 3, 0)
    );
    // Past the batch's visibility timeout: nothing comes back to retry.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(consumer.run_once().await.unwrap().received, 0);
    assert_eq!(*calls.lock().unwrap(), 3, "never retried");
    relay.shutdown().await;
}

#[tokio::test]
async fn a_row_change_no_subscription_matches_is_delivered_to_nobody() {
    let seen: Seen = Default::default();
    let subs = best_effort("welcome", "row:CONTACT:INSERT");
    let (env, relay, consumer) = setup(&subs, vec![("welcome", recording(&seen))], options()).await;
    put(&env, "CONTACT#1", "a").await;
    env.store
        .delete_item(DeleteItemInput {
            table_name: CONTACTS.into(),
            key: item_from_json(&json!({"pk": {"S": "CONTACT#1"}})).unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    let stats = consume(&consumer, 2).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(
        (stats.handled, stats.delivered_to_nobody, stats.deleted),
        (1, 1, 2)
    );
    relay.shutdown().await;
}

#[tokio::test]
async fn a_best_effort_subscription_without_its_handler_refuses_to_start() {
    let subs = best_effort("welcome", "row:CONTACT:INSERT");
    let env = env(catalog(&format!(
        "[[entities]]\nname = \"CONTACT\"\ntable = \"contacts\"\n\n{subs}"
    )))
    .await;
    let e = RowChangeConsumer::new(env.queues.clone(), &env.catalog, HashMap::new(), options())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("\"welcome\"") && e.contains("h::welcome"), "{e}");
}

//! The default row-change pipes: every change of a declared entity's item
//! reaches the standard row-change queue as the whole stream record; items
//! of undeclared entities on the same table do not.

mod common;

use common::*;
use postbox_relay::config::{DEFAULT_ROW_CHANGES_QUEUE, default_row_change_pipes};
use postbox_relay::{Relay, RelayConfig};
use postbox_store::ItemStore;
use postbox_store::api::DeleteItemInput;
use serde_json::json;

#[tokio::test]
async fn declared_entities_changes_reach_the_row_change_queue_whole() {
    let env = env().await;
    create_table(&env.store, "contacts").await;
    let mut config = RelayConfig::from_toml("").unwrap();
    config.pipes.extend(default_row_change_pipes(
        &[("CONTACT", "contacts"), ("LEAD", "contacts")],
        DEFAULT_ROW_CHANGES_QUEUE,
    ));
    assert_eq!(config.pipes.len(), 1, "one pipe per table");
    let relay = Relay::start(env.store.clone(), env.queues.clone(), config, options("a"))
        .await
        .unwrap();
    let item = |pk: &str, v: &str| json!({"pk": {"S": pk}, "v": {"S": v}});
    put(&env.store, "contacts", item("CONTACT#1", "a")).await;
    put(&env.store, "contacts", item("CONTACT#1", "b")).await;
    put(&env.store, "contacts", item("LEAD", "x")).await;
    put(&env.store, "contacts", item("CONTACTS#2", "not an entity")).await;
    put(&env.store, "contacts", item("ORDER#3", "not an entity")).await;
    env.store
        .delete_item(DeleteItemInput {
            table_name: "contacts".into(),
            key: postbox_item::item_from_json(&json!({"pk": {"S": "CONTACT#1"}})).unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    let stats = caught_up(&relay).await;
    assert_eq!((stats[0].delivered, stats[0].filtered), (4, 2));
    let mut seen: Vec<(String, String)> = drain(&env.queues, DEFAULT_ROW_CHANGES_QUEUE)
        .await
        .iter()
        .map(|b| {
            let r = json(b);
            (
                r["eventName"].as_str().unwrap().to_owned(),
                r["dynamodb"]["Keys"]["pk"]["S"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    seen.sort();
    let want = [
        ("INSERT", "CONTACT#1"),
        ("INSERT", "LEAD"),
        ("MODIFY", "CONTACT#1"),
        ("REMOVE", "CONTACT#1"),
    ];
    assert_eq!(
        seen,
        want.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
    );
    relay.shutdown().await;
}

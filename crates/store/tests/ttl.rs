//! Time to live: expired items are invisible at once, deleted by the
//! sweeper with a REMOVE record marked as a TTL removal, and treated as
//! absent by writes.

mod common;

use common::*;
use postbox_store::api::{EventName, TimeToLiveSpecification};
use postbox_store::{ChangeStreams, ItemStore};
use serde_json::json;

const NOW_S: u64 = NOW_MS / 1000;

async fn with_ttl() -> TestStore {
    let s = open_with_table(None).await;
    s.update_time_to_live(
        "tbl",
        TimeToLiveSpecification {
            enabled: true,
            attribute_name: "exp".into(),
        },
    )
    .await
    .unwrap();
    s
}

fn expiring(pk: &str, at: u64) -> serde_json::Value {
    json!({"TableName": "tbl", "Item": {"pk": {"S": pk}, "exp": {"N": at.to_string()}}})
}

#[tokio::test]
async fn enabling_twice_or_disabling_when_off_is_refused() {
    let s = open_with_table(None).await;
    assert_eq!(s.describe_time_to_live("tbl").await.unwrap(), None);
    let on = TimeToLiveSpecification {
        enabled: true,
        attribute_name: "exp".into(),
    };
    let off = TimeToLiveSpecification {
        enabled: false,
        attribute_name: "exp".into(),
    };
    check_err(
        s.update_time_to_live("tbl", off.clone()).await,
        "ValidationException",
        "already disabled",
    );
    s.update_time_to_live("tbl", on.clone()).await.unwrap();
    assert_eq!(
        s.describe_time_to_live("tbl").await.unwrap(),
        Some("exp".into())
    );
    check_err(
        s.update_time_to_live("tbl", on).await,
        "ValidationException",
        "already enabled",
    );
    s.update_time_to_live("tbl", off).await.unwrap();
    assert_eq!(s.describe_time_to_live("tbl").await.unwrap(), None);
}

#[tokio::test]
async fn expired_items_are_invisible_to_every_read() {
    let s = with_ttl().await;
    put(&s, expiring("gone", NOW_S - 10)).await.unwrap();
    put(&s, expiring("live", NOW_S + 3600)).await.unwrap();
    put(&s, expiring("ancient", 5)).await.unwrap();
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "gone"}})).await, None);
    assert!(get(&s, "tbl", json!({"pk": {"S": "live"}})).await.is_some());
    assert!(
        get(&s, "tbl", json!({"pk": {"S": "ancient"}}))
            .await
            .is_some(),
        "over five years old: DynamoDB ignores it"
    );
    let out = scan(&s, json!({"TableName": "tbl"})).await.unwrap();
    assert_eq!(out.count, 2);
    let q = query(&s, json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "gone"}}}))
        .await
        .unwrap();
    assert_eq!(q.count, 0);
}

#[tokio::test]
async fn the_sweeper_deletes_expired_items_with_marked_remove_records() {
    let s = with_ttl().await;
    put(&s, expiring("a", NOW_S + 10)).await.unwrap();
    put(&s, expiring("b", NOW_S + 1000)).await.unwrap();
    s.clock.advance_ms(11_000);
    s.sweep_now().await.unwrap();
    let rs = s.read_stream("tbl", 0, 100).await.unwrap();
    let removes: Vec<_> = rs
        .iter()
        .filter(|r| r.event_name == EventName::Remove)
        .collect();
    assert_eq!(removes.len(), 1);
    assert!(removes[0].ttl_removal);
    assert_eq!(removes[0].keys, item(json!({"pk": {"S": "a"}})));
    assert!(removes[0].old_image.is_some());
    assert_eq!(
        rs[0].new_image,
        Some(item(expiring("a", NOW_S + 10)["Item"].clone())),
        "the insert's record still holds the item the sweeper removed"
    );
    assert_eq!(
        s.describe_table("tbl").await.unwrap().item_count,
        1,
        "the item is really deleted"
    );
    s.sweep_now().await.unwrap();
    assert_eq!(
        s.read_stream("tbl", 0, 100).await.unwrap().len(),
        rs.len(),
        "a second sweep finds nothing"
    );
}

#[tokio::test]
async fn a_write_over_an_expired_item_treats_it_as_absent() {
    let s = with_ttl().await;
    put(&s, expiring("a", NOW_S - 1)).await.unwrap();
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}, "ConditionExpression": "attribute_not_exists(pk)"}))
        .await
        .unwrap();
    let events: Vec<_> = s
        .read_stream("tbl", 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.event_name, r.ttl_removal))
        .collect();
    assert_eq!(
        events,
        [
            (EventName::Insert, false),
            (EventName::Remove, true),
            (EventName::Insert, false)
        ]
    );
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}})).await,
        Some(item(json!({"pk": {"S": "a"}, "v": {"N": "1"}})))
    );
}

#[tokio::test]
async fn enabling_ttl_indexes_existing_items_and_updates_move_the_expiry() {
    let s = open_with_table(None).await;
    put(&s, expiring("old", NOW_S + 5)).await.unwrap();
    put(&s, expiring("moved", NOW_S + 5)).await.unwrap();
    s.update_time_to_live(
        "tbl",
        TimeToLiveSpecification {
            enabled: true,
            attribute_name: "exp".into(),
        },
    )
    .await
    .unwrap();
    update(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "moved"}}, "UpdateExpression": "SET exp = :later",
        "ExpressionAttributeValues": {":later": {"N": (NOW_S + 100_000).to_string()}}}),
    )
    .await
    .unwrap();
    s.clock.advance_ms(10_000);
    s.sweep_now().await.unwrap();
    let out = scan(&s, json!({"TableName": "tbl"})).await.unwrap();
    assert_eq!(
        out.items.unwrap(),
        vec![item(
            json!({"pk": {"S": "moved"}, "exp": {"N": (NOW_S + 100_000).to_string()}})
        )]
    );
    assert_eq!(s.describe_table("tbl").await.unwrap().item_count, 1);
}

/// An update that leaves the expiry alone keeps the item's place in the
/// sweeper's index (the store skips rewriting it), so it still expires.
#[tokio::test]
async fn an_update_that_keeps_the_expiry_still_expires() {
    let s = with_ttl().await;
    put(&s, expiring("kept", NOW_S + 5)).await.unwrap();
    put(&s, expiring("moved", NOW_S + 5)).await.unwrap();
    for (pk, set) in [
        ("kept", "SET note = :v"),
        ("moved", "SET note = :v, exp = :later"),
    ] {
        update(
            &s,
            json!({"TableName": "tbl", "Key": {"pk": {"S": pk}}, "UpdateExpression": set,
            "ExpressionAttributeValues": if set.contains(":later") {
                json!({":v": {"S": "x"}, ":later": {"N": (NOW_S + 100_000).to_string()}})
            } else {
                json!({":v": {"S": "x"}})
            }}),
        )
        .await
        .unwrap();
    }
    s.clock.advance_ms(10_000);
    s.sweep_now().await.unwrap();
    let out = scan(&s, json!({"TableName": "tbl"})).await.unwrap();
    let pks: Vec<_> = out.items.unwrap().iter().map(|i| i["pk"].clone()).collect();
    assert_eq!(pks, vec![postbox_item::AttributeValue::s("moved")]);
    assert_eq!(s.describe_table("tbl").await.unwrap().item_count, 1);
}

#[tokio::test]
async fn the_background_sweeper_runs_on_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(postbox_store::ManualClock::new(NOW_MS));
    let mut opts = options(clock.clone());
    opts.ttl_sweep_interval = std::time::Duration::from_millis(20);
    let s = postbox_store::embedded::EmbeddedStore::open(dir.path().join("s.redb"), opts).unwrap();
    create(&s, "tbl", None, Some("KEYS_ONLY")).await;
    s.update_time_to_live(
        "tbl",
        TimeToLiveSpecification {
            enabled: true,
            attribute_name: "exp".into(),
        },
    )
    .await
    .unwrap();
    put(&s, expiring("a", NOW_S + 1)).await.unwrap();
    clock.advance_ms(2000);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while s.describe_table("tbl").await.unwrap().item_count > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweeper never removed the item"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

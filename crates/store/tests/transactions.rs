//! TransactWriteItems and TransactGetItems: all or nothing, one reason per
//! action, the limits, and ClientRequestToken.

mod common;

use common::*;
use postbox_store::embedded::EmbeddedStore;
use postbox_store::{ItemStore, StoreError};
use serde_json::{Value, json};

fn put_action(pk: &str, cond: Option<&str>) -> Value {
    let mut p = json!({"Put": {"TableName": "tbl", "Item": {"pk": {"S": pk}, "v": {"N": "1"}}}});
    if let Some(c) = cond {
        p["Put"]["ConditionExpression"] = json!(c);
    }
    p
}

fn reasons(r: Result<(), StoreError>) -> Vec<String> {
    match r {
        Err(StoreError::TransactionCanceled { reasons }) => {
            reasons.into_iter().map(|r| r.code).collect()
        }
        other => panic!("expected a cancelled transaction, got {other:?}"),
    }
}

#[tokio::test]
async fn all_actions_commit_together() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "gone"}}}),
    )
    .await
    .unwrap();
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "counter"}, "n": {"N": "1"}}}),
    )
    .await
    .unwrap();
    transact(
        &s,
        json!([
            put_action("new", Some("attribute_not_exists(pk)")),
            {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "counter"}}, "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}}}},
            {"Delete": {"TableName": "tbl", "Key": {"pk": {"S": "gone"}}}},
            {"ConditionCheck": {"TableName": "tbl", "Key": {"pk": {"S": "absent"}}, "ConditionExpression": "attribute_not_exists(pk)"}}
        ]),
    )
    .await
    .unwrap();
    assert!(get(&s, "tbl", json!({"pk": {"S": "new"}})).await.is_some());
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "counter"}}))
            .await
            .unwrap()["n"],
        postbox_item::AttributeValue::n(2)
    );
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "gone"}})).await, None);
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "absent"}})).await,
        None,
        "a ConditionCheck writes nothing"
    );
}

#[tokio::test]
async fn one_failed_condition_cancels_everything_with_a_reason_per_action() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "taken"}, "v": {"N": "7"}}}),
    )
    .await
    .unwrap();
    let r = transact(
        &s,
        json!([
            put_action("a", None),
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "taken"}}, "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
            {"ConditionCheck": {"TableName": "tbl", "Key": {"pk": {"S": "nope"}}, "ConditionExpression": "attribute_exists(pk)"}}
        ]),
    )
    .await;
    match &r {
        Err(StoreError::TransactionCanceled { reasons }) => {
            assert_eq!(
                reasons[1].item,
                Some(item(json!({"pk": {"S": "taken"}, "v": {"N": "7"}})))
            );
            assert_eq!(
                reasons[1].message.as_deref(),
                Some("The conditional request failed")
            );
            assert_eq!(reasons[0].item, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        reasons(r),
        ["None", "ConditionalCheckFailed", "ConditionalCheckFailed"]
    );
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}})).await,
        None,
        "nothing of a cancelled transaction is written"
    );
}

#[tokio::test]
async fn two_actions_on_one_item_are_refused() {
    let s = open_with_table(None).await;
    check_err(
        transact(&s, json!([put_action("a", None), {"Delete": {"TableName": "tbl", "Key": {"pk": {"S": "a"}}}}])).await,
        "ValidationException",
        "Transaction request cannot include multiple operations on one item",
    );
}

#[tokio::test]
async fn action_count_and_shape_limits() {
    let s = open_with_table(None).await;
    check_err(
        transact(&s, json!([])).await,
        "ValidationException",
        "transactItems",
    );
    let many: Vec<Value> = (0..101)
        .map(|i| put_action(&format!("k{i}"), None))
        .collect();
    check_err(
        transact(&s, json!(many)).await,
        "ValidationException",
        "less than or equal to 100",
    );
    let hundred: Vec<Value> = (0..100)
        .map(|i| put_action(&format!("k{i}"), None))
        .collect();
    transact(&s, json!(hundred)).await.unwrap();
    check_err(
        transact(&s, json!([{"Put": {"TableName": "tbl", "Item": {"pk": {"S": "x"}}}, "Delete": {"TableName": "tbl", "Key": {"pk": {"S": "y"}}}}])).await,
        "ValidationException",
        "can only contain one of",
    );
}

#[tokio::test]
async fn a_transaction_over_four_megabytes_is_refused() {
    let s = open_with_table(None).await;
    let big = "x".repeat(390 * 1024);
    let actions: Vec<Value> = (0..11)
        .map(|i| json!({"Put": {"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}, "b": {"S": big}}}}))
        .collect();
    check_err(
        transact(&s, json!(actions)).await,
        "ValidationException",
        "4 MB",
    );
}

#[tokio::test]
async fn validation_errors_and_unknown_tables_are_not_cancellations() {
    let s = open_with_table(None).await;
    check_err(
        transact(
            &s,
            json!([{"Put": {"TableName": "tbl", "Item": {"pk": {"N": "1"}}}}]),
        )
        .await,
        "ValidationException",
        "Type mismatch for key pk",
    );
    check_err(
        transact(
            &s,
            json!([{"Put": {"TableName": "missing", "Item": {"pk": {"S": "a"}}}}]),
        )
        .await,
        "ResourceNotFoundException",
        "Requested resource not found",
    );
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "s"}, "v": {"S": "text"}}}),
    )
    .await
    .unwrap();
    check_err(
        transact(
            &s,
            json!([put_action("ok", None), {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "s"}},
            "UpdateExpression": "SET v = v + :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}}]),
        )
        .await,
        "ValidationException",
        "",
    );
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "ok"}})).await, None);
}

#[tokio::test]
async fn updating_a_key_attribute_is_a_validation_error_reason() {
    let s = open_with_table(None).await;
    let r = transact(
        &s,
        json!([put_action("ok", None), {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET pk = :v",
            "ExpressionAttributeValues": {":v": {"S": "b"}}}}]),
    )
    .await;
    assert_eq!(reasons(r), ["None", "ValidationError"]);
}

#[tokio::test]
async fn client_request_token_replays_once_and_refuses_another_request() {
    let s = counter().await;
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    assert_eq!(count(&s).await, postbox_item::AttributeValue::n(1));
    check_err(
        s.transact_write_items(add("tok-1", "2")).await,
        "IdempotentParameterMismatchException",
        "client token",
    );
}

/// A store with `tbl` holding the counter item `c` at 0.
async fn counter() -> TestStore {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "c"}, "n": {"N": "0"}}}),
    )
    .await
    .unwrap();
    s
}

/// `c`'s counter.
async fn count(s: &EmbeddedStore) -> postbox_item::AttributeValue {
    get(s, "tbl", json!({"pk": {"S": "c"}})).await.unwrap()["n"].clone()
}

#[tokio::test]
async fn a_token_outlives_a_reopen_of_the_file() {
    let s = counter().await;
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    let reopened = EmbeddedStore::open(&path, options(clock)).unwrap();
    reopened
        .transact_write_items(add("tok-1", "1"))
        .await
        .unwrap();
    assert_eq!(count(&reopened).await, postbox_item::AttributeValue::n(1));
    check_err(
        reopened.transact_write_items(add("tok-1", "2")).await,
        "IdempotentParameterMismatchException",
        "client token",
    );
    drop(dir);
}

#[tokio::test]
async fn a_token_is_forgotten_after_ten_minutes_and_counts_again_from_its_next_use() {
    let s = counter().await;
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    s.transact_write_items(add("tok-2", "1")).await.unwrap();
    s.clock.advance_ms(10 * 60 * 1000 - 1);
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    assert_eq!(
        count(&s).await,
        postbox_item::AttributeValue::n(2),
        "still within the window"
    );
    s.clock.advance_ms(1);
    // Both tokens are forgotten: tok-1 runs again (and is remembered anew,
    // while the use of tok-3 forgets tok-2), tok-2 with another request too.
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    s.transact_write_items(add("tok-3", "1")).await.unwrap();
    s.transact_write_items(add("tok-2", "5")).await.unwrap();
    assert_eq!(count(&s).await, postbox_item::AttributeValue::n(9));
    s.clock.advance_ms(5 * 60 * 1000);
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    s.transact_write_items(add("tok-2", "5")).await.unwrap();
    check_err(
        s.transact_write_items(add("tok-1", "2")).await,
        "IdempotentParameterMismatchException",
        "client token",
    );
    assert_eq!(
        count(&s).await,
        postbox_item::AttributeValue::n(9),
        "remembered anew"
    );
}

#[tokio::test]
async fn a_cancelled_transaction_leaves_its_token_unused() {
    let s = counter().await;
    let refused = req_of::<postbox_store::api::TransactWriteItemsInput>(
        json!({"ClientRequestToken": "tok-1", "TransactItems": [
        {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "c"}}, "UpdateExpression": "ADD n :by",
            "ConditionExpression": "n > :by", "ExpressionAttributeValues": {":by": {"N": "1"}}}}]}),
    );
    assert!(s.transact_write_items(refused).await.is_err());
    s.transact_write_items(add("tok-1", "1")).await.unwrap();
    assert_eq!(count(&s).await, postbox_item::AttributeValue::n(1));
}

#[tokio::test]
async fn transact_get_reads_one_snapshot_and_refuses_duplicates() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}, "w": {"N": "2"}}}),
    )
    .await
    .unwrap();
    let out = s
        .transact_get_items(req_of(json!({"TransactItems": [
            {"Get": {"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "ProjectionExpression": "v"}},
            {"Get": {"TableName": "tbl", "Key": {"pk": {"S": "b"}}}}
        ]})))
        .await
        .unwrap();
    assert_eq!(out.responses[0].item, Some(item(json!({"v": {"N": "1"}}))));
    assert_eq!(out.responses[1].item, None);
    check_err(
        s.transact_get_items(req_of(json!({"TransactItems": [
            {"Get": {"TableName": "tbl", "Key": {"pk": {"S": "a"}}}}, {"Get": {"TableName": "tbl", "Key": {"pk": {"S": "a"}}}}
        ]})))
        .await,
        "ValidationException",
        "multiple operations on one item",
    );
}

//! BatchGetItem and BatchWriteItem: limits, duplicates, no conditions.

mod common;

use common::*;
use postbox_store::ItemStore;
use serde_json::{Value, json};

#[tokio::test]
async fn batch_write_puts_and_deletes_across_tables() {
    let s = open_with_table(None).await;
    create(&s, "other", Some("N"), None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "old"}}}),
    )
    .await
    .unwrap();
    s.batch_write_item(req_of(json!({"RequestItems": {
        "tbl": [{"PutRequest": {"Item": {"pk": {"S": "a"}}}}, {"DeleteRequest": {"Key": {"pk": {"S": "old"}}}}],
        "other": [{"PutRequest": {"Item": {"pk": {"S": "a"}, "sk": {"N": "1"}}}}]
    }})))
    .await
    .unwrap();
    assert!(get(&s, "tbl", json!({"pk": {"S": "a"}})).await.is_some());
    assert!(get(&s, "tbl", json!({"pk": {"S": "old"}})).await.is_none());
    assert!(
        get(&s, "other", json!({"pk": {"S": "a"}, "sk": {"N": "1"}}))
            .await
            .is_some()
    );
}

#[tokio::test]
async fn batch_write_limits_and_duplicates() {
    let s = open_with_table(None).await;
    let puts: Vec<Value> = (0..26)
        .map(|i| json!({"PutRequest": {"Item": {"pk": {"S": format!("k{i}")}}}}))
        .collect();
    check_err(
        s.batch_write_item(req_of(json!({"RequestItems": {"tbl": puts}})))
            .await,
        "ValidationException",
        "25",
    );
    check_err(
        s.batch_write_item(req_of(json!({"RequestItems": {"tbl": [
            {"PutRequest": {"Item": {"pk": {"S": "a"}}}}, {"DeleteRequest": {"Key": {"pk": {"S": "a"}}}}]}})))
            .await,
        "ValidationException",
        "Provided list of item keys contains duplicates",
    );
    check_err(
        s.batch_write_item(req_of(
            json!({"RequestItems": {"nope": [{"PutRequest": {"Item": {"pk": {"S": "a"}}}}]}}),
        ))
        .await,
        "ResourceNotFoundException",
        "",
    );
    assert_eq!(
        s.scan(req_of(json!({"TableName": "tbl"})))
            .await
            .unwrap()
            .count,
        0,
        "refused batches write nothing"
    );
}

#[tokio::test]
async fn batch_get_answers_every_table_and_refuses_duplicates() {
    let s = open_with_table(None).await;
    create(&s, "empty", None, None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}}),
    )
    .await
    .unwrap();
    let out = s
        .batch_get_item(req_of(json!({"RequestItems": {
            "tbl": {"Keys": [{"pk": {"S": "a"}}, {"pk": {"S": "b"}}], "ProjectionExpression": "v"},
            "empty": {"Keys": [{"pk": {"S": "a"}}]}
        }})))
        .await
        .unwrap();
    assert_eq!(out.responses["tbl"], vec![item(json!({"v": {"N": "1"}}))]);
    assert_eq!(out.responses["empty"], vec![]);
    check_err(
        s.batch_get_item(req_of(
            json!({"RequestItems": {"tbl": {"Keys": [{"pk": {"S": "a"}}, {"pk": {"S": "a"}}]}}}),
        ))
        .await,
        "ValidationException",
        "duplicates",
    );
    let keys: Vec<Value> = (0..101)
        .map(|i| json!({"pk": {"S": format!("k{i}")}}))
        .collect();
    check_err(
        s.batch_get_item(req_of(json!({"RequestItems": {"tbl": {"Keys": keys}}})))
            .await,
        "ValidationException",
        "Too many items requested for the BatchGetItem call",
    );
}

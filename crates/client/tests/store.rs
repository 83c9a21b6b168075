//! RemoteStore against the embedded store: every call is made on both, over
//! the wire and directly, and the answers (items, pages, errors with their
//! variant, message, failed item and cancellation reasons) must be equal.

mod common;

use common::{Pair, pair, req};
use postbox_store::api::*;
use postbox_store::{ItemStore, StoreError};
use serde_json::{Value, json};

/// Runs `$method($input)` on the remote and the direct store, asserts that
/// the two answers are the same, and returns the remote one.
macro_rules! both {
    ($p:expr, $method:ident, $input:expr) => {{
        let input = $input;
        let remote = $p.remote.$method(input.clone()).await;
        let direct = $p.direct.$method(input).await;
        assert_eq!(
            format!("{remote:?}"),
            format!("{direct:?}"),
            "{} differs over the wire",
            stringify!($method)
        );
        remote
    }};
}

async fn with_tables() -> Pair {
    let p = pair().await;
    for store in [&p.served_store, &p.direct] {
        store
            .create_table(req(json!({
                "TableName": "tbl", "BillingMode": "PAY_PER_REQUEST",
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"},
                              {"AttributeName": "sk", "KeyType": "RANGE"}],
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                                         {"AttributeName": "sk", "AttributeType": "N"}],
                "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            })))
            .await
            .unwrap();
    }
    p
}

fn put(pk: &str, sk: u32, extra: Value) -> PutItemInput {
    let mut item = json!({"pk": {"S": pk}, "sk": {"N": sk.to_string()}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        item[k] = v.clone();
    }
    req(json!({"TableName": "tbl", "Item": item}))
}

#[tokio::test]
async fn put_get_update_delete_match() {
    let p = with_tables().await;
    both!(
        p,
        put_item,
        put("a", 1, json!({"n": {"N": "1"}, "tags": {"SS": ["x"]}}))
    )
    .unwrap();
    both!(
        p,
        put_item,
        put(
            "a",
            2,
            json!({"big": {"N": "12345678901234567890123456789.012345678"}})
        )
    )
    .unwrap();
    let got = both!(
        p,
        get_item,
        req::<GetItemInput>(
            json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "2"}}})
        )
    )
    .unwrap();
    assert!(got.item.is_some());
    both!(
        p,
        get_item,
        req::<GetItemInput>(json!({
            "TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
            "ProjectionExpression": "#n", "ExpressionAttributeNames": {"#n": "n"},
        }))
    )
    .unwrap();
    let updated = both!(
        p,
        update_item,
        req::<UpdateItemInput>(json!({
            "TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
            "UpdateExpression": "SET n = n + :one, l = list_append(if_not_exists(l, :empty), :l) ADD tags :t REMOVE gone",
            "ConditionExpression": "attribute_exists(pk) AND n < :ten",
            "ExpressionAttributeValues": {":one": {"N": "1"}, ":ten": {"N": "10"}, ":empty": {"L": []},
                                          ":l": {"L": [{"S": "v"}]}, ":t": {"SS": ["y"]}},
            "ReturnValues": "ALL_NEW",
        }))
    )
    .unwrap();
    assert!(updated.attributes.is_some());
    both!(
        p,
        delete_item,
        req::<DeleteItemInput>(json!({
            "TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "2"}}, "ReturnValues": "ALL_OLD",
        }))
    )
    .unwrap();
}

#[tokio::test]
async fn a_failed_condition_is_the_same_error_with_the_old_item() {
    let p = with_tables().await;
    both!(p, put_item, put("a", 1, json!({"n": {"N": "5"}}))).unwrap();
    let err = both!(
        p,
        put_item,
        req::<PutItemInput>(json!({
            "TableName": "tbl", "Item": {"pk": {"S": "a"}, "sk": {"N": "1"}},
            "ConditionExpression": "attribute_not_exists(pk)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }))
    )
    .unwrap_err();
    match err {
        StoreError::ConditionalCheckFailed { item: Some(item) } => {
            assert!(item.contains_key("n"))
        }
        other => panic!("expected ConditionalCheckFailed with the item, got {other:?}"),
    }
    let err = both!(
        p,
        update_item,
        req::<UpdateItemInput>(json!({
            "TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
            "UpdateExpression": "SET n = :v", "ConditionExpression": "n = :v",
            "ExpressionAttributeValues": {":v": {"N": "6"}},
        }))
    )
    .unwrap_err();
    assert!(matches!(
        err,
        StoreError::ConditionalCheckFailed { item: None }
    ));
}

#[tokio::test]
async fn validation_and_missing_tables_are_the_same_errors() {
    let p = with_tables().await;
    let err = both!(
        p,
        update_item,
        req::<UpdateItemInput>(json!({
            "TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
            "UpdateExpression": "SET n = :missing",
        }))
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Validation(_)), "{err:?}");
    let err = both!(
        p,
        get_item,
        req::<GetItemInput>(json!({"TableName": "nope", "Key": {"pk": {"S": "a"}}}))
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::ResourceNotFound(_)), "{err:?}");
    let err = both!(p, put_item, put("", 1, json!({}))).unwrap_err();
    assert!(matches!(err, StoreError::Validation(_)), "{err:?}");
}

#[tokio::test]
async fn a_cancelled_transaction_names_the_failed_action() {
    let p = with_tables().await;
    both!(p, put_item, put("a", 1, json!({"n": {"N": "1"}}))).unwrap();
    let tx: TransactWriteItemsInput = req(json!({"TransactItems": [
        {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "b"}, "sk": {"N": "1"}}}},
        {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
                    "UpdateExpression": "SET n = :two", "ConditionExpression": "n = :two",
                    "ExpressionAttributeValues": {":two": {"N": "2"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
        {"ConditionCheck": {"TableName": "tbl", "Key": {"pk": {"S": "c"}, "sk": {"N": "1"}},
                            "ConditionExpression": "attribute_not_exists(pk)"}},
    ]}));
    let err = both!(p, transact_write_items, tx).unwrap_err();
    let StoreError::TransactionCanceled { reasons } = err else {
        panic!("expected TransactionCanceled, got {err:?}");
    };
    let codes: Vec<&str> = reasons.iter().map(|r| r.code.as_str()).collect();
    assert_eq!(codes, ["None", "ConditionalCheckFailed", "None"]);
    assert!(reasons[1].item.is_some(), "the old item comes back");
    // Nothing of it was written.
    let got = both!(
        p,
        get_item,
        req::<GetItemInput>(
            json!({"TableName": "tbl", "Key": {"pk": {"S": "b"}, "sk": {"N": "1"}}})
        )
    )
    .unwrap();
    assert_eq!(got.item, None);
    // Two actions on one item is a validation error, also over the wire.
    let err = both!(
        p,
        transact_write_items,
        req::<TransactWriteItemsInput>(json!({"TransactItems": [
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "b"}, "sk": {"N": "1"}}}},
            {"Delete": {"TableName": "tbl", "Key": {"pk": {"S": "b"}, "sk": {"N": "1"}}}},
        ]}))
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Validation(_)), "{err:?}");
    // And one that commits.
    both!(
        p,
        transact_write_items,
        req::<TransactWriteItemsInput>(json!({"TransactItems": [
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "b"}, "sk": {"N": "1"}}}},
            {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
                        "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        ]}))
    )
    .unwrap();
    both!(
        p,
        transact_get_items,
        req::<TransactGetItemsInput>(json!({"TransactItems": [
            {"Get": {"TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}}}},
            {"Get": {"TableName": "tbl", "Key": {"pk": {"S": "zz"}, "sk": {"N": "1"}}}},
        ]}))
    )
    .unwrap();
}

#[tokio::test]
async fn queries_page_alike_in_both_directions() {
    let p = with_tables().await;
    for sk in 0..25 {
        both!(
            p,
            put_item,
            put("q", sk, json!({"v": {"N": (sk % 3).to_string()}}))
        )
        .unwrap();
    }
    for forward in [true, false] {
        let mut start: Option<Value> = None;
        let mut seen = 0;
        loop {
            let mut input = json!({
                "TableName": "tbl", "BillingMode": "PAY_PER_REQUEST",
                "KeyConditionExpression": "pk = :p AND sk BETWEEN :lo AND :hi",
                "FilterExpression": "v <> :one",
                "ExpressionAttributeValues": {":p": {"S": "q"}, ":lo": {"N": "2"}, ":hi": {"N": "22"}, ":one": {"N": "1"}},
                "ScanIndexForward": forward,
                "Limit": 6,
            });
            if let Some(s) = start.take() {
                input["ExclusiveStartKey"] = s;
            }
            let page = both!(p, query, req::<QueryInput>(input)).unwrap();
            seen += page.count;
            match page.last_evaluated_key {
                Some(k) => start = Some(serde_json::to_value(k).unwrap()),
                None => break,
            }
        }
        assert_eq!(seen, 14, "sk 2..=22 without v = 1");
    }
    both!(
        p,
        scan,
        req::<ScanInput>(json!({"TableName": "tbl", "Select": "COUNT"}))
    )
    .unwrap();
}

#[tokio::test]
async fn batch_operations_match() {
    let p = with_tables().await;
    let writes: BatchWriteItemInput = req(json!({"RequestItems": {"tbl": (0..20).map(|i| json!(
        {"PutRequest": {"Item": {"pk": {"S": "b"}, "sk": {"N": i.to_string()}}}}
    )).collect::<Vec<_>>()}}));
    both!(p, batch_write_item, writes).unwrap();
    let gets: BatchGetItemInput = req(json!({"RequestItems": {"tbl": {"Keys": [
        {"pk": {"S": "b"}, "sk": {"N": "3"}}, {"pk": {"S": "b"}, "sk": {"N": "30"}},
    ]}}}));
    let got = both!(p, batch_get_item, gets).unwrap();
    assert_eq!(got.responses["tbl"].len(), 1);
    let err = both!(
        p,
        batch_write_item,
        req::<BatchWriteItemInput>(json!({"RequestItems": {"tbl": (0..26).map(|i| json!(
            {"DeleteRequest": {"Key": {"pk": {"S": "b"}, "sk": {"N": i.to_string()}}}}
        )).collect::<Vec<_>>()}}))
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::Validation(_)), "{err:?}");
}

#[tokio::test]
async fn the_control_plane_over_the_wire() {
    let p = with_tables().await;
    let spec = TimeToLiveSpecification {
        enabled: true,
        attribute_name: "expires".into(),
    };
    let a = p.remote.update_time_to_live("tbl", spec.clone()).await;
    let b = p.direct.update_time_to_live("tbl", spec).await;
    assert_eq!(a.unwrap(), b.unwrap());
    assert_eq!(
        p.remote.describe_time_to_live("tbl").await.unwrap(),
        Some("expires".to_owned())
    );
    let described = p.remote.describe_table("tbl").await.unwrap();
    assert_eq!(described.table_name, "tbl");
    assert_eq!(described.key_schema.len(), 2);
    let err = p.remote.describe_table("nope").await.unwrap_err();
    assert_eq!(
        format!("{err:?}"),
        format!("{:?}", p.direct.describe_table("nope").await.unwrap_err())
    );
    // More tables than one ListTables page.
    for i in 0..120 {
        p.served_store
            .create_table(req(json!({
                "TableName": format!("t{i:03}"), "BillingMode": "PAY_PER_REQUEST",
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            })))
            .await
            .unwrap();
    }
    let mut served = p.served_store.list_tables().await.unwrap();
    served.sort();
    // The wire leaves out Postbox's own tables (the access keys here).
    assert!(
        served
            .iter()
            .any(|t| t == postbox_server::auth::ACCESS_KEYS_TABLE)
    );
    served.retain(|t| postbox_server::policy::table_visible(t));
    assert_eq!(p.remote.list_tables().await.unwrap(), served);
    let err = p
        .remote
        .create_table(req(json!({
            "TableName": "tbl", "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        })))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ResourceInUse(_)), "{err:?}");
    p.remote.delete_table("t000").await.unwrap();
    assert_eq!(p.remote.list_tables().await.unwrap().len(), 120);
}

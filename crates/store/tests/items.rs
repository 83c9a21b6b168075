//! Single-item operations: PutItem, GetItem, UpdateItem, DeleteItem with
//! conditions and ReturnValues, and the key and size rules they share.

mod common;

use common::*;
use postbox_store::ItemStore;
use serde_json::json;

#[tokio::test]
async fn put_then_get_round_trips_every_type() {
    let s = open_with_table(None).await;
    let it = json!({"pk": {"S": "a"}, "n": {"N": "1.50"}, "m": {"M": {"l": {"L": [{"NULL": true}, {"BOOL": true}]}}},
        "ss": {"SS": ["x", "y"]}, "b": {"B": "AQI="}});
    put(&s, json!({"TableName": "tbl", "Item": it}))
        .await
        .unwrap();
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}})).await,
        Some(item(it))
    );
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "b"}})).await, None);
}

#[tokio::test]
async fn get_projects_paths() {
    let s = open_with_table(None).await;
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "x": {"N": "1"}, "m": {"M": {"a": {"S": "1"}, "b": {"S": "2"}}}}}))
        .await
        .unwrap();
    let out = s
        .get_item(req_of(
            json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "ProjectionExpression": "#m.b, x",
            "ExpressionAttributeNames": {"#m": "m"}}),
        ))
        .await
        .unwrap();
    assert_eq!(
        out.item,
        Some(item(
            json!({"x": {"N": "1"}, "m": {"M": {"b": {"S": "2"}}}})
        ))
    );
}

#[tokio::test]
async fn conditional_put_fails_without_writing_and_can_return_the_old_item() {
    let s = open_with_table(None).await;
    let first = json!({"pk": {"S": "a"}, "v": {"N": "1"}});
    put(&s, json!({"TableName": "tbl", "Item": first}))
        .await
        .unwrap();
    let again = json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "2"}},
        "ConditionExpression": "attribute_not_exists(pk)", "ReturnValuesOnConditionCheckFailure": "ALL_OLD"});
    match put(&s, again).await {
        Err(postbox_store::StoreError::ConditionalCheckFailed { item: Some(old) }) => {
            assert_eq!(old, item(first.clone()))
        }
        other => panic!("expected a failed condition with the old item, got {other:?}"),
    }
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}})).await,
        Some(item(first))
    );
}

#[tokio::test]
async fn numbers_compare_numerically_in_conditions() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "10"}}}),
    )
    .await
    .unwrap();
    let cond = |c: &str| {
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "10"}}, "ConditionExpression": c,
            "ExpressionAttributeValues": {":x": {"N": "9.5"}}})
    };
    put(&s, cond("v > :x")).await.unwrap();
    check_err(
        put(&s, cond("v < :x")).await,
        "ConditionalCheckFailedException",
        "conditional request failed",
    );
}

#[tokio::test]
async fn put_returns_all_old_only() {
    let s = open_with_table(None).await;
    let out =
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}, "ReturnValues": "ALL_OLD"}))
            .await
            .unwrap();
    assert_eq!(out.attributes, None);
    let out =
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "2"}}, "ReturnValues": "ALL_OLD"}))
            .await
            .unwrap();
    assert_eq!(
        out.attributes,
        Some(item(json!({"pk": {"S": "a"}, "v": {"N": "1"}})))
    );
    for rv in ["ALL_NEW", "UPDATED_OLD", "UPDATED_NEW"] {
        check_err(
            put(
                &s,
                json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ReturnValues": rv}),
            )
            .await,
            "ValidationException",
            "Return values set to invalid value",
        );
        check_err(
            delete(
                &s,
                json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "ReturnValues": rv}),
            )
            .await,
            "ValidationException",
            "Return values set to invalid value",
        );
    }
}

#[tokio::test]
async fn update_creates_a_missing_item_with_its_key() {
    let s = open_with_table(Some("N")).await;
    let out = update(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"N": "1"}},
        "UpdateExpression": "SET v = :v ADD c :one", "ExpressionAttributeValues": {":v": {"S": "x"}, ":one": {"N": "1"}},
        "ReturnValues": "ALL_NEW"}))
    .await
    .unwrap();
    let expected =
        item(json!({"pk": {"S": "a"}, "sk": {"N": "1"}, "v": {"S": "x"}, "c": {"N": "1"}}));
    assert_eq!(out.attributes, Some(expected.clone()));
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}, "sk": {"N": "1"}})).await,
        Some(expected)
    );
}

#[tokio::test]
async fn update_that_removes_every_attribute_keeps_the_item() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}}),
    )
    .await
    .unwrap();
    update(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "REMOVE v"}),
    )
    .await
    .unwrap();
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}})).await,
        Some(item(json!({"pk": {"S": "a"}})))
    );
}

#[tokio::test]
async fn update_return_values_project_the_touched_paths() {
    let s = open_with_table(None).await;
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}, "w": {"N": "5"}, "m": {"M": {"x": {"N": "1"}, "y": {"N": "2"}}}}}))
        .await
        .unwrap();
    let req = |rv: &str| {
        json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET v = v + :one, m.x = :one REMOVE w",
            "ExpressionAttributeValues": {":one": {"N": "1"}}, "ReturnValues": rv})
    };
    let old = update(&s, req("UPDATED_OLD")).await.unwrap().attributes;
    assert_eq!(
        old,
        Some(item(
            json!({"v": {"N": "1"}, "w": {"N": "5"}, "m": {"M": {"x": {"N": "1"}}}})
        ))
    );
    let new = update(&s, req("UPDATED_NEW")).await.unwrap().attributes;
    assert_eq!(
        new,
        Some(item(
            json!({"v": {"N": "3"}, "m": {"M": {"x": {"N": "1"}}}})
        ))
    );
    let none = update(&s, req("NONE")).await.unwrap().attributes;
    assert_eq!(none, None);
    let all_old = update(&s, req("ALL_OLD"))
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(all_old.get("v"), Some(&postbox_item::AttributeValue::n(4)));
}

#[tokio::test]
async fn update_cannot_touch_key_attributes() {
    let s = open_with_table(Some("S")).await;
    for expr in ["SET pk = :v", "SET sk = :v", "REMOVE sk"] {
        let mut req = json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}, "UpdateExpression": expr});
        if expr.contains(":v") {
            req["ExpressionAttributeValues"] = json!({":v": {"S": "z"}});
        }
        let key = if expr.contains("pk") { "pk" } else { "sk" };
        check_err(
            update(&s, req).await,
            "ValidationException",
            &format!("Cannot update attribute {key}. This attribute is part of the key"),
        );
    }
}

#[tokio::test]
async fn update_type_errors_are_validation_errors_and_write_nothing() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"S": "text"}}}),
    )
    .await
    .unwrap();
    let r = update(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET v = v + :one, w = :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}}}),
    )
    .await;
    check_err(r, "ValidationException", "");
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "a"}})).await,
        Some(item(json!({"pk": {"S": "a"}, "v": {"S": "text"}})))
    );
}

#[tokio::test]
async fn delete_returns_the_old_item_and_honours_conditions() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}}),
    )
    .await
    .unwrap();
    check_err(
        delete(
            &s,
            json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "ConditionExpression": "v = :two",
            "ExpressionAttributeValues": {":two": {"N": "2"}}}),
        )
        .await,
        "ConditionalCheckFailedException",
        "",
    );
    let out = delete(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "ReturnValues": "ALL_OLD"}),
    )
    .await
    .unwrap();
    assert_eq!(
        out.attributes,
        Some(item(json!({"pk": {"S": "a"}, "v": {"N": "1"}})))
    );
    let out = delete(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "ReturnValues": "ALL_OLD"}),
    )
    .await
    .unwrap();
    assert_eq!(out.attributes, None);
}

#[tokio::test]
async fn an_update_that_only_takes_away_creates_no_item_where_there_is_none() {
    // As the managed service does; DynamoDB Local writes the bare key.
    let s = open_with_table(None).await;
    for (key, expr, values) in [
        ("r", "REMOVE x", None),
        ("d", "DELETE ss :v", Some(json!({":v": {"SS": ["a"]}}))),
        (
            "rd",
            "REMOVE x DELETE ss :v",
            Some(json!({":v": {"SS": ["a"]}})),
        ),
    ] {
        let mut req = json!({"TableName": "tbl", "Key": {"pk": {"S": key}}, "UpdateExpression": expr,
            "ReturnValues": "ALL_NEW"});
        if let Some(v) = values {
            req["ExpressionAttributeValues"] = v;
        }
        let out = update(&s, req).await.unwrap();
        assert_eq!(out.attributes, None, "{expr}");
        assert_eq!(
            get(&s, "tbl", json!({"pk": {"S": key}})).await,
            None,
            "{expr}"
        );
    }
    // In a transaction too.
    transact(
        &s,
        json!([{"Update": {"TableName": "tbl", "Key": {"pk": {"S": "t"}}, "UpdateExpression": "REMOVE x"}}]),
    )
    .await
    .unwrap();
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "t"}})).await, None);
    // Anything that brings data creates the item, and an update with no
    // expression writes the bare key, as before.
    update(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "s"}}, "UpdateExpression": "REMOVE x SET y = :y",
        "ExpressionAttributeValues": {":y": {"N": "1"}}}))
    .await
    .unwrap();
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "s"}})).await,
        Some(item(json!({"pk": {"S": "s"}, "y": {"N": "1"}})))
    );
    update(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "k"}}}))
        .await
        .unwrap();
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "k"}})).await,
        Some(item(json!({"pk": {"S": "k"}})))
    );
    // On an existing item REMOVE still writes.
    update(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "s"}}, "UpdateExpression": "REMOVE y"}),
    )
    .await
    .unwrap();
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "s"}})).await,
        Some(item(json!({"pk": {"S": "s"}})))
    );
}

//! Query and Scan: key conditions in both directions, Limit before the
//! filter, Count and ScannedCount, pagination, Select, projections, and
//! parallel scan segments.

mod common;

use std::collections::BTreeSet;

use common::*;
use postbox_item::Item;
use serde_json::{Value, json};

/// Table `tbl` (pk S, sk N) with partition "p" holding sk 1..=10 and
/// partition "other" holding sk 1.
async fn seeded() -> TestStore {
    let s = open_with_table(Some("N")).await;
    for i in 1..=10 {
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "p"}, "sk": {"N": i.to_string()}, "odd": {"BOOL": i % 2 == 1}}}))
            .await
            .unwrap();
    }
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "other"}, "sk": {"N": "1"}}}),
    )
    .await
    .unwrap();
    s
}

fn sks(items: &[Item]) -> Vec<i64> {
    items
        .iter()
        .map(|i| i["sk"].as_n().unwrap().to_i64().unwrap())
        .collect()
}

fn q(extra: Value) -> Value {
    let mut req = json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}});
    for (k, v) in extra.as_object().unwrap() {
        if k == "ExpressionAttributeValues" {
            for (vk, vv) in v.as_object().unwrap() {
                req["ExpressionAttributeValues"][vk] = vv.clone();
            }
        } else {
            req[k] = v.clone();
        }
    }
    req
}

#[tokio::test]
async fn query_reads_one_partition_in_sort_order_both_ways() {
    let s = seeded().await;
    let out = query(&s, q(json!({}))).await.unwrap();
    assert_eq!(
        sks(out.items.as_ref().unwrap()),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(
        (out.count, out.scanned_count, out.last_evaluated_key),
        (10, 10, None)
    );
    let out = query(&s, q(json!({"ScanIndexForward": false})))
        .await
        .unwrap();
    assert_eq!(
        sks(out.items.as_ref().unwrap()),
        (1..=10).rev().collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn sort_key_conditions_select_ranges_numerically() {
    let s = seeded().await;
    let cases = [
        ("pk = :p AND sk = :a", vec![3]),
        ("pk = :p AND sk < :a", vec![1, 2]),
        ("pk = :p AND sk <= :a", vec![1, 2, 3]),
        ("pk = :p AND sk > :b", vec![9, 10]),
        ("pk = :p AND sk >= :b", vec![8, 9, 10]),
        ("pk = :p AND sk BETWEEN :a AND :b", vec![3, 4, 5, 6, 7, 8]),
    ];
    for (expr, expected) in cases {
        let mut req = q(json!({}));
        for (name, v) in [(":a", "3"), (":b", "8")] {
            if expr.contains(name) {
                req["ExpressionAttributeValues"][name] = json!({"N": v});
            }
        }
        req["KeyConditionExpression"] = json!(expr);
        let out = query(&s, req).await.unwrap();
        assert_eq!(sks(out.items.as_ref().unwrap()), expected, "{expr}");
    }
}

#[tokio::test]
async fn begins_with_on_string_sort_keys() {
    let s = open_with_table(Some("S")).await;
    for sk in ["a", "ab", "abc", "b", "ab\u{ff}"] {
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "p"}, "sk": {"S": sk}}}),
        )
        .await
        .unwrap();
    }
    let out = query(
        &s,
        json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p AND begins_with(sk, :x)",
        "ExpressionAttributeValues": {":p": {"S": "p"}, ":x": {"S": "ab"}}}),
    )
    .await
    .unwrap();
    let got: Vec<_> = out
        .items
        .unwrap()
        .iter()
        .map(|i| i["sk"].as_s().unwrap().to_owned())
        .collect();
    assert_eq!(got, vec!["ab", "abc", "ab\u{ff}"]);
}

#[tokio::test]
async fn limit_counts_items_read_before_the_filter() {
    let s = seeded().await;
    let out = query(
        &s,
        q(json!({"Limit": 4, "FilterExpression": "odd = :t", "ExpressionAttributeValues": {":t": {"BOOL": true}}})),
    )
    .await
    .unwrap();
    assert_eq!(sks(out.items.as_ref().unwrap()), vec![1, 3]);
    assert_eq!((out.count, out.scanned_count), (2, 4));
    assert_eq!(
        out.last_evaluated_key,
        Some(item(json!({"pk": {"S": "p"}, "sk": {"N": "4"}})))
    );
}

#[tokio::test]
async fn pages_follow_last_evaluated_key_in_both_directions() {
    let s = seeded().await;
    for forward in [true, false] {
        let mut seen = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut req = q(json!({"Limit": 3, "ScanIndexForward": forward}));
            if let Some(k) = &start {
                req["ExclusiveStartKey"] = postbox_item::item_to_json(k);
            }
            let out = query(&s, req).await.unwrap();
            seen.extend(sks(out.items.as_ref().unwrap()));
            match out.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        let mut expected: Vec<i64> = (1..=10).collect();
        if !forward {
            expected.reverse();
        }
        assert_eq!(seen, expected, "forward={forward}");
    }
}

#[tokio::test]
async fn limit_reached_exactly_still_reports_a_last_key() {
    let s = seeded().await;
    let out = query(&s, q(json!({"Limit": 10}))).await.unwrap();
    assert_eq!(out.count, 10);
    assert!(
        out.last_evaluated_key.is_some(),
        "DynamoDB does not look ahead past Limit"
    );
}

#[tokio::test]
async fn exclusive_start_key_is_checked_against_the_schema() {
    let s = seeded().await;
    for bad in [
        json!({"pk": {"S": "p"}}),
        json!({"pk": {"S": "p"}, "sk": {"S": "1"}}),
        json!({"pk": {"S": "p"}, "sk": {"N": "1"}, "x": {"N": "1"}}),
    ] {
        check_err(
            query(&s, q(json!({"ExclusiveStartKey": bad}))).await,
            "ValidationException",
            "The provided starting key is invalid",
        );
    }
    check_err(
        query(
            &s,
            q(json!({"ExclusiveStartKey": {"pk": {"S": "other"}, "sk": {"N": "1"}}})),
        )
        .await,
        "ValidationException",
        "outside query boundaries",
    );
}

#[tokio::test]
async fn select_count_and_projection_rules() {
    let s = seeded().await;
    let out = query(&s, q(json!({"Select": "COUNT"}))).await.unwrap();
    assert_eq!((out.items, out.count), (None, 10));
    let out = query(&s, q(json!({"ProjectionExpression": "sk"})))
        .await
        .unwrap();
    assert_eq!(out.items.unwrap()[0], item(json!({"sk": {"N": "1"}})));
    let out = query(
        &s,
        q(json!({"Select": "SPECIFIC_ATTRIBUTES", "ProjectionExpression": "odd"})),
    )
    .await
    .unwrap();
    assert_eq!(out.items.unwrap()[0], item(json!({"odd": {"BOOL": true}})));
    check_err(
        query(&s, q(json!({"Select": "SPECIFIC_ATTRIBUTES"}))).await,
        "ValidationException",
        "SPECIFIC_ATTRIBUTES",
    );
    check_err(
        query(
            &s,
            q(json!({"Select": "ALL_ATTRIBUTES", "ProjectionExpression": "sk"})),
        )
        .await,
        "ValidationException",
        "ALL_ATTRIBUTES",
    );
    check_err(
        query(
            &s,
            q(json!({"Select": "COUNT", "ProjectionExpression": "sk"})),
        )
        .await,
        "ValidationException",
        "COUNT",
    );
    check_err(
        query(&s, q(json!({"Select": "ALL_PROJECTED_ATTRIBUTES"}))).await,
        "ValidationException",
        "IndexName",
    );
}

#[tokio::test]
async fn query_validation_errors() {
    let s = seeded().await;
    check_err(
        query(&s, json!({"TableName": "tbl"})).await,
        "ValidationException",
        "KeyConditionExpression",
    );
    check_err(
        query(&s, q(json!({"Limit": 0}))).await,
        "ValidationException",
        "limit",
    );
    check_err(
        query(&s, json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"N": "1"}}}))
            .await,
        "ValidationException",
        "Condition parameter type does not match schema type",
    );
    check_err(
        query(
            &s,
            json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p AND sk = :s",
            "ExpressionAttributeValues": {":p": {"S": "p"}, ":s": {"S": "1"}}}),
        )
        .await,
        "ValidationException",
        "Condition parameter type does not match schema type",
    );
    check_err(
        query(&s, q(json!({"IndexName": "gsi"}))).await,
        "ValidationException",
        "does not have the specified index",
    );
    check_err(
        query(
            &s,
            json!({"TableName": "nope", "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "p"}}}),
        )
        .await,
        "ResourceNotFoundException",
        "Requested resource not found",
    );
}

#[tokio::test]
async fn a_page_stops_after_one_megabyte() {
    let s = open_with_table(Some("N")).await;
    let big = "x".repeat(300 * 1024);
    for i in 0..5 {
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "p"}, "sk": {"N": i.to_string()}, "b": {"S": big}}}))
            .await
            .unwrap();
    }
    let out = query(&s, json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}}))
        .await
        .unwrap();
    assert_eq!(out.count, 4, "the item that crosses 1 MB ends the page");
    assert_eq!(
        out.last_evaluated_key,
        Some(item(json!({"pk": {"S": "p"}, "sk": {"N": "3"}})))
    );
}

#[tokio::test]
async fn scan_filters_paginates_and_counts() {
    let s = seeded().await;
    let out = scan(&s, json!({"TableName": "tbl"})).await.unwrap();
    assert_eq!((out.count, out.scanned_count), (11, 11));
    let out = scan(&s, json!({"TableName": "tbl", "FilterExpression": "odd = :t", "ExpressionAttributeValues": {":t": {"BOOL": true}}}))
        .await
        .unwrap();
    assert_eq!((out.count, out.scanned_count), (5, 11));
    let mut all = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = json!({"TableName": "tbl", "Limit": 4});
        if let Some(k) = &start {
            req["ExclusiveStartKey"] = postbox_item::item_to_json(k);
        }
        let out = scan(&s, req).await.unwrap();
        all.extend(out.items.unwrap());
        match out.last_evaluated_key {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    assert_eq!(all.len(), 11);
}

#[tokio::test]
async fn parallel_scan_segments_partition_the_table() {
    let s = open_with_table(None).await;
    for i in 0..50 {
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}}}),
        )
        .await
        .unwrap();
    }
    let mut seen = BTreeSet::new();
    let mut sizes = Vec::new();
    for segment in 0..4 {
        let out = scan(
            &s,
            json!({"TableName": "tbl", "Segment": segment, "TotalSegments": 4}),
        )
        .await
        .unwrap();
        sizes.push(out.count);
        for i in out.items.unwrap() {
            assert!(
                seen.insert(i["pk"].as_s().unwrap().to_owned()),
                "an item appeared in two segments"
            );
        }
    }
    assert_eq!(seen.len(), 50);
    assert!(
        sizes.iter().all(|&n| n > 0),
        "segments should all get items: {sizes:?}"
    );
    check_err(
        scan(
            &s,
            json!({"TableName": "tbl", "Segment": 4, "TotalSegments": 4}),
        )
        .await,
        "ValidationException",
        "Segment",
    );
    check_err(
        scan(&s, json!({"TableName": "tbl", "Segment": 0})).await,
        "ValidationException",
        "TotalSegments",
    );
    check_err(
        scan(&s, json!({"TableName": "tbl", "TotalSegments": 2})).await,
        "ValidationException",
        "Segment",
    );
}

#[tokio::test]
async fn scan_without_expressions_rejects_placeholder_maps() {
    let s = seeded().await;
    check_err(
        scan(
            &s,
            json!({"TableName": "tbl", "ExpressionAttributeValues": {":x": {"N": "1"}}}),
        )
        .await,
        "ValidationException",
        "ExpressionAttributeValues can only be specified when using expressions",
    );
}

/// `query_all` and `scan_all` follow LastEvaluatedKey to the last page,
/// from the request's own ExclusiveStartKey, with its filter applied.
#[tokio::test]
async fn query_all_and_scan_all_read_every_page() {
    use postbox_store::ItemStore;
    use postbox_store::api::{QueryInput, ScanInput};
    let s = seeded().await;
    let query: QueryInput = req_of(json!({
        "TableName": "tbl", "KeyConditionExpression": "pk = :p",
        "FilterExpression": "odd = :t", "Limit": 3,
        "ExpressionAttributeValues": {":p": {"S": "p"}, ":t": {"BOOL": true}}
    }));
    let sks = |items: &[Item]| -> Vec<String> {
        items
            .iter()
            .map(|i| i["sk"].as_n().unwrap().to_string())
            .collect()
    };
    let all = s.store.query_all(query.clone()).await.unwrap();
    assert_eq!(sks(&all), ["1", "3", "5", "7", "9"]);
    let from_4: QueryInput = QueryInput {
        exclusive_start_key: Some(item(json!({"pk": {"S": "p"}, "sk": {"N": "4"}}))),
        ..query
    };
    assert_eq!(
        sks(&s.store.query_all(from_4).await.unwrap()),
        ["5", "7", "9"]
    );
    let scan: ScanInput = req_of(json!({"TableName": "tbl", "Limit": 2}));
    assert_eq!(s.store.scan_all(scan).await.unwrap().len(), 11);
}

//! `query_encoded` against `query`: on a corpus of items of every type,
//! expired ones among them, large ones that end pages at 1 MB, and requests
//! of every shape (each key condition, both directions, Limit, pagination,
//! filter, projection, COUNT, invalid requests), the encoded pages decode to
//! exactly Query's pages. Damaged stored bytes fail both the same way.

mod common;

use common::*;
use postbox_item::{Item, decode_item};
use postbox_store::ItemStore;
use postbox_store::api::{EncodedQueryOutput, QueryInput, QueryOutput, TimeToLiveSpecification};
use serde_json::{Value, json};

/// Table `tbl` (pk S, sk S, TTL on `exp`): partition "p" with 40 small
/// items of every attribute type, every fifth expired, six of ~300 KB,
/// and partition "q" with one item.
async fn corpus() -> TestStore {
    let s = open_with_table(Some("S")).await;
    s.update_time_to_live(
        "tbl",
        TimeToLiveSpecification {
            enabled: true,
            attribute_name: "exp".into(),
        },
    )
    .await
    .unwrap();
    let now = NOW_MS / 1000;
    for i in 0..40u64 {
        let mut it = json!({
            "pk": {"S": "p"}, "sk": {"S": format!("k{i:03}")},
            "n": {"N": format!("{}.5", i)}, "b": {"B": "AAEC"}, "t": {"BOOL": i % 2 == 0},
            "z": {"NULL": true}, "s": {"S": "é\u{1f600}"},
            "m": {"M": {"a": {"L": [{"N": "1"}, {"S": "x"}, {"SS": ["a", "b"]}]}}},
            "ns": {"NS": ["1", "-2.5"]}, "bs": {"BS": ["AQ=="]}
        });
        if i % 5 == 0 {
            it["exp"] = json!({"N": (now - 10).to_string()});
        } else if i % 5 == 1 {
            it["exp"] = json!({"N": (now + 1000).to_string()});
        } else if i % 5 == 2 {
            it["exp"] = json!({"S": "not a number"});
        }
        put(&s, json!({"TableName": "tbl", "Item": it}))
            .await
            .unwrap();
    }
    for i in 0..6 {
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "p"}, "sk": {"S": format!("x{i}")}, "big": {"S": "y".repeat(300_000)}}}),
        )
        .await
        .unwrap();
    }
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "q"}, "sk": {"S": "k001"}}}),
    )
    .await
    .unwrap();
    s
}

fn decoded(page: &EncodedQueryOutput) -> Vec<Item> {
    page.items().map(|b| decode_item(b).unwrap()).collect()
}

/// Both reads of one request, page by page to the end: equal pages, or the
/// same error.
async fn agree(s: &TestStore, request: Value) -> usize {
    let mut input: QueryInput = req_of(request.clone());
    let mut pages = 0;
    loop {
        let plain = s.query(input.clone()).await;
        let encoded = s.query_encoded(input.clone()).await;
        let (plain, encoded): (QueryOutput, EncodedQueryOutput) = match (plain, encoded) {
            (Ok(p), Ok(e)) => (p, e),
            (Err(p), Err(e)) => {
                assert_eq!(format!("{p:?}"), format!("{e:?}"), "{request}");
                return pages;
            }
            (p, e) => panic!("{request}: query {p:?}, query_encoded {e:?}"),
        };
        pages += 1;
        assert_eq!(
            plain.items.clone().unwrap_or_default(),
            decoded(&encoded),
            "{request} page {pages}"
        );
        assert_eq!(
            (plain.count, plain.scanned_count, &plain.last_evaluated_key),
            (
                encoded.count,
                encoded.scanned_count,
                &encoded.last_evaluated_key
            ),
            "{request} page {pages}"
        );
        match plain.last_evaluated_key {
            Some(k) => input.exclusive_start_key = Some(k),
            None => return pages,
        }
    }
}

#[tokio::test]
async fn encoded_pages_are_query_pages() {
    let s = corpus().await;
    let values =
        json!({":p": {"S": "p"}, ":a": {"S": "k010"}, ":b": {"S": "k030"}, ":x": {"S": "x"}});
    let conditions = [
        "pk = :p",
        "pk = :p AND sk = :a",
        "pk = :p AND sk < :a",
        "pk = :p AND sk <= :a",
        "pk = :p AND sk > :a",
        "pk = :p AND sk >= :a",
        "pk = :p AND sk BETWEEN :a AND :b",
        "pk = :p AND sk BETWEEN :b AND :a",
        "pk = :p AND begins_with(sk, :x)",
    ];
    let mut multi_page = 0;
    for condition in conditions {
        let used: Vec<&str> = [":p", ":a", ":b", ":x"]
            .into_iter()
            .filter(|v| condition.contains(v))
            .collect();
        let vals: serde_json::Map<String, Value> = used
            .iter()
            .map(|v| ((*v).to_owned(), values[*v].clone()))
            .collect();
        for forward in [true, false] {
            for limit in [None, Some(1), Some(7), Some(1000)] {
                let mut req = json!({"TableName": "tbl", "KeyConditionExpression": condition,
                    "ExpressionAttributeValues": vals, "ScanIndexForward": forward, "ConsistentRead": true});
                if let Some(l) = limit {
                    req["Limit"] = json!(l);
                }
                if agree(&s, req.clone()).await > 1 {
                    multi_page += 1;
                }
                // The shapes that need built items take Query's own path.
                let mut filtered = req.clone();
                filtered["FilterExpression"] = json!("t = :t");
                filtered["ExpressionAttributeValues"][":t"] = json!({"BOOL": true});
                agree(&s, filtered).await;
                let mut projected = req.clone();
                projected["ProjectionExpression"] = json!("sk, m.a[1], exp");
                agree(&s, projected).await;
                let mut counted = req;
                counted["Select"] = json!("COUNT");
                agree(&s, counted).await;
            }
        }
    }
    assert!(multi_page > 10, "only {multi_page} requests paged");
    // No Limit at all still ends pages at 1 MB.
    assert!(agree(&s, json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}})).await >= 2);
    // Invalid requests fail the same way.
    for bad in [
        json!({"TableName": "nope", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}}),
        json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"N": "1"}}}),
        json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}, ":u": {"S": "u"}}}),
        json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}}, "Limit": 0}),
        json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "p"}},
            "ExclusiveStartKey": {"pk": {"S": "q"}, "sk": {"S": "k001"}}}),
        json!({"TableName": "tbl"}),
    ] {
        assert_eq!(agree(&s, bad.clone()).await, 0, "{bad} was accepted");
    }
}

#[tokio::test]
async fn damaged_stored_bytes_fail_both_reads_alike() {
    let s = corpus().await;
    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    // Damage one item's bytes in the file: cut k007 short and give k012 an
    // unknown tag in place of its first value's.
    {
        use redb::ReadableTable;
        let db = redb::Database::open(&path).unwrap();
        let items: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("items");
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(items).unwrap();
            let mut changes = Vec::new();
            for row in table.iter().unwrap() {
                let (k, v) = row.unwrap();
                let (k, mut v): (Vec<u8>, Vec<u8>) = (k.value().to_vec(), v.value().to_vec());
                // A row an insert's stream record refers to starts with 0x00
                // and the record's sequence number (the store's `row`).
                let at = if v[0] == 0 { 9 } else { 0 };
                let item = decode_item(&v[at..]).unwrap();
                match item["sk"].as_s() {
                    Some("k007") => v.truncate(v.len() - 3),
                    Some("k012") => {
                        // count, name length 1, name "b", then the tag.
                        assert_eq!(&v[at + 1..at + 3], &[1, b'b']);
                        v[at + 3] = 42;
                    }
                    _ => continue,
                }
                changes.push((k, v));
            }
            assert_eq!(changes.len(), 2);
            for (k, v) in changes {
                table.insert(k.as_slice(), v.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let store =
        postbox_store::embedded::EmbeddedStore::open(&path, options(clock.clone())).unwrap();
    let s = TestStore { store, clock, dir };
    let page = |lo: &str, hi: &str| {
        json!({"TableName": "tbl", "KeyConditionExpression": "pk = :p AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":p": {"S": "p"}, ":lo": {"S": lo}, ":hi": {"S": hi}}})
    };
    // Before the damage: both read; across each damaged row: both fail with
    // the same error.
    assert_eq!(agree(&s, page("k000", "k006")).await, 1);
    for (lo, hi, what) in [
        ("k000", "k009", "truncated"),
        ("k008", "k020", "unknown value tag 42"),
    ] {
        assert_eq!(agree(&s, page(lo, hi)).await, 0);
        let e = s.query_encoded(req_of(page(lo, hi))).await.unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
    }
}

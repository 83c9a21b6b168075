//! Secondary indexes: kept exact by every kind of write, refused writes
//! that break an index key's rules, Query and Scan on an index, UpdateTable
//! creating an index with a backfill while writes go on, and deleting one.

mod common;

use std::collections::BTreeSet;

use common::*;
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::embedded::EmbeddedStore;
use serde_json::{Value, json};

/// Table `ix` keyed by pk (S) and sk (N), with a KEYS_ONLY global index on
/// g (S) / h (N), an INCLUDE one on g alone projecting `a`, and a local
/// KEYS_ONLY one on l (N).
async fn indexed(s: &EmbeddedStore) {
    s.create_table(req_of(json!({
        "TableName": "idx",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"},
            {"AttributeName": "g", "AttributeType": "S"}, {"AttributeName": "h", "AttributeType": "N"},
            {"AttributeName": "l", "AttributeType": "N"}],
        "BillingMode": "PAY_PER_REQUEST",
        "GlobalSecondaryIndexes": [
            {"IndexName": "by-g-h", "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "h", "KeyType": "RANGE"}],
             "Projection": {"ProjectionType": "KEYS_ONLY"}},
            {"IndexName": "by-g", "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
             "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["a"]}}],
        "LocalSecondaryIndexes": [
            {"IndexName": "by-l", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "l", "KeyType": "RANGE"}],
             "Projection": {"ProjectionType": "KEYS_ONLY"}}]
    })))
    .await
    .unwrap();
}

/// Every item of a table or index, following LastEvaluatedKey, a few per page.
async fn scan_all(s: &EmbeddedStore, table: &str, index: Option<&str>) -> Vec<Item> {
    let mut out = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = json!({"TableName": table, "Limit": 7});
        if let Some(index) = index {
            req["IndexName"] = json!(index);
        }
        if let Some(k) = &start {
            req["ExclusiveStartKey"] = postbox_item::item_to_json(k);
        }
        let page = scan(s, req).await.unwrap();
        out.extend(page.items.unwrap());
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return out,
        }
    }
}

fn keep(item: &Item, names: &[&str]) -> Item {
    item.iter()
        .filter(|(k, _)| names.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn canonical(items: impl IntoIterator<Item = Item>) -> BTreeSet<String> {
    items
        .into_iter()
        .map(|i| postbox_item::item_to_json(&i).to_string())
        .collect()
}

/// Each index holds exactly the table's items that have its keys, as it
/// projects them.
async fn assert_indexes_exact(s: &EmbeddedStore) {
    let table = scan_all(s, "idx", None).await;
    let with = |names: &[&str]| -> Vec<&Item> {
        table
            .iter()
            .filter(|i| names.iter().all(|n| i.contains_key(*n)))
            .collect()
    };
    let want_gh = canonical(
        with(&["g", "h"])
            .into_iter()
            .map(|i| keep(i, &["pk", "sk", "g", "h"])),
    );
    let want_g = canonical(
        with(&["g"])
            .into_iter()
            .map(|i| keep(i, &["pk", "sk", "g", "a"])),
    );
    let want_l = canonical(
        with(&["l"])
            .into_iter()
            .map(|i| keep(i, &["pk", "sk", "l"])),
    );
    assert_eq!(canonical(scan_all(s, "idx", Some("by-g-h")).await), want_gh);
    assert_eq!(canonical(scan_all(s, "idx", Some("by-g")).await), want_g);
    assert_eq!(canonical(scan_all(s, "idx", Some("by-l")).await), want_l);
}

fn attr(i: u64, m: u64) -> Value {
    json!({"N": (i % m).to_string()})
}

#[tokio::test]
async fn every_kind_of_write_keeps_the_indexes_exact() {
    let s = open();
    indexed(&s).await;
    // A deterministic mix of puts (with and without index keys), updates
    // that set, change and remove index keys, deletes, transactions and
    // batches over a few keys, so the same items enter, move in and leave
    // the indexes many times.
    let mut x: u64 = 0x2545F4914F6CDD1D;
    for step in 0..400u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = json!({"pk": {"S": format!("p{}", x % 3)}, "sk": attr(x >> 8, 5)});
        let g = json!({"S": format!("g{}", (x >> 16) % 3)});
        match x % 7 {
            0 => {
                let mut item = key.clone();
                item["g"] = g;
                item["h"] = attr(x >> 20, 4);
                item["a"] = json!({"S": "kept"});
                item["b"] = json!({"S": "not projected"});
                put(&s, json!({"TableName": "idx", "Item": item}))
                    .await
                    .unwrap();
            }
            1 => {
                let mut item = key.clone();
                item["l"] = attr(x >> 24, 6);
                put(&s, json!({"TableName": "idx", "Item": item}))
                    .await
                    .unwrap();
            }
            2 => {
                update(
                    &s,
                    json!({"TableName": "idx", "Key": key, "UpdateExpression": "SET g = :g, l = :l",
                    "ExpressionAttributeValues": {":g": g, ":l": attr(x >> 28, 6)}}),
                )
                .await
                .unwrap();
            }
            3 => {
                update(&s, json!({"TableName": "idx", "Key": key, "UpdateExpression": "REMOVE g SET h = :h",
                    "ExpressionAttributeValues": {":h": attr(x >> 12, 4)}}))
                .await
                .unwrap();
            }
            4 => {
                delete(&s, json!({"TableName": "idx", "Key": key}))
                    .await
                    .unwrap();
            }
            5 => {
                let mut item = key.clone();
                item["g"] = g;
                item["h"] = attr(x >> 32, 4);
                let other = json!({"pk": {"S": "p9"}, "sk": attr(x >> 36, 5)});
                transact(
                    &s,
                    json!([
                        {"Put": {"TableName": "idx", "Item": item}},
                        {"Delete": {"TableName": "idx", "Key": other}}
                    ]),
                )
                .await
                .unwrap();
            }
            _ => {
                let mut item = key.clone();
                item["h"] = attr(x >> 40, 4);
                item["l"] = attr(x >> 44, 6);
                let mut nine = json!({"pk": {"S": "p9"}, "sk": attr(x >> 36, 5)});
                nine["g"] = json!({"S": "g9"});
                s.batch_write_item(req_of(json!({"RequestItems": {"idx": [
                    {"PutRequest": {"Item": item}}, {"PutRequest": {"Item": nine}}]}})))
                    .await
                    .unwrap();
            }
        }
        if step % 50 == 49 {
            assert_indexes_exact(&s).await;
        }
    }
    let d = s.describe_table("idx").await.unwrap();
    let gsis = d.global_secondary_indexes.unwrap();
    let counted = gsis[0]["ItemCount"].as_u64().unwrap();
    assert_eq!(
        counted,
        scan_all(&s, "idx", Some("by-g-h")).await.len() as u64,
        "{gsis:?}"
    );
    assert_eq!(d.local_secondary_indexes.unwrap().len(), 1);
}

#[tokio::test]
async fn queries_on_an_index_follow_its_keys_and_projection() {
    let s = open();
    indexed(&s).await;
    for (sk, g, h, l) in [
        (1, "x", 3, 9),
        (2, "x", 1, 8),
        (3, "x", 2, 7),
        (4, "y", 1, 6),
        (5, "x", 2, 5),
    ] {
        put(&s, json!({"TableName": "idx", "Item": {"pk": {"S": "p"}, "sk": {"N": sk.to_string()},
            "g": {"S": g}, "h": {"N": h.to_string()}, "l": {"N": l.to_string()}, "a": {"N": "1"}, "b": {"N": "2"}}}))
            .await
            .unwrap();
    }
    // By index sort key, then by the table's key among equal ones.
    let sks = |out: postbox_store::api::QueryOutput| -> Vec<String> {
        out.items
            .unwrap()
            .iter()
            .map(|i| i["sk"].as_n().unwrap().to_string())
            .collect()
    };
    let q = |extra: Value| {
        let mut req = json!({"TableName": "idx", "IndexName": "by-g-h", "KeyConditionExpression": "g = :g",
            "ExpressionAttributeValues": {":g": {"S": "x"}}});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        req
    };
    assert_eq!(
        sks(query(&s, q(json!({}))).await.unwrap()),
        ["2", "3", "5", "1"]
    );
    let desc = query(&s, q(json!({"ScanIndexForward": false})))
        .await
        .unwrap();
    assert_eq!(sks(desc), ["1", "5", "3", "2"]);
    let between = json!({"KeyConditionExpression": "g = :g AND h BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":g": {"S": "x"}, ":lo": {"N": "2"}, ":hi": {"N": "2"}}});
    assert_eq!(sks(query(&s, q(between)).await.unwrap()), ["3", "5"]);
    let gt = json!({"KeyConditionExpression": "g = :g AND h > :h",
        "ExpressionAttributeValues": {":g": {"S": "x"}, ":h": {"N": "1"}}});
    assert_eq!(sks(query(&s, q(gt)).await.unwrap()), ["3", "5", "1"]);
    let le = json!({"KeyConditionExpression": "g = :g AND h <= :h",
        "ExpressionAttributeValues": {":g": {"S": "x"}, ":h": {"N": "2"}}});
    assert_eq!(sks(query(&s, q(le)).await.unwrap()), ["2", "3", "5"]);
    // KEYS_ONLY: the table's and the index's keys only.
    let first = query(&s, q(json!({"Limit": 1}))).await.unwrap();
    let first_item = &first.items.as_ref().unwrap()[0];
    assert_eq!(
        first_item.keys().collect::<Vec<_>>(),
        ["g", "h", "pk", "sk"]
    );
    // Paging one at a time gives the same items in the same order.
    let lek = first.last_evaluated_key.clone().unwrap();
    assert_eq!(lek.len(), 4, "{lek:?}");
    let mut seen = vec![first_item["sk"].as_n().unwrap().to_string()];
    let mut start = lek;
    loop {
        let page = query(
            &s,
            q(json!({"Limit": 1, "ExclusiveStartKey": postbox_item::item_to_json(&start)})),
        )
        .await
        .unwrap();
        seen.extend(sks(page.clone()));
        match page.last_evaluated_key {
            Some(k) => start = k,
            None => break,
        }
    }
    assert_eq!(seen, ["2", "3", "5", "1"]);
    // What the index does not hold is refused by name.
    check_err(
        query(&s, q(json!({"Select": "ALL_ATTRIBUTES"}))).await,
        "ValidationException",
        "Select type ALL_ATTRIBUTES is not supported for global secondary index by-g-h",
    );
    check_err(
        query(&s, q(json!({"ProjectionExpression": "a, pk"}))).await,
        "ValidationException",
        "Global secondary index by-g-h does not project [a]",
    );
    check_err(
        query(&s, q(json!({"ConsistentRead": true}))).await,
        "ValidationException",
        "Consistent reads are not supported on global secondary indexes",
    );
    check_err(
        query(&s, q(json!({"FilterExpression": "h = :g"}))).await,
        "ValidationException",
        "Primary key attribute: h",
    );
    // An empty string is refused while the key condition is parsed, with
    // the table's wording (known-wordings.md lists Local's, which names
    // the index).
    check_err(
        query(
            &s,
            q(json!({"ExpressionAttributeValues": {":g": {"S": ""}}})),
        )
        .await,
        "ValidationException",
        "cannot contain an empty string value. Key: g",
    );
    check_err(
        query(&s, q(json!({"IndexName": "nope"}))).await,
        "ValidationException",
        "The table does not have the specified index: nope",
    );
    // INCLUDE adds its attributes; a filter on one of them works.
    let inc = query(&s, json!({"TableName": "idx", "IndexName": "by-g", "KeyConditionExpression": "g = :g",
        "FilterExpression": "a = :a", "ExpressionAttributeValues": {":g": {"S": "x"}, ":a": {"N": "1"}}}))
    .await
    .unwrap();
    assert_eq!(inc.count, 4);
    assert!(
        inc.items
            .unwrap()
            .iter()
            .all(|i| i.contains_key("a") && !i.contains_key("b"))
    );
    // A local index reads unprojected attributes from the table.
    let local = query(&s, json!({"TableName": "idx", "IndexName": "by-l", "KeyConditionExpression": "pk = :p AND l < :l",
        "ProjectionExpression": "b, l", "ExpressionAttributeValues": {":p": {"S": "p"}, ":l": {"N": "7"}}}))
    .await
    .unwrap();
    assert_eq!(
        canonical(local.items.unwrap()),
        canonical([
            item(json!({"b": {"N": "2"}, "l": {"N": "5"}})),
            item(json!({"b": {"N": "2"}, "l": {"N": "6"}}))
        ])
    );
}

#[tokio::test]
async fn writes_that_break_an_index_key_rule_are_refused_and_change_nothing() {
    let s = open();
    indexed(&s).await;
    let base = json!({"pk": {"S": "p"}, "sk": {"N": "1"}});
    put(&s, json!({"TableName": "idx", "Item": base}))
        .await
        .unwrap();
    let with = |name: &str, v: Value| {
        let mut item = base.clone();
        item[name] = v;
        json!({"TableName": "idx", "Item": item})
    };
    check_err(
        put(&s, with("g", json!({"N": "1"}))).await,
        "ValidationException",
        "Type mismatch for Index Key g Expected: S Actual: N IndexName: by-g-h",
    );
    check_err(
        put(&s, with("g", json!({"S": ""}))).await,
        "ValidationException",
        "cannot contain an empty string value. IndexName: by-g-h, IndexKey: g",
    );
    check_err(
        put(&s, with("h", json!({"S": "x".repeat(8)}))).await,
        "ValidationException",
        "Type mismatch for Index Key h",
    );
    check_err(
        put(&s, with("g", json!({"S": "x".repeat(2049)}))).await,
        "ValidationException",
        "Hash primary key values must be under 2048 bytes",
    );
    check_err(
        update(
            &s,
            json!({"TableName": "idx", "Key": base, "UpdateExpression": "SET l = :v",
            "ExpressionAttributeValues": {":v": {"S": "text"}}}),
        )
        .await,
        "ValidationException",
        "Type mismatch for Index Key l Expected: N Actual: S IndexName: by-l",
    );
    check_err(
        transact(
            &s,
            json!([{"Put": {"TableName": "idx", "Item": with("g", json!({"B": "AA=="}))["Item"]}}]),
        )
        .await,
        "ValidationException",
        "Type mismatch for Index Key g",
    );
    assert_eq!(get(&s, "idx", base.clone()).await, Some(item(base)));
    assert_indexes_exact(&s).await;
    assert!(scan_all(&s, "idx", Some("by-l")).await.is_empty());
}

#[tokio::test]
async fn create_table_applies_dynamodbs_index_rules() {
    let s = open();
    let req = |extra: Value| {
        let mut req = json!({"TableName": "rules", "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "g", "AttributeType": "S"}]});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        req_of::<postbox_store::api::CreateTableInput>(req)
    };
    let gsi = |name: &str, projection: Value| json!({"IndexName": name, "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}], "Projection": projection});
    let all = json!({"ProjectionType": "ALL"});
    for (extra, message) in [
        (
            json!({"GlobalSecondaryIndexes": [gsi("ab", all.clone())]}),
            "Invalid table/index name",
        ),
        (
            json!({"GlobalSecondaryIndexes": []}),
            "GSI list is empty/invalid",
        ),
        (
            json!({"GlobalSecondaryIndexes": [gsi("gix", all.clone()), gsi("gix", all.clone())]}),
            "Two global secondary indices have the same name",
        ),
        (
            json!({"GlobalSecondaryIndexes": [gsi("gix", json!({}))]}),
            "Indexes must have a projection specified",
        ),
        (
            json!({"GlobalSecondaryIndexes": [gsi("gix", json!({"ProjectionType": "INCLUDE"}))]}),
            "some non-key attributes to include",
        ),
        (
            json!({"GlobalSecondaryIndexes": [gsi("gix", json!({"ProjectionType": "ALL", "NonKeyAttributes": ["a"]}))]}),
            "unless projection type is INCLUDE",
        ),
        (
            json!({"LocalSecondaryIndexes": [{"IndexName": "lix", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "g", "KeyType": "RANGE"}], "Projection": all.clone()}]}),
            "Local Secondary indices are not allowed on hash tables",
        ),
        (
            json!({"GlobalSecondaryIndexes": [gsi("gix", all.clone())], "BillingMode": "PROVISIONED",
            "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1}}),
            "No provisioned throughput specified for the global secondary index",
        ),
        (
            json!({"GlobalSecondaryIndexes": [{"IndexName": "gix", "KeySchema": [{"AttributeName": "zz", "KeyType": "HASH"}], "Projection": all.clone()}]}),
            "Attribute zz is not defined in AttributeDefinitions",
        ),
        (
            json!({"GlobalSecondaryIndexes": [gsi("gix", all.clone())], "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "g", "AttributeType": "S"}, {"AttributeName": "unused", "AttributeType": "S"}]}),
            "The number of attributes in key schema must match",
        ),
    ] {
        check_err(
            s.create_table(req(extra)).await,
            "ValidationException",
            message,
        );
    }
    assert!(s.list_tables().await.unwrap().is_empty());
    let d = s
        .create_table(req(json!({"GlobalSecondaryIndexes": [gsi("gix", all)]})))
        .await
        .unwrap();
    let gsis = d.global_secondary_indexes.unwrap();
    assert_eq!(gsis[0]["IndexStatus"], "ACTIVE");
    assert_eq!(gsis[0]["IndexArn"], format!("{}/index/gix", d.table_arn));
}

#[tokio::test]
async fn update_table_backfills_a_new_index_while_writes_go_on_and_deletes_one() {
    let s = open();
    create(&s, "big", None, None).await;
    for chunk in 0..25 {
        let puts: Vec<Value> = (0..25)
            .map(|i| {
                let n = chunk * 25 + i;
                json!({"PutRequest": {"Item": {"pk": {"S": format!("k{n:05}")}, "grp": {"S": format!("g{}", n % 10)}, "n": {"N": n.to_string()}}}})
            })
            .collect();
        // Most items carry the new index's key; a few do not (sparse).
        s.batch_write_item(req_of(json!({"RequestItems": {"big": puts}})))
            .await
            .unwrap();
    }
    for n in 0..2500u64 {
        if n % 4 == 0 {
            put(&s, json!({"TableName": "big", "Item": {"pk": {"S": format!("k{n:05}")}, "grp": {"S": format!("g{}", n % 10)}}}))
                .await
                .unwrap();
        }
    }
    let out = s
        .update_table(req_of(json!({"TableName": "big",
            "AttributeDefinitions": [{"AttributeName": "grp", "AttributeType": "S"}],
            "GlobalSecondaryIndexUpdates": [{"Create": {"IndexName": "by-grp",
                "KeySchema": [{"AttributeName": "grp", "KeyType": "HASH"}], "Projection": {"ProjectionType": "KEYS_ONLY"}}}]})))
        .await
        .unwrap();
    assert_eq!(out.global_secondary_indexes.as_ref().unwrap().len(), 1);
    assert_eq!(out.attribute_definitions.len(), 2);
    // Writes go on during the backfill: some items move groups, some go.
    for n in (0..2500u64).step_by(7) {
        update(&s, json!({"TableName": "big", "Key": {"pk": {"S": format!("k{n:05}")}},
            "UpdateExpression": "SET grp = :g", "ExpressionAttributeValues": {":g": {"S": "moved"}}}))
        .await
        .unwrap();
    }
    for n in (3..2500u64).step_by(11) {
        delete(
            &s,
            json!({"TableName": "big", "Key": {"pk": {"S": format!("k{n:05}")}}}),
        )
        .await
        .unwrap();
    }
    let mut status = String::new();
    for _ in 0..500 {
        let d = s.describe_table("big").await.unwrap();
        status = d.global_secondary_indexes.unwrap()[0]["IndexStatus"]
            .as_str()
            .unwrap()
            .to_owned();
        if status == "ACTIVE" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status, "ACTIVE");
    let table = scan_all(&s, "big", None).await;
    let want = canonical(
        table
            .iter()
            .filter(|i| i.contains_key("grp"))
            .map(|i| keep(i, &["pk", "grp"])),
    );
    assert_eq!(canonical(scan_all(&s, "big", Some("by-grp")).await), want);
    let moved = query(
        &s,
        json!({"TableName": "big", "IndexName": "by-grp", "KeyConditionExpression": "grp = :g",
        "ExpressionAttributeValues": {":g": {"S": "moved"}}, "Select": "COUNT"}),
    )
    .await
    .unwrap();
    let want_moved = table
        .iter()
        .filter(|i| i.get("grp") == Some(&AttributeValue::s("moved")))
        .count();
    assert_eq!(moved.count as usize, want_moved);
    // One online index change at a time; an existing name is refused.
    let create_again = json!({"TableName": "big", "AttributeDefinitions": [{"AttributeName": "grp", "AttributeType": "S"}],
        "GlobalSecondaryIndexUpdates": [{"Create": {"IndexName": "by-grp",
            "KeySchema": [{"AttributeName": "grp", "KeyType": "HASH"}], "Projection": {"ProjectionType": "ALL"}}}]});
    check_err(
        s.update_table(req_of(create_again)).await,
        "ValidationException",
        "Attempting to create an index which already exists",
    );
    // The index survives a reopen of the file.
    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    let s = TestStore {
        store: EmbeddedStore::open(&path, options(clock.clone())).unwrap(),
        clock,
        dir,
    };
    assert_eq!(canonical(scan_all(&s, "big", Some("by-grp")).await), want);
    // Deleting it drops its rows and the definitions only it used.
    let out = s
        .update_table(req_of(json!({"TableName": "big",
            "GlobalSecondaryIndexUpdates": [{"Delete": {"IndexName": "by-grp"}}]})))
        .await
        .unwrap();
    assert!(out.global_secondary_indexes.is_none());
    assert_eq!(out.attribute_definitions.len(), 1);
    check_err(
        scan(&s, json!({"TableName": "big", "IndexName": "by-grp"})).await,
        "ValidationException",
        "does not have the specified index",
    );
    check_err(
        s.update_table(req_of(json!({"TableName": "big",
            "GlobalSecondaryIndexUpdates": [{"Delete": {"IndexName": "by-grp"}}]})))
            .await,
        "ResourceNotFoundException",
        "",
    );
}

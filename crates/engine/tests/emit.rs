//! emit: the event, the head and the caller's writes in one transaction;
//! bad input refused with nothing written; contention retried, then a clear
//! error (direct path).

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use postbox_engine::{EmitError, EngineOptions, Write};
use postbox_item::Item;
use serde_json::json;

fn direct() -> EngineOptions {
    EngineOptions {
        group_commit: false,
        ..Default::default()
    }
}

#[tokio::test]
async fn event_and_caller_writes_commit_together() {
    for options in [EngineOptions::default(), direct()] {
        let t = open().await;
        let engine = engine_with(t.store.clone(), options).await;
        let ctx = ctx("t1");
        let key = |id: &str| Item::from([("pk".to_owned(), s(&format!("ORDER#{id}")))]);
        engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": "1"}),
                vec![put_order("1"), put_order("2")],
            )
            .await
            .unwrap();
        engine
            .emit(
                &ctx,
                "ORDER_SHIPPED",
                json!({"order": "1"}),
                vec![
                    Write::update(ORDERS, key("1"), "SET #s = :s")
                        .name("#s", "status")
                        .value(":s", s("shipped")),
                    Write::delete(ORDERS, key("2")),
                    Write::condition_check(ORDERS, key("3"), "attribute_not_exists(pk)"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(
            attr_s(&get_order(&*t.store, "1").await.unwrap(), "status"),
            "shipped"
        );
        assert!(get_order(&*t.store, "2").await.is_none());
        let rows = events(&*t.store, "t1").await;
        assert_eq!(rows.len(), 2);
        assert_contiguous(&rows);
    }
}

#[tokio::test]
async fn a_failed_caller_condition_writes_nothing_and_names_the_write() {
    for options in [EngineOptions::default(), direct()] {
        let t = open().await;
        let engine = engine_with(t.store.clone(), options).await;
        let ctx = ctx("t1");
        engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": "1"}),
                vec![put_order("1")],
            )
            .await
            .unwrap();
        let e = engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": "9"}),
                vec![put_order("9"), put_order("1")],
            )
            .await
            .unwrap_err();
        match &e {
            EmitError::ConditionalCheckFailed {
                index,
                write,
                subscription,
            } => {
                assert_eq!(*index, 1);
                assert!(
                    write.contains("Put on orders") && write.contains("ORDER#1"),
                    "{write}"
                );
                assert!(subscription.is_none());
            }
            other => panic!("expected ConditionalCheckFailed, got {other}"),
        }
        assert!(e.to_string().contains("nothing was committed"));
        assert!(
            get_order(&*t.store, "9").await.is_none(),
            "the other write of the failed emit is not there"
        );
        assert_eq!(events(&*t.store, "t1").await.len(), 1);
        assert_eq!(attr_n(&head(&*t.store, "t1").await.unwrap(), "last_seq"), 1);
        assert_eq!(engine.stats().condition_failures, 1);
        // The log goes on normally.
        let next = engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": "9"}),
                vec![put_order("9")],
            )
            .await
            .unwrap();
        assert_eq!(next.envelope.seq, 2);
    }
}

#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    let big = "x".repeat(420 * 1024);
    let many: Vec<Write> = (0..99).map(|i| put_order(&i.to_string())).collect();
    let events_write = Write::put(
        EVENTS,
        Item::from([
            ("pk".to_owned(), s("TENANT#t1#EVENT")),
            ("sk".to_owned(), s("x")),
        ]),
    );
    let cases: Vec<(&str, serde_json::Value, Vec<Write>, &str)> = vec![
        (
            "ORDER_PLACD",
            json!({"order": "1"}),
            vec![put_order("a")],
            "did you mean \"ORDER_PLACED\"",
        ),
        (
            "ORDER_PLACED",
            json!(["order"]),
            vec![put_order("a")],
            "must be a JSON object, not an array",
        ),
        ("ORDER_PLACED", json!("x"), vec![], "not a string"),
        (
            "ORDER_PLACED",
            json!({"amount": 1}),
            vec![put_order("a")],
            "$.order is required",
        ),
        (
            "ORDER_PLACED",
            json!({"order": "1", "amount": -1}),
            vec![put_order("a")],
            "$.amount must be >= 0",
        ),
        (
            "ORDER_PLACED",
            json!({"order": "1"}),
            vec![put_order("a"), events_write],
            "targets the events table",
        ),
        (
            "ORDER_PLACED",
            json!({"order": "1"}),
            many,
            "a transaction allows 100",
        ),
        (
            "AUDIT_NOTE",
            json!({"blob": big}),
            vec![put_order("a")],
            "item limit",
        ),
    ];
    for (ty, payload, writes, msg) in cases {
        let e = engine.emit(&ctx, ty, payload, writes).await.unwrap_err();
        assert!(e.to_string().contains(msg), "{ty}: {e} lacks {msg:?}");
    }
    assert!(get_order(&*t.store, "a").await.is_none());
    assert!(events(&*t.store, "t1").await.is_empty());
    assert!(head(&*t.store, "t1").await.is_none());
    assert_eq!(engine.stats().rejected, 8);
}

#[tokio::test]
async fn store_validation_errors_reach_the_caller() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let bad = Write::update(
        ORDERS,
        Item::from([("pk".to_owned(), s("ORDER#1"))]),
        "SET #a = :v",
    );
    let e = engine
        .emit(&ctx("t1"), "AUDIT_NOTE", json!({}), vec![bad])
        .await
        .unwrap_err();
    assert!(matches!(e, EmitError::Store(_)), "{e}");
    assert!(events(&*t.store, "t1").await.is_empty());
}

#[tokio::test]
async fn contention_is_retried_then_reported() {
    for group in [false, true] {
        let t = open().await;
        let faulty = Arc::new(Faulty::new((*t.store).clone(), 2));
        let options = EngineOptions {
            group_commit: group,
            backoff_base: Duration::from_millis(1),
            ..Default::default()
        };
        let engine = engine_with(faulty.clone(), options).await;
        let ctx = ctx("t1");
        // Two contended tries, then success on the third.
        let ok = engine
            .emit(&ctx, "AUDIT_NOTE", json!({}), vec![put_order("1")])
            .await
            .unwrap();
        assert_eq!(ok.envelope.seq, 1);
        assert_eq!(faulty.calls.load(Ordering::SeqCst), 3);
        assert_eq!(engine.stats().contention_retries, 2);
        // Always contended: five tries, then the contention error.
        faulty.contended.store(1000, Ordering::SeqCst);
        faulty.calls.store(0, Ordering::SeqCst);
        let e = engine
            .emit(&ctx, "AUDIT_NOTE", json!({}), vec![put_order("2")])
            .await
            .unwrap_err();
        assert!(matches!(e, EmitError::Contention { tries: 5, .. }), "{e}");
        assert!(
            e.to_string().contains("contended") && e.to_string().contains("try again"),
            "{e}"
        );
        assert_eq!(faulty.calls.load(Ordering::SeqCst), 5);
        assert!(get_order(&*t.store, "2").await.is_none());
        // Configurable.
        let engine3 = engine_with(
            faulty.clone(),
            EngineOptions {
                group_commit: group,
                max_tries: 3,
                backoff_base: Duration::from_millis(1),
                ..Default::default()
            },
        )
        .await;
        faulty.calls.store(0, Ordering::SeqCst);
        let e = engine3
            .emit(&ctx, "AUDIT_NOTE", json!({}), vec![])
            .await
            .unwrap_err();
        assert!(matches!(e, EmitError::Contention { tries: 3, .. }), "{e}");
        assert_eq!(faulty.calls.load(Ordering::SeqCst), 3);
    }
}

#[tokio::test]
async fn two_engines_on_one_store_share_the_log() {
    // Two engines stand for two processes: each caches the head, and the
    // head condition (seq and hash) keeps the chain single.
    let t = open().await;
    let a = engine(t.store.clone()).await;
    let b = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    let mut tasks = Vec::new();
    for i in 0..200 {
        let e = if i % 2 == 0 { a.clone() } else { b.clone() };
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            let mut tries = 0;
            loop {
                match e
                    .emit(
                        &ctx,
                        "AUDIT_NOTE",
                        json!({"i": i}),
                        vec![put_order(&i.to_string())],
                    )
                    .await
                {
                    Ok(x) => return x,
                    Err(EmitError::Contention { .. }) if tries < 20 => tries += 1,
                    Err(other) => panic!("{other}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let rows = events(&*t.store, "t1").await;
    assert_eq!(rows.len(), 200);
    assert_contiguous(&rows);
    let report = a
        .verify_tenant("t1", &Default::default(), &mut |_| {})
        .await
        .unwrap();
    assert!(report.intact(), "{report:?}");
    for i in 0..200 {
        assert!(get_order(&*t.store, &i.to_string()).await.is_some());
    }
}

fn big_row(id: &str, kb: usize) -> Write {
    Write::put(
        ORDERS,
        Item::from([
            ("pk".to_owned(), s(&format!("BIG#{id}"))),
            ("blob".to_owned(), s(&"b".repeat(kb * 1024))),
        ]),
    )
}

#[tokio::test]
async fn a_transaction_over_four_megabytes_is_refused() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let writes: Vec<Write> = (0..12).map(|i| big_row(&i.to_string(), 350)).collect();
    let e = engine
        .emit(&ctx("t1"), "AUDIT_NOTE", json!({}), writes)
        .await
        .unwrap_err();
    assert!(matches!(e, EmitError::TransactionTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("4194304-byte limit"), "{e}");
    assert!(
        get(
            &*t.store,
            ORDERS,
            Item::from([("pk".to_owned(), s("BIG#0"))])
        )
        .await
        .is_none()
    );
    assert!(events(&*t.store, "t1").await.is_empty());
}

/// Extra writes into a table with a secondary index keep the index exact,
/// on the group-commit path and the direct one, and a write whose index key
/// has the wrong type fails the emit and writes nothing.
#[tokio::test]
async fn caller_writes_keep_a_tables_indexes_exact() {
    use postbox_store::ItemStore;
    for options in [EngineOptions::default(), direct()] {
        let t = open().await;
        let req: postbox_store::api::CreateTableInput = serde_json::from_value(json!({
            "TableName": "orders_by_status", "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "status", "AttributeType": "S"}],
            "GlobalSecondaryIndexes": [{"IndexName": "by-status",
                "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"}}]
        }))
        .unwrap();
        t.store.create_table(req).await.unwrap();
        let engine = engine_with(t.store.clone(), options).await;
        let ctx = ctx("t1");
        let table = "orders_by_status";
        let key = |id: &str| Item::from([("pk".to_owned(), s(&format!("t1#ORDER#{id}")))]);
        let order = |id: &str, status: &str| {
            let mut item = key(id);
            item.insert("status".into(), s(status));
            Write::put(table, item)
        };
        let by_status = |status: &'static str| {
            let store = t.store.clone();
            async move {
                let q: postbox_store::api::QueryInput = serde_json::from_value(json!({
                    "TableName": "orders_by_status", "IndexName": "by-status",
                    "KeyConditionExpression": "#s = :s", "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": {":s": {"S": status}}}))
                .unwrap();
                let mut ids: Vec<String> = store
                    .query(q)
                    .await
                    .unwrap()
                    .items
                    .unwrap()
                    .iter()
                    .map(|i| attr_s(i, "pk").to_owned())
                    .collect();
                ids.sort();
                ids
            }
        };
        for id in ["1", "2", "3"] {
            engine
                .emit(
                    &ctx,
                    "ORDER_PLACED",
                    json!({"order": id}),
                    vec![order(id, "placed")],
                )
                .await
                .unwrap();
        }
        engine
            .emit(
                &ctx,
                "ORDER_SHIPPED",
                json!({"order": "1"}),
                vec![
                    Write::update(table, key("1"), "SET #s = :s")
                        .name("#s", "status")
                        .value(":s", s("shipped")),
                    Write::delete(table, key("2")),
                ],
            )
            .await
            .unwrap();
        assert_eq!(by_status("placed").await, ["t1#ORDER#3"]);
        assert_eq!(by_status("shipped").await, ["t1#ORDER#1"]);
        let mut bad = key("4");
        bad.insert(
            "status".into(),
            postbox_item::AttributeValue::N("1".parse().unwrap()),
        );
        let e = engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": "4"}),
                vec![Write::put(table, bad)],
            )
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("Type mismatch for Index Key status"),
            "{e}"
        );
        assert_eq!(events(&*t.store, "t1").await.len(), 4);
        assert!(get(&*t.store, table, key("4")).await.is_none());
    }
}

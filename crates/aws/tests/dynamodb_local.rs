//! The engine on DynamoDB: emit, the hash chain and verify, conditions and
//! errors, against DynamoDB Local through the official SDK.
//!
//! These tests need DynamoDB Local: `scripts/test` starts it and runs them
//! with `POSTBOX_TEST_DYNAMODB_ENDPOINT` set (they are `#[ignore]`d in a
//! plain `cargo test`, and fail, not skip, when run without the endpoint).
//! Each test names its tables with a prefix of its own, so they share one
//! DynamoDB Local.

use std::sync::Arc;

use postbox_aws::DynamoStore;
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, EmitError, Engine, VerifyOptions, Write};
use postbox_item::{AttributeValue, Item};
use postbox_store::api::*;
use postbox_store::{ItemStore, StoreError};
use serde_json::json;

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]

[[subscriptions]]
name = "mirror"
glob = "ORDER_*"
lane = "DURABLE"
handler = "orders::mirror"
"#;

/// A store on DynamoDB Local whose tables start with a prefix no other
/// test uses.
async fn store(test: &str) -> Arc<DynamoStore> {
    let endpoint = std::env::var("POSTBOX_TEST_DYNAMODB_ENDPOINT").expect(
        "POSTBOX_TEST_DYNAMODB_ENDPOINT: the URL of a DynamoDB Local (scripts/test starts one)",
    );
    let config = postbox_aws::local_config(&endpoint).await;
    let prefix = format!("t{}-{test}-", fastrand::u32(..));
    Arc::new(DynamoStore::new(&config, &prefix))
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

async fn create_orders(store: &DynamoStore) {
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .unwrap();
}

fn order(tenant: &str, id: &str) -> Item {
    Item::from([
        ("pk".to_owned(), s(&format!("{tenant}#ORDER#{id}"))),
        ("status".to_owned(), s("placed")),
    ])
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: scripts/test runs it"]
async fn emits_commit_with_their_writes_and_every_chain_verifies() {
    let store = store("chain").await;
    create_orders(&store).await;
    let catalog = Catalog::from_toml(CATALOG, "test").unwrap();
    let engine = Engine::builder(store.clone(), catalog)
        .build()
        .await
        .unwrap();
    for tenant in ["acme", "globex"] {
        let ctx = Context::new(tenant, "tester").unwrap();
        for i in 0..12 {
            let put = Write::put("orders", order(tenant, &i.to_string()))
                .condition("attribute_not_exists(pk)");
            let e = engine
                .emit(&ctx, "ORDER_PLACED", json!({"order": i}), vec![put])
                .await
                .unwrap();
            assert_eq!(e.envelope.seq, i + 1);
        }
    }
    let got = store
        .get_item(GetItemInput {
            table_name: "orders".into(),
            key: Item::from([("pk".to_owned(), s("acme#ORDER#11"))]),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(got.item.unwrap()["status"], s("placed"));
    for tenant in ["acme", "globex"] {
        let report = postbox_engine::verify::verify_tenant(
            &store,
            postbox_topology::EVENTS_TABLE,
            tenant,
            &VerifyOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
        assert!(report.intact(), "{report:?}");
        assert_eq!((report.checked, report.head_seq), (12, 12));
    }
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: scripts/test runs it"]
async fn a_failed_condition_writes_nothing_and_names_the_write() {
    let store = store("cond").await;
    create_orders(&store).await;
    let catalog = Catalog::from_toml(CATALOG, "test").unwrap();
    let engine = Engine::builder(store.clone(), catalog)
        .build()
        .await
        .unwrap();
    let ctx = Context::new("acme", "tester").unwrap();
    let put = || Write::put("orders", order("acme", "1")).condition("attribute_not_exists(pk)");
    engine
        .emit(&ctx, "ORDER_PLACED", json!({}), vec![put()])
        .await
        .unwrap();
    let e = engine
        .emit(&ctx, "ORDER_PLACED", json!({}), vec![put()])
        .await
        .unwrap_err();
    assert!(
        matches!(e, EmitError::ConditionalCheckFailed { index: 0, .. }),
        "{e:?}"
    );
    // The log did not move: the next event is seq 2.
    let next = engine
        .emit(&ctx, "ORDER_PLACED", json!({}), vec![])
        .await
        .unwrap();
    assert_eq!(next.envelope.seq, 2);
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: scripts/test runs it"]
async fn errors_are_the_embedded_stores_variants() {
    let store = store("errors").await;
    create_orders(&store).await;
    let again = store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await;
    assert!(
        matches!(again, Err(StoreError::ResourceInUse(_))),
        "{again:?}"
    );
    let missing = store.describe_table("nope").await;
    assert!(
        matches!(missing, Err(StoreError::ResourceNotFound(_))),
        "{missing:?}"
    );
    store
        .put_item(PutItemInput {
            table_name: "orders".into(),
            item: order("acme", "1"),
            ..Default::default()
        })
        .await
        .unwrap();
    let refused = store
        .put_item(PutItemInput {
            table_name: "orders".into(),
            item: order("acme", "1"),
            condition_expression: Some("attribute_not_exists(pk)".into()),
            return_values_on_condition_check_failure: ReturnValuesOnConditionCheckFailure::AllOld,
            ..Default::default()
        })
        .await;
    match refused {
        Err(StoreError::ConditionalCheckFailed { item: Some(item) }) => {
            assert_eq!(item["status"], s("placed"))
        }
        other => panic!("{other:?}"),
    }
    let cancelled = store
        .transact_write_items(TransactWriteItemsInput {
            transact_items: vec![
                TransactWriteItem {
                    put: Some(TransactPut {
                        table_name: "orders".into(),
                        item: order("acme", "2"),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                TransactWriteItem {
                    condition_check: Some(ConditionCheck {
                        table_name: "orders".into(),
                        key: Item::from([("pk".to_owned(), s("acme#ORDER#1"))]),
                        condition_expression: "attribute_not_exists(pk)".into(),
                        expression_attribute_names: None,
                        expression_attribute_values: None,
                        return_values_on_condition_check_failure: Default::default(),
                    }),
                    ..Default::default()
                },
            ],
            client_request_token: None,
        })
        .await;
    match cancelled {
        Err(StoreError::TransactionCanceled { reasons }) => {
            let codes: Vec<&str> = reasons.iter().map(|r| r.code.as_str()).collect();
            assert_eq!(codes, ["None", "ConditionalCheckFailed"]);
        }
        other => panic!("{other:?}"),
    }
    let bad = store
        .get_item(GetItemInput {
            table_name: "orders".into(),
            key: Item::from([("nope".to_owned(), s("x"))]),
            ..Default::default()
        })
        .await;
    assert!(matches!(bad, Err(StoreError::Validation(_))), "{bad:?}");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local: scripts/test runs it"]
async fn the_prefix_keeps_stacks_apart() {
    let a = store("pa").await;
    let b = store("pb").await;
    create_orders(&a).await;
    assert!(
        a.list_tables()
            .await
            .unwrap()
            .contains(&"orders".to_owned())
    );
    assert!(
        !b.list_tables()
            .await
            .unwrap()
            .contains(&"orders".to_owned())
    );
    assert_eq!(
        a.describe_table("orders").await.unwrap().table_name,
        "orders"
    );
    assert!(matches!(
        b.describe_table("orders").await,
        Err(StoreError::ResourceNotFound(_))
    ));
}

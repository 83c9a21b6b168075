//! What one HTTP request costs the store must not grow with its tables: an
//! emit with an extra write visits no row of the table it writes (its
//! checks read the catalog, never a count), and a keyed emit is one
//! operation in one commit (the key's row commits with the event; no
//! answer is written after).

mod common;

use common::{emit, env, order_emit};
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::{BatchWriteItemInput, PutRequest, WriteRequest};

/// Puts `n` rows into `orders` (of a tenant no request below touches).
async fn fill_orders(store: &postbox_store::embedded::EmbeddedStore, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(25) {
        let requests = chunk
            .iter()
            .map(|i| {
                let mut item = Item::new();
                item.insert("pk".into(), AttributeValue::s(format!("filler#order#{i}")));
                item.insert("body".into(), AttributeValue::s("x".repeat(100)));
                WriteRequest {
                    put_request: Some(PutRequest { item }),
                    delete_request: None,
                }
            })
            .collect();
        let out = store
            .batch_write_item(BatchWriteItemInput {
                request_items: [("orders".to_owned(), requests)].into(),
            })
            .await
            .unwrap();
        assert!(out.unprocessed_items.is_empty());
    }
}

#[tokio::test]
async fn an_emit_with_a_write_visits_no_row_of_the_tables_it_writes() {
    let env = env().await;
    fill_orders(&env.store, 2_000).await;
    let before = env.store.rows_ranged();
    for i in 0..20 {
        let key = format!("cost-{i}");
        let a = emit(
            &env,
            &env.acme,
            &[("idempotency-key", key.as_str())],
            order_emit(&format!("C-{i}"), "acme"),
        )
        .await;
        assert_eq!(a.status, 201, "{}", a.text);
    }
    let ranged = env.store.rows_ranged() - before;
    assert_eq!(
        ranged, 0,
        "20 emits into a table of 2,000 rows visited {ranged} rows by range reads"
    );

    // A retry reads its answer back from the log: one event, one row.
    let before = env.store.rows_ranged();
    let a = emit(
        &env,
        &env.acme,
        &[("idempotency-key", "cost-3")],
        order_emit("C-3", "acme"),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json()["event"]["seq"], 4, "{}", a.text);
    assert_eq!(env.store.rows_ranged() - before, 1);
}

#[tokio::test]
async fn a_keyed_emit_is_one_operation_of_the_store() {
    let env = env().await;
    // Warm up: the first emit of a tenant may set things up.
    let a = emit(&env, &env.acme, &[], order_emit("W-1", "acme")).await;
    assert_eq!(a.status, 201, "{}", a.text);
    for i in 0..5 {
        let before = env.store.writer_stats().operations;
        let key = format!("one-commit-{i}");
        let a = emit(
            &env,
            &env.acme,
            &[("idempotency-key", key.as_str())],
            order_emit(&format!("K-{i}"), "acme"),
        )
        .await;
        assert_eq!(a.status, 201, "{}", a.text);
        let operations = env.store.writer_stats().operations - before;
        assert_eq!(operations, 1, "a keyed emit took {operations} store writes");
    }
}

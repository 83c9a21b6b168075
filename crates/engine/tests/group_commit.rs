//! Group commit per tenant: concurrent emits coalesce into transactions that
//! advance the head by n, never leave a gap or a duplicate seq, respect the
//! 100-action limit, and a caller whose own condition fails gets its own
//! error while the rest of its batch commits.

mod common;

use std::collections::HashSet;

use common::*;
use postbox_engine::{EmitError, Write};
use postbox_item::Item;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_emitters_never_leave_a_gap_or_a_duplicate() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let mut tasks = Vec::new();
    for emitter in 0..64 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let ctx = ctx("t1");
            let mut seqs = Vec::new();
            for i in 0..25 {
                let id = format!("{emitter}-{i}");
                let e = engine
                    .emit(
                        &ctx,
                        "ORDER_PLACED",
                        json!({"order": id}),
                        vec![put_order(&id)],
                    )
                    .await
                    .unwrap();
                seqs.push(e.envelope.seq);
            }
            seqs
        }));
    }
    let mut all = HashSet::new();
    for task in tasks {
        for seq in task.await.unwrap() {
            assert!(all.insert(seq), "seq {seq} handed out twice");
        }
    }
    assert_eq!(all.len(), 64 * 25);
    let rows = events(&*t.store, "t1").await;
    assert_eq!(rows.len(), 64 * 25);
    assert_contiguous(&rows);
    // Every event's caller write is there, and it is the right one.
    for row in &rows {
        let payload: serde_json::Value = serde_json::from_str(attr_s(row, "payload")).unwrap();
        assert!(
            get_order(&*t.store, payload["order"].as_str().unwrap())
                .await
                .is_some()
        );
    }
    let stats = engine.stats();
    assert_eq!(stats.emitted, 1600);
    assert!(
        stats.transactions < stats.emitted / 4,
        "emits were coalesced: {stats:?}"
    );
    let report = engine
        .verify_tenant("t1", &Default::default(), &mut |_| {})
        .await
        .unwrap();
    assert!(report.intact() && report.checked == 1600, "{report:?}");
}

#[tokio::test]
async fn one_callers_failed_condition_does_not_sink_the_batch() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    // Orders 5, 17 and 33 exist already, so the emits that create them fail.
    for id in ["5", "17", "33"] {
        engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": id}),
                vec![put_order(id)],
            )
            .await
            .unwrap();
    }
    let before = engine.stats().transactions;
    // Spawned together on this single-threaded runtime, all 40 are queued
    // before the batcher runs, so they share transactions.
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (engine, ctx) = (engine.clone(), ctx.clone());
            tokio::spawn(async move {
                let id = i.to_string();
                let writes = vec![
                    Write::put(ORDERS, order_item(&format!("side-{i}"))),
                    put_order(&id),
                ];
                (
                    i,
                    engine
                        .emit(&ctx, "ORDER_PLACED", json!({"order": id}), writes)
                        .await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        if [5, 17, 33].contains(&i) {
            match outcome {
                Err(EmitError::ConditionalCheckFailed {
                    index: 1, write, ..
                }) => {
                    assert!(write.contains(&format!("ORDER#{i}")), "{write}")
                }
                other => panic!("emit {i}: expected its own ConditionalCheckFailed, got {other:?}"),
            }
            assert!(
                get_order(&*t.store, &format!("side-{i}")).await.is_none(),
                "no trace of the failed emit {i}"
            );
        } else {
            outcome.unwrap_or_else(|e| panic!("emit {i} should commit: {e}"));
            assert!(get_order(&*t.store, &format!("side-{i}")).await.is_some());
        }
    }
    let rows = events(&*t.store, "t1").await;
    assert_eq!(rows.len(), 3 + 37);
    assert_contiguous(&rows);
    let stats = engine.stats();
    // 40 emits in transactions of at most 16 (the default cap): three, each
    // committed again without the caller whose write failed.
    assert!(
        stats.transactions - before <= 6,
        "the 37 emits shared transactions: {stats:?}"
    );
    assert_eq!(stats.condition_failures, 3);
}

#[tokio::test]
async fn batches_respect_the_hundred_action_limit() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    // 10 writes each: 11 actions per event, so at most 9 events per transaction.
    let tasks: Vec<_> = (0..45)
        .map(|i| {
            let (engine, ctx) = (engine.clone(), ctx.clone());
            tokio::spawn(async move {
                let writes = (0..10).map(|w| put_order(&format!("{i}-{w}"))).collect();
                engine
                    .emit(&ctx, "AUDIT_NOTE", json!({"i": i}), writes)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_contiguous(&events(&*t.store, "t1").await);
    assert!(engine.stats().transactions >= 5, "{:?}", engine.stats());
}

#[tokio::test]
async fn a_batch_the_store_refuses_as_a_whole_is_retried_one_by_one() {
    // Two callers updating the same item in one batch would make one
    // transaction with two actions on one item, which the store refuses
    // without naming an action: each caller then commits alone.
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    let key = Item::from([("pk".to_owned(), s("ORDER#counter"))]);
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (engine, ctx, key) = (engine.clone(), ctx.clone(), key.clone());
            tokio::spawn(async move {
                let w = Write::update(ORDERS, key, "ADD hits :one")
                    .value(":one", postbox_item::AttributeValue::n(1));
                engine
                    .emit(&ctx, "AUDIT_NOTE", json!({}), vec![w])
                    .await
                    .unwrap()
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let counter = get(&*t.store, ORDERS, key).await.unwrap();
    assert_eq!(attr_n(&counter, "hits"), 6);
    assert_contiguous(&events(&*t.store, "t1").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_commit_independently() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let ctx = ctx(&format!("tenant-{}", i % 8));
                for j in 0..20 {
                    engine
                        .emit(&ctx, "AUDIT_NOTE", json!({"i": i, "j": j}), vec![])
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    for tenant in 0..8 {
        let rows = events(&*t.store, &format!("tenant-{tenant}")).await;
        assert_eq!(rows.len(), 100);
        assert_contiguous(&rows);
    }
}

#[tokio::test]
async fn batches_respect_the_four_megabyte_limit() {
    // Each emit carries about 1 MB of writes, so at most three fit one
    // transaction; ten concurrent emits must be split, and all commit.
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let (engine, ctx) = (engine.clone(), ctx.clone());
            tokio::spawn(async move {
                let writes = (0..3)
                    .map(|w| {
                        Write::put(
                            ORDERS,
                            Item::from([
                                ("pk".to_owned(), s(&format!("BIG#{i}-{w}"))),
                                ("blob".to_owned(), s(&"b".repeat(360 * 1024))),
                            ]),
                        )
                    })
                    .collect();
                engine
                    .emit(&ctx, "AUDIT_NOTE", json!({"i": i}), writes)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_contiguous(&events(&*t.store, "t1").await);
    assert!(engine.stats().transactions >= 4, "{:?}", engine.stats());
}

#[tokio::test]
async fn an_invalid_write_fails_only_its_own_emit() {
    // One emit's Put is over the 400 KB item limit: the store refuses the
    // whole batch without naming an action, the batcher retries each event
    // alone, and only the culprit fails.
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let (engine, ctx) = (engine.clone(), ctx.clone());
            tokio::spawn(async move {
                let id = i.to_string();
                let mut item = order_item(&id);
                if i == 7 {
                    item.insert("blob".to_owned(), s(&"b".repeat(410 * 1024)));
                }
                (
                    i,
                    engine
                        .emit(
                            &ctx,
                            "AUDIT_NOTE",
                            json!({"i": i}),
                            vec![Write::put(ORDERS, item)],
                        )
                        .await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        if i == 7 {
            let e = outcome.unwrap_err();
            assert!(matches!(e, EmitError::Store(_)), "{e}");
            assert!(get_order(&*t.store, "7").await.is_none());
        } else {
            outcome.unwrap_or_else(|e| panic!("emit {i}: {e}"));
            assert!(get_order(&*t.store, &i.to_string()).await.is_some());
        }
    }
    let rows = events(&*t.store, "t1").await;
    assert_eq!(rows.len(), 11);
    assert_contiguous(&rows);
}

/// A tenant's batcher idles for five seconds before it retires, holding the
/// store; once the engine's last clone is gone it ends at once, so a server
/// that waits for its store's closing checkpoint does not wait for it. On
/// the paused clock time moves only while every task waits on a timer: the
/// store closes with none of it passed.
#[tokio::test(start_paused = true)]
async fn the_last_engine_clone_gone_the_batchers_let_go_of_the_store() {
    let TestStore { store, dir: _dir } = open().await;
    let engine = engine(store.clone()).await;
    let copy = engine.clone();
    for tenant in ["t1", "t2"] {
        let ctx = ctx(tenant);
        engine
            .emit(
                &ctx,
                "ORDER_PLACED",
                json!({"order": tenant}),
                vec![put_order(tenant)],
            )
            .await
            .unwrap();
    }
    let closed = store.closed();
    drop((engine, store));
    // One clone gone, the others still emit (their tenants' batchers kept).
    let ctx = ctx("t1");
    copy.emit(
        &ctx,
        "ORDER_PLACED",
        json!({"order": "t1-2"}),
        vec![put_order("t1-2")],
    )
    .await
    .unwrap();
    let dropped = tokio::time::Instant::now();
    drop(copy);
    closed.await;
    assert_eq!(
        dropped.elapsed(),
        std::time::Duration::ZERO,
        "the store closed only once the batchers idled out"
    );
}

//! The single writer: group commit of concurrent requests, isolation of a
//! failed request inside a batch, the `submit` hook for other modules, and
//! the stop after a storage failure.

mod common;

use common::*;
use postbox_item::AttributeValue;
use postbox_store::{ChangeStreams, ItemStore, StoreError};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_all_commit_and_failures_do_not_disturb_their_batch() {
    let s = open_with_table(None).await;
    for i in (0..200).step_by(2) {
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}}}),
        )
        .await
        .unwrap();
    }
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = s.store.clone();
            tokio::spawn(async move {
                put(
                    &store,
                    json!({"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}, "v": {"N": "1"}},
                    "ConditionExpression": "attribute_not_exists(pk)"}),
                )
                .await
            })
        })
        .collect();
    let mut failed = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(_) => assert!(i % 2 == 1),
            Err(StoreError::ConditionalCheckFailed { .. }) => {
                assert!(i % 2 == 0);
                failed += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(failed, 100);
    let out = scan(
        &s,
        json!({"TableName": "tbl", "FilterExpression": "attribute_exists(v)"}),
    )
    .await
    .unwrap();
    assert_eq!(out.count, 100);
    assert_eq!(
        s.stream_head("tbl").await.unwrap(),
        200,
        "one record per successful write"
    );
}

#[tokio::test]
async fn submitted_operations_stage_their_changes_until_they_succeed() {
    let s = open_with_table(None).await;
    let seen = s
        .submit(|ctx| {
            let key = postbox_item::item_from_json(&json!({"pk": {"S": "a"}})).unwrap();
            ctx.put_item(
                "tbl",
                postbox_item::item_from_json(&json!({"pk": {"S": "a"}, "v": {"N": "1"}})).unwrap(),
            )?;
            let staged = ctx.get_item("tbl", &key)?;
            ctx.set_checkpoint("tbl", "relay", 7)?;
            Ok(staged)
        })
        .await
        .unwrap();
    assert_eq!(
        seen.unwrap()["v"],
        AttributeValue::n(1),
        "an operation reads its own staged writes"
    );
    assert_eq!(s.checkpoint("tbl", "relay").await.unwrap(), Some(7));
    assert_eq!(
        s.stream_head("tbl").await.unwrap(),
        1,
        "hook writes keep the stream in step"
    );

    let r: Result<(), _> = s
        .submit(|ctx| {
            ctx.put_item(
                "tbl",
                postbox_item::item_from_json(&json!({"pk": {"S": "b"}})).unwrap(),
            )?;
            Err(StoreError::validation("changed my mind"))
        })
        .await;
    check_err(r, "ValidationException", "changed my mind");
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "b"}})).await,
        None,
        "a failed operation writes nothing"
    );
    assert_eq!(s.stream_head("tbl").await.unwrap(), 1);
}

#[tokio::test]
async fn an_item_read_encoded_is_the_item_stored_or_staged() {
    let s = open_with_table(None).await;
    let item = |v: serde_json::Value| postbox_item::item_from_json(&v).unwrap();
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"S": "stored"}}}),
    )
    .await
    .unwrap();
    let (stored, staged, missing) = s
        .submit(move |ctx| {
            let stored = ctx.get_item_encoded("tbl", &item(json!({"pk": {"S": "a"}})))?;
            ctx.put_item("tbl", item(json!({"pk": {"S": "b"}, "v": {"N": "2"}})))?;
            let staged = ctx.get_item_encoded("tbl", &item(json!({"pk": {"S": "b"}})))?;
            let missing = ctx.get_item_encoded("tbl", &item(json!({"pk": {"S": "c"}})))?;
            Ok((stored, staged, missing))
        })
        .await
        .unwrap();
    let decoded = |b: Option<Vec<u8>>| postbox_item::decode_item(&b.unwrap()).unwrap();
    assert_eq!(decoded(stored)["v"], AttributeValue::S("stored".into()));
    assert_eq!(
        decoded(staged)["v"],
        AttributeValue::n(2),
        "staged changes first"
    );
    assert_eq!(missing, None);
}

#[tokio::test]
async fn a_storage_failure_stops_all_later_writes_but_not_reads() {
    let s = open_with_table(None).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "kept"}}}),
    )
    .await
    .unwrap();
    let r: Result<(), _> = s
        .submit(|ctx| {
            ctx.put_item(
                "tbl",
                postbox_item::item_from_json(&json!({"pk": {"S": "lost"}})).unwrap(),
            )?;
            Err(StoreError::Storage("simulated I/O error".into()))
        })
        .await;
    check_err(r, "InternalServerError", "");
    check_err(
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "after"}}}),
        )
        .await,
        "InternalServerError",
        "stopped accepting writes",
    );
    assert!(get(&s, "tbl", json!({"pk": {"S": "kept"}})).await.is_some());
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "lost"}})).await, None);
}

#[tokio::test]
async fn a_panicking_operation_fails_its_batch_and_stops_the_store() {
    let s = open_with_table(None).await;
    let r: Result<(), _> = s.submit(|_| panic!("bug in a hook")).await;
    check_err(r, "InternalServerError", "panicked");
    check_err(
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}})).await,
        "InternalServerError",
        "",
    );
    let _ = s.describe_table("tbl").await.unwrap();
}

#[tokio::test]
async fn a_batch_that_changes_nothing_is_not_committed() {
    let s = open_with_table(None).await;
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}}))
        .await
        .unwrap();
    let before = s.writer_stats();
    let _ = put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ConditionExpression": "attribute_not_exists(pk)"})).await;
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}}))
        .await
        .unwrap();
    delete(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "missing"}}}),
    )
    .await
    .unwrap();
    assert_eq!(
        s.writer_stats().commits,
        before.commits,
        "failed or no-op writes cost no commit (no fsync)"
    );
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "b"}}}))
        .await
        .unwrap();
    assert_eq!(s.writer_stats().commits, before.commits + 1);
}

/// `WriteContext::on_commit` runs once the batch has committed, whatever
/// its operation returned (an operation's raw writes commit with the
/// batch), before the operation's caller is answered; a batch that fails
/// drops it unrun.
#[tokio::test]
async fn commit_hooks_run_when_the_batch_commits_and_never_when_it_fails() {
    let s = open_with_table(None).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let hooked = |tx: &tokio::sync::mpsc::UnboundedSender<&'static str>, what| {
        let tx = tx.clone();
        move || {
            let _ = tx.send(what);
        }
    };
    let hook = hooked(&tx, "ok");
    s.submit(move |ctx| {
        ctx.put_item(
            "tbl",
            postbox_item::item_from_json(&json!({"pk": {"S": "a"}})).unwrap(),
        )?;
        ctx.on_commit(hook);
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(rx.try_recv().ok(), Some("ok"), "ran before the answer");

    let hook = hooked(&tx, "refused op");
    let r: Result<(), _> = s
        .submit(move |ctx| {
            ctx.on_commit(hook);
            Err(StoreError::validation("refused"))
        })
        .await;
    check_err(r, "ValidationException", "refused");
    assert_eq!(rx.try_recv().ok(), Some("refused op"));

    let hook = hooked(&tx, "failed batch");
    let r: Result<(), _> = s
        .submit(move |ctx| {
            ctx.on_commit(hook);
            Err(StoreError::Storage("simulated I/O error".into()))
        })
        .await;
    check_err(r, "InternalServerError", "");
    drop(tx);
    assert_eq!(rx.recv().await, None, "a failed batch ran its hook");
}

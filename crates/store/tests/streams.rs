//! Change streams: one record per committed change, per view type, in
//! commit order; none for writes that change nothing; checkpoints; waiting
//! without polling; retention.

mod common;

use std::time::Duration;

use common::*;
use postbox_store::api::{EventName, StreamRecord};
use postbox_store::embedded::EmbeddedStore;
use postbox_store::{ChangeStreams, ItemStore};
use serde_json::json;

async fn records(s: &EmbeddedStore, table: &str) -> Vec<StreamRecord> {
    s.read_stream(table, 0, 1000).await.unwrap()
}

fn events(rs: &[StreamRecord]) -> Vec<EventName> {
    rs.iter().map(|r| r.event_name).collect()
}

/// Puts `{pk: k}` into `tbl`.
async fn put_pk(s: &EmbeddedStore, k: &str) {
    put(s, json!({"TableName": "tbl", "Item": {"pk": {"S": k}}}))
        .await
        .unwrap();
}

/// Puts `{pk: k, v: n}` into `tbl`.
async fn put_v(s: &EmbeddedStore, k: &str, n: u32) {
    put(
        s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": k}, "v": {"N": n.to_string()}}}),
    )
    .await
    .unwrap();
}

/// Sets `v` of item `k` of `tbl` to `n`.
async fn set_v(s: &EmbeddedStore, k: &str, n: u32) {
    update(
        s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": k}}, "UpdateExpression": "SET v = :v",
        "ExpressionAttributeValues": {":v": {"N": n.to_string()}}}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn insert_modify_remove_with_both_images() {
    let s = open_with_table(None).await;
    put_v(&s, "a", 1).await;
    set_v(&s, "a", 2).await;
    delete(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}}))
        .await
        .unwrap();
    let rs = records(&s, "tbl").await;
    assert_eq!(
        events(&rs),
        [EventName::Insert, EventName::Modify, EventName::Remove]
    );
    assert!(
        rs.windows(2)
            .all(|w| w[0].sequence_number < w[1].sequence_number)
    );
    assert_eq!(rs[0].keys, item(json!({"pk": {"S": "a"}})));
    assert_eq!(
        (rs[0].old_image.clone(), rs[0].new_image.clone()),
        (None, Some(item(json!({"pk": {"S": "a"}, "v": {"N": "1"}}))))
    );
    assert_eq!(
        rs[1].old_image,
        Some(item(json!({"pk": {"S": "a"}, "v": {"N": "1"}})))
    );
    assert_eq!(
        rs[1].new_image,
        Some(item(json!({"pk": {"S": "a"}, "v": {"N": "2"}})))
    );
    assert_eq!(
        (rs[2].old_image.is_some(), rs[2].new_image.is_some()),
        (true, false)
    );
    assert_eq!(rs[0].approximate_creation_time_ms, NOW_MS);
    assert_eq!(s.stream_head("tbl").await.unwrap(), rs[2].sequence_number);
}

#[tokio::test]
async fn images_follow_the_view_type() {
    let s = open();
    for (name, view) in [
        ("keys", "KEYS_ONLY"),
        ("new", "NEW_IMAGE"),
        ("old", "OLD_IMAGE"),
    ] {
        create(&s, name, None, Some(view)).await;
        put(
            &s,
            json!({"TableName": name, "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}}),
        )
        .await
        .unwrap();
        put(
            &s,
            json!({"TableName": name, "Item": {"pk": {"S": "a"}, "v": {"N": "2"}}}),
        )
        .await
        .unwrap();
        let rs = records(&s, name).await;
        let modify = &rs[1];
        assert_eq!(modify.event_name, EventName::Modify);
        assert_eq!(modify.keys, item(json!({"pk": {"S": "a"}})));
        assert_eq!(modify.new_image.is_some(), view == "NEW_IMAGE", "{view}");
        assert_eq!(modify.old_image.is_some(), view == "OLD_IMAGE", "{view}");
    }
}

#[tokio::test]
async fn writes_that_change_nothing_leave_no_record() {
    let s = open_with_table(None).await;
    let it = json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1.0"}, "s": {"SS": ["x", "y"]}}});
    put(&s, it.clone()).await.unwrap();
    put(&s, it).await.unwrap();
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}, "s": {"SS": ["y", "x"]}}}))
        .await
        .unwrap();
    update(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "REMOVE nothing"}))
        .await
        .unwrap();
    delete(
        &s,
        json!({"TableName": "tbl", "Key": {"pk": {"S": "missing"}}}),
    )
    .await
    .unwrap();
    let _ = put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ConditionExpression": "attribute_not_exists(pk)"}),
    )
    .await;
    assert_eq!(events(&records(&s, "tbl").await), [EventName::Insert]);
}

#[tokio::test]
async fn transactions_write_one_record_per_changed_item_in_one_commit() {
    let s = open_with_table(None).await;
    transact(
        &s,
        json!([
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "a"}}}},
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "b"}}}},
            {"ConditionCheck": {"TableName": "tbl", "Key": {"pk": {"S": "c"}}, "ConditionExpression": "attribute_not_exists(pk)"}}
        ]),
    )
    .await
    .unwrap();
    let rs = records(&s, "tbl").await;
    assert_eq!(events(&rs), [EventName::Insert, EventName::Insert]);
    assert_eq!(
        rs[0].approximate_creation_time_ms,
        rs[1].approximate_creation_time_ms
    );
}

#[tokio::test]
async fn reading_resumes_after_a_sequence_number() {
    let s = open_with_table(None).await;
    for i in 0..5 {
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}}}),
        )
        .await
        .unwrap();
    }
    let all = records(&s, "tbl").await;
    let rest = s
        .read_stream("tbl", all[1].sequence_number, 2)
        .await
        .unwrap();
    assert_eq!(rest, all[2..4].to_vec());
}

#[tokio::test]
async fn tables_without_a_stream_have_none_to_read() {
    let s = open();
    create(&s, "plain", None, None).await;
    check_err(
        s.read_stream("plain", 0, 10).await,
        "ValidationException",
        "no stream",
    );
    check_err(
        s.read_stream("nope", 0, 10).await,
        "ResourceNotFoundException",
        "",
    );
}

#[tokio::test]
async fn checkpoints_are_durable_across_reopen() {
    let s = open_with_table(None).await;
    assert_eq!(s.checkpoint("tbl", "relay").await.unwrap(), None);
    s.set_checkpoint("tbl", "relay", 42).await.unwrap();
    assert_eq!(s.checkpoint("tbl", "relay").await.unwrap(), Some(42));
    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    let reopened = EmbeddedStore::open(&path, options(clock)).unwrap();
    assert_eq!(reopened.checkpoint("tbl", "relay").await.unwrap(), Some(42));
    drop(dir);
}

#[tokio::test]
async fn waiting_wakes_on_commit_and_times_out_otherwise() {
    let s = open_with_table(None).await;
    assert!(
        !s.wait_for_records("tbl", 0, Duration::from_millis(50))
            .await
            .unwrap()
    );
    let store = s.store.clone();
    let waiter = tokio::spawn(async move {
        store
            .wait_for_records("tbl", 0, Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = std::time::Instant::now();
    put_pk(&s, "a").await;
    assert!(waiter.await.unwrap().unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "woken by the commit, not the timeout"
    );
    assert!(
        s.wait_for_records("tbl", 0, Duration::from_millis(1))
            .await
            .unwrap(),
        "records already there"
    );
}

#[tokio::test]
async fn retention_trims_old_records_and_reading_before_them_is_an_error() {
    let s = open_with_table(None).await;
    put_pk(&s, "old1").await;
    put_pk(&s, "old2").await;
    s.clock.advance_ms(25 * 3600 * 1000);
    put_pk(&s, "new").await;
    s.sweep_now().await.unwrap();
    let rs = records(&s, "tbl").await;
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].keys, item(json!({"pk": {"S": "new"}})));
    check_err(
        s.read_stream("tbl", 1, 10).await,
        "TrimmedDataAccessException",
        "retention",
    );
    assert_eq!(
        s.read_stream("tbl", 2, 10).await.unwrap().len(),
        1,
        "reading from the trim point is fine"
    );
    assert_eq!(
        s.stream_head("tbl").await.unwrap(),
        3,
        "sequence numbers never restart"
    );
}

#[tokio::test]
async fn delete_table_drops_its_stream_and_a_new_table_starts_afresh() {
    let s = open_with_table(None).await;
    put_pk(&s, "a").await;
    // Keeps the insert's image beside the stream.
    put_v(&s, "a", 1).await;
    s.set_checkpoint("tbl", "r", 1).await.unwrap();
    s.delete_table("tbl").await.unwrap();
    create(&s, "tbl", None, Some("NEW_IMAGE")).await;
    assert_eq!(records(&s, "tbl").await, vec![]);
    assert_eq!(s.checkpoint("tbl", "r").await.unwrap(), None);
    assert_eq!(get(&s, "tbl", json!({"pk": {"S": "a"}})).await, None);
    assert_eq!(saved_images_at_close(s), [], "dropped with the table");
}

#[tokio::test]
async fn reading_can_start_inside_one_commits_records() {
    let s = open_with_table(None).await;
    let actions: Vec<_> = (0..5)
        .map(|i| json!({"Put": {"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}}}}))
        .collect();
    transact(&s, json!(actions)).await.unwrap();
    put_pk(&s, "later").await;
    let all = records(&s, "tbl").await;
    assert_eq!(all.len(), 6);
    assert!(
        all.windows(2)
            .all(|w| w[1].sequence_number == w[0].sequence_number + 1)
    );
    for after in 0..all.len() {
        let from = s
            .read_stream("tbl", all[after].sequence_number, 2)
            .await
            .unwrap();
        let expected: Vec<_> = all[after + 1..].iter().take(2).cloned().collect();
        assert_eq!(from, expected, "after record {after}");
    }
}

/// Rows of the store file's `stream_images` table: the images kept for
/// insert records whose items changed after them.
fn saved_images(path: &std::path::Path) -> Vec<(u32, u64)> {
    use redb::{ReadableDatabase, ReadableTable};
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let def: redb::TableDefinition<(u32, u64), &[u8]> = redb::TableDefinition::new("stream_images");
    match txn.open_table(def) {
        Ok(t) => t.iter().unwrap().map(|r| r.unwrap().0.value()).collect(),
        Err(redb::TableError::TableDoesNotExist(_)) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

/// Closes the store and reads [`saved_images`] of its file.
fn saved_images_at_close(s: TestStore) -> Vec<(u32, u64)> {
    let path = s.dir.path().join("store.redb");
    let TestStore { store, dir, .. } = s;
    drop(store);
    let saved = saved_images(&path);
    drop(dir);
    saved
}

#[tokio::test]
async fn an_inserts_record_keeps_its_image_whatever_happens_to_the_item_after() {
    // An insert's record refers to its item's row rather than copying it;
    // every later change of the item must leave the record as it was.
    let s = open_with_table(None).await;
    for k in ["a", "b", "c", "d"] {
        put_v(&s, k, 1).await;
    }
    set_v(&s, "a", 2).await;
    delete(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "b"}}}))
        .await
        .unwrap();
    put_v(&s, "c", 3).await;
    // A second change of "a": its insert's image was kept by the first.
    set_v(&s, "a", 4).await;
    let expected = |rs: &[StreamRecord]| {
        let one = |k: &str| Some(item(json!({"pk": {"S": k}, "v": {"N": "1"}})));
        assert_eq!(
            rs.iter().map(|r| r.new_image.clone()).collect::<Vec<_>>(),
            [
                one("a"),
                one("b"),
                one("c"),
                one("d"),
                Some(item(json!({"pk": {"S": "a"}, "v": {"N": "2"}}))),
                None,
                Some(item(json!({"pk": {"S": "c"}, "v": {"N": "3"}}))),
                Some(item(json!({"pk": {"S": "a"}, "v": {"N": "4"}}))),
            ]
        );
        assert_eq!(rs[5].old_image, one("b"));
    };
    expected(&records(&s, "tbl").await);
    // The same after a reopen, which replays the commit log.
    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    let reopened = EmbeddedStore::open(&path, options(clock.clone())).unwrap();
    expected(&records(&reopened, "tbl").await);
    drop(reopened);
    assert_eq!(
        saved_images(&path),
        [(1, 1), (1, 2), (1, 3)],
        "one image for each insert whose item changed; none for d"
    );
    drop(dir);
}

#[tokio::test]
async fn trimming_a_record_drops_the_image_kept_for_it() {
    let s = open_with_table(None).await;
    put_pk(&s, "a").await;
    put_pk(&s, "b").await;
    delete(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}}))
        .await
        .unwrap();
    s.clock.advance_ms(25 * 3600 * 1000);
    s.sweep_now().await.unwrap();
    assert_eq!(records(&s, "tbl").await, vec![], "all three trimmed");
    // "b"'s insert record is gone, so changing it keeps nothing.
    delete(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "b"}}}))
        .await
        .unwrap();
    let rs = records(&s, "tbl").await;
    assert_eq!(events(&rs), [EventName::Remove]);
    assert_eq!(
        rs[0].old_image,
        Some(item(json!({"pk": {"S": "b"}}))),
        "the old image of a trimmed insert's item is still the item"
    );
    assert_eq!(saved_images_at_close(s), [], "trimmed with its record");
}

#[tokio::test]
async fn one_operation_that_inserts_then_changes_an_item_keeps_every_image() {
    // A hook operation's later changes of a key see the insert it staged,
    // which is written (and marked for its record) only when it succeeds.
    let s = open_with_table(None).await;
    let v = |n: u32| item(json!({"pk": {"S": "a"}, "v": {"N": n.to_string()}}));
    s.submit(move |ctx| {
        ctx.put_item("tbl", v(1))?;
        ctx.put_item("tbl", v(1))?; // changes nothing: no record
        ctx.put_item("tbl", v(2))?;
        ctx.put_item("tbl", v(3))?;
        ctx.delete_item("tbl", &item(json!({"pk": {"S": "a"}})))?;
        Ok(())
    })
    .await
    .unwrap();
    let rs = records(&s, "tbl").await;
    assert_eq!(
        rs.iter()
            .map(|r| (r.event_name, r.new_image.clone(), r.old_image.clone()))
            .collect::<Vec<_>>(),
        [
            (EventName::Insert, Some(v(1)), None),
            (EventName::Modify, Some(v(2)), Some(v(1))),
            (EventName::Modify, Some(v(3)), Some(v(2))),
            (EventName::Remove, None, Some(v(3))),
        ]
    );
}

/// A record read moments after its commit takes its image from the writer's
/// hand-off; a later read resolves it from the file. Both give the record
/// as it was committed: for a row changed since, beside a transaction that
/// was refused, and for a table made again under the same name while the
/// old one's images were never read.
#[tokio::test]
async fn an_image_handed_over_by_the_writer_is_the_one_in_the_file() {
    let s = open_with_table(None).await;
    put_v(&s, "a", 1).await;
    put_v(&s, "a", 2).await;
    put_v(&s, "b", 3).await;
    let refused = transact(
        &s,
        json!([
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "c"}, "v": {"N": "9"}}}},
            {"Put": {"TableName": "tbl", "Item": {"pk": {"S": "a"}},
                "ConditionExpression": "attribute_not_exists(pk)"}}
        ]),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    put_v(&s, "c", 4).await;
    let v = |k: &str, n: u32| Some(item(json!({"pk": {"S": k}, "v": {"N": n.to_string()}})));
    let expected = [
        (EventName::Insert, None, v("a", 1)),
        (EventName::Modify, v("a", 1), v("a", 2)),
        (EventName::Insert, None, v("b", 3)),
        (EventName::Insert, None, v("c", 4)),
    ];
    let first = s.read_committed_stream("tbl", 0, 100).await.unwrap();
    let shape = |rs: &[StreamRecord]| {
        rs.iter()
            .map(|r| (r.event_name, r.old_image.clone(), r.new_image.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&first), expected);
    assert_eq!(s.read_committed_stream("tbl", 0, 100).await.unwrap(), first);
    assert_eq!(records(&s, "tbl").await, first);

    put_v(&s, "d", 5).await;
    s.delete_table("tbl").await.unwrap();
    create(&s, "tbl", None, Some("NEW_AND_OLD_IMAGES")).await;
    put_v(&s, "e", 6).await;
    let rs = s.read_committed_stream("tbl", 0, 100).await.unwrap();
    assert_eq!(shape(&rs), [(EventName::Insert, None, v("e", 6))]);
}

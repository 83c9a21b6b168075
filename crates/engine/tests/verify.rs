//! The hash chain and verify: hashes recomputed from the stored rows, the
//! first broken seq reported with what is wrong there, incremental runs from
//! the checkpoint, progress callbacks, and tampering with any byte of a
//! stored event (through the store's API) caught at the right seq.

mod common;

use std::sync::Arc;

use common::*;
use postbox_engine::chain::{self, EnvelopeFields, GENESIS};
use postbox_engine::{Engine, Problem, VerifyOptions};
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::{DeleteItemInput, PutItemInput};
use postbox_store::embedded::EmbeddedStore;
use serde_json::json;

async fn log_of(n: usize) -> (TestStore, Engine<EmbeddedStore>) {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    for i in 0..n {
        let payload = json!({"order": format!("o{i}"), "note": "caf\u{e9} \u{1f600} \"q\"\n", "n": i as f64 / 3.0});
        engine
            .emit(&ctx, "ORDER_PLACED", payload, vec![])
            .await
            .unwrap();
    }
    (t, engine)
}

fn full() -> VerifyOptions {
    VerifyOptions {
        full: true,
        update_checkpoint: false,
        ..Default::default()
    }
}

async fn put(store: &EmbeddedStore, item: Item) {
    store
        .put_item(PutItemInput {
            table_name: EVENTS.to_owned(),
            item,
            ..Default::default()
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn stored_hashes_are_the_chain_from_genesis() {
    let (t, _engine) = log_of(5).await;
    let mut prev = GENESIS;
    for row in events(&*t.store, "t1").await {
        let (f, _, stored) = postbox_engine::layout::fields_of(&row).unwrap();
        let mut canonical = String::new();
        chain::canonical_envelope(&f, &mut canonical);
        // The canonical form is also what the generic RFC 8785 writer makes
        // of the envelope.
        let (env, _) = postbox_engine::layout::envelope_of(&row).unwrap();
        assert_eq!(
            canonical,
            postbox_engine::canonical::to_canonical_string(&serde_json::to_value(&env).unwrap())
        );
        let hash = chain::link(&prev, canonical.as_bytes());
        assert_eq!(chain::to_hex(&hash), stored);
        prev = hash;
        let _: EnvelopeFields = f;
    }
}

#[tokio::test]
async fn verify_is_incremental_and_reports_progress() {
    let (t, engine) = log_of(25).await;
    let options = VerifyOptions {
        page_size: 10,
        ..Default::default()
    };
    let mut seen = Vec::new();
    let r = engine
        .verify_tenant("t1", &options, &mut |p| {
            seen.push((p.checked, p.seq, p.head_seq))
        })
        .await
        .unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!((r.from_seq, r.checked, r.head_seq), (0, 25, 25));
    assert_eq!(seen, vec![(10, 10, 25), (20, 20, 25), (25, 25, 25)]);
    // The next run checks only what is new.
    let r = engine
        .verify_tenant("t1", &options, &mut |_| {})
        .await
        .unwrap();
    assert_eq!((r.from_seq, r.checked), (25, 0));
    for _ in 0..3 {
        engine
            .emit(&ctx("t1"), "AUDIT_NOTE", json!({}), vec![])
            .await
            .unwrap();
    }
    let r = engine
        .verify_tenant("t1", &options, &mut |_| {})
        .await
        .unwrap();
    assert!(r.intact());
    assert_eq!((r.from_seq, r.checked, r.head_seq), (25, 3, 28));
    let checkpoint = get(
        &*t.store,
        EVENTS,
        Item::from([
            ("pk".to_owned(), s("TENANT#t1#VERIFIED")),
            ("sk".to_owned(), s("VERIFIED")),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(attr_n(&checkpoint, "seq"), 28);
    // All tenants.
    engine
        .emit(&ctx("t2"), "AUDIT_NOTE", json!({}), vec![])
        .await
        .unwrap();
    let all = engine.verify_all(&full(), &mut |_| {}).await.unwrap();
    let mut names: Vec<_> = all
        .iter()
        .map(|r| (r.tenant.clone(), r.checked, r.intact()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![("t1".to_owned(), 28, true), ("t2".to_owned(), 1, true)]
    );
}

/// Flips one byte of attribute `name` of event `seq`, verifies, restores.
async fn tamper_and_verify(
    t: &TestStore,
    engine: &Engine<EmbeddedStore>,
    seq: usize,
    name: &str,
    at: usize,
) -> Option<(u64, Problem)> {
    let rows = events(&*t.store, "t1").await;
    let original = rows[seq - 1].clone();
    let mut tampered = original.clone();
    let value = match &original[name] {
        AttributeValue::S(s) => {
            let mut bytes = s.clone().into_bytes();
            let i = at % bytes.len();
            // Stay valid UTF-8: change an ASCII byte to another ASCII byte.
            if bytes[i].is_ascii() {
                bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            } else {
                return Some((seq as u64, Problem::Malformed("skipped non-ASCII".into())));
            }
            AttributeValue::S(String::from_utf8(bytes).unwrap())
        }
        AttributeValue::N(n) => AttributeValue::n(n.to_i64().unwrap() + 1000),
        AttributeValue::Null => AttributeValue::S("forged".into()),
        other => panic!("unexpected {other:?}"),
    };
    tampered.insert(name.to_owned(), value);
    let label = format!("{name}[{at}] of event {seq}");
    verify_tampered(t, engine, tampered, original, &label).await
}

/// Stores `tampered`, verifies (the store's own read path and the Query
/// path must agree), puts `original` back; what verify found broken.
async fn verify_tampered(
    t: &TestStore,
    engine: &Engine<EmbeddedStore>,
    tampered: Item,
    original: Item,
    label: &str,
) -> Option<(u64, Problem)> {
    put(&t.store, tampered).await;
    let r = engine
        .verify_tenant("t1", &full(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(r, via_query(t).await, "{label}");
    put(&t.store, original).await;
    r.broken
}

/// The same full verify through Query (the trait's default
/// `query_encoded`), for comparison with the embedded store's own path.
async fn via_query(t: &TestStore) -> postbox_engine::TenantReport {
    let store = Arc::new(postbox_store::QueryOnly(t.store.clone()));
    postbox_engine::verify::verify_tenant(&store, EVENTS, "t1", &full(), &mut |_| {})
        .await
        .unwrap()
}

#[tokio::test]
async fn tampering_with_any_byte_is_caught_at_its_seq() {
    let (t, engine) = log_of(12).await;
    let fields = [
        "id",
        "type",
        "tenant",
        "seq",
        "correlation_id",
        "causation_id",
        "actor",
        "occurred_at",
        "payload",
        "hash",
    ];
    let mut checked = 0;
    for seq in [1, 6, 12] {
        let row = events(&*t.store, "t1").await[seq - 1].clone();
        for name in fields {
            let len = match &row[name] {
                AttributeValue::S(s) => s.len(),
                _ => 1,
            };
            for at in 0..len {
                let broken = tamper_and_verify(&t, &engine, seq, name, at).await;
                let (at_seq, problem) = broken.unwrap_or_else(|| {
                    panic!("tampering with byte {at} of {name} of event {seq} went unnoticed")
                });
                if matches!(&problem, Problem::Malformed(m) if m == "skipped non-ASCII") {
                    continue;
                }
                checked += 1;
                assert_eq!(at_seq, seq as u64, "{name}[{at}] of event {seq}: {problem}");
                match name {
                    "seq" => assert!(matches!(problem, Problem::Reordered { .. }), "{problem}"),
                    _ => assert!(
                        matches!(
                            problem,
                            Problem::HashMismatch { .. } | Problem::Malformed(_)
                        ),
                        "{name}: {problem}"
                    ),
                }
            }
        }
    }
    assert!(checked > 500, "{checked} single-byte tamperings checked");
    // Restored: intact again.
    assert!(
        engine
            .verify_tenant("t1", &full(), &mut |_| {})
            .await
            .unwrap()
            .intact()
    );
}

#[tokio::test]
async fn an_attribute_added_to_a_stored_event_is_caught_at_its_seq() {
    let (t, engine) = log_of(8).await;
    let original = events(&*t.store, "t1").await[4].clone();
    for (name, value) in [
        (
            "refund_to",
            AttributeValue::s("an account of someone else's"),
        ),
        ("zz", AttributeValue::Null),
        ("a", AttributeValue::n(1)),
    ] {
        let mut tampered = original.clone();
        tampered.insert(name.to_owned(), value);
        let broken = verify_tampered(&t, &engine, tampered, original.clone(), name).await;
        assert_eq!(
            broken,
            Some((
                5,
                Problem::Malformed(format!("attribute {name} is not part of an event row"))
            )),
            "{name}"
        );
    }
    assert!(
        engine
            .verify_tenant("t1", &full(), &mut |_| {})
            .await
            .unwrap()
            .intact()
    );
}

#[tokio::test]
async fn gaps_reordering_and_head_damage_are_named() {
    let (t, engine) = log_of(10).await;
    let rows = events(&*t.store, "t1").await;
    let key = |row: &Item| {
        Item::from([
            ("pk".to_owned(), row["pk"].clone()),
            ("sk".to_owned(), row["sk"].clone()),
        ])
    };

    // A deleted event is a gap at its seq.
    let del = |row: &Item| DeleteItemInput {
        table_name: EVENTS.to_owned(),
        key: key(row),
        ..Default::default()
    };
    t.store.delete_item(del(&rows[3])).await.unwrap();
    let r = engine
        .verify_tenant("t1", &full(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        r.broken,
        Some((
            4,
            Problem::Gap {
                expected: 4,
                found: Some(5)
            }
        ))
    );
    put(&t.store, rows[3].clone()).await;

    // Two events swapped: the row in place 3 claims to be event 7.
    let mut a = rows[2].clone();
    let mut b = rows[6].clone();
    let (ka, kb) = (key(&a), key(&b));
    a.extend(kb);
    b.extend(ka);
    put(&t.store, a).await;
    put(&t.store, b).await;
    let r = engine
        .verify_tenant("t1", &full(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(r.broken, Some((3, Problem::Reordered { claimed: 7 })));
    put(&t.store, rows[2].clone()).await;
    put(&t.store, rows[6].clone()).await;
    assert!(
        engine
            .verify_tenant("t1", &full(), &mut |_| {})
            .await
            .unwrap()
            .intact()
    );

    // The last event missing: the head says it exists.
    t.store.delete_item(del(&rows[9])).await.unwrap();
    let r = engine
        .verify_tenant("t1", &full(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        r.broken,
        Some((
            10,
            Problem::Gap {
                expected: 10,
                found: None
            }
        ))
    );
    put(&t.store, rows[9].clone()).await;

    // A head whose hash is not the last event's.
    let mut h = head(&*t.store, "t1").await.unwrap();
    h.insert(
        "last_hash".into(),
        AttributeValue::S(chain::to_hex(&[7; 32])),
    );
    put(&t.store, h).await;
    let r = engine
        .verify_tenant("t1", &full(), &mut |_| {})
        .await
        .unwrap();
    assert!(
        matches!(r.broken, Some((10, Problem::HeadMismatch(_)))),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_broken_chain_does_not_move_the_checkpoint_past_the_break() {
    let (t, engine) = log_of(8).await;
    let rows = events(&*t.store, "t1").await;
    let mut bad = rows[5].clone();
    bad.insert("actor".into(), AttributeValue::S("mallory".into()));
    put(&t.store, bad).await;
    let r = engine
        .verify_tenant("t1", &VerifyOptions::default(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(r.broken.as_ref().map(|b| b.0), Some(6));
    // The next incremental run starts after 5 and still sees the damage.
    let r = engine
        .verify_tenant("t1", &VerifyOptions::default(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(r.from_seq, 5);
    assert_eq!(r.broken.as_ref().map(|b| b.0), Some(6));
    let _: Arc<EmbeddedStore> = t.store.clone();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_log_checked_in_parallel_ranges_reports_the_same() {
    // 100 events, pages of 5, 3 ranges: (0, 33], (33, 66], (66, ...).
    let (t, engine) = log_of(100).await;
    let split = VerifyOptions {
        full: true,
        update_checkpoint: false,
        page_size: 5,
        segments: 3,
        sample: 0,
    };
    let mut total = 0;
    let r = engine
        .verify_tenant("t1", &split, &mut |p| total = p.checked)
        .await
        .unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!((r.checked, total), (100, 100));
    let rows = events(&*t.store, "t1").await;
    let key = |row: &Item| {
        Item::from([
            ("pk".to_owned(), row["pk"].clone()),
            ("sk".to_owned(), row["sk"].clone()),
        ])
    };
    for seq in [1usize, 32, 33, 34, 66, 67, 100] {
        // A changed byte, at range edges and inside.
        let mut bad = rows[seq - 1].clone();
        bad.insert("actor".into(), AttributeValue::S("mallory".into()));
        put(&t.store, bad).await;
        let r = engine
            .verify_tenant("t1", &split, &mut |_| {})
            .await
            .unwrap();
        assert!(
            matches!(r.broken, Some((s, Problem::HashMismatch { .. })) if s == seq as u64),
            "actor of {seq}: {r:?}"
        );
        // A changed hash is caught at its own seq, not at the next range's start.
        let mut bad = rows[seq - 1].clone();
        bad.insert("hash".into(), AttributeValue::S(chain::to_hex(&[1; 32])));
        put(&t.store, bad).await;
        let r = engine
            .verify_tenant("t1", &split, &mut |_| {})
            .await
            .unwrap();
        assert!(
            matches!(r.broken, Some((s, Problem::HashMismatch { .. })) if s == seq as u64),
            "hash of {seq}: {r:?}"
        );
        // A missing row is a gap at its seq, naming the next row.
        let del = DeleteItemInput {
            table_name: EVENTS.to_owned(),
            key: key(&rows[seq - 1]),
            ..Default::default()
        };
        t.store.delete_item(del).await.unwrap();
        let r = engine
            .verify_tenant("t1", &split, &mut |_| {})
            .await
            .unwrap();
        let next = if seq == 100 {
            None
        } else {
            Some(seq as u64 + 1)
        };
        assert_eq!(
            r.broken,
            Some((
                seq as u64,
                Problem::Gap {
                    expected: seq as u64,
                    found: next
                }
            )),
            "gap at {seq}"
        );
        put(&t.store, rows[seq - 1].clone()).await;
    }
    assert!(
        engine
            .verify_tenant("t1", &split, &mut |_| {})
            .await
            .unwrap()
            .intact()
    );
    // Incremental runs split what is new.
    let inc = VerifyOptions {
        page_size: 5,
        segments: 3,
        ..Default::default()
    };
    engine.verify_tenant("t1", &inc, &mut |_| {}).await.unwrap();
    for _ in 0..70 {
        engine
            .emit(&ctx("t1"), "AUDIT_NOTE", json!({}), vec![])
            .await
            .unwrap();
    }
    let r = engine.verify_tenant("t1", &inc, &mut |_| {}).await.unwrap();
    assert!(r.intact());
    assert_eq!((r.from_seq, r.checked), (100, 70));
}

/// `tenants` walks the table one partition at a time and finds every head,
/// whatever the names' order, next to rows Postbox does not write.
#[tokio::test]
async fn every_tenant_with_a_head_is_found_once() {
    let (t, engine) = log_of(3).await;
    for tenant in ["a", "a-b", "ab", "t0", "t10", "z"] {
        engine
            .emit(&ctx(tenant), "AUDIT_NOTE", json!({}), vec![])
            .await
            .unwrap();
    }
    // A row after the last sort key Postbox gives a partition, and a row of
    // a partition that is no tenant's.
    for (pk, sk) in [("TENANT#z#HEAD", "\u{10FFFF}\u{10FFFF}"), ("misc", "1")] {
        put(
            &t.store,
            Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))]),
        )
        .await;
    }
    // Without the step past the row after PAST_EVERY_SK, this walk went
    // round that row forever (seen while writing it).
    let mut found = postbox_engine::verify::tenants(&*t.store, EVENTS)
        .await
        .unwrap();
    found.sort();
    assert_eq!(found, ["a", "a-b", "ab", "t0", "t1", "t10", "z"]);
}

/// An incremental verify: from the checkpoint, sampling `sample` older links.
fn sampled(sample: usize) -> VerifyOptions {
    VerifyOptions {
        update_checkpoint: false,
        sample,
        ..Default::default()
    }
}

#[tokio::test]
async fn an_old_event_edited_after_its_checkpoint_is_found_by_the_sample() {
    let (t, engine) = log_of(40).await;
    // A verify moves the checkpoint to 40: later runs start after it.
    let r = engine
        .verify_tenant("t1", &VerifyOptions::default(), &mut |_| {})
        .await
        .unwrap();
    assert!(r.intact(), "{r:?}");
    let rows = events(&*t.store, "t1").await;
    let mut edited = rows[6].clone();
    edited.insert("actor".into(), AttributeValue::S("mallory".into()));
    put(&t.store, edited).await;

    // Without a sample, the edit before the checkpoint is not read.
    let r = engine
        .verify_tenant("t1", &sampled(0), &mut |_| {})
        .await
        .unwrap();
    assert_eq!((r.from_seq, r.broken), (40, None));
    // A sample as large as the log checks every link before the checkpoint.
    let r = engine
        .verify_tenant("t1", &sampled(40), &mut |_| {})
        .await
        .unwrap();
    assert!(
        matches!(r.broken, Some((7, Problem::HashMismatch { .. }))),
        "{r:?}"
    );
    // Random samples of 8 find it in some runs, and never report another seq.
    let mut found = 0;
    for _ in 0..50 {
        let r = engine
            .verify_tenant("t1", &sampled(8), &mut |_| {})
            .await
            .unwrap();
        match r.broken {
            None => {}
            Some((7, _)) => found += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        found > 0,
        "50 samples of 8 links out of 40 never met event 7"
    );
}

#[tokio::test]
async fn a_rewritten_chain_no_longer_matches_its_checkpoint() {
    let (t, engine) = log_of(10).await;
    let r = engine
        .verify_tenant("t1", &VerifyOptions::default(), &mut |_| {})
        .await
        .unwrap();
    assert!(r.intact(), "{r:?}");
    // The checkpoint's own event gets another (well-formed) hash, as a
    // rewrite of the chain up to it would give it.
    let rows = events(&*t.store, "t1").await;
    let mut rewritten = rows[9].clone();
    rewritten.insert("hash".into(), AttributeValue::S("00".repeat(32)));
    put(&t.store, rewritten).await;
    let r = engine
        .verify_tenant("t1", &sampled(1), &mut |_| {})
        .await
        .unwrap();
    assert!(
        matches!(r.broken, Some((10, Problem::HashMismatch { .. }))),
        "{r:?}"
    );
}

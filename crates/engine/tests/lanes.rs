//! The in-process lanes: INLINE handlers add writes to the emit's own
//! transaction and abort it (leaving no trace) on error; LOCAL handlers run
//! after commit on a bounded pool, failures counted and never retried, never
//! blocking emit; events no subscription matches are counted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::*;
use postbox_engine::catalog::Catalog;
use postbox_engine::{EmitError, Engine, EngineOptions, Write};
use postbox_item::{AttributeValue, Item};
use serde_json::json;

const LANES: &str = r#"
[[event_types]]
name = "PAYMENT_COMPLETED"
producers = ["payments"]
[[event_types]]
name = "PAYMENT_FAILED"
producers = ["payments"]
[[event_types]]
name = "NOBODY_LISTENS"
producers = ["payments"]

[[subscriptions]]
name = "order-mirror"
glob = "PAYMENT_*"
lane = "INLINE"
handler = "orders::mirror"

[[subscriptions]]
name = "tagger"
glob = "PAYMENT_COMPLETED"
lane = "LOCAL"
handler = "crm::tag"

[[subscriptions]]
name = "flaky"
glob = "PAYMENT_COMPLETED"
lane = "LOCAL"
handler = "crm::flaky"
"#;

struct Setup {
    t: TestStore,
    engine: Engine<postbox_store::embedded::EmbeddedStore>,
    tagged: Arc<AtomicU32>,
    flaky_calls: Arc<AtomicU32>,
}

async fn setup(options: EngineOptions, slow_local: Duration) -> Setup {
    let t = open().await;
    let tagged = Arc::new(AtomicU32::new(0));
    let flaky_calls = Arc::new(AtomicU32::new(0));
    let (tg, fc) = (tagged.clone(), flaky_calls.clone());
    let engine = Engine::builder(t.store.clone(), Catalog::from_toml(LANES, "lanes").unwrap())
        .options(options)
        .inline("orders::mirror", |env| {
            if env.payload.get("reject").is_some() {
                return Err("the mirror refuses this payment".into());
            }
            let order = env.payload["order"].as_str().unwrap_or("none");
            Ok(vec![
                Write::put(
                    ORDERS,
                    Item::from([
                        (
                            "pk".to_owned(),
                            AttributeValue::S(format!("MIRROR#{order}")),
                        ),
                        ("event".to_owned(), AttributeValue::S(env.id.clone())),
                        ("seq".to_owned(), AttributeValue::n(env.seq as i64)),
                    ]),
                )
                .condition("attribute_not_exists(pk)"),
            ])
        })
        .local("crm::tag", move |_env| {
            let tg = tg.clone();
            async move {
                tokio::time::sleep(slow_local).await;
                tg.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .local("crm::flaky", move |_env| {
            let fc = fc.clone();
            async move {
                fc.fetch_add(1, Ordering::SeqCst);
                Err("flaky handler failed".into())
            }
        })
        .build()
        .await
        .unwrap();
    Setup {
        t,
        engine,
        tagged,
        flaky_calls,
    }
}

async fn mirror(t: &TestStore, order: &str) -> Option<Item> {
    get(
        &*t.store,
        ORDERS,
        Item::from([(
            "pk".to_owned(),
            AttributeValue::S(format!("MIRROR#{order}")),
        )]),
    )
    .await
}

#[tokio::test]
async fn inline_writes_join_the_emit_transaction() {
    let s = setup(EngineOptions::default(), Duration::ZERO).await;
    let e = s
        .engine
        .emit(
            &ctx("t1"),
            "PAYMENT_FAILED",
            json!({"order": "1"}),
            vec![put_order("1")],
        )
        .await
        .unwrap();
    let m = mirror(&s.t, "1").await.expect("the INLINE write committed");
    assert_eq!(
        attr_n(&m, "seq"),
        e.envelope.seq as i64,
        "the handler saw the committed seq"
    );
    assert_eq!(attr_s(&m, "event"), e.envelope.id);
    assert!(get_order(&*s.t.store, "1").await.is_some());
    // An INLINE write whose condition fails fails the emit, naming the subscription.
    let err = s
        .engine
        .emit(
            &ctx("t1"),
            "PAYMENT_FAILED",
            json!({"order": "1"}),
            vec![put_order("2")],
        )
        .await
        .unwrap_err();
    match err {
        EmitError::ConditionalCheckFailed {
            index: 1,
            subscription: Some(sub),
            ..
        } => assert_eq!(sub, "order-mirror"),
        other => panic!("{other}"),
    }
    assert!(get_order(&*s.t.store, "2").await.is_none());
    assert_eq!(events(&*s.t.store, "t1").await.len(), 1);
}

#[tokio::test]
async fn an_inline_error_aborts_the_emit_without_a_trace() {
    for group_commit in [true, false] {
        let s = setup(
            EngineOptions {
                group_commit,
                ..Default::default()
            },
            Duration::ZERO,
        )
        .await;
        let err = s
            .engine
            .emit(
                &ctx("t1"),
                "PAYMENT_FAILED",
                json!({"order": "1", "reject": true}),
                vec![put_order("1")],
            )
            .await
            .unwrap_err();
        match &err {
            EmitError::InlineAborted {
                subscription,
                message,
            } => {
                assert_eq!(subscription, "order-mirror");
                assert!(message.contains("refuses"));
            }
            other => panic!("{other}"),
        }
        assert!(
            get_order(&*s.t.store, "1").await.is_none(),
            "no caller write"
        );
        assert!(mirror(&s.t, "1").await.is_none(), "no handler write");
        assert!(events(&*s.t.store, "t1").await.is_empty(), "no event");
        assert!(head(&*s.t.store, "t1").await.is_none(), "no head");
        assert_eq!(s.engine.stats().inline_aborts, 1);
        // The next emit starts the log at seq 1.
        let ok = s
            .engine
            .emit(&ctx("t1"), "PAYMENT_FAILED", json!({"order": "1"}), vec![])
            .await
            .unwrap();
        assert_eq!(ok.envelope.seq, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_handlers_run_after_commit_and_never_block_emit() {
    // The tagger sleeps 1 s per event; eight emits must not wait for it.
    let slow = Duration::from_secs(1);
    let s = setup(
        EngineOptions {
            local_concurrency: 4,
            ..Default::default()
        },
        slow,
    )
    .await;
    let started = Instant::now();
    for i in 0..8 {
        s.engine
            .emit(
                &ctx("t1"),
                "PAYMENT_COMPLETED",
                json!({"order": i.to_string()}),
                vec![],
            )
            .await
            .unwrap();
    }
    let emitting = started.elapsed();
    assert!(
        emitting < slow,
        "emit waited for LOCAL handlers: {emitting:?}"
    );
    assert_eq!(
        s.tagged.load(Ordering::SeqCst),
        0,
        "the handlers are still running"
    );
    // Bounded pool: 4 at a time, 1 s each, 8 jobs = at least 2 s. The
    // flaky handler's jobs share the pool: the last of them may start only
    // when the last tagger jobs end, so both counts are waited for.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = s.engine.stats();
        if (stats.local_ok >= 8 && stats.local_failed >= 8) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = s.engine.stats();
    assert_eq!(stats.local_ok, 8);
    assert!(
        started.elapsed() >= 2 * slow,
        "the pool ran more than 4 at once: {:?}",
        started.elapsed()
    );
    // The flaky handler ran once per event, was never retried, and was counted.
    assert_eq!(s.flaky_calls.load(Ordering::SeqCst), 8);
    assert_eq!(stats.local_failed, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_local_queue_drops_and_counts_instead_of_blocking() {
    let slow = Duration::from_secs(3);
    let options = EngineOptions {
        local_concurrency: 1,
        local_queue: 2,
        ..Default::default()
    };
    let s = setup(options, slow).await;
    let started = Instant::now();
    for i in 0..10 {
        s.engine
            .emit(
                &ctx("t1"),
                "PAYMENT_COMPLETED",
                json!({"order": i.to_string()}),
                vec![],
            )
            .await
            .unwrap();
    }
    assert!(
        started.elapsed() < slow,
        "emit blocked on the full LOCAL queue"
    );
    assert!(s.engine.stats().local_dropped > 0, "{:?}", s.engine.stats());
}

#[tokio::test]
async fn events_nobody_subscribes_to_are_counted() {
    let s = setup(EngineOptions::default(), Duration::ZERO).await;
    s.engine
        .emit(&ctx("t1"), "NOBODY_LISTENS", json!({}), vec![])
        .await
        .unwrap();
    s.engine
        .emit(&ctx("t1"), "PAYMENT_FAILED", json!({"order": "x"}), vec![])
        .await
        .unwrap();
    let stats = s.engine.stats();
    assert_eq!(stats.undelivered, 1);
    assert_eq!(stats.emitted, 2);
}

#[tokio::test]
async fn inline_handlers_see_their_events_seq_in_a_batch_and_abort_only_their_own() {
    // Spawned together on this single-threaded runtime, the 30 emits share
    // batches; every fifth is refused by the mirror, and the others still
    // get consecutive seqs that their handlers saw.
    let s = setup(EngineOptions::default(), Duration::ZERO).await;
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            let engine = s.engine.clone();
            tokio::spawn(async move {
                let mut payload = json!({"order": i.to_string()});
                if i % 5 == 0 {
                    payload["reject"] = json!(true);
                }
                (
                    i,
                    engine
                        .emit(
                            &ctx("t1"),
                            "PAYMENT_FAILED",
                            payload,
                            vec![put_order(&i.to_string())],
                        )
                        .await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        let id = i.to_string();
        if i % 5 == 0 {
            assert!(
                matches!(outcome, Err(EmitError::InlineAborted { .. })),
                "{i}: {outcome:?}"
            );
            assert!(get_order(&*s.t.store, &id).await.is_none());
            assert!(mirror(&s.t, &id).await.is_none());
        } else {
            let e = outcome.unwrap();
            let m = mirror(&s.t, &id).await.unwrap();
            assert_eq!(attr_n(&m, "seq"), e.envelope.seq as i64, "emit {i}");
            assert_eq!(attr_s(&m, "event"), e.envelope.id);
        }
    }
    let rows = events(&*s.t.store, "t1").await;
    assert_eq!(rows.len(), 24);
    assert_contiguous(&rows);
    assert_eq!(s.engine.stats().inline_aborts, 6);
    assert!(s.engine.stats().transactions < 24, "{:?}", s.engine.stats());
}

#[tokio::test]
async fn inline_handlers_run_again_when_a_retried_batch_moves_their_event() {
    // Order 3 exists, so emit 3's own write fails; the batch is planned
    // again without it, the later events move down one seq, and their
    // handlers run again and write the seq they will really have.
    let s = setup(EngineOptions::default(), Duration::ZERO).await;
    s.engine
        .emit(
            &ctx("t1"),
            "PAYMENT_FAILED",
            json!({"order": "pre"}),
            vec![put_order("3")],
        )
        .await
        .unwrap();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let engine = s.engine.clone();
            tokio::spawn(async move {
                let id = i.to_string();
                (
                    i,
                    engine
                        .emit(
                            &ctx("t1"),
                            "PAYMENT_FAILED",
                            json!({"order": id}),
                            vec![put_order(&id)],
                        )
                        .await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        if i == 3 {
            assert!(
                matches!(
                    outcome,
                    Err(EmitError::ConditionalCheckFailed { index: 0, .. })
                ),
                "{outcome:?}"
            );
            assert!(mirror(&s.t, "3").await.is_none());
        } else {
            let e = outcome.unwrap();
            let m = mirror(&s.t, &i.to_string()).await.unwrap();
            assert_eq!(attr_n(&m, "seq"), e.envelope.seq as i64, "emit {i}");
        }
    }
    assert_contiguous(&events(&*s.t.store, "t1").await);
}

//! The batcher's recovery paths together: two engines (two processes) emit
//! concurrently for three tenants a random mix of good emits, emits whose
//! own condition fails, emits an INLINE handler refuses, emits the store
//! refuses as invalid, and emits that collide on one item inside a batch.
//! Afterwards every emit that returned Ok has its event (at the seq it was
//! told, with its id) and its writes, every emit that failed left nothing,
//! each log is gap-free and its chain verifies.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use postbox_engine::catalog::Catalog;
use postbox_engine::{EmitError, Engine, EngineOptions, Write};
use postbox_item::{AttributeValue, Item};
use postbox_store::embedded::EmbeddedStore;
use serde_json::json;

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]
[[subscriptions]]
name = "mirror"
glob = "ORDER_PLACED"
lane = "INLINE"
handler = "mirror"
"#;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Good,
    OwnConditionFails,
    InlineRefuses,
    InvalidWrite,
    SharedCounter,
}

async fn build(store: Arc<EmbeddedStore>) -> Engine<EmbeddedStore> {
    let options = EngineOptions {
        max_tries: 30,
        ..Default::default()
    };
    Engine::builder(store, Catalog::from_toml(CATALOG, "model").unwrap())
        .options(options)
        .inline("mirror", |env| {
            if env.payload.get("reject").is_some() {
                return Err("refused".into());
            }
            let id = env.payload["id"].as_str().unwrap_or("?");
            Ok(vec![Write::put(
                ORDERS,
                Item::from([
                    ("pk".to_owned(), AttributeValue::S(format!("MIRROR#{id}"))),
                    ("seq".to_owned(), AttributeValue::n(env.seq as i64)),
                ]),
            )])
        })
        .build()
        .await
        .unwrap()
}

fn key(pk: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(pk))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_mixes_keep_state_and_log_in_step() {
    let t = open().await;
    let engines = [build(t.store.clone()).await, build(t.store.clone()).await];
    let mut tasks = Vec::new();
    for worker in 0..16u64 {
        let engine = engines[(worker % 2) as usize].clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(worker * 7919 + 1);
            let mut outcomes = Vec::new();
            for i in 0..25 {
                let tenant = format!("t{}", rng.u32(0..3));
                let id = format!("{worker}-{i}");
                let kind = match rng.u32(0..10) {
                    0 => Kind::OwnConditionFails,
                    1 => Kind::InlineRefuses,
                    2 => Kind::InvalidWrite,
                    3 | 4 => Kind::SharedCounter,
                    _ => Kind::Good,
                };
                let mut payload = json!({"id": id});
                let mut writes = vec![put_order(&id)];
                match kind {
                    Kind::Good => {}
                    Kind::OwnConditionFails => writes.push(Write::condition_check(
                        ORDERS,
                        key(format!("MISSING#{id}")),
                        "attribute_exists(pk)",
                    )),
                    Kind::InlineRefuses => payload["reject"] = json!(true),
                    Kind::InvalidWrite => writes.push(Write::put(
                        ORDERS,
                        Item::from([
                            ("pk".to_owned(), AttributeValue::S(format!("BIG#{id}"))),
                            ("blob".to_owned(), AttributeValue::S("b".repeat(410 * 1024))),
                        ]),
                    )),
                    Kind::SharedCounter => writes.push(
                        Write::update(ORDERS, key(format!("COUNTER#{tenant}")), "ADD hits :one")
                            .value(":one", AttributeValue::n(1)),
                    ),
                }
                let ctx = ctx(&tenant);
                let outcome = loop {
                    match engine
                        .emit(&ctx, "ORDER_PLACED", payload.clone(), writes.clone())
                        .await
                    {
                        Err(EmitError::Contention { .. }) => continue,
                        other => break other,
                    }
                };
                outcomes.push((tenant, id, kind, outcome));
            }
            outcomes
        }));
    }
    let mut committed: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    let mut counters: HashMap<String, i64> = HashMap::new();
    for task in tasks {
        for (tenant, id, kind, outcome) in task.await.unwrap() {
            match (kind, outcome) {
                (Kind::Good | Kind::SharedCounter, Ok(e)) => {
                    assert!(get_order(&*t.store, &id).await.is_some(), "{id}: its write");
                    let m = get(&*t.store, ORDERS, key(format!("MIRROR#{id}")))
                        .await
                        .expect("its INLINE write");
                    assert_eq!(attr_n(&m, "seq"), e.envelope.seq as i64);
                    if kind == Kind::SharedCounter {
                        *counters.entry(tenant.clone()).or_default() += 1;
                    }
                    committed
                        .entry(tenant)
                        .or_default()
                        .push((e.envelope.seq, e.envelope.id));
                }
                (
                    Kind::OwnConditionFails,
                    Err(EmitError::ConditionalCheckFailed { index: 1, .. }),
                )
                | (Kind::InlineRefuses, Err(EmitError::InlineAborted { .. }))
                | (Kind::InvalidWrite, Err(EmitError::Store(_))) => {
                    assert!(
                        get_order(&*t.store, &id).await.is_none(),
                        "{id} ({kind:?}) left its write"
                    );
                    assert!(
                        get(&*t.store, ORDERS, key(format!("MIRROR#{id}")))
                            .await
                            .is_none()
                    );
                }
                (kind, outcome) => panic!("{id}: {kind:?} ended {outcome:?}"),
            }
        }
    }
    for (tenant, mut acked) in committed {
        acked.sort();
        let rows = events(&*t.store, &tenant).await;
        assert_contiguous(&rows);
        assert_eq!(
            rows.len(),
            acked.len(),
            "{tenant}: one event per successful emit"
        );
        for ((seq, id), row) in acked.iter().zip(&rows) {
            assert_eq!(
                (attr_n(row, "seq") as u64, attr_s(row, "id")),
                (*seq, id.as_str())
            );
        }
        let report = engines[0]
            .verify_tenant(&tenant, &Default::default(), &mut |_| {})
            .await
            .unwrap();
        assert!(report.intact(), "{report:?}");
        if let Some(n) = counters.get(&tenant) {
            let counter = get(&*t.store, ORDERS, key(format!("COUNTER#{tenant}")))
                .await
                .unwrap();
            assert_eq!(
                attr_n(&counter, "hits"),
                *n,
                "{tenant}: one increment per successful emit"
            );
        }
    }
}

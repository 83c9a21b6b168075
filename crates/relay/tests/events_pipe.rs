//! The default events pipe end to end: events emitted by the engine reach
//! the FIFO queue as their raw NewImage, one message group per tenant,
//! deduplicated on the event id; head rows never do.

mod common;

use std::sync::Arc;

use common::*;
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine};
use postbox_queue::ReceiveOptions;
use serde_json::json;

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]
"#;

#[tokio::test]
async fn emitted_events_reach_the_fifo_queue_grouped_by_tenant() {
    let env = env().await;
    let catalog = Catalog::from_toml(CATALOG, "test").unwrap();
    let engine = Engine::builder(Arc::new(env.store.clone()), catalog)
        .build()
        .await
        .unwrap();
    let relay = start(&env, "[relay]\nevents_pipe = true\n", "a").await;
    let mut emitted = Vec::new();
    for i in 0..12 {
        let tenant = format!("t{}", i % 3);
        let ctx = Context::new(&tenant, "tester").unwrap();
        let e = engine
            .emit(&ctx, "ORDER_PLACED", json!({"n": i}), Vec::new())
            .await
            .unwrap();
        emitted.push(e);
    }
    let stats = caught_up(&relay).await;
    // Every emit wrote a head row and an event row: only the events travel.
    assert_eq!(stats[0].delivered, 12);
    assert!(stats[0].filtered >= 12, "{:?}", stats[0]);
    let mut seen = Vec::new();
    loop {
        let options = ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(600),
            wait_time_seconds: Some(0),
            ..Default::default()
        };
        let got = env
            .queues
            .receive("postbox-events.fifo", options)
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        for m in got {
            let image = postbox_item::item_from_json(&json(&m.body)).unwrap();
            let (envelope, _hash) = postbox_engine::layout::envelope_of(&image).unwrap();
            assert_eq!(m.system["MessageGroupId"], envelope.tenant);
            assert_eq!(m.system["MessageDeduplicationId"], envelope.id);
            env.queues
                .delete("postbox-events.fifo", &m.receipt_handle)
                .await
                .unwrap();
            seen.push((envelope.tenant, envelope.seq));
        }
    }
    assert_eq!(seen.len(), 12);
    for tenant in ["t0", "t1", "t2"] {
        let seqs: Vec<u64> = seen
            .iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(seqs, vec![1, 2, 3, 4], "tenant {tenant} in order");
    }
    relay.shutdown().await;
}

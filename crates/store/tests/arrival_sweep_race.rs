//! A write that lands in a block of places while the TTL sweep works on
//! that block from an older read is still swept later: the sweep notes the
//! block's next expiry from what it read and from what was noted since it
//! began (`ArrivalIndex::begin_sweep` / `end_sweep`). The write is made
//! between the sweep's read and its note by holding the sweep at fault point
//! `store::arrival_sweep_read`. In a file of its own: fault points are
//! process-wide, and the other arrival tests sweep too.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::faults;
use postbox_store::{Clock, ManualClock};
use serde_json::json;

const TABLE: &str = "arrival";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_into_a_block_being_swept_is_swept_at_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(NOW_MS));
    let options = EmbeddedOptions {
        arrival_tables: vec![TABLE.to_owned()],
        ..options(clock.clone())
    };
    let store = EmbeddedStore::open(dir.path().join("store.redb"), options).unwrap();
    create(&store, TABLE, None, None).await;
    expire_by_exp(&store, TABLE).await;
    let now = clock.now_ms() / 1000;
    let put_expiring = |pk: &'static str, exp: u64| {
        let store = store.clone();
        async move {
            put(
                &store,
                json!({"TableName": TABLE, "Item": {"pk": {"S": pk}, "exp": {"N": exp.to_string()}}}),
            )
            .await
            .unwrap();
        }
    };
    // The first item expires in 5 s; the sweep at 10 s takes its block.
    put_expiring("first", now + 5).await;
    clock.advance_ms(10_000);
    let held = faults::hold(faults::ARRIVAL_SWEEP_READ);
    let sweep = {
        let store = store.clone();
        tokio::spawn(async move { store.sweep_now().await })
    };
    for _ in 0..1000 {
        if faults::reached(faults::ARRIVAL_SWEEP_READ) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        faults::reached(faults::ARRIVAL_SWEEP_READ),
        "the sweep never read the block"
    );
    // The second item lands in the same block (the next place), after the
    // sweep's read, and expires 20 s on.
    put_expiring("second", now + 30).await;
    drop(held);
    sweep.await.unwrap().unwrap();
    assert_eq!(
        item_count(&store, TABLE).await,
        1,
        "the first item is swept, not the second"
    );

    // At its own time the second item is swept too: its block was noted
    // again although the sweep's read never saw it.
    clock.advance_ms(30_000);
    store.sweep_now().await.unwrap();
    assert_eq!(
        item_count(&store, TABLE).await,
        0,
        "the second item was never swept"
    );
}

//! The fault point `emit::after_commit_before_return`: an emit that dies (or
//! loses its answer) after its commit leaves the event AND the caller's
//! write, never one without the other; the chain verifies.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::*;
use postbox_engine::{AFTER_COMMIT_BEFORE_RETURN, EmitError, VerifyOptions};
use postbox_store::StoreError;
use postbox_store::embedded::{Durability, EmbeddedStore};
use postbox_store::faults::{self, Action};
use serde_json::json;

const CHILD_ENV: &str = "POSTBOX_ENGINE_FAULT_CHILD";

/// The child: arms the point from POSTBOX_FAULTS and emits one event.
#[test]
fn fault_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    faults::arm_from_env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store =
            Arc::new(EmbeddedStore::open(&path, store_options(Durability::Durable)).unwrap());
        create_orders(&*store).await;
        let engine = engine(store).await;
        let _ = engine
            .emit(
                &ctx("main"),
                "ORDER_PLACED",
                json!({"order": "o1"}),
                vec![put_order("o1")],
            )
            .await;
        println!("RETURNED");
    });
}

#[tokio::test]
async fn killed_after_the_commit_the_event_and_its_write_are_both_there() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.redb");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fault_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .env(
            "POSTBOX_FAULTS",
            format!("{AFTER_COMMIT_BEFORE_RETURN}=kill"),
        )
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the child was killed at the fault point"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("RETURNED"),
        "emit never returned"
    );

    let store = Arc::new(EmbeddedStore::open(&path, store_options(Durability::Durable)).unwrap());
    let rows = events(&*store, "main").await;
    assert_eq!(rows.len(), 1, "the committed event survived the kill");
    assert!(
        get_order(&*store, "o1").await.is_some(),
        "and so did the caller's write"
    );
    let report = postbox_engine::verify::verify_tenant(
        &store,
        EVENTS,
        "main",
        &VerifyOptions::default(),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert!(report.intact(), "{report:?}");
}

#[tokio::test]
async fn a_lost_answer_is_an_error_although_the_emit_committed() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let store = open().await;
    let engine = engine(store.store.clone()).await;
    faults::arm(AFTER_COMMIT_BEFORE_RETURN, Action::Stop);
    let result = engine
        .emit(
            &ctx("main"),
            "ORDER_PLACED",
            json!({"order": "o2"}),
            vec![put_order("o2")],
        )
        .await;
    faults::clear();
    assert!(
        matches!(result, Err(EmitError::Store(StoreError::Unavailable(_)))),
        "{result:?}"
    );
    // The caller cannot tell; the log can: retrying would need an idempotency key.
    assert_eq!(events(&*store.store, "main").await.len(), 1);
    assert!(get_order(&*store.store, "o2").await.is_some());
}

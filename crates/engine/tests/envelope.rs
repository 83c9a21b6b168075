//! The envelope and the events-table layout: context fields on every event,
//! time-ordered ids, the head row and zero-padded event rows, I-JSON payloads.

mod common;

use common::*;
use postbox_engine::{Context, EmitError};
use serde_json::json;

#[tokio::test]
async fn envelope_carries_the_request_context() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = Context::new("acme", "user:7")
        .unwrap()
        .with_correlation_id("req-123");
    let a = engine
        .emit(&ctx, "ORDER_PLACED", json!({"order": "1"}), vec![])
        .await
        .unwrap();
    let caused = Context::caused_by(&a.envelope, "shipping-worker");
    let b = engine
        .emit(&caused, "ORDER_SHIPPED", json!({"order": "1"}), vec![])
        .await
        .unwrap();

    assert_eq!((a.envelope.seq, b.envelope.seq), (1, 2));
    assert_eq!(a.envelope.tenant, "acme");
    assert_eq!(a.envelope.actor, "user:7");
    assert_eq!(a.envelope.correlation_id, "req-123");
    assert_eq!(a.envelope.causation_id, None);
    assert_eq!(b.envelope.correlation_id, "req-123");
    assert_eq!(
        b.envelope.causation_id.as_deref(),
        Some(a.envelope.id.as_str())
    );
    assert_eq!(b.envelope.actor, "shipping-worker");
    assert!(a.envelope.id < b.envelope.id, "ids are time-ordered");
    assert_eq!(a.envelope.id.len(), 26);
    assert!(
        a.envelope.occurred_at.ends_with('Z') && a.envelope.occurred_at.len() == 24,
        "{}",
        a.envelope.occurred_at
    );
}

#[tokio::test]
async fn rows_follow_the_spec_layout() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    let mut last = None;
    for i in 0..3 {
        last = Some(
            engine
                .emit(
                    &ctx,
                    "ORDER_PLACED",
                    json!({"order": i.to_string(), "amount": 5}),
                    vec![],
                )
                .await
                .unwrap(),
        );
    }
    let rows = events(&*t.store, "t1").await;
    assert_eq!(rows.len(), 3);
    assert_contiguous(&rows);
    let row = &rows[2];
    assert_eq!(attr_s(row, "pk"), "TENANT#t1#EVENT");
    assert_eq!(attr_s(row, "sk"), "00000000000000000003");
    for name in [
        "id",
        "type",
        "tenant",
        "correlation_id",
        "actor",
        "occurred_at",
        "payload",
        "hash",
    ] {
        assert!(
            row.get(name).and_then(|v| v.as_s()).is_some(),
            "{name} stored as S"
        );
    }
    assert!(row.contains_key("causation_id"));
    assert_eq!(
        attr_s(row, "payload"),
        r#"{"amount":5,"order":"2"}"#,
        "payload stored in canonical form"
    );
    let last = last.unwrap();
    assert_eq!(attr_s(row, "hash"), last.hash);
    let head = head(&*t.store, "t1").await.expect("head row");
    assert_eq!(attr_n(&head, "last_seq"), 3);
    assert_eq!(attr_s(&head, "last_hash"), last.hash);
    // The stored row reads back as the committed envelope.
    let (env, hash) = postbox_engine::layout::envelope_of(row).unwrap();
    assert_eq!(env, last.envelope);
    assert_eq!(hash, last.hash);
}

#[tokio::test]
async fn lossy_numbers_are_refused_with_advice() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    let ctx = ctx("t1");
    for text in [
        r#"{"order": "1", "big": 9007199254740993}"#,
        r#"{"order": "1", "big": 12345678901234567890}"#,
        r#"{"order": "1", "pi": 3.14159265358979323846264}"#,
        r#"{"order": "1", "huge": 1e400}"#,
    ] {
        let e = engine
            .emit_json(&ctx, "ORDER_PLACED", text, vec![])
            .await
            .unwrap_err();
        assert!(matches!(e, EmitError::Payload(_)), "{text}: {e}");
        assert!(e.to_string().contains("send it as a string"), "{e}");
    }
    let e = engine
        .emit(
            &ctx,
            "ORDER_PLACED",
            json!({"order": "1", "n": 18014398509481985u64}),
            vec![],
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("send it as a string") && e.to_string().contains("$.n"),
        "{e}"
    );
    // Numbers that do survive are fine, and are hashed as ECMAScript writes them.
    let ok = engine
        .emit_json(
            &ctx,
            "ORDER_PLACED",
            r#"{"order": "1", "x": 1.50, "y": 1e21, "z": 9007199254740991, "w": 1E20}"#,
            vec![],
        )
        .await
        .unwrap();
    let rows = events(&*t.store, "t1").await;
    assert_eq!(rows.len(), 1, "refused emits wrote nothing");
    assert_eq!(
        attr_s(&rows[0], "payload"),
        r#"{"order":"1","w":100000000000000000000,"x":1.5,"y":1e+21,"z":9007199254740991}"#
    );
    // What was stored reads back as the payload that was emitted.
    let (stored, _) = postbox_engine::layout::envelope_of(&rows[0]).unwrap();
    assert_eq!(stored.payload, ok.envelope.payload);
    assert_eq!(ok.envelope.seq, 1);
    assert!(head(&*t.store, "t1").await.is_some());
    assert_eq!(engine.stats().rejected, 5);
}

#[tokio::test]
async fn tenants_are_separate_logs() {
    let t = open().await;
    let engine = engine(t.store.clone()).await;
    for tenant in ["a", "b", "a"] {
        engine
            .emit(&ctx(tenant), "AUDIT_NOTE", json!({}), vec![])
            .await
            .unwrap();
    }
    assert_eq!(events(&*t.store, "a").await.len(), 2);
    assert_eq!(events(&*t.store, "b").await.len(), 1);
    assert!(
        Context::new("a#EVENT", "x").is_err(),
        "a tenant id cannot forge keys"
    );
}

//! `postbox serve --verify-every` finds an old event edited in the file
//! while the node was down: the reconciliation report names the tenant and
//! the seq, the metrics count the broken chain, and an intact node says
//! nothing.

mod common;

use common::{Server, call};
use postbox_item::AttributeValue;
use postbox_store::ItemStore;
use postbox_store::api::{GetItemInput, PutItemInput};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::{Value, json};

async fn report_after_a_run(server: &Server) -> (Value, String) {
    let m = server
        .metrics_when("no background verification ran", |m| {
            !m.contains("postbox_verify_runs_total 0") && m.contains("postbox_verify_runs_total")
        })
        .await;
    let (_, r) = call(
        &server.base,
        Some(&server.admin),
        "GET",
        "/v1/reconciliation",
        None,
    )
    .await;
    (r, m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_event_edited_at_rest_is_reported_by_the_background_verification() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["serve", "--examples", "--verify-every", "1s"];
    let server = Server::start(&args, &data);
    let acme = server.tenant_token("acme").await;
    for i in 0..5 {
        let payment = json!({
            "type": "PAYMENT_COMPLETED",
            "payload": {"order_id": format!("V-{i}"), "amount": 500, "currency": "EUR", "buyer": "ada@example.com", "tag": "lamp-1"},
        });
        let (status, e) = call(
            &server.base,
            Some(&acme),
            "POST",
            "/v1/events",
            Some(payment),
        )
        .await;
        assert_eq!(status, 201, "{e}");
    }
    let (r, m) = report_after_a_run(&server).await;
    assert!(m.contains("postbox_verify_broken_chains 0"), "{m}");
    assert_eq!(r["background_verification"]["broken"], json!([]), "{r}");
    let (exit, log) = server.terminate();
    assert!(exit.success(), "{log}");

    // Event 2 is edited in the file, its hash left as it was.
    {
        let store = EmbeddedStore::open(
            data.join("postbox.redb"),
            EmbeddedOptions::default().keeping(postbox_queue::tables()),
        )
        .unwrap();
        let key = postbox_engine::layout::key(
            postbox_engine::layout::event_pk("acme"),
            &postbox_engine::layout::seq_sk(2),
        );
        let mut row = store
            .get_item(GetItemInput {
                table_name: "postbox_events".into(),
                key,
                consistent_read: Some(true),
                ..Default::default()
            })
            .await
            .unwrap()
            .item
            .unwrap();
        row.insert("actor".into(), AttributeValue::s("mallory"));
        store
            .put_item(PutItemInput {
                table_name: "postbox_events".into(),
                item: row,
                ..Default::default()
            })
            .await
            .unwrap();
    }

    let server = Server::start(&args, &data);
    let (r, m) = report_after_a_run(&server).await;
    assert!(m.contains("postbox_verify_broken_chains 1"), "{m}");
    assert_eq!(r["verdict"], "attention", "{r}");
    let broken = &r["background_verification"]["broken"][0];
    assert_eq!(
        (broken["tenant"].as_str(), broken["seq"].as_u64()),
        (Some("acme"), Some(2)),
        "{r}"
    );
    assert!(
        r["reasons"].as_array().unwrap().iter().any(|x| x
            .as_str()
            .unwrap()
            .contains("tenant acme's chain is broken at seq 2")),
        "{r}"
    );
}

//! `postbox verify` against a running server: a tampered event, edited
//! through the DynamoDB wire endpoint, is reported at its seq with exit
//! code 4; an intact log exits 0; the checkpoint makes the next run check
//! only new events.

mod common;

use std::process::Command;

use common::{Server, call};
use postbox_client::{Endpoint, RemoteStore};
use postbox_item::AttributeValue;
use postbox_store::ItemStore;
use postbox_store::api::{UpdateItemInput, Values};
use serde_json::{Value, json};

fn verify(base: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["verify", "--endpoint", base])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_a_byte_changed_over_the_wire_at_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        "[[event_types]]\nname = \"NOTE\"\nproducers = [\"p\"]\n[[producers]]\nname = \"p\"\nemits = [\"NOTE\"]\n",
    )
    .unwrap();
    let server = Server::start(
        &["serve", "--catalog", catalog.to_str().unwrap()],
        &dir.path().join("data"),
    );
    let base = server.base.clone();
    let tenant = server.tenant_token("acme").await;
    for i in 1..=5 {
        let note = json!({"type": "NOTE", "payload": {"text": format!("note {i}")}});
        let (status, _) = call(&base, Some(&tenant), "POST", "/v1/events", Some(note)).await;
        assert_eq!(status, 201);
    }

    let (code, out) = verify(&base, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every chain is intact"), "{out}");

    // One character of event 3's payload, changed through the DynamoDB endpoint.
    let store = RemoteStore::new(Endpoint::new(&base).unwrap());
    let key = postbox_engine::layout::key(
        postbox_engine::layout::event_pk("acme"),
        &postbox_engine::layout::seq_sk(3),
    );
    let row = store
        .get_item(postbox_store::api::GetItemInput {
            table_name: "postbox_events".into(),
            key: key.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .item
        .unwrap();
    let payload_attr = row
        .iter()
        .find(|(_, v)| matches!(v, AttributeValue::S(s) if s.contains("note 3")))
        .map(|(k, _)| k.clone())
        .expect("the payload is stored as text");
    let AttributeValue::S(text) = &row[&payload_attr] else {
        unreachable!()
    };
    store
        .update_item(UpdateItemInput {
            table_name: "postbox_events".into(),
            key,
            update_expression: Some("SET #p = :v".into()),
            expression_attribute_names: Some([("#p".to_owned(), payload_attr.clone())].into()),
            expression_attribute_values: Some(Values::from([(
                ":v".to_owned(),
                AttributeValue::s(text.replace("note 3", "note 8")),
            )])),
            ..Default::default()
        })
        .await
        .unwrap();

    // The checkpoint: the next run checks only events after #5, so it sees nothing new.
    let (code, out) = verify(&base, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checked 0 new event(s)"), "{out}");
    // From genesis, the edit is found at #3.
    let (code, out) = verify(&base, &["--full"]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("acme") && out.contains("BROKEN at #3: hash mismatch"),
        "{out}"
    );
    let (code, out) = verify(&base, &["--full", "--json", "--tenant", "acme"]);
    assert_eq!(code, 4);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["tenants"][0]["broken_at"], 3, "{out}");
}

//! `postbox verify` against a running server, signing with the admin access
//! key in the data directory: a tampered event is reported at its seq with
//! exit code 4; an intact log exits 0; the checkpoint makes the next run
//! check only new events. The wire refuses to edit an event even to the
//! admin key, so the edit is made with the server restarted under
//! `--wire-auth none` (what a local attacker with the store could do).

mod common;

use std::process::Command;

use common::{Server, call};
use postbox_client::{Credentials, Endpoint, EndpointOptions, RemoteStore};
use postbox_item::AttributeValue;
use postbox_store::ItemStore;
use postbox_store::api::{UpdateItemInput, Values};
use serde_json::{Value, json};

fn verify(base: &str, data: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["verify", "--endpoint", base, "--data"])
        .arg(data)
        .args(args)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
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
    let data = dir.path().join("data");
    let server = Server::start(&["serve", "--catalog", catalog.to_str().unwrap()], &data);
    let base = server.base.clone();
    let tenant = server.tenant_token("acme").await;
    for i in 1..=5 {
        let note = json!({"type": "NOTE", "payload": {"text": format!("note {i}")}});
        let (status, _) = call(&base, Some(&tenant), "POST", "/v1/events", Some(note)).await;
        assert_eq!(status, 201);
    }

    let (code, out) = verify(&base, &data, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every chain is intact"), "{out}");

    // A tenant with no log is refused, not reported intact.
    let (code, out) = verify(&base, &data, &["--tenant", "nobody"]);
    assert_eq!(code, 2, "{out}");
    // A near miss names the tenant meant.
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["verify", "--endpoint", &base, "--data"])
        .arg(&data)
        .args(["--tenant", "acmee"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("(did you mean \"acme\"?)"), "{err}");
    // A server that does not answer is unreachable (exit 3).
    let (code, out) = verify("http://127.0.0.1:9", &data, &[]);
    assert_eq!(code, 3, "{out}");

    // Without the key, verify is refused and says what to do.
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["verify", "--endpoint", &base, "--data"])
        .arg(dir.path().join("elsewhere"))
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MissingAuthenticationToken") && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );

    let key = std::fs::read_to_string(data.join("admin-access-key")).unwrap();
    let signed = |base: &str| {
        RemoteStore::new(
            Endpoint::with_options(
                base,
                EndpointOptions {
                    credentials: Credentials::parse_file(&key),
                    ..EndpointOptions::default()
                },
            )
            .unwrap(),
        )
    };
    let key_of_3 = postbox_engine::layout::key(
        postbox_engine::layout::event_pk("acme"),
        &postbox_engine::layout::seq_sk(3),
    );
    // Even the admin key may not edit an event through the wire.
    let err = signed(&base)
        .update_item(UpdateItemInput {
            table_name: "postbox_events".into(),
            key: key_of_3.clone(),
            update_expression: Some("SET #p = :v".into()),
            expression_attribute_names: Some([("#p".to_owned(), "x".to_owned())].into()),
            expression_attribute_values: Some(Values::from([(
                ":v".to_owned(),
                AttributeValue::s("forged"),
            )])),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("AccessDenied"), "{err}");
    let (status, _) = server.terminate();
    assert!(status.success());

    // One character of event 3's payload, changed through the DynamoDB
    // endpoint of the server restarted without authentication.
    let server = Server::start(
        &[
            "serve",
            "--catalog",
            catalog.to_str().unwrap(),
            "--wire-auth",
            "none",
        ],
        &data,
    );
    let base = server.base.clone();
    let store = RemoteStore::new(Endpoint::new(&base).unwrap());
    let key = key_of_3;
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

    // The checkpoint: a run without a sample checks only events after #5,
    // so it sees nothing new...
    let (code, out) = verify(&base, &data, &["--sample", "0"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checked 0 new event(s)"), "{out}");
    // ...while the default sample (32 links, here every one before the
    // checkpoint) finds the edit without --full.
    let (code, out) = verify(&base, &data, &[]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("BROKEN at #3: hash mismatch"), "{out}");
    // From genesis, the edit is found at #3.
    let (code, out) = verify(&base, &data, &["--full"]);
    assert_eq!(code, 4, "{out}");
    assert!(
        out.contains("acme") && out.contains("BROKEN at #3: hash mismatch"),
        "{out}"
    );
    let (code, out) = verify(&base, &data, &["--full", "--json", "--tenant", "acme"]);
    assert_eq!(code, 4);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["tenants"][0]["broken_at"], 3, "{out}");
}

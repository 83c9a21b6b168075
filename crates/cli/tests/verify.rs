//! `postbox verify` against a running server: a tampered event, edited
//! through the DynamoDB wire endpoint, is reported at its seq with exit
//! code 4; an intact log exits 0; the checkpoint makes the next run check
//! only new events.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use postbox_client::{Endpoint, RemoteStore};
use postbox_item::AttributeValue;
use postbox_store::ItemStore;
use postbox_store::api::{UpdateItemInput, Values};
use serde_json::{Value, json};

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn call(base: &str, token: &str, path: &str, body: Value) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let req = hyper::Request::post(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(body.to_string().into()))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

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
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--catalog"])
        .arg(&catalog)
        .arg("--data")
        .arg(&data)
        .env("POSTBOX_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Server(child);
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    let admin = std::fs::read_to_string(data.join("admin-token"))
        .unwrap()
        .trim()
        .to_owned();
    let (_, t) = call(&base, &admin, "/v1/tokens", json!({"tenant": "acme"})).await;
    let tenant = t["token"].as_str().unwrap().to_owned();
    for i in 1..=5 {
        let (status, _) = call(
            &base,
            &tenant,
            "/v1/events",
            json!({"type": "NOTE", "payload": {"text": format!("note {i}")}}),
        )
        .await;
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

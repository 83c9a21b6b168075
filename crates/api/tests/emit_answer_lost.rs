//! An emit whose answer is lost after its commit (the process stops, or the
//! connection drops, between the commit and the reply) is retried with the
//! same Idempotency-Key: the retry answers the committed event, once.
//!
//! The loss comes from the engine's fault point
//! `emit::after_commit_before_return`, armed with `Stop`: the event and its
//! writes are committed, and the request answers an error as if the answer
//! never arrived. Fault points are process-wide, so this file holds one
//! test.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use postbox_api::{Api, ApiConfig};
use postbox_engine::{AFTER_COMMIT_BEFORE_RETURN, Catalog, Engine};
use postbox_queue::{Queues, QueuesOptions};
use postbox_store::ItemStore;
use postbox_store::api::CreateTableInput;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::faults::{self, Action};
use serde_json::{Value, json};

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["shop"]

[[producers]]
name = "shop"
emits = ["ORDER_PLACED"]

[[subscriptions]]
name = "audit"
glob = "ORDER_*"
lane = "LOCAL"
handler = "audit::log"
"#;

async fn post(base: &str, path: &str, token: &str, key: &str, body: &str) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let req = hyper::Request::builder()
        .method(if body.is_empty() { "GET" } else { "POST" })
        .uri(format!("{base}{path}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("idempotency-key", key)
        .body(Full::new(bytes::Bytes::from(body.to_owned())))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn a_retry_after_a_lost_answer_gets_the_committed_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("p.redb"), EmbeddedOptions::default()).unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .unwrap();
    queues
        .create_queue(
            "postbox-events.fifo",
            [("FifoQueue".to_owned(), "true".to_owned())].into(),
        )
        .await
        .unwrap();
    let engine = Engine::builder(
        Arc::new(store.clone()),
        Catalog::from_toml(CATALOG, "test").unwrap(),
    )
    .local("audit::log", |_e| async move { Ok(()) })
    .build()
    .await
    .unwrap();
    let api = Api::new(
        Arc::new(engine),
        queues,
        ApiConfig::default(),
        Default::default(),
    )
    .await
    .unwrap();
    let acme = api.tokens().create(Some("acme"), "alice").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = api.router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let body = json!({
        "type": "ORDER_PLACED",
        "payload": {"order_id": "7"},
        "writes": [{"Put": {"TableName": "orders", "Item": {"pk": {"S": "acme#order#7"}}}}]
    })
    .to_string();
    faults::arm(AFTER_COMMIT_BEFORE_RETURN, Action::Stop);
    let (lost, answer) = post(&base, "/v1/events", &acme, "pay-7", &body).await;
    faults::clear();
    assert!(lost >= 500, "the lost answer is an error: {lost} {answer}");

    let (status, retried) = post(&base, "/v1/events", &acme, "pay-7", &body).await;
    assert_eq!(
        status, 200,
        "the retry finds the committed event: {retried}"
    );
    let (_, log) = post(&base, "/v1/events?from=1&limit=10", &acme, "-", "").await;
    let events = log["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "one event, not two: {log}");
    assert_eq!(
        retried, events[0],
        "the retry answers the event as the log has it"
    );
    // Once the answer is stored, later retries answer it too.
    let (status, again) = post(&base, "/v1/events", &acme, "pay-7", &body).await;
    assert_eq!((status, &again), (200, &retried));
}

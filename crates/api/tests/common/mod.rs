//! Helpers shared by the API's integration tests: a store, queues, engine
//! and API behind a real listener on 127.0.0.1:0, with tenant tokens, and
//! calls to it.
#![allow(dead_code)]

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use postbox_api::{Api, ApiConfig};
use postbox_engine::{Catalog, Engine};
use postbox_store::ItemStore;
use postbox_store::api::{CreateTableInput, ScanInput};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::{Value, json};

pub const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["shop"]
schema = { type = "object", required = ["order_id"], properties = { order_id = { type = "string" } } }

[[producers]]
name = "shop"
emits = ["ORDER_PLACED"]

[[subscriptions]]
name = "audit"
glob = "ORDER_*"
lane = "LOCAL"
handler = "audit::log"
"#;

pub struct Env {
    pub _dir: tempfile::TempDir,
    pub base: String,
    pub store: EmbeddedStore,
    pub admin: String,
    pub acme: String,
    pub globex: String,
}

pub async fn env() -> Env {
    env_with(CATALOG).await
}

/// [`env`] with another catalog (it must keep ORDER_PLACED and `audit::log`).
pub async fn env_with(catalog: &str) -> Env {
    env_with_sources(catalog, Default::default()).await
}

/// [`env_with`] with what the node adds (pipes, metrics, a pull hub).
pub async fn env_with_sources(catalog: &str, sources: postbox_api::Sources) -> Env {
    let dir = tempfile::tempdir().unwrap();
    // As a node opens it: the Idempotency-Keys' rows in arrival order.
    let options = EmbeddedOptions {
        arrival_tables: vec![postbox_topology::REQUESTS_TABLE.to_owned()],
        ..EmbeddedOptions::default()
    };
    let (store, queues) =
        postbox_queue::testing::open_with(&dir.path().join("p.redb"), options).await;
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .unwrap();
    postbox_queue::testing::create_fifo(&queues, "postbox-events.fifo", &[]).await;
    let catalog = Catalog::from_toml(catalog, "test").unwrap();
    let engine = Engine::builder(Arc::new(store.clone()), catalog)
        .local("audit::log", |_e| async move { Ok(()) })
        .build()
        .await
        .unwrap();
    let api = Api::embedded(
        Arc::new(engine),
        queues,
        ApiConfig {
            max_body_bytes: 64 * 1024,
            body_timeout: std::time::Duration::from_millis(500),
            ..Default::default()
        },
        sources,
    )
    .await
    .unwrap();
    let admin = api.tokens().create(None, "ops").await.unwrap();
    let acme = api.tokens().create(Some("acme"), "alice").await.unwrap();
    let globex = api.tokens().create(Some("globex"), "bob").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = api.router();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Env {
        _dir: dir,
        base: format!("http://{addr}"),
        store,
        admin,
        acme,
        globex,
    }
}

pub struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

pub async fn call(
    env: &Env,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("{}{path}", env.base))
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = client
        .request(
            req.body(Full::new(bytes::Bytes::from(body.into())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// POST /v1/events with `token`.
pub async fn emit(
    env: &Env,
    token: &str,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Answer {
    call(env, "POST", "/v1/events", Some(token), headers, body).await
}

pub fn order_emit(id: &str, tenant: &str) -> String {
    json!({
        "type": "ORDER_PLACED",
        "payload": {"order_id": id},
        "writes": [{"Put": {"TableName": "orders", "Item": {"pk": {"S": format!("{tenant}#order#{id}")}, "total": {"N": "12"}}, "ConditionExpression": "attribute_not_exists(pk)"}}]
    })
    .to_string()
}

pub async fn log_of(env: &Env, token: &str) -> Vec<Value> {
    let a = call(
        env,
        "GET",
        "/v1/events?from=1&limit=1000",
        Some(token),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.json()["events"].as_array().unwrap().clone()
}

pub async fn orders(env: &Env) -> usize {
    env.store
        .scan(ScanInput {
            table_name: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .unwrap_or_default()
        .len()
}

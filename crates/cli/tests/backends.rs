//! One end-to-end suite, two backends: the same scenarios run against
//! `postbox serve` on its embedded store and `postbox serve --backend aws`
//! on DynamoDB Local and an SQS server (ministack). Each emits over HTTP to
//! webhook subscriptions in this process and checks what a user relies on:
//! every event delivered to every subscription in per-tenant order; a
//! failing handler retried, then dead-lettered; a replay running only the
//! dead pairs; a node killed (SIGKILL) while a handler runs restarting on
//! its own data, its claim taken over after the lease, nothing lost.
//!
//! The embedded runs are plain tests; `scripts/test` runs the AWS ones with
//! `POSTBOX_TEST_DYNAMODB_ENDPOINT` and `POSTBOX_TEST_SQS_ENDPOINT` set.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use common::{Server, call};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
enum Backend {
    Embedded,
    Aws,
}

/// A node of either backend: how to start it (again, on the same data).
struct Node {
    backend: Backend,
    catalog: PathBuf,
    data: PathBuf,
    prefix: String,
    _dir: tempfile::TempDir,
}

fn aws_env() -> Vec<(&'static str, String)> {
    let var = |v: &str| std::env::var(v).unwrap_or_else(|_| panic!("{v}: scripts/test sets it"));
    let ddb = var("POSTBOX_TEST_DYNAMODB_ENDPOINT");
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", ddb.clone()),
        ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", ddb),
        ("AWS_ENDPOINT_URL_SQS", var("POSTBOX_TEST_SQS_ENDPOINT")),
        ("AWS_ACCESS_KEY_ID", "local".into()),
        ("AWS_SECRET_ACCESS_KEY", "local".into()),
        ("AWS_CONFIG_FILE", "/nonexistent".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}

impl Node {
    /// A node for `catalog`; on AWS, its tables and queues created under a
    /// prefix of its own by `postbox init`.
    fn new(backend: Backend, test: &str, catalog: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.toml");
        std::fs::write(&path, catalog).unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let node = Node {
            backend,
            catalog: path,
            data: dir.path().join("data"),
            prefix: format!("b{nanos}-{test}-"),
            _dir: dir,
        };
        if let Backend::Aws = backend {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"))
                .args(["init", "--backend", "aws", "--aws-prefix", &node.prefix])
                .envs(aws_env())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "postbox init: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        node
    }

    fn start(&self) -> Server {
        let catalog = self.catalog.to_str().unwrap();
        let mut args = vec!["serve", "--catalog", catalog, "--lease", "2s"];
        let env = match self.backend {
            Backend::Embedded => vec![],
            Backend::Aws => {
                args.extend(["--backend", "aws", "--aws-prefix", &self.prefix]);
                aws_env()
            }
        };
        Server::start_with_env(&args, &self.data, &env)
    }
}

/// Webhook receivers: each path's deliveries (tenant, seq, idempotency
/// key) in arrival order; a path in `failing` answers 500; one in `slow`
/// holds each request for that long.
/// A delivery as a receiver saw it: tenant, seq, idempotency key.
type Seen = (String, u64, String);

#[derive(Clone, Default)]
struct Hooks {
    seen: Arc<Mutex<BTreeMap<String, Vec<Seen>>>>,
    failing: Arc<Mutex<Vec<String>>>,
    slow: Arc<Mutex<BTreeMap<String, Duration>>>,
}

impl Hooks {
    async fn serve(&self) -> String {
        let hooks = self.clone();
        let app = axum::Router::new().route(
            "/{name}",
            axum::routing::post(
                move |axum::extract::Path(name): axum::extract::Path<String>,
                      headers: axum::http::HeaderMap,
                      body: axum::body::Bytes| {
                    let hooks = hooks.clone();
                    async move {
                        let delay = hooks.slow.lock().unwrap().get(&name).copied();
                        if let Some(d) = delay {
                            tokio::time::sleep(d).await;
                        }
                        if hooks.failing.lock().unwrap().contains(&name) {
                            return StatusCode::INTERNAL_SERVER_ERROR;
                        }
                        let e: Value = serde_json::from_slice(&body).unwrap();
                        let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                        hooks.seen.lock().unwrap().entry(name).or_default().push((
                            e["tenant"].as_str().unwrap().to_owned(),
                            e["seq"].as_u64().unwrap(),
                            key,
                        ));
                        StatusCode::OK
                    }
                },
            ),
        );
        let addr = common::serve_router(app).await;
        format!("http://{addr}")
    }

    fn of(&self, name: &str) -> Vec<(String, u64, String)> {
        self.seen
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

fn catalog(hooks: &str, subscriptions: &[(&str, u32)]) -> String {
    let mut out = String::from(
        "[[event_types]]\nname = \"ORDER_PLACED\"\nproducers = [\"shop\"]\n[[producers]]\nname = \"shop\"\nemits = [\"ORDER_PLACED\"]\n",
    );
    for (name, attempts) in subscriptions {
        out.push_str(&format!(
            "[[subscriptions]]\nname = \"{name}\"\nglob = \"ORDER_*\"\nlane = \"DURABLE\"\nhandler = \"{hooks}/{name}\"\nretry = {{ max_attempts = {attempts}, backoff_ms = 100 }}\n"
        ));
    }
    out
}

async fn until(server: &Server, what: &str, secs: u64, ready: impl AsyncFnMut() -> bool) {
    common::until_else(secs, ready, || {
        format!(
            "timed out waiting for {what}; the server logged:\n{}",
            server.logs()
        )
    })
    .await;
}

async fn emit(server: &Server, token: &str, i: u32) {
    let (status, body) = call(
        &server.base,
        Some(token),
        "POST",
        "/v1/events",
        Some(json!({"type": "ORDER_PLACED", "payload": {"i": i}})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

/// Each tenant's seqs as `name` received them, in arrival order.
fn by_tenant(seen: &[(String, u64, String)]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (tenant, seq, _) in seen {
        out.entry(tenant.clone()).or_default().push(*seq);
    }
    out
}

async fn dead_letters(server: &Server) -> Vec<Value> {
    let (status, body) = call(
        &server.base,
        Some(&server.admin),
        "GET",
        "/v1/dead-letters",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["dead_letters"].as_array().unwrap().clone()
}

/// Delivery in order, retries, dead letters and a replay of only them.
async fn retries_dead_letters_and_replay(backend: Backend) {
    let hooks = Hooks::default();
    hooks.failing.lock().unwrap().push("billing".into());
    let base = hooks.serve().await;
    let node = Node::new(
        backend,
        "replay",
        &catalog(&base, &[("mirror", 5), ("billing", 2)]),
    );
    let server = node.start();
    let tokens = [
        server.tenant_token("acme").await,
        server.tenant_token("globex").await,
    ];
    for i in 0..3 {
        for t in &tokens {
            emit(&server, t, i).await;
        }
    }
    until(
        &server,
        "six dead letters and six mirrored",
        60,
        async || dead_letters(&server).await.len() == 6 && hooks.of("mirror").len() == 6,
    )
    .await;
    let want: BTreeMap<String, Vec<u64>> = [
        ("acme".into(), vec![1, 2, 3]),
        ("globex".into(), vec![1, 2, 3]),
    ]
    .into();
    assert_eq!(by_tenant(&hooks.of("mirror")), want, "each tenant in order");
    for d in dead_letters(&server).await {
        assert_eq!(
            (d["subscription"].as_str(), d["attempts"].as_u64()),
            (Some("billing"), Some(2)),
            "{d}"
        );
    }

    // Billing is back: the replay runs the dead pairs only.
    hooks.failing.lock().unwrap().clear();
    let (status, body) = call(
        &server.base,
        Some(&server.admin),
        "POST",
        "/v1/dead-letters/replay",
        Some(json!({"subscription": "billing"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reset"], 6, "{body}");
    until(
        &server,
        "billing to complete the replayed events",
        60,
        async || hooks.of("billing").len() == 6 && dead_letters(&server).await.is_empty(),
    )
    .await;
    assert_eq!(by_tenant(&hooks.of("billing")), want);
    // One more event per tenant, sent after the replay: a tenant's events
    // leave its queue group in order, so once the mirror has run both, it
    // has been offered everything the replay sent.
    for t in &tokens {
        emit(&server, t, 3).await;
    }
    until(
        &server,
        "the mirror to run the events sent after the replay",
        60,
        async || hooks.of("mirror").len() >= 8,
    )
    .await;
    let after: BTreeMap<String, Vec<u64>> = [
        ("acme".into(), vec![1, 2, 3, 4]),
        ("globex".into(), vec![1, 2, 3, 4]),
    ]
    .into();
    assert_eq!(
        by_tenant(&hooks.of("mirror")),
        after,
        "the completed subscription did not run again"
    );
    let (status, logs) = server.terminate();
    assert!(status.success(), "{logs}");
}

/// A node killed while a handler runs: restarted on its own data, the
/// claim is taken over after the lease and every event is delivered.
async fn a_killed_node_restarts_and_loses_nothing(backend: Backend) {
    let hooks = Hooks::default();
    hooks
        .slow
        .lock()
        .unwrap()
        .insert("ship".into(), Duration::from_secs(60));
    let base = hooks.serve().await;
    let node = Node::new(backend, "kill", &catalog(&base, &[("ship", 5)]));
    let server = node.start();
    let token = server.tenant_token("acme").await;
    for i in 0..4 {
        emit(&server, &token, i).await;
    }
    // The first delivery is in the (slow) handler when the node dies.
    until(
        &server,
        "the first delivery to be in its handler",
        30,
        async || {
            let (_, m) = call(
                &server.base,
                Some(&server.admin),
                "GET",
                "/v1/metrics",
                None,
            )
            .await;
            m.as_str()
                .is_some_and(|m| m.contains(r#"postbox_handlers_running{subscription="ship"} 1"#))
        },
    )
    .await;
    server.kill();
    hooks.slow.lock().unwrap().clear();

    let server = node.start();
    until(
        &server,
        "every event delivered after the restart",
        90,
        async || hooks.of("ship").len() >= 4,
    )
    .await;
    let seen = hooks.of("ship");
    assert_eq!(
        by_tenant(&seen)["acme"],
        [1, 2, 3, 4],
        "in order, each once: {seen:?}"
    );
    assert!(dead_letters(&server).await.is_empty());
    // The log is whole: four events, read back through the API.
    let (status, log) = call(&server.base, Some(&token), "GET", "/v1/events", None).await;
    assert_eq!(
        (status, log["events"].as_array().map(Vec::len)),
        (200, Some(4)),
        "{log}"
    );
    let (status, logs) = server.terminate();
    assert!(status.success(), "{logs}");
}

/// One keyed emit, retried with the same Idempotency-Key against whatever
/// node is up at `base` until it is acknowledged (a node killed mid-request
/// may or may not have committed it; the key makes the retry safe).
async fn emit_until_acknowledged(base: &Mutex<String>, token: &str, key: &str, i: u32) -> Value {
    use http_body_util::{BodyExt, Full};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let body = json!({"type": "ORDER_PLACED", "payload": {"i": i}}).to_string();
    for _ in 0..600 {
        let url = format!("{}/v1/events", base.lock().unwrap());
        let req = hyper::Request::post(url)
            .header("authorization", format!("Bearer {token}"))
            .header("idempotency-key", key)
            .body(Full::new(body.clone().into()))
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), async {
            let res = client.request(req).await.ok()?;
            let status = res.status().as_u16();
            let bytes = res.into_body().collect().await.ok()?.to_bytes();
            Some((status, serde_json::from_slice::<Value>(&bytes).ok()?))
        })
        .await;
        if let Ok(Some((200 | 201, v))) = answer {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("emit {key} was never acknowledged");
}

/// Chaos: while three tenants emit keyed events (15 each, or
/// `POSTBOX_CHAOS_PER_TENANT`), the node is killed
/// (SIGKILL) every second or two and restarted on its own data. Then every
/// acknowledged emit is in its tenant's log once, every event reached both
/// subscriptions with its idempotency key and completed there, nothing is
/// dead, and `verify` finds every chain intact.
async fn chaos_kills_lose_nothing(backend: Backend) {
    let hooks = Hooks::default();
    let hook_base = hooks.serve().await;
    let node = Node::new(
        backend,
        "chaos",
        &catalog(&hook_base, &[("a", 5), ("b", 5)]),
    );
    let server = node.start();
    let tenants = ["acme", "globex", "initech"];
    let mut tokens = Vec::new();
    for t in tenants {
        tokens.push(server.tenant_token(t).await);
    }
    let admin = server.admin.clone();
    let base = Arc::new(Mutex::new(server.base.clone()));
    // Small in CI; `POSTBOX_CHAOS_PER_TENANT=200` for the full run.
    let per_tenant: u32 = std::env::var("POSTBOX_CHAOS_PER_TENANT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(15);
    let emitters: Vec<_> = tokens
        .iter()
        .enumerate()
        .map(|(n, token)| {
            let (base, token) = (base.clone(), token.clone());
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..per_tenant {
                    let v = emit_until_acknowledged(&base, &token, &format!("t{n}-e{i}"), i).await;
                    ids.push(v["event"]["id"].as_str().unwrap().to_owned());
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                ids
            })
        })
        .collect();
    let mut server = server;
    let mut kills = 0;
    while !emitters.iter().all(|e| e.is_finished()) {
        tokio::time::sleep(Duration::from_millis(800 + (kills * 373 % 900))).await;
        server.kill();
        kills += 1;
        server = node.start();
        *base.lock().unwrap() = server.base.clone();
    }
    let mut acknowledged = Vec::new();
    for e in emitters {
        acknowledged.push(e.await.unwrap());
    }
    assert!(kills >= 2, "the node was killed only {kills} times");

    // Every acknowledged event, once, in its tenant's log; each completed
    // at both subscriptions, whatever reached a webhook twice.
    let total = tenants.len() * per_tenant as usize;
    until(&server, "every event at both webhooks", 120, async || {
        let keys = |name: &str| {
            let mut k: Vec<String> = hooks.of(name).into_iter().map(|(_, _, key)| key).collect();
            k.sort();
            k.dedup();
            k.len()
        };
        keys("a") == total && keys("b") == total
    })
    .await;
    for (t, ids) in tenants.iter().zip(&acknowledged) {
        let token = server.tenant_token(t).await;
        let (status, log) = call(
            &server.base,
            Some(&token),
            "GET",
            "/v1/events?limit=1000",
            None,
        )
        .await;
        assert_eq!(status, 200, "{log}");
        let logged: Vec<&str> = log["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"]["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            logged, *ids,
            "tenant {t}: the log is the acknowledged emits, in order"
        );
        for seq in 1..=ids.len() {
            until(&server, "both claims completed", 60, async || {
                let (_, e) = call(
                    &server.base,
                    Some(&admin),
                    "GET",
                    &format!("/v1/events/{seq}?tenant={t}"),
                    None,
                )
                .await;
                e["deliveries"]
                    .as_array()
                    .is_some_and(|d| d.len() == 2 && d.iter().all(|d| d["status"] == "completed"))
            })
            .await;
        }
    }
    assert!(dead_letters(&server).await.is_empty());
    let mut verify = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"));
    verify.arg("verify").arg("--full");
    match backend {
        Backend::Embedded => {
            verify
                .args(["--endpoint", &server.base, "--data"])
                .arg(&node.data);
        }
        Backend::Aws => {
            verify
                .args(["--backend", "aws", "--aws-prefix", &node.prefix])
                .envs(aws_env());
        }
    }
    let out = verify.output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("every chain is intact"), "{said}");
    eprintln!("chaos on {backend:?}: {total} events, {kills} kills");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_chaos_kills_lose_nothing() {
    chaos_kills_lose_nothing(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn aws_chaos_kills_lose_nothing() {
    chaos_kills_lose_nothing(Backend::Aws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_retries_dead_letters_and_replay() {
    retries_dead_letters_and_replay(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn aws_retries_dead_letters_and_replay() {
    retries_dead_letters_and_replay(Backend::Aws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_killed_node_restarts_and_loses_nothing() {
    a_killed_node_restarts_and_loses_nothing(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn aws_a_killed_node_restarts_and_loses_nothing() {
    a_killed_node_restarts_and_loses_nothing(Backend::Aws).await;
}

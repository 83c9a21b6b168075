//! Webhook subscriptions end to end through `postbox serve`: a receiver
//! that fails with 503 and Retry-After, then succeeds, gets the event twice
//! with the same idempotency key, signed, no sooner than it asked; a
//! receiver that answers 400 dead-letters the delivery at once.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::{Server, call, until};
use serde_json::{Value, json};

#[derive(Clone, Debug)]
struct Call {
    at: Instant,
    headers: HeaderMap,
    body: Vec<u8>,
}

#[derive(Clone, Default)]
struct Receiver {
    flaky: Arc<Mutex<Vec<Call>>>,
    bad: Arc<Mutex<Vec<Call>>>,
}

async fn flaky(
    State(r): State<Receiver>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, HeaderMap, &'static str) {
    let mut calls = r.flaky.lock().unwrap();
    calls.push(Call {
        at: Instant::now(),
        headers,
        body: body.to_vec(),
    });
    let mut h = HeaderMap::new();
    if calls.len() == 1 {
        h.insert("retry-after", "3".parse().unwrap());
        (StatusCode::SERVICE_UNAVAILABLE, h, "busy")
    } else {
        (StatusCode::OK, h, "ok")
    }
}

async fn bad(
    State(r): State<Receiver>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, &'static str) {
    r.bad.lock().unwrap().push(Call {
        at: Instant::now(),
        headers,
        body: body.to_vec(),
    });
    (StatusCode::BAD_REQUEST, "unknown order")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_retried_after_what_they_ask_and_dead_lettered_on_4xx() {
    let receiver = Receiver::default();
    let app = axum::Router::new()
        .route("/flaky", post(flaky))
        .route("/bad", post(bad))
        .with_state(receiver.clone());
    let hook = common::serve_router(app).await;

    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["shop"]
[[producers]]
name = "shop"
emits = ["ORDER_PLACED"]
[[subscriptions]]
name = "hook-flaky"
glob = "ORDER_*"
lane = "DURABLE"
handler = "http://{hook}/flaky"
retry = {{ max_attempts = 5, backoff_ms = 100 }}
[[subscriptions]]
name = "hook-bad"
glob = "ORDER_*"
lane = "DURABLE"
handler = "http://{hook}/bad"
"#
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&["serve", "--catalog", catalog.to_str().unwrap()], &data);
    let (base, admin) = (server.base.clone(), server.admin.clone());
    let tenant = server.tenant_token("acme").await;
    let (status, emitted) = call(
        &base,
        Some(&tenant),
        "POST",
        "/v1/events",
        Some(json!({"type": "ORDER_PLACED", "payload": {"order_id": "7"}})),
    )
    .await;
    assert_eq!(status, 201, "{emitted}");
    let event_id = emitted["event"]["id"].as_str().unwrap().to_owned();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, dl) = call(&base, Some(&admin), "GET", "/v1/dead-letters", None).await;
        let done = receiver.flaky.lock().unwrap().len() >= 2
            && dl["dead_letters"].as_array().is_some_and(|a| !a.is_empty());
        if done {
            // The flaky hook completed and the bad one is dead; nothing more comes.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let dl = dl["dead_letters"].as_array().unwrap().clone();
            assert_eq!(dl.len(), 1, "{dl:?}");
            assert_eq!(dl[0]["subscription"], "hook-bad");
            assert_eq!(dl[0]["attempts"], 1);
            assert!(
                dl[0]["error"].as_str().unwrap().contains("400"),
                "{}",
                dl[0]
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "deliveries did not settle: flaky {} bad {}",
            receiver.flaky.lock().unwrap().len(),
            receiver.bad.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let secret = std::fs::read_to_string(data.join("webhook-secret")).unwrap();
    let secret = secret.trim().as_bytes();
    let flaky = receiver.flaky.lock().unwrap().clone();
    assert_eq!(
        flaky.len(),
        2,
        "the flaky hook is called until it succeeds, then never again"
    );
    assert_eq!(
        receiver.bad.lock().unwrap().len(),
        1,
        "a 4xx is not retried"
    );
    let now = postbox_engine::envelope::now_ms() / 1000;
    for (i, c) in flaky.iter().enumerate() {
        let h = |n: &str| c.headers.get(n).unwrap().to_str().unwrap().to_owned();
        assert_eq!(h("idempotency-key"), format!("{event_id}:hook-flaky"));
        assert_eq!(h("postbox-attempt"), (i + 1).to_string());
        assert!(postbox_api::webhook::verify_signature(
            secret,
            &h("postbox-timestamp"),
            &c.body,
            &h("postbox-signature"),
            now,
            Duration::from_secs(300)
        ));
        // A tampered body fails the check.
        let mut tampered = c.body.clone();
        tampered[0] ^= 1;
        assert!(!postbox_api::webhook::verify_signature(
            secret,
            &h("postbox-timestamp"),
            &tampered,
            &h("postbox-signature"),
            now,
            Duration::from_secs(300)
        ));
        let body: Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(body["id"], event_id.as_str());
        assert_eq!(body["payload"]["order_id"], "7");
    }
    let gap = flaky[1].at - flaky[0].at;
    assert!(
        gap >= Duration::from_millis(2900),
        "the retry came {gap:?} after a Retry-After of 3 s"
    );
}

/// A child process killed when dropped.
struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_separate_worker_process_delivers_webhooks_over_the_wire() {
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = calls.clone();
    let app = axum::Router::new().route(
        "/ok",
        post(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(headers["idempotency-key"].to_str().unwrap().to_owned());
                StatusCode::NO_CONTENT
            }
        }),
    );
    let hook = common::serve_router(app).await;
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[[event_types]]\nname = \"PING\"\nproducers = [\"p\"]\n[[producers]]\nname = \"p\"\nemits = [\"PING\"]\n\
             [[subscriptions]]\nname = \"hook\"\nglob = \"PING\"\nlane = \"DURABLE\"\nhandler = \"http://{hook}/ok\"\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    // The server runs no worker of its own.
    let server = Server::start(
        &[
            "serve",
            "--workers",
            "0",
            "--catalog",
            catalog.to_str().unwrap(),
        ],
        &data,
    );
    let base = server.base.clone();
    let secret = std::fs::read_to_string(data.join("webhook-secret")).unwrap();
    // Against an address where nothing answers, the worker exits 3
    // (unreachable), as every client command does.
    let unreachable = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["worker", "--endpoint", "http://127.0.0.1:9", "--catalog"])
        .arg(&catalog)
        .arg("--data")
        .arg(&data)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("POSTBOX_WEBHOOK_SECRET", secret.trim())
        .output()
        .unwrap();
    assert_eq!(
        unreachable.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&unreachable.stderr)
    );
    // Without a secret given or a data directory holding one: refused.
    let nowhere = dir.path().join("elsewhere");
    let refused = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["worker", "--endpoint", &base, "--catalog"])
        .arg(&catalog)
        .arg("--data")
        .arg(&nowhere)
        .env_remove("POSTBOX_WEBHOOK_SECRET")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("no webhook secret"), "{said}");
    let worker = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["worker", "--endpoint", &base, "--workers", "2", "--catalog"])
        .arg(&catalog)
        // Signs with the admin access key the server wrote there, and
        // webhooks with the server's webhook secret, read from there too.
        .arg("--data")
        .arg(&data)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("POSTBOX_WEBHOOK_SECRET")
        .env("POSTBOX_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _worker = Kill(worker);
    let tenant = server.tenant_token("acme").await;
    let mut ids = Vec::new();
    // Three events, then a fourth once they are delivered: an event of the
    // tenant leaves its queue group only after the one before it is done,
    // so any second delivery of the first three comes before the fourth.
    for n in 0..4 {
        if n == 3 {
            until("the first three webhooks", 30, async || {
                calls.lock().unwrap().len() >= 3
            })
            .await;
        }
        let (status, e) = call(
            &base,
            Some(&tenant),
            "POST",
            "/v1/events",
            Some(json!({"type": "PING", "payload": {}})),
        )
        .await;
        assert_eq!(status, 201);
        ids.push(format!("{}:hook", e["event"]["id"].as_str().unwrap()));
    }
    until("the fourth webhook", 30, async || {
        calls.lock().unwrap().len() >= 4
    })
    .await;
    assert_eq!(*calls.lock().unwrap(), ids, "each event once, in order");
}

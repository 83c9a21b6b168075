//! Webhook deliveries follow the Standard Webhooks specification: a real
//! delivery from `postbox serve` is checked by that specification's own
//! Python library (`standardwebhooks` from PyPI, which no one here wrote),
//! with the secret `postbox serve` wrote into its data directory; the same
//! delivery with one byte of its body changed is refused by it.
//!
//! `scripts/test` runs it with `POSTBOX_TEST_PYTHON` naming a Python that
//! has `standardwebhooks` (a plain `cargo test` ignores it).

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::{Server, call};
use serde_json::json;

type Calls = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

async fn receive(
    State(calls): State<Calls>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    calls.lock().unwrap().push((headers, body.to_vec()));
    StatusCode::OK
}

/// Runs the `standardwebhooks` library's check on one delivery; true when
/// it accepts it.
fn python_verifies(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let python = std::env::var("POSTBOX_TEST_PYTHON").expect(
        "POSTBOX_TEST_PYTHON: a Python with the standardwebhooks package (scripts/test sets it)",
    );
    let h = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_owned();
    let script = r#"
import sys, json
from standardwebhooks.webhooks import Webhook
secret, headers, body = sys.argv[1], json.loads(sys.argv[2]), sys.stdin.buffer.read()
try:
    Webhook(secret).verify(body, headers)
except Exception as e:
    print(f"refused: {e}")
    sys.exit(1)
print("verified")
"#;
    let headers = json!({
        "webhook-id": h("webhook-id"),
        "webhook-timestamp": h("webhook-timestamp"),
        "webhook-signature": h("webhook-signature"),
    });
    let mut child = Command::new(python)
        .args(["-c", script, secret, &headers.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.contains("verified") || said.contains("refused"),
        "the library did not run: {said}"
    );
    out.status.success()
}

/// Starts `postbox serve` with a webhook subscription to a local receiver
/// (and `secret` in its data directory, if given), emits one event and
/// returns the delivery's headers, body, the event id and the data
/// directory's secret setting.
async fn one_delivery(secret: Option<&str>) -> (HeaderMap, Vec<u8>, String, String) {
    let calls = Calls::default();
    let app = axum::Router::new()
        .route("/hook", post(receive))
        .with_state(calls.clone());
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
name = "hook"
glob = "ORDER_*"
lane = "DURABLE"
handler = "http://{hook}/hook"
"#
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    if let Some(secret) = secret {
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("webhook-secret"), secret).unwrap();
    }
    let server = Server::start(&["serve", "--catalog", catalog.to_str().unwrap()], &data);
    let tenant = server.tenant_token("acme").await;
    let (status, emitted) = call(
        &server.base,
        Some(&tenant),
        "POST",
        "/v1/events",
        Some(json!({"type": "ORDER_PLACED", "payload": {"order_id": "7"}})),
    )
    .await;
    assert_eq!(status, 201, "{emitted}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while calls.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no delivery within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (headers, body) = calls.lock().unwrap()[0].clone();
    let setting = std::fs::read_to_string(data.join("webhook-secret"))
        .unwrap()
        .trim()
        .to_owned();
    let event_id = emitted["event"]["id"].as_str().unwrap().to_owned();
    (headers, body, event_id, setting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with standardwebhooks: scripts/test runs it"]
async fn the_standard_webhooks_library_verifies_a_real_delivery() {
    let (headers, body, event_id, secret) = one_delivery(None).await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(
        headers.get("webhook-id").unwrap(),
        &format!("{event_id}:hook")
    );
    assert!(python_verifies(&secret, &headers, &body));
    let mut tampered = body.clone();
    tampered[1] ^= 1;
    assert!(!python_verifies(&secret, &headers, &tampered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with standardwebhooks: scripts/test runs it"]
async fn while_a_secret_rolls_out_receivers_with_either_accept_deliveries() {
    use base64::Engine;
    let b64 = |b: u8| base64::engine::general_purpose::STANDARD.encode([b; 32]);
    let (old, new, other) = (
        format!("whsec_{}", b64(1)),
        format!("whsec_{}", b64(2)),
        format!("whsec_{}", b64(3)),
    );
    let (headers, body, _, _) = one_delivery(Some(&format!("{old} {new}"))).await;
    assert!(python_verifies(&old, &headers, &body));
    assert!(python_verifies(&new, &headers, &body));
    assert!(!python_verifies(&other, &headers, &body));
}

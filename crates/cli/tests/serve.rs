//! `postbox serve` with no configuration: the built-in example application
//! behind the API's tokens — a payment emitted through the API reaches its
//! four durable handlers, the report-job API is scoped to the token's
//! tenant — and SIGTERM shuts it down cleanly.

mod common;

use std::time::{Duration, Instant};

use common::{Server, call};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_server_runs_the_examples_behind_tokens_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // No subcommand: `postbox` is `postbox serve`.
    let server = Server::start(&[], &dir.path().join("data"));
    let (base, admin) = (server.base.clone(), server.admin.clone());
    let acme = server.tenant_token("acme").await;
    let globex = server.tenant_token("globex").await;

    // A payment through the API: its row and its event in one transaction.
    let payment = json!({
        "type": "PAYMENT_COMPLETED",
        "payload": {"order_id": "A-1", "amount": 500, "currency": "EUR", "buyer": "ada@example.com", "tag": "lamp-1"},
        "writes": [{"Put": {"TableName": "shop", "Item": {"pk": {"S": "acme#payment#A-1"}, "sk": {"S": "PAYMENT"}}}}]
    });
    let (status, e) = call(&base, Some(&acme), "POST", "/v1/events", Some(payment)).await;
    assert_eq!(status, 201, "{e}");
    server
        .metrics_when("the four handlers did not complete", |m| {
            m.contains("postbox_worker_total{outcome=\"completed\"} 4")
        })
        .await;
    let (_, r) = call(&base, Some(&admin), "GET", "/v1/reconciliation", None).await;
    assert_eq!(r["verdict"], "ok", "{r}");

    // The report-job API needs a tenant token and answers only its tenant.
    let (status, _) = call(
        &base,
        None,
        "POST",
        "/reports",
        Some(json!({"branch": "main"})),
    )
    .await;
    assert_eq!(status, 401);
    let (status, job) = call(
        &base,
        Some(&acme),
        "POST",
        "/reports",
        Some(json!({"branch": "main"})),
    )
    .await;
    assert_eq!(status, 202, "{job}");
    let path = job["statusUrl"].as_str().unwrap().to_owned();
    let (status, _) = call(&base, Some(&globex), "GET", &path, None).await;
    assert_eq!(status, 404);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, j) = call(&base, Some(&acme), "GET", &path, None).await;
        assert_eq!(status, 200);
        if j["status"] == "SUCCEEDED" {
            break;
        }
        assert!(Instant::now() < deadline, "{j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // SIGTERM: the server stops accepting, the workers and the relay stop, exit 0.
    let (exit, log) = server.terminate();
    assert!(exit.success(), "exit {exit:?}: {log}");
}

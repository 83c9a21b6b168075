//! `postbox --examples` (no subcommand is `serve`): the built-in example
//! application behind the API's tokens — a payment emitted through the API
//! reaches its four durable handlers, the report-job API is scoped to the
//! token's tenant — and SIGTERM shuts it down cleanly. With no catalog and
//! no `--examples`, an empty node that says so.

mod common;

use common::{Server, call};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_server_runs_the_examples_behind_tokens_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // No subcommand: `postbox` is `postbox serve`.
    let server = Server::start(&["--examples"], &dir.path().join("data"));
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
    common::report_job_succeeds(&base, &acme, &globex).await;

    // SIGTERM: the server stops accepting, the workers and the relay stop, exit 0.
    let (exit, log) = server.terminate();
    assert!(exit.success(), "exit {exit:?}: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_catalog_the_node_is_empty_and_says_how_to_fill_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    while !banner.contains("no catalog") {
        use std::io::BufRead;
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        banner.push_str(&line);
    }
    let base = banner
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    assert!(banner.contains("--catalog FILE, or --examples"), "{banner}");
    let admin = std::fs::read_to_string(data.join("admin-token")).unwrap();
    let (status, t) = call(
        &base,
        Some(admin.trim()),
        "POST",
        "/v1/tokens",
        Some(json!({"tenant": "acme"})),
    )
    .await;
    assert_eq!(status, 201, "{t}");
    // No example types, tables or routes.
    let (status, e) = call(
        &base,
        t["token"].as_str(),
        "POST",
        "/v1/events",
        Some(json!({"type": "PAYMENT_COMPLETED", "payload": {}})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["code"], "unknown_event_type", "{e}");
    let (status, _) = call(&base, t["token"].as_str(), "GET", "/reports/x", None).await;
    assert_eq!(status, 404);
    let _ = child.kill();
    let _ = child.wait();
}

//! Every node restarts on its own data directory: the default node (the
//! built-in examples) and a node with a catalog of its own, three times
//! each, after a clean stop (SIGTERM) and after kill -9. What was
//! acknowledged before a stop is still there after it, the chains verify,
//! and the node keeps accepting emits.

mod common;

use std::path::Path;

use common::{Server, call};
use serde_json::json;

fn payment(n: usize) -> serde_json::Value {
    json!({
        "type": "PAYMENT_COMPLETED",
        "payload": {"order_id": format!("R-{n}"), "amount": 500, "currency": "EUR", "buyer": "ada@example.com", "tag": "lamp-1"},
        "writes": [{"Put": {"TableName": "shop", "Item": {"pk": {"S": format!("acme#payment#R-{n}")}, "sk": {"S": "PAYMENT"}}}}]
    })
}

/// Starts the node in `data` three times after the first run, stopping it
/// cleanly, by kill -9, cleanly again; each run emits `emit(n)` with the
/// tenant token made in the first run and checks every earlier event.
async fn restart_three_times(
    args: &[&str],
    data: &Path,
    emit: impl Fn(usize) -> serde_json::Value,
) {
    // At info, so the store's closing checkpoint is logged.
    let start = || Server::start_with_env(args, data, &[("POSTBOX_LOG", "info".to_owned())]);
    let server = start();
    let acme = server.tenant_token("acme").await;
    let admin = server.admin.clone();
    let mut server = Some(server);
    for run in 0..4 {
        let s = match server.take() {
            Some(s) => s,
            None => start(),
        };
        assert_eq!(s.admin, admin, "a restart keeps the admin token");
        let (status, e) = call(&s.base, Some(&acme), "POST", "/v1/events", Some(emit(run))).await;
        assert_eq!(status, 201, "run {run}: {e}");
        assert_eq!(e["event"]["seq"], run as u64 + 1, "run {run}: {e}");
        let (status, log) = call(&s.base, Some(&acme), "GET", "/v1/events", None).await;
        assert_eq!(status, 200, "{log}");
        assert_eq!(
            log["events"].as_array().unwrap().len(),
            run + 1,
            "run {run}: every acknowledged event survives: {log}"
        );
        let (status, r) = call(&s.base, Some(&acme), "GET", "/v1/reconciliation", None).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["tenants"][0]["chain_intact"], true, "run {run}: {r}");
        assert_eq!(
            r["tenants"][0]["head_seq"],
            run as u64 + 1,
            "run {run}: {r}"
        );
        match run {
            // After the last run the test is over.
            3 => drop(s),
            1 => s.kill(),
            _ => {
                let (exit, log) = s.terminate();
                assert!(exit.success(), "run {run}: exit {exit:?}: {log}");
                // Its last line follows the store's closing checkpoint (which
                // logs the save of the examples' `shop` index).
                let saved = log.find("saved the arrival indexes for the next open");
                let done = log.find("shut down cleanly");
                assert!(
                    done.is_some() && saved.is_some() == args.contains(&"--examples"),
                    "run {run}: {log}"
                );
                assert!(
                    saved < done,
                    "run {run}: the node said it shut down before the store closed: {log}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_node_restarts_on_its_data_after_stop_and_kill() {
    let dir = tempfile::tempdir().unwrap();
    restart_three_times(&["--examples"], &dir.path().join("data"), payment).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_its_own_catalog_restarts_on_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/api-catalog.toml"
    );
    restart_three_times(
        &["serve", "--catalog", catalog],
        &dir.path().join("data"),
        |n| json!({"type": "ORDER_PLACED", "payload": {"order_id": format!("O-{n}")}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_commit_log_went_missing_after_a_crash_is_refused_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&["--examples"], &data);
    let acme = s.tenant_token("acme").await;
    let (status, e) = call(&s.base, Some(&acme), "POST", "/v1/events", Some(payment(0))).await;
    assert_eq!(status, 201, "{e}");
    s.kill();
    for region in ["postbox.redb-log", "postbox.redb-log.1"] {
        std::fs::remove_file(data.join(region)).unwrap();
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["serve", "--examples", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("postbox.redb-log") && err.contains("recover"),
        "{err}"
    );
    // Told to, it starts with what survives.
    let s = Server::start(&["serve", "--examples", "--recover-truncated"], &data);
    let (status, _) = call(&s.base, Some(&s.admin), "GET", "/v1/health", None).await;
    assert_eq!(status, 200);
}

/// A stop while a client follows the log (a stream that never ends): the
/// server cuts the stream after its graceful wait, so the store closes, with
/// its closing checkpoint, before the node says it shut down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_a_follower_connected_closes_the_store_before_it_exits() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_with_env(
        &["--examples"],
        &dir.path().join("data"),
        &[("POSTBOX_LOG", "info".to_owned())],
    );
    let acme = s.tenant_token("acme").await;
    let (status, e) = call(&s.base, Some(&acme), "POST", "/v1/events", Some(payment(0))).await;
    assert_eq!(status, 201, "{e}");
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut follower = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /v1/events/stream HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {acme}\r\n\r\n"
    );
    follower.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 256];
    let n = follower.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (exit, log) = tokio::task::spawn_blocking(move || s.terminate())
        .await
        .unwrap();
    assert!(exit.success(), "exit {exit:?}: {log}");
    assert!(!log.contains("still in use"), "{log}");
    let saved = log.find("saved the arrival indexes for the next open");
    let done = log.find("shut down cleanly");
    assert!(
        saved.is_some() && saved < done,
        "the node said it shut down before the store closed: {log}"
    );
    drop(follower);
}

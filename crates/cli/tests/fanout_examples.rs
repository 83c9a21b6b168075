//! The payment fan-out written outside Rust (`examples/python/payments.py`,
//! `examples/typescript/payments.mjs`): four pull subscriptions, one flaky,
//! each effect keyed by its delivery's idempotency key. The consumer is
//! killed (SIGKILL) mid-handler and started again: every effect happens
//! once, every delivery completes with its result recorded, and the flaky
//! one was retried.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{Server, call, until};
use serde_json::{Value, json};

fn consumer(program: &str, script: &str, server: &Server, ledger: &Path, pause: &str) -> Child {
    Command::new(program)
        .arg(format!(
            "{}/../../examples/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .env("POSTBOX_ENDPOINT", &server.base)
        .env("POSTBOX_TOKEN", &server.admin)
        .env("LEDGER", ledger)
        .env("LEASE_SECONDS", "2")
        .env("PAUSE_AFTER_EFFECT", pause)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

fn ledger(path: &Path) -> Vec<Value> {
    common::json_lines(path)
}

/// Each event's four deliveries, by tenant and seq.
async fn deliveries(server: &Server, tenant: &str, seq: u64) -> Vec<Value> {
    let (status, body) = call(
        &server.base,
        Some(&server.admin),
        "GET",
        &format!("/v1/events/{seq}?tenant={tenant}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["deliveries"].as_array().unwrap().clone()
}

async fn fan_out_happens_once(program: &str, script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &[
            "serve",
            "--catalog",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../examples/pull/payments.toml"
            ),
        ],
        &dir.path().join("data"),
    );
    let tenants = ["acme", "globex"];
    for tenant in tenants {
        let token = server.tenant_token(tenant).await;
        for i in 1..=3 {
            let (status, body) = call(
                &server.base,
                Some(&token),
                "POST",
                "/v1/events",
                Some(json!({"type": "PAYMENT_COMPLETED", "payload": {
                    "order_id": format!("{tenant}-{i}"), "amount": 100 * i,
                    "buyer": format!("buyer{i}@{tenant}.example"), "tag": format!("lamp-{i}")}})),
            )
            .await;
            assert_eq!(status, 201, "{body}");
        }
    }
    let path = dir.path().join("ledger.jsonl");

    // The first process applies a few effects and is killed before it
    // completes them.
    let mut first = consumer(program, script, &server, &path, "60");
    until("the first effects", 30, async || ledger(&path).len() >= 3).await;
    first.kill().unwrap();
    first.wait().unwrap();
    let before_restart = ledger(&path).len();

    // Started again: the deliveries it held come back after their leases.
    let second = consumer(program, script, &server, &path, "0");
    until("every delivery completed", 90, async || {
        for tenant in tenants {
            for seq in 1..=3 {
                let d = deliveries(&server, tenant, seq).await;
                if d.len() != 4 || d.iter().any(|d| d["status"] != "completed") {
                    return false;
                }
            }
        }
        true
    })
    .await;
    let _ = Command::new("kill").arg(second.id().to_string()).status();
    let out = second.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stops cleanly on SIGTERM: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // 6 events x 4 subscriptions: each effect once, whatever came twice.
    let effects = ledger(&path);
    let mut keys: Vec<&str> = effects.iter().map(|e| e["key"].as_str().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!((effects.len(), keys.len()), (24, 24), "{effects:#?}");
    assert!(before_restart < 24, "the kill came before the end");
    let mut found_again = 0;
    for tenant in tenants {
        for seq in 1..=3 {
            for d in deliveries(&server, tenant, seq).await {
                let line = d["result"]["ledger_line"].as_u64();
                assert!(
                    line.is_some_and(|n| (1..=24).contains(&n)),
                    "no result recorded: {d}"
                );
                found_again += (d["result"]["again"] == true) as usize;
                if d["subscription"] == "notification" {
                    assert!(
                        d["attempts"].as_u64() >= Some(1),
                        "the flaky handler was not retried: {d}"
                    );
                }
            }
        }
    }
    // Each effect the killed process applied came back and was found done.
    assert_eq!(found_again, before_restart);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_fan_out_happens_once_across_a_killed_consumer() {
    fan_out_happens_once("python3", "python/payments.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_fan_out_happens_once_across_a_killed_consumer() {
    fan_out_happens_once("node", "typescript/payments.mjs").await;
}

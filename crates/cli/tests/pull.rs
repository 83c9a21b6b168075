//! Pull subscriptions over HTTP against a real `postbox serve`: a consumer
//! receives deliveries under a lease and settles them, a tenant's events
//! come one at a time, a lease that runs out brings the delivery back to
//! another consumer, a spent handle is refused, and bad requests change
//! nothing.

mod common;

use common::{Server, call, until};
use serde_json::{Value, json};

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["shop"]

[[event_types]]
name = "NOTE"
producers = ["shop"]

[[producers]]
name = "shop"
emits = ["ORDER_PLACED", "NOTE"]

[[subscriptions]]
name = "billing"
glob = "ORDER_*"
lane = "DURABLE"
handler = "pull"
retry = { max_attempts = 4, backoff_ms = 100 }

[[subscriptions]]
name = "notes"
glob = "NOTE"
lane = "DURABLE"
handler = "http://127.0.0.1:9/notes"
"#;

fn start(dir: &std::path::Path, workers: &str) -> Server {
    let catalog = dir.join("catalog.toml");
    std::fs::write(&catalog, CATALOG).unwrap();
    Server::start(
        &[
            "serve",
            "--catalog",
            catalog.to_str().unwrap(),
            "--workers",
            workers,
        ],
        &dir.join("data"),
    )
}

async fn emit(server: &Server, token: &str, i: u32) -> String {
    let (status, body) = call(
        &server.base,
        Some(token),
        "POST",
        "/v1/events",
        Some(json!({"type": "ORDER_PLACED", "payload": {"i": i}})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["event"]["id"].as_str().unwrap().to_owned()
}

async fn receive(server: &Server, token: &str, body: Value) -> (u16, Value) {
    call(
        &server.base,
        Some(token),
        "POST",
        "/v1/subscriptions/billing/receive",
        Some(body),
    )
    .await
}

/// The deliveries of a receive that must succeed.
async fn deliveries(server: &Server, token: &str, body: Value) -> Vec<Value> {
    let (status, got) = receive(server, token, body).await;
    assert_eq!(status, 200, "{got}");
    got["deliveries"].as_array().unwrap().clone()
}

async fn settle(server: &Server, token: &str, verb: &str, body: Value) -> (u16, Value) {
    call(
        &server.base,
        Some(token),
        "POST",
        &format!("/v1/subscriptions/billing/{verb}"),
        Some(body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_consumer_gets_each_tenants_events_in_order_and_a_lost_lease_brings_one_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "2");
    let acme = server.tenant_token("acme").await;
    let globex = server.tenant_token("globex").await;
    let first = emit(&server, &acme, 1).await;
    let second = emit(&server, &acme, 2).await;
    let other = emit(&server, &globex, 1).await;

    // A tenant token sees its own tenant's first event only: the second
    // waits until the first is settled.
    let got = deliveries(&server, &acme, json!({"max": 10, "wait_seconds": 10})).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let d = &got[0];
    assert_eq!(d["event"]["id"], first.as_str());
    assert_eq!(d["event"]["tenant"], "acme");
    assert_eq!(d["attempt"], 1);
    assert_eq!(d["idempotency_key"], format!("{first}:billing").as_str());
    assert!(d["lease_expires_at_ms"].as_u64().unwrap() > 0);
    let handle = d["handle"].as_str().unwrap().to_owned();
    let again = deliveries(&server, &acme, json!({"max": 10, "wait_seconds": 1})).await;
    assert!(again.is_empty(), "{again:?}");

    // Another tenant cannot settle it; the holder can, once.
    let (status, body) = settle(&server, &globex, "complete", json!({"handle": handle})).await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = settle(
        &server,
        &acme,
        "extend",
        json!({"handle": handle, "lease_seconds": 60}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = settle(
        &server,
        &acme,
        "complete",
        json!({"handle": handle, "result": {"invoice": "INV-1"}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = settle(&server, &acme, "complete", json!({"handle": handle})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "lease_lost", "{body}");
    // The result is recorded in the claim, beside its completion.
    let mut shown = Value::Null;
    for _ in 0..100 {
        let (status, body) = call(&server.base, Some(&acme), "GET", "/v1/events/1", None).await;
        assert_eq!(status, 200, "{body}");
        shown = body["deliveries"][0].clone();
        if shown["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(shown["subscription"], "billing", "{shown}");
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["result"], json!({"invoice": "INV-1"}), "{shown}");

    // The next one: failed, it comes back as the next attempt.
    let got = deliveries(&server, &acme, json!({"wait_seconds": 10})).await;
    assert_eq!(got[0]["event"]["id"], second.as_str());
    let (status, body) = settle(
        &server,
        &acme,
        "fail",
        json!({"handle": got[0]["handle"], "error": "card network down"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let got = deliveries(
        &server,
        &acme,
        json!({"wait_seconds": 10, "lease_seconds": 1}),
    )
    .await;
    assert_eq!(got[0]["event"]["id"], second.as_str());
    assert_eq!(got[0]["attempt"], 2);
    let stale = got[0]["handle"].as_str().unwrap().to_owned();

    // Its consumer dies: the lease runs out, and another consumer gets it.
    let got = deliveries(&server, &acme, json!({"wait_seconds": 15})).await;
    assert_eq!(got[0]["event"]["id"], second.as_str());
    assert_eq!(got[0]["attempt"], 3);
    let (status, _) = settle(&server, &acme, "complete", json!({"handle": stale})).await;
    assert_eq!(status, 409);
    let (status, body) = settle(
        &server,
        &acme,
        "complete",
        json!({"handle": got[0]["handle"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // An admin token receives every tenant's.
    let got = deliveries(&server, &server.admin, json!({"wait_seconds": 10})).await;
    assert_eq!(got[0]["event"]["id"], other.as_str());
    let (status, body) = settle(
        &server,
        &server.admin,
        "fail",
        json!({"handle": got[0]["handle"], "error": "no such customer", "terminal": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A terminal failure is a dead letter, with the consumer's words.
    let mut dead = Value::Null;
    for _ in 0..100 {
        let (status, body) = call(
            &server.base,
            Some(&server.admin),
            "GET",
            "/v1/dead-letters",
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        if body["dead_letters"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
        {
            dead = body;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let dead = &dead["dead_letters"][0];
    assert_eq!(dead["event_id"], other.as_str(), "{dead}");
    assert_eq!(dead["subscription"], "billing");
    assert!(
        dead["error"]
            .as_str()
            .unwrap_or("")
            .contains("no such customer"),
        "{dead}"
    );

    // Replayed, as any subscription's dead letter: it comes back to a
    // consumer with its attempts reset, and completes.
    let (status, replayed) = call(
        &server.base,
        Some(&server.admin),
        "POST",
        "/v1/dead-letters/replay",
        Some(json!({"subscription": "billing"})),
    )
    .await;
    assert_eq!(status, 200, "{replayed}");
    let got = deliveries(&server, &server.admin, json!({"wait_seconds": 15})).await;
    assert_eq!(got[0]["event"]["id"], other.as_str(), "{replayed}");
    assert_eq!(got[0]["attempt"], 1);
    let (status, body) = settle(
        &server,
        &server.admin,
        "complete",
        json!({"handle": got[0]["handle"]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Nothing is left to hand out.
    let got = deliveries(&server, &server.admin, json!({"wait_seconds": 1})).await;
    assert!(got.is_empty(), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pull_requests_get_a_specific_4xx_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "1");
    let acme = server.tenant_token("acme").await;
    let id = emit(&server, &acme, 1).await;

    let cases = [
        (
            "receive",
            json!({"max": 11}),
            400,
            "max must be between 1 and 10",
        ),
        (
            "receive",
            json!({"max": 0}),
            400,
            "max must be between 1 and 10",
        ),
        (
            "receive",
            json!({"wait_seconds": 21}),
            400,
            "wait_seconds must be between 0 and 20",
        ),
        (
            "receive",
            json!({"lease_seconds": 0}),
            400,
            "lease_seconds must be between 1",
        ),
        ("receive", json!({"maximum": 1}), 400, "unknown field"),
        (
            "complete",
            json!({"handle": "nonsense"}),
            400,
            "malformed delivery handle",
        ),
        ("complete", json!({}), 400, "missing field `handle`"),
        (
            "complete",
            json!({"handle": "1.0123456789abcdef0123456789abcdef", "result": "x".repeat(5000)}),
            400,
            "a claim records at most 4096",
        ),
        (
            "fail",
            json!({"handle": "1.0123456789abcdef0123456789abcdef"}),
            400,
            "missing field `error`",
        ),
        (
            "fail",
            json!({"handle": "1.0123456789abcdef0123456789abcdef", "error": " "}),
            400,
            "error must say why",
        ),
        (
            "fail",
            json!({"handle": "1.0123456789abcdef0123456789abcdef", "error": "x", "terminal": true, "retry_after_seconds": 3}),
            400,
            "not both",
        ),
        (
            "extend",
            json!({"handle": "1.0123456789abcdef0123456789abcdef", "lease_seconds": 99999}),
            400,
            "lease_seconds must be between 1 and 43200",
        ),
        (
            "complete",
            json!({"handle": "1.0123456789abcdef0123456789abcdef"}),
            409,
            "no longer leased",
        ),
    ];
    for (verb, body, status, words) in cases {
        let (got, answer) = settle(&server, &acme, verb, body.clone()).await;
        assert_eq!(got, status, "{verb} {body}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(words),
            "{verb} {body}: {answer}"
        );
    }
    let (status, answer) = call(
        &server.base,
        Some(&acme),
        "POST",
        "/v1/subscriptions/shipping/receive",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("billing"),
        "{answer}"
    );
    let (status, answer) = call(
        &server.base,
        Some(&acme),
        "POST",
        "/v1/subscriptions/notes/receive",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "not_pull", "{answer}");
    let (status, _) = call(
        &server.base,
        None,
        "POST",
        "/v1/subscriptions/billing/receive",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 401);

    // None of it touched the delivery: it is handed out as a first attempt.
    let got = deliveries(&server, &acme, json!({"wait_seconds": 10})).await;
    assert_eq!(got[0]["event"]["id"], id.as_str());
    assert_eq!(got[0]["attempt"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_workers_says_it_hands_nothing_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "0");
    let acme = server.tenant_token("acme").await;
    let (status, answer) = receive(&server, &acme, json!({})).await;
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--workers"),
        "{answer}"
    );
}

/// `examples/pull/consumer.py` as a child process.
fn consumer(
    (program, script): (&str, &str),
    server: &Server,
    invoices: &std::path::Path,
    lease: &str,
    pause: &str,
) -> std::process::Child {
    std::process::Command::new(program)
        .arg(format!(
            "{}/../../examples/pull/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .env("POSTBOX_ENDPOINT", &server.base)
        .env("POSTBOX_TOKEN", &server.admin)
        .env("INVOICES", invoices)
        .env("LEASE_SECONDS", lease)
        .env("PAUSE_AFTER_EFFECT", pause)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs")
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    common::json_lines(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_consumer_killed_mid_handler_loses_nothing_and_its_effect_happens_once() {
    killed_consumer_loses_nothing(("python3", "consumer.py")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_client_consumer_killed_mid_handler_loses_nothing_and_its_effect_happens_once()
{
    killed_consumer_loses_nothing(("node", "consumer.mjs")).await;
}

/// A consumer makes the first payment's invoice and is killed (SIGKILL)
/// before completing it; another consumer gets the delivery after the
/// lease, finds the invoice made, and goes on: every payment invoiced once.
async fn killed_consumer_loses_nothing(program: (&str, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &[
            "serve",
            "--catalog",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../examples/pull/catalog.toml"
            ),
        ],
        &dir.path().join("data"),
    );
    let acme = server.tenant_token("acme").await;
    let mut ids = Vec::new();
    for i in 1..=3 {
        let (status, body) = call(
            &server.base,
            Some(&acme),
            "POST",
            "/v1/events",
            Some(json!({"type": "PAYMENT_COMPLETED", "payload": {"order_id": format!("A-{i}"), "amount": 100 * i}})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        ids.push(body["event"]["id"].as_str().unwrap().to_owned());
    }
    let invoices = dir.path().join("invoices.jsonl");

    // The first consumer makes the first invoice, then dies (SIGKILL)
    // before completing it, holding a 2-second lease.
    let mut first = consumer(program, &server, &invoices, "2", "60");
    until("the first invoice", 30, async || {
        lines(&invoices).len() == 1
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();

    // Another consumer gets that delivery again once the lease ran out,
    // finds its invoice made, completes it, and goes on.
    let second = consumer(program, &server, &invoices, "30", "0");
    until("every invoice", 60, async || lines(&invoices).len() == 3).await;
    // Stops cleanly on SIGTERM, after what it holds.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let _ = std::process::Command::new("kill")
        .arg(second.id().to_string())
        .status();
    let out = second.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("invoiced {} (attempt 2)", ids[0])),
        "{said}"
    );

    // Each payment invoiced once, in order, and nothing left to deliver.
    let orders: Vec<String> = lines(&invoices)
        .iter()
        .map(|l| l["order"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(orders, ["A-1", "A-2", "A-3"]);
    let got = deliveries(&server, &server.admin, json!({"wait_seconds": 2})).await;
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn postbox_worker_refuses_a_pull_subscription_it_could_not_hand_out() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["worker", "--endpoint", "http://127.0.0.1:1", "--catalog"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/pull/catalog.toml"
        ))
        .env(
            "POSTBOX_WEBHOOK_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("\"billing\" is a pull subscription"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stops_with_deliveries_waiting_and_gives_them_back_unspent() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "2");
    let acme = server.tenant_token("acme").await;
    let id = emit(&server, &acme, 1).await;
    // The worker has parked the delivery: nobody took it.
    server
        .metrics_when("the delivery parked", |m| {
            m.contains(r#"postbox_pull_waiting{subscription="billing"} 1"#)
        })
        .await;
    let pid = server.pid();
    let stopping = tokio::task::spawn_blocking(move || server.terminate());
    let (status, stderr) =
        match tokio::time::timeout(std::time::Duration::from_secs(60), stopping).await {
            Ok(done) => done.unwrap(),
            Err(_) => {
                let _ = std::process::Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
                panic!("postbox serve did not stop while a pull delivery waited for a consumer");
            }
        };
    assert!(status.success(), "{stderr}");

    // After a restart the delivery is there, its attempts untouched.
    let server = start(dir.path(), "2");
    let got = deliveries(&server, &acme, json!({"wait_seconds": 15})).await;
    assert_eq!(got[0]["event"]["id"], id.as_str());
    assert_eq!(got[0]["attempt"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_token_receives_every_tenants_deliveries_of_its_subscription_and_reaches_nothing_else()
 {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "2");
    let acme = server.tenant_token("acme").await;
    let globex = server.tenant_token("globex").await;
    let a = emit(&server, &acme, 1).await;
    let g = emit(&server, &globex, 1).await;

    // Made with the CLI, as an operator would.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args([
            "token",
            "create",
            "--consumer",
            "billing",
            "--endpoint",
            &server.base,
            "--token",
            &server.admin,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let consumer = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let mut got = deliveries(&server, &consumer, json!({"max": 10, "wait_seconds": 10})).await;
    for _ in 0..50 {
        if got.len() >= 2 {
            break;
        }
        got.extend(deliveries(&server, &consumer, json!({"max": 10, "wait_seconds": 1})).await);
    }
    let mut ids: Vec<&str> = got
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut want = vec![a.as_str(), g.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want);
    for d in &got {
        let (status, body) = settle(
            &server,
            &consumer,
            "complete",
            json!({"handle": d["handle"]}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }

    // Nothing else answers it: not the log, not emits, not operators'
    // endpoints, not another subscription (nor one whose name starts alike).
    for (method, path) in [
        ("GET", "/v1/events"),
        ("POST", "/v1/events"),
        ("GET", "/v1/dead-letters"),
        ("GET", "/v1/metrics"),
        ("POST", "/v1/tokens"),
        ("POST", "/v1/subscriptions/notes/receive"),
        ("POST", "/v1/subscriptions/billingx/receive"),
    ] {
        let (status, body) =
            call(&server.base, Some(&consumer), method, path, Some(json!({}))).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("consumer token"),
            "{body}"
        );
    }

    // Bad requests for one are refused, naming why.
    for (body, status, words) in [
        (json!({"consumer": "notes"}), 400, "not a pull subscription"),
        (json!({"consumer": "nope"}), 404, "no subscription \"nope\""),
        (
            json!({"consumer": "billing", "tenant": "acme"}),
            400,
            "give \"consumer\" alone",
        ),
    ] {
        let (got, answer) = call(
            &server.base,
            Some(&server.admin),
            "POST",
            "/v1/tokens",
            Some(body.clone()),
        )
        .await;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(words),
            "{body}: {answer}"
        );
    }

    // Listed as what it is; rotated, the new one keeps the scope.
    let (_, list) = call(&server.base, Some(&server.admin), "GET", "/v1/tokens", None).await;
    let row = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["consumer"] == "billing")
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    assert_eq!(row["admin"], false);
    let (status, rotated) = call(
        &server.base,
        Some(&server.admin),
        "POST",
        &format!("/v1/tokens/{}/rotate", row["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(status, 201, "{rotated}");
    assert_eq!(rotated["consumer"], "billing");
    let fresh = rotated["token"].as_str().unwrap();
    let (status, _) = receive(&server, fresh, json!({"wait_seconds": 0})).await;
    assert_eq!(status, 200);
    let (status, _) = call(&server.base, Some(fresh), "GET", "/v1/events", None).await;
    assert_eq!(status, 403);
    let (status, _) = receive(&server, &consumer, json!({"wait_seconds": 0})).await;
    assert_eq!(status, 401, "the old token is revoked");
}

//! `postbox serve` with no configuration: the built-in example application
//! behind the API's tokens — a payment emitted through the API reaches its
//! four durable handlers, the report-job API is scoped to the token's
//! tenant — and SIGTERM shuts it down cleanly.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

async fn call(
    base: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let res = client
        .request(
            req.body(Full::new(
                body.map(|b| b.to_string()).unwrap_or_default().into(),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_server_runs_the_examples_behind_tokens_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("POSTBOX_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    let admin = std::fs::read_to_string(data.join("admin-token"))
        .unwrap()
        .trim()
        .to_owned();
    let token = |tenant: &'static str| {
        let base = base.clone();
        let admin = admin.clone();
        async move {
            let (status, t) = call(
                &base,
                Some(&admin),
                "POST",
                "/v1/tokens",
                Some(json!({"tenant": tenant})),
            )
            .await;
            assert_eq!(status, 201);
            t["token"].as_str().unwrap().to_owned()
        }
    };
    let acme = token("acme").await;
    let globex = token("globex").await;

    // A payment through the API: its row and its event in one transaction.
    let payment = json!({
        "type": "PAYMENT_COMPLETED",
        "payload": {"order_id": "A-1", "amount": 500, "currency": "EUR", "buyer": "ada@example.com", "tag": "lamp-1"},
        "writes": [{"Put": {"TableName": "shop", "Item": {"pk": {"S": "acme#payment#A-1"}, "sk": {"S": "PAYMENT"}}}}]
    });
    let (status, e) = call(&base, Some(&acme), "POST", "/v1/events", Some(payment)).await;
    assert_eq!(status, 201, "{e}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, m) = call(&base, Some(&admin), "GET", "/v1/metrics", None).await;
        let text = m.as_str().unwrap_or("").to_owned();
        if text.contains("postbox_worker_total{outcome=\"completed\"} 4") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the four handlers did not complete: {m}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(exit.success(), "exit {exit:?}: {err}");
}

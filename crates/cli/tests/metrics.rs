//! The histograms on `/v1/metrics` (emit latency over HTTP, emit batch
//! sizes, handler latency and emit-to-completion per subscription), and
//! `serve --metrics-listen`: the same page without a token, on loopback only.

mod common;

use common::{Server, call};
use serde_json::json;

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["shop"]
[[producers]]
name = "shop"
emits = ["ORDER_PLACED"]
[[subscriptions]]
name = "billing"
glob = "ORDER_*"
lane = "DURABLE"
handler = "pull"
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn plain_get(url: &str) -> (u16, String) {
    let (status, body) = call(url, None, "GET", "", None).await;
    (status, body.as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_per_subscription_are_on_the_metrics_page_and_on_the_tokenless_listener() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(&catalog, CATALOG).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = Server::start(
        &[
            "serve",
            "--catalog",
            catalog.to_str().unwrap(),
            "--metrics-listen",
            &listen,
        ],
        &dir.path().join("data"),
    );
    let acme = server.tenant_token("acme").await;
    for i in 0..3 {
        let (status, body) = call(
            &server.base,
            Some(&acme),
            "POST",
            "/v1/events",
            Some(json!({"type": "ORDER_PLACED", "payload": {"i": i}})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    // A consumer completes the three, one at a time (one tenant).
    for _ in 0..3 {
        let (status, got) = call(
            &server.base,
            Some(&acme),
            "POST",
            "/v1/subscriptions/billing/receive",
            Some(json!({"wait_seconds": 10})),
        )
        .await;
        assert_eq!(status, 200, "{got}");
        let handle = got["deliveries"][0]["handle"].clone();
        let (status, body) = call(
            &server.base,
            Some(&acme),
            "POST",
            "/v1/subscriptions/billing/complete",
            Some(json!({"handle": handle})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let page = server
        .metrics_when("the completions' histograms", |m| {
            m.contains(r#"postbox_emit_to_completion_seconds_count{subscription="billing"} 3"#)
        })
        .await;
    for wanted in [
        "# TYPE postbox_http_emit_seconds histogram",
        r#"postbox_http_emit_seconds_count{outcome="created"} 3"#,
        r#"postbox_http_emit_seconds_bucket{outcome="created",le="+Inf"} 3"#,
        "# TYPE postbox_emit_batch_events histogram",
        r#"postbox_handler_seconds_count{subscription="billing"} 3"#,
        r#"postbox_emit_to_completion_seconds_bucket{subscription="billing",le="60"} 3"#,
        "postbox_emit_events_total 3",
    ] {
        assert!(page.contains(wanted), "{wanted} not in:\n{page}");
    }

    // The page parses as a scraper reads it, the histograms as histograms.
    let scrape = prometheus_parse::Scrape::parse(page.lines().map(|l| Ok(l.to_owned())))
        .expect("the metrics page parses");
    let handler = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "postbox_handler_seconds" && s.labels.get("subscription") == Some("billing")
        })
        .unwrap_or_else(|| panic!("no handler histogram in {:?}", scrape.samples.len()));
    match &handler.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().map(|b| b.count), Some(3.0), "{buckets:?}");
        }
        other => panic!("postbox_handler_seconds is not a histogram: {other:?}"),
    }
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "postbox_emit_events_total"),
        "the counters parse too"
    );

    // The same page without a token on the metrics listener; nothing else there.
    let (status, plain) = plain_get(&format!("http://{listen}/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        plain.contains(r#"postbox_handler_seconds_count{subscription="billing"} 3"#),
        "{plain}"
    );
    let (status, _) = plain_get(&format!("http://{listen}/v1/events")).await;
    assert_eq!(status, 404);
    // The API's own page still wants a token.
    let (status, _) = plain_get(&format!("{}/v1/metrics", server.base)).await;
    assert_eq!(status, 401);
}

#[test]
fn the_tokenless_metrics_listener_is_refused_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "0.0.0.0:9100",
            "--data",
        ])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--metrics-listen 0.0.0.0:9100") && err.contains("loopback"),
        "{err}"
    );
    assert!(!dir.path().join("data").exists());
}

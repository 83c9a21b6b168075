//! One event, one trace: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, `postbox
//! serve` exports the emit, relay and handler spans of an event over OTLP
//! (read here by an in-process collector that decodes them as a collector
//! does), all under the trace of the emit request's `traceparent`; the
//! webhook request and the pull delivery carry the handler's context. With
//! no endpoint nothing is exported and a received `traceparent` is passed
//! on as it came.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use common::{Server, call};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use serde_json::json;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Spans received: (name, trace id, span id, parent span id), hex.
type Spans = Arc<Mutex<Vec<(String, String, String, String)>>>;
/// `traceparent` headers of webhook deliveries.
type Hooks = Arc<Mutex<Vec<Option<String>>>>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn collector() -> (String, Spans) {
    let spans = Spans::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |State(spans): State<Spans>, body: axum::body::Bytes| async move {
                    let req =
                        ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
                    let mut out = spans.lock().unwrap();
                    for rs in req.resource_spans {
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                out.push((
                                    s.name,
                                    hex(&s.trace_id),
                                    hex(&s.span_id),
                                    hex(&s.parent_span_id),
                                ));
                            }
                        }
                    }
                },
            ),
        )
        .with_state(spans.clone());
    let addr = common::serve_router(app).await;
    (format!("http://{addr}"), spans)
}

async fn receiver() -> (String, Hooks) {
    let hooks = Hooks::default();
    let app = axum::Router::new()
        .route(
            "/hook",
            post(
                |State(hooks): State<Hooks>, headers: HeaderMap| async move {
                    hooks.lock().unwrap().push(
                        headers
                            .get("traceparent")
                            .map(|v| v.to_str().unwrap().to_owned()),
                    );
                },
            ),
        )
        .with_state(hooks.clone());
    let addr = common::serve_router(app).await;
    (format!("http://{addr}/hook"), hooks)
}

fn catalog(dir: &std::path::Path, hook: &str) -> String {
    let path = dir.join("catalog.toml");
    std::fs::write(
        &path,
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
handler = "{hook}"
[[subscriptions]]
name = "puller"
glob = "ORDER_*"
lane = "DURABLE"
handler = "pull"
"#
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

async fn emit(server: &Server, token: &str, traceparent: Option<&str>) {
    let mut req = emit_request(server, token);
    if let Some(t) = traceparent {
        req = req.header("traceparent", t);
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let body = json!({"type": "ORDER_PLACED", "payload": {"n": 1}}).to_string();
    let res = client
        .request(req.body(http_body_util::Full::new(body.into())).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
}

fn emit_request(server: &Server, token: &str) -> hyper::http::request::Builder {
    hyper::Request::post(format!("{}/v1/events", server.base))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
}

/// The pull subscription's next delivery's `traceparent`.
async fn pulled(server: &Server) -> Option<String> {
    let (status, got) = call(
        &server.base,
        Some(&server.admin),
        "POST",
        "/v1/subscriptions/puller/receive",
        Some(json!({"max": 1, "wait_seconds": 10})),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    let d = &got["deliveries"][0];
    let (status, _) = call(
        &server.base,
        Some(&server.admin),
        "POST",
        "/v1/subscriptions/puller/complete",
        Some(json!({"handle": d["handle"]})),
    )
    .await;
    assert_eq!(status, 200);
    d["traceparent"].as_str().map(str::to_owned)
}

async fn until<T>(server: &Server, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..300 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "timed out waiting for {what}; the server logged:\n{}",
        server.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_emit_relay_and_handler_spans_form_one_trace() {
    let (otlp, spans) = collector().await;
    let (hook, hooks) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path(), &hook);
    let server = Server::start_with_env(
        &["serve", "--catalog", &catalog],
        &dir.path().join("data"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ],
    );
    let acme = server.tenant_token("acme").await;
    emit(&server, &acme, Some(CALLER)).await;

    // The webhook and the pull consumer continue the event's trace.
    let hooked = until(&server, "the webhook delivery", || {
        hooks.lock().unwrap().first().cloned()
    })
    .await;
    let hooked = hooked.expect("the webhook request carries a traceparent");
    assert!(hooked.starts_with(&format!("00-{TRACE_ID}-")), "{hooked}");
    let pulled = pulled(&server)
        .await
        .expect("the pull delivery carries a traceparent");
    assert!(pulled.starts_with(&format!("00-{TRACE_ID}-")), "{pulled}");

    // Every hop is exported, in the caller's trace: emit under the caller's
    // span, the relay and both handlers under the emit.
    let got = until(&server, "the emit, relay and two handler spans", || {
        let s = spans.lock().unwrap().clone();
        let n = |name: &str| s.iter().filter(|x| x.0 == name).count();
        (n("emit") >= 1 && n("relay") >= 1 && n("handler") >= 2).then_some(s)
    })
    .await;
    let emit_span = got.iter().find(|s| s.0 == "emit").unwrap();
    assert_eq!(emit_span.1, TRACE_ID);
    assert_eq!(
        emit_span.3, "00f067aa0ba902b7",
        "the emit span's parent is the caller's span"
    );
    for s in got
        .iter()
        .filter(|s| ["relay", "handler"].contains(&s.0.as_str()))
    {
        assert_eq!(s.1, TRACE_ID, "{s:?} is in another trace: {got:?}");
        assert_eq!(s.3, emit_span.2, "{s:?} is not a child of the emit span");
    }
    // The webhook's traceparent names a handler span.
    let hook_span = &hooked[36..52];
    assert!(
        got.iter().any(|s| s.0 == "handler" && s.2 == hook_span),
        "the webhook's parent {hook_span} is no handler span: {got:?}"
    );

    // Without a traceparent, an emit starts a trace of its own.
    emit(&server, &acme, None).await;
    let own = until(&server, "a second trace", || {
        let s = spans.lock().unwrap().clone();
        let root = s.iter().find(|x| x.0 == "emit" && x.1 != TRACE_ID)?.clone();
        s.iter()
            .any(|x| x.0 == "handler" && x.1 == root.1 && x.3 == root.2)
            .then_some(root)
    })
    .await;
    assert_eq!(own.3, "", "a new trace's emit span has no parent");
    let (status, _) = server.terminate();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_a_received_traceparent_is_passed_on_as_it_came() {
    let (hook, hooks) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path(), &hook);
    let server = Server::start(&["serve", "--catalog", &catalog], &dir.path().join("data"));
    let acme = server.tenant_token("acme").await;
    emit(&server, &acme, Some(CALLER)).await;
    emit(&server, &acme, None).await;
    emit(&server, &acme, Some("not-a-traceparent")).await;
    // A tenant's events go one at a time (the pull consumer settles each
    // before the next comes), in order.
    let mut pulls = Vec::new();
    for i in 1..=3 {
        until(&server, "the next webhook delivery", || {
            (hooks.lock().unwrap().len() >= i).then_some(())
        })
        .await;
        pulls.push(pulled(&server).await);
    }
    let expected = [Some(CALLER.to_owned()), None, None];
    assert_eq!(*hooks.lock().unwrap(), expected);
    assert_eq!(pulls, expected);
}

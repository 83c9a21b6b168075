//! The report-job API over a real listener on 127.0.0.1:0: concurrent
//! requests with one Idempotency-Key make one job, tenants never see each
//! other's jobs or keys, and the limits of keys and bodies.

use std::net::SocketAddr;
use std::sync::Arc;

use postbox_examples::reports::{
    self, ApiOptions, HttpResponse, JOBS_TABLE, ReportsApi, TENANT_HEADER, request, router,
};
use postbox_store::ItemStore;
use postbox_store::api::ScanInput;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};

struct Server {
    _dir: tempfile::TempDir,
    store: Arc<EmbeddedStore>,
    addr: SocketAddr,
}

async fn serve() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        dir.path().join("postbox.redb"),
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let store = Arc::new(store);
    reports::create_tables(&*store).await.unwrap();
    let app = router(ReportsApi::new(store.clone(), ApiOptions::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        _dir: dir,
        store,
        addr,
    }
}

async fn post(s: &Server, tenant: &str, key: Option<&str>, body: &str) -> HttpResponse {
    let mut headers = vec![(TENANT_HEADER, tenant)];
    if let Some(k) = key {
        headers.push(("Idempotency-Key", k));
    }
    request(s.addr, "POST", "/reports", &headers, Some(body))
        .await
        .unwrap()
}

async fn jobs(s: &Server) -> usize {
    let out = s
        .store
        .scan(ScanInput {
            table_name: JOBS_TABLE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    out.items.unwrap_or_default().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_key_make_one_job() {
    let s = Arc::new(serve().await);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            post(
                &s,
                "acme",
                Some("nightly-2026-11-29"),
                r#"{"branch": "main"}"#,
            )
            .await
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 202, "{}", r.body);
        ids.push(r.json()["jobId"].as_str().unwrap().to_owned());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one job: {ids:?}");
    assert_eq!(jobs(&s).await, 1);
}

#[tokio::test]
async fn tenants_never_see_each_others_jobs_or_keys() {
    let s = serve().await;
    let a = post(&s, "acme", Some("shared-key-0001"), r#"{"branch": "main"}"#).await;
    let id = a.json()["jobId"].as_str().unwrap().to_owned();
    // The same key for another tenant is another tenant's key: a new job.
    let b = post(
        &s,
        "globex",
        Some("shared-key-0001"),
        r#"{"branch": "dev"}"#,
    )
    .await;
    assert_eq!(b.status, 202);
    assert_ne!(b.json()["jobId"], a.json()["jobId"]);
    let path = format!("/reports/{id}");
    let mine = request(s.addr, "GET", &path, &[(TENANT_HEADER, "acme")], None)
        .await
        .unwrap();
    assert_eq!(mine.status, 200);
    assert_eq!(mine.json()["status"], "PENDING");
    assert_eq!(mine.header("retry-after"), Some("1"));
    let theirs = request(s.addr, "GET", &path, &[(TENANT_HEADER, "globex")], None)
        .await
        .unwrap();
    assert_eq!(theirs.status, 404);
    let bad = request(s.addr, "GET", &path, &[(TENANT_HEADER, "a#b")], None)
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("tenant id"), "{}", bad.body);
}

#[tokio::test]
async fn keys_of_8_to_128_characters_and_only_a_branch_are_accepted() {
    let s = serve().await;
    let body = r#"{"branch": "main"}"#;
    for (key, status) in [
        ("k".repeat(7), 400),
        ("k".repeat(8), 202),
        ("k".repeat(128), 202),
        ("k".repeat(129), 400),
    ] {
        let r = post(&s, "acme", Some(&key), body).await;
        assert_eq!(r.status, status, "key of {}: {}", key.len(), r.body);
    }
    for (body, says) in [
        ("", "not valid JSON"),
        (r#"{"branch": "main", "format": "pdf"}"#, "unknown field"),
        (r#"{"branch": "x"}"#, "2 to 40"),
        (r#"{"branch": null}"#, "must be a string"),
        (r#"{"branch": "main", "branch": "prod"}"#, "duplicate"),
    ] {
        let r = post(&s, "acme", None, body).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["error"], "InvalidRequest");
        assert!(
            r.json()["message"].as_str().unwrap().contains(says),
            "{}",
            r.body
        );
    }
    assert_eq!(jobs(&s).await, 2, "refused requests wrote nothing");
}

#[tokio::test]
async fn a_job_id_that_cannot_be_one_is_404_not_a_store_failure() {
    let s = serve().await;
    for id in ["x".repeat(5_000), "a%2Fb".to_owned(), "-".repeat(26)] {
        let r = request(
            s.addr,
            "GET",
            &format!("/reports/{id}"),
            &[(TENANT_HEADER, "acme")],
            None,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 404, "{}: {}", id.len(), r.body);
        assert_eq!(r.json()["error"], "NotFound");
    }
}

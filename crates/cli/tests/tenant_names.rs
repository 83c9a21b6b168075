//! No tenant name reaches another tenant's data or Postbox's own rows.
//!
//! Tenant data is namespaced by a partition key starting with `<tenant>#`;
//! tenant names cannot contain `#`. A tenant named like a key prefix the
//! codebase uses (`ORDER`, `JOB`, `KEY`, `PIPE`, ...) once passed that check
//! for rows that were not its own: the payments example kept
//! `ORDER#<tenant>#<id>` rows, the report API `JOB#<id>` and
//! `KEY#<tenant>#<key>` rows, and the relay its lease under `PIPE#<pipe>`.
//! Here a tenant with each such name tries to write the rows of tenant acme
//! and the engine's, in every table, through an emit's extra writes; acme's
//! payment, effects, report job and idempotency key, and delivery for every
//! tenant, are untouched.

mod common;

use std::time::{Duration, Instant};

use common::{Server, call};
use postbox_item::AttributeValue;
use postbox_store::ItemStore;
use postbox_store::api::ScanInput;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::{Value, json};

/// Every pk prefix the codebase writes, and the word of every layout key.
const PREFIXES: &[&str] = &[
    "TENANT",
    "EVENT",
    "HEAD",
    "VERIFIED",
    "DEADLETTER",
    "REPLAY",
    "EMIT",
    "TOKEN",
    "IDEMP",
    "PIPE",
    "JOB",
    "KEY",
    "PAYMENT",
    "ORDER",
    "SHIPMENT",
    "NOTIFICATION",
    "TAG",
];

/// Every table of the default node.
const TABLES: &[&str] = &[
    "shop",
    "jobs",
    "job_keys",
    "postbox_relay_leases",
    "postbox_events",
    "postbox_tokens",
    "postbox_requests",
    "postbox_inbox",
];

fn payment(id: &str) -> Value {
    json!({
        "type": "PAYMENT_COMPLETED",
        "payload": {"order_id": id, "amount": 500, "currency": "EUR", "buyer": "ada@example.com", "tag": format!("lamp-{id}")},
        "writes": [{"Put": {"TableName": "shop", "Item": {"pk": {"S": format!("acme#payment#{id}")}, "sk": {"S": "PAYMENT"}}}}]
    })
}

async fn completed(server: &Server, n: usize) {
    let want = format!("postbox_worker_total{{outcome=\"completed\"}} {n}");
    server
        .metrics_when(&format!("not {n} completions"), |m| m.contains(&want))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_named_like_key_prefixes_reach_no_one_elses_rows() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&["--examples"], &data);
    let base = server.base.clone();
    let acme = server.tenant_token("acme").await;

    // acme's state: a payment with its four effects, and a finished report job.
    let (status, e) = call(
        &base,
        Some(&acme),
        "POST",
        "/v1/events",
        Some(payment("A-1")),
    )
    .await;
    assert_eq!(status, 201, "{e}");
    completed(&server, 4).await;
    let report = |token: String| {
        let base = base.clone();
        async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            let req = hyper::Request::post(format!("{base}/reports"))
                .header("authorization", format!("Bearer {token}"))
                .header("idempotency-key", "report-0001")
                .body(http_body_util::Full::new(
                    json!({"branch": "main"}).to_string().into(),
                ))
                .unwrap();
            let res = client.request(req).await.unwrap();
            let status = res.status().as_u16();
            use http_body_util::BodyExt;
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&body).unwrap())
        }
    };
    let (status, job) = report(acme.clone()).await;
    assert_eq!(status, 202, "{job}");
    let path = job["statusUrl"].as_str().unwrap().to_owned();
    let job_id = job["jobId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let finished = loop {
        let (status, j) = call(&base, Some(&acme), "GET", &path, None).await;
        assert_eq!(status, 200, "{j}");
        if j["status"] == "SUCCEEDED" {
            break j;
        }
        assert!(Instant::now() < deadline, "{j}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Each prefix as a tenant, writing acme's rows in their old and new
    // shapes and the engine's rows, into every table.
    for prefix in PREFIXES {
        let token = server.tenant_token(prefix).await;
        let pks = [
            format!("{prefix}#acme#A-1"),
            format!("{prefix}#acme#report-0001"),
            format!("{prefix}#{job_id}"),
            format!("{prefix}#events"),
            format!("{prefix}#acme#EVENT"),
            format!("{prefix}#acme#HEAD"),
        ];
        for table in TABLES {
            for pk in &pks {
                let body = json!({
                    "type": "PAYMENT_COMPLETED",
                    "payload": {"order_id": format!("X-{prefix}"), "amount": 1, "currency": "EUR", "buyer": "eve@example.com", "tag": "x"},
                    "writes": [{"Put": {"TableName": table, "Item": {
                        "pk": {"S": pk}, "sk": {"S": "PAYMENT"},
                        "status": {"S": "SUCCEEDED"}, "url": {"S": "https://evil.example/report"},
                        "holder": {"S": "evil"}, "lease_until": {"N": "99999999999999"}
                    }}}]
                });
                let (status, answer) =
                    call(&base, Some(&token), "POST", "/v1/events", Some(body)).await;
                if *table == "shop" {
                    // Its own namespace of an application table: allowed.
                    assert_eq!(status, 201, "{prefix} {table} {pk}: {answer}");
                } else {
                    assert_eq!(
                        (status, answer["error"]["code"].as_str()),
                        (400, Some("reserved_table")),
                        "tenant {prefix} wrote {pk} into {table}: {answer}"
                    );
                }
            }
        }
    }

    // acme's job and key are as they were; delivery still runs for acme.
    let (status, j) = call(&base, Some(&acme), "GET", &path, None).await;
    assert_eq!((status, &j), (200, &finished));
    let (status, again) = report(acme.clone()).await;
    assert!(status == 200 || status == 202, "{status} {again}");
    assert_eq!(
        again["jobId"],
        job_id.as_str(),
        "the key still names the same job"
    );
    let (status, e) = call(
        &base,
        Some(&acme),
        "POST",
        "/v1/events",
        Some(payment("A-2")),
    )
    .await;
    assert_eq!(status, 201, "{e}");
    // Each attacking tenant's emits fan out to the four handlers too.
    let attacks = PREFIXES.len() * 6;
    completed(&server, 4 * (2 + attacks)).await;
    let (exit, log) = server.terminate();
    assert!(exit.success(), "{log}");

    // acme's rows in shop: its two payments, each effect applied once.
    let store = EmbeddedStore::open(
        data.join("postbox.redb"),
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let rows = store
        .scan(ScanInput {
            table_name: "shop".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let acme_rows: Vec<_> = rows
        .iter()
        .filter(|r| matches!(r.get("pk"), Some(AttributeValue::S(pk)) if pk.starts_with("acme#")))
        .collect();
    for kind in ["ORDER", "SHIPMENT", "NOTIFICATION"] {
        for id in ["A-1", "A-2"] {
            let row = acme_rows
                .iter()
                .find(|r| r.get("pk") == Some(&AttributeValue::s(format!("acme#{kind}#{id}"))))
                .unwrap_or_else(|| panic!("no acme#{kind}#{id} in {acme_rows:?}"));
            assert!(
                row.get("holder").is_none() && row.get("url").is_none(),
                "acme#{kind}#{id} was written by another tenant: {row:?}"
            );
        }
    }
    assert!(
        rows.iter().all(|r| r.get("holder").is_none()
            || matches!(r.get("pk"), Some(AttributeValue::S(pk)) if !pk.starts_with("acme#"))),
        "another tenant's write landed in acme's namespace"
    );
}

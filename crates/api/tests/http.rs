//! The HTTP API against a real listener on 127.0.0.1:0: authentication,
//! tenant isolation, bad input that writes nothing, emit idempotency, the log
//! and its stream, operator endpoints, and the OpenAPI document.

mod common;

use std::collections::BTreeSet;

use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use postbox_api::ROUTES;
use postbox_store::ItemStore;
use postbox_store::api::GetItemInput;
use serde_json::{Value, json};

#[tokio::test]
async fn only_health_answers_without_a_token() {
    let env = env().await;
    assert_eq!(
        call(&env, "GET", "/v1/health", None, &[], "").await.status,
        200
    );
    assert_eq!(
        call(&env, "GET", "/v1/ready", None, &[], "").await.status,
        200
    );
    for (method, path) in ROUTES {
        if path.ends_with("/health") || path.ends_with("/ready") {
            continue;
        }
        let a = call(&env, &method.to_uppercase(), path, None, &[], "").await;
        assert_eq!(a.status, 401, "{method} {path} without a token: {}", a.text);
        assert!(a.headers.contains_key("www-authenticate"));
        let a = call(
            &env,
            &method.to_uppercase(),
            path,
            Some("pbx_not-a-token"),
            &[],
            "",
        )
        .await;
        assert_eq!(a.status, 401, "{method} {path} with a wrong token");
    }
}

#[tokio::test]
async fn emit_commits_the_event_with_its_writes_and_the_log_shows_it() {
    let env = env().await;
    let a = emit(
        &env,
        &env.acme,
        &[("x-correlation-id", "req-1")],
        order_emit("1", "acme"),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let e = a.json();
    assert_eq!(e["event"]["tenant"], "acme");
    assert_eq!(e["event"]["seq"], 1);
    assert_eq!(e["event"]["actor"], "alice");
    assert_eq!(e["event"]["correlation_id"], "req-1");
    assert_eq!(e["hash"].as_str().unwrap().len(), 64);
    assert_eq!(orders(&env).await, 1);
    let log = log_of(&env, &env.acme).await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0], e);
}

#[tokio::test]
async fn a_tenant_never_sees_or_writes_another_tenants_data() {
    let env = env().await;
    assert_eq!(
        emit(&env, &env.acme, &[], order_emit("1", "acme"))
            .await
            .status,
        201
    );
    // globex's log is its own, and empty.
    assert!(log_of(&env, &env.globex).await.is_empty());
    // globex writing into acme's namespace: 404, nothing written.
    let a = emit(&env, &env.globex, &[], order_emit("2", "acme")).await;
    assert_eq!(a.status, 404, "{}", a.text);
    assert_eq!(orders(&env).await, 1);
    assert!(log_of(&env, &env.globex).await.is_empty());
    // acme's dead letters and reconciliation line are not globex's to read.
    let a = call(
        &env,
        "GET",
        "/v1/dead-letters?tenant=acme",
        Some(&env.globex),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.text);
    let a = call(
        &env,
        "POST",
        "/v1/dead-letters/replay",
        Some(&env.globex),
        &[],
        r#"{"tenant": "acme"}"#,
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.text);
    let a = call(
        &env,
        "GET",
        "/v1/reconciliation",
        Some(&env.globex),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200);
    assert!(
        a.json()["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["tenant"] != "acme"),
        "{}",
        a.text
    );
    // ... nor is acme's log globex's to verify: its verified checkpoint was
    // not written by globex's call.
    let checkpoint = env
        .store
        .get_item(GetItemInput {
            table_name: "postbox_events".into(),
            key: postbox_engine::layout::key(
                postbox_engine::layout::verified_pk("acme"),
                postbox_engine::layout::VERIFIED_SK,
            ),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(checkpoint.item.is_none(), "{:?}", checkpoint.item);
    // acme's own view has its line, and only that.
    let a = call(&env, "GET", "/v1/reconciliation", Some(&env.acme), &[], "").await;
    assert_eq!(a.status, 200);
    let view = a.json();
    assert_eq!(view["verdict"], "ok", "{}", a.text);
    let lines = view["tenants"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{}", a.text);
    assert_eq!(
        (
            &lines[0]["tenant"],
            &lines[0]["head_seq"],
            &lines[0]["chain_intact"]
        ),
        (&json!("acme"), &json!(1), &json!(true))
    );
    // Postbox's own tables cannot be written through an emit.
    let body = json!({"type": "ORDER_PLACED", "payload": {"order_id": "3"}, "writes": [{"Put": {"TableName": "postbox_tokens", "Item": {"pk": {"S": "globex#x"}}}}]});
    let a = emit(&env, &env.globex, &[], body.to_string()).await;
    assert_eq!(
        (a.status, a.code()),
        (400, "reserved_table".into()),
        "{}",
        a.text
    );
}

#[tokio::test]
async fn bad_input_gets_a_specific_4xx_and_writes_nothing() {
    let env = env().await;
    let too_many: Vec<Value> = (0..26)
        .map(
            |i| json!({"Put": {"TableName": "orders", "Item": {"pk": {"S": format!("acme#{i}")}}}}),
        )
        .collect();
    let cases: Vec<(String, u16, &str)> = vec![
        ("{not json".into(), 400, "invalid_json"),
        (r#"{"type": "ORDER_PLACED", "payload": "a string"}"#.into(), 400, "invalid_payload"),
        (r#"{"type": 7, "payload": {}}"#.into(), 400, "invalid_request"),
        (r#"{"type": "ORDER_PLACD", "payload": {"order_id": "1"}}"#.into(), 400, "unknown_event_type"),
        (r#"{"type": "ORDER_PLACED", "payload": {"order_id": 1}}"#.into(), 400, "schema_violation"),
        (r#"{"type": "ORDER_PLACED", "payload": {"order_id": "1", "n": 9007199254740993}}"#.into(), 400, "invalid_json"),
        (r#"{"type": "ORDER_PLACED", "payload": {"order_id": "1"}, "extra": 1}"#.into(), 400, "invalid_request"),
        (json!({"type": "ORDER_PLACED", "payload": {"order_id": "1"}, "writes": too_many}).to_string(), 400, "too_many_writes"),
        (r#"{"type": "ORDER_PLACED", "payload": {"order_id": "1"}, "writes": [{"Put": {"TableName": "orders"}}]}"#.into(), 400, "invalid_write"),
        (format!(r#"{{"type": "ORDER_PLACED", "payload": {{"order_id": "{}"}}}}"#, "x".repeat(70 * 1024)), 413, "body_too_large"),
    ];
    for (body, status, code) in cases {
        let a = emit(&env, &env.acme, &[], body.clone()).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (status, code),
            "body {:.80}: {}",
            body,
            a.text
        );
        assert!(!a.json()["error"]["message"].as_str().unwrap().is_empty());
    }
    // The unknown type gets a suggestion; the big number says to send a string.
    let a = emit(
        &env,
        &env.acme,
        &[],
        r#"{"type": "ORDER_PLACD", "payload": {}}"#,
    )
    .await;
    assert!(a.text.contains("ORDER_PLACED"), "{}", a.text);
    let a = emit(
        &env,
        &env.acme,
        &[],
        r#"{"type": "ORDER_PLACED", "payload": {"order_id": "1", "n": 9007199254740993}}"#,
    )
    .await;
    assert!(a.text.contains("string"), "{}", a.text);
    // An admin token has no tenant to emit for.
    let a = emit(&env, &env.admin, &[], order_emit("1", "acme")).await;
    assert_eq!(a.status, 403);
    assert!(log_of(&env, &env.acme).await.is_empty());
    assert_eq!(orders(&env).await, 0);
}

#[tokio::test]
async fn a_failed_condition_is_409_and_writes_nothing() {
    let env = env().await;
    assert_eq!(
        emit(&env, &env.acme, &[], order_emit("1", "acme"))
            .await
            .status,
        201
    );
    let a = emit(&env, &env.acme, &[], order_emit("1", "acme")).await;
    assert_eq!(
        (a.status, a.code()),
        (409, "condition_failed".into()),
        "{}",
        a.text
    );
    assert_eq!(log_of(&env, &env.acme).await.len(), 1);
}

#[tokio::test]
async fn an_idempotency_key_returns_the_same_event_and_refuses_another_body() {
    let env = env().await;
    let key = [("idempotency-key", "pay-123")];
    let first = emit(&env, &env.acme, &key, order_emit("1", "acme")).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let again = emit(&env, &env.acme, &key, order_emit("1", "acme")).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json(), first.json());
    let other = emit(&env, &env.acme, &key, order_emit("2", "acme")).await;
    assert_eq!(
        (other.status, other.code()),
        (409, "idempotency_key_reused".into())
    );
    // Another tenant's same key is its own.
    let g = emit(&env, &env.globex, &key, order_emit("1", "globex")).await;
    assert_eq!(g.status, 201, "{}", g.text);
    assert_eq!(log_of(&env, &env.acme).await.len(), 1);
    assert_eq!(orders(&env).await, 2);
}

#[tokio::test]
async fn the_log_pages_and_the_stream_follows_new_events() {
    let env = env().await;
    for i in 0..5 {
        assert_eq!(
            emit(&env, &env.acme, &[], order_emit(&i.to_string(), "acme"))
                .await
                .status,
            201
        );
    }
    let a = call(
        &env,
        "GET",
        "/v1/events?from=2&limit=2",
        Some(&env.acme),
        &[],
        "",
    )
    .await;
    let page = a.json();
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(page["next"], 4);
    let a = call(&env, "GET", "/v1/events?limit=0", Some(&env.acme), &[], "").await;
    assert_eq!(a.status, 400);

    // Follow from seq 4 (resuming after Last-Event-ID 3), then a new event arrives.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let req = hyper::Request::get(format!("{}/v1/events/stream", env.base))
        .header("authorization", format!("Bearer {}", env.acme))
        .header("last-event-id", "3")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    assert_eq!(
        emit(&env, &env.acme, &[], order_emit("new", "acme"))
            .await
            .status,
        201
    );
    let mut text = String::new();
    let ids = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let frame = body.frame().await.unwrap().unwrap();
            if let Some(data) = frame.data_ref() {
                text.push_str(&String::from_utf8_lossy(data));
            }
            let ids: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("id: "))
                .collect();
            if ids.len() >= 3 {
                return ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            }
        }
    })
    .await
    .expect("three events streamed");
    assert_eq!(ids, ["4", "5", "6"]);
}

#[tokio::test]
async fn operator_endpoints_need_an_admin_token() {
    let env = env().await;
    assert_eq!(
        emit(&env, &env.acme, &[], order_emit("1", "acme"))
            .await
            .status,
        201
    );
    let a = call(&env, "GET", "/v1/metrics", Some(&env.acme), &[], "").await;
    assert_eq!(a.status, 403);
    let a = call(&env, "GET", "/v1/metrics", Some(&env.admin), &[], "").await;
    assert_eq!(a.status, 200);
    assert!(a.text.contains("postbox_emit_events_total 1"), "{}", a.text);
    // The store's writer: at least the emit's commit, and its operations.
    let figure = |name: &str| -> f64 {
        a.text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {}", a.text))
    };
    let commits = figure("postbox_store_commits_total");
    assert!(commits >= 1.0, "{}", a.text);
    assert!(
        figure("postbox_store_operations_total") >= commits,
        "{}",
        a.text
    );
    assert!(
        figure("postbox_store_writer_seconds_total{phase=\"run\"}") > 0.0,
        "{}",
        a.text
    );
    let a = call(
        &env,
        "POST",
        "/v1/tokens",
        Some(&env.acme),
        &[],
        r#"{"tenant": "acme"}"#,
    )
    .await;
    assert_eq!(a.status, 403);
    let a = call(
        &env,
        "POST",
        "/v1/tokens",
        Some(&env.admin),
        &[],
        r#"{"tenant": "initech", "subject": "carol"}"#,
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let token = a.json()["token"].as_str().unwrap().to_owned();
    assert!(log_of(&env, &token).await.is_empty());
    let a = call(
        &env,
        "POST",
        "/v1/tokens",
        Some(&env.admin),
        &[],
        r#"{"tenant": "no spaces"}"#,
    )
    .await;
    assert_eq!((a.status, a.code()), (400, "invalid_tenant".into()));
    let a = call(&env, "GET", "/v1/reconciliation", Some(&env.admin), &[], "").await;
    assert_eq!(a.status, 200, "{}", a.text);
    let r = a.json();
    assert_eq!(r["verdict"], "ok", "{}", a.text);
    assert_eq!(r["tenants"][0]["tenant"], "acme");
    assert_eq!(r["tenants"][0]["chain_intact"], true);
    let a = call(&env, "GET", "/v1/dead-letters", Some(&env.admin), &[], "").await;
    assert_eq!(a.json()["dead_letters"], json!([]));
    let a = call(
        &env,
        "POST",
        "/v1/dead-letters/replay",
        Some(&env.acme),
        &[],
        r#"{"dry_run": true}"#,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    // A subscription the catalog does not have would select nothing in
    // silence: it is named instead.
    let a = call(
        &env,
        "POST",
        "/v1/dead-letters/replay",
        Some(&env.admin),
        &[],
        r#"{"subscription": "nope"}"#,
    )
    .await;
    assert_eq!(
        (a.status, a.code()),
        (404, "not_found".into()),
        "{}",
        a.text
    );
    assert!(
        a.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("no subscription \"nope\" in the catalog"),
        "{}",
        a.text
    );
    let a = call(
        &env,
        "GET",
        "/v1/dead-letters?subscription=nope",
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.text);
    // A near miss names the one meant.
    let a = call(
        &env,
        "GET",
        "/v1/dead-letters?subscription=audt",
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.text);
    let said = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(said.contains("did you mean \"audit\"?"), "{said}");
    // So does an operator's filter on a tenant with no log.
    let a = call(
        &env,
        "POST",
        "/v1/events",
        Some(&env.acme),
        &[],
        r#"{"type": "ORDER_PLACED", "payload": {"order_id": "O-1"}}"#,
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    for (method, path, body) in [
        ("GET", "/v1/dead-letters?tenant=acmee", ""),
        ("POST", "/v1/dead-letters/replay", r#"{"tenant": "acmee"}"#),
    ] {
        let a = call(&env, method, path, Some(&env.admin), &[], body).await;
        assert_eq!(a.status, 404, "{path}: {}", a.text);
        let said = a.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            said.contains("no tenant \"acmee\" has events in the log; did you mean \"acme\"?"),
            "{path}: {said}"
        );
    }
    let a = call(
        &env,
        "GET",
        "/v1/dead-letters?tenant=acme",
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = call(&env, "GET", "/v1/catalog", Some(&env.acme), &[], "").await;
    assert_eq!(a.status, 200);
    assert!(a.text.contains("ORDER_PLACED"));
    let a = call(&env, "GET", "/v1/nowhere", Some(&env.acme), &[], "").await;
    assert_eq!((a.status, a.code()), (404, "not_found".into()));
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_routes() {
    let env = env().await;
    let a = call(&env, "GET", "/v1/openapi.json", Some(&env.acme), &[], "").await;
    assert_eq!(a.status, 200);
    let doc = a.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    // Every operation has an operationId, unique, in lower camel case:
    // generated clients name their methods after it.
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            documented.insert((method.clone(), path.clone()));
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(
                id.starts_with(|c: char| c.is_ascii_lowercase())
                    && id.chars().all(|c| c.is_ascii_alphanumeric()),
                "{method} {path}: operationId {id:?}"
            );
            assert!(
                ids.insert(id.to_owned()),
                "operationId {id:?} is used twice"
            );
            // Tagged with a declared tag, so generated clients and the
            // rendered document group it.
            let tags = op["tags"]
                .as_array()
                .unwrap_or_else(|| panic!("{method} {path}: no tags"));
            assert!(!tags.is_empty(), "{method} {path}: no tags");
            for t in tags {
                assert!(
                    doc["tags"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|d| d["name"] == *t),
                    "{method} {path}: tag {t} is not declared"
                );
            }
            // Every error answer has the error body's schema.
            for (code, response) in op["responses"].as_object().unwrap() {
                if !(code.starts_with('4') || code.starts_with('5')) {
                    continue;
                }
                let response = match response["$ref"].as_str() {
                    Some(r) => &doc["components"]["responses"][r.rsplit('/').next().unwrap()],
                    None => response,
                };
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/Error",
                    "{method} {path} {code}"
                );
            }
        }
    }
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, routes);
    // And every route is really served (not the 404 of an unknown path).
    for (method, path) in ROUTES {
        if path.ends_with("/stream") {
            continue;
        }
        let a = call(
            &env,
            &method.to_uppercase(),
            path,
            Some(&env.admin),
            &[],
            "",
        )
        .await;
        assert!(
            !a.text.contains("no such endpoint"),
            "{method} {path} is not served: {}",
            a.text
        );
    }
}

#[tokio::test]
async fn access_keys_for_the_wire_are_admin_only_and_shown_once() {
    let env = env().await;
    let body = r#"{"aws": true, "admin": true}"#;
    // Only an admin token may ask.
    let a = call(&env, "POST", "/v1/tokens", Some(&env.acme), &[], body).await;
    assert_eq!(a.status, 403, "{}", a.text);
    let a = call(&env, "POST", "/v1/tokens", Some(&env.admin), &[], body).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let key = a.json();
    let id = key["access_key_id"].as_str().unwrap();
    let secret = key["secret_access_key"].as_str().unwrap();
    assert!(id.starts_with("AKIA") && id.len() == 20, "{id}");
    assert!(
        id[4..]
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
    );
    assert_eq!(secret.len(), 40);
    assert!(
        postbox_server::auth::access_key_exists(&env.store, id)
            .await
            .unwrap()
    );
    // A tenant-scoped key; a bad tenant name is refused, and stores nothing.
    let a = call(
        &env,
        "POST",
        "/v1/tokens",
        Some(&env.admin),
        &[],
        r#"{"aws": true, "tenant": "acme"}"#,
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(
        (a.json()["admin"].as_bool(), a.json()["tenant"].as_str()),
        (Some(false), Some("acme"))
    );
    let a = call(
        &env,
        "POST",
        "/v1/tokens",
        Some(&env.admin),
        &[],
        r#"{"aws": true, "tenant": "ac#me"}"#,
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.text);
    let keys = env
        .store
        .scan(postbox_store::api::ScanInput {
            table_name: postbox_server::auth::ACCESS_KEYS_TABLE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(keys.items.unwrap_or_default().len(), 2);
}

#[tokio::test]
async fn an_admin_reads_a_named_tenants_log_and_one_event_with_its_deliveries() {
    let catalog = format!(
        "{CATALOG}\n[[subscriptions]]\nname = \"billing\"\nglob = \"ORDER_PLACED\"\nlane = \"DURABLE\"\nhandler = \"http://127.0.0.1:9/billing\"\n\n[[subscriptions]]\nname = \"other\"\nglob = \"SHIP_*\"\nlane = \"DURABLE\"\nhandler = \"http://127.0.0.1:9/other\"\n\n[[event_types]]\nname = \"SHIP_SENT\"\nproducers = [\"warehouse\"]\n\n[[producers]]\nname = \"warehouse\"\nemits = [\"SHIP_SENT\"]\n"
    );
    let env = env_with(&catalog).await;
    for i in 0..3 {
        let a = emit(&env, &env.acme, &[], order_emit(&i.to_string(), "acme")).await;
        assert_eq!(a.status, 201, "{}", a.text);
    }
    let get = |path: &'static str, token: String| {
        let env = &env;
        async move { call(env, "GET", path, Some(&token), &[], "").await }
    };

    // An admin names the tenant; without one it is told how.
    let a = get("/v1/events?tenant=acme&from=2", env.admin.clone()).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let seqs: Vec<u64> = a.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    let a = get("/v1/events", env.admin.clone()).await;
    assert_eq!(
        (a.status, a.code()),
        (400, "invalid_query".into()),
        "{}",
        a.text
    );
    assert!(a.text.contains("?tenant="), "{}", a.text);
    let a = get("/v1/events?tenant=acne", env.admin.clone()).await;
    assert_eq!(a.status, 404, "{}", a.text);
    assert!(
        a.text.contains("acme"),
        "the known tenant is named: {}",
        a.text
    );

    // A tenant token reads its own log by name, and another's is not there.
    assert_eq!(
        get("/v1/events?tenant=acme", env.acme.clone()).await.status,
        200
    );
    let a = get("/v1/events?tenant=acme", env.globex.clone()).await;
    assert_eq!(a.status, 404, "{}", a.text);
    let a = get("/v1/events/stream?tenant=acme", env.globex.clone()).await;
    assert_eq!(a.status, 404, "{}", a.text);

    // One event, with the DURABLE subscriptions its type matches (no worker
    // runs here, so none has claimed it).
    let a = get("/v1/events/2?tenant=acme", env.admin.clone()).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let e = a.json();
    assert_eq!(e["event"]["seq"], 2);
    assert_eq!(e["hash"].as_str().map(str::len), Some(64));
    assert_eq!(
        e["deliveries"],
        json!([{"subscription": "billing", "status": "waiting", "attempts": 0}])
    );
    assert_eq!(get("/v1/events/2", env.acme.clone()).await.status, 200);
    assert_eq!(get("/v1/events/2", env.globex.clone()).await.status, 404);
    assert_eq!(get("/v1/events/9", env.acme.clone()).await.status, 404);
    let a = get("/v1/events/0", env.acme.clone()).await;
    assert_eq!(
        (a.status, a.code()),
        (400, "invalid_path".into()),
        "{}",
        a.text
    );
    let a = get("/v1/events/x", env.acme.clone()).await;
    assert_eq!(a.status, 400, "{}", a.text);
}

#[tokio::test]
async fn pipes_are_listed_and_tested_over_http_by_admins_only() {
    let config = postbox_relay::RelayConfig::from_toml(
        r#"
[relay]
events_pipe = false

[pipes.jobs]
source = "orders"
filters = ['{"eventName": ["INSERT"]}']
input_template = '{"order": <$.dynamodb.NewImage.pk.S>}'
target = { queue = "jobs" }
"#,
    )
    .unwrap();
    let env = env_with_sources(
        CATALOG,
        postbox_api::Sources {
            pipes: Some(std::sync::Arc::new(config)),
            ..Default::default()
        },
    )
    .await;
    let a = call(&env, "GET", "/v1/pipes", Some(&env.admin), &[], "").await;
    assert_eq!(a.status, 200, "{}", a.text);
    let pipe = &a.json()["pipes"][0];
    assert_eq!(pipe["name"], "jobs");
    assert_eq!(pipe["table"], "orders");
    assert_eq!(pipe["filters"], json!([r#"{"eventName": ["INSERT"]}"#]));
    assert_eq!(pipe["target"]["queue"]["queue"], "jobs");
    assert_eq!(
        call(&env, "GET", "/v1/pipes", Some(&env.acme), &[], "")
            .await
            .status,
        403
    );

    let record = |event: &str, image: Value| {
        json!({"eventName": event, "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/orders/stream/1",
               "dynamodb": {"SequenceNumber": "7", "NewImage": image}})
        .to_string()
    };
    let test = |body: String| {
        let env = &env;
        async move {
            call(
                env,
                "POST",
                "/v1/pipes/jobs/test",
                Some(&env.admin),
                &[],
                body,
            )
            .await
        }
    };
    let a = test(record("INSERT", json!({"pk": {"S": "acme#order#1"}}))).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json()["outcome"], "delivered");
    assert!(
        a.json()["report"]
            .as_str()
            .unwrap()
            .contains(r#"{"order": "acme#order#1"}"#),
        "{}",
        a.text
    );
    let a = test(record("REMOVE", json!({"pk": {"S": "acme#order#1"}}))).await;
    assert_eq!(a.json()["outcome"], "filtered", "{}", a.text);
    let a = test(record("INSERT", json!({"other": {"S": "x"}}))).await;
    assert_eq!(a.json()["outcome"], "dead_letter", "{}", a.text);
    let a = test("[1]".into()).await;
    assert_eq!(
        (a.status, a.code()),
        (400, "invalid_request".into()),
        "{}",
        a.text
    );
    let a = call(
        &env,
        "POST",
        "/v1/pipes/nope/test",
        Some(&env.admin),
        &[],
        "{}",
    )
    .await;
    assert_eq!(a.status, 404, "{}", a.text);
    assert!(a.text.contains("jobs"), "{}", a.text);

    // A node without a relay says so.
    let bare = common::env().await;
    let a = call(&bare, "GET", "/v1/pipes", Some(&bare.admin), &[], "").await;
    assert_eq!(a.status, 404, "{}", a.text);
}

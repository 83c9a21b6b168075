//! The commands on `--backend aws`, against DynamoDB Local and an SQS
//! server: `postbox verify` exits 0 on an intact log, reports a tampered
//! event at its seq with exit code 4, and refuses to start without a region;
//! `postbox init` creates what is missing once and refuses a table keyed
//! otherwise, naming it and the difference, and with `--pipes` makes the
//! pipes' queues and source streams but refuses a missing source table;
//! `serve --backend aws --examples` runs the payment handlers and the
//! report jobs; `postbox relay` delivers events
//! emitted on DynamoDB to the events queue through DynamoDB Streams, and
//! refuses to start on a stack without its source table; `postbox serve
//! --backend aws` takes emits over HTTP and its webhook subscription
//! receives each event, and refuses a stack `init` has not made.
//!
//! `scripts/test` runs these with `POSTBOX_TEST_DYNAMODB_ENDPOINT` and
//! `POSTBOX_TEST_SQS_ENDPOINT` set (a plain `cargo test` ignores them).

mod common;

use std::process::Command;
use std::sync::Arc;

use postbox_aws::DynamoStore;
use postbox_engine::{Catalog, Context, Engine};
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::{UpdateItemInput, Values};

fn endpoint() -> String {
    std::env::var("POSTBOX_TEST_DYNAMODB_ENDPOINT").expect(
        "POSTBOX_TEST_DYNAMODB_ENDPOINT: the URL of a DynamoDB Local (scripts/test starts one)",
    )
}

/// A table and queue name prefix no other run of `test` uses.
fn unique_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("t{nanos}-{test}-")
}

/// `postbox <args>` with the AWS configuration of local services (and
/// `region`), nothing from this machine's own AWS files.
fn command(args: &[&str], region: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_postbox"));
    cmd.args(args)
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint())
        .env("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", endpoint())
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_REGION");
    if let Ok(sqs) = std::env::var("POSTBOX_TEST_SQS_ENDPOINT") {
        cmd.env("AWS_ENDPOINT_URL_SQS", sqs);
    }
    if let Some(r) = region {
        cmd.env("AWS_REGION", r);
    }
    cmd
}

/// Runs [`command`] to its end: its exit code and output.
fn postbox(args: &[&str], region: Option<&str>) -> (i32, String) {
    let out = command(args, region).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `postbox verify --backend aws`.
fn verify(prefix: &str, region: Option<&str>, args: &[&str]) -> (i32, String) {
    let mut all = vec!["verify", "--backend", "aws", "--aws-prefix", prefix];
    all.extend_from_slice(args);
    postbox(&all, region)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local: scripts/test runs it"]
async fn verify_on_dynamodb_finds_a_tampered_event_at_its_seq() {
    let prefix = unique_prefix("cli");
    let config = postbox_aws::local_config(&endpoint()).await;
    let store = Arc::new(DynamoStore::new(&config, &prefix));
    let catalog = Catalog::from_toml(
        "[[event_types]]\nname = \"NOTE\"\nproducers = [\"p\"]\n[[producers]]\nname = \"p\"\nemits = [\"NOTE\"]\n",
        "test",
    )
    .unwrap();
    let engine = Engine::builder(store.clone(), catalog)
        .build()
        .await
        .unwrap();
    let ctx = Context::new("acme", "tester").unwrap();
    for i in 0..5 {
        engine
            .emit(&ctx, "NOTE", serde_json::json!({ "n": i }), vec![])
            .await
            .unwrap();
    }

    let (code, out) = verify(&prefix, Some("us-east-1"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every chain is intact"), "{out}");

    // Someone with write access to the table edits event 3's payload.
    store
        .update_item(UpdateItemInput {
            table_name: postbox_topology::EVENTS_TABLE.into(),
            key: Item::from([
                (
                    "pk".to_owned(),
                    AttributeValue::S("TENANT#acme#EVENT".into()),
                ),
                (
                    "sk".to_owned(),
                    AttributeValue::S(postbox_topology::keys::seq_sk(3)),
                ),
            ]),
            update_expression: Some("SET payload = :p".into()),
            expression_attribute_values: Some(Values::from([(
                ":p".to_owned(),
                AttributeValue::S(r#"{"n":300}"#.into()),
            )])),
            ..Default::default()
        })
        .await
        .unwrap();
    let (code, out) = verify(&prefix, Some("us-east-1"), &["--full"]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("BROKEN at #3"), "{out}");

    let (code, out) = verify(&prefix, None, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("AWS_REGION"), "{out}");
}

/// `postbox init --backend aws`; needs an SQS server too.
fn init(prefix: &str) -> (i32, String) {
    std::env::var("POSTBOX_TEST_SQS_ENDPOINT").expect(
        "POSTBOX_TEST_SQS_ENDPOINT: the URL of an SQS-compatible server (scripts/test starts one)",
    );
    postbox(
        &["init", "--backend", "aws", "--aws-prefix", prefix],
        Some("us-east-1"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn init_creates_what_is_missing_once_and_refuses_a_table_keyed_otherwise() {
    let prefix = unique_prefix("init");
    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches(": created").count(), 8, "{out}");
    let config = postbox_aws::local_config(&endpoint()).await;
    let store = DynamoStore::new(&config, &prefix);
    let events = store
        .describe_table(postbox_topology::EVENTS_TABLE)
        .await
        .unwrap();
    assert!(
        events
            .stream_specification
            .is_some_and(|s| s.stream_enabled),
        "the events table has no stream"
    );
    assert_eq!(
        store
            .describe_time_to_live(postbox_topology::INBOX_TABLE)
            .await
            .unwrap()
            .as_deref(),
        Some("ttl")
    );

    // Again: everything exists, nothing changes.
    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches(": exists").count(), 8, "{out}");

    // A stack whose inbox was made by hand with the wrong keys.
    let other = format!("{prefix}x-");
    let store = DynamoStore::new(&config, &other);
    store
        .create_table(postbox_store::api::CreateTableInput::keyed_by(
            postbox_topology::INBOX_TABLE,
            "pk",
        ))
        .await
        .unwrap();
    let (code, out) = init(&other);
    assert_eq!(code, 2, "{out}");
    let named =
        "table postbox_inbox: key schema is [pk HASH S], Postbox needs [pk HASH S, sk RANGE S]";
    assert!(out.contains(named), "{out}");

    // A node refuses that stack at startup, naming the same difference.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (code, out) = postbox(
        &[
            "serve",
            "--backend",
            "aws",
            "--aws-prefix",
            &other,
            "--examples",
            "--listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
        ],
        Some("us-east-1"),
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("tables differ from what Postbox needs"),
        "{out}"
    );
    assert!(out.contains(named), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn relay_on_aws_delivers_emitted_events_to_the_events_queue() {
    use postbox_queue::QueueClient;
    let prefix = unique_prefix("relay");
    let config = std::env::temp_dir().join(format!("{prefix}pipes.toml"));
    std::fs::write(&config, "[relay]\nevents_pipe = true\n").unwrap();
    let config = config.to_str().unwrap().to_owned();
    let relay_args = [
        "relay",
        "--backend",
        "aws",
        "--aws-prefix",
        &prefix,
        "--config",
        &config,
    ];

    // Before `init` there is no events table to read: refused, named.
    let (code, out) = postbox(&relay_args, Some("us-east-1"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("source table postbox_events"), "{out}");

    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    let store = DynamoStore::new(&postbox_aws::local_config(&endpoint()).await, &prefix);
    let catalog = Catalog::from_toml(
        "[[event_types]]\nname = \"ORDER_PLACED\"\nproducers = [\"orders\"]\n",
        "test",
    )
    .unwrap();
    let engine = Engine::builder(Arc::new(store), catalog)
        .build()
        .await
        .unwrap();
    let ctx = Context::new("acme", "tester").unwrap();
    for i in 0..5 {
        engine
            .emit(&ctx, "ORDER_PLACED", serde_json::json!({ "i": i }), vec![])
            .await
            .unwrap();
    }
    let child = command(&relay_args, Some("us-east-1"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sqs = std::env::var("POSTBOX_TEST_SQS_ENDPOINT").unwrap();
    let queues = postbox_aws::SqsQueues::new(&postbox_aws::local_config(&sqs).await, &prefix);
    let mut depth = 0;
    for _ in 0..200 {
        let attrs = queues
            .queue_attributes(postbox_topology::EVENTS_QUEUE, &["All".to_owned()])
            .await
            .unwrap();
        depth = attrs["ApproximateNumberOfMessages"].parse::<u64>().unwrap();
        if depth >= 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // SIGTERM: the relay stops after its page and gives its lease up.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(depth, 5, "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("on DynamoDB Streams"), "{text}");
}

/// The AWS configuration [`command`] gives, for a child started otherwise.
fn aws_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint()),
        ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", endpoint()),
        (
            "AWS_ENDPOINT_URL_SQS",
            std::env::var("POSTBOX_TEST_SQS_ENDPOINT").unwrap(),
        ),
        ("AWS_ACCESS_KEY_ID", "local".into()),
        ("AWS_SECRET_ACCESS_KEY", "local".into()),
        ("AWS_CONFIG_FILE", "/nonexistent".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn serve_on_aws_takes_emits_over_http_and_its_webhook_receives_each_event() {
    let (hook, got) = common::id_receiver("/hook").await;

    let prefix = unique_prefix("serve");
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
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
handler = "http://{hook}/hook"
"#
        ),
    )
    .unwrap();
    let catalog = catalog.to_str().unwrap().to_owned();
    let data = dir.path().join("data");
    let serve = [
        "serve",
        "--backend",
        "aws",
        "--aws-prefix",
        &prefix,
        "--catalog",
        &catalog,
    ];

    // Before `init`: refused, naming what is missing and what creates it.
    let mut args = serve.to_vec();
    args.extend(["--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()]);
    let (code, out) = postbox(&args, Some("us-east-1"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("table postbox_events"), "{out}");
    assert!(out.contains("postbox init --backend aws"), "{out}");

    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    let server = common::Server::start_with_env(&serve, &data, &aws_env());
    let tenant = server.tenant_token("acme").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let (status, emitted) = common::call(
            &server.base,
            Some(&tenant),
            "POST",
            "/v1/events",
            Some(serde_json::json!({"type": "ORDER_PLACED", "payload": {"i": i}})),
        )
        .await;
        assert_eq!(status, 201, "{emitted}");
        ids.push(emitted["event"]["id"].as_str().unwrap().to_owned());
    }
    for _ in 0..300 {
        if got.lock().unwrap().len() >= 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The relay's counters are on the metrics page.
    server
        .metrics_when("the relay's deliveries in the metrics", |m| {
            m.contains(r#"postbox_relay_records_total{pipe="events",outcome="delivered"} 5"#)
                && m.contains(r#"postbox_relay_gaps_total{pipe="events"} 0"#)
                && m.contains(r#"postbox_aws_throttled_total{service="dynamodb"} 0"#)
                && m.contains(r#"postbox_aws_sdk_retries_total{service="sqs"}"#)
        })
        .await;
    // The log reads back over HTTP from DynamoDB.
    let (status, log) = common::call(&server.base, Some(&tenant), "GET", "/v1/events", None).await;
    assert_eq!(status, 200, "{log}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    let mut received = got.lock().unwrap().clone();
    received.sort();
    ids.sort();
    assert_eq!(received, ids, "each event once at the webhook; {stderr}");
    assert_eq!(log["events"].as_array().map(Vec::len), Some(5), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn serve_on_aws_with_no_relay_leaves_the_stream_to_another_relay() {
    let (hook, got) = common::id_receiver("/hook").await;
    let prefix = unique_prefix("norelay");
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[[event_types]]\nname = \"ORDER_PLACED\"\nproducers = [\"shop\"]\n\
             [[producers]]\nname = \"shop\"\nemits = [\"ORDER_PLACED\"]\n\
             [[subscriptions]]\nname = \"hook\"\nglob = \"ORDER_*\"\nlane = \"DURABLE\"\nhandler = \"http://{hook}/hook\"\n"
        ),
    )
    .unwrap();
    let catalog = catalog.to_str().unwrap().to_owned();
    let data = dir.path().join("data");
    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    let server = common::Server::start_with_env(
        &[
            "serve",
            "--backend",
            "aws",
            "--aws-prefix",
            &prefix,
            "--catalog",
            &catalog,
            "--no-relay",
        ],
        &data,
        &aws_env(),
    );
    let tenant = server.tenant_token("acme").await;
    for i in 0..3 {
        let (status, emitted) = common::call(
            &server.base,
            Some(&tenant),
            "POST",
            "/v1/events",
            Some(serde_json::json!({"type": "ORDER_PLACED", "payload": {"i": i}})),
        )
        .await;
        assert_eq!(status, 201, "{emitted}");
    }
    // Nothing moves the stream: the workers wait, and no relay reports.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(got.lock().unwrap().len(), 0);
    let (status, metrics) = common::call(
        &server.base,
        Some(&server.admin),
        "GET",
        "/v1/metrics",
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        !metrics.to_string().contains("postbox_relay_records_total"),
        "{metrics}"
    );

    // A relay of its own moves them, and this node's workers deliver them.
    let config = dir.path().join("pipes.toml");
    std::fs::write(&config, "[relay]\nevents_pipe = true\n").unwrap();
    let mut relay = command(
        &[
            "relay",
            "--backend",
            "aws",
            "--aws-prefix",
            &prefix,
            "--config",
            config.to_str().unwrap(),
        ],
        Some("us-east-1"),
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    for _ in 0..300 {
        if got.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = Command::new("kill").arg(relay.id().to_string()).status();
    let _ = relay.wait();
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert_eq!(got.lock().unwrap().len(), 3, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn bench_on_aws_measures_emits_and_deliveries_on_a_stack_init_made() {
    let prefix = unique_prefix("bench");
    let bench = [
        "bench",
        "--backend",
        "aws",
        "--aws-prefix",
        &prefix,
        "--events",
        "20",
    ];
    let (code, out) = postbox(&bench, Some("us-east-1"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("postbox init --backend aws"), "{out}");
    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    let (code, out) = postbox(&bench, Some("us-east-1"));
    assert_eq!(code, 0, "{out}");
    for row in [
        "emit, 1 tenant(s)",
        "emit, 100 tenant(s)",
        "relay + deliver the backlog",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?}: {out}"));
        let columns: Vec<&str> = line[52..].split_whitespace().collect();
        let events: u64 = columns[0].parse().unwrap();
        assert_eq!(
            events,
            if row.starts_with("relay") { 40 } else { 20 },
            "{line}"
        );
        // Every event wrote: its transaction, or its claim and completion.
        let wru: f64 = columns[3].parse().unwrap();
        assert!(wru > 0.0, "no write capacity counted: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn serve_on_aws_runs_the_built_in_examples_from_payment_to_report() {
    use postbox_examples::payments::{EFFECTS, SHOP_TABLE};
    use postbox_store::api::GetItemInput;
    use serde_json::json;

    let prefix = unique_prefix("examples");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = [
        "serve",
        "--backend",
        "aws",
        "--aws-prefix",
        &prefix,
        "--examples",
    ];

    // The node's own stack is not enough: the examples' tables and queues
    // come from `init --examples`, and the refusal says so.
    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    let mut args = serve.to_vec();
    args.extend(["--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()]);
    let (code, out) = postbox(&args, Some("us-east-1"));
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("table shop") && out.contains("queue jobs.fifo"),
        "{out}"
    );
    assert!(
        out.contains("postbox init --backend aws --examples"),
        "{out}"
    );
    let (code, out) = postbox(
        &[
            "init",
            "--backend",
            "aws",
            "--aws-prefix",
            &prefix,
            "--examples",
        ],
        Some("us-east-1"),
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("table shop: created"), "{out}");
    assert!(out.contains("queue jobs.fifo: created"), "{out}");
    assert!(out.contains("table postbox_events: exists"), "{out}");

    let server = common::Server::start_with_env(&serve, &data, &aws_env());
    let acme = server.tenant_token("acme").await;
    let globex = server.tenant_token("globex").await;

    // The README's payment: its row and its event in one transaction on
    // DynamoDB, then the four code handlers through the relay and SQS.
    let payment = json!({
        "type": "PAYMENT_COMPLETED",
        "payload": {"order_id": "A-1", "amount": 4999, "currency": "EUR", "buyer": "ada@example.com", "tag": "lamp-42"},
        "writes": [{"Put": {"TableName": "shop", "Item": {"pk": {"S": "acme#payment#A-1"}, "sk": {"S": "PAYMENT"}}}}]
    });
    let (status, e) = common::call(
        &server.base,
        Some(&acme),
        "POST",
        "/v1/events",
        Some(payment),
    )
    .await;
    assert_eq!(status, 201, "{e}");
    let config = postbox_aws::local_config(&endpoint()).await;
    let store = DynamoStore::new(&config, &prefix);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for effect in EFFECTS {
        let value = if effect.key_field == "tag" {
            "lamp-42"
        } else {
            "A-1"
        };
        let key = Item::from([(
            "pk".to_owned(),
            AttributeValue::S(format!("acme#{}#{value}", effect.prefix)),
        )]);
        loop {
            let got = store
                .get_item(GetItemInput {
                    table_name: SHOP_TABLE.into(),
                    key: key.clone(),
                    consistent_read: Some(true),
                    ..Default::default()
                })
                .await
                .unwrap();
            if let Some(item) = got.item {
                // Exactly once, the notification's flaky first try included.
                assert_eq!(
                    item.get(effect.counter),
                    Some(&AttributeValue::n(1)),
                    "{effect:?}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no effect of {effect:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    // The report-job API: tenant tokens only, scoped to their tenant; the
    // jobs pipe and the runner take the job to SUCCEEDED, and the
    // report-ready pipe's bus rule logs it.
    let job = common::report_job_succeeds(&server.base, &acme, &globex).await;
    let job_id = job["jobId"].as_str().unwrap().to_owned();
    let log = data.join("report-ready.jsonl");
    while !common::json_lines(&log)
        .iter()
        .any(|l| l.to_string().contains(&job_id))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no ReportReady for {job_id} in {log:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (exit, stderr) = server.terminate();
    assert!(exit.success(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn init_with_pipes_makes_their_queues_and_streams_and_refuses_a_missing_source() {
    use postbox_store::api::CreateTableInput;

    let prefix = unique_prefix("pipes");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pipes.toml");
    std::fs::write(
        &config,
        r#"
[pipes.orders]
source = "orders"
target = { queue = "orders-changes.fifo", message_group_id = "<$.dynamodb.Keys.pk.S>" }
dead_letter_queue = "orders-relay-dlq"
"#,
    )
    .unwrap();
    let init = |extra: &[&str]| {
        let mut args = vec!["init", "--backend", "aws", "--aws-prefix", &prefix];
        args.extend_from_slice(extra);
        postbox(&args, Some("us-east-1"))
    };
    let pipes = ["--pipes", config.to_str().unwrap()];

    // The source table is the user's: its keys are not init's to choose.
    // What init can make, it makes, and the refusal names the rest.
    let (code, out) = init(&pipes);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("table orders, which pipe \"orders\" reads, does not exist"),
        "{out}"
    );
    assert!(out.contains("queue orders-changes.fifo: created"), "{out}");
    assert!(out.contains("queue orders-relay-dlq: created"), "{out}");

    let store = DynamoStore::new(&postbox_aws::local_config(&endpoint()).await, &prefix);
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .unwrap();
    let (code, out) = init(&pipes);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("table orders: stream enabled"), "{out}");
    let described = store.describe_table("orders").await.unwrap();
    let view = described
        .stream_specification
        .and_then(|s| s.stream_view_type);
    assert_eq!(
        view,
        Some(postbox_store::api::StreamViewType::NewAndOldImages)
    );

    // Again: nothing new, nothing changed.
    let (code, out) = init(&pipes);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("table orders: exists, with its stream"),
        "{out}"
    );
    assert!(out.contains("queue orders-changes.fifo: exists"), "{out}");
    assert!(!out.contains("created"), "{out}");
}

/// Needs no local service: the catalog is refused before AWS is asked.
#[test]
fn serve_and_init_on_aws_refuse_a_subscription_the_node_would_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["shop"]
[[producers]]
name = "shop"
emits = ["ORDER_PLACED"]
[[entities]]
name = "order"
table = "orders"
[[subscriptions]]
name = "rows"
glob = "row:order:*"
lane = "BEST_EFFORT"
handler = "orders::project"
"#,
    )
    .unwrap();
    let data = dir.path().join("data");
    let catalog = catalog.to_str().unwrap();
    // `init` checks the same before it makes anything.
    for args in [
        vec![
            "serve",
            "--backend",
            "aws",
            "--catalog",
            catalog,
            "--listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
        ],
        vec!["init", "--backend", "aws", "--catalog", catalog],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
            .args(&args)
            .env("AWS_REGION", "us-east-1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("subscription \"rows\" is on lane BEST_EFFORT"),
            "{args:?}: {stderr}"
        );
    }
}

/// Needs no local service: without credentials a command stops at startup
/// and says what it tried, instead of failing its first request.
#[test]
fn a_command_on_aws_without_credentials_says_what_it_tried() {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["verify", "--backend", "aws"])
        .env("AWS_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:9")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .env_remove("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--backend aws: no AWS credentials"),
        "{stderr}"
    );
    assert!(
        stderr.contains("AWS_ACCESS_KEY_ID") && stderr.contains("AWS_PROFILE"),
        "{stderr}"
    );
}

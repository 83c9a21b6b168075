//! The commands on `--backend aws`, against DynamoDB Local and an SQS
//! server: `postbox verify` exits 0 on an intact log, reports a tampered
//! event at its seq with exit code 4, and refuses to start without a region;
//! `postbox init` creates what is missing once and refuses a table keyed
//! otherwise, naming it and the difference.
//!
//! `scripts/test` runs these with `POSTBOX_TEST_DYNAMODB_ENDPOINT` and
//! `POSTBOX_TEST_SQS_ENDPOINT` set (a plain `cargo test` ignores them).

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

/// `postbox <args>` with the AWS configuration of local services (and
/// `region`), nothing from this machine's own AWS files.
fn postbox(args: &[&str], region: Option<&str>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_postbox"));
    cmd.args(args)
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint())
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
    let out = cmd.output().unwrap();
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
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let prefix = format!("t{nanos}-cli-");
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
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let prefix = format!("t{nanos}-init-");
    let (code, out) = init(&prefix);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches(": created").count(), 6, "{out}");
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
    assert_eq!(out.matches(": exists").count(), 6, "{out}");

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
    assert!(
        out.contains(
            "table postbox_inbox: key schema is [pk HASH S], Postbox needs [pk HASH S, sk RANGE S]"
        ),
        "{out}"
    );
}

//! `postbox synth`'s template deployed to a local CloudFormation (MiniStack's,
//! which creates the tables, queues, pipes, buses, roles and alarms): the
//! stack reaches CREATE_COMPLETE, its tables and queues have the declared
//! keys, stream and redrive policy, and `postbox serve --backend aws` on the
//! deployed stack takes an emit over HTTP that its webhook receives
//! (Postbox's own relay stands in for the Pipe, which the local service
//! does not run).
//!
//! `scripts/test` runs it with `POSTBOX_TEST_CFN_ENDPOINT` (a MiniStack with
//! CloudFormation, DynamoDB, Streams and SQS) and `POSTBOX_TEST_PYTHON` (a
//! Python with boto3, which `scripts/lib/cfn_deploy.py` deploys with).

mod common;

use std::process::Command;

use postbox_aws::{DynamoStore, SqsQueues};
use postbox_queue::QueueClient;
use postbox_store::ItemStore;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name}: scripts/test sets it"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a local CloudFormation (MiniStack): scripts/test runs it"]
async fn the_synthesised_stack_deploys_and_a_node_runs_on_it() {
    let endpoint = var("POSTBOX_TEST_CFN_ENDPOINT");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let prefix = format!("s{nanos}-");
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");

    // The webhook the catalog's subscription posts to.
    let (hook, got) = common::id_receiver("/orders").await;
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        std::fs::read_to_string(root.join("examples/aws/catalog.toml"))
            .unwrap()
            .replace("http://127.0.0.1:9000", &format!("http://{hook}")),
    )
    .unwrap();
    let catalog = catalog.to_str().unwrap().to_owned();

    let template = dir.path().join("template.json");
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["synth", "--prefix", &prefix, "--catalog", &catalog, "--out"])
        .arg(&template)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deployed = Command::new(var("POSTBOX_TEST_PYTHON"))
        .arg(root.join("scripts/lib/cfn_deploy.py"))
        .args([&endpoint, &format!("{prefix}stack")])
        .arg(&template)
        .output()
        .unwrap();
    assert!(
        deployed.status.success(),
        "{}",
        String::from_utf8_lossy(&deployed.stderr)
    );
    let outputs: serde_json::Value = serde_json::from_slice(&deployed.stdout).unwrap();
    assert_eq!(
        outputs["PostboxEventsTable"],
        format!("{prefix}postbox_events")
    );

    // What was created is what Postbox needs.
    let config = postbox_aws::local_config(&endpoint).await;
    let store = DynamoStore::new(&config, &prefix);
    let events = store
        .describe_table(postbox_topology::EVENTS_TABLE)
        .await
        .unwrap();
    let keys: Vec<&str> = events
        .key_schema
        .iter()
        .map(|k| k.attribute_name.as_str())
        .collect();
    assert_eq!(keys, ["pk", "sk"]);
    assert!(
        events
            .stream_specification
            .as_ref()
            .is_some_and(|s| s.stream_enabled),
        "the events table has no stream: {events:?}"
    );
    let queues = SqsQueues::new(&config, &prefix);
    let attrs = queues
        .queue_attributes(postbox_topology::EVENTS_QUEUE, &["All".to_owned()])
        .await
        .unwrap();
    let redrive: serde_json::Value = serde_json::from_str(&attrs["RedrivePolicy"]).unwrap();
    assert!(
        redrive["deadLetterTargetArn"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{prefix}{}", postbox_topology::EVENTS_DLQ)),
        "{redrive}"
    );

    // A node on the deployed stack: emit over HTTP, the webhook gets it.
    let env = vec![
        ("AWS_ENDPOINT_URL", endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "local".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "local".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_CONFIG_FILE", "/nonexistent".to_owned()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".to_owned()),
    ];
    let server = common::Server::start_with_env(
        &[
            "serve",
            "--backend",
            "aws",
            "--aws-prefix",
            &prefix,
            "--catalog",
            &catalog,
        ],
        &dir.path().join("data"),
        &env,
    );
    let tenant = server.tenant_token("acme").await;
    let (status, emitted) = common::call(
        &server.base,
        Some(&tenant),
        "POST",
        "/v1/events",
        Some(serde_json::json!({"type": "ORDER_PLACED", "payload": {"order_id": "A-1"}})),
    )
    .await;
    assert_eq!(status, 201, "{emitted}");
    let id = emitted["event"]["id"].as_str().unwrap().to_owned();
    for _ in 0..300 {
        if !got.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, stderr) = server.terminate();
    assert!(status.success(), "{stderr}");
    assert_eq!(*got.lock().unwrap(), [id], "{stderr}");
}

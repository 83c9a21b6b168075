//! The AWS backend's table control plane (UpdateTable, TagResource,
//! UntagResource, ListTagsOfResource) through the official SDK, against a
//! DynamoDB-compatible server that implements all four: `postbox serve`'s
//! own DynamoDB endpoint (which `conformance/dynamodb` holds to DynamoDB
//! Local; DynamoDB Local itself has no tagging).

mod common;

use common::Server;
use postbox_aws::DynamoStore;
use postbox_store::ItemStore;
use postbox_store::StoreError;
use postbox_store::api::{
    CreateTableInput, StreamSpecification, StreamViewType, Tag, UpdateTableInput,
};

fn tag(key: &str, value: &str) -> Tag {
    Tag {
        key: key.into(),
        value: value.into(),
    }
}

#[tokio::test]
async fn update_table_and_tags_on_the_aws_backend() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["serve"], &dir.path().join("data"));
    let keys = std::fs::read_to_string(server.data.join("admin-access-key")).unwrap();
    let value = |name: &str| {
        keys.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_owned()
    };
    let config = postbox_aws::local_config_with_key(
        &server.base,
        &value("AWS_ACCESS_KEY_ID"),
        &value("AWS_SECRET_ACCESS_KEY"),
    )
    .await;
    let store = DynamoStore::new(&config, "app-");
    let created = store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .unwrap();
    // The prefix is the stack's: the table on the server is app-orders.
    assert!(
        created.table_arn.ends_with("/app-orders"),
        "{}",
        created.table_arn
    );

    // UpdateTable: a stream, then provisioned capacity.
    let stream = store
        .update_table(UpdateTableInput {
            table_name: "orders".into(),
            stream_specification: Some(StreamSpecification {
                stream_enabled: true,
                stream_view_type: Some(StreamViewType::NewImage),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(stream.table_name, "orders");
    assert_eq!(
        stream.stream_specification.unwrap().stream_view_type,
        Some(StreamViewType::NewImage)
    );
    assert!(stream.latest_stream_arn.is_some());
    let provisioned = store
        .update_table(UpdateTableInput {
            table_name: "orders".into(),
            billing_mode: Some("PROVISIONED".into()),
            provisioned_throughput: Some(
                serde_json::json!({"ReadCapacityUnits": 3, "WriteCapacityUnits": 4}),
            ),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        provisioned.provisioned_throughput.unwrap()["WriteCapacityUnits"],
        4
    );
    // What the backend does not change is refused by name, before any call.
    let mut other = UpdateTableInput {
        table_name: "orders".into(),
        ..Default::default()
    };
    other
        .other
        .insert("SSESpecification".into(), serde_json::json!({}));
    let e = store.update_table(other).await.unwrap_err();
    assert!(e.to_string().contains("SSESpecification"), "{e}");
    // The server's own refusal comes back as DynamoDB's error.
    let e = store
        .update_table(UpdateTableInput {
            table_name: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Validation(_)), "{e:?}");

    // Tags: add, replace a value, list (every page), remove.
    let arn = created.table_arn;
    store
        .tag_resource(&arn, vec![tag("team", "payments"), tag("env", "dev")])
        .await
        .unwrap();
    store
        .tag_resource(&arn, vec![tag("env", "prod")])
        .await
        .unwrap();
    let mut tags = store.list_tags_of_resource(&arn).await.unwrap();
    tags.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(tags, [tag("env", "prod"), tag("team", "payments")]);
    store
        .untag_resource(&arn, vec!["team".into(), "absent".into()])
        .await
        .unwrap();
    assert_eq!(
        store.list_tags_of_resource(&arn).await.unwrap(),
        [tag("env", "prod")]
    );
    let e = store
        .tag_resource(&format!("{arn}-missing"), vec![tag("a", "b")])
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::ResourceNotFound(_)), "{e:?}");

    // Tags given to CreateTable are the table's from the start.
    let tagged = store
        .create_table(CreateTableInput {
            tags: Some(vec![tag("team", "billing")]),
            ..CreateTableInput::keyed_by("invoices", "pk")
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .list_tags_of_resource(&tagged.table_arn)
            .await
            .unwrap(),
        [tag("team", "billing")]
    );
}

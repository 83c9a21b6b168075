//! The control plane: CreateTable rules, DescribeTable, ListTables,
//! DeleteTable; and request rules every item operation shares.

mod common;

use common::*;
use postbox_store::ItemStore;
use postbox_store::api::CreateTableInput;
use serde_json::{Value, json};

fn create_req(extra: Value) -> CreateTableInput {
    let mut req = json!({"TableName": "tbl", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}], "BillingMode": "PAY_PER_REQUEST"});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    req_of(req)
}

#[tokio::test]
async fn create_describe_list_delete() {
    let s = open();
    let d = s
        .create_table(create_req(
            json!({"StreamSpecification": {"StreamEnabled": true, "StreamViewType": "KEYS_ONLY"}}),
        ))
        .await
        .unwrap();
    assert_eq!((d.table_status.as_str(), d.item_count), ("ACTIVE", 0));
    assert!(d.latest_stream_arn.is_some() && d.latest_stream_label.is_some());
    create(&s, "abc", Some("N"), None).await;
    assert_eq!(s.list_tables().await.unwrap(), ["abc", "tbl"]);
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}}))
        .await
        .unwrap();
    let d = s.describe_table("tbl").await.unwrap();
    assert_eq!(d.item_count, 1);
    assert_eq!(
        d.billing_mode_summary,
        Some(json!({"BillingMode": "PAY_PER_REQUEST",
            "LastUpdateToPayPerRequestDateTime": d.creation_date_time}))
    );
    // On-demand capacity shows as zeros, as DynamoDB shows it.
    assert_eq!(
        d.provisioned_throughput,
        Some(json!({"NumberOfDecreasesToday": 0, "ReadCapacityUnits": 0, "WriteCapacityUnits": 0}))
    );
    // A TableId in UUID form, stable for the table.
    let id = d.table_id.clone().unwrap();
    assert_eq!(id.len(), 36, "{id}");
    assert_eq!(id.matches('-').count(), 4, "{id}");
    assert_eq!(
        s.describe_table("tbl").await.unwrap().table_id,
        Some(id.clone())
    );
    assert_ne!(s.describe_table("abc").await.unwrap().table_id, Some(id));
    assert!(
        s.describe_table("abc")
            .await
            .unwrap()
            .stream_specification
            .is_none()
    );
    let gone = s.delete_table("tbl").await.unwrap();
    assert_eq!(gone.table_status, "DELETING");
    check_err(
        s.describe_table("tbl").await,
        "ResourceNotFoundException",
        "Requested resource not found",
    );
    check_err(s.delete_table("tbl").await, "ResourceNotFoundException", "");
    assert_eq!(s.list_tables().await.unwrap(), ["abc"]);
}

#[tokio::test]
async fn tables_survive_reopen() {
    let s = open_with_table(Some("S")).await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}, "sk": {"S": "b"}}}),
    )
    .await
    .unwrap();
    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    let s = postbox_store::embedded::EmbeddedStore::open(&path, options(clock)).unwrap();
    assert_eq!(s.list_tables().await.unwrap(), ["tbl"]);
    assert!(
        get(&s, "tbl", json!({"pk": {"S": "a"}, "sk": {"S": "b"}}))
            .await
            .is_some()
    );
    drop(dir);
}

#[tokio::test]
async fn create_table_rules() {
    let s = open();
    s.create_table(create_req(json!({}))).await.unwrap();
    check_err(
        s.create_table(create_req(json!({}))).await,
        "ResourceInUseException",
        "Table already exists: tbl",
    );
    let cases = [
        (
            json!({"TableName": "ab"}),
            "at 'tableName' failed to satisfy constraint",
        ),
        (json!({"TableName": "a b c"}), "regular expression pattern"),
        (json!({"KeySchema": []}), "keySchema"),
        (
            json!({"KeySchema": [{"AttributeName": "pk", "KeyType": "RANGE"}]}),
            "not a HASH key type",
        ),
        (
            json!({"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "pk", "KeyType": "RANGE"}],
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}]}),
            "same name",
        ),
        (
            json!({"AttributeDefinitions": [{"AttributeName": "other", "AttributeType": "S"}]}),
            "not defined in AttributeDefinitions",
        ),
        (
            json!({"AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "x", "AttributeType": "S"}]}),
            "does not exactly match",
        ),
        (
            json!({"BillingMode": "PAY_PER_REQUEST", "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1}}),
            "PAY_PER_REQUEST",
        ),
        (
            json!({"StreamSpecification": {"StreamEnabled": true}}),
            "StreamViewType",
        ),
    ];
    for (i, (extra, msg)) in cases.into_iter().enumerate() {
        let mut extra = extra;
        if extra.get("TableName").is_none() {
            extra["TableName"] = json!(format!("t{i:02}"));
        }
        check_err(
            s.create_table(create_req(extra)).await,
            "ValidationException",
            msg,
        );
    }
    let mut provisioned = create_req(
        json!({"TableName": "prov", "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1}}),
    );
    provisioned.billing_mode = None;
    s.create_table(provisioned).await.unwrap();
}

#[tokio::test]
async fn key_rules_of_item_operations() {
    let s = open_with_table(Some("N")).await;
    let p = |it: Value| json!({"TableName": "tbl", "Item": it});
    check_err(
        put(&s, p(json!({"pk": {"S": "a"}}))).await,
        "ValidationException",
        "Missing the key sk in the item",
    );
    check_err(
        put(&s, p(json!({"pk": {"N": "1"}, "sk": {"N": "1"}}))).await,
        "ValidationException",
        "Type mismatch for key pk expected: S actual: N",
    );
    check_err(
        put(&s, p(json!({"pk": {"S": ""}, "sk": {"N": "1"}}))).await,
        "ValidationException",
        "empty string value. Key: pk",
    );
    check_err(
        put(
            &s,
            p(json!({"pk": {"S": "x".repeat(2049)}, "sk": {"N": "1"}})),
        )
        .await,
        "ValidationException",
        "2048 bytes",
    );
    put(
        &s,
        p(json!({"pk": {"S": "x".repeat(2048)}, "sk": {"N": "1"}})),
    )
    .await
    .unwrap();
    for key in [
        json!({"pk": {"S": "a"}}),
        json!({"pk": {"S": "a"}, "sk": {"S": "1"}}),
        json!({"pk": {"S": "a"}, "sk": {"N": "1"}, "x": {"N": "1"}}),
    ] {
        check_err(
            s.get_item(req_of(json!({"TableName": "tbl", "Key": key})))
                .await,
            "ValidationException",
            "The provided key element does not match the schema",
        );
    }
    check_err(
        s.get_item(req_of(
            json!({"TableName": "missing", "Key": {"pk": {"S": "a"}}}),
        ))
        .await,
        "ResourceNotFoundException",
        "",
    );
}

#[tokio::test]
async fn item_shape_and_size_rules() {
    let s = open_with_table(None).await;
    let p = |it: Value| json!({"TableName": "tbl", "Item": it});
    check_err(
        put(
            &s,
            p(json!({"pk": {"S": "a"}, "big": {"S": "x".repeat(400 * 1024)}})),
        )
        .await,
        "ValidationException",
        "Item size has exceeded",
    );
    check_err(
        put(&s, p(json!({"pk": {"S": "a"}, "": {"S": "x"}}))).await,
        "ValidationException",
        "attribute name cannot be empty",
    );
    let mut deep = json!({"S": "leaf"});
    for _ in 0..33 {
        deep = json!({"M": {"a": deep}});
    }
    check_err(
        put(&s, p(json!({"pk": {"S": "a"}, "d": deep}))).await,
        "ValidationException",
        "Nesting Levels",
    );
    put(
        &s,
        p(json!({"pk": {"S": "a"}, "big": {"S": "x".repeat(200 * 1024)}})),
    )
    .await
    .unwrap();
    check_err(
        update(&s, json!({"TableName": "tbl", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET big2 = big"})).await,
        "ValidationException",
        "Item size to update has exceeded",
    );
}

#[tokio::test]
async fn placeholder_map_rules() {
    let s = open_with_table(None).await;
    check_err(
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ExpressionAttributeValues": {":v": {"N": "1"}}}),
        )
        .await,
        "ValidationException",
        "ExpressionAttributeValues can only be specified when using expressions",
    );
    check_err(
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ExpressionAttributeNames": {"#n": "n"}})).await,
        "ValidationException",
        "ExpressionAttributeNames can only be specified when using expressions",
    );
    check_err(
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": {}}),
        )
        .await,
        "ValidationException",
        "ExpressionAttributeValues must not be empty",
    );
    check_err(
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": {":unused": {"N": "1"}}}),
        )
        .await,
        "ValidationException",
        "unused in expressions",
    );
    check_err(
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ConditionExpression": "v = :missing"})).await,
        "ValidationException",
        ":missing",
    );
    check_err(
        put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}, "ConditionExpression": "attribute_not_exists(pk)", "Expected": {}})).await,
        "ValidationException",
        "Can not use both expression and non-expression parameters",
    );
}

#[tokio::test]
async fn a_provisioned_table_shows_the_capacity_it_was_created_with() {
    let s = open();
    let d = s
        .create_table(create_req(json!({"BillingMode": "PROVISIONED",
            "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 7}})))
        .await
        .unwrap();
    assert_eq!(
        d.provisioned_throughput,
        Some(json!({"NumberOfDecreasesToday": 0, "ReadCapacityUnits": 5, "WriteCapacityUnits": 7}))
    );
    assert_eq!(d.billing_mode_summary, None);
}

fn arn(table: &str) -> String {
    format!("arn:aws:dynamodb:local:000000000000:table/{table}")
}

fn tag(k: &str, v: &str) -> postbox_store::api::Tag {
    postbox_store::api::Tag {
        key: k.into(),
        value: v.into(),
    }
}

#[tokio::test]
async fn tags_are_kept_replaced_removed_and_survive_reopen() {
    let s = open();
    s.create_table(create_req(
        json!({"Tags": [{"Key": "env", "Value": "test"}]}),
    ))
    .await
    .unwrap();
    s.tag_resource(&arn("tbl"), vec![tag("team", "a"), tag("env", "prod")])
        .await
        .unwrap();
    s.untag_resource(&arn("tbl"), vec!["team".into(), "never-there".into()])
        .await
        .unwrap();
    assert_eq!(
        s.list_tags_of_resource(&arn("tbl")).await.unwrap(),
        [tag("env", "prod")]
    );
    // Refused, changing nothing: a bad tag, too many, another table, no ARN.
    check_err(
        s.tag_resource(&arn("tbl"), vec![tag("ok", "v"), tag("aws:x", "v")])
            .await,
        "ValidationException",
        "reserved",
    );
    let many: Vec<_> = (0..50).map(|i| tag(&format!("k{i}"), "v")).collect();
    check_err(
        s.tag_resource(&arn("tbl"), many).await,
        "ValidationException",
        "would be 51, over the limit of 50",
    );
    check_err(
        s.list_tags_of_resource(&arn("nope")).await,
        "ResourceNotFoundException",
        "table/nope not found",
    );
    check_err(
        s.tag_resource("tbl", vec![tag("k", "v")]).await,
        "ValidationException",
        "ARNs must start with 'arn:'",
    );
    check_err(
        s.create_table(create_req(
            json!({"TableName": "other", "Tags": [{"Key": "", "Value": "v"}]}),
        ))
        .await,
        "ValidationException",
        "tags.1.member.key",
    );
    assert_eq!(s.list_tables().await.unwrap(), ["tbl"]);
    assert_eq!(
        s.list_tags_of_resource(&arn("tbl")).await.unwrap(),
        [tag("env", "prod")]
    );

    let path = s.dir.path().join("store.redb");
    let TestStore { store, clock, dir } = s;
    drop(store);
    let s = postbox_store::embedded::EmbeddedStore::open(&path, options(clock)).unwrap();
    assert_eq!(
        s.list_tags_of_resource(&arn("tbl")).await.unwrap(),
        [tag("env", "prod")]
    );
    drop(dir);
}

#[tokio::test]
async fn a_stream_enabled_later_records_from_then_and_a_disabled_one_is_gone() {
    use postbox_store::ChangeStreams;
    let s = open();
    s.create_table(create_req(json!({}))).await.unwrap();
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "before"}}}),
    )
    .await
    .unwrap();
    let update = |spec: Value| {
        req_of::<postbox_store::api::UpdateTableInput>(
            json!({"TableName": "tbl", "StreamSpecification": spec}),
        )
    };
    s.clock.advance_ms(5000);
    let d = s
        .update_table(update(
            json!({"StreamEnabled": true, "StreamViewType": "NEW_IMAGE"}),
        ))
        .await
        .unwrap();
    let label = d.latest_stream_label.clone().unwrap();
    assert_ne!(
        label,
        format!("{}", (d.creation_date_time * 1000.0) as u64),
        "a new stream, a new label"
    );
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "after"}}}),
    )
    .await
    .unwrap();
    let recs = s.read_stream("tbl", 0, 100).await.unwrap();
    assert_eq!(recs.len(), 1, "only the write after enabling: {recs:?}");
    let first_seq = recs[0].sequence_number;

    // Disabled: the stream and its records go; enabled again, a new
    // stream whose numbers go on from the old one's.
    s.update_table(update(json!({"StreamEnabled": false})))
        .await
        .unwrap();
    assert!(
        s.describe_table("tbl")
            .await
            .unwrap()
            .latest_stream_arn
            .is_none()
    );
    assert!(s.read_stream("tbl", 0, 100).await.is_err());
    s.clock.advance_ms(5000);
    s.update_table(update(
        json!({"StreamEnabled": true, "StreamViewType": "KEYS_ONLY"}),
    ))
    .await
    .unwrap();
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "again"}}}),
    )
    .await
    .unwrap();
    let recs = s.read_stream("tbl", 0, 100).await.unwrap();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(recs[0].sequence_number > first_seq);
    assert_ne!(
        s.describe_table("tbl").await.unwrap().latest_stream_label,
        Some(label)
    );
}

/// `change_count` moves with every commit that changes a table's items,
/// stays put for commits that change only other tables, and a table
/// deleted and created again starts at a number its earlier self never gave.
#[tokio::test]
async fn a_tables_change_count_moves_with_its_items_only() {
    let s = open();
    create(&s, "aaa", None, None).await;
    create(&s, "bbb", None, None).await;
    let a0 = s.change_count("aaa").expect("table a");
    put(&s, json!({"TableName": "bbb", "Item": {"pk": {"S": "x"}}}))
        .await
        .unwrap();
    assert_eq!(s.change_count("aaa"), Some(a0), "a write to bbb");
    put(&s, json!({"TableName": "aaa", "Item": {"pk": {"S": "x"}}}))
        .await
        .unwrap();
    let a1 = s.change_count("aaa").unwrap();
    assert_ne!(a1, a0, "a put");
    // A put that changes nothing commits nothing.
    put(&s, json!({"TableName": "aaa", "Item": {"pk": {"S": "x"}}}))
        .await
        .unwrap();
    assert_eq!(s.change_count("aaa"), Some(a1), "an identical put");
    delete(&s, json!({"TableName": "aaa", "Key": {"pk": {"S": "x"}}}))
        .await
        .unwrap();
    let a2 = s.change_count("aaa").unwrap();
    assert_ne!(a2, a1, "a delete");
    s.delete_table("aaa").await.unwrap();
    assert_eq!(s.change_count("aaa"), None, "no table");
    create(&s, "aaa", None, None).await;
    let again = s.change_count("aaa").unwrap();
    assert!(![a0, a1, a2].contains(&again), "{again} was given before");
}

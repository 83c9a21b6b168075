//! The wire protocols require AWS Signature Version 4 with a key Postbox
//! issued, and keep Postbox's own tables and queues out of reach: requests
//! built by hand (unsigned, signed with the wrong secret, tampered with,
//! skewed, replayed) against a served router, and the client's own signing.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use postbox_client::endpoint::sign;
use postbox_client::{Credentials, Endpoint, EndpointOptions, RemoteQueues, RemoteStore};
use postbox_queue::QueueClient;
use postbox_queue::{NewMessage, Queues};
use postbox_server::{AccessKey, WireAuth};
use postbox_store::ManualClock;
use postbox_store::api::*;
use postbox_store::embedded::EmbeddedStore;
use postbox_store::{ItemStore, StoreError};
use serde_json::{Value, json};

struct Server {
    url: String,
    store: EmbeddedStore,
    queues: Queues,
    key: AccessKey,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    fn credentials(&self) -> Credentials {
        Credentials::new(&self.key.id, &self.key.secret)
    }

    fn endpoint(&self, credentials: Option<Credentials>) -> Endpoint {
        Endpoint::with_options(
            &self.url,
            EndpointOptions {
                credentials,
                ..EndpointOptions::default()
            },
        )
        .unwrap()
    }
}

/// A router with SigV4 checking, an issued admin key, an `orders` table,
/// Postbox's events and tokens tables, and its events queue.
async fn server() -> Server {
    server_with(WireAuth::sigv4()).await
}

async fn server_with(auth: WireAuth) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(common::T0));
    let (store, queues) = common::open_at(&dir.path().join("served.redb"), clock).await;
    for table in ["orders", "postbox_events", "postbox_tokens"] {
        let keyed = if table == "orders" { "id" } else { "pk" };
        let mut input = CreateTableInput::keyed_by(table, keyed);
        if table == "postbox_events" {
            input = CreateTableInput {
                stream_specification: Some(StreamSpecification {
                    stream_enabled: true,
                    stream_view_type: Some(StreamViewType::NewImage),
                }),
                ..input
            };
        }
        store.create_table(input).await.unwrap();
    }
    queues
        .create_queue(
            "postbox-events.fifo",
            common::attrs(&[("FifoQueue", "true")]),
        )
        .await
        .unwrap();
    queues
        .create_queue("orders", Default::default())
        .await
        .unwrap();
    let key = postbox_server::create_access_key(&store, None)
        .await
        .unwrap();
    let (addr, stop, _task) = common::serve_with(store.clone(), queues.clone(), auth).await;
    Server {
        url: format!("http://{addr}"),
        store,
        queues,
        key,
        _dir: dir,
        _stop: stop,
    }
}

/// How a hand-made request is signed.
enum Signing {
    Unsigned,
    /// With this key pair, at this time.
    With(Credentials, SystemTime),
    /// Correctly, then its body is replaced.
    Tampered(Credentials, Vec<u8>),
}

fn request(url: &str, target: &str, body: &Value, signing: &Signing) -> Request<Full<Bytes>> {
    let bytes = Bytes::from(body.to_string());
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!("{url}/"))
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", target)
        .body(Full::new(bytes.clone()))
        .unwrap();
    match signing {
        Signing::Unsigned => {}
        Signing::With(c, at) => sign(&mut request, &bytes, c, "eu-west-3", target, *at).unwrap(),
        Signing::Tampered(c, other) => {
            sign(
                &mut request,
                &bytes,
                c,
                "us-east-1",
                target,
                SystemTime::now(),
            )
            .unwrap();
            *request.body_mut() = Full::new(Bytes::from(other.clone()));
        }
    }
    request
}

async fn send(request: Request<Full<Bytes>>) -> (u16, Value) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&body)
            .unwrap_or(Value::String(String::from_utf8_lossy(&body).into_owned())),
    )
}

async fn call(s: &Server, target: &str, body: Value, signing: Signing) -> (u16, Value) {
    send(request(&s.url, target, &body, &signing)).await
}

/// The error type's name, without its namespace.
fn code(answer: &(u16, Value)) -> &str {
    answer.1["__type"]
        .as_str()
        .and_then(|t| t.rsplit('#').next())
        .unwrap_or("")
}

fn now() -> SystemTime {
    SystemTime::now()
}

/// One request of every family, reads and writes, on ordinary resources.
fn families(s: &Server) -> Vec<(&'static str, Value)> {
    let queue_url = format!("{}/000000000000/orders", s.url);
    vec![
        ("DynamoDB_20120810.ListTables", json!({})),
        (
            "DynamoDB_20120810.PutItem",
            json!({"TableName": "orders", "Item": {"id": {"S": "forged"}}}),
        ),
        (
            "DynamoDB_20120810.GetItem",
            json!({"TableName": "orders", "Key": {"id": {"S": "forged"}}}),
        ),
        ("DynamoDBStreams_20120810.ListStreams", json!({})),
        ("AmazonSQS.ListQueues", json!({})),
        (
            "AmazonSQS.SendMessage",
            json!({"QueueUrl": queue_url, "MessageBody": "forged"}),
        ),
    ]
}

async fn nothing_was_written(s: &Server) {
    let got = s
        .store
        .get_item(GetItemInput {
            table_name: "orders".into(),
            key: common::req(json!({"id": {"S": "forged"}})),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(got.item.is_none(), "a refused PutItem wrote its item");
    let depth = s.queues.stats("orders").unwrap();
    assert_eq!(depth.visible, 0, "a refused SendMessage queued its message");
}

#[tokio::test]
async fn unsigned_requests_are_refused_in_every_family() {
    let s = server().await;
    for (target, body) in families(&s) {
        let answer = call(&s, target, body, Signing::Unsigned).await;
        assert_eq!(answer.0, 400, "{target}: {answer:?}");
        assert_eq!(
            code(&answer),
            "MissingAuthenticationTokenException",
            "{target}"
        );
        assert_eq!(
            answer.1["message"], "Request is missing Authentication Token",
            "{target}"
        );
    }
    nothing_was_written(&s).await;
}

#[tokio::test]
async fn unknown_keys_and_wrong_secrets_are_refused_in_every_family() {
    let s = server().await;
    let unknown = Credentials::new("AKIAAAAAAAAAAAAAAAAA", &s.key.secret);
    let wrong_secret = Credentials::new(&s.key.id, "x".repeat(40));
    for (target, body) in families(&s) {
        let answer = call(
            &s,
            target,
            body.clone(),
            Signing::With(unknown.clone(), now()),
        )
        .await;
        assert_eq!(answer.0, 400, "{target}: {answer:?}");
        assert_eq!(code(&answer), "UnrecognizedClientException", "{target}");
        assert_eq!(
            answer.1["message"],
            "The security token included in the request is invalid."
        );

        let answer = call(
            &s,
            target,
            body.clone(),
            Signing::With(wrong_secret.clone(), now()),
        )
        .await;
        assert_eq!(code(&answer), "InvalidSignatureException", "{target}");
        assert!(
            answer.1["message"]
                .as_str()
                .unwrap()
                .starts_with("The request signature we calculated does not match"),
            "{answer:?}"
        );

        // Signed correctly, then the body was swapped: the signature covers it.
        let answer = call(
            &s,
            target,
            body.clone(),
            Signing::Tampered(
                s.credentials(),
                br#"{"TableName":"orders","Item":{"id":{"S":"forged"}}}"#.to_vec(),
            ),
        )
        .await;
        assert_eq!(code(&answer), "InvalidSignatureException", "{target}");
    }
    nothing_was_written(&s).await;
}

#[tokio::test]
async fn correctly_signed_requests_work_in_every_family() {
    let s = server().await;
    for (target, body) in families(&s) {
        let answer = call(&s, target, body, Signing::With(s.credentials(), now())).await;
        assert_eq!(answer.0, 200, "{target}: {answer:?}");
    }
    let got = s
        .store
        .get_item(GetItemInput {
            table_name: "orders".into(),
            key: common::req(json!({"id": {"S": "forged"}})),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(got.item.is_some(), "the signed PutItem was applied");

    // The client signs every request, identical ones included.
    let endpoint = s.endpoint(Some(s.credentials()));
    let store = RemoteStore::new(endpoint.clone());
    for _ in 0..3 {
        let out = store
            .get_item(GetItemInput {
                table_name: "orders".into(),
                key: common::req(json!({"id": {"S": "forged"}})),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(out.item.is_some());
    }
    let queues = RemoteQueues::new(endpoint);
    queues
        .send("orders", NewMessage::new("hello"))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_unsigned_client_is_told_it_needs_a_key() {
    let s = server().await;
    let err = RemoteStore::new(s.endpoint(None))
        .list_tables()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Validation(m) if m.contains("MissingAuthenticationToken")),
        "{err:?}"
    );
}

#[tokio::test]
async fn skewed_dates_are_refused() {
    let s = server().await;
    let target = "DynamoDB_20120810.ListTables";
    let past = now() - Duration::from_secs(6 * 60);
    let answer = call(&s, target, json!({}), Signing::With(s.credentials(), past)).await;
    assert_eq!(code(&answer), "InvalidSignatureException");
    let message = answer.1["message"].as_str().unwrap();
    assert!(
        message.starts_with("Signature expired: ") && message.ends_with(" - 5 min.)"),
        "{message}"
    );
    let future = now() + Duration::from_secs(6 * 60);
    let answer = call(
        &s,
        target,
        json!({}),
        Signing::With(s.credentials(), future),
    )
    .await;
    assert_eq!(code(&answer), "InvalidSignatureException");
    assert!(
        answer.1["message"]
            .as_str()
            .unwrap()
            .starts_with("Signature not yet current: "),
        "{answer:?}"
    );
    // Within the window either way is fine.
    let slightly = now() - Duration::from_secs(4 * 60);
    let answer = call(
        &s,
        target,
        json!({}),
        Signing::With(s.credentials(), slightly),
    )
    .await;
    assert_eq!(answer.0, 200, "{answer:?}");
}

/// Sends one signed request twice, byte for byte; both answers.
async fn sent_twice(s: &Server, target: &str, body: Value) -> ((u16, Value), (u16, Value)) {
    let signed = request(
        &s.url,
        target,
        &body,
        &Signing::With(s.credentials(), now()),
    );
    let (parts, full) = signed.into_parts();
    let again = Request::from_parts(parts.clone(), full.clone());
    let first = send(Request::from_parts(parts, full)).await;
    (first, send(again).await)
}

#[tokio::test]
async fn a_replayed_request_is_refused() {
    let s = server().await;
    let body = json!({"TableName": "orders", "Item": {"id": {"S": "once"}, "n": {"N": "1"}}});
    let (first, replay) = sent_twice(&s, "DynamoDB_20120810.PutItem", body).await;
    assert_eq!(first.0, 200, "{first:?}");
    assert_eq!(replay.0, 400);
    assert_eq!(code(&replay), "InvalidSignatureException", "{replay:?}");
    assert!(
        replay.1["message"].as_str().unwrap().contains("replay"),
        "{replay:?}"
    );
}

#[tokio::test]
async fn on_a_private_channel_a_repeated_write_is_accepted_as_aws_accepts_it() {
    // What `serve` uses on loopback or TLS: boto3's retry within the same
    // second is the identical signed request, and must not fail.
    let s = server_with(WireAuth::sigv4_accepting_repeats()).await;
    let body = json!({"TableName": "orders", "Item": {"id": {"S": "twice"}, "n": {"N": "1"}}});
    let (first, again) = sent_twice(&s, "DynamoDB_20120810.PutItem", body).await;
    assert_eq!((first.0, again.0), (200, 200), "{first:?} {again:?}");
    // A bad signature is still refused.
    let bad = send(request(
        &s.url,
        "DynamoDB_20120810.PutItem",
        &json!({"TableName": "orders", "Item": {"id": {"S": "x"}}}),
        &Signing::Tampered(s.credentials(), b"{}".to_vec()),
    ))
    .await;
    assert_eq!(code(&bad), "InvalidSignatureException", "{bad:?}");
}

#[tokio::test]
async fn an_identical_read_may_repeat_as_stock_clients_poll() {
    let s = server().await;
    let body = json!({"TableName": "orders", "Key": {"id": {"S": "none"}}});
    let (first, repeated) = sent_twice(&s, "DynamoDB_20120810.GetItem", body).await;
    assert_eq!(first.0, 200, "{first:?}");
    assert_eq!(repeated.0, 200, "{repeated:?}");
}

#[tokio::test]
async fn postbox_tables_and_queues_are_refused_even_to_an_admin_key() {
    let s = server().await;
    let admin = || Signing::With(s.credentials(), now());
    let events_url = format!("{}/000000000000/postbox-events.fifo", s.url);
    let refused = [
        (
            "DynamoDB_20120810.PutItem",
            json!({"TableName": "postbox_tokens", "Item": {"pk": {"S": "admin#forged"}, "role": {"S": "admin"}}}),
        ),
        (
            "DynamoDB_20120810.Scan",
            json!({"TableName": "postbox_tokens"}),
        ),
        (
            "DynamoDB_20120810.GetItem",
            json!({"TableName": "postbox_access_keys", "Key": {"key_id": {"S": s.key.id}}}),
        ),
        (
            "DynamoDB_20120810.PutItem",
            json!({"TableName": "postbox_events", "Item": {"pk": {"S": "TENANT#acme#EVENTS"}, "sk": {"S": "00000000000000000001"}}}),
        ),
        (
            "DynamoDB_20120810.UpdateItem",
            json!({"TableName": "postbox_events", "Key": {"pk": {"S": "TENANT#acme#EVENTS"}}, "UpdateExpression": "SET x = :x", "ExpressionAttributeValues": {":x": {"S": "y"}}}),
        ),
        (
            "DynamoDB_20120810.TransactWriteItems",
            json!({"TransactItems": [{"Put": {"TableName": "orders", "Item": {"id": {"S": "forged"}}}}, {"Delete": {"TableName": "postbox_events", "Key": {"pk": {"S": "TENANT#acme#HEAD"}}}}]}),
        ),
        (
            "DynamoDB_20120810.BatchWriteItem",
            json!({"RequestItems": {"postbox_tokens": [{"PutRequest": {"Item": {"pk": {"S": "x"}}}}]}}),
        ),
        (
            "DynamoDB_20120810.DeleteTable",
            json!({"TableName": "postbox_events"}),
        ),
        (
            "DynamoDB_20120810.CreateTable",
            json!({"TableName": "postbox_shadow", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}], "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}], "BillingMode": "PAY_PER_REQUEST"}),
        ),
        (
            "AmazonSQS.SendMessage",
            json!({"QueueUrl": events_url, "MessageBody": "{}", "MessageGroupId": "acme", "MessageDeduplicationId": "forged"}),
        ),
        (
            "AmazonSQS.SendMessageBatch",
            json!({"QueueUrl": events_url, "Entries": [{"Id": "1", "MessageBody": "{}", "MessageGroupId": "acme", "MessageDeduplicationId": "forged"}]}),
        ),
        ("AmazonSQS.PurgeQueue", json!({"QueueUrl": events_url})),
        ("AmazonSQS.DeleteQueue", json!({"QueueUrl": events_url})),
    ];
    for (target, body) in refused {
        let answer = call(&s, target, body, admin()).await;
        assert_eq!(answer.0, 400, "{target}: {answer:?}");
        assert_eq!(
            code(&answer),
            "AccessDeniedException",
            "{target}: {answer:?}"
        );
    }
    // Nothing changed.
    let tokens = s
        .store
        .scan(ScanInput {
            table_name: "postbox_tokens".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(tokens.items.unwrap_or_default().len(), 0);
    assert!(s.store.describe_table("postbox_events").await.is_ok());
    assert!(s.store.describe_table("postbox_shadow").await.is_err());
    assert_eq!(s.queues.stats("postbox-events.fifo").unwrap().visible, 0);
    nothing_was_written(&s).await;

    // What the admin key may do: read events, see them listed, and receive
    // from the events queue; the hidden tables are not listed.
    let answer = call(
        &s,
        "DynamoDB_20120810.Query",
        json!({"TableName": "postbox_events", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "TENANT#acme#EVENTS"}}}),
        admin(),
    )
    .await;
    assert_eq!(answer.0, 200, "{answer:?}");
    let answer = call(&s, "DynamoDB_20120810.ListTables", json!({}), admin()).await;
    assert_eq!(
        answer.1["TableNames"],
        json!(["orders", "postbox_events"]),
        "{answer:?}"
    );
    let answer = call(
        &s,
        "DynamoDBStreams_20120810.ListStreams",
        json!({}),
        admin(),
    )
    .await;
    assert_eq!(answer.0, 200, "{answer:?}");
    let answer = call(
        &s,
        "AmazonSQS.ReceiveMessage",
        json!({"QueueUrl": events_url}),
        admin(),
    )
    .await;
    assert_eq!(answer.0, 200, "{answer:?}");
}

#[tokio::test]
async fn the_streams_of_hidden_tables_are_refused_and_unlisted() {
    use base64::Engine as _;
    let s = server().await;
    let admin = || Signing::With(s.credentials(), now());
    // postbox_events has a stream the admin key may read.
    let streams = call(
        &s,
        "DynamoDBStreams_20120810.ListStreams",
        json!({}),
        admin(),
    )
    .await;
    let listed: Vec<&str> = streams.1["Streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["TableName"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["postbox_events"], "{streams:?}");
    let arn = streams.1["Streams"][0]["StreamArn"]
        .as_str()
        .unwrap()
        .to_owned();
    let described = call(
        &s,
        "DynamoDBStreams_20120810.DescribeStream",
        json!({"StreamArn": arn}),
        admin(),
    )
    .await;
    assert_eq!(described.0, 200, "{described:?}");
    // A hidden table's stream, named by ARN or by a forged iterator.
    let forged_arn = arn.replace("postbox_events", "postbox_tokens");
    for (target, body) in [
        (
            "DynamoDBStreams_20120810.DescribeStream",
            json!({"StreamArn": forged_arn}),
        ),
        (
            "DynamoDBStreams_20120810.GetShardIterator",
            json!({"StreamArn": forged_arn, "ShardId": "shardId-00000000000000000000-00000000", "ShardIteratorType": "TRIM_HORIZON"}),
        ),
        (
            "DynamoDBStreams_20120810.GetRecords",
            json!({"ShardIterator": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("0|postbox_tokens")}),
        ),
        (
            "DynamoDBStreams_20120810.ListStreams",
            json!({"TableName": "postbox_access_keys"}),
        ),
    ] {
        let answer = call(&s, target, body, admin()).await;
        assert_eq!(
            code(&answer),
            "AccessDeniedException",
            "{target}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn a_signature_for_the_wrong_service_is_refused() {
    let s = server().await;
    // Signed as `dynamodb` but sent to SQS: the scope must say `sqs`.
    let body = json!({});
    let bytes = Bytes::from(body.to_string());
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/", s.url))
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .body(Full::new(bytes.clone()))
        .unwrap();
    // Sign as if for a DynamoDB target, then point the request at SQS.
    sign(
        &mut req,
        &bytes,
        &s.credentials(),
        "us-east-1",
        "DynamoDB_20120810.ListTables",
        now(),
    )
    .unwrap();
    let answer = send(req).await;
    assert_eq!(code(&answer), "InvalidSignatureException", "{answer:?}");
}

#[tokio::test]
async fn malformed_authorization_headers_are_refused_without_effect() {
    let s = server().await;
    let date = postbox_amz_date(now());
    let scope = format!(
        "{}/{}/us-east-1/dynamodb/aws4_request",
        s.key.id,
        &date[..8]
    );
    let sig = "0".repeat(64);
    let cases = [
        ("Bearer abc".to_owned(), "IncompleteSignatureException"),
        (
            format!("AWS4-HMAC-SHA256 Credential={scope}, Signature={sig}"),
            "IncompleteSignatureException",
        ),
        (
            // The host is not signed.
            format!(
                "AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=x-amz-date;x-amz-target, Signature={sig}"
            ),
            "IncompleteSignatureException",
        ),
        (
            // A header name no request can carry.
            format!(
                "AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=bad name;host;x-amz-date;x-amz-target, Signature={sig}"
            ),
            "InvalidSignatureException",
        ),
        (
            format!(
                "AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host;x-amz-date;x-amz-target, Signature={sig}"
            ),
            "InvalidSignatureException",
        ),
    ];
    for (authorization, expected) in cases {
        let body = json!({"TableName": "orders", "Item": {"id": {"S": "forged"}}});
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/", s.url))
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", "DynamoDB_20120810.PutItem")
            .header("x-amz-date", &date)
            .header("authorization", &authorization)
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let answer = send(req).await;
        assert_eq!(answer.0, 400, "{authorization}: {answer:?}");
        assert_eq!(code(&answer), expected, "{authorization}: {answer:?}");
    }
    nothing_was_written(&s).await;
}

/// `YYYYMMDDTHHMMSSZ` of `t`.
fn postbox_amz_date(t: SystemTime) -> String {
    postbox_server::auth::format_amz_date(
        t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
    )
}

#[tokio::test]
async fn a_body_over_16_mb_is_refused_in_the_protocols_json_shape() {
    let s = server().await;
    let item = json!({"id": {"S": "big"}, "blob": {"S": "x".repeat(17 << 20)}});
    let body = json!({"TableName": "orders", "Item": item});
    let answer = send(request(
        &s.url,
        "DynamoDB_20120810.PutItem",
        &body,
        &Signing::Unsigned,
    ))
    .await;
    assert_eq!(
        answer.0,
        413,
        "{:?}",
        answer.1.to_string().chars().take(200).collect::<String>()
    );
    assert_eq!(code(&answer), "RequestEntityTooLarge", "{}", answer.1);
}

#[tokio::test]
async fn a_tenant_key_reaches_its_own_items_and_nothing_else() {
    let s = server().await;
    s.store
        .create_table(CreateTableInput::keyed_by("shop", "pk"))
        .await
        .unwrap();
    let admin = || Signing::With(s.credentials(), now());
    let put = |pk: &str| json!({"TableName": "shop", "Item": {"pk": {"S": pk}, "n": {"N": "1"}}});
    let key = |pk: &str| json!({"TableName": "shop", "Key": {"pk": {"S": pk}}});
    assert_eq!(
        call(&s, "DynamoDB_20120810.PutItem", put("globex#1"), admin())
            .await
            .0,
        200
    );
    let acme = postbox_server::create_access_key(&s.store, Some("acme"))
        .await
        .unwrap();
    let tenant = || Signing::With(Credentials::new(&acme.id, &acme.secret), now());

    // Its own items, in every form.
    let allowed = [
        ("DynamoDB_20120810.PutItem", put("acme#1")),
        ("DynamoDB_20120810.GetItem", key("acme#1")),
        (
            "DynamoDB_20120810.UpdateItem",
            json!({"TableName": "shop", "Key": {"pk": {"S": "acme#1"}}, "UpdateExpression": "SET n = n + :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}),
        ),
        (
            "DynamoDB_20120810.Query",
            json!({"TableName": "shop", "KeyConditionExpression": "#p = :p", "ExpressionAttributeNames": {"#p": "pk"}, "ExpressionAttributeValues": {":p": {"S": "acme#1"}}}),
        ),
        (
            "DynamoDB_20120810.BatchWriteItem",
            json!({"RequestItems": {"shop": [{"PutRequest": {"Item": {"pk": {"S": "acme#2"}}}}]}}),
        ),
        (
            "DynamoDB_20120810.TransactWriteItems",
            json!({"TransactItems": [{"Put": {"TableName": "shop", "Item": {"pk": {"S": "acme#3"}}}}]}),
        ),
        (
            "DynamoDB_20120810.PutItem",
            json!({"TableName": "orders", "Item": {"id": {"S": "acme#o1"}}}),
        ),
        (
            "DynamoDB_20120810.DescribeTable",
            json!({"TableName": "shop"}),
        ),
        ("DynamoDB_20120810.ListTables", json!({})),
    ];
    for (target, body) in allowed {
        let a = call(&s, target, body.clone(), tenant()).await;
        assert_eq!(a.0, 200, "{target} {body}: {:?}", a.1);
    }

    // Anything else, with nothing applied.
    let refused = [
        ("DynamoDB_20120810.GetItem", key("globex#1")),
        ("DynamoDB_20120810.PutItem", put("globex#2")),
        ("DynamoDB_20120810.PutItem", put("acmeco#1")),
        ("DynamoDB_20120810.DeleteItem", key("globex#1")),
        (
            "DynamoDB_20120810.Query",
            json!({"TableName": "shop", "Select": "COUNT", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "globex#1"}}}),
        ),
        (
            "DynamoDB_20120810.BatchGetItem",
            json!({"RequestItems": {"shop": {"Keys": [{"pk": {"S": "acme#1"}}, {"pk": {"S": "globex#1"}}]}}}),
        ),
        (
            "DynamoDB_20120810.TransactWriteItems",
            json!({"TransactItems": [
                {"Put": {"TableName": "shop", "Item": {"pk": {"S": "acme#4"}}}},
                {"Delete": {"TableName": "shop", "Key": {"pk": {"S": "globex#1"}}}}
            ]}),
        ),
        (
            "DynamoDB_20120810.PutItem",
            json!({"TableName": "orders", "Item": {"id": {"S": "o1"}}}),
        ),
        ("DynamoDB_20120810.Scan", json!({"TableName": "shop"})),
        (
            "DynamoDB_20120810.DeleteTable",
            json!({"TableName": "shop"}),
        ),
        (
            "DynamoDB_20120810.PutItem",
            json!({"TableName": "postbox_events", "Item": {"pk": {"S": "acme#x"}}}),
        ),
        ("DynamoDBStreams_20120810.ListStreams", json!({})),
        ("AmazonSQS.ListQueues", json!({})),
    ];
    for (target, body) in refused {
        let a = call(&s, target, body.clone(), tenant()).await;
        assert_eq!(
            (a.0, code(&a)),
            (400, "AccessDeniedException"),
            "{target} {body}: {:?}",
            a.1
        );
    }
    let get = |pk: &str| GetItemInput {
        table_name: "shop".into(),
        key: postbox_item::Item::from([("pk".to_owned(), postbox_item::AttributeValue::s(pk))]),
        ..Default::default()
    };
    assert!(
        s.store
            .get_item(get("globex#1"))
            .await
            .unwrap()
            .item
            .is_some()
    );
    assert!(
        s.store
            .get_item(get("globex#2"))
            .await
            .unwrap()
            .item
            .is_none()
    );
    assert!(
        s.store
            .get_item(get("acme#4"))
            .await
            .unwrap()
            .item
            .is_none(),
        "a refused transaction applied nothing"
    );
    assert!(
        s.store
            .get_item(get("acme#3"))
            .await
            .unwrap()
            .item
            .is_some()
    );
}

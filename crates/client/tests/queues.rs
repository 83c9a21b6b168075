//! RemoteQueues against the embedded queues: the same FIFO scenario is run
//! over the wire and directly, on the same manual clock, and what each
//! consumer sees (bodies, groups, receive counts, errors) must be the same.
//! Message ids and receipt handles are random and left out of the
//! comparison.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Pair, attrs, pair};
use postbox_client::{Endpoint, EndpointOptions, RemoteQueues};
use postbox_queue::{
    MessageAttributeValue, NewMessage, QueueClient, QueueError, ReceiveOptions, ReceivedMessage,
};

const FIFO: &str = "events.fifo";

async fn with_fifo() -> Pair {
    let p = pair().await;
    let a = attrs(&[
        ("FifoQueue", "true"),
        ("VisibilityTimeout", "30"),
        ("ReceiveMessageWaitTimeSeconds", "0"),
    ]);
    p.served_queues.create_queue(FIFO, a.clone()).await.unwrap();
    p.direct_queues.create_queue(FIFO, a).await.unwrap();
    p
}

fn message(group: &str, n: u32) -> NewMessage {
    let mut attributes = BTreeMap::new();
    attributes.insert(
        "kind".to_owned(),
        MessageAttributeValue {
            data_type: "String".into(),
            string_value: Some("test".into()),
            binary_value: None,
        },
    );
    attributes.insert(
        "raw".to_owned(),
        MessageAttributeValue {
            data_type: "Binary".into(),
            string_value: None,
            binary_value: Some(vec![0, 1, 2, n as u8]),
        },
    );
    NewMessage {
        body: format!("{group}-{n}"),
        group_id: Some(group.to_owned()),
        deduplication_id: Some(format!("{group}-{n}")),
        trace_header: (n == 0).then(|| "Root=1-abc".to_owned()),
        attributes,
        ..NewMessage::default()
    }
}

/// What a consumer sees of a message, without the random ids.
fn seen(m: &ReceivedMessage) -> String {
    format!("{} {:?} {:?}", m.body, m.attributes, m.system)
}

fn receive(max: i64) -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(max),
        wait_time_seconds: Some(0),
        ..ReceiveOptions::default()
    }
}

/// Runs one call on both sides and returns (remote, direct).
macro_rules! both {
    ($p:expr, $method:ident ( $($arg:expr),* )) => {{
        let remote = QueueClient::$method(&$p.remote_queues, $($arg.clone()),*).await;
        let direct = QueueClient::$method(&$p.direct_queues, $($arg),*).await;
        (remote, direct)
    }};
}

#[tokio::test]
async fn fifo_send_receive_delete_change_visibility() {
    let p = with_fifo().await;
    let batch: Vec<NewMessage> = (0..3)
        .flat_map(|n| [message("t1", n), message("t2", n)])
        .collect();
    let (remote, direct) = both!(p, send_batch(FIFO, batch));
    let (remote, direct) = (remote.unwrap(), direct.unwrap());
    assert_eq!(remote.len(), 6);
    for (r, d) in remote.iter().zip(&direct) {
        let (r, d) = (r.as_ref().unwrap(), d.as_ref().unwrap());
        assert_eq!(r.md5_of_body, d.md5_of_body);
        assert_eq!(r.md5_of_attributes, d.md5_of_attributes);
        assert_eq!(r.md5_of_system_attributes, d.md5_of_system_attributes);
        assert_eq!(r.sequence_number.is_some(), d.sequence_number.is_some());
    }
    // A duplicate is answered with the original's id.
    let (r, d) = both!(p, send(FIFO, message("t1", 0)));
    assert_eq!(
        r.unwrap().message_id,
        remote[0].as_ref().unwrap().message_id
    );
    d.unwrap();

    // The head of each group, in group order; nothing more while in flight.
    let (r, d) = both!(p, receive(FIFO, receive(10)));
    let (r, d) = (r.unwrap(), d.unwrap());
    let view = |ms: &[ReceivedMessage]| ms.iter().map(seen).collect::<Vec<_>>();
    assert_eq!(view(&r), view(&d));
    assert_eq!(
        r.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        ["t1-0", "t1-1", "t1-2", "t2-0", "t2-1", "t2-2"]
    );
    assert_eq!(r[0].system["ApproximateReceiveCount"], "1");
    assert_eq!(r[0].system["MessageGroupId"], "t1");
    let (r2, d2) = both!(p, receive(FIFO, receive(10)));
    assert!(r2.unwrap().is_empty() && d2.unwrap().is_empty());

    // Delete t1's messages; make t2's visible again at once.
    let handles = |ms: &[ReceivedMessage], group: &str| -> Vec<String> {
        ms.iter()
            .filter(|m| m.body.starts_with(group))
            .map(|m| m.receipt_handle.clone())
            .collect()
    };
    let remote_deleted = p
        .remote_queues
        .delete_batch(FIFO, handles(&r, "t1"))
        .await
        .unwrap();
    let direct_deleted = p
        .direct_queues
        .delete_batch(FIFO, handles(&d, "t1"))
        .await
        .unwrap();
    assert_eq!(remote_deleted, direct_deleted);
    assert!(remote_deleted.iter().all(Result::is_ok));
    let zero = |hs: Vec<String>| hs.into_iter().map(|h| (h, 0)).collect::<Vec<_>>();
    let rv = p
        .remote_queues
        .change_visibility_batch(FIFO, zero(handles(&r, "t2")))
        .await
        .unwrap();
    let dv = p
        .direct_queues
        .change_visibility_batch(FIFO, zero(handles(&d, "t2")))
        .await
        .unwrap();
    assert_eq!(rv, dv);
    let (r3, d3) = both!(p, receive(FIFO, receive(10)));
    let (r3, d3) = (r3.unwrap(), d3.unwrap());
    assert_eq!(view(&r3), view(&d3));
    assert_eq!(r3.len(), 3);
    assert_eq!(r3[0].system["ApproximateReceiveCount"], "2");

    // A stale handle fails alike, entry by entry.
    let stale = handles(&r, "t2")[0].clone();
    let re = p
        .remote_queues
        .change_visibility(FIFO, &stale, 10)
        .await
        .unwrap_err();
    let de = p
        .direct_queues
        .change_visibility(FIFO, &handles(&d, "t2")[0], 10)
        .await
        .unwrap_err();
    // The messages name the (different) handles.
    assert_eq!(re.code(), de.code());
    assert_eq!(
        re.to_string(),
        de.to_string().replace(&handles(&d, "t2")[0], &stale)
    );
    // A deleted message's handle.
    let gone = handles(&r, "t1")[0].clone();
    let re = p.remote_queues.change_visibility(FIFO, &gone, 10).await;
    let de = p
        .direct_queues
        .change_visibility(FIFO, &handles(&d, "t1")[0], 10)
        .await;
    assert_eq!(re.map_err(|e| e.code()), de.map_err(|e| e.code()));

    // One delete of each remaining message.
    for m in &r3 {
        p.remote_queues
            .delete(FIFO, &m.receipt_handle)
            .await
            .unwrap();
    }
    let names = vec!["All".to_owned()];
    let ra = p
        .remote_queues
        .queue_attributes(FIFO, &names)
        .await
        .unwrap();
    assert_eq!(ra["ApproximateNumberOfMessages"], "0");
    assert_eq!(ra["ApproximateNumberOfMessagesNotVisible"], "0");
    assert_eq!(ra["FifoQueue"], "true");
}

#[tokio::test]
async fn errors_come_back_as_the_same_variants() {
    let p = with_fifo().await;
    let (r, d) = both!(p, send("missing.fifo", message("t", 1)));
    assert_eq!(r.unwrap_err(), QueueError::QueueDoesNotExist);
    assert_eq!(d.unwrap_err(), QueueError::QueueDoesNotExist);
    let (r, d) = both!(p, receive("missing", receive(1)));
    assert_eq!(r.unwrap_err(), d.unwrap_err());
    let names = vec!["NoSuchAttribute".to_owned()];
    let (r, d) = both!(p, queue_attributes(FIFO, names.as_slice()));
    assert_eq!(r.unwrap_err(), d.unwrap_err());

    // Per-entry failures: a FIFO message without its group.
    let mut no_group = message("t", 1);
    no_group.group_id = None;
    let batch = vec![message("t", 2), no_group];
    let (r, d) = both!(p, send_batch(FIFO, batch));
    let (r, d) = (r.unwrap(), d.unwrap());
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err(), d[1].as_ref().unwrap_err());

    // SQS's batch limit is the server's: the embedded API takes more.
    let batch: Vec<NewMessage> = (0..11).map(|n| message("t", n)).collect();
    let r = p.remote_queues.send_batch(FIFO, batch).await;
    assert_eq!(r.unwrap_err(), QueueError::TooManyEntriesInBatchRequest(11));

    let (r, d) = both!(p, delete(FIFO, "not-a-handle"));
    assert_eq!(r.unwrap_err(), d.unwrap_err());
}

#[tokio::test]
async fn a_queue_created_after_a_miss_is_found() {
    let p = pair().await;
    let err = p
        .remote_queues
        .receive("late", receive(1))
        .await
        .unwrap_err();
    assert_eq!(err, QueueError::QueueDoesNotExist);
    p.served_queues
        .create_queue("late", BTreeMap::new())
        .await
        .unwrap();
    p.remote_queues
        .send("late", NewMessage::new("hello"))
        .await
        .unwrap();
    let got = p.remote_queues.receive("late", receive(1)).await.unwrap();
    assert_eq!(got[0].body, "hello");
    // Deleted and created again: the cached URL still names it.
    p.served_queues.delete_queue("late").await.unwrap();
    let err = p.remote_queues.send("late", NewMessage::new("x")).await;
    assert_eq!(err.unwrap_err(), QueueError::QueueDoesNotExist);
    p.served_queues
        .create_queue("late", BTreeMap::new())
        .await
        .unwrap();
    p.remote_queues
        .send("late", NewMessage::new("again"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_long_poll_waits_past_the_request_timeout() {
    let p = with_fifo().await;
    // A deadline much shorter than the poll: the poll's own wait is added.
    let endpoint = Endpoint::with_options(
        &format!("http://{}", p.addr),
        EndpointOptions {
            timeout: Duration::from_millis(300),
            credentials: Some(p.credentials.clone()),
            ..EndpointOptions::default()
        },
    )
    .unwrap();
    let queues = RemoteQueues::new(endpoint);
    let sender = p.served_queues.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        sender.send(FIFO, message("late", 1)).await.unwrap();
    });
    let got = queues
        .receive(
            FIFO,
            ReceiveOptions {
                max_messages: Some(1),
                wait_time_seconds: Some(5),
                ..ReceiveOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
}

//! A receive answered before its sync (`ReceiveOptions::answer_before_sync`)
//! still waits for the commits its messages' senders could have read: a
//! sender inside a write operation (the relay, enqueueing stream records it
//! read before their sync) is logged after them, but its consumer acts
//! outside the store, so it must not see a message whose cause a crash
//! could take back. It does not wait for its own sync, nor the send's.
//!
//! The commit log's syncs are held with a fault point (`store::group_sync`),
//! which is process-wide: this file has one test and a process of its own.

mod common;

use std::time::Duration;

use postbox_queue::{NewMessage, Queues, QueuesOptions, ReceiveOptions};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::faults::{self, Action};

fn early() -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(10),
        wait_time_seconds: Some(0),
        answer_before_sync: true,
        ..Default::default()
    }
}

/// Enqueues `body` into `q` inside a write operation answered at its commit.
async fn send_in(store: &EmbeddedStore, queues: &Queues, body: &str) {
    let (queues, body) = (queues.clone(), body.to_owned());
    store
        .submit_unsynced(move |ctx| {
            let sent = queues.send_in(ctx, "q", vec![NewMessage::new(body)])?;
            assert!(sent.is_ok(), "{sent:?}");
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_early_receive_waits_for_what_its_messages_were_sent_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("q.redb"), EmbeddedOptions::default()).unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    for q in ["q", "cause"] {
        queues.create_queue(q, common::attrs(&[])).await.unwrap();
    }

    faults::arm(faults::GROUP_SYNC, Action::Hold);
    // A commit whose sync is held (standing for the event the relay read),
    // then a send made after it.
    let commits = store.writer_stats().commits;
    let cause = {
        let queues = queues.clone();
        tokio::spawn(async move { queues.send("cause", NewMessage::new("c")).await })
    };
    while store.writer_stats().commits == commits {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    send_in(&store, &queues, "m1").await;
    let receive = {
        let queues = queues.clone();
        tokio::spawn(async move { queues.receive("q", early()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received_while_held = receive.is_finished();
    faults::disarm(faults::GROUP_SYNC);

    assert!(
        !received_while_held,
        "a message was handed out before the commit it was sent after was synced"
    );
    assert_eq!(common::bodies(&receive.await.unwrap().unwrap()), ["m1"]);
    cause.await.unwrap().unwrap();
    store.wait_synced().await.unwrap();

    // Everything before the send is synced: the receive is answered while
    // its own sync, and the send's, are held.
    faults::arm(faults::GROUP_SYNC, Action::Hold);
    send_in(&store, &queues, "m2").await;
    let receive = {
        let queues = queues.clone();
        tokio::spawn(async move { queues.receive("q", early()).await })
    };
    let mut answered_while_held = false;
    for _ in 0..1000 {
        if receive.is_finished() {
            answered_while_held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    faults::disarm(faults::GROUP_SYNC);
    assert!(
        answered_while_held,
        "the receive waited for its own sync or the send's"
    );
    assert_eq!(common::bodies(&receive.await.unwrap().unwrap()), ["m2"]);
}

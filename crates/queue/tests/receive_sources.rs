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
use postbox_store::faults;

fn early() -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(10),
        wait_time_seconds: Some(0),
        answer_before_sync: true,
        ..Default::default()
    }
}

/// Enqueues `body` into `queue` inside a write operation answered at its
/// commit.
async fn send_in(store: &EmbeddedStore, queues: &Queues, queue: &str, body: &str) {
    let (queues, queue, body) = (queues.clone(), queue.to_owned(), body.to_owned());
    store
        .submit_unsynced(move |ctx| {
            let sent = queues.send_in(ctx, &queue, vec![NewMessage::new(body)])?;
            assert!(sent.is_ok(), "{sent:?}");
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_early_receive_waits_for_what_its_messages_were_sent_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        dir.path().join("q.redb"),
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    for q in ["q", "cause", "parked"] {
        queues.create_queue(q, common::attrs(&[])).await.unwrap();
    }

    let held = faults::hold(faults::GROUP_SYNC);
    // A commit whose sync is held (standing for the event the relay read),
    // then a send made after it.
    let cause = send_unsynced_cause(&store, &queues, "c").await;
    send_in(&store, &queues, "q", "m1").await;
    let (receive, received_while_held) = early_receive_from_q(&queues).await;
    drop(held);

    assert!(
        !received_while_held,
        "a message was handed out before the commit it was sent after was synced"
    );
    assert_eq!(common::bodies(&receive.await.unwrap().unwrap()), ["m1"]);
    cause.await.unwrap().unwrap();
    store.wait_synced().await.unwrap();

    // Everything before the send is synced: the receive is answered while
    // its own sync, and the send's, are held.
    let held = faults::hold(faults::GROUP_SYNC);
    send_in(&store, &queues, "q", "m2").await;
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
    drop(held);
    assert!(
        answered_while_held,
        "the receive waited for its own sync or the send's"
    );
    assert_eq!(common::bodies(&receive.await.unwrap().unwrap()), ["m2"]);

    // A message moved to another queue keeps what it was sent after.
    store.wait_synced().await.unwrap();
    let held = faults::hold(faults::GROUP_SYNC);
    let cause = send_unsynced_cause(&store, &queues, "c2").await;
    send_in(&store, &queues, "parked", "m3").await;
    let moved = {
        let queues = queues.clone();
        tokio::spawn(async move { queues.move_messages("parked", Some("q"), None).await })
    };
    for _ in 0..1000 {
        if queues.stats("q").unwrap().visible == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let moved_while_held = queues.stats("q").unwrap().visible == 1;
    let (receive, received_while_held) = early_receive_from_q(&queues).await;
    drop(held);
    assert!(moved_while_held, "the move did not commit");
    assert!(
        !received_while_held,
        "a moved message was handed out before the commit it was sent after was synced"
    );
    assert_eq!(common::bodies(&receive.await.unwrap().unwrap()), ["m3"]);
    assert_eq!(moved.await.unwrap().unwrap(), 1);
    cause.await.unwrap().unwrap();
}

/// Sends `body` to queue `cause` and returns once its commit is made; the
/// task answers when the commit is synced.
async fn send_unsynced_cause(
    store: &EmbeddedStore,
    queues: &Queues,
    body: &str,
) -> tokio::task::JoinHandle<postbox_queue::QueueResult<postbox_queue::SendResult>> {
    let commits = store.writer_stats().commits;
    let cause = {
        let (queues, body) = (queues.clone(), body.to_owned());
        tokio::spawn(async move { queues.send("cause", NewMessage::new(body)).await })
    };
    for _ in 0..1000 {
        if store.writer_stats().commits > commits {
            return cause;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the send to cause never committed");
}

/// Starts an early receive from `q` and says, 300 ms later, whether it has
/// answered.
async fn early_receive_from_q(
    queues: &Queues,
) -> (
    tokio::task::JoinHandle<postbox_queue::QueueResult<Vec<postbox_queue::ReceivedMessage>>>,
    bool,
) {
    let receive = {
        let queues = queues.clone();
        tokio::spawn(async move { queues.receive("q", early()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = receive.is_finished();
    (receive, answered)
}

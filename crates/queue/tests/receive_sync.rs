//! When a receive is answered. By default once its commit is synced, as
//! every write: a consumer in another process (the SQS endpoint's) must be
//! able to rely on what it received staying hidden for its visibility
//! timeout, crash or not. A consumer in the store's own process may ask for
//! the answer at the commit (`ReceiveOptions::answer_before_sync`), since a
//! crash that loses the receive takes it too.
//!
//! Shown with the commit log's sync failing (fault point `store::log_sync`):
//! a default receive fails and hands out nothing; one that asked to be
//! answered before the sync gets its message. Fault points are process-wide,
//! so both cases run in one test.

mod common;

use postbox_queue::{NewMessage, Queues, QueuesOptions, ReceiveOptions};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::faults::{self, Action};

/// A durable store with a commit log, and a queue holding one message.
async fn queue_with_one_message(dir: &tempfile::TempDir) -> Queues {
    let store = EmbeddedStore::open(
        dir.path().join("q.redb"),
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store, QueuesOptions::default()).await.unwrap();
    queues.create_queue("q", common::attrs(&[])).await.unwrap();
    queues.send("q", NewMessage::new("m")).await.unwrap();
    queues
}

fn receive(answer_before_sync: bool) -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(1),
        wait_time_seconds: Some(0),
        answer_before_sync,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_waits_for_its_sync_unless_its_consumer_shares_the_process() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (plain, early) = (
        queue_with_one_message(&a).await,
        queue_with_one_message(&b).await,
    );

    faults::arm(faults::LOG_SYNC, Action::Stop);
    let waited = plain.receive("q", receive(false)).await;
    let answered = early.receive("q", receive(true)).await;
    faults::clear();

    assert!(
        waited.is_err(),
        "a receive whose sync failed handed out {waited:?}"
    );
    let answered = answered.unwrap();
    assert_eq!(common::bodies(&answered), ["m"]);
}

//! The relay on AWS stopped between sending a page and moving its
//! checkpoint (fault point `relay::aws::after_send_before_checkpoint`):
//! the next session sends the page again, and the FIFO queue keeps one
//! copy of each event (its deduplication id is the event id). In a file of
//! its own: fault points are process-wide.
//!
//! Needs DynamoDB Local and an SQS server: `scripts/test` runs it with
//! `POSTBOX_TEST_DYNAMODB_ENDPOINT` and `POSTBOX_TEST_SQS_ENDPOINT` set.

mod common;

use std::time::Duration;

use common::Stack;
use postbox_aws::relay::AFTER_SEND_BEFORE_CHECKPOINT;
use postbox_store::faults::{self, Action};

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn a_page_sent_again_after_a_stop_before_its_checkpoint_is_enqueued_once() {
    let stack = Stack::new("crash").await;
    stack.emit(&["acme", "globex"], 5).await;
    faults::arm(AFTER_SEND_BEFORE_CHECKPOINT, Action::Stop);
    let relay = stack.relay("relay-1").await;
    // The page was sent, and the session stopped before the checkpoint.
    assert_eq!(stack.wait_for(10).await, 10);
    faults::disarm(AFTER_SEND_BEFORE_CHECKPOINT);
    // The next session (after its pause) sends the same records again: 20
    // sent in all. (The queue's depth can reach 10 before the first
    // session has counted its sends, so the wait is for the total.)
    for _ in 0..100 {
        if relay.stats()[0].delivered >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stats = relay.stats()[0].clone();
    relay.shutdown().await;
    assert!(
        stats.delivered >= 20,
        "the page was not sent again: {stats:?}"
    );
    let got = stack.drain().await;
    assert_eq!(got.len(), 10, "{got:?}");

    // And the checkpoint moved: a new relay sends only what is new. One
    // event emitted after it starts is awaited in the queue, then the relay
    // is stopped (after its page): had the checkpoint stayed behind, the ten
    // before it would have been sent, and counted, first. (Not a wait for
    // nothing to happen: the new event proves the relay has read.)
    let relay = stack.relay("relay-2").await;
    let stats = relay.stats_source();
    stack.emit(&["initech"], 1).await;
    assert_eq!(stack.wait_for(1).await, 1);
    relay.shutdown().await;
    assert_eq!(stats()[0].delivered, 1, "{:?}", stats());
    let got = stack.drain().await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "initech", "{got:?}");
}

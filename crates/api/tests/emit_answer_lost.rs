//! An emit whose answer is lost after its commit (the process stops, or the
//! connection drops, between the commit and the reply) is retried with the
//! same Idempotency-Key: the retry answers the committed event, once.
//!
//! The loss comes from the engine's fault point
//! `emit::after_commit_before_return`, armed with `Stop`: the event and its
//! writes are committed, and the request answers an error as if the answer
//! never arrived. Fault points are process-wide, so this file holds one
//! test.

mod common;

use common::*;
use postbox_engine::AFTER_COMMIT_BEFORE_RETURN;
use postbox_store::faults::{self, Action};

#[tokio::test]
async fn a_retry_after_a_lost_answer_gets_the_committed_event_once() {
    let env = env().await;
    let key = [("idempotency-key", "pay-7")];
    faults::arm(AFTER_COMMIT_BEFORE_RETURN, Action::Stop);
    let lost = emit(&env, &env.acme, &key, order_emit("7", "acme")).await;
    faults::clear();
    assert_eq!(
        (lost.status, lost.code()),
        (503, "unavailable".into()),
        "the lost answer is a retryable error: {}",
        lost.text
    );

    let retried = emit(&env, &env.acme, &key, order_emit("7", "acme")).await;
    assert_eq!(
        retried.status, 200,
        "the retry finds the committed event: {}",
        retried.text
    );
    let log = log_of(&env, &env.acme).await;
    assert_eq!(log.len(), 1, "one event, not two: {log:?}");
    assert_eq!(
        retried.json(),
        log[0],
        "the retry answers the event as the log has it"
    );
    assert_eq!(orders(&env).await, 1);
    // Every later retry answers it too, read from the log again.
    let again = emit(&env, &env.acme, &key, order_emit("7", "acme")).await;
    assert_eq!((again.status, again.json()), (200, retried.json()));
}

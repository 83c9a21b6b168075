//! The inbox's conditional writes on the embedded store: every transition of
//! the claim state machine, fencing, and the store condition agreeing with
//! the pure predicate `claim::may_claim`.
//!
//! Seen to fail on the naive design: `cargo test -p postbox-worker --test inbox
//! --features naive-claims` swaps in a claim on `attribute_not_exists(pk)`
//! alone and dead-on-first-error. There these six fail (checked when they
//! were written): `crashed_claim_is_taken_over_after_its_lease`,
//! `retryable_failure_releases_the_claim`, `last_attempt_is_dead_with_a_dead_letter`,
//! `exhausted_claim_is_buried_with_a_dead_letter`,
//! `store_condition_agrees_with_the_pure_predicate`, and
//! `fencing_refuses_a_stale_workers_completion` (the takeover claim itself
//! is refused). The others hold on both designs by construction (completion,
//! live leases, terminal errors, refused writes, renewal).

mod common;

use std::sync::Arc;

use common::*;
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::PutItemInput;
use postbox_store::embedded::EmbeddedStore;
use postbox_worker::claim::{self, ClaimTarget, Decision, FailureKind, Lease};
use postbox_worker::{ClaimKey, ClaimOutcome, ClaimRow, Inbox, Status, WorkerError};

const LEASE: u64 = 30_000;
const MAX: u32 = 3;

async fn inbox() -> (tempfile::TempDir, Arc<EmbeddedStore>, Inbox<EmbeddedStore>) {
    let e = env(catalog("")).await;
    let inbox = Inbox::new(e.store.clone(), "inbox", 86_400_000);
    inbox.create_table().await.unwrap();
    (e.dir, e.store, inbox)
}

fn target(event: &str) -> ClaimTarget {
    ClaimTarget {
        key: ClaimKey::new(event, "ship"),
        tenant: "acme".into(),
        seq: 1,
    }
}

fn lease(token: &str) -> Lease {
    Lease {
        owner: format!("w-{token}"),
        token: token.into(),
        lease_ms: LEASE,
    }
}

async fn take(inbox: &Inbox<EmbeddedStore>, event: &str, token: &str, now: u64) -> ClaimRow {
    match inbox
        .claim(&target(event), &lease(token), now, MAX)
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed(row) => row,
        other => panic!("claim {token} at {now} refused: {other:?}"),
    }
}

#[tokio::test]
async fn claim_then_complete_commits_the_handler_writes_with_it() {
    let (_d, store, inbox) = inbox().await;
    let row = take(&inbox, "e1", "t1", 1_000).await;
    assert_eq!(
        (row.status, row.lease_expires_at, row.attempts),
        (Status::Pending, 31_000, 0)
    );
    let done = inbox
        .complete(&row, 2_000, vec![effect("e1:ship")])
        .await
        .unwrap();
    assert_eq!(done.status, Status::Completed);
    assert!(has_effect(&store, "e1:ship").await);
    assert_eq!(inbox.get(&row.key).await.unwrap().unwrap(), done);
    // COMPLETED is final: never claimed again, however late.
    let again = inbox
        .claim(&target("e1"), &lease("t2"), u64::MAX / 2, MAX)
        .await
        .unwrap();
    assert!(
        matches!(
            again,
            ClaimOutcome::Refused(Decision::Final(Status::Completed), _)
        ),
        "{again:?}"
    );
}

#[tokio::test]
async fn live_lease_refuses_a_second_claim() {
    let (_d, _s, inbox) = inbox().await;
    take(&inbox, "e1", "t1", 1_000).await;
    let second = inbox
        .claim(&target("e1"), &lease("t2"), 30_999, MAX)
        .await
        .unwrap();
    assert!(
        matches!(
            second,
            ClaimOutcome::Refused(Decision::Busy { until: 31_000 }, _)
        ),
        "{second:?}"
    );
}

#[tokio::test]
async fn crashed_claim_is_taken_over_after_its_lease() {
    let (_d, store, inbox) = inbox().await;
    // Worker 1 claims and dies (never completes). After the lease, worker 2
    // must be able to claim; on the naive design the row blocks forever.
    take(&inbox, "e1", "t1", 1_000).await;
    let row = take(&inbox, "e1", "t2", 31_000).await;
    assert_eq!(
        (row.lease_token.as_str(), row.attempts, row.created_at),
        ("t2", 0, 1_000)
    );
    inbox
        .complete(&row, 32_000, vec![effect("e1:ship")])
        .await
        .unwrap();
    assert!(has_effect(&store, "e1:ship").await);
}

#[tokio::test]
async fn fencing_refuses_a_stale_workers_completion() {
    let (_d, store, inbox) = inbox().await;
    let stale = take(&inbox, "e1", "t1", 1_000).await;
    // Worker 1's handler outlives its lease; worker 2 takes over.
    let fresh = take(&inbox, "e1", "t2", 31_000).await;
    let err = inbox
        .complete(&stale, 40_000, vec![effect("stale")])
        .await
        .unwrap_err();
    assert!(matches!(err, WorkerError::Fenced { .. }), "{err}");
    assert!(err.to_string().contains("taken over"), "{err}");
    assert!(
        !has_effect(&store, "stale").await,
        "a refused completion committed its writes"
    );
    // Nor may the stale worker fail or renew it.
    assert!(matches!(
        inbox
            .fail(&stale, 40_000, "x", FailureKind::Terminal, MAX, "T")
            .await,
        Err(WorkerError::Fenced { .. })
    ));
    assert!(matches!(
        inbox.renew(&stale, 40_000, LEASE).await,
        Err(WorkerError::Fenced { .. })
    ));
    inbox
        .complete(&fresh, 41_000, vec![effect("fresh")])
        .await
        .unwrap();
    assert!(has_effect(&store, "fresh").await);
    // After completion the stale token is refused too.
    assert!(matches!(
        inbox.complete(&stale, 42_000, vec![]).await,
        Err(WorkerError::Fenced { .. })
    ));
}

#[tokio::test]
async fn retryable_failure_releases_the_claim() {
    let (_d, _s, inbox) = inbox().await;
    let row = take(&inbox, "e1", "t1", 1_000).await;
    let failed = inbox
        .fail(
            &row,
            2_000,
            "timeout",
            FailureKind::Retryable,
            MAX,
            "ORDER_PLACED",
        )
        .await
        .unwrap();
    assert_eq!((failed.status, failed.attempts), (Status::Failed, 1));
    assert_eq!(failed.last_error.as_deref(), Some("timeout"));
    // Claimable at once on redelivery, with the attempts carried.
    let again = take(&inbox, "e1", "t2", 2_001).await;
    assert_eq!(again.attempts, 1);
    inbox.complete(&again, 3_000, vec![]).await.unwrap();
    assert!(inbox.dead_letters("acme").await.unwrap().is_empty());
}

#[tokio::test]
async fn last_attempt_is_dead_with_a_dead_letter() {
    let (_d, _s, inbox) = inbox().await;
    let mut now = 1_000;
    for attempt in 1..=MAX {
        let row = take(&inbox, "e1", &format!("t{attempt}"), now).await;
        let next = inbox
            .fail(
                &row,
                now + 1,
                &format!("err {attempt}"),
                FailureKind::Retryable,
                MAX,
                "ORDER_PLACED",
            )
            .await
            .unwrap();
        let expected = if attempt < MAX {
            Status::Failed
        } else {
            Status::Dead
        };
        assert_eq!((next.status, next.attempts), (expected, attempt));
        now += 10;
    }
    let dead = inbox.dead_letters("acme").await.unwrap();
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(
        (
            d.event_id.as_str(),
            d.subscription.as_str(),
            d.event_type.as_str()
        ),
        ("e1", "ship", "ORDER_PLACED")
    );
    assert_eq!((d.attempts, d.error.as_str()), (MAX, "err 3"));
    assert_eq!((d.first_failure_at, d.last_failure_at), (1_001, 1_021));
    let refused = inbox
        .claim(&target("e1"), &lease("t9"), now, MAX)
        .await
        .unwrap();
    assert!(matches!(
        refused,
        ClaimOutcome::Refused(Decision::Final(Status::Dead), _)
    ));
}

#[tokio::test]
async fn terminal_failure_is_dead_at_once() {
    let (_d, _s, inbox) = inbox().await;
    let row = take(&inbox, "e1", "t1", 1_000).await;
    let dead = inbox
        .fail(
            &row,
            2_000,
            "422 invalid",
            FailureKind::Terminal,
            MAX,
            "ORDER_PLACED",
        )
        .await
        .unwrap();
    assert_eq!((dead.status, dead.attempts), (Status::Dead, 1));
    assert_eq!(inbox.dead_letters("acme").await.unwrap().len(), 1);
    assert!(
        inbox.dead_letters("other").await.unwrap().is_empty(),
        "dead letters are tenant-scoped"
    );
}

#[tokio::test]
async fn refused_handler_write_commits_nothing_and_keeps_the_claim() {
    let (_d, store, inbox) = inbox().await;
    store
        .put_item(PutItemInput {
            table_name: EFFECTS.into(),
            item: Item::from([("pk".to_owned(), AttributeValue::s("taken"))]),
            ..Default::default()
        })
        .await
        .unwrap();
    let row = take(&inbox, "e1", "t1", 1_000).await;
    let err = inbox
        .complete(&row, 2_000, vec![effect("new"), effect("taken")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WorkerError::WriteRefused { index: 1, .. }),
        "{err}"
    );
    assert!(!has_effect(&store, "new").await);
    assert_eq!(
        inbox.get(&row.key).await.unwrap().unwrap().status,
        Status::Pending
    );
}

#[tokio::test]
async fn renewal_extends_the_lease_against_takeover() {
    let (_d, _s, inbox) = inbox().await;
    let row = take(&inbox, "e1", "t1", 1_000).await;
    let renewed = inbox.renew(&row, 20_000, LEASE).await.unwrap();
    assert_eq!(renewed.lease_expires_at, 50_000);
    let refused = inbox
        .claim(&target("e1"), &lease("t2"), 31_000, MAX)
        .await
        .unwrap();
    assert!(matches!(
        refused,
        ClaimOutcome::Refused(Decision::Busy { until: 50_000 }, _)
    ));
    inbox.complete(&renewed, 45_000, vec![]).await.unwrap();
}

#[tokio::test]
async fn exhausted_claim_is_buried_with_a_dead_letter() {
    let (_d, _s, inbox) = inbox().await;
    let row = take(&inbox, "e1", "t1", 1_000).await;
    inbox
        .fail(&row, 2_000, "x", FailureKind::Retryable, MAX, "T")
        .await
        .unwrap();
    // max_attempts lowered to 1 since: the FAILED row has none left.
    let ClaimOutcome::Refused(Decision::Exhausted, Some(failed)) = inbox
        .claim(&target("e1"), &lease("t2"), 3_000, 1)
        .await
        .unwrap()
    else {
        panic!("expected exhausted")
    };
    assert_eq!(
        inbox
            .bury_exhausted(&failed, 3_000, "T")
            .await
            .unwrap()
            .status,
        Status::Dead
    );
    assert_eq!(inbox.dead_letters("acme").await.unwrap().len(), 1);
}

/// Every kind of stored row, claimed at several times: the store's
/// condition (CLAIM_CONDITION, through `reclaim`), the whole claim (a Put
/// first, then `decide`) and the pure `may_claim` give the same answer.
#[tokio::test]
async fn store_condition_agrees_with_the_pure_predicate() {
    let (_d, store, inbox) = inbox().await;
    let base = claim::claimed(None, &target("x"), &lease("t0"), 1_000, 86_400_000);
    let mut rows: Vec<Option<ClaimRow>> = vec![None];
    for status in [
        Status::Pending,
        Status::Completed,
        Status::Failed,
        Status::Dead,
    ] {
        for attempts in [0, MAX - 1, MAX] {
            rows.push(Some(ClaimRow {
                status,
                attempts,
                ..base.clone()
            }));
        }
    }
    let mut case = 0;
    for row in rows {
        for now in [30_999, 31_000, 50_000] {
            let expected = claim::may_claim(row.as_ref(), now, MAX);
            for via_reclaim in [false, true] {
                case += 1;
                let event = format!("e{case}");
                if let Some(row) = &row {
                    let mut row = row.clone();
                    row.key = ClaimKey::new(&event, "ship");
                    store
                        .put_item(PutItemInput {
                            table_name: "inbox".into(),
                            item: claim::to_item(&row),
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                }
                let (t, l) = (target(&event), lease("tn"));
                let outcome = if via_reclaim {
                    inbox.reclaim(&t, &l, now, MAX).await
                } else {
                    inbox.claim(&t, &l, now, MAX).await
                };
                let got = match outcome.unwrap() {
                    ClaimOutcome::Claimed(claimed) => {
                        // What the claim answers is what it stored.
                        assert_eq!(inbox.get(&t.key).await.unwrap(), Some(claimed));
                        true
                    }
                    ClaimOutcome::Refused(..) => false,
                };
                assert_eq!(
                    got, expected,
                    "row {row:?} at {now}, reclaim: {via_reclaim}"
                );
            }
        }
    }
}

/// A claim row that lost fields a claim sets (written by hand, or by an
/// older version) is claimed, and so repaired, by the UpdateItem, as it was
/// before the claim tried a Put first: the Put's refusal does not stop at a
/// row that does not decode.
#[tokio::test]
async fn a_claimable_row_missing_fields_is_claimed_and_repaired() {
    let (_d, store, inbox) = inbox().await;
    let t = target("e1");
    let mut item = t.key.item_key();
    item.insert("status".into(), AttributeValue::s("PENDING"));
    item.insert("lease_expires_at".into(), AttributeValue::n(500));
    store
        .put_item(PutItemInput {
            table_name: "inbox".into(),
            item,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(inbox.get(&t.key).await.is_err(), "the row does not decode");
    let ClaimOutcome::Claimed(row) = inbox.claim(&t, &lease("t1"), 1_000, MAX).await.unwrap()
    else {
        panic!("expected the claim")
    };
    assert_eq!(row.lease_token, "t1");
    assert_eq!(inbox.get(&t.key).await.unwrap(), Some(row));
}

/// The poison rows keep up to 256 KB of each body, so a few of them fill
/// more than a page of Query: every one is listed (and counted by the
/// reconciliation report), not the first page's.
#[tokio::test]
async fn every_poison_row_is_listed_past_the_first_page() {
    let (_dir, _store, inbox) = inbox().await;
    let body = "x".repeat(postbox_worker::poison::MAX_KEPT_BODY);
    for i in 0..6u64 {
        let row =
            postbox_worker::poison::poison_item("q", &format!("m{i}"), &body, "bad", 1_000 + i);
        inbox.record_poison(row).await.unwrap();
    }
    assert_eq!(inbox.poison_messages().await.unwrap().len(), 6);
}

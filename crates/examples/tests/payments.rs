//! The payment example end to end in a temporary directory: every effect
//! of every event applied exactly once, the flaky notification handler
//! retried exactly once per event without a second email, a second delivery
//! of a completed event running no handler, no dead letters, and a clean
//! reconciliation.

use postbox_examples::payments::{self, EFFECTS};
use postbox_worker::Status;
use postbox_worker::report::Verdict;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_effect_happens_exactly_once_and_the_flaky_handler_retries_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let report = payments::run(dir.path(), &mut out).await.unwrap();
    let printed = String::from_utf8(out).unwrap();
    println!("{printed}");

    assert_eq!(report.events.len(), 6, "{printed}");
    let mut tenants: Vec<&str> = report.events.iter().map(|e| e.tenant.as_str()).collect();
    tenants.sort();
    tenants.dedup();
    assert_eq!(tenants, ["acme", "globex"]);
    for e in &report.events {
        assert_eq!(e.effects.len(), EFFECTS.len());
        for f in &e.effects {
            assert_eq!(f.status, Status::Completed, "{e:?}");
            assert_eq!(f.applied, 1, "exactly once: {e:?}");
            if f.subscription == "notification" {
                assert_eq!((f.runs, f.failed_attempts), (2, 1), "retried once: {f:?}");
                assert!(
                    f.last_error.as_deref().unwrap_or("").contains("timed out"),
                    "{f:?}"
                );
            } else {
                assert_eq!((f.runs, f.failed_attempts), (1, 0), "{f:?}");
            }
        }
    }
    // Delivered again after it completed: the inbox stops it before any handler.
    assert_eq!(report.redelivery.extra_runs, 0, "{printed}");
    assert_eq!(report.redelivery.event_id, report.events[0].event_id);
    // The retried email was sent once: the provider saw the same key twice.
    assert_eq!((report.mail_calls, report.emails_sent), (12, 6));
    assert_eq!((report.carrier_calls, report.carrier_bookings), (6, 6));
    assert_eq!((report.retried, report.dead), (6, 0));

    let rec = &report.reconciliation;
    assert_eq!(rec.verdict, Verdict::Ok, "{printed}");
    assert_eq!(
        (
            rec.queue_depth,
            rec.queue_in_flight,
            rec.dlq_depth,
            rec.poison
        ),
        (0, 0, 0, 0)
    );
    for t in &rec.tenants {
        assert!(t.chain_intact && t.dead_letters == 0, "{t:?}");
        assert_eq!(t.head_seq, 3, "{t:?}");
    }
    assert!(printed.contains("all 24 deliveries COMPLETED"), "{printed}");
    assert!(printed.contains("verdict: OK"), "{printed}");
}

#[tokio::test]
async fn a_directory_that_holds_a_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("postbox.redb"), b"").unwrap();
    let e = payments::run(dir.path(), &mut Vec::new())
        .await
        .unwrap_err();
    assert!(
        matches!(e, postbox_examples::ExampleError::DirectoryInUse(_)),
        "{e}"
    );
    assert!(e.to_string().contains("fresh directory"), "{e}");
}

//! Two relays on one store: one lease per pipe, so only one of them
//! delivers, every record exactly once; when the holder stops, the other
//! takes over from the checkpoint.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

const PIPE: &str = r#"
[relay]
lease_seconds = 1

[pipes.copy]
source = "items"
input_template = '<$.dynamodb.NewImage.n.N>'
target = { queue = "copies" }
"#;

#[tokio::test]
async fn two_relays_one_lease_every_record_once() {
    let env = env().await;
    create_table(&env.store, "items").await;
    let a = start(&env, PIPE, "relay-a").await;
    let b = start(&env, PIPE, "relay-b").await;
    for n in 0..150 {
        put(
            &env.store,
            "items",
            json!({"pk": {"S": format!("i{n}")}, "n": {"N": n.to_string()}}),
        )
        .await;
    }
    // Both: the relay without the lease is caught up once the store's
    // checkpoint is, which the holder's counts may not have reached yet.
    caught_up(&a).await;
    caught_up(&b).await;
    let (sa, sb) = (&a.stats().await.unwrap()[0], &b.stats().await.unwrap()[0]);
    assert!(
        sa.holds_lease != sb.holds_lease,
        "exactly one relay holds the lease: {sa:?} {sb:?}"
    );
    assert_eq!(sa.delivered + sb.delivered, 150);
    assert!(
        sa.delivered == 0 || sb.delivered == 0,
        "one relay delivered everything"
    );

    // The holder stops (and gives the lease up); the other takes over.
    let (stopping, other) = if sa.holds_lease { (a, b) } else { (b, a) };
    stopping.shutdown().await;
    for n in 150..200 {
        put(
            &env.store,
            "items",
            json!({"pk": {"S": format!("i{n}")}, "n": {"N": n.to_string()}}),
        )
        .await;
    }
    caught_up(&other).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(other.stats().await.unwrap()[0].holds_lease);
    let bodies = drain(&env.queues, "copies").await;
    let mut numbers: Vec<u32> = bodies.iter().map(|b| b.parse().unwrap()).collect();
    numbers.sort();
    assert_eq!(
        numbers,
        (0..200).collect::<Vec<_>>(),
        "every record exactly once"
    );
    other.shutdown().await;
}

#[tokio::test]
async fn a_relay_whose_lease_was_taken_cannot_commit() {
    use postbox_relay::lease;
    let env = env().await;
    create_table(&env.store, "items").await;
    lease::ensure_table(&env.store).await.unwrap();
    let short = Duration::from_millis(1);
    let lease::Decision::Take(mine) = lease::acquire(&env.store, "copy", "old", short)
        .await
        .unwrap()
    else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    // The lease lapsed; a new owner takes it with a higher fencing token.
    let lease::Decision::Take(theirs) =
        lease::acquire(&env.store, "copy", "new", Duration::from_secs(60))
            .await
            .unwrap()
    else {
        panic!()
    };
    assert_eq!(theirs.token, mine.token + 1);
    assert!(
        !lease::renew(&env.store, "copy", "old", mine.token, short)
            .await
            .unwrap()
    );
    assert!(
        lease::renew(
            &env.store,
            "copy",
            "new",
            theirs.token,
            Duration::from_secs(60)
        )
        .await
        .unwrap()
    );
}

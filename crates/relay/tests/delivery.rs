//! Delivery: filters and templates applied, the checkpoint moved with the
//! enqueue, template errors and old records to the dead-letter queue, bad
//! records isolated by bisection while the good ones are delivered.

mod common;

use std::sync::Arc;

use common::*;
use postbox_store::embedded::EmbeddedOptions;
use postbox_store::{ChangeStreams, ManualClock};
use serde_json::json;

const JOBS: &str = r#"
[pipes.jobs]
source = "jobs"
filters = ['{"dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}}}}']
input_template = '{"jobId": "<$.dynamodb.NewImage.jobId.S>"}'
retry_backoff_ms = 1
target = { queue = "jobs.fifo", message_group_id = "<$.dynamodb.NewImage.tenant.S>" }
"#;

fn job(id: &str, status: &str) -> serde_json::Value {
    json!({"pk": {"S": format!("JOB#{id}")}, "jobId": {"S": id}, "tenant": {"S": "t1"}, "status": {"S": status}})
}

/// The relay looks up its queue's limits once a second; the lookup must
/// not walk the queue's messages (under the lock its sends wait for),
/// however deep a backlog the workers have left.
#[tokio::test]
async fn relaying_into_a_deep_queue_walks_none_of_its_messages() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let relay = start(&env, JOBS, "a").await;
    for round in 0..2 {
        for i in 0..40 {
            put(&env.store, "jobs", job(&format!("j{round}-{i}"), "PENDING")).await;
        }
        caught_up(&relay).await;
        // The next round's lookup finds the queue's facts expired.
        tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    }
    let stats = caught_up(&relay).await;
    assert_eq!(stats[0].delivered, 80);
    assert_eq!(env.queues.messages_counted(), 0);
    relay.shutdown().await;
}

#[tokio::test]
async fn filtered_records_are_templated_into_the_fifo_queue_once() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let relay = start(&env, JOBS, "a").await;
    for i in 0..25 {
        put(
            &env.store,
            "jobs",
            job(
                &format!("j{i}"),
                if i % 5 == 0 { "DONE" } else { "PENDING" },
            ),
        )
        .await;
    }
    let stats = caught_up(&relay).await;
    let bodies = drain(&env.queues, "jobs.fifo").await;
    let want: Vec<String> = (0..25)
        .filter(|i| i % 5 != 0)
        .map(|i| format!(r#"{{"jobId": "j{i}"}}"#))
        .collect();
    assert_eq!(bodies, want);
    assert_eq!(
        (
            stats[0].delivered,
            stats[0].filtered,
            stats[0].dead_lettered,
            stats[0].messages
        ),
        (20, 5, 0, 20)
    );
    assert_eq!(stats[0].oldest_unrelayed_age_ms, None);
    relay.shutdown().await;

    // A second relay on the same store starts at the checkpoint: nothing again.
    let relay = start(&env, JOBS, "b").await;
    put(&env.store, "jobs", job("late", "PENDING")).await;
    caught_up(&relay).await;
    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        vec![r#"{"jobId": "late"}"#.to_owned()]
    );
    relay.shutdown().await;
}

/// A pipe whose filter names the keys reads the records its keys refuse
/// without their images: they count as filtered, between delivered ones and
/// at the end of the stream, and the checkpoint passes them.
#[tokio::test]
async fn records_refused_on_their_keys_are_filtered_and_passed_over() {
    const KEYED: &str = r#"
[pipes.jobs]
source = "jobs"
filters = ['{"dynamodb": {"Keys": {"pk": {"S": [{"prefix": "JOB#"}]}}, "NewImage": {"status": {"S": ["PENDING"]}}}}']
input_template = '{"jobId": "<$.dynamodb.NewImage.jobId.S>", "status": "<$.dynamodb.NewImage.status.S>"}'
target = { queue = "jobs.fifo", message_group_id = "<$.dynamodb.NewImage.tenant.S>" }
"#;
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let relay = start(&env, KEYED, "a").await;
    let other = |i: usize| json!({"pk": {"S": format!("OTHER#{i}")}, "status": {"S": "PENDING"}});
    for i in 0..12 {
        // Jobs and other rows in turn, then others only: the last records
        // of the stream are refused.
        if i < 8 && i % 2 == 0 {
            put(&env.store, "jobs", job(&format!("j{i}"), "PENDING")).await;
        } else {
            put(&env.store, "jobs", other(i)).await;
        }
    }
    // A modification of a job keeps its keys: read with its images.
    put(&env.store, "jobs", job("j0", "DONE")).await;
    put(&env.store, "jobs", other(99)).await;
    let stats = caught_up(&relay).await;
    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        ["j0", "j2", "j4", "j6"].map(|j| format!(r#"{{"jobId": "{j}", "status": "PENDING"}}"#))
    );
    assert_eq!(
        (stats[0].read, stats[0].delivered, stats[0].filtered),
        (14, 4, 10)
    );
    let head = env.store.stream_head("jobs").await.unwrap();
    assert_eq!(head, 14);
    assert_eq!(
        store_checkpoint(&env, "jobs", "jobs", |at| at == Some(head)).await,
        Some(head)
    );
    relay.shutdown().await;
}

#[tokio::test]
async fn an_unresolved_template_path_sends_the_record_to_the_dlq_naming_the_path() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let relay = start(&env, JOBS, "a").await;
    put(&env.store, "jobs", job("ok1", "PENDING")).await;
    put(
        &env.store,
        "jobs",
        json!({"pk": {"S": "JOB#x"}, "tenant": {"S": "t1"}, "status": {"S": "PENDING"}}),
    )
    .await;
    put(&env.store, "jobs", job("ok2", "PENDING")).await;
    let stats = caught_up(&relay).await;
    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        vec![r#"{"jobId": "ok1"}"#, r#"{"jobId": "ok2"}"#]
    );
    let dead = drain(&env.queues, "jobs-dlq").await;
    assert_eq!(dead.len(), 1);
    let dead = json(&dead[0]);
    assert_eq!(dead["errorCode"], "TemplateError");
    assert_eq!(
        dead["reason"],
        "input template path $.dynamodb.NewImage.jobId.S does not resolve in record jobs#2"
    );
    assert_eq!(dead["recordId"], "jobs#2");
    assert_eq!(dead["record"]["dynamodb"]["NewImage"]["pk"]["S"], "JOB#x");
    assert_eq!(
        (
            stats[0].template_errors,
            stats[0].dead_lettered,
            stats[0].delivered
        ),
        (1, 1, 2)
    );
    relay.shutdown().await;
}

#[tokio::test]
async fn a_batch_with_one_bad_record_is_bisected_and_the_good_ones_delivered() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    // The group id comes from the record; a space is not allowed in one, so
    // that record fails every retry, whatever the queue does.
    let toml = JOBS.replace(
        "retry_backoff_ms = 1",
        "retry_backoff_ms = 1\nmax_retries = 2\nbatch_size = 10",
    );
    let relay = start(&env, &toml, "a").await;
    // Write all ten in one commit, so they form one batch.
    let items: Vec<_> = (0..10)
        .map(|i| {
            let mut j = job(&format!("j{i}"), "PENDING");
            if i == 6 {
                j["tenant"] = json!({"S": "bad tenant"});
            }
            postbox_item::item_from_json(&j).unwrap()
        })
        .collect();
    env.store
        .submit(move |ctx| {
            for item in items {
                ctx.put_item("jobs", item)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    let stats = caught_up(&relay).await;
    let want: Vec<String> = (0..10)
        .filter(|&i| i != 6)
        .map(|i| format!(r#"{{"jobId": "j{i}"}}"#))
        .collect();
    assert_eq!(drain(&env.queues, "jobs.fifo").await, want);
    let dead = drain(&env.queues, "jobs-dlq").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let dead = json(&dead[0]);
    assert_eq!(dead["errorCode"], "DeliveryFailed");
    assert!(
        dead["reason"]
            .as_str()
            .unwrap()
            .contains("MessageGroupId \"bad tenant\""),
        "{dead}"
    );
    assert_eq!(dead["record"]["dynamodb"]["NewImage"]["jobId"]["S"], "j6");
    let s = &stats[0];
    assert!(s.bisections >= 3, "{s:?}");
    assert!(s.retries >= 2, "{s:?}");
    assert_eq!((s.delivered, s.dead_lettered), (9, 1));
    relay.shutdown().await;
}

#[tokio::test]
async fn records_older_than_the_maximum_age_go_to_the_dlq() {
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let env = env_with(EmbeddedOptions {
        clock: clock.clone(),
        ..EmbeddedOptions::default()
    })
    .await;
    create_table(&env.store, "jobs").await;
    put(&env.store, "jobs", job("old", "PENDING")).await;
    clock.advance_ms(61_000);
    put(&env.store, "jobs", job("new", "PENDING")).await;
    let toml = JOBS.replace(
        "retry_backoff_ms = 1",
        "retry_backoff_ms = 1\nmax_record_age_seconds = 60",
    );
    let config = postbox_relay::RelayConfig::from_toml(&toml).unwrap();
    let options = postbox_relay::RelayOptions {
        clock: clock.clone(),
        ..options("a")
    };
    let relay = postbox_relay::Relay::start(env.store.clone(), env.queues.clone(), config, options)
        .await
        .unwrap();
    let stats = caught_up(&relay).await;
    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        vec![r#"{"jobId": "new"}"#]
    );
    let dead = drain(&env.queues, "jobs-dlq").await;
    assert_eq!(dead.len(), 1);
    let dead = json(&dead[0]);
    assert_eq!(dead["errorCode"], "MaximumRecordAgeExceeded");
    assert_eq!(
        dead["reason"],
        "the record is 61 s old, older than the pipe's maximum record age of 60 s"
    );
    assert_eq!(stats[0].too_old, 1);
    relay.shutdown().await;
}

#[tokio::test]
async fn lag_is_reported_while_behind() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    // A relay that cannot take the lease (another owner holds it) stays behind.
    postbox_relay::lease::ensure_table(&env.store)
        .await
        .unwrap();
    let held = postbox_relay::lease::acquire(
        &env.store,
        "jobs",
        "someone-else",
        std::time::Duration::from_secs(600),
    )
    .await
    .unwrap();
    assert!(matches!(held, postbox_relay::lease::Decision::Take(_)));
    let relay = start(&env, JOBS, "a").await;
    put(&env.store, "jobs", job("j1", "PENDING")).await;
    put(&env.store, "jobs", job("j2", "PENDING")).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let s = &relay.stats().await.unwrap()[0];
    assert!(!s.holds_lease);
    assert_eq!((s.checkpoint, s.head, s.records_behind), (0, 2, 2));
    assert!(
        s.oldest_unrelayed_age_ms.is_some_and(|age| age >= 40),
        "{s:?}"
    );
    assert!(drain(&env.queues, "jobs.fifo").await.is_empty());
    relay.shutdown().await;
}

#[tokio::test]
async fn records_trimmed_before_relaying_are_counted_and_the_relay_moves_on() {
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let store_options = EmbeddedOptions {
        clock: clock.clone(),
        stream_retention: std::time::Duration::from_secs(60),
        ttl_sweep_interval: std::time::Duration::from_secs(3600),
        ..EmbeddedOptions::default()
    };
    let env = env_with(store_options).await;
    create_table(&env.store, "jobs").await;
    for i in 0..3 {
        put(&env.store, "jobs", job(&format!("gone{i}"), "PENDING")).await;
    }
    // The pipe had relayed the first record (checkpoint 1) before it stopped.
    postbox_store::ChangeStreams::set_checkpoint(&env.store, "jobs", "pipe:jobs", 1)
        .await
        .unwrap();
    clock.advance_ms(120_000);
    put(&env.store, "jobs", job("kept", "PENDING")).await;
    env.store.sweep_now().await.unwrap();
    let config = postbox_relay::RelayConfig::from_toml(JOBS).unwrap();
    let options = postbox_relay::RelayOptions {
        clock: clock.clone(),
        ..options("a")
    };
    let relay = postbox_relay::Relay::start(env.store.clone(), env.queues.clone(), config, options)
        .await
        .unwrap();
    let stats = caught_up(&relay).await;
    assert_eq!(stats[0].lost_to_retention, 2);
    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        vec![r#"{"jobId": "kept"}"#]
    );
    relay.shutdown().await;
}

#[tokio::test]
async fn a_latest_pipe_starts_at_the_head_and_keeps_its_place() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    put(&env.store, "jobs", job("before", "PENDING")).await;
    let toml = JOBS.replace(
        "source = \"jobs\"",
        "source = \"jobs\"\nstart_position = \"LATEST\"",
    );
    let relay = start(&env, &toml, "a").await;
    // The pipe starts at the head it records as its checkpoint: a put
    // before that is behind its start.
    let recorded = store_checkpoint(&env, "jobs", "jobs", |at| at.is_some()).await;
    assert!(recorded.is_some(), "the LATEST pipe recorded its start");
    put(&env.store, "jobs", job("after", "PENDING")).await;
    caught_up(&relay).await;
    relay.shutdown().await;
    // Restarted, it continues from its checkpoint, not from the new head.
    put(&env.store, "jobs", job("while-stopped", "PENDING")).await;
    let relay = start(&env, &toml, "a").await;
    caught_up(&relay).await;
    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        vec![r#"{"jobId": "after"}"#, r#"{"jobId": "while-stopped"}"#]
    );
    relay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_are_one_consistent_view_while_the_relay_works() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let relay = start(&env, JOBS, "a").await;
    let writer = {
        let store = env.store.clone();
        tokio::spawn(async move {
            for i in 0..3000 {
                let status = if i % 5 == 0 { "DONE" } else { "PENDING" };
                put(&store, "jobs", job(&format!("j{i}"), status)).await;
            }
        })
    };
    // Every record up to the checkpoint is counted, as delivered or
    // filtered, in the same view: never a checkpoint ahead of the counts.
    let mut seen = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !writer.is_finished() || seen < 3000 {
        assert!(
            std::time::Instant::now() < deadline,
            "not caught up: {seen}"
        );
        let s = relay.stats().await.unwrap().remove(0);
        assert_eq!(
            s.delivered + s.filtered + s.dead_lettered,
            s.checkpoint,
            "{s:?}"
        );
        seen = s.checkpoint;
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    relay.shutdown().await;
}

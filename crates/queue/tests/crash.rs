//! Crash safety: a child process holding the queue file receives and
//! acknowledges messages on several consumers and is killed with SIGKILL in
//! the middle. After reopening:
//! - nothing it received and did not delete is handed out again before its
//!   visibility timeout ends (no message is ever with two consumers at
//!   once), and FIFO groups behind such a message stay blocked;
//! - after the timeout every message that was not acknowledged comes back,
//!   and no acknowledged one does.
//!
//! Three children are killed one after another on the same file, each
//! recovering what the previous kill left. A child is this test binary run
//! again with `POSTBOX_QUEUE_CRASH_CHILD` set to the file's path; it prints
//! `RECV <queue> <body>` after a receive returned and `ACK <queue> <body>`
//! after a delete returned.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::*;
use postbox_queue::{NewMessage, Queues, QueuesOptions, ReceiveOptions};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{Clock, ManualClock, SystemClock};

const CHILD_ENV: &str = "POSTBOX_QUEUE_CRASH_CHILD";
const STANDARD: usize = 600;
const GROUPS: usize = 30;
const PER_GROUP: usize = 20;
/// Long enough that nothing the child received becomes visible by itself
/// during the test.
const VISIBILITY: i64 = 3600;
/// Lines of output after which a child is killed.
const KILL_AFTER: usize = 300;
/// Children run (and killed) one after another on the same file.
const ROUNDS: usize = 3;

fn fifo_body(g: usize, i: usize) -> String {
    format!("g{g:02}-{i:03}")
}

/// The child: consumes both queues with four consumers until killed.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = EmbeddedStore::open(
            &path,
            EmbeddedOptions::default().keeping(postbox_queue::tables()),
        )
        .unwrap();
        let queues = Queues::open(store, QueuesOptions::default()).await.unwrap();
        let mut consumers = Vec::new();
        for c in 0..4 {
            let q = queues.clone();
            let queue = if c % 2 == 0 { "std" } else { "f.fifo" };
            consumers.push(tokio::spawn(async move {
                let mut round = 0u64;
                loop {
                    round += 1;
                    let options = ReceiveOptions {
                        max_messages: Some(10),
                        visibility_timeout: Some(VISIBILITY),
                        wait_time_seconds: Some(1),
                        ..Default::default()
                    };
                    let got = q.receive(queue, options).await.unwrap();
                    for m in &got {
                        println!("RECV {queue} {}", m.body);
                    }
                    // Acknowledge two batches out of three; leave the rest in flight.
                    if !round.is_multiple_of(3) {
                        let handles = got.iter().map(|m| m.receipt_handle.clone()).collect();
                        for r in q.delete_batch(queue, handles).await.unwrap() {
                            r.unwrap();
                        }
                        for m in &got {
                            println!("ACK {queue} {}", m.body);
                        }
                    }
                }
            }));
        }
        // The consumers run until the parent kills the process.
        drop(consumers);
        std::future::pending::<()>().await;
    });
}

async fn fill(path: &Path) {
    let store = EmbeddedStore::open(
        path,
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store, QueuesOptions::default()).await.unwrap();
    queues.create_queue("std", attrs(&[])).await.unwrap();
    fifo(&queues, "f.fifo").await;
    for chunk in (0..STANDARD).collect::<Vec<_>>().chunks(10) {
        let batch = chunk
            .iter()
            .map(|i| NewMessage::new(format!("s{i:04}")))
            .collect();
        queues.send_batch("std", batch).await.unwrap();
    }
    for i in 0..PER_GROUP {
        for g in 0..GROUPS {
            queues
                .send("f.fifo", grouped(&fifo_body(g, i), &format!("g{g:02}")))
                .await
                .unwrap();
        }
    }
}

/// Receives and deletes every message of `queue` that is visible.
async fn drain(queues: &Queues, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got = queues.receive(queue, recv(10, None)).await.unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(bodies(&got));
        let handles = got.iter().map(|m| m.receipt_handle.clone()).collect();
        for r in queues.delete_batch(queue, handles).await.unwrap() {
            r.unwrap();
        }
    }
}

/// Runs a child on the file and kills it with SIGKILL after `KILL_AFTER`
/// lines, collecting what it received and acknowledged: also the lines it
/// printed before the kill reached it, which this side reads after sending
/// it (the child can be well ahead of the reader). A message handed out
/// twice (in this round or an earlier one) fails the test.
fn run_child_until_killed(
    path: &Path,
    received: &mut BTreeMap<String, BTreeSet<String>>,
    acked: &mut BTreeMap<String, BTreeSet<String>>,
) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = 0;
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut buf = String::new();
    loop {
        buf.clear();
        if reader.read_line(&mut buf).unwrap() == 0 {
            break;
        }
        // A line the kill cut short says nothing.
        let Some(line) = buf.strip_suffix('\n') else {
            break;
        };
        // The test harness may print its own words before ours on a line.
        let Some(at) = line.find("RECV ").or_else(|| line.find("ACK ")) else {
            continue;
        };
        let mut parts = line[at..].split(' ');
        let (kind, queue, body) = match (parts.next(), parts.next(), parts.next()) {
            (Some(k @ ("RECV" | "ACK")), Some(q), Some(b)) => (k, q.to_owned(), b.to_owned()),
            _ => continue,
        };
        let set = if kind == "RECV" {
            &mut *received
        } else {
            &mut *acked
        };
        if kind == "RECV" {
            assert!(
                !set.entry(queue.clone()).or_default().contains(&body),
                "{body} handed out twice"
            );
        }
        set.entry(queue).or_default().insert(body);
        lines += 1;
        if lines == KILL_AFTER {
            child.kill().unwrap(); // SIGKILL
        }
    }
    child.wait().unwrap();
    assert!(lines >= KILL_AFTER, "the child stopped early");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_nine_loses_nothing_and_never_hands_a_message_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    fill(&path).await;

    let mut received: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut acked: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Several rounds: each child opens a file the previous kill left behind.
    for _round in 0..ROUNDS {
        run_child_until_killed(&path, &mut received, &mut acked);
    }

    // Reopen at the real time: what the child holds is still in flight.
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let (_store, queues) = open_at(&path, clock.clone()).await;
    let none = BTreeSet::new();
    let mut visible_now = BTreeMap::new();
    for queue in ["std", "f.fifo"] {
        let got = drain(&queues, queue).await;
        let held = received.get(queue).unwrap_or(&none);
        for body in &got {
            assert!(
                !held.contains(body),
                "{queue}: {body} was with the killed consumer and was handed out again"
            );
        }
        visible_now.insert(queue, got);
    }
    // After the visibility timeout, everything not acknowledged is back.
    clock.advance_ms(2 * VISIBILITY as u64 * 1000);
    let everything: BTreeMap<&str, BTreeSet<String>> = BTreeMap::from([
        ("std", (0..STANDARD).map(|i| format!("s{i:04}")).collect()),
        (
            "f.fifo",
            (0..GROUPS)
                .flat_map(|g| (0..PER_GROUP).map(move |i| fifo_body(g, i)))
                .collect(),
        ),
    ]);
    let mut deleted = BTreeMap::new();
    for (queue, sent) in &everything {
        let mut all: Vec<String> = visible_now[queue].clone();
        all.extend(drain(&queues, queue).await);
        let back: BTreeSet<String> = all.iter().cloned().collect();
        assert_eq!(back.len(), all.len(), "{queue}: a message came back twice");
        let missing: BTreeSet<&String> = sent.difference(&back).collect();
        let acked_here = acked.get(*queue).unwrap_or(&none);
        let received_here = received.get(*queue).unwrap_or(&none);
        for body in acked_here {
            assert!(
                missing.contains(body),
                "{queue}: acknowledged {body} came back"
            );
        }
        // A message is gone only if a child deleted it: acknowledged, or
        // deleted just before a kill (at most one batch per consumer).
        for body in &missing {
            assert!(
                received_here.contains(*body),
                "{queue}: {body} was lost without ever being received"
            );
        }
        assert!(
            missing.len() - acked_here.len() <= ROUNDS * 4 * 10,
            "{queue}: too many deletes unaccounted for"
        );
        deleted.insert(
            *queue,
            missing.into_iter().cloned().collect::<BTreeSet<String>>(),
        );
    }
    // FIFO: at reopen no group went past a message the killed consumer still
    // held (received and never deleted).
    for body in &visible_now["f.fifo"] {
        let (g, i) = body.split_once('-').unwrap();
        let blocked_at = received["f.fifo"]
            .iter()
            .filter(|b| b.starts_with(g) && !deleted["f.fifo"].contains(*b))
            .map(|b| b.split_once('-').unwrap().1.to_owned())
            .min();
        if let Some(k) = blocked_at {
            assert!(
                i < k.as_str(),
                "f.fifo: {body} handed out while {g}-{k} is in flight"
            );
        }
    }
}

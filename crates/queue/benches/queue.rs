//! Throughput and wake-up latency of the embedded queues, durable (fsync at
//! every group commit) and with a no-fsync baseline in the same run:
//!
//! - FIFO end to end: producers send batches of 10, consumers receive up to
//!   10 and delete them with one DeleteMessageBatch; messages/s counts
//!   messages sent, received and deleted, all in one message group and
//!   spread over 1,000 groups;
//! - the same through a standard queue;
//! - long-poll wake-up: a receive waits on an empty queue, a send arrives;
//!   latency from the send's answer to the receive's answer (which includes
//!   the receive's own commit), p50 and p99.
//!
//! Run with `cargo bench -p postbox-queue`; it takes about two minutes.
//! `cargo bench -p postbox-queue -- wake` (or `-- throughput`) runs one part.

// The allocator the `postbox` binary ships with.
#[global_allocator]
static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use postbox_queue::{NewMessage, Queues, QueuesOptions, ReceiveOptions};
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore};

const MESSAGES: usize = 30_000;
const PRODUCERS: usize = 64;
const CONSUMERS: usize = 128;
const WAKEUPS: usize = 300;
/// Throughput runs per scenario; the median is reported.
const RUNS: usize = 3;

async fn open(dir: &tempfile::TempDir, durability: Durability, name: &str) -> Queues {
    let options = EmbeddedOptions {
        durability,
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open(
        dir.path().join(format!("{name}-{durability:?}.redb")),
        options.keeping(postbox_queue::tables()),
    )
    .unwrap();
    Queues::open(store, QueuesOptions::default()).await.unwrap()
}

fn attrs(fifo: bool) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    if fifo {
        a.insert("FifoQueue".to_owned(), "true".to_owned());
    }
    a
}

/// Sends `MESSAGES` in batches of 10 from `PRODUCERS` tasks while
/// `CONSUMERS` tasks receive and delete; returns messages per second and
/// CPU microseconds per message.
async fn end_to_end(queues: &Queues, queue: &str, groups: usize) -> (f64, f64) {
    let started = Instant::now();
    let cpu = postbox_benchkit::process_cpu();
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let (q, next, queue) = (queues.clone(), next.clone(), queue.to_owned());
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(10, Ordering::SeqCst);
                if first >= MESSAGES {
                    return None;
                }
                let batch = (first..first + 10)
                    .map(|i| {
                        let m = NewMessage::new(format!(
                            "message {i} with a body of some realistic size"
                        ));
                        if queue.ends_with(".fifo") {
                            m.group(format!("g{}", i % groups)).dedup(i.to_string())
                        } else {
                            m
                        }
                    })
                    .collect();
                for r in q.send_batch(&queue, batch).await.unwrap() {
                    r.unwrap();
                }
            }
        }));
    }
    for _ in 0..CONSUMERS {
        let (q, done, queue) = (queues.clone(), done.clone(), queue.to_owned());
        tasks.push(tokio::spawn(async move {
            let options = ReceiveOptions {
                max_messages: Some(10),
                wait_time_seconds: Some(1),
                ..ReceiveOptions::default()
            };
            while done.load(Ordering::SeqCst) < MESSAGES {
                let got = q.receive(&queue, options.clone()).await.unwrap();
                if got.is_empty() {
                    continue;
                }
                let handles: Vec<String> = got.into_iter().map(|m| m.receipt_handle).collect();
                let n = handles.len();
                for r in q.delete_batch(&queue, handles).await.unwrap() {
                    r.unwrap();
                }
                if done.fetch_add(n, Ordering::SeqCst) + n == MESSAGES {
                    return Some(Instant::now());
                }
            }
            None
        }));
    }
    // The run ends with the last delete; consumers still in a long poll then
    // are not waited for.
    let mut finished = None;
    for t in tasks.drain(PRODUCERS..) {
        finished = finished.or(t.await.unwrap());
    }
    let finished = finished.expect("the last delete is seen");
    let rate = MESSAGES as f64 / finished.duration_since(started).as_secs_f64();
    (
        rate,
        (postbox_benchkit::process_cpu() - cpu) * 1e6 / MESSAGES as f64,
    )
}

/// Latencies from a send's answer to a waiting receive's answer.
async fn wakeups(queues: &Queues, queue: &str) -> (f64, f64) {
    let mut latencies = Vec::with_capacity(WAKEUPS);
    for i in 0..WAKEUPS {
        let q = queues.clone();
        let name = queue.to_owned();
        let waiter = tokio::spawn(async move {
            let options = ReceiveOptions {
                wait_time_seconds: Some(20),
                ..ReceiveOptions::default()
            };
            let got = q.receive(&name, options).await.unwrap();
            let at = Instant::now();
            q.delete(&name, &got[0].receipt_handle).await.unwrap();
            at
        });
        // Let the receive start waiting.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let m = NewMessage::new(format!("wake {i}"));
        let m = if queue.ends_with(".fifo") {
            m.group("g").dedup(i.to_string())
        } else {
            m
        };
        queues.send(queue, m).await.unwrap();
        let sent = Instant::now();
        let received = waiter.await.unwrap();
        latencies.push(received.saturating_duration_since(sent));
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)].as_secs_f64()
            * 1e3
    };
    (pct(0.50), pct(0.99))
}

fn main() {
    postbox_alloc::tune();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let runs = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        // Wake-ups first: the throughput runs leave the disk busy writing back.
        if runs("wake") {
            wake_table(&dir).await;
        }
        if runs("throughput") {
            throughput_table(&dir).await;
        }
    });
}

async fn wake_table(dir: &tempfile::TempDir) {
    println!(
        "{:<46} {:<9} {:>10} {:>10}",
        "long-poll wake-up (send answered -> receive answered)", "commits", "p50 ms", "p99 ms"
    );
    for durability in [Durability::Durable, Durability::NoFsync] {
        let label = if durability == Durability::Durable {
            "fsync"
        } else {
            "no-fsync"
        };
        for (name, queue) in [("FIFO", "wake.fifo"), ("standard", "wake")] {
            let queues = open(dir, durability, &format!("wake-{queue}")).await;
            queues
                .create_queue(queue, attrs(queue.ends_with(".fifo")))
                .await
                .unwrap();
            let (p50, p99) = wakeups(&queues, queue).await;
            println!("{name:<46} {label:<9} {p50:>10.3} {p99:>10.3}");
        }
    }
    println!();
}

async fn throughput_table(dir: &tempfile::TempDir) {
    println!(
        "{MESSAGES} messages, batches of 10, {PRODUCERS} producers, {CONSUMERS} consumers; msgs/s = messages sent, received and deleted per second, median of {RUNS} runs"
    );
    println!(
        "{:<46} {:<9} {:>10} {:>12}",
        "scenario", "commits", "msgs/s", "cpu µs/msg"
    );
    for durability in [Durability::Durable, Durability::NoFsync] {
        let label = if durability == Durability::Durable {
            "fsync"
        } else {
            "no-fsync"
        };
        for (name, fifo, groups) in [
            ("FIFO, one message group", true, 1),
            ("FIFO, 1,000 message groups", true, 1000),
            ("standard", false, 1),
        ] {
            // The median of three runs: other load on a shared machine
            // swings single runs.
            let mut runs = Vec::new();
            for run in 0..RUNS {
                let queues = open(dir, durability, &format!("e2e-{groups}-{fifo}-{run}")).await;
                let queue = if fifo { "bench.fifo" } else { "bench" };
                queues.create_queue(queue, attrs(fifo)).await.unwrap();
                runs.push(end_to_end(&queues, queue, groups).await);
            }
            let (rate, cpu) = postbox_benchkit::median_by(runs, |r| r.0);
            println!("{name:<46} {label:<9} {rate:>10.0} {cpu:>12.1}");
        }
    }
}

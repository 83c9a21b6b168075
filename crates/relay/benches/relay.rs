//! Relay benchmark, durable commits (fsync) throughout:
//!
//! 1. throughput: records/s from a table's stream to a FIFO queue (the
//!    default events pipe's shape: raw NewImage body, group = tenant, dedup
//!    id = event id, batch size 10) over a backlog, against a baseline
//!    measured in the same run: the textbook loop (read 10, SendMessageBatch,
//!    then move the checkpoint: two commits per 10 records);
//! 2. lag: a producer commits a steady 10,000 records/s for a few seconds
//!    while the relay runs; lag is from the producer's commit returning to
//!    the relay's commit (enqueue + checkpoint) returning, p50/p99/max. A
//!    delivery is answered at its commit, before the commit log's sync
//!    (the relay's own effects are all in the store).
//!
//! `cargo bench -p postbox-relay --bench relay` (env `RELAY_BENCH_RECORDS`,
//! `RELAY_BENCH_SECONDS` to change the sizes).

// The allocator the `postbox` binary ships with.
#[global_allocator]
static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postbox_item::{AttributeValue, Item};
use postbox_queue::{NewMessage, Queues, QueuesOptions};
use postbox_relay::relay::CommitHook;
use postbox_relay::{Relay, RelayConfig, RelayOptions};
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{ChangeStreams, ItemStore};

const PIPE: &str = r##"
[pipes.events]
source = "events"
filters = ['{"dynamodb": {"Keys": {"pk": {"S": [{"suffix": "#EVENT"}]}}, "NewImage": {"id": {"S": [{"exists": true}]}}, "OldImage": {"pk": {"S": [{"exists": false}]}}}}']
input_template = '<$.dynamodb.NewImage>'
batch_size = 10
target = { queue = "events.fifo", message_group_id = "<$.dynamodb.NewImage.tenant.S>", message_deduplication_id = "<$.dynamodb.NewImage.id.S>" }
"##;

/// An event-row-like item, about 400 bytes.
fn event_item(n: u64) -> Item {
    let tenant = format!("t{:03}", n % 100);
    let s = |v: String| AttributeValue::S(v);
    Item::from([
        ("pk".to_owned(), s(format!("TENANT#{tenant}#EVENT"))),
        ("sk".to_owned(), s(format!("{n:020}"))),
        ("id".to_owned(), s(format!("01J{n:020}"))),
        ("type".to_owned(), s("ORDER_PLACED".to_owned())),
        ("tenant".to_owned(), s(tenant)),
        ("seq".to_owned(), AttributeValue::n(n as i64)),
        (
            "payload".to_owned(),
            s(format!(
                "{{\"order\":\"o-{n}\",\"amount\":{},\"note\":\"{}\"}}",
                n % 997,
                "x".repeat(160)
            )),
        ),
        (
            "hash".to_owned(),
            s(format!("{:064x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))),
        ),
    ])
}

async fn open(dir: &std::path::Path) -> (EmbeddedStore, Queues) {
    // POSTBOX_BENCH_COMMIT_LOG=0: durable redb commits instead of the commit log.
    let commit_log = std::env::var("POSTBOX_BENCH_COMMIT_LOG").as_deref() != Ok("0");
    let options = EmbeddedOptions {
        commit_log,
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open(
        dir.join("postbox.redb"),
        options.keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    let key = |n: &str, t| KeySchemaElement {
        attribute_name: n.into(),
        key_type: t,
    };
    let attr = |n: &str| AttributeDefinition {
        attribute_name: n.into(),
        attribute_type: ScalarType::S,
    };
    store
        .create_table(CreateTableInput {
            table_name: "events".into(),
            key_schema: vec![key("pk", KeyType::Hash), key("sk", KeyType::Range)],
            attribute_definitions: vec![attr("pk"), attr("sk")],
            billing_mode: Some("PAY_PER_REQUEST".into()),
            provisioned_throughput: None,
            stream_specification: Some(StreamSpecification {
                stream_enabled: true,
                stream_view_type: Some(StreamViewType::NewAndOldImages),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let fifo = [("FifoQueue".to_owned(), "true".to_owned())]
        .into_iter()
        .collect();
    queues.create_queue("events.fifo", fifo).await.unwrap();
    (store, queues)
}

/// Writes `count` items from `first` on, `per_commit` per commit.
async fn write(store: &EmbeddedStore, first: u64, count: u64, per_commit: u64) {
    let mut n = first;
    while n < first + count {
        let items: Vec<Item> = (n..(n + per_commit).min(first + count))
            .map(event_item)
            .collect();
        n += items.len() as u64;
        store
            .submit(move |ctx| {
                for item in items {
                    ctx.put_item("events", item)?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
}

async fn wait_caught_up(store: &EmbeddedStore, reader: &str) {
    let head = store.stream_head("events").await.unwrap();
    while store
        .checkpoint("events", reader)
        .await
        .unwrap()
        .unwrap_or(0)
        < head
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The textbook relay: read 10, send them, then move the checkpoint.
async fn baseline(records: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let (store, queues) = open(dir.path()).await;
    write(&store, 0, records, 1000).await;
    let started = Instant::now();
    let mut after = 0;
    loop {
        let batch = store.read_stream("events", after, 10).await.unwrap();
        let Some(last) = batch.last().map(|r| r.sequence_number) else {
            break;
        };
        let messages: Vec<NewMessage> = batch
            .iter()
            .map(|r| {
                let image = r.new_image.as_ref().unwrap();
                let get = |k: &str| image[k].as_s().unwrap().to_owned();
                NewMessage::new(postbox_item::item_to_json(image).to_string())
                    .group(get("tenant"))
                    .dedup(get("id"))
            })
            .collect();
        queues.send_batch("events.fifo", messages).await.unwrap();
        store
            .set_checkpoint("events", "baseline", last)
            .await
            .unwrap();
        after = last;
    }
    records as f64 / started.elapsed().as_secs_f64()
}

/// Time to read and plan (to the Pipe's JSON, filter, template) one record,
/// µs, and of the parts: reading, converting to JSON, planning. `whole`
/// converts each record whole and renders from that JSON (the relay before
/// it projected records); otherwise only what the pipe reads is converted
/// and whole images are written from the items, as the relay does.
async fn planning(records: u64, whole: bool) -> (f64, f64, f64) {
    use postbox_relay::record::Projection;
    use postbox_relay::template::Images;
    let dir = tempfile::tempdir().unwrap();
    let (store, _queues) = open(dir.path()).await;
    write(&store, 0, records, 1000).await;
    let config = RelayConfig::from_toml(PIPE).unwrap();
    let pipe = &config.pipes[0];
    let projection = match whole {
        true => Projection::whole(),
        false => pipe.projection(),
    };
    let (mut read, mut convert, mut plan) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut after = 0;
    loop {
        let t = Instant::now();
        let batch = store.read_stream("events", after, 1000).await.unwrap();
        read += t.elapsed();
        let Some(last) = batch.last() else { break };
        after = last.sequence_number;
        let t = Instant::now();
        let json: Vec<_> = batch
            .iter()
            .map(|r| postbox_relay::record::to_json_projected("events", r, &projection))
            .collect();
        convert += t.elapsed();
        let t = Instant::now();
        for (r, j) in batch.iter().zip(&json) {
            let id = postbox_relay::record::record_id("events", r.sequence_number);
            let view = postbox_relay::plan::RecordView {
                json: j,
                id: &id,
                created_ms: r.approximate_creation_time_ms,
                images: (!whole).then(|| Images::of(r)),
            };
            std::hint::black_box(postbox_relay::plan::plan(
                pipe,
                &config.buses,
                view,
                r.approximate_creation_time_ms,
            ));
        }
        plan += t.elapsed();
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / records as f64;
    (per(read), per(convert), per(plan))
}

/// Throughput over a backlog: records/s and CPU µs per record.
async fn throughput(records: u64) -> (f64, f64, f64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (store, queues) = open(dir.path()).await;
    write(&store, 0, records, 1000).await;
    let commits_before = store.writer_stats().commits;
    let cpu_before = postbox_benchkit::process_cpu();
    let writer_before = postbox_benchkit::ThreadCpu::now("postbox-store-w");
    let started = Instant::now();
    let options = RelayOptions {
        max_records_per_commit: postbox_benchkit::env_or("RELAY_BENCH_PER_COMMIT", 1000),
        ..RelayOptions::default()
    };
    let relay = Relay::start(
        store.clone(),
        queues.clone(),
        RelayConfig::from_toml(PIPE).unwrap(),
        options,
    )
    .await
    .unwrap();
    wait_caught_up(&store, "pipe:events").await;
    let rate = records as f64 / started.elapsed().as_secs_f64();
    let cpu_per_record = (postbox_benchkit::process_cpu() - cpu_before) * 1e6 / records as f64;
    let writer_per_record = writer_before.elapsed() * 1e6 / records as f64;
    let commits = store.writer_stats().commits - commits_before;
    let depth = queues.stats("events.fifo").unwrap();
    relay.shutdown().await;
    assert_eq!(depth.visible, records, "every record was enqueued once");
    (rate, cpu_per_record, writer_per_record, commits)
}

/// The longest pause between consecutive instants, ms.
fn longest_gap(times: impl Iterator<Item = Instant>) -> f64 {
    let times: Vec<Instant> = times.collect();
    times
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_secs_f64() * 1000.0)
        .fold(0.0, f64::max)
}

/// Steady producer at `rate`/s for `seconds`: lags in µs, and the longest
/// pause between the producer's commits and between the relay's (a pause
/// of the producer too means the store's writer or the machine stalled).
async fn lag(rate: u64, seconds: u64) -> (Vec<u64>, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let (store, queues) = open(dir.path()).await;
    let relay_commits: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let sink = relay_commits.clone();
    let hook: CommitHook = Arc::new(move |_, at| sink.lock().unwrap().push((Instant::now(), at)));
    let options = RelayOptions {
        on_commit: Some(hook),
        ..RelayOptions::default()
    };
    let relay = Relay::start(
        store.clone(),
        queues,
        RelayConfig::from_toml(PIPE).unwrap(),
        options,
    )
    .await
    .unwrap();
    // The producer commits whatever is due every millisecond, one commit at
    // a time; seq n+1 is item n, so its commit's return time is known.
    let total = rate * seconds;
    let mut acked: Vec<Instant> = Vec::with_capacity(total as usize);
    let started = Instant::now();
    let mut written = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    while written < total {
        tick.tick().await;
        let due = ((started.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        if due > written {
            write(&store, written, due - written, due - written).await;
            let now = Instant::now();
            acked.extend(std::iter::repeat_n(now, (due - written) as usize));
            written = due;
        }
    }
    wait_caught_up(&store, "pipe:events").await;
    relay.shutdown().await;
    let commits = relay_commits.lock().unwrap().clone();
    let mut lags = Vec::with_capacity(acked.len());
    let mut c = 0;
    for (i, producer_at) in acked.iter().enumerate() {
        let seq = i as u64 + 1;
        while commits[c].1 < seq {
            c += 1;
        }
        lags.push(
            commits[c]
                .0
                .saturating_duration_since(*producer_at)
                .as_micros() as u64,
        );
    }
    lags.sort_unstable();
    let producer_gap = longest_gap(acked.iter().copied());
    let relay_gap = longest_gap(commits.iter().map(|c| c.0));
    (lags, producer_gap, relay_gap)
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() {
    postbox_alloc::tune();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let records = postbox_benchkit::env_or("RELAY_BENCH_RECORDS", 100_000) as u64;
        let seconds = postbox_benchkit::env_or("RELAY_BENCH_SECONDS", 5) as u64;
        println!("relay benchmark (durable: fsync per commit, batch size 10, stream -> FIFO queue, 100 tenants)");
        let base = baseline((records / 10).max(1000)).await;
        println!("baseline  textbook loop (read 10, send, checkpoint)   {base:>10.0} records/s");
        // Median of three: single runs swing with other load on a shared machine.
        let mut runs = Vec::new();
        for _ in 0..3 {
            runs.push(throughput(records).await);
        }
        let (rate, cpu, writer, commits) = postbox_benchkit::median_by(runs, |r| r.0);
        println!(
            "relay     {records} records backlog, median of 3      {rate:>10.0} records/s  ({:.1}x baseline; {cpu:.1} us CPU per record, {writer:.1} of it on the store's writer; {commits} commits; target >= 50000)",
            rate / base
        );
        let planned = records.min(20_000);
        let (read, convert, plan) = planning(planned, false).await;
        let (_, whole_convert, whole_plan) = planning(planned, true).await;
        println!(
            "          off the writer, per record: read {read:.1} us, to JSON {convert:.1} us, filter + template {plan:.1} us (records converted whole: {whole_convert:.1} + {whole_plan:.1} us)"
        );
        let (lags, producer_gap, relay_gap) = lag(10_000, seconds).await;
        println!(
            "lag       10000 records/s for {seconds} s, commit -> enqueue   p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  (target p99 < 10 ms)",
            pct(&lags, 0.50),
            pct(&lags, 0.99),
            pct(&lags, 1.0)
        );
        println!(
            "          longest pause between commits: producer {producer_gap:.2} ms, relay {relay_gap:.2} ms"
        );
    });
}

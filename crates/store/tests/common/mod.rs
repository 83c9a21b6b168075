//! Shared test scaffolding: a store on a temporary file with a manual clock,
//! requests written as DynamoDB JSON, and `check_err` for error assertions.
#![allow(dead_code)]

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use postbox_item::{Item, item_from_json};
use postbox_store::ManualClock;
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{ItemStore, StoreResult};
use serde_json::{Value, json};

#[allow(unused_imports)]
pub use postbox_store::testing::{T0 as NOW_MS, TempStore as TestStore, from_json as req_of};

/// Options for tests: no fsync (speed), a manual clock, a sweeper that only
/// runs when asked (`sweep_now`).
pub fn options(clock: Arc<ManualClock>) -> EmbeddedOptions {
    sweep_when_asked(postbox_store::testing::options(clock))
}

fn sweep_when_asked(options: EmbeddedOptions) -> EmbeddedOptions {
    EmbeddedOptions {
        ttl_sweep_interval: Duration::from_secs(3600),
        ..options
    }
}

/// A fresh store.
pub fn open() -> TestStore {
    TestStore::open_with(sweep_when_asked)
}

/// A fresh store with table `tbl` keyed by `pk` (S) and, when `sk` is given,
/// a sort key `sk` of that type; stream NEW_AND_OLD_IMAGES.
pub async fn open_with_table(sk: Option<&str>) -> TestStore {
    let s = open();
    create(&s, "tbl", sk, Some("NEW_AND_OLD_IMAGES")).await;
    s
}

/// Creates a table keyed by `pk` (S) and optionally `sk` of type `sk_type`.
pub async fn create(
    store: &EmbeddedStore,
    name: &str,
    sk_type: Option<&str>,
    stream: Option<&str>,
) {
    let mut schema = vec![json!({"AttributeName": "pk", "KeyType": "HASH"})];
    let mut defs = vec![json!({"AttributeName": "pk", "AttributeType": "S"})];
    if let Some(t) = sk_type {
        schema.push(json!({"AttributeName": "sk", "KeyType": "RANGE"}));
        defs.push(json!({"AttributeName": "sk", "AttributeType": t}));
    }
    let mut req = json!({"TableName": name, "KeySchema": schema, "AttributeDefinitions": defs, "BillingMode": "PAY_PER_REQUEST"});
    if let Some(view) = stream {
        req["StreamSpecification"] = json!({"StreamEnabled": true, "StreamViewType": view});
    }
    store.create_table(req_of(req)).await.unwrap();
}

/// Turns TTL on for `table`, on the attribute `exp`.
pub async fn expire_by_exp(store: &EmbeddedStore, table: &str) {
    let spec = TimeToLiveSpecification {
        enabled: true,
        attribute_name: "exp".into(),
    };
    store.update_time_to_live(table, spec).await.unwrap();
}

/// DescribeTable's ItemCount of `table`.
pub async fn item_count(store: &EmbeddedStore, table: &str) -> u64 {
    store.describe_table(table).await.unwrap().item_count
}

/// An item from DynamoDB JSON.
pub fn item(v: Value) -> Item {
    item_from_json(&v).unwrap()
}

/// Asserts an error of DynamoDB type `code` whose message contains `msg`.
#[track_caller]
pub fn check_err<T: Debug>(result: StoreResult<T>, code: &str, msg: &str) {
    match result {
        Ok(v) => panic!("expected {code} ({msg}), got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.code(), code, "wrong error kind: {e}");
            assert!(
                e.to_string().contains(msg),
                "message {:?} lacks {msg:?}",
                e.to_string()
            );
        }
    }
}

pub async fn put(store: &EmbeddedStore, v: Value) -> StoreResult<WriteOutput> {
    store.put_item(req_of(v)).await
}

pub async fn get(store: &EmbeddedStore, table: &str, key: Value) -> Option<Item> {
    store
        .get_item(req_of(json!({"TableName": table, "Key": key})))
        .await
        .unwrap()
        .item
}

pub async fn update(store: &EmbeddedStore, v: Value) -> StoreResult<WriteOutput> {
    store.update_item(req_of(v)).await
}

pub async fn delete(store: &EmbeddedStore, v: Value) -> StoreResult<WriteOutput> {
    store.delete_item(req_of(v)).await
}

pub async fn query(store: &EmbeddedStore, v: Value) -> StoreResult<QueryOutput> {
    store.query(req_of(v)).await
}

pub async fn scan(store: &EmbeddedStore, v: Value) -> StoreResult<QueryOutput> {
    store.scan(req_of(v)).await
}

pub async fn transact(store: &EmbeddedStore, items: Value) -> StoreResult<()> {
    store
        .transact_write_items(req_of(json!({"TransactItems": items})))
        .await
}

/// The transaction that adds `by` to `n` of item `c` in `tbl`, with
/// ClientRequestToken `token`.
pub fn add(token: &str, by: &str) -> TransactWriteItemsInput {
    req_of(json!({"ClientRequestToken": token, "TransactItems": [
        {"Update": {"TableName": "tbl", "Key": {"pk": {"S": "c"}}, "UpdateExpression": "ADD n :by",
            "ExpressionAttributeValues": {":by": {"N": by}}}}]}))
}

/// In a child process of a test: runs `work` on a two-thread runtime, as a
/// server's callers would.
pub fn run_child<F: std::future::Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(work)
}

/// In a crash test's child: prints `ACK <kind> <id>` once a write of
/// `id` is acknowledged.
pub fn ack(kind: &str, id: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ACK {kind} {id}").unwrap();
    out.flush().unwrap();
}

/// When a crash test's child is killed: `wait` after it was started (a kill
/// that may land while it opens and recovers the store), or `wait` after its
/// first acknowledged write (a kill that lands among writes however slowly
/// the child started on a loaded machine).
#[derive(Clone, Copy, Debug)]
pub enum KillAfter {
    Start(Duration),
    FirstAck(Duration),
}

impl KillAfter {
    /// The kill of round `round`: every third `margin_ms + wait_ms` after
    /// the start (it may land while the child opens the store), the others
    /// `wait_ms` after the first acknowledged write (among its writes).
    pub fn in_round(round: u64, margin_ms: u64, wait_ms: u64) -> KillAfter {
        match round % 3 {
            0 => KillAfter::Start(Duration::from_millis(margin_ms + wait_ms)),
            _ => KillAfter::FirstAck(Duration::from_millis(wait_ms)),
        }
    }
}

/// Runs this test binary's ignored test `child` with `env` as a child
/// process, SIGKILLs it at `kill`, and returns the `ACK ` lines it printed
/// by then. Panics if the child exits on its own, or if it acknowledges
/// nothing within a minute when the kill waits for its first write.
pub fn acks_until_killed(child: &str, env: &[(&str, String)], kill: KillAfter) -> Vec<String> {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::mpsc::RecvTimeoutError;
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = process.stdout.take().unwrap();
    let (lines, acks) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok);
        for line in read.filter(|l| l.starts_with("ACK ")) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let started = std::time::Instant::now();
    let (mut deadline, waits_for_ack) = match kill {
        KillAfter::Start(wait) => (started + wait, None),
        KillAfter::FirstAck(wait) => (started + Duration::from_secs(60), Some(wait)),
    };
    let mut got = Vec::new();
    loop {
        if let Some(status) = process.try_wait().unwrap() {
            panic!("the child {child} exited on its own: {status}");
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            break;
        }
        match acks.recv_timeout((deadline - now).min(Duration::from_millis(5))) {
            Ok(line) => {
                if got.is_empty()
                    && let Some(wait) = waits_for_ack
                {
                    deadline = std::time::Instant::now() + wait;
                }
                got.push(line);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    assert!(
        waits_for_ack.is_none() || !got.is_empty(),
        "the child {child} acknowledged no write within a minute"
    );
    process.kill().unwrap(); // SIGKILL
    process.wait().unwrap();
    // Lines the child printed before the kill and this thread had not read.
    got.extend(acks.iter());
    got
}

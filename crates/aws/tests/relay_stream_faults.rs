//! The relay on AWS against what DynamoDB Local never does: a shard split
//! (a closed parent and two children, listed children first), an iterator
//! that expires between pages, and a checkpoint past the stream's
//! retention. The records are real (events emitted on DynamoDB Local and
//! read from its stream); a scripted stream deals them into shards and
//! injects the faults. The queues are the SQS server's.
//!
//! Needs DynamoDB Local and an SQS server: `scripts/test` runs it with
//! `POSTBOX_TEST_DYNAMODB_ENDPOINT` and `POSTBOX_TEST_SQS_ENDPOINT` set.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{PIPES, Stack};
use postbox_aws::lineage::ShardState;
use postbox_aws::pipe_state::PipeState;
use postbox_aws::streams::{Page, ReadError, Shard, Start, StreamRecord, StreamSource};
use postbox_aws::{Streams, StreamsRelay, StreamsRelayOptions};
use postbox_relay::RelayConfig;
use postbox_relay::lease::Decision;
use postbox_store::{Clock, ItemStore};

#[derive(Default)]
struct Script {
    /// In DescribeStream's order.
    shards: Vec<Shard>,
    records: HashMap<String, Vec<StreamRecord>>,
    /// Shards whose next GetRecords after their first page answers
    /// ExpiredIteratorException, once.
    expire_once: HashSet<String>,
    /// Per shard, how many of its first records the retention removed.
    trimmed: HashMap<String, usize>,
}

/// A stream played from a script. Iterators are `<shard>@<index>`.
#[derive(Clone, Default)]
struct Scripted(Arc<Mutex<Script>>);

impl StreamSource for Scripted {
    async fn shards(&self, _arn: &str) -> Result<Vec<Shard>, ReadError> {
        Ok(self.0.lock().unwrap().shards.clone())
    }

    async fn iterator(&self, _arn: &str, shard: &str, start: &Start) -> Result<String, ReadError> {
        let script = self.0.lock().unwrap();
        let records = &script.records[shard];
        let oldest = script.trimmed.get(shard).copied().unwrap_or(0);
        let at = match start {
            Start::TrimHorizon => oldest,
            Start::Latest => records.len(),
            Start::After(seq) => {
                let i = records
                    .iter()
                    .position(|r| &r.sequence == seq)
                    .expect("a checkpoint of this shard")
                    + 1;
                if i < oldest {
                    return Err(ReadError::Trimmed(format!("{shard} after {seq}")));
                }
                i
            }
        };
        Ok(format!("{shard}@{at}"))
    }

    async fn records(&self, _arn: &str, iterator: &str, limit: i32) -> Result<Page, ReadError> {
        let mut script = self.0.lock().unwrap();
        let (shard, at) = iterator.split_once('@').unwrap();
        let at: usize = at.parse().unwrap();
        if at > 0 && script.expire_once.remove(shard) {
            return Err(ReadError::Expired);
        }
        let all = &script.records[shard];
        let end = (at + limit as usize).min(all.len());
        let closed = script.shards.iter().any(|s| s.id == shard && s.closed);
        Ok(Page {
            records: all[at..end].to_vec(),
            next: (!closed || end < all.len()).then(|| format!("{shard}@{end}")),
        })
    }
}

/// Every record of the events table's stream on DynamoDB Local.
async fn real_records(stack: &Stack) -> Vec<StreamRecord> {
    let arn = stack
        .store
        .describe_table(postbox_topology::EVENTS_TABLE)
        .await
        .unwrap()
        .latest_stream_arn
        .unwrap();
    let streams = Streams::new(&common::config("POSTBOX_TEST_DYNAMODB_ENDPOINT").await);
    let mut out = Vec::new();
    for shard in streams.shards(&arn).await.unwrap() {
        let mut it = Some(
            streams
                .iterator(&arn, &shard.id, &Start::TrimHorizon)
                .await
                .unwrap(),
        );
        while let Some(i) = it {
            let page = streams.records(&arn, &i, 1000).await.unwrap();
            if page.records.is_empty() {
                break;
            }
            out.extend(page.records);
            it = page.next;
        }
    }
    out
}

/// The event a record carries to the events queue, if the default events
/// pipe passes it: `(tenant, seq, id)`.
fn event_of(r: &StreamRecord) -> Option<(String, u64, String)> {
    let d = &r.json["dynamodb"];
    let image = &d["NewImage"];
    let pk = d["Keys"]["pk"]["S"].as_str()?;
    if !pk.ends_with("#EVENT") || d.get("OldImage").is_some() {
        return None;
    }
    Some((
        image["tenant"]["S"].as_str()?.to_owned(),
        image["seq"]["N"].as_str()?.parse().ok()?,
        image["id"]["S"].as_str()?.to_owned(),
    ))
}

/// Deals `records` into a split: the parent holds everything up to acme's
/// event `split_after`; then acme's records go to child `c1`, the rest to
/// `c2`. DescribeStream lists the children first.
fn split(records: Vec<StreamRecord>, split_after: u64) -> Script {
    let cut = records
        .iter()
        .position(|r| event_of(r).is_some_and(|(t, s, _)| t == "acme" && s == split_after))
        .expect("acme's event")
        + 1;
    let mut script = Script::default();
    let (parent, rest) = records.split_at(cut);
    let (c1, c2): (Vec<_>, Vec<_>) = rest.iter().cloned().partition(|r| {
        r.json["dynamodb"]["Keys"]["pk"]["S"]
            .as_str()
            .is_some_and(|pk| pk.contains("#acme#"))
    });
    script.records.insert("p".into(), parent.to_vec());
    script.records.insert("c1".into(), c1);
    script.records.insert("c2".into(), c2);
    for (id, parent, closed) in [
        ("c1", Some("p"), false),
        ("c2", Some("p"), false),
        ("p", None, true),
    ] {
        script.shards.push(Shard {
            id: id.into(),
            parent: parent.map(Into::into),
            closed,
        });
    }
    script
}

async fn relay(stack: &Stack, stream: Scripted) -> StreamsRelay {
    StreamsRelay::start(
        stack.store.clone(),
        stream,
        stack.queues.clone(),
        RelayConfig::from_toml(PIPES).unwrap(),
        StreamsRelayOptions {
            owner: "relay-1".into(),
            poll: Duration::from_millis(20),
            page: 2,
            ..StreamsRelayOptions::default()
        },
    )
    .await
    .unwrap()
}

fn by_tenant(got: &[(String, String, u64)]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (tenant, _, seq) in got {
        out.entry(tenant.clone()).or_default().push(*seq);
    }
    out
}

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn a_split_shard_is_read_parent_first_and_an_expired_iterator_loses_nothing() {
    let stack = Stack::new("split").await;
    stack.emit(&["acme"], 5).await;
    stack.emit(&["globex"], 2).await;
    let mut script = split(real_records(&stack).await, 3);
    script.expire_once.insert("p".into());
    script.expire_once.insert("c1".into());
    let relay = relay(&stack, Scripted(Arc::new(Mutex::new(script)))).await;
    assert_eq!(stack.wait_for(7).await, 7);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = relay.stats()[0].clone();
    relay.shutdown().await;
    // Each event sent once: the expired iterators were taken again from
    // the checkpoints, not from the shards' starts.
    assert_eq!(stats.delivered, 7, "{stats:?}");
    assert_eq!(stats.gaps, 0, "{stats:?}");
    let got = stack.drain().await;
    let tenants = by_tenant(&got);
    assert_eq!(tenants["acme"], vec![1, 2, 3, 4, 5], "{got:?}");
    assert_eq!(tenants["globex"], vec![1, 2], "{got:?}");
}

#[tokio::test]
#[ignore = "needs DynamoDB Local and an SQS server: scripts/test runs it"]
async fn a_checkpoint_past_the_retention_is_reported_as_a_gap_and_reading_goes_on() {
    let stack = Stack::new("trim").await;
    stack.emit(&["acme"], 5).await;
    let records = real_records(&stack).await;
    let mut script = Script::default();
    script.records.insert("p".into(), records.clone());
    script.shards.push(Shard {
        id: "p".into(),
        parent: None,
        closed: false,
    });
    // The pipe's checkpoint is at the second record; the retention has
    // removed the first four since.
    script.trimmed.insert("p".into(), 4);
    let arn = stack
        .store
        .describe_table(postbox_topology::EVENTS_TABLE)
        .await
        .unwrap()
        .latest_stream_arn
        .unwrap();
    let state = PipeState::new(
        stack.store.clone(),
        postbox_aws::pipe_state::TABLE,
        "events",
    );
    let now = postbox_store::SystemClock.now_ms();
    let Decision::Take(lease) = state
        .acquire("setup", now, Duration::from_secs(5))
        .await
        .unwrap()
    else {
        panic!("the lease is free");
    };
    let at = ShardState {
        sequence: Some(records[1].sequence.clone()),
        ..ShardState::default()
    };
    state
        .set_checkpoint(("setup", lease.token, now), &arn, "p", &at)
        .await
        .unwrap();
    state.release("setup", lease.token, now).await.unwrap();

    let expected: BTreeSet<String> = records[4..]
        .iter()
        .filter_map(event_of)
        .map(|(_, _, id)| id)
        .collect();
    assert!(!expected.is_empty());
    let relay = relay(&stack, Scripted(Arc::new(Mutex::new(script)))).await;
    assert_eq!(
        stack.wait_for(expected.len() as u64).await,
        expected.len() as u64
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = relay.stats()[0].clone();
    relay.shutdown().await;
    assert_eq!(stats.gaps, 1, "{stats:?}");
    let got: BTreeSet<String> = stack
        .drain()
        .await
        .into_iter()
        .map(|(_, id, _)| id)
        .collect();
    assert_eq!(got, expected);
}

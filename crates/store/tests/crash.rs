//! Crash safety: a child process writes single items and 3-item
//! transactions from several concurrent writers through the durable store,
//! printing each acknowledged write; the parent kills it with SIGKILL at a
//! random moment, reopens the file and checks that
//! - every acknowledged write is present,
//! - no transaction is partly visible (its 3 items carry one txn id: all or none),
//! - replaying the change stream from the start gives exactly the items,
//! - each transaction acknowledged in the round, sent again with its
//!   ClientRequestToken, is answered as a replay: success, nothing written.
//!
//! The child is this test binary re-executed on the ignored test
//! `crash_child`, with the store path in `POSTBOX_CRASH_CHILD`.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use postbox_item::Item;
use postbox_store::api::EventName;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{ChangeStreams, ItemStore};
use serde_json::json;

const ROUNDS: u64 = 30;
const WRITERS: u64 = 8;

fn durable() -> EmbeddedOptions {
    EmbeddedOptions::default()
}

/// The child: writes until killed, printing `ACK put <id>` / `ACK txn <id>`
/// after each acknowledged write.
#[test]
#[ignore = "run by crash_safety_under_sigkill as a child process"]
fn crash_child() {
    let Some(path) = std::env::var_os("POSTBOX_CRASH_CHILD") else {
        return;
    };
    let round: u64 = std::env::var("POSTBOX_CRASH_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    run_child(async move {
        let store = EmbeddedStore::open(path, durable()).unwrap();
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0.. {
                        let id = format!("{round}-{w}-{i}");
                        if i % 2 == 0 {
                            put(&store, json!({"TableName": "crash", "Item": {"pk": {"S": format!("single#{id}")}, "id": {"S": id}}}))
                                .await
                                .unwrap();
                            ack("put", &id);
                        } else {
                            store.transact_write_items(txn_request(&id)).await.unwrap();
                            ack("txn", &id);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

/// Transaction `id`: three new items, each conditioned on not existing yet,
/// with `id` as its ClientRequestToken.
fn txn_request(id: &str) -> postbox_store::api::TransactWriteItemsInput {
    let actions: Vec<_> = (0..3)
        .map(|j| json!({"Put": {"TableName": "crash", "Item": {"pk": {"S": format!("txn#{id}#{j}")}, "txn": {"S": id}},
            "ConditionExpression": "attribute_not_exists(pk)"}}))
        .collect();
    req_of(json!({"TransactItems": actions, "ClientRequestToken": id}))
}

/// A small deterministic generator for kill times (no extra dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_safety_under_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    {
        let store = EmbeddedStore::open(&path, durable()).unwrap();
        create(&store, "crash", None, Some("NEW_AND_OLD_IMAGES")).await;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut rng = Lcg(seed);
    let (mut acked_puts, mut acked_txns) = (BTreeSet::new(), BTreeSet::new());
    for round in 0..ROUNDS {
        let env = [
            ("POSTBOX_CRASH_CHILD", path.display().to_string()),
            ("POSTBOX_CRASH_ROUND", round.to_string()),
        ];
        let kill = KillAfter::in_round(round, 30, rng.next(400));
        let acks = acks_until_killed("crash_child", &env, kill);
        let mut this_round = Vec::new();
        for line in acks {
            let mut parts = line.split(' ').skip(1);
            match (parts.next(), parts.next()) {
                (Some("put"), Some(id)) => acked_puts.insert(id.to_owned()),
                (Some("txn"), Some(id)) => {
                    this_round.push(id.to_owned());
                    acked_txns.insert(id.to_owned())
                }
                _ => panic!("unexpected child output {line}"),
            };
        }
        check_after_crash(&path, &acked_puts, &acked_txns, &this_round, round).await;
    }
    assert!(
        acked_txns.len() > ROUNDS as usize,
        "the child should get transactions acknowledged ({} were)",
        acked_txns.len()
    );
    eprintln!(
        "crash test: {ROUNDS} kills, {} puts and {} transactions acknowledged, all present",
        acked_puts.len(),
        acked_txns.len()
    );
}

async fn check_after_crash(
    path: &std::path::Path,
    puts: &BTreeSet<String>,
    txns: &BTreeSet<String>,
    this_round: &[String],
    round: u64,
) {
    let store = EmbeddedStore::open(path, durable()).unwrap();
    // Their tokens committed with them: sent again, each is a replay (run
    // again, its conditions would cancel it).
    for id in this_round {
        if let Err(e) = store.transact_write_items(txn_request(id)).await {
            panic!("round {round}: transaction {id} sent again with its token: {e:?}");
        }
    }
    let mut items: BTreeMap<String, Item> = BTreeMap::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = json!({"TableName": "crash"});
        if let Some(k) = &start {
            req["ExclusiveStartKey"] = postbox_item::item_to_json(k);
        }
        let out = store.scan(req_of(req)).await.unwrap();
        for it in out.items.unwrap() {
            items.insert(it["pk"].as_s().unwrap().to_owned(), it);
        }
        match out.last_evaluated_key {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    for id in puts {
        assert!(
            items.contains_key(&format!("single#{id}")),
            "round {round}: acknowledged put {id} is missing"
        );
    }
    for id in txns {
        for j in 0..3 {
            assert!(
                items.contains_key(&format!("txn#{id}#{j}")),
                "round {round}: acknowledged transaction {id} lost item {j}"
            );
        }
    }
    let mut parts: BTreeMap<String, usize> = BTreeMap::new();
    for it in items.values() {
        if let Some(t) = it.get("txn") {
            *parts.entry(t.as_s().unwrap().to_owned()).or_default() += 1;
        }
    }
    for (txn, n) in parts {
        assert_eq!(n, 3, "round {round}: transaction {txn} is partly visible");
    }
    let mut replayed: BTreeMap<String, Item> = BTreeMap::new();
    let mut after = 0;
    loop {
        let records = store.read_stream("crash", after, 1000).await.unwrap();
        let Some(last) = records.last() else { break };
        after = last.sequence_number;
        for r in records {
            let pk = r.keys["pk"].as_s().unwrap().to_owned();
            match r.event_name {
                EventName::Insert | EventName::Modify => replayed.insert(pk, r.new_image.unwrap()),
                EventName::Remove => replayed.remove(&pk),
            };
        }
    }
    assert_eq!(
        replayed, items,
        "round {round}: the stream does not agree with the items"
    );
}

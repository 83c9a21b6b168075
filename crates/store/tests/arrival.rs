//! Tables kept in arrival order (`EmbeddedOptions::arrival_tables`): their
//! rows sit in the order they came and an index in memory finds them, yet
//! they answer every operation as a table keyed by its items' keys does.
//!
//! - a property test runs random puts, updates, deletes, transactions,
//!   reads, scans, TTL expiry and reopenings on one table of each layout
//!   and compares every answer;
//! - the layout shows (a scan returns the rows as they came), is kept with
//!   the table, and is not taken by a table that needs key order;
//! - a child process inserting keys if absent and deleting some is killed
//!   at random: every acknowledged insert is found after the reopen and
//!   refused when sent again, every acknowledged delete stays deleted.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use postbox_item::{Item, item_to_json};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{Clock, ItemStore, ManualClock, StoreResult};
use proptest::prelude::*;
use serde_json::{Value, json};

const KEYED: &str = "keyed";
const ARRIVAL: &str = "arrival";
/// Tables with a sort key: the second asks for arrival order by its tag.
const KEYED_SORTED: &str = "keyed_sorted";
const ARRIVAL_SORTED: &str = "arrival_sorted";
/// Items a test's operations address: in a table with a sort key, item
/// `k` is in partition `k % 3`.
const KEYS: usize = 6;

fn arrival_options(clock: Arc<ManualClock>) -> EmbeddedOptions {
    EmbeddedOptions {
        arrival_tables: vec![ARRIVAL.to_owned()],
        ..options(clock)
    }
}

/// A store on a file that a test can close and open again.
struct Reopenable {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    store: Option<EmbeddedStore>,
}

impl Reopenable {
    fn new() -> Reopenable {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(NOW_MS));
        let store = EmbeddedStore::open(path(&dir), arrival_options(clock.clone())).unwrap();
        Reopenable {
            dir,
            clock,
            store: Some(store),
        }
    }

    fn store(&self) -> &EmbeddedStore {
        self.store.as_ref().expect("open")
    }

    /// Closes the store and opens it again with `options`.
    fn reopen_with(&mut self, options: EmbeddedOptions) {
        drop(self.store.take());
        self.store = Some(EmbeddedStore::open(path(&self.dir), options).unwrap());
    }

    fn reopen(&mut self) {
        self.reopen_with(arrival_options(self.clock.clone()));
    }
}

fn path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("store.redb")
}

async fn create_both(store: &EmbeddedStore) {
    for name in [KEYED, ARRIVAL] {
        create(store, name, None, None).await;
        expire_by_exp(store, name).await;
    }
    for (name, tag) in [(KEYED_SORTED, None), (ARRIVAL_SORTED, Some("arrival"))] {
        create_sorted(store, name, tag).await.unwrap();
        expire_by_exp(store, name).await;
    }
}

/// Creates a table keyed by `pk` and `sk` (both S), tagged `postbox:row-order`
/// = `order` if given.
async fn create_sorted(
    store: &EmbeddedStore,
    name: &str,
    order: Option<&str>,
) -> StoreResult<postbox_store::api::TableDescription> {
    let mut req = json!({"TableName": name,
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST"});
    if let Some(order) = order {
        req["Tags"] = json!([{"Key": "postbox:row-order", "Value": order}]);
    }
    store.create_table(req_of(req)).await
}

// ---- the property test ----

#[derive(Clone, Debug)]
enum Cond {
    None,
    NotExists,
    Exists,
    VEquals(i64),
}

#[derive(Clone, Debug)]
enum Act {
    Put(i64),
    Delete,
    Check,
}

#[derive(Clone, Debug)]
enum Op {
    Put(usize, i64, Cond, bool),
    Update(usize, i64, Cond),
    Delete(usize, Cond),
    Get(usize),
    Query(usize, u8),
    Scan,
    Transact(Vec<(usize, Act, Cond)>),
    Advance,
    Sweep,
    Reopen,
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        Just(Cond::None),
        Just(Cond::NotExists),
        Just(Cond::Exists),
        (0i64..3).prop_map(Cond::VEquals),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS;
    prop_oneof![
        6 => (key.clone(), 0i64..3, cond(), any::<bool>()).prop_map(|(k, v, c, t)| Op::Put(k, v, c, t)),
        3 => (key.clone(), -1i64..3, cond()).prop_map(|(k, n, c)| Op::Update(k, n, c)),
        3 => (key.clone(), cond()).prop_map(|(k, c)| Op::Delete(k, c)),
        2 => key.clone().prop_map(Op::Get),
        2 => (key.clone(), 0u8..3).prop_map(|(k, v)| Op::Query(k, v)),
        1 => Just(Op::Scan),
        2 => proptest::collection::vec(
                (prop_oneof![(0i64..3).prop_map(Act::Put), Just(Act::Delete), Just(Act::Check)], cond()),
                1..=3,
            )
            .prop_map(|acts| Op::Transact(
                acts.into_iter().enumerate().map(|(k, (a, c))| (k, a, c)).collect()
            )),
        1 => Just(Op::Advance),
        1 => Just(Op::Sweep),
        1 => Just(Op::Reopen),
    ]
}

/// The key of item `k` in a table with (`sorted`) or without a sort key.
fn key(k: usize, sorted: bool) -> Value {
    match sorted {
        false => json!({"pk": {"S": format!("key-{k}")}}),
        true => json!({"pk": {"S": format!("key-{}", k % 3)}, "sk": {"S": format!("s-{}", k / 3)}}),
    }
}

/// Item `k` with `v`.
fn item_of(k: usize, v: i64, sorted: bool) -> Value {
    let mut item = key(k, sorted);
    item["v"] = json!({"N": v.to_string()});
    item
}

/// `req` with its condition, if any.
fn conditioned(mut req: Value, cond: &Cond) -> Value {
    let (expr, values) = match cond {
        Cond::None => return req,
        Cond::NotExists => ("attribute_not_exists(pk)", None),
        Cond::Exists => ("attribute_exists(pk)", None),
        Cond::VEquals(v) => ("v = :c", Some(json!({":c": {"N": v.to_string()}}))),
    };
    req["ConditionExpression"] = json!(expr);
    if let Some(values) = values {
        let merged = req
            .get("ExpressionAttributeValues")
            .cloned()
            .unwrap_or(json!({}));
        let mut merged = merged.as_object().cloned().unwrap();
        merged.extend(values.as_object().cloned().unwrap());
        req["ExpressionAttributeValues"] = Value::Object(merged);
    }
    req
}

/// An answer as text, with the table's name made the keyed one's.
fn answer<T: std::fmt::Debug>(result: StoreResult<T>) -> String {
    format!("{result:?}").replace(ARRIVAL, KEYED)
}

fn in_key_order(items: Vec<Item>) -> Vec<Value> {
    let mut items: Vec<Value> = items.iter().map(item_to_json).collect();
    items.sort_by_key(|i| {
        let text = |a: &str| i[a]["S"].as_str().unwrap_or_default().to_owned();
        (text("pk"), text("sk"))
    });
    items
}

/// Every item of `table`, read in pages of two, sorted by key.
async fn scan_all(store: &EmbeddedStore, table: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = json!({"TableName": table, "Limit": 2});
        if let Some(k) = &start {
            req["ExclusiveStartKey"] = item_to_json(k);
        }
        let out = scan(store, req).await.unwrap();
        items.extend(out.items.unwrap_or_default());
        match out.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return in_key_order(items),
        }
    }
}

/// Every page of a Query of `req`, one item a page, in order: the items
/// and the keys the pages ended at.
async fn query_pages(store: &EmbeddedStore, req: Value) -> String {
    let mut pages = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = req.clone();
        req["Limit"] = json!(1);
        if let Some(k) = &start {
            req["ExclusiveStartKey"] = item_to_json(k);
        }
        match query(store, req).await {
            Err(e) => return answer::<()>(Err(e)),
            Ok(out) => {
                pages.push(format!("{:?} {:?}", out.items, out.last_evaluated_key));
                match out.last_evaluated_key {
                    Some(k) if pages.len() < 10 => start = Some(k),
                    _ => return pages.join("\n"),
                }
            }
        }
    }
}

/// Runs `op` on `table`; the answer as text.
async fn run(store: &EmbeddedStore, now_s: u64, table: &str, op: &Op) -> String {
    let sorted = table.ends_with("sorted");
    match op {
        Op::Put(k, v, c, expiring) => {
            let mut item = item_of(*k, *v, sorted);
            if *expiring {
                item["exp"] = json!({"N": (now_s + 5).to_string()});
            }
            let req = json!({"TableName": table, "Item": item, "ReturnValues": "ALL_OLD"});
            answer(put(store, conditioned(req, c)).await)
        }
        Op::Update(k, n, c) => {
            let req = json!({"TableName": table, "Key": key(*k, sorted), "UpdateExpression": "ADD v :n",
                "ExpressionAttributeValues": {":n": {"N": n.to_string()}}, "ReturnValues": "ALL_NEW"});
            answer(update(store, conditioned(req, c)).await)
        }
        Op::Delete(k, c) => {
            let req =
                json!({"TableName": table, "Key": key(*k, sorted), "ReturnValues": "ALL_OLD"});
            answer(delete(store, conditioned(req, c)).await)
        }
        Op::Get(k) => format!("{:?}", get(store, table, key(*k, sorted)).await),
        Op::Query(k, variant) => {
            let pk = key(*k, sorted)["pk"].clone();
            let mut req = json!({"TableName": table, "KeyConditionExpression": "pk = :k",
                "ExpressionAttributeValues": {":k": pk}});
            match (sorted, variant) {
                (true, 1) => req["ScanIndexForward"] = json!(false),
                (true, 2) => {
                    req["KeyConditionExpression"] = json!("pk = :k AND sk >= :s");
                    req["ExpressionAttributeValues"][":s"] = json!({"S": "s-1"});
                }
                _ => {}
            }
            query_pages(store, req).await
        }
        Op::Scan => format!("{:?}", scan_all(store, table).await),
        Op::Transact(acts) => {
            let items: Vec<Value> = acts
                .iter()
                .map(|(k, act, c)| match act {
                    Act::Put(v) => json!({"Put": conditioned(json!({"TableName": table,
                        "Item": item_of(*k, *v, sorted)}), c)}),
                    Act::Delete => json!({"Delete": conditioned(
                        json!({"TableName": table, "Key": key(*k, sorted)}), c)}),
                    Act::Check => {
                        let c = match c {
                            Cond::None => &Cond::Exists,
                            c => c,
                        };
                        json!({"ConditionCheck": conditioned(
                            json!({"TableName": table, "Key": key(*k, sorted)}), c)})
                    }
                })
                .collect();
            answer(transact(store, json!(items)).await)
        }
        Op::Advance | Op::Sweep | Op::Reopen => String::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn both_layouts_answer_alike(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut s = Reopenable::new();
            create_both(s.store()).await;
            for (n, op) in ops.iter().enumerate() {
                match op {
                    Op::Advance => s.clock.advance_ms(10_000),
                    Op::Sweep => s.store().sweep_now().await.unwrap(),
                    Op::Reopen => s.reopen(),
                    op => {
                        let now_s = s.clock.now_ms() / 1000;
                        for (keyed, arrival) in [(KEYED, ARRIVAL), (KEYED_SORTED, ARRIVAL_SORTED)] {
                            let keyed = run(s.store(), now_s, keyed, op).await;
                            let arrival = run(s.store(), now_s, arrival, op).await;
                            prop_assert_eq!(keyed, arrival, "op {} {:?}", n, op);
                        }
                    }
                }
            }
            // What the sweeper deleted: an expired item is never read, but
            // it counts until it is deleted.
            s.clock.advance_ms(10_000);
            s.store().sweep_now().await.unwrap();
            for (keyed, arrival) in [(KEYED, ARRIVAL), (KEYED_SORTED, ARRIVAL_SORTED)] {
                prop_assert_eq!(
                    s.store().describe_table(keyed).await.unwrap().item_count,
                    s.store().describe_table(arrival).await.unwrap().item_count,
                    "items left after the sweep"
                );
            }
            s.reopen();
            prop_assert_eq!(scan_all(s.store(), KEYED).await, scan_all(s.store(), ARRIVAL).await);
            prop_assert_eq!(
                scan_all(s.store(), KEYED_SORTED).await,
                scan_all(s.store(), ARRIVAL_SORTED).await
            );
            Ok(())
        })?;
    }
}

// ---- the layout ----

async fn put_keys(store: &EmbeddedStore, table: &str, keys: &[&str]) {
    for k in keys {
        put(store, json!({"TableName": table, "Item": {"pk": {"S": k}}}))
            .await
            .unwrap();
    }
}

async fn scan_order(store: &EmbeddedStore, table: &str) -> Vec<String> {
    let out = scan(store, json!({"TableName": table})).await.unwrap();
    out.items
        .unwrap()
        .iter()
        .map(|i| item_to_json(i)["pk"]["S"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn rows_are_kept_in_arrival_order_and_the_layout_stays_with_the_table() {
    let mut s = Reopenable::new();
    create_both(s.store()).await;
    let keys = ["m", "z", "a", "q"];
    put_keys(s.store(), ARRIVAL, &keys).await;
    put_keys(s.store(), KEYED, &keys).await;
    assert_eq!(scan_order(s.store(), ARRIVAL).await, keys);
    assert_eq!(scan_order(s.store(), KEYED).await, ["a", "m", "q", "z"]);
    // An update keeps a row's place; a row put again after its delete
    // comes last.
    update(
        s.store(),
        json!({"TableName": ARRIVAL, "Key": {"pk": {"S": "z"}}, "UpdateExpression": "SET n = :n",
            "ExpressionAttributeValues": {":n": {"N": "1"}}}),
    )
    .await
    .unwrap();
    delete(
        s.store(),
        json!({"TableName": ARRIVAL, "Key": {"pk": {"S": "m"}}}),
    )
    .await
    .unwrap();
    put_keys(s.store(), ARRIVAL, &["m"]).await;
    assert_eq!(scan_order(s.store(), ARRIVAL).await, ["z", "a", "q", "m"]);
    // Opened without naming it, the table keeps its layout and its index.
    let plain = options(s.clock.clone());
    s.reopen_with(plain);
    assert_eq!(scan_order(s.store(), ARRIVAL).await, ["z", "a", "q", "m"]);
    for k in ["m", "z", "a", "q"] {
        let item = get(s.store(), ARRIVAL, json!({"pk": {"S": k}})).await;
        assert!(item.is_some(), "{k} is found after the reopen");
    }
    assert!(
        get(s.store(), ARRIVAL, json!({"pk": {"S": "b"}}))
            .await
            .is_none()
    );
    // Tables created by a store that does not name them keep key order.
    create(s.store(), "later", None, None).await;
    put_keys(s.store(), "later", &keys).await;
    assert_eq!(scan_order(s.store(), "later").await, ["a", "m", "q", "z"]);
}

/// The file's format number (`system`'s `format`; absent is 1).
fn file_format(path: &Path) -> Option<u64> {
    use redb::{ReadableDatabase, TableDefinition};
    let system: TableDefinition<&str, u64> = TableDefinition::new("system");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(system).unwrap();
    table.get("format").unwrap().map(|g| g.value())
}

fn set_file_format(path: &Path, format: u64) {
    use redb::TableDefinition;
    let system: TableDefinition<&str, u64> = TableDefinition::new("system");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(system)
        .unwrap()
        .insert("format", format)
        .unwrap();
    txn.commit().unwrap();
}

/// Adds one to the store file's `wal_applied`, as a commit through the
/// commit log by a build that knows nothing of the index's snapshot would.
fn move_applied_record(path: &Path) {
    use redb::{ReadableTable, TableDefinition};
    let system: TableDefinition<&str, u64> = TableDefinition::new("system");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(system).unwrap();
        let applied = table.get("wal_applied").unwrap().map_or(0, |g| g.value());
        table.insert("wal_applied", applied + 1).unwrap();
    }
    txn.commit().unwrap();
}

/// Every key of `keys` is found but those of `gone`, and an
/// insert-if-absent of one that is found is refused (`keys[1]` is not gone).
async fn all_found_but(store: &EmbeddedStore, keys: &[String], gone: &[String]) {
    for pk in keys {
        let found = get(store, ARRIVAL, json!({"pk": {"S": pk}}))
            .await
            .is_some();
        assert_eq!(found, !gone.contains(pk), "{pk}");
    }
    check_err(
        put(store, insert_if_absent(&keys[1])).await,
        "ConditionalCheckFailedException",
        "",
    );
}

#[tokio::test]
async fn a_clean_close_saves_the_index_and_the_next_open_reads_it_unless_the_file_moved_on() {
    for logged in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(NOW_MS));
        let open = || {
            let options = if logged {
                durable()
            } else {
                arrival_options(clock.clone())
            };
            EmbeddedStore::open(path(&dir), options).unwrap()
        };
        let store = open();
        // A second table in arrival order (by its tag), created first: the
        // open reads one snapshot per table.
        create_sorted(&store, ARRIVAL_SORTED, Some("arrival"))
            .await
            .unwrap();
        for pk in ["x", "y"] {
            let item = json!({"pk": {"S": pk}, "sk": {"S": "1"}});
            put(&store, json!({"TableName": ARRIVAL_SORTED, "Item": item}))
                .await
                .unwrap();
        }
        create(&store, ARRIVAL, None, None).await;
        assert_eq!(store.arrival_index_restored(ARRIVAL), Some(false));
        assert_eq!(store.arrival_index_restored("nope"), None);
        let mut keys: Vec<String> = (0..500).map(|n| scattered(&n.to_string())).collect();
        for pk in &keys {
            put(&store, insert_if_absent(pk)).await.unwrap();
        }
        let gone: Vec<String> = keys.iter().step_by(7).cloned().collect();
        for pk in &gone {
            delete(
                &store,
                json!({"TableName": ARRIVAL, "Key": {"pk": {"S": pk}}}),
            )
            .await
            .unwrap();
        }
        drop(store);
        // Opens the store, whose index must come from the saved one
        // (`saved`) or from the rows, and finds every row by it.
        let reopen = async |saved: bool, keys: &[String]| {
            let store = open();
            for table in [ARRIVAL, ARRIVAL_SORTED] {
                let from = store.arrival_index_restored(table);
                assert_eq!(from, Some(saved), "{table}, logged: {logged}");
            }
            all_found_but(&store, keys, &gone).await;
            for pk in ["x", "y"] {
                let key = json!({"pk": {"S": pk}, "sk": {"S": "1"}});
                assert!(get(&store, ARRIVAL_SORTED, key).await.is_some(), "{pk}");
            }
            store
        };
        // The next open reads the saved index.
        let store = reopen(true, &keys).await;
        // It carries on: new partitions take new places, found again.
        for n in 500..600 {
            let pk = scattered(&n.to_string());
            put(&store, insert_if_absent(&pk)).await.unwrap();
            keys.push(pk);
        }
        all_found_but(&store, &keys, &gone).await;
        drop(store);
        // A commit the saved index does not know of: rebuilt from the rows.
        move_applied_record(&path(&dir));
        drop(reopen(false, &keys).await);
        drop(reopen(true, &keys).await);
    }
}

#[tokio::test]
async fn a_file_with_a_table_in_arrival_order_says_so_and_a_newer_format_is_refused() {
    let mut s = Reopenable::new();
    create(s.store(), KEYED, None, None).await;
    put_keys(s.store(), KEYED, &["a"]).await;
    let file = path(&s.dir);
    drop(s.store.take());
    // Tables in key order only: the format an older build reads.
    assert_eq!(file_format(&file), None);
    s.reopen();
    create(s.store(), ARRIVAL, None, None).await;
    put_keys(s.store(), ARRIVAL, &["b"]).await;
    drop(s.store.take());
    assert_eq!(file_format(&file), Some(3));
    // A build that reads up to format 3 refuses a file of format 4, says
    // why, and leaves the file as it was.
    set_file_format(&file, 4);
    let Err(refused) = EmbeddedStore::open(&file, arrival_options(s.clock.clone())) else {
        panic!("a newer format is refused");
    };
    assert!(
        refused.to_string().contains("its format is 4")
            && refused.to_string().contains("reads formats up to 3"),
        "{refused}"
    );
    assert_eq!(file_format(&file), Some(4));
    // A file of format 2 (an older build's arrival order, expiries in
    // `ttl_index`) is read, and marked 3 at open, before this build
    // writes anything else to it.
    set_file_format(&file, 2);
    s.reopen();
    drop(s.store.take());
    assert_eq!(file_format(&file), Some(3));
    s.reopen();
    assert!(
        get(s.store(), ARRIVAL, json!({"pk": {"S": "b"}}))
            .await
            .is_some()
    );
    assert!(
        get(s.store(), KEYED, json!({"pk": {"S": "a"}}))
            .await
            .is_some()
    );
}

#[tokio::test]
async fn a_partition_keeps_its_items_together_in_sort_key_order() {
    let s = Reopenable::new();
    create_sorted(s.store(), ARRIVAL_SORTED, Some("arrival"))
        .await
        .unwrap();
    for (pk, sk) in [("q", "2"), ("b", "9"), ("q", "1"), ("a", "5"), ("b", "0")] {
        put(
            s.store(),
            json!({"TableName": ARRIVAL_SORTED, "Item": {"pk": {"S": pk}, "sk": {"S": sk}}}),
        )
        .await
        .unwrap();
    }
    // Partitions in the order they came, each in sort-key order.
    let out = scan(s.store(), json!({"TableName": ARRIVAL_SORTED}))
        .await
        .unwrap();
    let rows: Vec<(String, String)> = out
        .items
        .unwrap()
        .iter()
        .map(|i| {
            let i = item_to_json(i);
            let text = |a: &str| i[a]["S"].as_str().unwrap().to_owned();
            (text("pk"), text("sk"))
        })
        .collect();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        rows,
        pairs(&[("q", "1"), ("q", "2"), ("b", "0"), ("b", "9"), ("a", "5")])
    );
}

#[tokio::test]
async fn the_tag_chooses_the_layout_and_is_checked() {
    let s = Reopenable::new();
    // Named in the options, but tagged `key`: key order.
    create_sorted(s.store(), ARRIVAL, Some("key"))
        .await
        .unwrap();
    for pk in ["b", "a"] {
        put(
            s.store(),
            json!({"TableName": ARRIVAL, "Item": {"pk": {"S": pk}, "sk": {"S": "1"}}}),
        )
        .await
        .unwrap();
    }
    assert_eq!(scan_order(s.store(), ARRIVAL).await, ["a", "b"]);
    check_err(
        create_sorted(s.store(), "misspelt", Some("arival")).await,
        "ValidationException",
        "The tag postbox:row-order is arrival or key, not \"arival\"",
    );
    // Arrival order has no stream.
    let mut req = json!({"TableName": "streamed",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_IMAGE"},
        "Tags": [{"Key": "postbox:row-order", "Value": "arrival"}]});
    check_err(
        s.store().create_table(req_of(req.clone())).await,
        "ValidationException",
        "needs a table without a stream",
    );
    // Nothing was created: the same table in key order can be.
    req["Tags"] = json!([]);
    s.store().create_table(req_of(req)).await.unwrap();
    // The layout is set at creation: a tag cannot change it later.
    let arn = s.store().describe_table(ARRIVAL).await.unwrap().table_arn;
    let tag = |v: &str| {
        vec![postbox_store::api::Tag {
            key: "postbox:row-order".into(),
            value: v.into(),
        }]
    };
    check_err(
        s.store().tag_resource(&arn, tag("arrival")).await,
        "ValidationException",
        "keeps its rows in key order",
    );
    s.store().tag_resource(&arn, tag("key")).await.unwrap();
}

#[tokio::test]
async fn a_table_with_a_stream_keeps_key_order_even_when_named() {
    let s = Reopenable::new();
    create(s.store(), ARRIVAL, None, Some("NEW_IMAGE")).await;
    put_keys(s.store(), ARRIVAL, &["b", "a"]).await;
    assert_eq!(scan_order(s.store(), ARRIVAL).await, ["a", "b"]);
}

#[tokio::test]
async fn a_stream_cannot_be_added_to_a_table_in_arrival_order() {
    let s = Reopenable::new();
    create(s.store(), ARRIVAL, None, None).await;
    let req = req_of(json!({"TableName": ARRIVAL,
        "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_IMAGE"}}));
    check_err(
        s.store().update_table(req).await,
        "ValidationException",
        "keeps its rows in arrival order",
    );
    // Nothing changed: the table still works and has no stream.
    put_keys(s.store(), ARRIVAL, &["x"]).await;
    let described = s.store().describe_table(ARRIVAL).await.unwrap();
    assert!(described.latest_stream_arn.is_none());
}

#[tokio::test]
async fn a_scan_goes_on_after_its_start_item_and_refuses_one_that_is_gone() {
    let s = Reopenable::new();
    create(s.store(), ARRIVAL, None, None).await;
    put_keys(s.store(), ARRIVAL, &["c", "a", "b"]).await;
    let page =
        |start: &str| json!({"TableName": ARRIVAL, "ExclusiveStartKey": {"pk": {"S": start}}});
    let out = scan(s.store(), page("c")).await.unwrap();
    let rest: Vec<Value> = out.items.unwrap().iter().map(item_to_json).collect();
    assert_eq!(rest, [json!({"pk": {"S": "a"}}), json!({"pk": {"S": "b"}})]);
    delete(
        s.store(),
        json!({"TableName": ARRIVAL, "Key": {"pk": {"S": "a"}}}),
    )
    .await
    .unwrap();
    check_err(
        scan(s.store(), page("a")).await,
        "ValidationException",
        "The provided starting key is invalid",
    );
}

#[tokio::test]
async fn ttl_turned_on_later_sweeps_the_rows_in_arrival_order() {
    let s = Reopenable::new();
    create(s.store(), ARRIVAL, None, None).await;
    let soon = s.clock.now_ms() / 1000 + 5;
    for k in ["b", "a"] {
        put(
            s.store(),
            json!({"TableName": ARRIVAL, "Item": {"pk": {"S": k}, "exp": {"N": soon.to_string()}}}),
        )
        .await
        .unwrap();
    }
    put_keys(s.store(), ARRIVAL, &["c"]).await;
    expire_by_exp(s.store(), ARRIVAL).await;
    s.clock.advance_ms(10_000);
    s.store().sweep_now().await.unwrap();
    // The sweeper found the rows through their keys and deleted them.
    let described = s.store().describe_table(ARRIVAL).await.unwrap();
    assert_eq!(described.item_count, 1);
    assert_eq!(scan_order(s.store(), ARRIVAL).await, ["c"]);
}

/// How many `ttl_index` rows the file at `path` has per table id.
fn ttl_rows(path: &Path) -> std::collections::BTreeMap<u32, usize> {
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    let index: TableDefinition<(u32, u64, &[u8]), ()> = TableDefinition::new("ttl_index");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let mut out = std::collections::BTreeMap::new();
    if let Ok(table) = txn.open_table(index) {
        for row in table.iter().unwrap() {
            *out.entry(row.unwrap().0.value().0).or_default() += 1;
        }
    }
    out
}

#[tokio::test]
async fn expiries_in_arrival_order_are_noted_by_place_and_found_again_after_a_reopen() {
    let mut s = Reopenable::new();
    create_both(s.store()).await;
    let now = s.clock.now_ms() / 1000;
    // More items than one block of places holds, every third one
    // expiring soon, the rest an hour later, one never.
    let n = 700;
    for table in [KEYED, ARRIVAL] {
        for k in 0..n {
            let exp = if k % 3 == 0 { now + 5 } else { now + 3600 };
            let mut item = json!({"pk": {"S": format!("k{k:04}")}, "exp": {"N": exp.to_string()}});
            if k == 1 {
                item.as_object_mut().unwrap().remove("exp");
            }
            put(s.store(), json!({"TableName": table, "Item": item}))
                .await
                .unwrap();
        }
    }
    let file = path(&s.dir);
    drop(s.store.take());
    // The table in key order indexes each expiry by a row; the one in
    // arrival order writes none.
    let rows = ttl_rows(&file);
    assert_eq!(
        rows.values().copied().collect::<Vec<_>>(),
        [n - 1],
        "{rows:?}"
    );
    // Reopened, the expiries are read back from the rows.
    s.reopen();
    s.clock.advance_ms(10_000);
    s.store().sweep_now().await.unwrap();
    let soon = (0..n).filter(|k| k % 3 == 0).count() as u64;
    for table in [KEYED, ARRIVAL] {
        assert_eq!(
            item_count(s.store(), table).await,
            n as u64 - soon,
            "{table}"
        );
    }
    // A later write into a swept block is noted, and an update that moves
    // an expiry earlier is swept at its new time.
    put(
        s.store(),
        json!({"TableName": ARRIVAL, "Item": {"pk": {"S": "late"}, "exp": {"N": (now + 20).to_string()}}}),
    )
    .await
    .unwrap();
    update(
        s.store(),
        json!({"TableName": ARRIVAL, "Key": {"pk": {"S": "k0001"}}, "UpdateExpression": "SET exp = :e",
            "ExpressionAttributeValues": {":e": {"N": (now + 20).to_string()}}}),
    )
    .await
    .unwrap();
    s.store().sweep_now().await.unwrap();
    assert_eq!(item_count(s.store(), ARRIVAL).await, n as u64 - soon + 1);
    s.clock.advance_ms(20_000);
    s.store().sweep_now().await.unwrap();
    assert_eq!(item_count(s.store(), ARRIVAL).await, n as u64 - soon - 1);
    for k in ["late", "k0001"] {
        assert!(
            get(s.store(), ARRIVAL, json!({"pk": {"S": k}}))
                .await
                .is_none(),
            "{k}"
        );
    }
    s.clock.advance_ms(3_600_000);
    s.store().sweep_now().await.unwrap();
    assert_eq!(
        item_count(s.store(), KEYED).await,
        1,
        "the item without an expiry"
    );
    assert_eq!(item_count(s.store(), ARRIVAL).await, 0);
}

// ---- crashes ----

const CRASH_ROUNDS: u64 = 12;
const CRASH_WRITERS: u64 = 4;

fn durable() -> EmbeddedOptions {
    EmbeddedOptions {
        arrival_tables: vec![ARRIVAL.to_owned()],
        ..EmbeddedOptions::default()
    }
}

/// A key that lands anywhere in key order, as Idempotency-Keys do.
fn scattered(id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}-{id}")
}

fn insert_if_absent(pk: &str) -> Value {
    json!({"TableName": ARRIVAL, "Item": {"pk": {"S": pk}, "body": {"S": "x".repeat(200)}},
        "ConditionExpression": "attribute_not_exists(pk)"})
}

/// The child: inserts keys if absent, and deletes every third one it
/// inserted, printing `ACK put|del <key>` after each acknowledged write
/// and `ACK try <key>` before a delete.
#[test]
#[ignore = "run by acknowledged_rows_survive_sigkill as a child process"]
fn arrival_crash_child() {
    let Some(path) = std::env::var_os("POSTBOX_ARRIVAL_CHILD") else {
        return;
    };
    let round = std::env::var("POSTBOX_ARRIVAL_ROUND").unwrap();
    run_child(async move {
        let store = EmbeddedStore::open(path, durable()).unwrap();
        let tasks: Vec<_> = (0..CRASH_WRITERS)
            .map(|w| {
                let (store, round) = (store.clone(), round.clone());
                tokio::spawn(async move {
                    for i in 0u64.. {
                        let pk = scattered(&format!("{round}-{w}-{i}"));
                        put(&store, insert_if_absent(&pk)).await.unwrap();
                        ack("put", &pk);
                        if i % 3 == 2 {
                            let gone = scattered(&format!("{round}-{w}-{}", i - 1));
                            // From here the row may be gone, acknowledged or not.
                            ack("try", &gone);
                            delete(
                                &store,
                                json!({"TableName": ARRIVAL, "Key": {"pk": {"S": gone}}}),
                            )
                            .await
                            .unwrap();
                            ack("del", &gone);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = path(&dir);
    {
        let store = EmbeddedStore::open(&path, durable()).unwrap();
        create(&store, ARRIVAL, None, None).await;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let (mut inserted, mut deleted) = (BTreeSet::new(), BTreeSet::new());
    let mut deleting = BTreeSet::new();
    for round in 0..CRASH_ROUNDS {
        let env = [
            ("POSTBOX_ARRIVAL_CHILD", path.display().to_string()),
            ("POSTBOX_ARRIVAL_ROUND", round.to_string()),
        ];
        let wait = (seed.wrapping_mul(round + 1) >> 7) % 400;
        let kill = KillAfter::in_round(round, 50, wait);
        let acks = acks_until_killed("arrival_crash_child", &env, kill);
        for line in &acks {
            let mut parts = line.split(' ').skip(1);
            match (parts.next(), parts.next()) {
                (Some("put"), Some(k)) => inserted.insert(k.to_owned()),
                (Some("del"), Some(k)) => deleted.insert(k.to_owned()),
                (Some("try"), Some(k)) => deleting.insert(k.to_owned()),
                _ => panic!("unexpected child output {line}"),
            };
        }
        let wrote = !acks.is_empty();
        check_after_crash(&path, &inserted, &deleting, &deleted, round, wrote).await;
    }
    assert!(
        inserted.len() > CRASH_ROUNDS as usize && !deleted.is_empty(),
        "the child should get writes acknowledged ({} inserts, {} deletes were)",
        inserted.len(),
        deleted.len()
    );
    eprintln!(
        "arrival crash test: {CRASH_ROUNDS} kills, {} inserts and {} deletes acknowledged, all kept",
        inserted.len(),
        deleted.len()
    );
}

async fn check_after_crash(
    path: &Path,
    inserted: &BTreeSet<String>,
    deleting: &BTreeSet<String>,
    deleted: &BTreeSet<String>,
    round: u64,
    wrote: bool,
) {
    let store = EmbeddedStore::open(path, durable()).unwrap();
    // The child opened the store (from the index this function's last
    // clean close saved) and wrote: killed, it saved nothing, so the index
    // is rebuilt from the rows.
    if wrote {
        assert_eq!(
            store.arrival_index_restored(ARRIVAL),
            Some(false),
            "round {round}"
        );
    }
    for pk in inserted.difference(deleting) {
        let found = get(&store, ARRIVAL, json!({"pk": {"S": pk}})).await;
        assert!(found.is_some(), "round {round}: acknowledged {pk} is lost");
        check_err(
            put(&store, insert_if_absent(pk)).await,
            "ConditionalCheckFailedException",
            "",
        );
    }
    for pk in deleted {
        let found = get(&store, ARRIVAL, json!({"pk": {"S": pk}})).await;
        assert!(found.is_none(), "round {round}: deleted {pk} is back");
    }
    // Every stored row is found through the rebuilt index.
    let mut stored = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut req = json!({"TableName": ARRIVAL});
        if let Some(k) = &start {
            req["ExclusiveStartKey"] = item_to_json(k);
        }
        let out = scan(&store, req).await.unwrap();
        stored.extend(out.items.unwrap());
        match out.last_evaluated_key {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    assert!(stored.len() >= inserted.difference(deleting).count());
    for item in stored.iter().rev().take(300) {
        let pk = item_to_json(item)["pk"].clone();
        assert!(get(&store, ARRIVAL, json!({"pk": pk})).await.is_some());
    }
}

//! Model-based property test: random sequences of puts, updates, deletes,
//! conditional writes and transactions on a few keys, run against the
//! embedded store and against a plain in-memory model (a BTreeMap and a
//! list of stream records). Outcomes, final items and stream records must
//! agree.

mod common;

use std::collections::BTreeMap;

use common::*;
use postbox_item::{AttributeValue, Item};
use postbox_store::api::EventName;
use postbox_store::embedded::EmbeddedStore;
use postbox_store::{ChangeStreams, StoreError};
use proptest::prelude::*;
use serde_json::{Value, json};

const KEYS: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Cond {
    None,
    NotExists,
    VEquals(i64),
}

#[derive(Clone, Debug)]
enum Write {
    Put(i64),
    SetV(i64),
    AddN(i64),
    Delete,
    Check,
}

#[derive(Clone, Debug)]
enum Op {
    Single(usize, Write, Cond),
    Transact(Vec<(usize, Write, Cond)>),
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        Just(Cond::None),
        Just(Cond::NotExists),
        (0i64..3).prop_map(Cond::VEquals)
    ]
}

fn write(allow_check: bool) -> impl Strategy<Value = Write> {
    let base = prop_oneof![
        (0i64..3).prop_map(Write::Put),
        (0i64..3).prop_map(Write::SetV),
        (-2i64..3).prop_map(Write::AddN),
        Just(Write::Delete),
    ];
    if allow_check {
        prop_oneof![4 => base, 1 => Just(Write::Check)].boxed()
    } else {
        base.boxed()
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..KEYS.len(), write(false), cond()).prop_map(|(k, w, c)| Op::Single(k, w, c)),
        1 => proptest::collection::vec((write(true), cond()), 1..=3).prop_map(|actions| {
            Op::Transact(actions.into_iter().enumerate().map(|(k, (w, c))| (k, w, c)).collect())
        }),
    ]
}

// ---- the model ----

#[derive(Default)]
struct Model {
    items: BTreeMap<String, Item>,
    stream: Vec<(EventName, Option<Item>, Option<Item>)>,
}

fn key_item(k: usize) -> Item {
    [("pk".to_owned(), AttributeValue::s(KEYS[k]))].into()
}

impl Model {
    fn holds(&self, k: usize, c: &Cond) -> bool {
        let item = self.items.get(KEYS[k]);
        match c {
            Cond::None => true,
            Cond::NotExists => item.is_none(),
            Cond::VEquals(v) => item.and_then(|i| i.get("v")) == Some(&AttributeValue::n(*v)),
        }
    }

    /// The item after `w`, `None` for a delete, unchanged for a check.
    fn after(&self, k: usize, w: &Write) -> Option<Item> {
        let old = self.items.get(KEYS[k]).cloned();
        match w {
            Write::Put(v) => Some(
                [
                    ("pk".to_owned(), AttributeValue::s(KEYS[k])),
                    ("v".to_owned(), AttributeValue::n(*v)),
                ]
                .into(),
            ),
            Write::SetV(v) => {
                let mut i = old.unwrap_or_else(|| key_item(k));
                i.insert("v".into(), AttributeValue::n(*v));
                Some(i)
            }
            Write::AddN(d) => {
                let mut i = old.unwrap_or_else(|| key_item(k));
                let n = i
                    .get("n")
                    .and_then(|n| n.as_n())
                    .and_then(|n| n.to_i64())
                    .unwrap_or(0);
                i.insert("n".into(), AttributeValue::n(n + d));
                Some(i)
            }
            Write::Delete => None,
            Write::Check => old,
        }
    }

    fn commit(&mut self, k: usize, new: Option<Item>) {
        let old = self.items.get(KEYS[k]).cloned();
        if old == new {
            return;
        }
        let event = match (&old, &new) {
            (None, _) => EventName::Insert,
            (Some(_), Some(_)) => EventName::Modify,
            (Some(_), None) => EventName::Remove,
        };
        match &new {
            Some(i) => self.items.insert(KEYS[k].to_owned(), i.clone()),
            None => self.items.remove(KEYS[k]),
        };
        self.stream.push((event, old, new));
    }

    /// Applies `op`; returns the outcome as a short string.
    fn apply(&mut self, op: &Op) -> String {
        match op {
            Op::Single(k, w, c) => {
                if !self.holds(*k, c) {
                    return "ConditionalCheckFailed".into();
                }
                let new = self.after(*k, w);
                self.commit(*k, new);
                "ok".into()
            }
            Op::Transact(actions) => {
                let reasons: Vec<&str> = actions
                    .iter()
                    .map(|(k, _, c)| {
                        if self.holds(*k, c) {
                            "None"
                        } else {
                            "ConditionalCheckFailed"
                        }
                    })
                    .collect();
                if reasons.contains(&"ConditionalCheckFailed") {
                    return format!("cancelled {reasons:?}");
                }
                let news: Vec<_> = actions
                    .iter()
                    .map(|(k, w, _)| (*k, self.after(*k, w)))
                    .collect();
                for (k, new) in news {
                    self.commit(k, new);
                }
                "ok".into()
            }
        }
    }
}

// ---- the same operations as requests ----

fn condition_json(c: &Cond, req: &mut Value) {
    match c {
        Cond::None => {}
        Cond::NotExists => req["ConditionExpression"] = json!("attribute_not_exists(pk)"),
        Cond::VEquals(v) => {
            req["ConditionExpression"] = json!("v = :cv");
            req["ExpressionAttributeValues"][":cv"] = json!({"N": v.to_string()});
        }
    }
}

/// The request body of one action (TransactItems form) and its action name.
fn action_json(k: usize, w: &Write, c: &Cond) -> (&'static str, Value) {
    let key = json!({"pk": {"S": KEYS[k]}});
    let (name, mut req) = match w {
        Write::Put(v) => (
            "Put",
            json!({"TableName": "tbl", "Item": {"pk": {"S": KEYS[k]}, "v": {"N": v.to_string()}}}),
        ),
        Write::SetV(v) => (
            "Update",
            json!({"TableName": "tbl", "Key": key, "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": {"N": v.to_string()}}}),
        ),
        Write::AddN(d) => (
            "Update",
            json!({"TableName": "tbl", "Key": key, "UpdateExpression": "ADD n :d", "ExpressionAttributeValues": {":d": {"N": d.to_string()}}}),
        ),
        Write::Delete => ("Delete", json!({"TableName": "tbl", "Key": key})),
        Write::Check => (
            "ConditionCheck",
            json!({"TableName": "tbl", "Key": key, "ConditionExpression": "attribute_exists(pk) OR attribute_not_exists(pk)"}),
        ),
    };
    if !matches!((w, c), (Write::Check, Cond::None)) {
        condition_json(c, &mut req);
    }
    (name, req)
}

async fn run(store: &EmbeddedStore, op: &Op) -> String {
    let result = match op {
        Op::Single(k, w, c) => {
            let (name, req) = action_json(*k, w, c);
            match name {
                "Put" => put(store, req).await.map(|_| ()),
                "Update" => update(store, req).await.map(|_| ()),
                "Delete" => delete(store, req).await.map(|_| ()),
                _ => unreachable!("single writes never check"),
            }
        }
        Op::Transact(actions) => {
            let items: Vec<Value> = actions
                .iter()
                .map(|(k, w, c)| {
                    let (name, req) = action_json(*k, w, c);
                    json!({ name: req })
                })
                .collect();
            transact(store, json!(items)).await
        }
    };
    match result {
        Ok(()) => "ok".into(),
        Err(StoreError::ConditionalCheckFailed { .. }) => "ConditionalCheckFailed".into(),
        Err(StoreError::TransactionCanceled { reasons }) => {
            format!(
                "cancelled {:?}",
                reasons.iter().map(|r| r.code.as_str()).collect::<Vec<_>>()
            )
        }
        Err(e) => format!("error {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn store_agrees_with_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let s = open_with_table(None).await;
            let mut model = Model::default();
            for (i, op) in ops.iter().enumerate() {
                let expected = model.apply(op);
                let got = run(&s, op).await;
                prop_assert_eq!(&got, &expected, "op {} {:?}", i, op);
            }
            let scanned = scan(&s, json!({"TableName": "tbl"})).await.unwrap().items.unwrap();
            let mut by_key: BTreeMap<String, Item> = BTreeMap::new();
            for it in scanned {
                by_key.insert(it["pk"].as_s().unwrap().to_owned(), it);
            }
            prop_assert_eq!(&by_key, &model.items);
            let records = s.read_stream("tbl", 0, 10_000).await.unwrap();
            let got: Vec<_> = records.iter().map(|r| (r.event_name, r.old_image.clone(), r.new_image.clone())).collect();
            prop_assert_eq!(got, model.stream.clone());
            prop_assert!(records.windows(2).all(|w| w[0].sequence_number < w[1].sequence_number));
            Ok(())
        })?;
    }
}

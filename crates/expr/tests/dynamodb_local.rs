//! Differential check against answers recorded from DynamoDB Local.
//!
//! `golden/dynamodb-local.json` holds every expression of this crate's unit
//! tests with what DynamoDB Local answered (condition true or false, the
//! item after an update or projection, or the error message). This test runs
//! the same cases through postbox-expr and requires the same answers, so the
//! hand-written expectations of the unit tests are anchored to DynamoDB's
//! behaviour. Known, deliberate differences are listed in `KNOWN` with why.

use std::collections::BTreeMap;

use postbox_expr::{
    Placeholders, parse_condition, parse_key_condition, parse_projection, parse_update,
};
use postbox_item::{AttributeValue, Item, item_from_json, item_to_json};
use serde_json::{Value, json};

/// Cases whose answer differs on purpose, with the reason.
const KNOWN: &[(&str, &str)] = &[
    // DynamoDB itself names the missing key ("...element: a" in tests run
    // against the live service); DynamoDB Local leaves the name out.
    ("sk = :a", "real DynamoDB names the missing partition key"),
    (
        "pk = :p AND x = :a",
        "real DynamoDB names the sort key the condition should be on",
    ),
];

/// Errors that belong to the store, not to this crate: DynamoDB Local checks
/// key value types against the table schema, which only the store knows.
const STORE_CHECKS: &[&str] = &["Condition parameter type does not match schema type"];

fn answer(case: &Value, fixture: &Item) -> Value {
    let own_item = case.get("item").map(|i| item_from_json(i).unwrap());
    let fixture = own_item.as_ref().unwrap_or(fixture);
    let names: Option<BTreeMap<String, String>> = case
        .get("names")
        .map(|n| serde_json::from_value(n.clone()).unwrap());
    let values: Option<BTreeMap<String, AttributeValue>> = case
        .get("values")
        .map(|v| item_from_json(v).unwrap().into_iter().collect());
    let mut ph = Placeholders::new(names.as_ref(), values.as_ref());
    let expr = case["expr"].as_str().unwrap();
    let result = match case["kind"].as_str().unwrap() {
        "condition" => parse_condition(expr, &mut ph).map(|c| {
            let holds = if case.get("no_item").is_some() {
                c.evaluate(None)
            } else {
                c.evaluate(Some(fixture))
            };
            json!({ "holds": holds })
        }),
        "update" => parse_update(expr, &mut ph).and_then(|u| {
            let mut item = item_from_json(&case["before"]).unwrap();
            u.apply(&mut item)?;
            Ok(json!({ "item": item_to_json(&item) }))
        }),
        "projection" => parse_projection(expr, &mut ph)
            .map(|p| json!({ "item": item_to_json(&p.apply(fixture)) })),
        "key_condition" => {
            parse_key_condition(expr, &mut ph, "pk", Some("sk")).map(|_| json!({ "ok": true }))
        }
        other => panic!("unknown case kind {other}"),
    };
    result.unwrap_or_else(|e| json!({ "error": e.message }))
}

/// An answer in comparable form: items go through the item model, because
/// DynamoDB Local returns numbers as written (`1E+2`) where DynamoDB and
/// Postbox return them normalised (`100`).
fn normalised(answer: &Value) -> Value {
    let mut answer = answer.clone();
    if let Some(o) = answer.as_object_mut() {
        o.remove("code");
        if let Some(item) = o.get_mut("item") {
            *item = item_to_json(&item_from_json(item).unwrap());
        }
    }
    answer
}

/// Clashing paths are compared as "Two document paths ..." only. When
/// several pairs of an expression's paths clash, DynamoDB Local names one
/// pair (and calls it an overlap or a conflict) by rules we do not
/// reproduce; it sometimes names two paths that do not clash at all. The
/// unit tests pin the whole message for single clashes, where the answers
/// agree exactly.
fn both_clash(a: &Value, b: &Value) -> bool {
    let clash = |v: &Value| {
        v["error"]
            .as_str()
            .is_some_and(|m| m.contains("Two document paths"))
    };
    clash(a) && clash(b)
}

#[test]
fn unit_test_expressions_match_dynamodb_local() {
    check(include_str!("golden/dynamodb-local.json"));
}

#[test]
fn random_expressions_match_dynamodb_local() {
    check(include_str!("golden/dynamodb-local-random.json"));
}

fn check(golden: &str) {
    let doc: Value = serde_json::from_str(golden).unwrap();
    let fixture = item_from_json(&doc["item"]).unwrap();
    let mut mismatches = Vec::new();
    let cases = doc["cases"].as_array().unwrap();
    for case in cases {
        let expr = case["expr"].as_str().unwrap();
        let expected = normalised(&case["dynamodb_local"]);
        let got = normalised(&answer(case, &fixture));
        let same_clash = both_clash(&expected, &got);
        let store_check = expected["error"]
            .as_str()
            .is_some_and(|m| STORE_CHECKS.iter().any(|s| m.contains(s)))
            && got.get("ok").is_some();
        if got != expected && !same_clash && !store_check && !KNOWN.iter().any(|(k, _)| *k == expr)
        {
            mismatches.push(format!(
                "{} {expr:?}\n  dynamodb local: {expected}\n  postbox-expr:   {got}",
                case["kind"]
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
}

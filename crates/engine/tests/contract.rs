//! The reachability contract at startup: the engine refuses to start with a
//! subscription that could never run, naming it and the reason; the same
//! rules back `postbox catalog check` (see `Report`).

mod common;

use common::*;
use postbox_engine::catalog::Catalog;
use postbox_engine::contract::{Report, Rule};
use postbox_engine::{Engine, StartError};

const BASE: &str = r#"
[[event_types]]
name = "CONTACTADDRESS"
producers = ["contacts"]

[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]

[[entities]]
name = "CONTACT"
"#;

fn catalog_with(subscriptions: &str) -> Catalog {
    Catalog::from_toml(&format!("{BASE}\n{subscriptions}"), "test").unwrap()
}

async fn refusal(subscriptions: &str) -> Vec<postbox_engine::contract::Violation> {
    let t = open().await;
    match Engine::builder(t.store.clone(), catalog_with(subscriptions))
        .build()
        .await
    {
        Ok(_) => panic!("the engine started with {subscriptions}"),
        Err(StartError::Contract(v)) => {
            let e = StartError::Contract(v.clone());
            assert!(e.to_string().contains("refuses to start"), "{e}");
            v
        }
        Err(e) => panic!("{e}"),
    }
}

fn sub(name: &str, glob: &str, lane: &str) -> String {
    format!(
        "[[subscriptions]]\nname = \"{name}\"\nglob = \"{glob}\"\nlane = \"{lane}\"\nhandler = \"h::{name}\"\n"
    )
}

#[tokio::test]
async fn a_glob_matching_nothing_is_refused_with_did_you_mean() {
    let v = refusal(&sub("addr", "CONTACTADDR", "DURABLE")).await;
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].rule, Rule::NoMatch);
    assert_eq!(v[0].subject, "addr");
    assert_eq!(v[0].suggestion.as_deref(), Some("CONTACTADDRESS"));
    assert!(
        v[0].message.contains("\"addr\"")
            && v[0].message.contains("Did you mean \"CONTACTADDRESS\"?"),
        "{}",
        v[0].message
    );

    let v = refusal(&sub("typo", "ORDER_PLACD", "DURABLE")).await;
    assert_eq!(v[0].suggestion.as_deref(), Some("ORDER_PLACED"));
    // A wildcard glob matching nothing gets no guess.
    let v = refusal(&sub("wild", "SHIP*", "DURABLE")).await;
    assert_eq!((v[0].rule, v[0].suggestion.clone()), (Rule::NoMatch, None));
    // A row glob for an undeclared entity.
    let v = refusal(&sub("rows", "row:CUSTOMER:*", "BEST_EFFORT")).await;
    assert_eq!(v[0].rule, Rule::NoMatch);
}

#[tokio::test]
async fn wrong_lanes_are_refused() {
    for lane in ["INLINE", "LOCAL", "DURABLE"] {
        let v = refusal(&sub("rows", "row:CONTACT:*", lane)).await;
        assert_eq!(v[0].rule, Rule::RowGlobOffBestEffort, "{lane}");
        assert!(
            v[0].message.contains("\"rows\"") && v[0].message.contains(lane),
            "{}",
            v[0].message
        );
    }
    let v = refusal(&sub("orders", "ORDER_*", "BEST_EFFORT")).await;
    assert_eq!(v[0].rule, Rule::DomainGlobOnBestEffort);
    assert!(v[0].message.contains("\"orders\""));
}

#[tokio::test]
async fn duplicates_and_missing_handlers_are_refused() {
    let v = refusal(&format!(
        "{}{}",
        sub("x", "ORDER_*", "DURABLE"),
        sub("x", "CONTACT*", "DURABLE")
    ))
    .await;
    assert_eq!(v[0].rule, Rule::DuplicateSubscription);
    // INLINE and LOCAL handlers run in this process, so they must be registered.
    let v = refusal(&sub("mirror", "ORDER_*", "INLINE")).await;
    assert_eq!(v[0].rule, Rule::MissingHandler);
    assert!(v[0].message.contains("h::mirror"));
}

#[tokio::test]
async fn a_sound_catalog_starts() {
    let t = open().await;
    let subs = format!(
        "{}{}{}",
        sub("a", "ORDER_*", "DURABLE"),
        sub("b", "row:CONTACT:INSERT", "BEST_EFFORT"),
        sub("c", "*", "LOCAL")
    );
    Engine::builder(t.store.clone(), catalog_with(&subs))
        .local("h::c", |_| async { Ok(()) })
        .build()
        .await
        .unwrap();
}

#[test]
fn catalog_check_runs_the_contract_both_ways() {
    let catalog = Catalog::from_toml(
        r#"
        [[event_types]]
        name = "ORDER_PLACED"
        producers = ["orders"]
        [[event_types]]
        name = "ORPHAN"
        [[producers]]
        name = "orders"
        emits = ["ORDER_PLACED", "ORDER_CANCELLED"]
        [[subscriptions]]
        name = "s"
        glob = "ORDER_*"
        lane = "DURABLE"
        handler = "h"
        "#,
        "test",
    )
    .unwrap();
    let report = Report::new(&catalog);
    let rules: Vec<Rule> = report.violations.iter().map(|v| v.rule).collect();
    assert_eq!(rules, vec![Rule::UndeclaredEmittedType, Rule::NoProducer]);
    assert!(!report.ok());
    let json = report.to_json();
    assert_eq!(json["ok"], false);
    assert_eq!(
        json["subscriptions"][0]["matches"],
        serde_json::json!(["ORDER_PLACED"])
    );
    assert_eq!(json["violations"][1]["rule"], "no_producer");
    let md = report.to_markdown();
    assert!(
        md.contains("| `ORDER_PLACED` | orders | s (DURABLE) |"),
        "{md}"
    );
    assert!(report.to_text().contains("2 violation(s)"));
    // The shipped example passes.
    let example = Catalog::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/catalog.toml"
    ))
    .unwrap();
    let r = Report::new(&example);
    assert!(r.ok(), "{}", r.to_text());
}

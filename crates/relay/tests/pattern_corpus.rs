//! The event-pattern corpus: AWS documentation examples as data files under
//! `tests/patterns/`, each with events that must and must not match, and
//! patterns AWS refuses with the reason it gives.

use postbox_relay::Pattern;
use serde_json::Value;

fn load(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/patterns/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    doc["cases"].as_array().expect("cases").clone()
}

/// Runs every matching case of a file; returns how many checks ran.
fn run_matching(name: &str) -> usize {
    let mut checks = 0;
    for case in load(name) {
        let title = case["name"].as_str().unwrap_or("?");
        let (pattern, _) = Pattern::parse(&case["pattern"].to_string())
            .unwrap_or_else(|e| panic!("{name}/{title}: {e}"));
        for event in case["match"].as_array().expect("match") {
            assert!(
                pattern.matches(event),
                "{name}/{title}: should match {event}"
            );
            checks += 1;
        }
        for event in case["no_match"].as_array().expect("no_match") {
            assert!(
                !pattern.matches(event),
                "{name}/{title}: should not match {event}"
            );
            checks += 1;
        }
    }
    checks
}

#[test]
fn eventbridge_documentation_examples() {
    assert!(run_matching("eventbridge_docs.json") >= 50);
}

#[test]
fn pipes_dynamodb_examples() {
    assert!(run_matching("pipes_dynamodb.json") >= 15);
}

#[test]
fn refused_patterns_give_the_reason() {
    for case in load("refused.json") {
        let text = case["pattern"].as_str().expect("pattern text");
        let want = case["reason"].as_str().expect("reason");
        match Pattern::parse(text) {
            Ok(_) => panic!("{text} should be refused"),
            Err(e) => assert!(e.to_string().contains(want), "{text}: {e} lacks {want:?}"),
        }
    }
}

//! Unit tests of patterns: one `check` helper, data-driven.

use serde_json::{Value, json};

use super::Pattern;

/// Asserts that `pattern` matches each of `yes` and none of `no`.
fn check(pattern: Value, yes: &[Value], no: &[Value]) {
    let (p, _) = Pattern::parse(&pattern.to_string()).unwrap_or_else(|e| panic!("{pattern}: {e}"));
    for doc in yes {
        assert!(p.matches(doc), "{pattern} should match {doc}");
    }
    for doc in no {
        assert!(!p.matches(doc), "{pattern} should not match {doc}");
    }
}

/// Asserts that `pattern` is refused with a reason containing `why`.
fn refused(pattern: &str, why: &str) {
    match Pattern::parse(pattern) {
        Ok(_) => panic!("{pattern} should be refused"),
        Err(e) => assert!(
            e.reason.contains(why),
            "{pattern}: reason {:?} lacks {why:?}",
            e.reason
        ),
    }
}

#[test]
fn exact_values_and_arrays_as_or() {
    check(
        json!({"a": ["x", "y"]}),
        &[
            json!({"a": "x"}),
            json!({"a": "y"}),
            json!({"a": ["z", "y"]}),
        ],
        &[json!({"a": "z"}), json!({}), json!({"a": {"x": 1}})],
    );
    check(
        json!({"n": [5]}),
        &[json!({"n": 5}), json!({"n": 5.0}), json!({"n": [1, 5]})],
        &[json!({"n": "5"})],
    );
    check(
        json!({"b": [true], "z": [null]}),
        &[json!({"b": true, "z": null})],
        &[json!({"b": true}), json!({"b": "true", "z": null})],
    );
    check(
        json!({"e": [""]}),
        &[json!({"e": ""})],
        &[json!({"e": null}), json!({})],
    );
}

#[test]
fn nested_fields_and_arrays_of_objects() {
    check(
        json!({"dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}}}}),
        &[json!({"dynamodb": {"NewImage": {"status": {"S": "PENDING"}}}})],
        &[
            json!({"dynamodb": {"OldImage": {"status": {"S": "PENDING"}}}}),
            json!({"dynamodb": "x"}),
        ],
    );
    check(
        json!({"a": {"b": ["x"]}}),
        &[json!({"a": [{"b": "y"}, {"b": "x"}]})],
        &[json!({"a": [{"b": "y"}]})],
    );
}

#[test]
fn string_operators() {
    check(
        json!({"s": [{"prefix": "us-"}]}),
        &[json!({"s": "us-east-1"})],
        &[json!({"s": "eu-west-1"}), json!({"s": 5})],
    );
    check(
        json!({"s": [{"prefix": {"equals-ignore-case": "EventB"}}]}),
        &[json!({"s": "eventbridge"})],
        &[json!({"s": "xeventb"})],
    );
    check(
        json!({"s": [{"suffix": ".png"}]}),
        &[json!({"s": "a.png"})],
        &[json!({"s": "a.PNG"})],
    );
    check(
        json!({"s": [{"suffix": {"equals-ignore-case": ".png"}}]}),
        &[json!({"s": "a.PNG"})],
        &[json!({"s": "a.jpg"})],
    );
    check(
        json!({"s": [{"equals-ignore-case": "alice"}]}),
        &[json!({"s": "ALICE"})],
        &[json!({"s": "alicia"})],
    );
    check(
        json!({"s": [{"wildcard": "dir/*.png"}]}),
        &[json!({"s": "dir/a.png"}), json!({"s": "dir/.png"})],
        &[json!({"s": "dir/a.jpg"})],
    );
    check(
        json!({"s": [{"wildcard": "a*b*c"}]}),
        &[json!({"s": "abc"}), json!({"s": "aXbYbc"})],
        &[json!({"s": "acb"})],
    );
    check(
        json!({"s": [{"wildcard": "a\\*b"}]}),
        &[json!({"s": "a*b"})],
        &[json!({"s": "axb"})],
    );
}

#[test]
fn anything_but() {
    check(
        json!({"s": [{"anything-but": "init"}]}),
        &[json!({"s": "running"}), json!({"s": ["init", "x"]})],
        &[json!({"s": "init"}), json!({})],
    );
    check(
        json!({"n": [{"anything-but": [1, 2]}]}),
        &[json!({"n": 3})],
        &[json!({"n": 2.0})],
    );
    check(
        json!({"s": [{"anything-but": {"prefix": "us-"}}]}),
        &[json!({"s": "eu-1"})],
        &[json!({"s": "us-1"})],
    );
    check(
        json!({"s": [{"anything-but": {"suffix": ".png"}}]}),
        &[json!({"s": "a.jpg"})],
        &[json!({"s": "a.png"})],
    );
    check(
        json!({"s": [{"anything-but": {"equals-ignore-case": ["A", "b"]}}]}),
        &[json!({"s": "c"})],
        &[json!({"s": "B"})],
    );
    check(
        json!({"s": [{"anything-but": {"wildcard": "*/lib/*"}}]}),
        &[json!({"s": "/usr/bin/x"})],
        &[json!({"s": "/usr/lib/x"})],
    );
}

#[test]
fn numeric_and_exists() {
    check(
        json!({"n": [{"numeric": [">", 0, "<=", 5]}]}),
        &[json!({"n": 5}), json!({"n": 0.5})],
        &[json!({"n": 0}), json!({"n": "3"})],
    );
    check(
        json!({"n": [{"numeric": ["=", 3.0]}]}),
        &[json!({"n": 3})],
        &[json!({"n": 3.1})],
    );
    check(
        json!({"a": [{"exists": true}]}),
        &[json!({"a": null}), json!({"a": "x"}), json!({"a": [1]})],
        &[json!({}), json!({"a": []}), json!({"a": {"b": 1}})],
    );
    check(
        json!({"a": {"b": [{"exists": false}]}}),
        &[json!({}), json!({"a": {}}), json!({"a": "x"})],
        &[json!({"a": {"b": 0}})],
    );
}

#[test]
fn or_alternatives() {
    check(
        json!({"k": ["x"], "$or": [{"a": [1]}, {"b": [{"prefix": "p"}]}]}),
        &[json!({"k": "x", "a": 1}), json!({"k": "x", "b": "pq"})],
        &[
            json!({"k": "x", "a": 2, "b": "q"}),
            json!({"k": "y", "a": 1}),
        ],
    );
}

#[test]
fn refusals_name_the_field_and_the_reason() {
    refused(r#"{"a": "x"}"#, "\"a\" must be an object or an array");
    refused(
        r#"{"a": {"b": 5}}"#,
        "\"a.b\" must be an object or an array",
    );
    refused(r#"{"a": []}"#, "Empty arrays are not allowed");
    refused(r#"{"a": [[1]]}"#, "Match value must be");
    refused(
        r#"{"a": [{"regex": "x"}]}"#,
        "Unrecognized match type regex",
    );
    refused(
        r#"{"a": [{"prefix": "x", "suffix": "y"}]}"#,
        "exactly one key",
    );
    refused(
        r#"{"a": [{"prefix": 5}]}"#,
        "prefix match pattern must be a string",
    );
    refused(
        r#"{"a": [{"numeric": [">", 5, "<", 1]}]}"#,
        "Bottom must be less than top",
    );
    refused(
        r#"{"a": [{"numeric": [">", 1, ">=", 2]}]}"#,
        "same side twice",
    );
    refused(
        r#"{"a": [{"numeric": ["!=", 1]}]}"#,
        "Unrecognized numeric range operator",
    );
    refused(r#"{"a": [{"numeric": [">", "1"]}]}"#, "must be numeric");
    refused(
        r#"{"a": [{"numeric": ["=", 1, "<", 4]}]}"#,
        "cannot be combined",
    );
    refused(r#"{"a": [{"exists": "yes"}]}"#, "either true or false");
    refused(
        r#"{"a": [{"wildcard": "a**b"}]}"#,
        "Consecutive wildcard characters at pos 2",
    );
    refused(
        r#"{"a": [{"wildcard": "a\\b"}]}"#,
        "Invalid escape character",
    );
    refused(
        r#"{"a": [{"anything-but": [1, "x"]}]}"#,
        "only strings or only numbers",
    );
    refused(
        r#"{"a": [{"anything-but": {"prefix": ""}}]}"#,
        "Null prefix not allowed",
    );
    refused(
        r#"{"a": [{"anything-but": {"contains": "x"}}]}"#,
        "Unsupported anything-but pattern",
    );
    refused(r#"{"$or": [{"a": ["x"]}]}"#, "at least two alternatives");
    refused(r#"["x"]"#, "Filter is not an object");
    refused("{not json", "not JSON");
    refused(
        &format!(r#"{{"a": ["{}"]}}"#, "x".repeat(5000)),
        "at most 4096",
    );
}

#[test]
fn event_name_and_numbers_in_n_warn() {
    let (_, warnings) = Pattern::parse(r#"{"eventName": ["INSERT"]}"#).unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0]
            .message
            .contains("cannot filter a DynamoDB stream on eventName")
    );
    let (_, warnings) =
        Pattern::parse(r#"{"dynamodb": {"NewImage": {"n": {"N": [{"numeric": [">", 1]}]}}}}"#)
            .unwrap();
    assert_eq!(warnings[0].path, "dynamodb.NewImage.n.N");
    let (_, warnings) =
        Pattern::parse(r#"{"dynamodb": {"NewImage": {"s": {"S": ["x"]}}}}"#).unwrap();
    assert!(warnings.is_empty());
}

#[test]
fn keys_refuse_a_record_only_when_it_cannot_match() {
    let event = json!({"pk": {"S": "TENANT#a#EVENT"}, "sk": {"N": "1"}});
    let head = json!({"pk": {"S": "TENANT#a#HEAD"}, "sk": {"S": "HEAD"}});
    let patterns = [
        // The default events pipe's filter.
        json!({"dynamodb": {
            "Keys": {"pk": {"S": [{"suffix": "#EVENT"}]}},
            "NewImage": {"id": {"S": [{"exists": true}]}},
            "OldImage": {"pk": {"S": [{"exists": false}]}},
        }}),
        json!({"dynamodb": {"Keys": {"pk": {"S": [{"prefix": "TENANT#a#H"}]}}}}),
        json!({"dynamodb": {"Keys": {"sk": {"N": ["1"]}}}}),
        json!({"dynamodb": {"Keys": {"sk": {"S": [{"exists": false}]}}}}),
        json!({"dynamodb": {"NewImage": {"id": {"S": ["x"]}}}}),
        json!({"eventName": ["INSERT"]}),
        // Keys named only in alternatives: undecided on the keys.
        json!({"$or": [
            {"dynamodb": {"Keys": {"pk": {"S": ["nothing"]}}}},
            {"dynamodb": {"NewImage": {"id": {"S": ["x"]}}}},
        ]}),
        json!({"dynamodb": {
            "Keys": {"pk": {"S": [{"suffix": "#EVENT"}]}},
            "$or": [{"NewImage": {"id": {"S": ["x"]}}}, {"OldImage": {"id": {"S": ["x"]}}}],
        }}),
        // Alternatives within the keys, and an attribute they lack.
        json!({"dynamodb": {"Keys": {"$or": [
            {"pk": {"S": [{"suffix": "#HEAD"}]}, "sk": {"S": ["x"]}},
            {"sk": {"N": ["1"]}},
        ]}}}),
        json!({"dynamodb": {"Keys": {"id": {"S": [{"exists": false}]}}}}),
    ];
    // What each pattern's keys allow, for (event, head).
    let allowed = [
        (true, false),
        (false, true),
        (true, false),
        (true, false),
        (true, true),
        (true, true),
        (true, true),
        (true, false),
        (true, false),
        (true, true),
    ];
    let images = [
        json!({}),
        json!({"NewImage": {"id": {"S": "x"}}}),
        json!({"NewImage": {"id": {"S": "x"}}, "OldImage": {"id": {"S": "x"}, "pk": {"S": "p"}}}),
        json!({"OldImage": {"id": {"S": "x"}}}),
    ];
    for (pattern, (event_allowed, head_allowed)) in patterns.iter().zip(allowed) {
        let (p, _) = Pattern::parse(&pattern.to_string()).unwrap();
        let item = |keys: &Value| postbox_item::item_from_json(keys).unwrap();
        assert_eq!(
            p.keys_allow(&item(&event)),
            event_allowed,
            "{pattern} on {event}"
        );
        assert_eq!(
            p.keys_allow(&item(&head)),
            head_allowed,
            "{pattern} on {head}"
        );
        // Refused on its keys means no record with them matches, whatever
        // else it holds.
        for keys in [&event, &head] {
            for rest in &images {
                let mut dynamodb = rest.clone();
                dynamodb["Keys"] = keys.clone();
                let record = json!({"eventName": "INSERT", "dynamodb": dynamodb});
                if p.matches(&record) {
                    assert!(p.keys_allow(&item(keys)), "{pattern} matches {record}");
                }
            }
        }
    }
}

//! Key condition expressions: what a Query accepts, DynamoDB's messages for
//! what it refuses, and matching sort keys.

use postbox_item::AttributeValue;
use serde_json::json;

use crate::fixtures::{value, with_placeholders};
use crate::{SortKeyCondition, parse_key_condition};

/// Parses `src` for a table keyed by `pk` and `sk`; `expect` is the parsed
/// condition as `partition | sort` in Debug form, or the error message.
fn check(src: &str, expect: &str) {
    check_schema(src, Some("sk"), expect);
}

fn check_schema(src: &str, sort_key: Option<&str>, expect: &str) {
    let got = with_placeholders(|ph| parse_key_condition(src, ph, "pk", sort_key))
        .map(|k| format!("{:?} | {:?}", k.partition, k.sort))
        .unwrap_or_else(|e| e.message);
    assert_eq!(got, expect, "key condition {src:?}");
}

#[test]
fn accepted() {
    for (src, expect) in [
        ("pk = :p", r#"S("p") | None"#),
        ("#pk = :p", r#"S("p") | None"#),
        (":p = pk", r#"S("p") | None"#),
        ("pk = :p AND sk = :a", r#"S("p") | Some(Eq(S("a")))"#),
        ("pk = :p and sk > :n1", r#"S("p") | Some(Gt(N(N(1))))"#),
        ("pk = :p AND sk >= :n1", r#"S("p") | Some(Ge(N(N(1))))"#),
        ("pk = :p AND #sk < :n1", r#"S("p") | Some(Lt(N(N(1))))"#),
        ("pk = :p AND sk <= :n1", r#"S("p") | Some(Le(N(N(1))))"#),
        // A value on the left flips the comparison.
        ("pk = :p AND :n1 < sk", r#"S("p") | Some(Gt(N(N(1))))"#),
        (
            "sk BETWEEN :n1 AND :n5 AND pk = :p",
            r#"S("p") | Some(Between(N(N(1)), N(N(5))))"#,
        ),
        (
            "begins_with(sk, :ab) AND pk = :p",
            r#"S("p") | Some(BeginsWith(S("ab")))"#,
        ),
        ("(pk = :p) AND (sk = :a)", r#"S("p") | Some(Eq(S("a")))"#),
    ] {
        check(src, expect);
    }
}

#[test]
fn refused() {
    for (src, expect) in [
        (
            "pk = :p OR sk = :a",
            "Invalid operator used in KeyConditionExpression: OR",
        ),
        (
            "NOT pk = :p",
            "Invalid operator used in KeyConditionExpression: NOT",
        ),
        (
            "pk IN (:p)",
            "Invalid operator used in KeyConditionExpression: IN",
        ),
        (
            "pk <> :p",
            "Invalid operator used in KeyConditionExpression: <>",
        ),
        (
            "attribute_exists(pk)",
            "Invalid operator used in KeyConditionExpression: attribute_exists",
        ),
        (
            "attribute_not_exists(pk)",
            "Invalid operator used in KeyConditionExpression: attribute_not_exists",
        ),
        (
            "pk = :p AND contains(sk, :a)",
            "Invalid operator used in KeyConditionExpression: contains",
        ),
        (
            "attribute_type(pk, :tS)",
            "Invalid operator used in KeyConditionExpression: attribute_type",
        ),
        (
            "pk = :p AND sk > :a AND sk < :z",
            "KeyConditionExpressions must only contain one condition per key",
        ),
        (
            "pk = :p AND pk = :p",
            "KeyConditionExpressions must only contain one condition per key",
        ),
        (
            "pk = :p AND sk = :a AND x = :z",
            "Conditions can be of length 1 or 2 only",
        ),
        ("pk > :p", "Query key condition not supported"),
        ("begins_with(pk, :p)", "Query key condition not supported"),
        (
            "pk = :p AND x = :a",
            "Query condition missed key schema element: sk",
        ),
        (
            "pk = :p AND x = :a AND sk = :a",
            "Conditions can be of length 1 or 2 only",
        ),
        ("sk = :a", "Query condition missed key schema element: pk"),
        (
            "pk = :p AND size(sk) > :n1",
            "KeyConditionExpressions cannot contain nested operations",
        ),
        (
            "pk = :p AND m.x = :n1",
            "KeyConditionExpressions cannot have conditions on nested attributes",
        ),
        (
            "pk = :p AND l[0] = :n1",
            "KeyConditionExpressions cannot have conditions on nested attributes",
        ),
        (
            "pk = :p AND sk.x = :a",
            "Key attributes must be scalars; list random access '[]' and map lookup '.' are not allowed: Key: sk",
        ),
        (
            "pk = :p AND sk[0] = :a",
            "Key attributes must be scalars; list random access '[]' and map lookup '.' are not allowed: Key: sk",
        ),
        (
            "pk = :empty",
            "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: pk",
        ),
        (
            "pk = :p AND sk > :empty",
            "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: sk",
        ),
        (
            "pk = :p AND begins_with(sk, :empty)",
            "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: sk",
        ),
        (
            "((pk = :p))",
            "Invalid KeyConditionExpression: The expression has redundant parentheses;",
        ),
        (
            "pk = :nope OR sk = :a",
            "Invalid KeyConditionExpression: An expression attribute value used in expression is not defined; attribute value: :nope",
        ),
        (
            "pk = :p AND sk = :a OR sk = :z",
            "Invalid operator used in KeyConditionExpression: OR",
        ),
        (
            "pk = sk",
            "Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition",
        ),
        (
            "pk = :p AND sk BETWEEN :a AND x",
            "Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition",
        ),
        (
            ":p = :p",
            "Invalid condition in KeyConditionExpression: No key attribute specified",
        ),
        (
            "pk = :p AND :n1 BETWEEN sk AND :n5",
            "Invalid condition in KeyConditionExpression: BETWEEN operator must have the key attribute as its first operand",
        ),
        (
            "pk = :p AND begins_with(:ab, sk)",
            "Invalid condition in KeyConditionExpression: begins_with operator must have the key attribute as its first operand",
        ),
        // What any condition would refuse is refused first, in condition terms.
        (
            "pk = :p AND begins_with(sk, :n1)",
            "Invalid KeyConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: N",
        ),
        (
            "pk = :p AND sk BETWEEN :z AND :a",
            "Invalid KeyConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: AttributeValue: {S:z}, upper bound operand: AttributeValue: {S:a}",
        ),
        (
            "pk = ",
            "Invalid KeyConditionExpression: Syntax error; token: \"<EOF>\", near: \"= \"",
        ),
        (
            "",
            "Invalid KeyConditionExpression: The expression can not be empty;",
        ),
        (
            "pk = :nope",
            "Invalid KeyConditionExpression: An expression attribute value used in expression is not defined; attribute value: :nope",
        ),
    ] {
        check(src, expect);
    }
    check_schema(
        "pk = :p AND sk = :a",
        None,
        "Query key condition not supported",
    );
    check_schema("pk = :p", None, r#"S("p") | None"#);
}

#[test]
fn sort_key_matching() {
    let (a, b, c) = (
        AttributeValue::s("a"),
        AttributeValue::s("b"),
        AttributeValue::s("c"),
    );
    let n = |i: i64| AttributeValue::n(i);
    for (cond, v, expect) in [
        (SortKeyCondition::Eq(b.clone()), &b, true),
        (SortKeyCondition::Eq(b.clone()), &a, false),
        (SortKeyCondition::Lt(b.clone()), &a, true),
        (SortKeyCondition::Lt(b.clone()), &b, false),
        (SortKeyCondition::Le(b.clone()), &b, true),
        (SortKeyCondition::Gt(b.clone()), &c, true),
        (SortKeyCondition::Gt(b.clone()), &b, false),
        (SortKeyCondition::Ge(b.clone()), &b, true),
        (SortKeyCondition::Between(a.clone(), b.clone()), &a, true),
        (SortKeyCondition::Between(a.clone(), b.clone()), &b, true),
        (SortKeyCondition::Between(a.clone(), b.clone()), &c, false),
        (
            SortKeyCondition::BeginsWith(AttributeValue::s("ab")),
            &AttributeValue::s("abc"),
            true,
        ),
        (
            SortKeyCondition::BeginsWith(AttributeValue::s("ab")),
            &a,
            false,
        ),
        (
            SortKeyCondition::BeginsWith(value(json!({"B": "AQ=="}))),
            &value(json!({"B": "AQI="})),
            true,
        ),
        // Numbers compare numerically, not as text.
        (SortKeyCondition::Lt(n(10)), &n(9), true),
        (SortKeyCondition::Gt(n(10)), &n(9), false),
        (
            SortKeyCondition::Eq(n(1)),
            &value(json!({"N": "1.0"})),
            true,
        ),
        // Binary compares by unsigned bytes.
        (
            SortKeyCondition::Gt(value(json!({"B": "AQ=="}))),
            &value(json!({"B": "/w=="})),
            true,
        ),
        // Another type never matches.
        (SortKeyCondition::Lt(n(10)), &a, false),
        (SortKeyCondition::Eq(a.clone()), &n(1), false),
    ] {
        assert_eq!(cond.matches(v), expect, "{cond:?} on {v:?}");
    }
    assert_eq!(
        SortKeyCondition::Between(a.clone(), b.clone()).values(),
        [&a, &b]
    );
}

//! Projection expressions and the projection of items.

use postbox_item::item_to_json;
use serde_json::{Value, json};

use crate::fixtures::{item, with_placeholders};
use crate::{Path, PathElement, parse_projection, project};

/// Projects the fixture item through `src`; `expect` is the projected item
/// in DynamoDB JSON, or the error message as a JSON string.
fn check(src: &str, expect: Value) {
    let got = with_placeholders(|ph| parse_projection(src, ph))
        .map(|p| item_to_json(&p.apply(&item())))
        .unwrap_or_else(|e| Value::String(e.message));
    assert_eq!(got, expect, "projection {src:?}");
}

fn invalid(what: &str) -> Value {
    Value::String(format!("Invalid ProjectionExpression: {what}"))
}

#[test]
fn projects_nested_structure() {
    check("pk", json!({"pk": {"S": "p"}}));
    check(
        "pk, m.a.b, l[2].y, #s",
        json!({
            "pk": {"S": "p"}, "status": {"S": "active"},
            "m": {"M": {"a": {"M": {"b": {"N": "1"}}}}},
            "l": {"L": [{"M": {"y": {"N": "2"}}}]}
        }),
    );
    // Elements of one list come back compacted, in index order.
    check(
        "l[2], l[0]",
        json!({"l": {"L": [{"N": "1"}, {"M": {"y": {"N": "2"}}}]}}),
    );
    check(
        "m.a, m.x",
        json!({"m": {"M": {"a": {"M": {"b": {"N": "1"}}}, "x": {"N": "1"}}}}),
    );
    check(
        "m.l[1], m.x",
        json!({"m": {"M": {"l": {"L": [{"S": "q"}]}, "x": {"N": "1"}}}}),
    );
    check("#dot", json!({"a.b": {"S": "dotted"}}));
    check("m.Size", json!({}));
    check("gone, m.zz, l[9], s.x", json!({}));
    check("gone, l.y", json!({}));
    check(" pk ,\tn ", json!({"pk": {"S": "p"}, "n": {"N": "5"}}));
}

#[test]
fn errors() {
    check("", invalid("The expression can not be empty;"));
    check(
        "a, a",
        invalid(
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a]",
        ),
    );
    check(
        "m, m.a",
        invalid(
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [m], path two: [m, a]",
        ),
    );
    check(
        "#m.a, m",
        invalid(
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [m, a], path two: [m]",
        ),
    );
    check(
        "l[0], l.a",
        invalid(
            "Two document paths conflict with each other; must remove or rewrite one of these paths; path one: [l, [0]], path two: [l, a]",
        ),
    );
    check(
        "status",
        invalid("Attribute name is a reserved keyword; reserved keyword: status"),
    );
    check(
        "#nope",
        invalid(
            "An expression attribute name used in the document path is not defined; attribute name: #nope",
        ),
    );
    check("a,", invalid("Syntax error; token: \"<EOF>\", near: \",\""));
    check("a b", invalid("Syntax error; token: \"b\", near: \"a b\""));
    check(
        "a = :n1",
        invalid("Syntax error; token: \"=\", near: \"a = :n1\""),
    );
    check(
        ":n1",
        invalid("Syntax error; token: \":n1\", near: \":n1\""),
    );
    check(
        "size(a)",
        invalid("Syntax error; token: \"(\", near: \"size(a\""),
    );
    check(
        "status, #nope",
        invalid("Attribute name is a reserved keyword; reserved keyword: status"),
    );
    check(
        "m.status",
        invalid("Attribute name is a reserved keyword; reserved keyword: status"),
    );
    check(" ", invalid("Syntax error; token: \"<EOF>\", near: \" \""));
    check("_a", invalid("Syntax error; token: \"_\", near: \"_a\""));
    check(
        "a.set",
        invalid("Syntax error; token: \"set\", near: \".set\""),
    );
    check(
        "a, b.c, b",
        invalid(
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [b, c], path two: [b]",
        ),
    );
    check(
        "a.b, a[0]",
        invalid(
            "Two document paths conflict with each other; must remove or rewrite one of these paths; path one: [a, b], path two: [a, [0]]",
        ),
    );
}

#[test]
fn project_merges_overlapping_paths() {
    let p = |parts: &[&str]| {
        Path::from_elements(
            parts
                .iter()
                .map(|s| {
                    s.parse()
                        .map_or_else(|_| PathElement::Name((*s).to_owned()), PathElement::Index)
                })
                .collect(),
        )
        .unwrap()
    };
    let got = project(
        &[p(&["m", "a"]), p(&["m"]), p(&["l", "1"]), p(&["l", "1"])],
        &item(),
    );
    assert_eq!(
        item_to_json(&got),
        json!({
            "m": {"M": {"a": {"M": {"b": {"N": "1"}}}, "x": {"N": "1"}, "l": {"L": [{"S": "p"}, {"S": "q"}]}}},
            "l": {"L": [{"S": "x"}]}
        })
    );
    assert!(project(&[], &item()).is_empty());
}

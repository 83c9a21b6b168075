//! Update expressions: parsing, DynamoDB's parse-time errors, and applying
//! each clause to items, with the runtime errors DynamoDB gives.

use postbox_item::item_to_json;
use serde_json::{Value, json};

use crate::fixtures::{parse_item, with_placeholders};
use crate::parse_update;

/// Applies `src` to `before` (DynamoDB JSON); `expect` is the item after,
/// or the error message as a JSON string.
fn check(src: &str, before: Value, expect: Value) {
    let mut item = parse_item(&before);
    let got = with_placeholders(|ph| parse_update(src, ph))
        .and_then(|u| u.apply(&mut item))
        .map(|()| item_to_json(&item))
        .unwrap_or_else(|e| Value::String(e.message));
    assert_eq!(got, expect, "update {src:?} on {before}");
}

/// A parse-time error, prefixed as DynamoDB does.
fn check_invalid(src: &str, what: &str) {
    let got = with_placeholders(|ph| parse_update(src, ph))
        .map(|_| ())
        .unwrap_err()
        .message;
    assert_eq!(
        got,
        format!("Invalid UpdateExpression: {what}"),
        "update {src:?}"
    );
}

fn syntax(token: &str, near: &str) -> String {
    format!("Syntax error; token: \"{token}\", near: \"{near}\"")
}

const INVALID_PATH: &str =
    "The document path provided in the update expression is invalid for update";
const WRONG_TYPE: &str = "An operand in the update expression has an incorrect data type";
const NO_ATTRIBUTE: &str =
    "The provided expression refers to an attribute that does not exist in the item";

#[test]
fn set() {
    check("SET a = :n1", json!({}), json!({"a": {"N": "1"}}));
    check(
        "set a = :n1, b = :s",
        json!({}),
        json!({"a": {"N": "1"}, "b": {"S": "abc"}}),
    );
    check(
        "SET a = :s",
        json!({"a": {"N": "1"}}),
        json!({"a": {"S": "abc"}}),
    );
    check(
        "SET a = n",
        json!({"n": {"N": "5"}}),
        json!({"a": {"N": "5"}, "n": {"N": "5"}}),
    );
    check("SET #dot = :x", json!({}), json!({"a.b": {"S": "x"}}));
    check("SET a = (:n1)", json!({}), json!({"a": {"N": "1"}}));
    check("SET a = gone", json!({}), json!(NO_ATTRIBUTE));
    // Right-hand sides read the item as it was before the update.
    check(
        "SET a = b, b = a",
        json!({"a": {"N": "1"}, "b": {"N": "2"}}),
        json!({"a": {"N": "2"}, "b": {"N": "1"}}),
    );
}

#[test]
fn set_arithmetic() {
    check(
        "SET n = n + :n1",
        json!({"n": {"N": "5"}}),
        json!({"n": {"N": "6"}}),
    );
    check(
        "SET n = n - :n10",
        json!({"n": {"N": "5"}}),
        json!({"n": {"N": "-5"}}),
    );
    check("SET a = :n1 + :half", json!({}), json!({"a": {"N": "1.5"}}));
    check(
        "SET a = (n + :n1)",
        json!({"n": {"N": "5"}}),
        json!({"a": {"N": "6"}, "n": {"N": "5"}}),
    );
    check(
        "SET a = if_not_exists(a, :n0) + :n1",
        json!({}),
        json!({"a": {"N": "1"}}),
    );
    check(
        "SET a = if_not_exists(a, :n0) + :n1",
        json!({"a": {"N": "5"}}),
        json!({"a": {"N": "6"}}),
    );
    check("SET a = gone + :n1", json!({}), json!(NO_ATTRIBUTE));
    check(
        "SET a = s + :n1",
        json!({"s": {"S": "x"}}),
        json!(WRONG_TYPE),
    );
    check(
        "SET a = :n1 - s",
        json!({"s": {"SS": ["x"]}}),
        json!(WRONG_TYPE),
    );
    check(
        "SET n = n + :tiny",
        json!({"n": {"N": "1"}}),
        json!("DynamoDB only supports precision up to 38 digits"),
    );
    check(
        "ADD n :tiny",
        json!({"n": {"N": "1E+20"}}),
        json!("DynamoDB only supports precision up to 38 digits"),
    );
    check(
        "SET n = n + :big",
        json!({"n": {"N": "9E+125"}}),
        json!(
            "Number overflow. Attempting to store a number with magnitude larger than supported range"
        ),
    );
}

#[test]
fn set_functions() {
    check(
        "SET l = list_append(l, :lx)",
        json!({"l": {"L": [{"N": "1"}]}}),
        json!({"l": {"L": [{"N": "1"}, {"S": "x"}]}}),
    );
    check(
        "SET l = list_append(:lx, l)",
        json!({"l": {"L": [{"N": "1"}]}}),
        json!({"l": {"L": [{"S": "x"}, {"N": "1"}]}}),
    );
    check(
        "SET l = list_append(if_not_exists(l, :l), :lx)",
        json!({}),
        json!({"l": {"L": [{"N": "9"}, {"S": "x"}]}}),
    );
    check(
        "SET l = list_append(l, :lx)",
        json!({"l": {"N": "1"}}),
        json!(WRONG_TYPE),
    );
    check(
        "SET l = list_append(l, :lx)",
        json!({}),
        json!(NO_ATTRIBUTE),
    );
    check(
        "SET a = if_not_exists(b, :n1)",
        json!({"b": {"S": "x"}}),
        json!({"a": {"S": "x"}, "b": {"S": "x"}}),
    );
    check(
        "SET a = if_not_exists(m.x, :n1)",
        json!({}),
        json!({"a": {"N": "1"}}),
    );
}

#[test]
fn set_nested() {
    check(
        "SET m.a = :n1",
        json!({"m": {"M": {}}}),
        json!({"m": {"M": {"a": {"N": "1"}}}}),
    );
    check(
        "SET #m.#a = :n1",
        json!({"m": {"M": {"a": {"N": "0"}}}}),
        json!({"m": {"M": {"a": {"N": "1"}}}}),
    );
    check(
        "SET m.a.b = :n1",
        json!({"m": {"M": {}}}),
        json!(INVALID_PATH),
    );
    check("SET m.a = :n1", json!({}), json!(INVALID_PATH));
    check(
        "SET m.a = :n1",
        json!({"m": {"S": "x"}}),
        json!(INVALID_PATH),
    );
    check(
        "SET m.a = :n1",
        json!({"m": {"L": []}}),
        json!(INVALID_PATH),
    );
    check(
        "SET l[1] = :x",
        json!({"l": {"L": [{"N": "1"}, {"N": "2"}]}}),
        json!({"l": {"L": [{"N": "1"}, {"S": "x"}]}}),
    );
    // An index past the end appends, in index order when there are several.
    check(
        "SET l[5] = :x",
        json!({"l": {"L": [{"N": "1"}]}}),
        json!({"l": {"L": [{"N": "1"}, {"S": "x"}]}}),
    );
    let appended = json!({"l": {"L": [{"N": "1"}, {"S": "x"}, {"S": "a"}]}});
    check(
        "SET l[5] = :x, l[9] = :a",
        json!({"l": {"L": [{"N": "1"}]}}),
        appended.clone(),
    );
    check(
        "SET l[9] = :a, l[5] = :x",
        json!({"l": {"L": [{"N": "1"}]}}),
        appended,
    );
    check(
        "SET l[0] = :x",
        json!({"l": {"S": "x"}}),
        json!(INVALID_PATH),
    );
    check("SET l[0] = :x", json!({}), json!(INVALID_PATH));
    check(
        "SET l[0] = :x",
        json!({"l": {"M": {}}}),
        json!(INVALID_PATH),
    );
    check(
        "SET l[1].y = :n1",
        json!({"l": {"L": [{"N": "1"}, {"M": {}}]}}),
        json!({"l": {"L": [{"N": "1"}, {"M": {"y": {"N": "1"}}}]}}),
    );
    check(
        "SET l[3].y = :n1",
        json!({"l": {"L": [{"N": "1"}]}}),
        json!(INVALID_PATH),
    );
    // SET goes before REMOVE, whatever the clause order; indexes are positions before the update.
    let three = json!({"l": {"L": [{"N": "0"}, {"N": "1"}, {"N": "2"}]}});
    check(
        "SET l[1] = :x REMOVE l[0]",
        three.clone(),
        json!({"l": {"L": [{"S": "x"}, {"N": "2"}]}}),
    );
    check(
        "REMOVE l[0] SET l[1] = :x",
        three.clone(),
        json!({"l": {"L": [{"S": "x"}, {"N": "2"}]}}),
    );
    check(
        "SET l[3] = :x REMOVE l[0]",
        three,
        json!({"l": {"L": [{"N": "1"}, {"N": "2"}, {"S": "x"}]}}),
    );
}

#[test]
fn remove() {
    check(
        "REMOVE a",
        json!({"a": {"N": "1"}, "b": {"N": "2"}}),
        json!({"b": {"N": "2"}}),
    );
    check(
        "REMOVE a, b",
        json!({"a": {"N": "1"}, "b": {"N": "2"}}),
        json!({}),
    );
    check(
        "REMOVE gone",
        json!({"a": {"N": "1"}}),
        json!({"a": {"N": "1"}}),
    );
    check(
        "REMOVE m.a",
        json!({"m": {"M": {"a": {"N": "1"}, "b": {"N": "2"}}}}),
        json!({"m": {"M": {"b": {"N": "2"}}}}),
    );
    check(
        "REMOVE m.gone",
        json!({"m": {"M": {}}}),
        json!({"m": {"M": {}}}),
    );
    // A missing or wrong-typed parent is an error; a missing last step is not.
    check("REMOVE m.a", json!({}), json!(INVALID_PATH));
    check("REMOVE m.a", json!({"m": {"L": []}}), json!(INVALID_PATH));
    check(
        "REMOVE l[0].x",
        json!({"l": {"L": []}}),
        json!(INVALID_PATH),
    );
    check("REMOVE a[0]", json!({"a": {"S": "x"}}), json!(INVALID_PATH));
    // Indexes are positions in the original list, whatever the order written.
    let list = json!({"l": {"L": [{"N": "0"}, {"N": "1"}, {"N": "2"}, {"N": "3"}]}});
    let rest = json!({"l": {"L": [{"N": "1"}, {"N": "3"}]}});
    check("REMOVE l[0], l[2]", list.clone(), rest.clone());
    check("REMOVE l[2], l[0]", list.clone(), rest);
    check("REMOVE l[9]", list.clone(), list.clone());
    check(
        "REMOVE l[1]",
        list,
        json!({"l": {"L": [{"N": "0"}, {"N": "2"}, {"N": "3"}]}}),
    );
}

#[test]
fn add() {
    check(
        "ADD n :n1",
        json!({"n": {"N": "5"}}),
        json!({"n": {"N": "6"}}),
    );
    check("ADD n :n1", json!({}), json!({"n": {"N": "1"}}));
    check(
        "add n :half, m.c :n1",
        json!({"m": {"M": {}}}),
        json!({"m": {"M": {"c": {"N": "1"}}}, "n": {"N": "0.5"}}),
    );
    check(
        "ADD ss :ssb",
        json!({"ss": {"SS": ["a", "b"]}}),
        json!({"ss": {"SS": ["a", "b", "c"]}}),
    );
    check("ADD ss :ssb", json!({}), json!({"ss": {"SS": ["b", "c"]}}));
    check(
        "ADD ns :ns3",
        json!({"ns": {"NS": ["1"]}}),
        json!({"ns": {"NS": ["1", "3"]}}),
    );
    check(
        "ADD bs :bs",
        json!({"bs": {"BS": ["Ag=="]}}),
        json!({"bs": {"BS": ["AQ==", "Ag=="]}}),
    );
    check("ADD s :n1", json!({"s": {"S": "x"}}), json!(WRONG_TYPE));
    check(
        "ADD ss :ns3",
        json!({"ss": {"SS": ["a"]}}),
        json!(WRONG_TYPE),
    );
    check("ADD n :ss", json!({"n": {"N": "1"}}), json!(WRONG_TYPE));
    check("ADD m.c :n1", json!({}), json!(INVALID_PATH));
}

#[test]
fn delete() {
    check(
        "DELETE ss :ssb",
        json!({"ss": {"SS": ["a", "b"]}}),
        json!({"ss": {"SS": ["a"]}}),
    );
    // Deleting every element removes the attribute: sets are never empty.
    check(
        "DELETE ss :ssab",
        json!({"ss": {"SS": ["a", "b"]}}),
        json!({}),
    );
    check("DELETE ss :ssb", json!({}), json!({}));
    check(
        "DELETE ns :ns",
        json!({"ns": {"NS": ["1", "3"]}}),
        json!({"ns": {"NS": ["3"]}}),
    );
    check(
        "DELETE m.ss :ss",
        json!({"m": {"M": {"ss": {"SS": ["a", "z"]}}}}),
        json!({"m": {"M": {"ss": {"SS": ["z"]}}}}),
    );
    check(
        "DELETE ss :ns3",
        json!({"ss": {"SS": ["a"]}}),
        json!(WRONG_TYPE),
    );
    check("DELETE n :ss", json!({"n": {"N": "5"}}), json!(WRONG_TYPE));
    check("DELETE m.ss :ss", json!({}), json!(INVALID_PATH));
}

#[test]
fn clauses_combine_in_any_order() {
    let before = json!({"b": {"N": "1"}, "d": {"SS": ["a", "z"]}});
    let after = json!({"a": {"N": "1"}, "c": {"N": "1"}, "d": {"SS": ["z"]}});
    check(
        "SET a = :n1 REMOVE b ADD c :n1 DELETE d :ss",
        before.clone(),
        after.clone(),
    );
    check("delete d :ss add c :n1 remove b set a = :n1", before, after);
    let u = with_placeholders(|ph| {
        parse_update(
            "SET a = :n1, m.x = :n1 REMOVE l[0] ADD n :n1 DELETE ss :ss",
            ph,
        )
    })
    .unwrap();
    let paths: Vec<String> = u.paths().iter().map(ToString::to_string).collect();
    assert_eq!(paths, ["a", "m.x", "l[0]", "n", "ss"]);
    assert!(u.paths()[0].is_top_level() && !u.paths()[1].is_top_level());
    assert_eq!(u.paths()[1].top_level(), "m");
}

#[test]
fn syntax_errors() {
    for (src, expect) in [
        ("a = :n1", syntax("a", "a =")),
        ("SET", syntax("<EOF>", "SET")),
        ("SET a", syntax("<EOF>", "a")),
        ("SET a = ", syntax("<EOF>", "= ")),
        ("SET a = :n1,", syntax("<EOF>", ",")),
        ("SET a = :n1 + ", syntax("<EOF>", "+ ")),
        ("SET a = n + n + :n1", syntax("+", "n + :n1")),
        ("SET a = n * :n1", syntax("*", "n * :n1")),
        ("SET a = :n1 b = :n1", syntax("b", ":n1 b =")),
        ("SET a = :n1, REMOVE b", syntax("REMOVE", ", REMOVE b")),
        ("SET _a = :n1", syntax("_", "SET _a")),
        ("REMOVE set", syntax("set", "REMOVE set")),
        ("SET a.and = :n1", syntax("and", ".and =")),
        ("SET a = (:n1 + :n1) + :n1", syntax("+", ") + :n1")),
        ("ADD a b", syntax("b", "a b")),
        ("DELETE a", syntax("<EOF>", "a")),
        ("REMOVE a = :n1", syntax("=", "a = :n1")),
        ("REMOVE", syntax("<EOF>", "REMOVE")),
        ("SET a = if_not_exists()", syntax(")", "()")),
        ("SET :n1 = a", syntax(":n1", "SET :n1 =")),
        ("UPDATE a = :n1", syntax("UPDATE", "UPDATE a")),
    ] {
        check_invalid(src, &expect);
    }
}

#[test]
fn semantic_errors() {
    for (src, expect) in [
        ("", "The expression can not be empty;"),
        (
            "SET a = :n1 SET b = :n1",
            "The \"SET\" section can only be used once in an update expression;",
        ),
        (
            "REMOVE a remove b",
            "The \"REMOVE\" section can only be used once in an update expression;",
        ),
        (
            "REMOVE a, a",
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a]",
        ),
        (
            "SET a = :n1 REMOVE a.b",
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a, b]",
        ),
        (
            "SET #a = :n1 ADD a :n1",
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a]",
        ),
        (
            "SET a[0] = :n1 REMOVE a.b",
            "Two document paths conflict with each other; must remove or rewrite one of these paths; path one: [a, [0]], path two: [a, b]",
        ),
        (
            "SET status = :n1",
            "Attribute name is a reserved keyword; reserved keyword: status",
        ),
        (
            "SET #nope = :n1",
            "An expression attribute name used in the document path is not defined; attribute name: #nope",
        ),
        (
            "SET a = :nope",
            "An expression attribute value used in expression is not defined; attribute value: :nope",
        ),
        (
            "ADD a :nope",
            "An expression attribute value used in expression is not defined; attribute value: :nope",
        ),
        ("SET a = foo(b)", "Invalid function name; function: foo"),
        (
            "SET a = size(b)",
            "The function is not allowed in an update expression; function: size",
        ),
        (
            "SET a = contains(b, :s)",
            "The function is not allowed in an update expression; function: contains",
        ),
        (
            "SET a = IF_NOT_EXISTS(a, :n1)",
            "Invalid function name; function: IF_NOT_EXISTS",
        ),
        (
            "SET a = ((:n1))",
            "The expression has redundant parentheses;",
        ),
        (
            "SET a = ((:n1 + :n1))",
            "The expression has redundant parentheses;",
        ),
        (
            "SET a = if_not_exists(:n1, :n1)",
            "Operator or function requires a document path; operator or function: if_not_exists",
        ),
        (
            "SET a = if_not_exists(a)",
            "Incorrect number of operands for operator or function; operator or function: if_not_exists, number of operands: 1",
        ),
        (
            "SET a = list_append(:s, a)",
            "Incorrect operand type for operator or function; operator or function: list_append, operand type: S",
        ),
        (
            "SET a = a + :s",
            "Incorrect operand type for operator or function; operator or function: +, operand type: S",
        ),
        (
            "SET a = :null - a",
            "Incorrect operand type for operator or function; operator or function: -, operand type: NULL",
        ),
        (
            "ADD a :s",
            "Incorrect operand type for operator or function; operator: ADD, operand type: STRING, typeSet: ALLOWED_FOR_ADD_OPERAND",
        ),
        (
            "ADD a :l",
            "Incorrect operand type for operator or function; operator: ADD, operand type: LIST, typeSet: ALLOWED_FOR_ADD_OPERAND",
        ),
        (
            "ADD a :m",
            "Incorrect operand type for operator or function; operator: ADD, operand type: MAP, typeSet: ALLOWED_FOR_ADD_OPERAND",
        ),
        (
            "ADD a :t",
            "Incorrect operand type for operator or function; operator: ADD, operand type: BOOLEAN, typeSet: ALLOWED_FOR_ADD_OPERAND",
        ),
        (
            "DELETE a :n1",
            "Incorrect operand type for operator or function; operator: DELETE, operand type: NUMBER, typeSet: ALLOWED_FOR_DELETE_OPERAND",
        ),
        // DynamoDB's order: reserved words, function misuse and repeated
        // sections (whichever stands first), undefined names, overlapping
        // paths, undefined values, operand checks.
        (
            "SET status = :nope",
            "Attribute name is a reserved keyword; reserved keyword: status",
        ),
        (
            "SET a = foo(:nope) REMOVE status",
            "Invalid function name; function: foo",
        ),
        (
            "REMOVE status SET a = :n1 SET b = :n1",
            "Attribute name is a reserved keyword; reserved keyword: status",
        ),
        (
            "SET a = :n1 SET b = :n1 REMOVE status",
            "The \"SET\" section can only be used once in an update expression;",
        ),
        (
            "SET a = :nope REMOVE #nope",
            "An expression attribute name used in the document path is not defined; attribute name: #nope",
        ),
        (
            "SET a = :n1 SET #nope = :n1",
            "The \"SET\" section can only be used once in an update expression;",
        ),
        (
            "SET a = :nope, #nope = :n1",
            "An expression attribute name used in the document path is not defined; attribute name: #nope",
        ),
        (
            "SET a = :nope REMOVE a",
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a]",
        ),
        (
            "ADD a :s, b :nope",
            "An expression attribute value used in expression is not defined; attribute value: :nope",
        ),
        (
            "ADD a :s REMOVE a",
            "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [a], path two: [a]",
        ),
    ] {
        check_invalid(src, expect);
    }
}

#[test]
fn deep_nesting_within_4096_bytes() {
    let appends = "list_append(".repeat(220);
    let src = format!("SET l = {appends}:lx{}", ", :lx)".repeat(220));
    assert!(src.len() <= 4096);
    let mut item = parse_item(&json!({}));
    with_placeholders(|ph| parse_update(&src, ph))
        .unwrap()
        .apply(&mut item)
        .unwrap();
    assert!(matches!(&item["l"], postbox_item::AttributeValue::L(l) if l.len() == 221));
    let src = format!("SET a = {}:n1{}", "(".repeat(2000), ")".repeat(2000));
    // Deep parentheses must not overflow the stack.
    check_invalid(&src, "The expression has redundant parentheses;");
    let src = format!("SET a = :n1{}", " ".repeat(4090));
    check_invalid(
        &src,
        "Expression size has exceeded the maximum allowed size; expression size: 4101",
    );
}

#[test]
fn several_faults_report_the_one_on_the_greatest_path() {
    // Each action's path is checked before its value, actions taken from the
    // greatest path down (as DynamoDB Local does for these cases).
    let twelve =
        json!({"l": {"L": (0..12).map(|i| json!({"N": i.to_string()})).collect::<Vec<_>>()}});
    check(
        "SET a.x = :n1, b = gone + :n1",
        json!({}),
        json!(NO_ATTRIBUTE),
    );
    check(
        "SET b.x = :n1, a = gone + :n1",
        json!({}),
        json!(INVALID_PATH),
    );
    check(
        "REMOVE b.x SET a = gone + :n1",
        json!({}),
        json!(INVALID_PATH),
    );
    check(
        "REMOVE a.x SET b = gone + :n1",
        json!({}),
        json!(NO_ATTRIBUTE),
    );
    check(
        "SET m.a.x = :n1, m.b = gone + :n1",
        json!({"m": {"M": {}}}),
        json!(NO_ATTRIBUTE),
    );
    check(
        "SET l[10].x = :n1, l[9] = gone + :n1",
        twelve.clone(),
        json!(INVALID_PATH),
    );
    check(
        "SET l[9].x = :n1, l[10] = gone + :n1",
        twelve,
        json!(NO_ATTRIBUTE),
    );
    check("SET c.b.c = c + :n1", json!({}), json!(INVALID_PATH));
    check(
        "ADD c :ns3 SET a[0] = :n1",
        json!({"a": {"B": "AQ=="}, "c": {"S": ""}}),
        json!(WRONG_TYPE),
    );
}

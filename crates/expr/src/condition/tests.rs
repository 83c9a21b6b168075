//! Condition grammar, evaluation and DynamoDB's parse-time errors, checked
//! against the shared fixture item.

use crate::fixtures::{item, with_placeholders};
use crate::{parse_condition, parse_filter};

/// Parses `src` as a ConditionExpression and evaluates it against the
/// fixture item; `expect` is `true`, `false` or DynamoDB's error message.
fn check(src: &str, expect: &str) {
    let got = with_placeholders(|ph| parse_condition(src, ph))
        .map(|c| c.evaluate(Some(&item())).to_string())
        .unwrap_or_else(|e| e.message);
    assert_eq!(got, expect, "condition {src:?}");
}

/// Like [`check`], against an item that does not exist.
fn check_no_item(src: &str, expect: bool) {
    let c = with_placeholders(|ph| parse_condition(src, ph)).unwrap();
    assert_eq!(
        c.evaluate(None),
        expect,
        "condition {src:?} without an item"
    );
}

fn syntax(token: &str, near: &str) -> String {
    format!("Invalid ConditionExpression: Syntax error; token: \"{token}\", near: \"{near}\"")
}

fn invalid(what: &str) -> String {
    format!("Invalid ConditionExpression: {what}")
}

#[test]
fn comparisons() {
    for (src, expect) in [
        ("n = :n5", "true"),
        ("n = :n5dot", "true"),
        ("n = :n1", "false"),
        ("n <> :n1", "true"),
        ("n <> :n5", "false"),
        ("n < :n10", "true"),
        ("n <= :n5", "true"),
        ("n > :n5", "false"),
        ("n >= :n5", "true"),
        (":n1 < n", "true"),
        ("s > :abc", "true"),
        ("s < :x", "true"),
        ("b > :b", "true"),
        ("b < :b23", "true"),
        // Different types are never equal nor ordered, and that is no error.
        ("s = :n5", "false"),
        ("s < :n5", "false"),
        ("s <> :n5", "true"),
        ("ss = :ss", "true"),
        ("ss = :ssb", "false"),
        ("ns = :ns", "true"),
        ("l = :l", "false"),
        ("m0 = :m0", "true"),
        ("z = :null", "true"),
        ("t = :t", "true"),
        ("t = :f", "false"),
        ("size(s) > size(l)", "true"),
        (":n1 = :n1", "true"),
    ] {
        check(src, expect);
    }
}

#[test]
fn missing_operands() {
    for (src, expect) in [
        ("gone = :n1", "false"),
        ("gone <> :n1", "true"),
        ("gone < :n1", "false"),
        ("gone >= :n1", "false"),
        ("gone BETWEEN :n1 AND :n10", "false"),
        ("gone IN (:n1, :n2)", "false"),
        ("size(gone) < :n10", "false"),
        ("size(n) = :n1", "false"),
        ("begins_with(gone, :a)", "false"),
        ("contains(gone, :a)", "false"),
        ("attribute_type(gone, :tS)", "false"),
    ] {
        check(src, expect);
    }
    check_no_item("attribute_not_exists(pk)", true);
    check_no_item("attribute_exists(pk)", false);
    check_no_item("pk = :p", false);
    check_no_item("pk <> :p", true);
    check_no_item("NOT pk = :p", true);
}

#[test]
fn document_paths() {
    for (src, expect) in [
        ("m.a.b = :n1", "true"),
        ("m.l[0] = :p", "true"),
        ("m.l[1] = :p", "false"),
        ("l[2].y = :n2", "true"),
        ("l[5] = :n1", "false"),
        ("m.x[0] = :n1", "false"),
        ("l.y = :n1", "false"),
        ("m . a . b = :n1", "true"),
        ("l [ 2 ] . y = :n2", "true"),
        ("#s = :active", "true"),
        ("#m.#a.b = :n1", "true"),
        // A placeholder stands for one name, dots included.
        ("attribute_exists(#dot)", "true"),
        ("attribute_exists(a.b)", "false"),
        ("x_1 = :n1", "false"),
        // SIZE is a published reserved word, but DynamoDB takes it as a name.
        ("m.Size = :n1", "false"),
        ("size = :n1", "false"),
    ] {
        check(src, expect);
    }
}

#[test]
fn between_and_in() {
    for (src, expect) in [
        ("n BETWEEN :n1 AND :n10", "true"),
        ("n BETWEEN :n5 AND :n5", "true"),
        ("n BETWEEN :n6 AND :n10", "false"),
        ("n between :n1 and :n5", "true"),
        ("s BETWEEN :a AND :z", "true"),
        ("s BETWEEN :n1 AND :n10", "false"),
        ("size(s) BETWEEN :n5 AND :n6", "true"),
        ("n IN (:n1, :n5)", "true"),
        ("n in (:n5)", "true"),
        ("n IN (:n1)", "false"),
        ("s IN (:abc, :n5)", "false"),
        ("ss IN (:ss)", "true"),
        ("n IN (:n1, s)", "false"),
    ] {
        check(src, expect);
    }
}

#[test]
fn functions() {
    for (src, expect) in [
        ("attribute_exists(n)", "true"),
        ("attribute_exists(z)", "true"),
        ("attribute_exists(gone)", "false"),
        ("attribute_not_exists(gone)", "true"),
        ("attribute_exists(m.a.b)", "true"),
        ("attribute_exists(l[2].y)", "true"),
        ("attribute_exists(l[3])", "false"),
        ("attribute_type(n, :tN)", "true"),
        ("attribute_type(n, :tS)", "false"),
        ("attribute_type(l, :tL)", "true"),
        ("attribute_type(m, :tM)", "true"),
        ("attribute_type(ss, :tSS)", "true"),
        ("attribute_type(z, :tNULL)", "true"),
        ("attribute_type(t, :tBOOL)", "true"),
        ("begins_with(s, :ab)", "true"),
        ("begins_with(s, :x)", "false"),
        ("begins_with(s, :empty)", "true"),
        ("begins_with(b, :b)", "true"),
        ("begins_with(b, :b23)", "false"),
        ("begins_with(ss, :a)", "false"),
        ("begins_with(s, n)", "false"),
        ("contains(s, :ab)", "true"),
        ("contains(s, :x)", "false"),
        ("contains(ss, :a)", "true"),
        ("contains(ss, :x)", "false"),
        ("contains(ss, :n1)", "false"),
        ("contains(ns, :n1)", "true"),
        ("contains(bs, :b1)", "true"),
        ("contains(l, :x)", "true"),
        ("contains(l, :n1)", "true"),
        ("contains(l, :m)", "true"),
        ("contains(l, :n2)", "false"),
        ("contains(b, :b23)", "true"),
        ("contains(n, :n5)", "false"),
        ("contains(m, :a)", "false"),
        ("size(s) = :n6", "true"),
        // Strings are measured in UTF-16 code units, as DynamoDB does.
        ("size(u) = :n3", "true"),
        ("size(b) = :n3", "true"),
        ("size(l) = :n3", "true"),
        ("size(m) = :n3", "true"),
        ("size(ss) = :n2", "true"),
        ("size(lm) = :n0", "true"),
        ("size(:s) = :n3", "true"),
        ("size ( s ) = :n6", "true"),
    ] {
        check(src, expect);
    }
}

#[test]
fn logic_and_precedence() {
    for (src, expect) in [
        ("n = :n5 AND s = :x", "false"),
        ("n = :n5 OR s = :x", "true"),
        ("NOT n = :n5", "false"),
        ("NOT NOT n = :n5", "true"),
        // AND binds tighter than OR.
        ("n = :n1 AND s = :x OR t = :t", "true"),
        ("t = :t OR n = :n1 AND s = :x", "true"),
        ("n = :n1 AND (s = :x OR t = :t)", "false"),
        // NOT binds tighter than OR and AND.
        ("NOT t = :t OR t = :t", "true"),
        ("NOT (t = :t OR t = :t)", "false"),
        ("NOT t = :f AND t = :t", "true"),
        // Keywords in any case.
        ("n = :n5 and NOT s = :x oR t = :f", "true"),
        ("n = :n5 AnD not attribute_exists(gone)", "true"),
        ("(n = :n5)", "true"),
        ("(n) = :n5", "true"),
        ("n = (:n5)", "true"),
        ("((n = :n5) AND (t = :t))", "true"),
        ("(n = :n5 OR t = :f) AND NOT (s = :x)", "true"),
        ("(n = :n5 OR t = :f) AND (NOT s = :x OR t = :f)", "true"),
        ("  n=:n5  ", "true"),
        ("\tn\n=\r\n:n5", "true"),
    ] {
        check(src, expect);
    }
}

#[test]
fn syntax_errors() {
    for (src, expect) in [
        ("", invalid("The expression can not be empty;")),
        // Blank is not empty: a syntax error at the end.
        ("  \n ", syntax("<EOF>", "  \n ")),
        ("n =", syntax("<EOF>", "=")),
        ("n = ", syntax("<EOF>", "= ")),
        ("n", syntax("<EOF>", "n")),
        ("n = :n5 AND", syntax("<EOF>", "AND")),
        ("n = :n5 :n1", syntax(":n1", ":n5 :n1")),
        ("n == :n5", syntax("=", "== :n5")),
        ("n = :n5 & t = :t", syntax("&", ":n5 & t")),
        ("AND = :n5", syntax("AND", "AND =")),
        ("n IN :n1", syntax(":n1", "IN :n1")),
        ("n IN ()", syntax(")", "()")),
        ("n BETWEEN :n1 OR :n2", syntax("OR", ":n1 OR :n2")),
        ("f()", syntax(")", "()")),
        ("n[x] = :n1", syntax("x", "[x]")),
        ("n.1 = :n1", syntax("1", ".1 =")),
        ("n = :n5 AND s", syntax("<EOF>", "s")),
        ("s AND n = :n5", syntax("AND", "s AND n")),
        ("(n = :n5", syntax("<EOF>", ":n5")),
        ("n = :n5)", syntax(")", ":n5)")),
        ("(n = :n5) = :t", syntax("=", ") = :t")),
        ("NOT", syntax("<EOF>", "NOT")),
        ("n <> <> :n1", syntax("<>", "<> <> :n1")),
        ("n = # ", syntax("#", "= # ")),
        ("n = :n5 é", syntax("é", ":n5 é")),
        ("_x = :n1", syntax("_", "_x")),
        ("a._x = :n1", syntax("_", "._x")),
        ("1a = :n1", syntax("1", "1a")),
        ("l[01] = :n1", syntax("1", "01]")),
        // Keywords of any expression kind are never names.
        ("a.and = :n1", syntax("and", ".and =")),
        ("a.IN = :n1", syntax("IN", ".IN =")),
        ("set = :n1", syntax("set", "set =")),
        ("a = :n1 AND delete = :n1", syntax("delete", "AND delete =")),
    ] {
        check(src, &expect);
    }
}

#[test]
fn semantic_errors() {
    for (src, expect) in [
        (
            "#nope = :n1",
            "An expression attribute name used in the document path is not defined; attribute name: #nope",
        ),
        (
            "n = :nope",
            "An expression attribute value used in expression is not defined; attribute value: :nope",
        ),
        (
            "status = :active",
            "Attribute name is a reserved keyword; reserved keyword: status",
        ),
        (
            "m.name = :n1",
            "Attribute name is a reserved keyword; reserved keyword: name",
        ),
        (
            "l[0].status = :n1",
            "Attribute name is a reserved keyword; reserved keyword: status",
        ),
        (
            "if_not_exists(a, :n1) = :n1",
            "The function is not allowed in a condition expression; function: if_not_exists",
        ),
        (
            "list_append(a, :l)",
            "The function is not allowed in a condition expression; function: list_append",
        ),
        (
            "n IN (:n1, n)",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: IN, first operand: [n]",
        ),
        (
            "n <> n",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: <>, first operand: [n]",
        ),
        (
            "contains(n, n)",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: contains, first operand: [n]",
        ),
        (
            "attribute_type(n, s)",
            "Incorrect operand type for operator or function; operator or function: attribute_type, operand type: {B,L,DOUBLE,HDS,BOOL,SS,NULL,INTSET,M,DECIMAL,NS,INT,DOUBLESET,DICT,N,FS,S,FLOAT,DECIMALSET,BS,HD}",
        ),
        (
            "l[2147483648] = :n1",
            "List index is not within the allowable range; index: [2147483648]",
        ),
        (
            "l[99999999999999999999] = :n1",
            "List index is not within the allowable range; index: [99999999999999999999]",
        ),
        (
            "a[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0] = :n1",
            "The document path has too many nesting levels; nesting levels: 33",
        ),
        (
            "(((size(s)))) = :n6",
            "The expression has redundant parentheses;",
        ),
        ("foo(n)", "Invalid function name; function: foo"),
        (
            "ATTRIBUTE_EXISTS(n)",
            "Invalid function name; function: ATTRIBUTE_EXISTS",
        ),
        ("n = foo(n)", "Invalid function name; function: foo"),
        (
            "size(s)",
            "The function is not allowed to be used this way in an expression; function: size",
        ),
        (
            "begins_with(s, :a) = :t",
            "The function is not allowed to be used this way in an expression; function: begins_with",
        ),
        (
            "size(attribute_exists(n)) = :n1",
            "The function is not allowed to be used this way in an expression; function: attribute_exists",
        ),
        (
            "attribute_exists(n, s)",
            "Incorrect number of operands for operator or function; operator or function: attribute_exists, number of operands: 2",
        ),
        (
            "begins_with(s)",
            "Incorrect number of operands for operator or function; operator or function: begins_with, number of operands: 1",
        ),
        (
            "size(s, n) = :n1",
            "Incorrect number of operands for operator or function; operator or function: size, number of operands: 2",
        ),
        (
            "attribute_exists(:n1)",
            "Operator or function requires a document path; operator or function: attribute_exists",
        ),
        (
            "attribute_not_exists(size(s))",
            "Operator or function requires a document path; operator or function: attribute_not_exists",
        ),
        (
            "attribute_type(n, :tX)",
            "Invalid attribute type name found; type: XX, valid types: {N,BS,L,B,NULL,M,S,SS,NS,BOOL}",
        ),
        (
            "attribute_type(n, :tlower)",
            "Invalid attribute type name found; type: s, valid types: {N,BS,L,B,NULL,M,S,SS,NS,BOOL}",
        ),
        (
            "attribute_type(n, :n1)",
            "Incorrect operand type for operator or function; operator or function: attribute_type, operand type: N",
        ),
        (
            "begins_with(s, :n1)",
            "Incorrect operand type for operator or function; operator or function: begins_with, operand type: N",
        ),
        (
            "size(:n1) = :n1",
            "Incorrect operand type for operator or function; operator or function: size, operand type: N",
        ),
        (
            "size(:t) = :n1",
            "Incorrect operand type for operator or function; operator or function: size, operand type: BOOL",
        ),
        (
            "n < :t",
            "Incorrect operand type for operator or function; operator or function: <, operand type: BOOL",
        ),
        (
            "n >= :l",
            "Incorrect operand type for operator or function; operator or function: >=, operand type: L",
        ),
        (
            "n BETWEEN :t AND :t",
            "Incorrect operand type for operator or function; operator or function: BETWEEN, operand type: BOOL",
        ),
        (
            "n BETWEEN :n10 AND :n1",
            "The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: AttributeValue: {N:10}, upper bound operand: AttributeValue: {N:1}",
        ),
        (
            "n BETWEEN :n1 AND :s",
            "The BETWEEN operator requires same data type for lower and upper bounds; lower bound operand: AttributeValue: {N:1}, upper bound operand: AttributeValue: {S:abc}",
        ),
        (
            "n = n",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: =, first operand: [n]",
        ),
        (
            "n = #n",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: =, first operand: [n]",
        ),
        (
            "begins_with(s, s)",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: begins_with, first operand: [s]",
        ),
        (
            "m.l[0] < #m.l[0]",
            "The first operand must be distinct from the remaining operands for this operator or function; operator: <, first operand: [m, l, [0]]",
        ),
        ("((n = :n5))", "The expression has redundant parentheses;"),
        ("((n)) = :n5", "The expression has redundant parentheses;"),
        ("n = ((:n5))", "The expression has redundant parentheses;"),
        (
            "NOT ((n = :n5))",
            "The expression has redundant parentheses;",
        ),
        (
            "t = :t AND ((n = :n5 OR t = :t))",
            "The expression has redundant parentheses;",
        ),
    ] {
        check(src, &invalid(expect));
    }
}

#[test]
fn error_precedence() {
    for (src, expect) in [
        // Syntax errors beat every semantic problem; redundant parentheses
        // are one, raised where the second pair closes.
        ("(status = :nope", syntax("<EOF>", ":nope")),
        (
            "n < :t AND ((n = :n1))",
            invalid("The expression has redundant parentheses;"),
        ),
        // Then reserved words and function misuse, whichever stands first.
        (
            "status = :nope AND foo(n)",
            invalid("Attribute name is a reserved keyword; reserved keyword: status"),
        ),
        (
            "size(s) AND foo(n)",
            invalid(
                "The function is not allowed to be used this way in an expression; function: size",
            ),
        ),
        (
            "#nope = :n1 AND status = :n1",
            invalid("Attribute name is a reserved keyword; reserved keyword: status"),
        ),
        // Then undefined placeholders, then operand checks, each in text order.
        (
            "((status = :nope)) AND",
            invalid("The expression has redundant parentheses;"),
        ),
        (
            "((status = :nope))",
            invalid("The expression has redundant parentheses;"),
        ),
        (
            "foo(status)",
            invalid("Invalid function name; function: foo"),
        ),
        (
            "size(status)",
            invalid(
                "The function is not allowed to be used this way in an expression; function: size",
            ),
        ),
        (
            "status = :nope",
            invalid("Attribute name is a reserved keyword; reserved keyword: status"),
        ),
        (
            "#nope = :n1 AND attribute_exists(n, s)",
            invalid(
                "An expression attribute name used in the document path is not defined; attribute name: #nope",
            ),
        ),
        (
            "n = :nope AND #nope = :n1",
            invalid(
                "An expression attribute value used in expression is not defined; attribute value: :nope",
            ),
        ),
        (
            "n < :t AND attribute_exists(n, s)",
            invalid(
                "Incorrect operand type for operator or function; operator or function: <, operand type: BOOL",
            ),
        ),
        (
            "attribute_exists(n, s) AND n < :t",
            invalid(
                "Incorrect number of operands for operator or function; operator or function: attribute_exists, number of operands: 2",
            ),
        ),
        (
            "n < :t AND n = n",
            invalid(
                "Incorrect operand type for operator or function; operator or function: <, operand type: BOOL",
            ),
        ),
        (
            "n = :n5 AND size(:n1) = :n1 AND n < :t",
            invalid(
                "Incorrect operand type for operator or function; operator or function: size, operand type: N",
            ),
        ),
    ] {
        check(src, &expect);
    }
}

#[test]
fn in_takes_at_most_100_operands() {
    let values: std::collections::BTreeMap<_, _> = (0..101)
        .map(|i| (format!(":v{i}"), postbox_item::AttributeValue::n(i)))
        .collect();
    let list = |n: usize| {
        (0..n)
            .map(|i| format!(":v{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut ph = crate::Placeholders::new(None, Some(&values));
    let c = parse_condition(&format!("n IN ({})", list(100)), &mut ph).unwrap();
    assert!(c.evaluate(Some(&item())));
    let err = parse_condition(&format!("n IN ({})", list(101)), &mut ph).unwrap_err();
    assert_eq!(
        err.message,
        invalid("The IN operator is provided with too many operands; number of operands: 101")
    );
}

#[test]
fn filter_errors_name_the_filter_expression() {
    let err = with_placeholders(|ph| parse_filter("n =", ph)).unwrap_err();
    assert_eq!(
        err.message,
        "Invalid FilterExpression: Syntax error; token: \"<EOF>\", near: \"=\""
    );
    assert!(
        with_placeholders(|ph| parse_filter("n = :n5", ph))
            .unwrap()
            .evaluate(Some(&item()))
    );
}

#[test]
fn expressions_are_limited_to_4096_bytes_and_nest_that_deep() {
    let not = "NOT ".repeat(1022);
    let src = format!("{not}n = :n5");
    assert_eq!(src.len(), 4095);
    check(&src, "true");
    check(
        &format!("NOT NOT{src}"),
        "Invalid ConditionExpression: Expression size has exceeded the maximum allowed size; expression size: 4102",
    );
    let open = "(".repeat(2040);
    let close = ")".repeat(2040);
    check(
        &format!("{open}n = :n5{close}"),
        "Invalid ConditionExpression: The expression has redundant parentheses;",
    );
    let nested = "(n = :n5 AND ".repeat(290);
    let src = format!("{nested}n = :n5{}", ")".repeat(290));
    assert!(src.len() <= 4096);
    check(&src, "true");
    let ors = vec!["n = :n1"; 370].join(" OR ");
    check(&format!("{ors} OR n = :n5"), "true");
}

#[test]
fn paths_lists_what_a_condition_reads() {
    let c = with_placeholders(|ph| {
        parse_condition(
            "#pk = :p AND (size(m.a) > :n1 OR NOT l[0] IN (:n1, s)) AND attribute_exists(#s)",
            ph,
        )
    })
    .unwrap();
    let paths: Vec<String> = c.paths().iter().map(ToString::to_string).collect();
    assert_eq!(paths, ["pk", "m.a", "l[0]", "s", "status"]);
}

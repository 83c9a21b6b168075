//! Properties against small reference models.
//!
//! - Random conditions are rendered to text with the fewest parentheses
//!   DynamoDB's precedence allows and random keyword case, parsed, and
//!   evaluated on random items; the result must equal a direct evaluation of
//!   the generated tree. This checks the parser's precedence and the
//!   evaluator's semantics at once.
//! - REMOVE of list elements, appends past the end, ADD and DELETE agree
//!   with `Vec`, `BTreeSet` and integer models.
//! - No token soup makes any parser panic.

use std::collections::{BTreeMap, BTreeSet};

use postbox_expr::{
    Placeholders, parse_condition, parse_key_condition, parse_projection, parse_update,
};
use postbox_item::{AttributeValue, Item, Number};
use proptest::prelude::*;

const ATTRS: [&str; 3] = ["a", "b", "c"];

fn leaf_value() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        (-3i64..4).prop_map(AttributeValue::n),
        prop::sample::select(vec!["", "a", "ab", "b", "ba"]).prop_map(AttributeValue::s),
        any::<bool>().prop_map(AttributeValue::Bool),
        Just(AttributeValue::Null),
    ]
}

fn any_value() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        4 => leaf_value(),
        1 => prop::collection::btree_set(prop::sample::select(vec!["a", "b", "c"]), 1..3)
            .prop_map(|s| AttributeValue::Ss(s.into_iter().map(str::to_owned).collect())),
        1 => prop::collection::vec(leaf_value(), 0..3).prop_map(AttributeValue::L),
    ]
}

fn item() -> impl Strategy<Value = Item> {
    prop::collection::btree_map(
        prop::sample::select(ATTRS.to_vec()).prop_map(str::to_owned),
        any_value(),
        0..4,
    )
}

/// Operands of the reference model.
#[derive(Clone, Debug)]
enum Opd {
    Attr(usize),
    Val(usize),
    Size(usize),
}

#[derive(Clone, Copy, Debug)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Conditions of the reference model.
#[derive(Clone, Debug)]
enum Cond {
    Cmp(Cmp, Opd, Opd),
    Between(Opd, Opd, Opd),
    In(Opd, Vec<Opd>),
    Exists(usize),
    NotExists(usize),
    BeginsWith(usize, Opd),
    Contains(usize, Opd),
    Not(Box<Cond>),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
}

const VALUES: usize = 4;

fn opd() -> impl Strategy<Value = Opd> {
    prop_oneof![
        3 => (0..ATTRS.len()).prop_map(Opd::Attr),
        3 => (0..VALUES).prop_map(Opd::Val),
        1 => (0..ATTRS.len()).prop_map(Opd::Size),
    ]
}

fn cmp() -> impl Strategy<Value = Cmp> {
    prop::sample::select(vec![Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge])
}

fn cond() -> impl Strategy<Value = Cond> {
    let attr = || 0..ATTRS.len();
    let leaf = prop_oneof![
        (cmp(), opd(), opd()).prop_map(|(c, a, b)| Cond::Cmp(c, a, b)),
        (opd(), opd(), opd()).prop_map(|(a, b, c)| Cond::Between(a, b, c)),
        (opd(), prop::collection::vec(opd(), 1..4)).prop_map(|(a, l)| Cond::In(a, l)),
        attr().prop_map(Cond::Exists),
        attr().prop_map(Cond::NotExists),
        (attr(), opd()).prop_map(|(a, b)| Cond::BeginsWith(a, b)),
        (attr(), opd()).prop_map(|(a, b)| Cond::Contains(a, b)),
    ];
    leaf.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| Cond::Not(Box::new(c))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| Cond::Or(Box::new(a), Box::new(b))),
        ]
    })
}

/// Renders a keyword in a case picked from `salt`.
fn kw(word: &str, salt: usize) -> String {
    match salt % 3 {
        0 => word.to_owned(),
        1 => word.to_lowercase(),
        _ => word
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_lowercase()
                } else {
                    c
                }
            })
            .collect(),
    }
}

fn render_opd(o: &Opd) -> String {
    match o {
        Opd::Attr(i) => ATTRS[*i].to_owned(),
        Opd::Val(i) => format!(":v{i}"),
        Opd::Size(i) => format!("size({})", ATTRS[*i]),
    }
}

fn precedence(c: &Cond) -> u8 {
    match c {
        Cond::Or(..) => 1,
        Cond::And(..) => 2,
        Cond::Not(_) => 3,
        _ => 4,
    }
}

/// Renders with parentheses only where precedence needs them.
fn render(c: &Cond, min: u8, salt: usize) -> String {
    let s = match c {
        Cond::Cmp(op, a, b) => {
            let sym = match op {
                Cmp::Eq => "=",
                Cmp::Ne => "<>",
                Cmp::Lt => "<",
                Cmp::Le => "<=",
                Cmp::Gt => ">",
                Cmp::Ge => ">=",
            };
            format!("{} {sym} {}", render_opd(a), render_opd(b))
        }
        Cond::Between(a, lo, hi) => {
            format!(
                "{} {} {} {} {}",
                render_opd(a),
                kw("BETWEEN", salt),
                render_opd(lo),
                kw("AND", salt + 1),
                render_opd(hi)
            )
        }
        Cond::In(a, l) => {
            format!(
                "{} {} ({})",
                render_opd(a),
                kw("IN", salt),
                l.iter().map(render_opd).collect::<Vec<_>>().join(", ")
            )
        }
        Cond::Exists(i) => format!("attribute_exists({})", ATTRS[*i]),
        Cond::NotExists(i) => format!("attribute_not_exists({})", ATTRS[*i]),
        Cond::BeginsWith(i, b) => format!("begins_with({}, {})", ATTRS[*i], render_opd(b)),
        Cond::Contains(i, b) => format!("contains({}, {})", ATTRS[*i], render_opd(b)),
        Cond::Not(x) => format!("{} {}", kw("NOT", salt), render(x, 3, salt + 1)),
        Cond::And(a, b) => format!(
            "{} {} {}",
            render(a, 2, salt + 1),
            kw("AND", salt),
            render(b, 3, salt + 2)
        ),
        Cond::Or(a, b) => format!(
            "{} {} {}",
            render(a, 1, salt + 1),
            kw("OR", salt),
            render(b, 2, salt + 2)
        ),
    };
    if precedence(c) < min {
        format!("({s})")
    } else {
        s
    }
}

fn resolve(o: &Opd, item: &Item, vals: &[AttributeValue]) -> Option<AttributeValue> {
    match o {
        Opd::Attr(i) => item.get(ATTRS[*i]).cloned(),
        Opd::Val(i) => Some(vals[*i].clone()),
        Opd::Size(i) => {
            let n = match item.get(ATTRS[*i])? {
                // Generated strings are ASCII: bytes, chars and UTF-16 units agree.
                AttributeValue::S(s) => s.len(),
                AttributeValue::Ss(s) => s.len(),
                AttributeValue::L(l) => l.len(),
                _ => return None,
            };
            Some(AttributeValue::n(n as i64))
        }
    }
}

/// The reference order: same-type S or N only (B is not generated).
fn ord(a: &AttributeValue, b: &AttributeValue) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (AttributeValue::S(x), AttributeValue::S(y)) => Some(x.cmp(y)),
        (AttributeValue::N(x), AttributeValue::N(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn reference(c: &Cond, item: &Item, vals: &[AttributeValue]) -> bool {
    use std::cmp::Ordering::*;
    let r = |o: &Opd| resolve(o, item, vals);
    match c {
        Cond::Cmp(op, a, b) => {
            let (x, y) = (r(a), r(b));
            let equal = x.is_some() && x == y;
            let o = x.as_ref().zip(y.as_ref()).and_then(|(x, y)| ord(x, y));
            match op {
                Cmp::Eq => equal,
                Cmp::Ne => !equal,
                Cmp::Lt => o == Some(Less),
                Cmp::Le => matches!(o, Some(Less | Equal)),
                Cmp::Gt => o == Some(Greater),
                Cmp::Ge => matches!(o, Some(Greater | Equal)),
            }
        }
        Cond::Between(a, lo, hi) => match (r(a), r(lo), r(hi)) {
            (Some(x), Some(l), Some(h)) => {
                matches!(ord(&x, &l), Some(Greater | Equal))
                    && matches!(ord(&x, &h), Some(Less | Equal))
            }
            _ => false,
        },
        Cond::In(a, l) => r(a).is_some_and(|x| l.iter().any(|o| r(o) == Some(x.clone()))),
        Cond::Exists(i) => item.contains_key(ATTRS[*i]),
        Cond::NotExists(i) => !item.contains_key(ATTRS[*i]),
        Cond::BeginsWith(i, b) => match (item.get(ATTRS[*i]), r(b)) {
            (Some(AttributeValue::S(s)), Some(AttributeValue::S(p))) => s.starts_with(&p),
            _ => false,
        },
        Cond::Contains(i, b) => match (item.get(ATTRS[*i]), r(b)) {
            (Some(AttributeValue::S(s)), Some(AttributeValue::S(x))) => s.contains(&x),
            (Some(AttributeValue::Ss(s)), Some(AttributeValue::S(x))) => s.contains(&x),
            (Some(AttributeValue::L(l)), Some(x)) => l.contains(&x),
            _ => false,
        },
        Cond::Not(x) => !reference(x, item, vals),
        Cond::And(a, b) => reference(a, item, vals) && reference(b, item, vals),
        Cond::Or(a, b) => reference(a, item, vals) || reference(b, item, vals),
    }
}

/// Parse-time refusals a random tree may legitimately run into.
fn is_static_refusal(message: &str) -> bool {
    [
        "Incorrect operand type",
        "The BETWEEN operator requires",
        "must be distinct",
    ]
    .iter()
    .any(|m| message.contains(m))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn conditions_agree_with_the_reference(
        c in cond(),
        vals in prop::collection::vec(any_value(), VALUES),
        items in prop::collection::vec(item(), 1..4),
        salt in 0usize..6,
    ) {
        let src = render(&c, 0, salt);
        let values: BTreeMap<String, AttributeValue> =
            vals.iter().enumerate().map(|(i, v)| (format!(":v{i}"), v.clone())).collect();
        let mut ph = Placeholders::new(None, Some(&values));
        match parse_condition(&src, &mut ph) {
            Ok(parsed) => {
                for item in &items {
                    prop_assert_eq!(parsed.evaluate(Some(item)), reference(&c, item, &vals), "{} on {:?}", src, item);
                }
                prop_assert_eq!(parsed.evaluate(None), reference(&c, &Item::new(), &vals), "{} without an item", src);
            }
            Err(e) => prop_assert!(is_static_refusal(&e.message), "{} refused: {}", src, e.message),
        }
    }

    #[test]
    fn remove_of_list_elements_uses_original_positions(len in 0usize..8, picks in prop::collection::btree_set(0usize..10, 1..5)) {
        let list: Vec<AttributeValue> = (0..len as i64).map(AttributeValue::n).collect();
        let mut item: Item = BTreeMap::from([("l".to_owned(), AttributeValue::L(list.clone()))]);
        // Written in a scrambled order: the result must not depend on it.
        let mut order: Vec<usize> = picks.iter().copied().collect();
        let half = order.len() / 2;
        order.rotate_left(half);
        let src = format!("REMOVE {}", order.iter().map(|i| format!("l[{i}]")).collect::<Vec<_>>().join(", "));
        let mut ph = Placeholders::new(None, None);
        parse_update(&src, &mut ph).unwrap().apply(&mut item).unwrap();
        let expect: Vec<AttributeValue> =
            list.into_iter().enumerate().filter(|(i, _)| !picks.contains(i)).map(|(_, v)| v).collect();
        prop_assert_eq!(&item["l"], &AttributeValue::L(expect));
    }

    #[test]
    fn set_past_the_end_appends_in_index_order(len in 0usize..4, extra in prop::collection::btree_set(4usize..20, 1..4)) {
        let mut item: Item = BTreeMap::from([("l".to_owned(), AttributeValue::L(vec![AttributeValue::Null; len]))]);
        let values: BTreeMap<String, AttributeValue> =
            extra.iter().map(|i| (format!(":v{i}"), AttributeValue::n(*i as i64))).collect();
        let src = format!("SET {}", extra.iter().rev().map(|i| format!("l[{i}] = :v{i}")).collect::<Vec<_>>().join(", "));
        let mut ph = Placeholders::new(None, Some(&values));
        parse_update(&src, &mut ph).unwrap().apply(&mut item).unwrap();
        let mut expect = vec![AttributeValue::Null; len];
        expect.extend(extra.iter().map(|i| AttributeValue::n(*i as i64)));
        prop_assert_eq!(&item["l"], &AttributeValue::L(expect));
    }

    #[test]
    fn add_and_delete_agree_with_integers_and_sets(
        start in proptest::option::of(-1000i64..1000),
        deltas in prop::collection::vec(-1000i64..1000, 1..5),
        set in prop::collection::btree_set("[a-d]", 1..4),
        adds in prop::collection::btree_set("[a-d]", 1..4),
        dels in prop::collection::btree_set("[a-d]", 1..4),
    ) {
        let mut item: Item = BTreeMap::new();
        if let Some(s) = start {
            item.insert("n".to_owned(), AttributeValue::n(s));
        }
        item.insert("s".to_owned(), AttributeValue::Ss(set.clone()));
        for d in &deltas {
            let values = BTreeMap::from([(":d".to_owned(), AttributeValue::n(*d))]);
            let mut ph = Placeholders::new(None, Some(&values));
            parse_update("ADD n :d", &mut ph).unwrap().apply(&mut item).unwrap();
        }
        let total = start.unwrap_or(0) + deltas.iter().sum::<i64>();
        prop_assert_eq!(item["n"].as_n(), Some(&Number::from(total)));

        let values = BTreeMap::from([
            (":a".to_owned(), AttributeValue::Ss(adds.clone())),
            (":d".to_owned(), AttributeValue::Ss(dels.clone())),
        ]);
        let mut ph = Placeholders::new(None, Some(&values));
        parse_update("ADD s :a", &mut ph).unwrap().apply(&mut item).unwrap();
        parse_update("DELETE s :d", &mut ph).unwrap().apply(&mut item).unwrap();
        let expect: BTreeSet<String> = set.union(&adds).filter(|x| !dels.contains(*x)).cloned().collect();
        if expect.is_empty() {
            prop_assert!(!item.contains_key("s"), "an emptied set is removed");
        } else {
            prop_assert_eq!(&item["s"], &AttributeValue::Ss(expect));
        }
    }

    #[test]
    fn parsers_never_panic(tokens in prop::collection::vec(prop::sample::select(vec![
        "a", "b.c", "l[0]", "#n", "#x", ":v", ":x", "(", ")", "[", "]", ",", ".", "=", "<>", "<", "<=", ">", ">=",
        "+", "-", "AND", "or", "NOT", "BETWEEN", "IN", "SET", "remove", "ADD", "DELETE", "size", "contains",
        "begins_with", "attribute_exists", "attribute_type", "if_not_exists", "list_append", "status", "7", "é", "#", ":",
    ]), 0..14)) {
        let src = tokens.join(" ");
        let names = BTreeMap::from([("#n".to_owned(), "n".to_owned())]);
        let values = BTreeMap::from([(":v".to_owned(), AttributeValue::s("v"))]);
        let mut ph = Placeholders::new(Some(&names), Some(&values));
        let item: Item = BTreeMap::from([("a".to_owned(), AttributeValue::n(1))]);
        if let Ok(c) = parse_condition(&src, &mut ph) {
            c.evaluate(Some(&item));
        }
        if let Ok(u) = parse_update(&src, &mut ph) {
            let _ = u.apply(&mut item.clone());
        }
        if let Ok(p) = parse_projection(&src, &mut ph) {
            p.apply(&item);
        }
        let _ = parse_key_condition(&src, &mut ph, "a", Some("b"));
    }
}

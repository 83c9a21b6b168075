//! Matching a parsed pattern against a JSON document.

use serde_json::Value;

use super::{AnythingBut, Field, Matcher, Object};

/// Whether `doc` (the object at this level, or nothing when the path is
/// absent or not an object) satisfies every field and the `$or` of `obj`.
pub(super) fn object_matches(obj: &Object, doc: Option<&Value>) -> bool {
    obj.fields
        .iter()
        .all(|(key, field)| field_matches(field, doc.and_then(|d| d.get(key))))
        && (obj.any_of.is_empty() || obj.any_of.iter().any(|alt| object_matches(alt, doc)))
}

pub(super) fn field_matches(field: &Field, value: Option<&Value>) -> bool {
    match field {
        Field::Nested(sub) => match value {
            Some(v @ Value::Object(_)) => object_matches(sub, Some(v)),
            // An array of objects matches when any of its objects does.
            Some(Value::Array(items)) if items.iter().any(Value::is_object) => items
                .iter()
                .filter(|i| i.is_object())
                .any(|i| object_matches(sub, Some(i))),
            _ => object_matches(sub, None),
        },
        Field::Leaf(matchers) => {
            let mut leaves = Vec::new();
            if let Some(v) = value {
                collect_leaves(v, &mut leaves);
            }
            matchers.iter().any(|m| leaf_matches(m, &leaves))
        }
    }
}

/// The scalars at a path: the value itself, or every scalar in an array.
fn collect_leaves<'v>(value: &'v Value, out: &mut Vec<&'v Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|i| collect_leaves(i, out)),
        Value::Object(_) => {}
        scalar => out.push(scalar),
    }
}

fn leaf_matches(m: &Matcher, leaves: &[&Value]) -> bool {
    match m {
        Matcher::Exists(wanted) => leaves.is_empty() != *wanted,
        _ => leaves.iter().any(|v| value_matches(m, v)),
    }
}

fn value_matches(m: &Matcher, v: &Value) -> bool {
    let s = v.as_str();
    match m {
        Matcher::Exact(expected) => expected == v,
        Matcher::Number(n) => v.as_f64() == Some(*n),
        Matcher::Prefix { value, ignore_case } => s.is_some_and(|s| {
            if *ignore_case {
                s.to_lowercase().starts_with(value)
            } else {
                s.starts_with(value)
            }
        }),
        Matcher::Suffix { value, ignore_case } => s.is_some_and(|s| {
            if *ignore_case {
                s.to_lowercase().ends_with(value)
            } else {
                s.ends_with(value)
            }
        }),
        Matcher::EqualsIgnoreCase(value) => s.is_some_and(|s| s.to_lowercase() == *value),
        Matcher::Wildcard(glob) => s.is_some_and(|s| glob.matches(s)),
        Matcher::Numeric(range) => v.is_number() && v.as_f64().is_some_and(|n| in_range(range, n)),
        Matcher::AnythingBut(but) => anything_but(but, v),
        Matcher::Exists(_) => unreachable!("handled over the whole leaf set"),
    }
}

fn in_range(range: &super::Range, n: f64) -> bool {
    let above = range
        .lower
        .is_none_or(|(lo, inclusive)| if inclusive { n >= lo } else { n > lo });
    let below = range
        .upper
        .is_none_or(|(hi, inclusive)| if inclusive { n <= hi } else { n < hi });
    above && below
}

/// `anything-but` holds for a value of the matcher's type that is not
/// excluded; a value of another type (a number against a string list) is
/// "anything but" those strings and matches, as in EventBridge.
fn anything_but(but: &AnythingBut, v: &Value) -> bool {
    let s = v.as_str();
    match but {
        AnythingBut::Strings(excluded) => s.is_none_or(|s| !excluded.iter().any(|e| e == s)),
        AnythingBut::Numbers(excluded) => v.as_f64().is_none_or(|n| !excluded.contains(&n)),
        AnythingBut::Prefix(p) => s.is_some_and(|s| !s.starts_with(p.as_str())),
        AnythingBut::Suffix(p) => s.is_some_and(|s| !s.ends_with(p.as_str())),
        AnythingBut::IgnoreCase(excluded) => {
            s.is_some_and(|s| !excluded.contains(&s.to_lowercase()))
        }
        AnythingBut::Wildcard(globs) => s.is_some_and(|s| !globs.iter().any(|g| g.matches(s))),
    }
}

//! EventBridge event patterns: parsed once (refused with AWS's reasons when
//! AWS would refuse them), then evaluated over a JSON document — for a pipe,
//! the stream record in DynamoDB JSON as the Pipe sees it
//! (`{"eventName": ..., "dynamodb": {"NewImage": {"pk": {"S": ...}}}}`).
//!
//! Semantics (those of EventBridge, which the relay must share with a
//! generated managed Pipe so that moving to AWS changes nothing):
//! - a pattern is an object; every field of it must hold for the document
//!   (AND), every leaf is an array of alternatives (OR);
//! - a leaf is compared with the document's *leaf values* at that path: a
//!   scalar, or every scalar inside an array (nested arrays flattened) — an
//!   array matches when any of its elements does; objects are not leaves;
//! - exact strings, numbers (compared numerically, `5` = `5.0`), booleans and
//!   `null` (a missing field is not `null`), `""` (only the empty string);
//! - `prefix`, `suffix` (each optionally `{"equals-ignore-case": ...}`),
//!   `equals-ignore-case`, `wildcard` (`*` only, `\*` and `\\` escapes),
//!   `anything-but` (a value, a list of strings or of numbers, or one of
//!   `prefix`, `suffix`, `equals-ignore-case`, `wildcard`), `numeric` ranges
//!   over JSON numbers, `exists` (true: the path has a leaf value, null
//!   included; false: it has none), and `$or` over sub-patterns.
//!
//! Module map: `parse` (validation and the reasons), `eval` (matching),
//! `wildcard` (the glob of `wildcard`).

mod eval;
mod parse;
#[cfg(test)]
mod tests;
mod wildcard;

use postbox_item::Item;
use serde_json::Value;

pub use parse::MAX_PATTERN_LEN;

/// A parsed event pattern.
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    root: Object,
    source: String,
}

/// Why a pattern was refused: the same reasons AWS gives, with the path of
/// the offending field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Event pattern is not valid. Reason: {reason}")]
pub struct PatternError {
    /// What is wrong, naming the field.
    pub reason: String,
}

/// A pattern AWS accepts but that probably does not do what its author
/// meant on a pipe over a DynamoDB stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternWarning {
    /// The dotted path of the field concerned.
    pub path: String,
    /// What will happen and what to do instead.
    pub message: String,
}

impl std::fmt::Display for PatternWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// An object of a pattern: fields that must all hold, and at most one `$or`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Object {
    pub fields: Vec<(String, Field)>,
    /// Alternatives of a `$or` (at least two); empty when there is none.
    pub any_of: Vec<Object>,
}

/// What a pattern says about one field of the document.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Field {
    /// A nested object of the pattern.
    Nested(Object),
    /// A leaf: any of these matchers.
    Leaf(Vec<Matcher>),
}

/// One alternative of a leaf.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Matcher {
    /// A string, boolean or null, compared exactly.
    Exact(Value),
    /// A number, compared numerically.
    Number(f64),
    Prefix {
        value: String,
        ignore_case: bool,
    },
    Suffix {
        value: String,
        ignore_case: bool,
    },
    EqualsIgnoreCase(String),
    Wildcard(wildcard::Glob),
    AnythingBut(AnythingBut),
    Numeric(Range),
    Exists(bool),
}

/// The forms of `anything-but`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AnythingBut {
    /// Not any of these strings.
    Strings(Vec<String>),
    /// Not any of these numbers.
    Numbers(Vec<f64>),
    Prefix(String),
    Suffix(String),
    /// Not any of these strings, ignoring case (stored lowercased).
    IgnoreCase(Vec<String>),
    Wildcard(Vec<wildcard::Glob>),
}

/// A numeric range: each bound with whether it is inclusive.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Range {
    pub lower: Option<(f64, bool)>,
    pub upper: Option<(f64, bool)>,
}

impl Pattern {
    /// Calls `f` with the path of every field the pattern reads of a
    /// document: each leaf, each empty object, in every `$or` alternative.
    pub(crate) fn visit_paths(&self, f: &mut dyn FnMut(&[&str])) {
        fn walk<'a>(o: &'a Object, prefix: &mut Vec<&'a str>, f: &mut dyn FnMut(&[&str])) {
            for (name, field) in &o.fields {
                prefix.push(name);
                match field {
                    Field::Nested(inner) if inner.fields.is_empty() && inner.any_of.is_empty() => {
                        f(prefix)
                    }
                    Field::Nested(inner) => walk(inner, prefix, f),
                    Field::Leaf(_) => f(prefix),
                }
                prefix.pop();
            }
            for alternative in &o.any_of {
                walk(alternative, prefix, f);
            }
        }
        walk(&self.root, &mut Vec::new(), f);
    }

    /// Parses and validates a pattern given as JSON text, returning it with
    /// the warnings that apply to a pipe over a DynamoDB stream.
    pub fn parse(text: &str) -> Result<(Pattern, Vec<PatternWarning>), PatternError> {
        let (root, warnings) = parse::parse(text)?;
        Ok((
            Pattern {
                root,
                source: text.to_owned(),
            },
            warnings,
        ))
    }

    /// Whether `document` matches.
    pub fn matches(&self, document: &Value) -> bool {
        eval::object_matches(&self.root, Some(document))
    }

    /// What the pattern requires of a record's `dynamodb.Keys` whatever
    /// else it says (its `$or` alternatives aside), if anything. A record
    /// whose keys fail it cannot match: [`Pattern::keys_allow`].
    fn keys_field(&self) -> Option<&Field> {
        let dynamodb = self.root.fields.iter().find(|(k, _)| k == "dynamodb")?;
        match &dynamodb.1 {
            Field::Nested(inner) => inner
                .fields
                .iter()
                .find(|(k, _)| k == "Keys")
                .map(|(_, field)| field),
            Field::Leaf(_) => None,
        }
    }

    /// Whether the pattern requires anything of a record's keys.
    pub fn has_keys_field(&self) -> bool {
        self.keys_field().is_some()
    }

    /// Whether a record with `keys` may match: false only when the record
    /// cannot, whatever its images and other fields hold. Only the
    /// attributes the pattern names are put into JSON to be matched.
    pub fn keys_allow(&self, keys: &Item) -> bool {
        let Some(field) = self.keys_field() else {
            return true;
        };
        let json = match field {
            Field::Nested(object) if object.any_of.is_empty() => Value::Object(
                object
                    .fields
                    .iter()
                    .filter_map(|(name, _)| keys.get(name).map(|v| (name.clone(), v.to_json())))
                    .collect(),
            ),
            _ => postbox_item::item_to_json(keys),
        };
        eval::field_matches(field, Some(&json))
    }

    /// The JSON text the pattern was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// Pipes' filter rule: a record passes when ANY of the patterns matches;
/// no patterns means every record passes.
pub fn any_matches(patterns: &[Pattern], document: &Value) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| p.matches(document))
}

//! Key condition expressions of a Query: the condition grammar, restricted to
//! `partition = :v` and at most one condition on the sort key.
//!
//! The expression is parsed as a condition first (so syntax, placeholder and
//! operand-type errors read as for any condition), then checked against the
//! restrictions in DynamoDB's order: operators, then each condition's
//! operands, then one condition per key, then the key schema.

use postbox_item::AttributeValue;

use crate::condition::{Comparator, Condition, Operand, begins_with, order};
use crate::error::Kind;
use crate::path::Path;
use crate::{ExprError, Placeholders};

/// A Query's key condition: the partition to read and an optional range of
/// sort keys within it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCondition {
    /// The partition key value (`pk = :v`).
    pub partition: AttributeValue,
    /// The condition on the sort key, if any.
    pub sort: Option<SortKeyCondition>,
}

/// A condition on the sort key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortKeyCondition {
    /// `sk = :v`.
    Eq(AttributeValue),
    /// `sk < :v`.
    Lt(AttributeValue),
    /// `sk <= :v`.
    Le(AttributeValue),
    /// `sk > :v`.
    Gt(AttributeValue),
    /// `sk >= :v`.
    Ge(AttributeValue),
    /// Both bounds inclusive.
    Between(AttributeValue, AttributeValue),
    /// `begins_with(sk, :v)`.
    BeginsWith(AttributeValue),
}

impl SortKeyCondition {
    /// True when the sort key value `v` satisfies the condition. Values of
    /// another type than the condition's never do.
    pub fn matches(&self, v: &AttributeValue) -> bool {
        use std::cmp::Ordering::*;
        let cmp = |x: &AttributeValue| order(v, x);
        match self {
            SortKeyCondition::Eq(x) => cmp(x) == Some(Equal),
            SortKeyCondition::Lt(x) => cmp(x) == Some(Less),
            SortKeyCondition::Le(x) => matches!(cmp(x), Some(Less | Equal)),
            SortKeyCondition::Gt(x) => cmp(x) == Some(Greater),
            SortKeyCondition::Ge(x) => matches!(cmp(x), Some(Greater | Equal)),
            SortKeyCondition::Between(lo, hi) => {
                matches!(cmp(lo), Some(Greater | Equal)) && matches!(cmp(hi), Some(Less | Equal))
            }
            SortKeyCondition::BeginsWith(p) => begins_with(v, p),
        }
    }

    /// The values the condition compares with (one, or two for BETWEEN), so
    /// the caller can check them against the key's declared type.
    pub fn values(&self) -> Vec<&AttributeValue> {
        match self {
            SortKeyCondition::Eq(x)
            | SortKeyCondition::Lt(x)
            | SortKeyCondition::Le(x)
            | SortKeyCondition::Gt(x)
            | SortKeyCondition::Ge(x)
            | SortKeyCondition::BeginsWith(x) => vec![x],
            SortKeyCondition::Between(lo, hi) => vec![lo, hi],
        }
    }
}

fn fail(message: impl Into<String>) -> ExprError {
    ExprError::new(message)
}

/// Parses a `KeyConditionExpression` for a table (or index) whose key is
/// `partition_key` and optionally `sort_key`. Whether the values have the
/// key attributes' declared types is left to the caller, which knows them
/// ("One or more parameter values were invalid: Condition parameter type does
/// not match schema type").
pub fn parse_key_condition(
    src: &str,
    ph: &mut Placeholders,
    partition_key: &str,
    sort_key: Option<&str>,
) -> Result<KeyCondition, ExprError> {
    let condition = crate::condition::parse(src, Kind::KeyCondition, ph)?;
    let mut leaves = Vec::new();
    collect_leaves(&condition, &mut leaves)?;
    let mut keyed: Vec<(&str, Leaf)> = Vec::new();
    let keys: Vec<&str> = std::iter::once(partition_key).chain(sort_key).collect();
    for leaf in &leaves {
        keyed.push(check_leaf(leaf, &keys)?);
    }
    for (i, (name, _)) in keyed.iter().enumerate() {
        if keyed[..i].iter().any(|(other, _)| other == name) {
            return Err(fail(
                "KeyConditionExpressions must only contain one condition per key",
            ));
        }
    }
    if keyed.len() > 2 {
        return Err(fail("Conditions can be of length 1 or 2 only"));
    }
    let mut partition = None;
    let mut sort = None;
    for (name, leaf) in keyed {
        if name == partition_key {
            match leaf {
                Leaf::Compare(Comparator::Eq, v) => partition = Some(v.clone()),
                _ => return Err(fail("Query key condition not supported")),
            }
        } else if Some(name) == sort_key {
            sort = Some(leaf.into_sort_condition());
        } else if let Some(sort_key) = sort_key {
            // A condition on another attribute stands where the sort key's should.
            return Err(fail(format!(
                "Query condition missed key schema element: {sort_key}"
            )));
        } else {
            return Err(fail("Query key condition not supported"));
        }
    }
    let partition = partition.ok_or_else(|| {
        fail(format!(
            "Query condition missed key schema element: {partition_key}"
        ))
    })?;
    // Key values are never empty strings or binaries, so no such key can match.
    let empty = |v: &AttributeValue| {
        matches!(v, AttributeValue::S(x) if x.is_empty())
            || matches!(v, AttributeValue::B(x) if x.is_empty())
    };
    let empty_key = |key: &str| {
        fail(format!(
            "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: {key}"
        ))
    };
    if empty(&partition) {
        return Err(empty_key(partition_key));
    }
    if let (Some(sort), Some(sort_key)) = (&sort, sort_key)
        && sort.values().into_iter().any(empty)
    {
        return Err(empty_key(sort_key));
    }
    Ok(KeyCondition { partition, sort })
}

/// The simple conditions joined by AND; any other operator is refused.
fn collect_leaves<'c>(c: &'c Condition, out: &mut Vec<&'c Condition>) -> Result<(), ExprError> {
    let operator = match c {
        Condition::And(a, b) => {
            collect_leaves(a, out)?;
            return collect_leaves(b, out);
        }
        Condition::Compare(Comparator::Ne, ..) => "<>",
        Condition::Compare(..) | Condition::Between(..) | Condition::BeginsWith(..) => {
            out.push(c);
            return Ok(());
        }
        Condition::Or(..) => "OR",
        Condition::Not(_) => "NOT",
        Condition::In(..) => "IN",
        Condition::AttributeExists(_) => "attribute_exists",
        Condition::AttributeNotExists(_) => "attribute_not_exists",
        Condition::AttributeType(..) => "attribute_type",
        Condition::Contains(..) => "contains",
    };
    Err(fail(format!(
        "Invalid operator used in KeyConditionExpression: {operator}"
    )))
}

/// One restricted condition, reduced to the key it constrains.
enum Leaf<'c> {
    Compare(Comparator, &'c AttributeValue),
    Between(&'c AttributeValue, &'c AttributeValue),
    BeginsWith(&'c AttributeValue),
}

impl Leaf<'_> {
    fn into_sort_condition(self) -> SortKeyCondition {
        match self {
            Leaf::Compare(cmp, v) => {
                let v = v.clone();
                match cmp {
                    Comparator::Eq | Comparator::Ne => SortKeyCondition::Eq(v),
                    Comparator::Lt => SortKeyCondition::Lt(v),
                    Comparator::Le => SortKeyCondition::Le(v),
                    Comparator::Gt => SortKeyCondition::Gt(v),
                    Comparator::Ge => SortKeyCondition::Ge(v),
                }
            }
            Leaf::Between(lo, hi) => SortKeyCondition::Between(lo.clone(), hi.clone()),
            Leaf::BeginsWith(p) => SortKeyCondition::BeginsWith(p.clone()),
        }
    }
}

/// Checks one condition's operands left to right: exactly one top-level
/// attribute, no `size()`, and for BETWEEN and begins_with the attribute first.
fn check_leaf<'c>(c: &'c Condition, keys: &[&str]) -> Result<(&'c str, Leaf<'c>), ExprError> {
    let (operands, operator): (Vec<&Operand>, Option<&str>) = match c {
        Condition::Compare(_, a, b) => (vec![a, b], None),
        Condition::Between(a, lo, hi) => (vec![a, lo, hi], Some("BETWEEN")),
        Condition::BeginsWith(a, b) => (vec![a, b], Some("begins_with")),
        _ => unreachable!("only simple conditions are collected"),
    };
    if let (Some(operator), Operand::Value(_)) = (operator, operands[0]) {
        return Err(fail(format!(
            "Invalid condition in KeyConditionExpression: {operator} operator must have the key attribute as its first operand"
        )));
    }
    let mut key: Option<&Path> = None;
    for op in &operands {
        match op {
            Operand::Size(_) => {
                return Err(fail(
                    "KeyConditionExpressions cannot contain nested operations",
                ));
            }
            Operand::Path(p) => {
                if key.is_some() {
                    return Err(fail(
                        "Invalid condition in KeyConditionExpression: Multiple attribute names used in one condition",
                    ));
                }
                if !p.is_top_level() {
                    return Err(fail(if keys.contains(&p.top_level()) {
                        format!(
                            "Key attributes must be scalars; list random access '[]' and map lookup '.' are not allowed: Key: {}",
                            p.top_level()
                        )
                    } else {
                        "KeyConditionExpressions cannot have conditions on nested attributes"
                            .to_owned()
                    }));
                }
                key = Some(p);
            }
            Operand::Value(_) => {}
        }
    }
    let key = key.ok_or_else(|| {
        fail("Invalid condition in KeyConditionExpression: No key attribute specified")
    })?;
    fn value(op: &Operand) -> &AttributeValue {
        match op {
            Operand::Value(v) => v,
            _ => unreachable!("the other operands are values"),
        }
    }
    let leaf = match c {
        // `:v < sk` is accepted and means `sk > :v`.
        Condition::Compare(cmp, Operand::Path(_), b) => Leaf::Compare(*cmp, value(b)),
        Condition::Compare(cmp, a, _) => Leaf::Compare(cmp.flipped(), value(a)),
        Condition::Between(_, lo, hi) => Leaf::Between(value(lo), value(hi)),
        Condition::BeginsWith(_, p) => Leaf::BeginsWith(value(p)),
        _ => unreachable!("only simple conditions are collected"),
    };
    Ok((key.top_level(), leaf))
}

#[cfg(test)]
mod tests;

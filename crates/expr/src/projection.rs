//! Projection expressions, and projecting an item down to a set of paths
//! (which ReturnValues UPDATED_OLD / UPDATED_NEW also use).
//!
//! The result keeps the nesting of the item: `a.b` yields `{a: {b: ..}}`.
//! Elements picked from one list come back as a shorter list in index order,
//! whatever order the paths were written in.

use std::collections::BTreeMap;

use postbox_item::{AttributeValue, Item};

use crate::error::Kind;
use crate::lexer::Tok;
use crate::parser::Parser;
use crate::path::{Path, PathElement};
use crate::{ExprError, Placeholders};

/// A parsed projection expression: the paths to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    paths: Vec<Path>,
}

/// Parses a `ProjectionExpression`: document paths separated by commas, no
/// two of which may overlap or conflict.
pub fn parse_projection(src: &str, ph: &mut Placeholders) -> Result<Projection, ExprError> {
    let mut p = Parser::new(src, Kind::Projection, ph)?;
    let mut paths = Vec::new();
    loop {
        if !p.at_path_start() {
            return Err(p.syntax_error());
        }
        paths.push(p.parse_path()?);
        if !p.at(Tok::Comma) {
            break;
        }
        p.bump();
    }
    p.check_clashes(&paths);
    p.finish()?;
    Ok(Projection { paths })
}

impl Projection {
    /// The projected paths, in the order written.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    /// The parts of `item` the projection names.
    pub fn apply(&self, item: &Item) -> Item {
        project(&self.paths, item)
    }
}

/// Projects `item` down to the given paths (as DynamoDB does for UPDATED_OLD /
/// UPDATED_NEW and ProjectionExpression). Paths the item does not have are
/// left out; overlapping paths are allowed here and merge.
pub fn project(paths: &[Path], item: &Item) -> Item {
    let mut root: BTreeMap<String, Node> = BTreeMap::new();
    for path in paths {
        let Some(value) = path.get(item) else {
            continue;
        };
        let top = root
            .entry(path.top_level().to_owned())
            .or_insert(Node::Empty);
        top.insert(&path.elements()[1..], value);
    }
    root.into_iter()
        .filter_map(|(k, n)| n.finish().map(|v| (k, v)))
        .collect()
}

/// The projection of one value while it is being assembled.
enum Node {
    /// Nothing assigned yet.
    Empty,
    /// The whole value is kept.
    Whole(AttributeValue),
    /// Some keys of a map.
    Map(BTreeMap<String, Node>),
    /// Some elements of a list, by original index.
    List(BTreeMap<usize, Node>),
}

impl Node {
    /// Records that the part of `value` at `rest` (relative to this node) is kept.
    /// `value` is the value at the full path, already known to exist.
    fn insert(&mut self, rest: &[PathElement], value: &AttributeValue) {
        let Some((first, rest)) = rest.split_first() else {
            *self = Node::Whole(value.clone());
            return;
        };
        match self {
            // The whole value is already kept: nothing to add.
            Node::Whole(_) => {}
            Node::Empty => {
                *self = match first {
                    PathElement::Name(_) => Node::Map(BTreeMap::new()),
                    PathElement::Index(_) => Node::List(BTreeMap::new()),
                };
                self.insert(&[std::slice::from_ref(first), rest].concat(), value);
            }
            Node::Map(m) => {
                if let PathElement::Name(n) = first {
                    m.entry(n.clone())
                        .or_insert(Node::Empty)
                        .insert(rest, value);
                }
            }
            Node::List(l) => {
                if let PathElement::Index(i) = first {
                    l.entry(*i).or_insert(Node::Empty).insert(rest, value);
                }
            }
        }
    }

    fn finish(self) -> Option<AttributeValue> {
        match self {
            Node::Empty => None,
            Node::Whole(v) => Some(v),
            Node::Map(m) => Some(AttributeValue::M(
                m.into_iter()
                    .filter_map(|(k, n)| n.finish().map(|v| (k, v)))
                    .collect(),
            )),
            Node::List(l) => Some(AttributeValue::L(
                l.into_values().filter_map(Node::finish).collect(),
            )),
        }
    }
}

#[cfg(test)]
mod tests;

//! Document paths: `a.b[2].c`, with placeholders already resolved.
//!
//! A path starts with a top-level attribute name and then steps into maps by
//! name and into lists by index. Reading a path that does not fit the item
//! (a missing attribute, a name step into a list, an index past the end) gives
//! nothing; it is never an error, because DynamoDB treats such an operand as
//! absent in conditions and projections.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use postbox_item::{AttributeValue, Item};

/// One step of a document path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathElement {
    /// A map key (or, first in a path, a top-level attribute name).
    Name(String),
    /// A list index.
    Index(usize),
}

/// A document path whose names are already resolved from placeholders.
///
/// Its steps are shared, so a clone costs a reference count: the parse cache
/// hands out a copy of a parsed expression for every request, and copying
/// each path's names was most of that copy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Path {
    /// Never empty; the first element is always a `Name`.
    elements: Arc<[PathElement]>,
}

impl Path {
    /// The path to a top-level attribute, e.g. a key attribute.
    pub fn attribute(name: impl Into<String>) -> Path {
        Path {
            elements: Arc::new([PathElement::Name(name.into())]),
        }
    }

    /// A path from its elements; `None` when empty or not starting with a name.
    pub fn from_elements(elements: Vec<PathElement>) -> Option<Path> {
        match elements.first() {
            Some(PathElement::Name(_)) => Some(Path {
                elements: elements.into(),
            }),
            _ => None,
        }
    }

    /// The steps of the path, starting with the top-level name.
    pub fn elements(&self) -> &[PathElement] {
        &self.elements
    }

    /// The top-level attribute the path starts at.
    pub fn top_level(&self) -> &str {
        match &self.elements[0] {
            PathElement::Name(n) => n,
            PathElement::Index(_) => unreachable!("a path always starts with a name"),
        }
    }

    /// True when the path is just a top-level attribute name.
    pub fn is_top_level(&self) -> bool {
        self.elements.len() == 1
    }

    /// The value at this path in `item`, if the item has one there.
    pub fn get<'a>(&self, item: &'a Item) -> Option<&'a AttributeValue> {
        let mut cur = item.get(self.top_level())?;
        for e in &self.elements[1..] {
            cur = step(cur, e)?;
        }
        Some(cur)
    }

    /// The path in DynamoDB's message notation: `[a, b, [2]]`.
    pub(crate) fn bracketed(&self) -> String {
        let parts: Vec<String> = self
            .elements
            .iter()
            .map(|e| match e {
                PathElement::Name(n) => n.clone(),
                PathElement::Index(i) => format!("[{i}]"),
            })
            .collect();
        format!("[{}]", parts.join(", "))
    }
}

/// One step into a value: a name into a map, an index into a list.
pub(crate) fn step<'a>(v: &'a AttributeValue, e: &PathElement) -> Option<&'a AttributeValue> {
    match (v, e) {
        (AttributeValue::M(m), PathElement::Name(n)) => m.get(n),
        (AttributeValue::L(l), PathElement::Index(i)) => l.get(*i),
        _ => None,
    }
}

/// Mutable version of [`step`].
pub(crate) fn step_mut<'a>(
    v: &'a mut AttributeValue,
    e: &PathElement,
) -> Option<&'a mut AttributeValue> {
    match (v, e) {
        (AttributeValue::M(m), PathElement::Name(n)) => m.get_mut(n),
        (AttributeValue::L(l), PathElement::Index(i)) => l.get_mut(*i),
        _ => None,
    }
}

impl fmt::Display for Path {
    /// The path as one would write it without placeholders: `a.b[2]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.elements.iter().enumerate() {
            match e {
                PathElement::Name(n) if i == 0 => f.write_str(n)?,
                PathElement::Name(n) => write!(f, ".{n}")?,
                PathElement::Index(x) => write!(f, "[{x}]")?,
            }
        }
        Ok(())
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &PathElement) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PathElement {
    /// Names before indexes; indexes numerically, so sorting paths orders
    /// the elements of one list by position.
    fn cmp(&self, other: &PathElement) -> Ordering {
        match (self, other) {
            (PathElement::Name(a), PathElement::Name(b)) => a.cmp(b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            (PathElement::Name(_), PathElement::Index(_)) => Ordering::Less,
            (PathElement::Index(_), PathElement::Name(_)) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Path {
    fn partial_cmp(&self, other: &Path) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Path {
    fn cmp(&self, other: &Path) -> Ordering {
        self.elements.cmp(&other.elements)
    }
}

/// How two paths of one expression relate, for DynamoDB's rule that the
/// paths an update writes (or a projection reads) must be independent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Clash {
    /// One path is the other or a prefix of it: `a` and `a.b`.
    Overlap,
    /// They step into the same value once by name and once by index: `a.b` and `a[0]`.
    Conflict,
}

/// Whether `one` and `two` overlap or conflict; `None` when independent.
pub(crate) fn clash(one: &Path, two: &Path) -> Option<Clash> {
    for (a, b) in one.elements.iter().zip(two.elements.iter()) {
        match (a, b) {
            (PathElement::Name(x), PathElement::Name(y)) if x != y => return None,
            (PathElement::Index(x), PathElement::Index(y)) if x != y => return None,
            (PathElement::Name(_), PathElement::Index(_))
            | (PathElement::Index(_), PathElement::Name(_)) => {
                return Some(Clash::Conflict);
            }
            _ => {}
        }
    }
    Some(Clash::Overlap)
}

/// DynamoDB's message for two clashing paths, `one` written before `two`.
pub(crate) fn clash_message(kind: &Clash, one: &Path, two: &Path) -> String {
    let what = match kind {
        Clash::Overlap => "overlap",
        Clash::Conflict => "conflict",
    };
    format!(
        "Two document paths {what} with each other; must remove or rewrite one of these paths; path one: {}, path two: {}",
        one.bracketed(),
        two.bracketed()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Path {
        // Test shorthand: `a.b[2]` split on dots and brackets.
        let mut elements = Vec::new();
        for part in s.split('.') {
            let (name, rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
            elements.push(PathElement::Name(name.to_owned()));
            for idx in rest.split('[').filter(|x| !x.is_empty()) {
                elements.push(PathElement::Index(
                    idx.trim_end_matches(']').parse().unwrap(),
                ));
            }
        }
        Path::from_elements(elements).unwrap()
    }

    fn check(one: &str, two: &str, expect: Option<Clash>) {
        assert_eq!(clash(&p(one), &p(two)), expect, "{one} vs {two}");
        assert_eq!(clash(&p(two), &p(one)), expect, "{two} vs {one}");
    }

    #[test]
    fn clashes() {
        check("a", "a", Some(Clash::Overlap));
        check("a", "a.b", Some(Clash::Overlap));
        check("a[1]", "a[1].c", Some(Clash::Overlap));
        check("a.b", "a[0]", Some(Clash::Conflict));
        check("a.b", "a.c", None);
        check("a[0]", "a[1]", None);
        check("a", "b", None);
    }

    #[test]
    fn notation() {
        let path = p("a.b[2][0].c");
        assert_eq!(path.to_string(), "a.b[2][0].c");
        assert_eq!(path.bracketed(), "[a, b, [2], [0], c]");
        assert_eq!(path.top_level(), "a");
        assert!(!path.is_top_level());
        assert!(p("a[10]") > p("a[9]"), "indexes sort numerically");
    }
}

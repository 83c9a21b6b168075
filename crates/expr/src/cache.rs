//! Parsed condition and update expressions, kept for the next request that
//! sends the same text.
//!
//! Programs send the same few expressions over and over with different
//! values (a worker's claim is one UpdateItem with the same 12-action update
//! and 3-branch condition each time, only the lease token and the clock
//! change). Parsing them again each time was about a fifth of a worker's
//! CPU outside the store's writer. This cache parses an expression once per
//! shape: its text, its names, and the type of each value. Values are
//! resolved at parse time, so the kept parse (the template) is made with a
//! stand-in for each S, N or B value, unique to its placeholder; a request
//! that hits the template gets a copy with its own values put where the
//! stand-ins are (`benches/parse.rs` measures what that saves).
//!
//! What keeps that exact:
//! - DynamoDB has no literals: every value in a parsed expression comes from
//!   a placeholder, so every stand-in in a template is one we put there.
//! - Parsing looks at a value's type, never its content, except for
//!   `BETWEEN` (bounds in order) and `attribute_type` (a type name): an
//!   expression whose text names either is never cached. BOOL and NULL
//!   values are few enough to be part of the shape instead of stand-ins; a
//!   request with a list, map or set value is not cached.
//! - Only parses that succeed are kept, and a template is kept only after
//!   the request that made it gets, from the template, exactly what its own
//!   parse gave. Errors are parsed (and worded) afresh every time.
//!
//! A template is made the second time a shape comes, not the first: making
//! one costs a second parse and a comparison, which a text sent only once
//! (generated per request) would pay for nothing.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use postbox_item::{AttributeValue, Number};

use crate::error::Kind;
use crate::{ExprError, Placeholders};

/// Templates kept at most; the cache starts over when it is full (programs
/// send a handful of shapes, so this is only reached by ad hoc requests).
const CAPACITY: usize = 512;

/// The value of a placeholder as the shape of a request sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Shape {
    S,
    N,
    B,
    Bool(bool),
    Null,
}

impl Shape {
    fn of(v: &AttributeValue) -> Option<Shape> {
        Some(match v {
            AttributeValue::S(_) => Shape::S,
            AttributeValue::N(_) => Shape::N,
            AttributeValue::B(_) => Shape::B,
            AttributeValue::Bool(b) => Shape::Bool(*b),
            AttributeValue::Null => Shape::Null,
            _ => return None,
        })
    }
}

/// Something a template can be made of.
pub(crate) trait Parsed: Clone + PartialEq + Send + Sync + 'static {
    /// Calls `f` on every value in the expression.
    fn values_mut(&mut self, f: &mut dyn FnMut(&mut AttributeValue));
}

/// A parse made with stand-ins, and the placeholders it used.
pub(crate) struct Template<T> {
    parsed: T,
    names: Vec<String>,
    /// The value placeholders it used.
    values: Vec<String>,
    /// For each value of `parsed`, in the order `values_mut` visits them:
    /// the index in `values` of the placeholder whose stand-in it is
    /// (`None` for a BOOL or NULL, which is its own value).
    slots: Vec<Option<usize>>,
}

struct Entry {
    kind: Kind,
    src: String,
    names: Vec<(String, String)>,
    shapes: Vec<(String, Shape)>,
    /// A `Template` of the kind's type.
    kept: Arc<dyn Any + Send + Sync>,
}

impl Entry {
    fn is(&self, kind: Kind, src: &str, key: &Key<'_>) -> bool {
        self.kind == kind
            && self.src == src
            && self.names.len() == key.names.len()
            && self
                .names
                .iter()
                .zip(&key.names)
                .all(|((a, b), (c, d))| a == c && b == d)
            && self.shapes.len() == key.shapes.len()
            && self
                .shapes
                .iter()
                .zip(&key.shapes)
                .all(|((a, b), (c, d))| a == c && b == d)
    }
}

/// The templates, and the shapes seen once so far.
#[derive(Default)]
struct Cache {
    templates: HashMap<u64, Vec<Entry>>,
    /// Hashes of shapes parsed once and not kept: a template (a second
    /// parse and a comparison) is made the second time a shape comes, so
    /// a text sent only once costs one parse, not three.
    seen_once: HashSet<u64>,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// A request's shape, borrowed.
struct Key<'a> {
    names: Vec<(&'a str, &'a str)>,
    shapes: Vec<(&'a str, Shape)>,
}

impl<'a> Key<'a> {
    fn of(ph: &Placeholders<'a>) -> Option<Key<'a>> {
        let (names, values) = (ph.names_map(), ph.values_map());
        let names = names
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
            .unwrap_or_default();
        let shapes = match values {
            Some(m) => m
                .iter()
                .map(|(k, v)| Some((k.as_str(), Shape::of(v)?)))
                .collect::<Option<Vec<_>>>()?,
            None => Vec::new(),
        };
        Some(Key { names, shapes })
    }

    /// The bucket: the names are left to [`Entry::is`], since a text is
    /// nearly always sent with the same ones.
    fn hash(&self, kind: Kind, src: &str) -> u64 {
        let mut h = DefaultHasher::new();
        (kind as u8).hash(&mut h);
        src.hash(&mut h);
        self.shapes.hash(&mut h);
        h.finish()
    }
}

/// Whether the text may name something whose parse reads a value's content.
fn reads_content(src: &str) -> bool {
    let names = |word: &str| {
        src.as_bytes()
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    };
    names("between") || names("attribute_type")
}

/// `parse(src, ph)`, through the cache.
pub(crate) fn parse<T: Parsed>(
    kind: Kind,
    src: &str,
    ph: &mut Placeholders<'_>,
    parse: impl Fn(&str, &mut Placeholders<'_>) -> Result<T, ExprError>,
) -> Result<T, ExprError> {
    let Some(key) = Key::of(ph).filter(|_| !reads_content(src)) else {
        return parse(src, ph);
    };
    let hash = key.hash(kind, src);
    let (hit, seen) = {
        let mut guard = CACHE.lock().expect("expression cache lock");
        let cache = guard.get_or_insert_with(Cache::default);
        let hit = cache
            .templates
            .get(&hash)
            .and_then(|entries| entries.iter().find(|e| e.is(kind, src, &key)))
            .and_then(|e| e.kept.clone().downcast::<Template<T>>().ok());
        let seen = hit.is_none() && !cache.seen_once.insert(hash);
        if cache.seen_once.len() > 4 * CAPACITY {
            cache.seen_once.clear();
        }
        (hit, seen)
    };
    if let Some(template) = hit {
        #[cfg(test)]
        tests::HITS.with(|h| h.set(h.get() + 1));
        return Ok(fill(&template, ph));
    }
    let parsed = parse(src, ph)?;
    if !seen {
        return Ok(parsed);
    }
    // A template, kept only if it gives this request what its parse gave.
    // Filling marks what the parse has already marked: the same text with
    // the same placeholders uses the same ones.
    if let Some(template) = make_template(src, ph, &parse)
        && fill(&template, ph) == parsed
    {
        let entry = Entry {
            kind,
            src: src.to_owned(),
            names: key
                .names
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect(),
            shapes: key
                .shapes
                .iter()
                .map(|(a, s)| ((*a).to_owned(), s.clone()))
                .collect(),
            kept: Arc::new(template),
        };
        let mut guard = CACHE.lock().expect("expression cache lock");
        let cache = guard.get_or_insert_with(Cache::default);
        cache.seen_once.remove(&hash);
        if cache.templates.values().map(Vec::len).sum::<usize>() >= CAPACITY {
            cache.templates.clear();
        }
        cache.templates.entry(hash).or_default().push(entry);
    }
    Ok(parsed)
}

/// The stand-in for the `i`th value placeholder, of `v`'s type; `None` for
/// BOOL and NULL, which are parsed as they are.
fn stand_in(i: usize, v: &AttributeValue) -> Option<AttributeValue> {
    match v {
        AttributeValue::S(_) => Some(AttributeValue::S(format!("\u{0}postbox-value-{i}"))),
        AttributeValue::N(_) => Some(AttributeValue::N(Number::from(
            7_000_000_000_000 + i as i64,
        ))),
        AttributeValue::B(_) => Some(AttributeValue::B(
            [b"\0postbox-value-".as_slice(), &i.to_be_bytes()].concat(),
        )),
        _ => None,
    }
}

/// Parses `src` again with every S, N and B value replaced by its stand-in.
fn make_template<T: Parsed>(
    src: &str,
    ph: &Placeholders<'_>,
    parse: &impl Fn(&str, &mut Placeholders<'_>) -> Result<T, ExprError>,
) -> Option<Template<T>> {
    let (names, values) = (ph.names_map(), ph.values_map());
    let stand_ins: Option<std::collections::BTreeMap<String, AttributeValue>> = values.map(|m| {
        m.iter()
            .enumerate()
            .map(|(i, (k, v))| (k.clone(), stand_in(i, v).unwrap_or_else(|| v.clone())))
            .collect()
    });
    let mut own = Placeholders::new(names, stand_ins.as_ref());
    let mut parsed = parse(src, &mut own).ok()?;
    let (used_names, used_values) = own.used();
    let stood: Vec<Option<&AttributeValue>> = used_values
        .iter()
        .map(|k| {
            // BOOL and NULL were parsed as themselves: nothing to replace.
            let real = values?.get(k)?;
            matches!(
                real,
                AttributeValue::S(_) | AttributeValue::N(_) | AttributeValue::B(_)
            )
            .then_some(())?;
            stand_ins.as_ref()?.get(k)
        })
        .collect();
    let mut slots = Vec::new();
    parsed.values_mut(&mut |v| slots.push(stood.iter().position(|s| *s == Some(&*v))));
    Some(Template {
        parsed,
        names: used_names,
        values: used_values,
        slots,
    })
}

/// A copy of the template with the request's values, marking what it uses
/// as used.
fn fill<T: Parsed>(template: &Template<T>, ph: &mut Placeholders<'_>) -> T {
    for name in &template.names {
        ph.name(name);
    }
    let reals: Vec<Option<&AttributeValue>> = template.values.iter().map(|k| ph.value(k)).collect();
    let mut out = template.parsed.clone();
    let mut slots = template.slots.iter();
    out.values_mut(&mut |v| {
        if let Some(Some(real)) = slots.next().and_then(|slot| slot.map(|i| reals[i])) {
            v.clone_from(real);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{parse_condition, parse_update};

    thread_local! {
        /// Cache hits on this thread.
        pub(super) static HITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn names(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn values(pairs: &[(&str, AttributeValue)]) -> BTreeMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    /// Parses through the cache (three times: the second makes the
    /// template, so the third is a hit when the shape is cacheable) and
    /// without it, and checks they all agree, errors included; returns
    /// whether the third was a hit.
    fn same(
        kind: Kind,
        src: &str,
        n: &BTreeMap<String, String>,
        v: &BTreeMap<String, AttributeValue>,
    ) -> bool {
        let n = Some(n).filter(|m| !m.is_empty());
        let v = Some(v).filter(|m| !m.is_empty());
        let run = |cached: bool| -> String {
            let mut ph = Placeholders::new(n, v);
            let out = match (kind, cached) {
                (Kind::Update, true) => parse_update(src, &mut ph).map(|u| format!("{u:?}")),
                (Kind::Update, false) => {
                    crate::update::parse_uncached(src, &mut ph).map(|u| format!("{u:?}"))
                }
                (_, true) => parse_condition(src, &mut ph).map(|c| format!("{c:?}")),
                (_, false) => {
                    crate::condition::parse_uncached(src, kind, &mut ph).map(|c| format!("{c:?}"))
                }
            };
            format!("{out:?} / {:?}", ph.finish())
        };
        let fresh = run(false);
        assert_eq!(run(true), fresh, "first, cached: {src}");
        assert_eq!(
            run(true),
            fresh,
            "second (the template made), cached: {src}"
        );
        let before = HITS.with(|h| h.get());
        assert_eq!(run(true), fresh, "third, cached: {src}");
        HITS.with(|h| h.get()) > before
    }

    #[test]
    fn a_hit_gives_what_a_parse_gives_with_the_requests_own_values() {
        let n = names(&[("#s", "status"), ("#t", "ttl"), ("#a", "attempts")]);
        let conditions = [
            "attribute_not_exists(pk) OR (#s = :p AND lease < :now) OR (#s = :f AND #a < :max)",
            ":now > lease AND begins_with(#s, :p)",
            "#s IN (:p, :f) AND NOT contains(#t, :p)",
            "size(#s) >= :max OR #a = :b OR #t <> :nul",
            "#s = :p AND #a = :p",
        ];
        let updates = [
            "SET #s = :p, lease = :now, #a = if_not_exists(#a, :max) + :max REMOVE x",
            "SET #t = :now - :max, #a = :b, y = :nul ADD z :max",
            "SET #s = :f, #a = :now",
        ];
        let shapes = [
            values(&[
                (":p", AttributeValue::s("PENDING")),
                (":f", AttributeValue::s("FAILED")),
                (":now", AttributeValue::n(1_700_000_000_000)),
                (":max", AttributeValue::n(5)),
                (":b", AttributeValue::Bool(true)),
                (":nul", AttributeValue::Null),
            ]),
            // The same shape, other values: must not see the first ones.
            values(&[
                (":p", AttributeValue::s("other")),
                (":f", AttributeValue::s("PENDING")),
                (":now", AttributeValue::n(42)),
                (":max", AttributeValue::n(7_000_000_000_001)),
                (":b", AttributeValue::Bool(true)),
                (":nul", AttributeValue::Null),
            ]),
            // Another BOOL: another shape.
            values(&[
                (":p", AttributeValue::B(vec![1, 2])),
                (":f", AttributeValue::s("\u{0}postbox-value-0")),
                (":now", AttributeValue::n(1)),
                (":max", AttributeValue::n(2)),
                (":b", AttributeValue::Bool(false)),
                (":nul", AttributeValue::Null),
            ]),
        ];
        for v in &shapes {
            for src in conditions {
                assert!(same(Kind::Condition, src, &n, v), "not kept: {src}");
            }
            for src in updates {
                assert!(same(Kind::Update, src, &n, v), "not kept: {src}");
            }
        }
    }

    #[test]
    fn errors_and_content_checks_are_parsed_every_time() {
        let n = names(&[("#s", "status")]);
        // `:a` sorts before `:b`, so the stand-ins are in order too and
        // only the text keeps the second request from a wrong hit.
        let ordered = values(&[(":a", AttributeValue::n(1)), (":b", AttributeValue::n(9))]);
        let reversed = values(&[(":a", AttributeValue::n(9)), (":b", AttributeValue::n(1))]);
        assert!(!same(Kind::Condition, "#s BETWEEN :a AND :b", &n, &ordered));
        assert!(!same(
            Kind::Condition,
            "#s BETWEEN :a AND :b",
            &n,
            &reversed
        ));
        let ordered = values(&[(":lo", AttributeValue::n(1)), (":hi", AttributeValue::n(9))]);
        let between = "#s BETWEEN :lo AND :hi";
        assert!(!same(Kind::Condition, between, &n, &ordered));
        let typed = "attribute_type(#s, :lo) AND #s = :hi";
        let t = values(&[
            (":lo", AttributeValue::s("S")),
            (":hi", AttributeValue::s("X")),
        ]);
        assert!(!same(Kind::Condition, typed, &n, &t));
        let bad = values(&[
            (":lo", AttributeValue::s("NOPE")),
            (":hi", AttributeValue::s("X")),
        ]);
        assert!(!same(Kind::Condition, typed, &n, &bad));
        // Undefined placeholders, type errors, syntax errors: never kept.
        assert!(!same(Kind::Condition, "#s = :nope", &n, &ordered));
        assert!(!same(Kind::Update, "SET #s = :lo + :hi", &n, &t));
        assert!(!same(Kind::Update, "SET #s = = :lo", &n, &ordered));
        // A parse that succeeds is kept even when the request then fails on
        // a value it did not use: the hit marks the same ones as used.
        assert!(same(Kind::Condition, "#s = :lo", &n, &ordered));
        // A list value: not cached, still right.
        let list = values(&[
            (":lo", AttributeValue::L(vec![AttributeValue::n(1)])),
            (":hi", AttributeValue::L(vec![])),
        ]);
        assert!(!same(
            Kind::Update,
            "SET #s = list_append(:lo, :hi)",
            &n,
            &list
        ));
    }
}

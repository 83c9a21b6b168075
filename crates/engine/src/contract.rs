//! The reachability contract: every subscription can run, every emitted
//! type is declared, every declared type is emitted by someone.
//!
//! Each lane has exactly one dispatcher, so a subscription whose glob can
//! never see an event on its lane would bind in silence and never run. The
//! engine refuses to start with any violation, and `postbox catalog check`
//! reports the same list. Rules:
//!
//! - a glob starting with `row:` is a row-change glob and must be on
//!   BEST_EFFORT (only the row-change consumer sees row changes); any other
//!   glob is a domain glob and must not be on BEST_EFFORT;
//! - a glob must match at least one type its lane can see (declared domain
//!   types, or the entities' row types); a wildcard-free glob that matches
//!   nothing gets a did-you-mean from the closest declared name (a name it
//!   is a prefix of, else the smallest edit distance);
//! - subscription names, type names and entity names are unique; domain
//!   type names do not start with `row:`;
//! - every type a producer emits is declared; every declared type has a
//!   producer.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

use crate::catalog::{Catalog, Lane, ROW_PREFIX};
use crate::glob::Glob;

/// Which rule a violation breaks; the stable code is its `as_str`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The glob matches no type its lane can see.
    NoMatch,
    /// A `row:` glob on a lane other than BEST_EFFORT.
    RowGlobOffBestEffort,
    /// A domain glob on BEST_EFFORT.
    DomainGlobOnBestEffort,
    /// A producer emits a type the catalog does not declare.
    UndeclaredEmittedType,
    /// A declared type nobody emits.
    NoProducer,
    /// Two subscriptions share a name.
    DuplicateSubscription,
    /// Two event types or entities share a name.
    DuplicateDeclaration,
    /// A domain type named like a row change.
    ReservedTypeName,
    /// An INLINE or LOCAL subscription whose handler is not registered.
    MissingHandler,
}

impl Rule {
    /// The stable code, e.g. `no_match`.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::NoMatch => "no_match",
            Rule::RowGlobOffBestEffort => "row_glob_off_best_effort",
            Rule::DomainGlobOnBestEffort => "domain_glob_on_best_effort",
            Rule::UndeclaredEmittedType => "undeclared_emitted_type",
            Rule::NoProducer => "no_producer",
            Rule::DuplicateSubscription => "duplicate_subscription",
            Rule::DuplicateDeclaration => "duplicate_declaration",
            Rule::ReservedTypeName => "reserved_type_name",
            Rule::MissingHandler => "missing_handler",
        }
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The subscription, type or producer it concerns.
    pub subject: String,
    /// What is wrong and what to do, as a sentence.
    pub message: String,
    /// The declared name the user probably meant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.rule.as_str(), self.message)
    }
}

/// Whether a glob addresses row changes.
pub fn is_row_glob(glob: &str) -> bool {
    glob.starts_with(ROW_PREFIX)
}

/// Checks the catalog against every rule that needs only the catalog.
pub fn check(catalog: &Catalog) -> Vec<Violation> {
    let mut out = Vec::new();
    declarations(catalog, &mut out);
    producers(catalog, &mut out);
    subscriptions(catalog, &mut out);
    out
}

/// Checks that every INLINE and LOCAL subscription's handler is among
/// `registered(lane, handler)`.
pub fn check_handlers(
    catalog: &Catalog,
    registered: impl Fn(Lane, &str) -> bool,
) -> Vec<Violation> {
    catalog
        .subscriptions
        .iter()
        .filter(|s| matches!(s.lane, Lane::Inline | Lane::Local) && !registered(s.lane, &s.handler))
        .map(|s| Violation {
            rule: Rule::MissingHandler,
            subject: s.name.clone(),
            message: format!(
                "subscription {:?} on lane {} names handler {:?}, which is not registered with the engine; register it or fix the name",
                s.name,
                s.lane.as_str(),
                s.handler
            ),
            suggestion: None,
        })
        .collect()
}

fn declarations(catalog: &Catalog, out: &mut Vec<Violation>) {
    let mut seen = HashSet::new();
    for t in &catalog.event_types {
        if !seen.insert(t.name.as_str()) {
            out.push(v(
                Rule::DuplicateDeclaration,
                &t.name,
                format!("event type {:?} is declared twice", t.name),
            ));
        }
        if t.name.starts_with(ROW_PREFIX) {
            out.push(v(
                Rule::ReservedTypeName,
                &t.name,
                format!("event type {:?} starts with {ROW_PREFIX:?}, which is reserved for row changes; declare an entity instead", t.name),
            ));
        }
    }
    let mut seen = HashSet::new();
    for e in &catalog.entities {
        if !seen.insert(e.name.as_str()) {
            out.push(v(
                Rule::DuplicateDeclaration,
                &e.name,
                format!("entity {:?} is declared twice", e.name),
            ));
        }
    }
}

fn producers(catalog: &Catalog, out: &mut Vec<Violation>) {
    for p in &catalog.producers {
        for t in &p.emits {
            if catalog.event_type(t).is_none() {
                let names: Vec<&str> = catalog
                    .event_types
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect();
                let suggestion = did_you_mean(t, &names);
                let hint = suggestion
                    .as_ref()
                    .map(|s| format!(" Did you mean {s:?}?"))
                    .unwrap_or_default();
                out.push(Violation {
                    rule: Rule::UndeclaredEmittedType,
                    subject: p.name.clone(),
                    message: format!("producer {:?} emits {t:?}, which the catalog does not declare; add it to [[event_types]].{hint}", p.name),
                    suggestion,
                });
            }
        }
    }
    for t in &catalog.event_types {
        if catalog.producers_of(&t.name).is_empty() {
            out.push(v(
                Rule::NoProducer,
                &t.name,
                format!("event type {:?} has no producer; list who emits it in `producers`, or remove it", t.name),
            ));
        }
    }
}

fn subscriptions(catalog: &Catalog, out: &mut Vec<Violation>) {
    let domain: Vec<&str> = catalog
        .event_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let rows = catalog.row_types();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    let mut names = HashSet::new();
    for s in &catalog.subscriptions {
        if !names.insert(s.name.as_str()) {
            out.push(v(
                Rule::DuplicateSubscription,
                &s.name,
                format!(
                    "subscription name {:?} is used twice; names must be unique",
                    s.name
                ),
            ));
        }
        let row = is_row_glob(&s.glob);
        let lane = s.lane.as_str();
        if row && s.lane != Lane::BestEffort {
            out.push(v(
                Rule::RowGlobOffBestEffort,
                &s.name,
                format!(
                    "subscription {:?} has the row-change glob {:?} on lane {lane}; row changes are only dispatched on BEST_EFFORT, so it would never run",
                    s.name, s.glob
                ),
            ));
            continue;
        }
        if !row && s.lane == Lane::BestEffort {
            out.push(v(
                Rule::DomainGlobOnBestEffort,
                &s.name,
                format!(
                    "subscription {:?} has the domain glob {:?} on lane BEST_EFFORT, which only carries row changes (row:<ENTITY>:<OP>); put it on DURABLE, LOCAL or INLINE",
                    s.name, s.glob
                ),
            ));
            continue;
        }
        let visible = if row { &rows } else { &domain };
        let glob = Glob::new(&s.glob);
        if !visible.iter().any(|t| glob.matches(t)) {
            let suggestion = if glob.is_literal() {
                did_you_mean(&s.glob, visible)
            } else {
                None
            };
            let hint = suggestion
                .as_ref()
                .map(|m| format!(" Did you mean {m:?}?"))
                .unwrap_or_default();
            let kind = if row {
                "row-change type of a declared entity"
            } else {
                "declared event type"
            };
            out.push(Violation {
                rule: Rule::NoMatch,
                subject: s.name.clone(),
                message: format!("subscription {:?} (lane {lane}) has the glob {:?}, which matches no {kind}, so it would never run.{hint}", s.name, s.glob),
                suggestion,
            });
        }
    }
}

fn v(rule: Rule, subject: &str, message: String) -> Violation {
    Violation {
        rule,
        subject: subject.to_owned(),
        message,
        suggestion: None,
    }
}

/// The declared name `wrong` most likely meant: one it is a prefix of (or
/// that is a prefix of it), closest in length; else the one at the smallest
/// edit distance, if that distance is small for the name's length.
pub fn did_you_mean(wrong: &str, names: &[&str]) -> Option<String> {
    let prefixed = names
        .iter()
        .filter(|n| !n.is_empty() && (n.starts_with(wrong) || wrong.starts_with(*n)))
        .min_by_key(|n| n.len().abs_diff(wrong.len()));
    if let Some(n) = prefixed {
        return Some((*n).to_owned());
    }
    let limit = (wrong.chars().count() / 3).max(2);
    names
        .iter()
        .map(|n| (levenshtein(wrong, n), *n))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, n)| n.to_owned())
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The catalog with its contract outcome, in the three forms `catalog
/// check` prints.
#[derive(Clone, Debug)]
pub struct Report<'a> {
    /// The checked catalog.
    pub catalog: &'a Catalog,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl<'a> Report<'a> {
    /// Checks `catalog`.
    pub fn new(catalog: &'a Catalog) -> Report<'a> {
        Report {
            catalog,
            violations: check(catalog),
        }
    }

    /// Whether the catalog passes.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The generated catalog as JSON: every type (domain and row) with its
    /// producers, schema and subscribers, every subscription with the types
    /// it matches, and the violations.
    pub fn to_json(&self) -> Value {
        let c = self.catalog;
        let types: Vec<Value> = c
            .event_types
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "kind": "domain",
                    "producers": c.producers_of(&t.name),
                    "description": t.description,
                    "schema": t.schema,
                    "subscribers": c.subscribers_of(&t.name).iter().filter(|s| !is_row_glob(&s.glob) && s.lane != Lane::BestEffort).map(|s| json!({"name": s.name, "lane": s.lane})).collect::<Vec<_>>(),
                })
            })
            .chain(c.row_types().into_iter().map(|t| {
                json!({
                    "name": t,
                    "kind": "row_change",
                    "subscribers": c.subscribers_of(&t).iter().filter(|s| s.lane == Lane::BestEffort).map(|s| json!({"name": s.name, "lane": s.lane})).collect::<Vec<_>>(),
                })
            }))
            .collect();
        let subs: Vec<Value> = c
            .subscriptions
            .iter()
            .map(|s| {
                let glob = Glob::new(&s.glob);
                let matched: Vec<String> = if is_row_glob(&s.glob) {
                    c.row_types().into_iter().filter(|t| glob.matches(t)).collect()
                } else {
                    c.event_types.iter().filter(|t| glob.matches(&t.name)).map(|t| t.name.clone()).collect()
                };
                json!({"name": s.name, "glob": s.glob, "lane": s.lane, "handler": s.handler, "retry": s.retry, "matches": matched})
            })
            .collect();
        json!({
            "ok": self.ok(),
            "event_types": types,
            "entities": c.entities,
            "producers": c.producers,
            "subscriptions": subs,
            "violations": self.violations,
        })
    }

    /// The generated catalog as Markdown.
    pub fn to_markdown(&self) -> String {
        let c = self.catalog;
        let mut s = String::from(
            "# Event catalog\n\n## Event types\n\n| Type | Producers | Subscribers | Description |\n|---|---|---|---|\n",
        );
        for t in &c.event_types {
            let subs: Vec<String> = c
                .subscribers_of(&t.name)
                .iter()
                .filter(|s| s.lane != Lane::BestEffort && !is_row_glob(&s.glob))
                .map(|s| format!("{} ({})", s.name, s.lane.as_str()))
                .collect();
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} |",
                t.name,
                c.producers_of(&t.name).join(", "),
                subs.join(", "),
                t.description.as_deref().unwrap_or("").replace('|', "\\|")
            );
        }
        if !c.entities.is_empty() {
            s.push_str("\n## Row-change entities\n\n| Entity | Table | Types |\n|---|---|---|\n");
            for e in &c.entities {
                let _ = writeln!(
                    s,
                    "| `{}` | {} | `row:{}:INSERT`, `MODIFY`, `REMOVE` |",
                    e.name,
                    e.table.as_deref().unwrap_or(""),
                    e.name
                );
            }
        }
        s.push_str("\n## Subscriptions\n\n| Name | Glob | Lane | Handler | Max attempts |\n|---|---|---|---|---|\n");
        for sub in &c.subscriptions {
            let _ = writeln!(
                s,
                "| {} | `{}` | {} | `{}` | {} |",
                sub.name,
                sub.glob,
                sub.lane.as_str(),
                sub.handler,
                sub.retry.max_attempts
            );
        }
        s.push_str("\n## Contract\n\n");
        if self.ok() {
            s.push_str("All rules hold.\n");
        }
        for v in &self.violations {
            let _ = writeln!(s, "- **{}**: {}", v.rule.as_str(), v.message);
        }
        s
    }

    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let c = self.catalog;
        let mut s = format!(
            "catalog: {} event types, {} entities, {} producers, {} subscriptions\n",
            c.event_types.len(),
            c.entities.len(),
            c.producers.len(),
            c.subscriptions.len()
        );
        // The catalog itself: who emits each type and who receives it.
        for t in &c.event_types {
            let subs: Vec<String> = c
                .subscribers_of(&t.name)
                .iter()
                .filter(|s| s.lane != Lane::BestEffort && !is_row_glob(&s.glob))
                .map(|s| format!("{} ({})", s.name, s.lane.as_str()))
                .collect();
            let producers = c.producers_of(&t.name);
            let _ = writeln!(
                s,
                "  {}  from: {}  to: {}",
                t.name,
                joined_or(&producers, "-"),
                joined_or(&subs, "nobody")
            );
        }
        for e in &c.entities {
            let subs: Vec<String> = c
                .subscriptions
                .iter()
                .filter(|s| {
                    s.lane == Lane::BestEffort
                        && c.row_types().iter().any(|t| {
                            t.contains(&format!(":{}:", e.name)) && Glob::new(&s.glob).matches(t)
                        })
                })
                .map(|s| s.name.clone())
                .collect();
            let _ = writeln!(s, "  row:{}:*  to: {}", e.name, joined_or(&subs, "nobody"));
        }
        if self.ok() {
            s.push_str("contract: OK, every subscription can run and every type is produced\n");
        } else {
            let _ = writeln!(s, "contract: {} violation(s)", self.violations.len());
            for v in &self.violations {
                let _ = writeln!(s, "  - {v}");
            }
        }
        s
    }
}

/// `items` joined with commas, or `none` when there are none.
fn joined_or(items: &[String], none: &str) -> String {
    if items.is_empty() {
        none.to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_prefers_prefixes_then_edit_distance() {
        let names = ["CONTACTADDRESS", "CONTACT_CREATED", "ORDER_PLACED"];
        assert_eq!(
            did_you_mean("CONTACTADDR", &names).as_deref(),
            Some("CONTACTADDRESS")
        );
        assert_eq!(
            did_you_mean("ORDER_PLACD", &names).as_deref(),
            Some("ORDER_PLACED")
        );
        assert_eq!(did_you_mean("SHIPMENT_SENT", &names), None);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
    }
}

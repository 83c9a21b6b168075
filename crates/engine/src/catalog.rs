//! The catalog: the TOML file users edit that declares event types, their
//! producers, row-change entities and subscriptions.
//!
//! ```toml
//! [[event_types]]
//! name = "PAYMENT_COMPLETED"
//! producers = ["payments"]          # who emits it
//! description = "A payment was captured."
//! schema = { type = "object", required = ["amount"] }   # optional, see `schema`
//!
//! [[producers]]                      # optional: a module and what it emits
//! name = "payments"
//! emits = ["PAYMENT_COMPLETED"]
//!
//! [[entities]]                       # row changes: row:CONTACT:INSERT|MODIFY|REMOVE
//! name = "CONTACT"
//!
//! [[subscriptions]]
//! name = "order-mirror"
//! glob = "PAYMENT_*"                 # fnmatchcase, see `glob`
//! lane = "DURABLE"                   # INLINE, LOCAL, DURABLE or BEST_EFFORT
//! handler = "orders::mirror"
//! retry = { max_attempts = 5, backoff_ms = 200 }
//! ```
//!
//! Unknown keys are refused (a typo must not silently drop a setting).
//! Loading checks only the file's shape; whether its subscriptions can ever
//! run is the reachability contract's job (`contract`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::glob::Glob;
use crate::schema::Schema;

/// Prefix of row-change event types: `row:<ENTITY>:<OP>`.
pub const ROW_PREFIX: &str = "row:";
/// The operations of a row change.
pub const ROW_OPS: [&str; 3] = ["INSERT", "MODIFY", "REMOVE"];

/// Why a catalog file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The file could not be read.
    #[error("cannot read the catalog {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The file is not a catalog.
    #[error("the catalog {path} is not valid: {message}")]
    Invalid { path: String, message: String },
}

/// The lane a subscription runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Lane {
    /// Inside emit before commit; its error aborts the emit.
    Inline,
    /// In-process after commit, best effort.
    Local,
    /// A worker via the FIFO queue, once-only effects through the inbox.
    Durable,
    /// Any worker via the standard row-change queue.
    BestEffort,
}

impl Lane {
    /// The lane as the catalog spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Inline => "INLINE",
            Lane::Local => "LOCAL",
            Lane::Durable => "DURABLE",
            Lane::BestEffort => "BEST_EFFORT",
        }
    }
}

/// A declared domain event type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventType {
    /// The type name, e.g. `PAYMENT_COMPLETED`.
    pub name: String,
    /// Modules that emit it.
    #[serde(default)]
    pub producers: Vec<String>,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema (the supported subset) of its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
}

/// A module and the types it emits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Producer {
    /// The module's name.
    pub name: String,
    /// Event types it emits; each must be declared.
    #[serde(default)]
    pub emits: Vec<String>,
}

/// An entity whose row changes are events `row:<name>:<op>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entity {
    /// The item's pk prefix before the first `#`.
    pub name: String,
    /// The table holding it, for documentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

/// How a subscription's failures are retried (by the durable consumer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Attempts before the event is dead-lettered.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Base backoff between attempts.
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
}

fn default_attempts() -> u32 {
    5
}
fn default_backoff() -> u64 {
    1000
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            max_attempts: default_attempts(),
            backoff_ms: default_backoff(),
        }
    }
}

/// A subscription: a glob over event types, a lane and a handler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subscription {
    /// Unique name; also part of the inbox claim key.
    pub name: String,
    /// fnmatchcase glob over event types.
    pub glob: String,
    /// The lane it runs on.
    pub lane: Lane,
    /// The handler reference, resolved by the lane's dispatcher.
    pub handler: String,
    /// Retry options.
    #[serde(default)]
    pub retry: Retry,
}

/// The whole catalog.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Domain event types.
    #[serde(default)]
    pub event_types: Vec<EventType>,
    /// Producers and what they emit.
    #[serde(default)]
    pub producers: Vec<Producer>,
    /// Row-change entities.
    #[serde(default)]
    pub entities: Vec<Entity>,
    /// Subscriptions.
    #[serde(default)]
    pub subscriptions: Vec<Subscription>,
    /// Limits on what one tenant may do.
    #[serde(default)]
    pub limits: Limits,
}

/// Limits on what one tenant may do (`[limits]`); the HTTP API answers
/// 429 with Retry-After past them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Emits per second one tenant may make, sustained (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_emits_per_second: Option<f64>,
    /// Emits one tenant may make at once on top of the rate (default: one
    /// second's worth, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_emit_burst: Option<u32>,
}

impl Limits {
    /// The sustained rate and the burst, if emits are limited.
    pub fn tenant_emits(&self) -> Option<(f64, f64)> {
        let rate = self.tenant_emits_per_second?;
        let burst = self
            .tenant_emit_burst
            .map_or(rate.ceil().max(1.0), f64::from);
        Some((rate, burst))
    }
}

impl Catalog {
    /// Parses catalog TOML; `origin` names the source in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Catalog, CatalogError> {
        let catalog: Catalog = toml::from_str(text).map_err(|e| CatalogError::Invalid {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        if let Some(rate) = catalog.limits.tenant_emits_per_second
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(CatalogError::Invalid {
                path: origin.to_owned(),
                message: format!(
                    "limits.tenant_emits_per_second must be a number above 0, not {rate}"
                ),
            });
        }
        if catalog.limits.tenant_emit_burst == Some(0) {
            return Err(CatalogError::Invalid {
                path: origin.to_owned(),
                message: "limits.tenant_emit_burst must be at least 1".to_owned(),
            });
        }
        if catalog.limits.tenant_emit_burst.is_some()
            && catalog.limits.tenant_emits_per_second.is_none()
        {
            return Err(CatalogError::Invalid {
                path: origin.to_owned(),
                message: "limits.tenant_emit_burst needs limits.tenant_emits_per_second".to_owned(),
            });
        }
        for t in &catalog.event_types {
            if let Some(s) = &t.schema {
                Schema::new(s.clone()).map_err(|m| CatalogError::Invalid {
                    path: origin.to_owned(),
                    message: format!("event type {}: {m}", t.name),
                })?;
            }
        }
        Ok(catalog)
    }

    /// Reads and parses a catalog file.
    pub fn load(path: impl AsRef<Path>) -> Result<Catalog, CatalogError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Catalog::from_toml(&text, &path.display().to_string())
    }

    /// The declared domain type called `name`.
    pub fn event_type(&self, name: &str) -> Option<&EventType> {
        self.event_types.iter().find(|t| t.name == name)
    }

    /// The row-change types the entities produce.
    pub fn row_types(&self) -> Vec<String> {
        self.entities
            .iter()
            .flat_map(|e| {
                ROW_OPS
                    .iter()
                    .map(move |op| format!("{ROW_PREFIX}{}:{op}", e.name))
            })
            .collect()
    }

    /// Producers of `type_name`: those the type names plus those that say
    /// they emit it.
    pub fn producers_of(&self, type_name: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .event_type(type_name)
            .map(|t| t.producers.clone())
            .unwrap_or_default();
        for p in &self.producers {
            if p.emits.iter().any(|e| e == type_name) && !out.contains(&p.name) {
                out.push(p.name.clone());
            }
        }
        out
    }

    /// The subscriptions whose glob matches `type_name`.
    pub fn subscribers_of(&self, type_name: &str) -> Vec<&Subscription> {
        self.subscriptions
            .iter()
            .filter(|s| Glob::new(&s.glob).matches(type_name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_typos() {
        let c = Catalog::from_toml(
            r#"
            [[event_types]]
            name = "A"
            producers = ["m"]
            schema = { type = "object", properties = { n = { type = "integer", minimum = 0 } } }
            [[entities]]
            name = "CONTACT"
            [[subscriptions]]
            name = "s"
            glob = "A"
            lane = "BEST_EFFORT"
            handler = "h"
            "#,
            "test",
        )
        .unwrap();
        assert_eq!(c.subscriptions[0].lane, Lane::BestEffort);
        assert_eq!(c.subscriptions[0].retry, Retry::default());
        assert_eq!(c.row_types()[0], "row:CONTACT:INSERT");
        let e = Catalog::from_toml(
            "[[subscriptions]]\nname='s'\nglob='A'\nlane='INLINE'\nhandler='h'\nretries=3\n",
            "t",
        )
        .unwrap_err();
        assert!(e.to_string().contains("retries"), "{e}");
        let e = Catalog::from_toml("[[event_types]]\nname='A'\nschema={pattern='x'}\n", "t")
            .unwrap_err();
        assert!(e.to_string().contains("pattern"), "{e}");
    }
}

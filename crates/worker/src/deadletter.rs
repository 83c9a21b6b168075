//! Dead-letter rows: what an operator sees and replays.
//!
//! Tenant-scoped rows (`pk = TENANT#<t>#DEADLETTER`, `sk = <event_id>:<subscription>`)
//! are written in the same transaction that marks a claim DEAD, so a DEAD
//! claim always has its dead letter. Poison messages (bodies that are no
//! event at all, so they have no tenant) go to the global partition
//! `POISON` (see `poison`).

use postbox_item::{AttributeValue, Item};

use crate::claim::ClaimRow;

/// pk of a tenant's dead letters.
pub fn dead_letter_pk(tenant: &str) -> String {
    format!("TENANT#{tenant}#DEADLETTER")
}

/// A dead letter, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The tenant.
    pub tenant: String,
    /// The event id.
    pub event_id: String,
    /// The event's seq.
    pub seq: u64,
    /// The event's type.
    pub event_type: String,
    /// The subscription that gave up.
    pub subscription: String,
    /// The last error.
    pub error: String,
    /// Failed attempts.
    pub attempts: u32,
    /// First failure, ms.
    pub first_failure_at: u64,
    /// Last failure, ms.
    pub last_failure_at: u64,
}

impl DeadLetter {
    /// The dead letter of a DEAD claim row.
    pub fn of(row: &ClaimRow, event_type: &str) -> DeadLetter {
        DeadLetter {
            tenant: row.tenant.clone(),
            event_id: row.key.event_id.clone(),
            seq: row.seq,
            event_type: event_type.to_owned(),
            subscription: row.key.subscription.clone(),
            error: row.last_error.clone().unwrap_or_default(),
            attempts: row.attempts,
            first_failure_at: row.first_failure_at.unwrap_or(row.updated_at),
            last_failure_at: row.last_failure_at.unwrap_or(row.updated_at),
        }
    }

    /// As a store item.
    pub fn to_item(&self) -> Item {
        let n = |v: u64| AttributeValue::n(v as i64);
        Item::from([
            (
                "pk".to_owned(),
                AttributeValue::S(dead_letter_pk(&self.tenant)),
            ),
            (
                "sk".to_owned(),
                AttributeValue::S(format!("{}:{}", self.event_id, self.subscription)),
            ),
            ("tenant".to_owned(), AttributeValue::s(&self.tenant)),
            ("event_id".to_owned(), AttributeValue::s(&self.event_id)),
            ("seq".to_owned(), n(self.seq)),
            ("event_type".to_owned(), AttributeValue::s(&self.event_type)),
            (
                "subscription".to_owned(),
                AttributeValue::s(&self.subscription),
            ),
            ("error".to_owned(), AttributeValue::s(&self.error)),
            ("attempts".to_owned(), n(u64::from(self.attempts))),
            ("first_failure_at".to_owned(), n(self.first_failure_at)),
            ("last_failure_at".to_owned(), n(self.last_failure_at)),
        ])
    }

    /// Decodes a stored dead letter; None if it is not one.
    pub fn from_item(item: &Item) -> Option<DeadLetter> {
        let s = |k: &str| item.get(k)?.as_s().map(str::to_owned);
        let n = |k: &str| {
            item.get(k)?
                .as_n()?
                .to_i64()
                .and_then(|v| u64::try_from(v).ok())
        };
        Some(DeadLetter {
            tenant: s("tenant")?,
            event_id: s("event_id")?,
            seq: n("seq")?,
            event_type: s("event_type")?,
            subscription: s("subscription")?,
            error: s("error")?,
            attempts: u32::try_from(n("attempts")?).ok()?,
            first_failure_at: n("first_failure_at")?,
            last_failure_at: n("last_failure_at")?,
        })
    }
}

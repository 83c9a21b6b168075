//! The claim state machine, as pure functions over one claim row
//! with the clock passed in.
//!
//! One row per (event, subscription), key `IDEMP#<event_id>:<subscription>`:
//!
//! ```text
//!            claim                complete (fenced by lease_token)
//!  absent ─────────▶ PENDING ─────────────────────────────────▶ COMPLETED
//!                     │  ▲  │ retryable error, attempts+1 < max
//!   lease expired ────┘  │  └──────────────▶ FAILED ──claim──▶ PENDING
//!   (crash: claim again) │
//!                        └── terminal error, or the last attempt ──▶ DEAD
//! ```
//!
//! [`may_claim`] is the exact predicate of [`CLAIM_CONDITION`], the
//! conditional write that claims a row already there (a first claim is a
//! Put on "absent"); the inbox tests check that the two agree on the store,
//! through `Inbox::reclaim` and through the whole claim. Every other
//! transition is written as the whole row computed here, conditioned on
//! [`FENCE_CONDITION`] (still PENDING with MY lease token), so a worker
//! whose lease was taken over cannot move the row.
//!
//! Why not `attribute_not_exists(pk)` alone: then a worker that crashed after
//! claiming, or a handler that failed once, would leave a row that refuses
//! every redelivery — the event would be silently at-most-once.

use postbox_item::{AttributeValue, Item};

/// Attribute names of a claim row.
pub mod attr {
    /// Partition key (`IDEMP#<event_id>:<subscription>`).
    pub const PK: &str = "pk";
    /// Sort key ([`super::CLAIM_SK`]).
    pub const SK: &str = "sk";
    /// PENDING, COMPLETED, FAILED or DEAD.
    pub const STATUS: &str = "status";
    /// Which worker holds the lease.
    pub const LEASE_OWNER: &str = "lease_owner";
    /// The fencing token of the current lease, unique per claim.
    pub const LEASE_TOKEN: &str = "lease_token";
    /// When the lease runs out, ms since the epoch.
    pub const LEASE_EXPIRES_AT: &str = "lease_expires_at";
    /// Failed attempts so far.
    pub const ATTEMPTS: &str = "attempts";
    /// The last error a handler returned.
    pub const LAST_ERROR: &str = "last_error";
    /// The event's tenant.
    pub const TENANT: &str = "tenant";
    /// The event's seq in its tenant's log.
    pub const SEQ: &str = "seq";
    /// The event id.
    pub const EVENT_ID: &str = "event_id";
    /// The subscription name.
    pub const SUBSCRIPTION: &str = "subscription";
    /// First claim, ms.
    pub const CREATED_AT: &str = "created_at";
    /// Last transition, ms.
    pub const UPDATED_AT: &str = "updated_at";
    /// First failure, ms.
    pub const FIRST_FAILURE_AT: &str = "first_failure_at";
    /// Last failure, ms.
    pub const LAST_FAILURE_AT: &str = "last_failure_at";
    /// DynamoDB TTL, seconds since the epoch.
    pub const TTL: &str = "ttl";
    /// The result a completion recorded (JSON text).
    pub const RESULT: &str = "result";
}

/// Sort key of every claim row (the inbox table is keyed by pk and sk so
/// dead letters can share it, see `inbox`).
pub const CLAIM_SK: &str = "CLAIM";

/// The claim's one conditional write: absent, OR PENDING with an expired
/// lease, OR FAILED with attempts left. Placeholders: `#status`, `:pending`,
/// `:failed`, `:now`, `:max`.
#[cfg(not(feature = "naive-claims"))]
pub const CLAIM_CONDITION: &str = "attribute_not_exists(pk) \
     OR (#status = :pending AND lease_expires_at <= :now) \
     OR (#status = :failed AND attempts < :max)";

/// The naive claim (feature `naive-claims`, ONLY to show that the tests
/// catch it): first writer wins forever. The placeholders are still used so
/// the request stays valid.
#[cfg(feature = "naive-claims")]
pub const CLAIM_CONDITION: &str = "attribute_not_exists(pk) \
     OR (#status = :pending AND #status = :failed AND lease_expires_at <= :now AND attempts < :max)";

/// The fence of every transition after a claim: still PENDING and still
/// holding the caller's lease token. Placeholders: `#status`, `:pending`,
/// `:token`.
pub const FENCE_CONDITION: &str = "#status = :pending AND lease_token = :token";

/// A claim row's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Claimed; a handler runs under a lease.
    Pending,
    /// The handler's effects committed; never runs again.
    Completed,
    /// A retryable failure released the claim; it may be claimed again.
    Failed,
    /// Given up: dead-lettered; only a replay runs it again.
    Dead,
}

impl Status {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Completed => "COMPLETED",
            Status::Failed => "FAILED",
            Status::Dead => "DEAD",
        }
    }

    /// The status stored as `s`.
    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "PENDING" => Status::Pending,
            "COMPLETED" => Status::Completed,
            "FAILED" => Status::Failed,
            "DEAD" => Status::Dead,
            _ => return None,
        })
    }

    /// COMPLETED or DEAD: nothing more will happen without a replay, so the
    /// message may be deleted and the next event may run.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Completed | Status::Dead)
    }
}

/// Which (event, subscription) a claim is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimKey {
    /// The event id.
    pub event_id: String,
    /// The subscription name.
    pub subscription: String,
}

impl ClaimKey {
    /// The key of `event_id` for `subscription`.
    pub fn new(event_id: impl Into<String>, subscription: impl Into<String>) -> ClaimKey {
        ClaimKey {
            event_id: event_id.into(),
            subscription: subscription.into(),
        }
    }

    /// `<event_id>:<subscription>`: the idempotency key handed to handlers
    /// for their external effects.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.event_id, self.subscription)
    }

    /// The claim row's partition key, `IDEMP#<event_id>:<subscription>`.
    pub fn pk(&self) -> String {
        format!("IDEMP#{}", self.idempotency_key())
    }

    /// The claim row's primary key.
    pub fn item_key(&self) -> Item {
        Item::from(self.key_attributes())
    }

    /// The primary key's attributes, for [`ClaimKey::item_key`] and
    /// [`to_item`].
    fn key_attributes(&self) -> [(String, AttributeValue); 2] {
        [
            (attr::PK.to_owned(), AttributeValue::S(self.pk())),
            (attr::SK.to_owned(), AttributeValue::s(CLAIM_SK)),
        ]
    }
}

/// A claim row, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRow {
    /// Which claim.
    pub key: ClaimKey,
    /// The event's tenant.
    pub tenant: String,
    /// The event's seq.
    pub seq: u64,
    /// Where it stands.
    pub status: Status,
    /// The lease holder (kept after the lease ends, for the record).
    pub lease_owner: String,
    /// The fencing token of the last lease.
    pub lease_token: String,
    /// When the lease runs out, ms.
    pub lease_expires_at: u64,
    /// Failed attempts so far.
    pub attempts: u32,
    /// The last handler error.
    pub last_error: Option<String>,
    /// First claim, ms.
    pub created_at: u64,
    /// Last transition, ms.
    pub updated_at: u64,
    /// First failure, ms.
    pub first_failure_at: Option<u64>,
    /// Last failure, ms.
    pub last_failure_at: Option<u64>,
    /// Expiry for the store's TTL, seconds since the epoch.
    pub ttl: u64,
    /// The result its completion recorded (JSON text), if any.
    pub result: Option<String>,
}

/// What a claim attempt finds, by [`decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The claim may be taken.
    Claim,
    /// Another worker holds a live lease until this time (ms).
    Busy {
        /// When that lease runs out.
        until: u64,
    },
    /// Already COMPLETED or DEAD: nothing to do.
    Final(Status),
    /// FAILED with no attempts left (the worker died between the failure and
    /// the DEAD write, or `max_attempts` was lowered): it must be dead-lettered.
    Exhausted,
}

/// The claim condition as a function: may a claim be taken over `row` at
/// `now_ms` with `max_attempts`? Mirrors [`CLAIM_CONDITION`] exactly.
pub fn may_claim(row: Option<&ClaimRow>, now_ms: u64, max_attempts: u32) -> bool {
    decide(row, now_ms, max_attempts) == Decision::Claim
}

/// What a claim attempt over `row` at `now_ms` finds.
pub fn decide(row: Option<&ClaimRow>, now_ms: u64, max_attempts: u32) -> Decision {
    let Some(row) = row else {
        return Decision::Claim;
    };
    match row.status {
        Status::Pending if row.lease_expires_at <= now_ms => Decision::Claim,
        Status::Pending => Decision::Busy {
            until: row.lease_expires_at,
        },
        Status::Failed if row.attempts < max_attempts => Decision::Claim,
        Status::Failed => Decision::Exhausted,
        s => Decision::Final(s),
    }
}

/// A new lease: who takes it, the fencing token, for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The worker taking it.
    pub owner: String,
    /// A token no other claim of this row ever had.
    pub token: String,
    /// Lease length, ms.
    pub lease_ms: u64,
}

/// What an event is, as far as its claim needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimTarget {
    /// Which claim.
    pub key: ClaimKey,
    /// The tenant.
    pub tenant: String,
    /// The seq.
    pub seq: u64,
}

/// The row after a successful claim of `prev` (None: absent): PENDING under
/// `lease`; attempts, first failure and creation time carried over.
/// `retention_ms` sets the TTL: a claim row must outlive every way its
/// message can come back.
pub fn claimed(
    prev: Option<&ClaimRow>,
    target: &ClaimTarget,
    lease: &Lease,
    now_ms: u64,
    retention_ms: u64,
) -> ClaimRow {
    ClaimRow {
        key: target.key.clone(),
        tenant: target.tenant.clone(),
        seq: target.seq,
        status: Status::Pending,
        lease_owner: lease.owner.clone(),
        lease_token: lease.token.clone(),
        lease_expires_at: now_ms + lease.lease_ms,
        attempts: prev.map_or(0, |p| p.attempts),
        last_error: prev.and_then(|p| p.last_error.clone()),
        created_at: prev.map_or(now_ms, |p| p.created_at),
        updated_at: now_ms,
        first_failure_at: prev.and_then(|p| p.first_failure_at),
        last_failure_at: prev.and_then(|p| p.last_failure_at),
        ttl: ttl_seconds(now_ms, retention_ms),
        result: None,
    }
}

/// The TTL (seconds) of a row written at `now_ms` that must live `retention_ms`.
pub fn ttl_seconds(now_ms: u64, retention_ms: u64) -> u64 {
    (now_ms + retention_ms).div_ceil(1000)
}

/// The row after its lease was renewed at `now_ms`.
pub fn renewed(row: &ClaimRow, now_ms: u64, lease_ms: u64) -> ClaimRow {
    ClaimRow {
        lease_expires_at: now_ms + lease_ms,
        updated_at: now_ms,
        ..row.clone()
    }
}

/// The row after the handler's effects committed. The lease ends now.
pub fn completed(row: &ClaimRow, now_ms: u64) -> ClaimRow {
    ClaimRow {
        status: Status::Completed,
        lease_expires_at: now_ms,
        updated_at: now_ms,
        ..row.clone()
    }
}

/// How a handler failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// Worth another attempt (a dependency was down, a timeout).
    Retryable,
    /// Will fail the same way every time (bad input, a 4xx).
    Terminal,
}

/// The row after a failed attempt: FAILED with attempts+1 if it was
/// retryable and attempts remain, otherwise DEAD (and the caller writes the
/// dead-letter row in the same transaction).
pub fn failed(
    row: &ClaimRow,
    now_ms: u64,
    error: &str,
    kind: FailureKind,
    max_attempts: u32,
) -> ClaimRow {
    let attempts = row.attempts + 1;
    // The naive design (feature `naive-claims`) gives up at the first error.
    let retry = kind == FailureKind::Retryable && !cfg!(feature = "naive-claims");
    let status = if retry && attempts < max_attempts {
        Status::Failed
    } else {
        Status::Dead
    };
    ClaimRow {
        status,
        attempts,
        last_error: Some(error.to_owned()),
        lease_expires_at: now_ms,
        updated_at: now_ms,
        first_failure_at: Some(row.first_failure_at.unwrap_or(now_ms)),
        last_failure_at: Some(now_ms),
        ..row.clone()
    }
}

/// The row of a claim found FAILED with no attempts left ([`Decision::Exhausted`]): DEAD.
pub fn exhausted(row: &ClaimRow, now_ms: u64) -> ClaimRow {
    ClaimRow {
        status: Status::Dead,
        updated_at: now_ms,
        ..row.clone()
    }
}

/// The claim reset by a replay: FAILED with no attempts used, so the next
/// claim takes it, whatever `max_attempts` is. Only DEAD claims are reset;
/// COMPLETED ones never run again.
pub fn reset_for_replay(row: &ClaimRow, now_ms: u64) -> Option<ClaimRow> {
    (row.status == Status::Dead).then(|| ClaimRow {
        status: Status::Failed,
        attempts: 0,
        updated_at: now_ms,
        ..row.clone()
    })
}

/// Retry backoff for the message after `attempts` failures: `base_ms`
/// doubled per failure, capped at 15 minutes, in whole seconds as SQS's
/// visibility timeout wants (rounded up, so a non-zero base never becomes 0).
pub fn backoff_seconds(base_ms: u64, attempts: u32) -> i64 {
    let shift = attempts.saturating_sub(1).min(20);
    let ms = base_ms.saturating_mul(1u64 << shift).min(15 * 60 * 1000);
    ms.div_ceil(1000) as i64
}

// --- encoding ---------------------------------------------------------------

/// The row as a store item.
pub fn to_item(row: &ClaimRow) -> Item {
    // Gathered first and built in one go: a BTreeMap made from a list sorts
    // it once instead of searching the tree for each of 14-17 inserts.
    let mut pairs: Vec<(String, AttributeValue)> = Vec::with_capacity(18);
    pairs.extend(row.key.key_attributes());
    let mut s = |k: &str, v: &str| pairs.push((k.to_owned(), AttributeValue::s(v)));
    s(attr::STATUS, row.status.as_str());
    s(attr::LEASE_OWNER, &row.lease_owner);
    s(attr::LEASE_TOKEN, &row.lease_token);
    s(attr::TENANT, &row.tenant);
    s(attr::EVENT_ID, &row.key.event_id);
    s(attr::SUBSCRIPTION, &row.key.subscription);
    if let Some(e) = &row.last_error {
        s(attr::LAST_ERROR, e);
    }
    if let Some(r) = &row.result {
        s(attr::RESULT, r);
    }
    let mut n = |k: &str, v: u64| pairs.push((k.to_owned(), AttributeValue::n(v as i64)));
    n(attr::SEQ, row.seq);
    n(attr::LEASE_EXPIRES_AT, row.lease_expires_at);
    n(attr::ATTEMPTS, u64::from(row.attempts));
    n(attr::CREATED_AT, row.created_at);
    n(attr::UPDATED_AT, row.updated_at);
    n(attr::TTL, row.ttl);
    if let Some(t) = row.first_failure_at {
        n(attr::FIRST_FAILURE_AT, t);
    }
    if let Some(t) = row.last_failure_at {
        n(attr::LAST_FAILURE_AT, t);
    }
    pairs.into_iter().collect()
}

/// A stored claim row that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed claim row: {0}")]
pub struct MalformedClaim(pub String);

/// Decodes a stored claim row.
pub fn from_item(item: &Item) -> Result<ClaimRow, MalformedClaim> {
    let s = |k: &str| -> Result<String, MalformedClaim> {
        item.get(k)
            .and_then(AttributeValue::as_s)
            .map(str::to_owned)
            .ok_or_else(|| MalformedClaim(format!("{k} missing or not a string")))
    };
    let n_opt = |k: &str| -> Result<Option<u64>, MalformedClaim> {
        match item.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_n()
                .and_then(|n| n.to_i64())
                .and_then(|n| u64::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| MalformedClaim(format!("{k} is not a whole number"))),
        }
    };
    let n = |k: &str| n_opt(k)?.ok_or_else(|| MalformedClaim(format!("{k} missing")));
    let status = s(attr::STATUS)?;
    Ok(ClaimRow {
        key: ClaimKey::new(s(attr::EVENT_ID)?, s(attr::SUBSCRIPTION)?),
        tenant: s(attr::TENANT)?,
        seq: n(attr::SEQ)?,
        status: Status::parse(&status)
            .ok_or_else(|| MalformedClaim(format!("unknown status {status}")))?,
        lease_owner: s(attr::LEASE_OWNER)?,
        lease_token: s(attr::LEASE_TOKEN)?,
        lease_expires_at: n(attr::LEASE_EXPIRES_AT)?,
        attempts: u32::try_from(n(attr::ATTEMPTS)?)
            .map_err(|_| MalformedClaim("attempts too large".into()))?,
        last_error: item
            .get(attr::LAST_ERROR)
            .and_then(AttributeValue::as_s)
            .map(str::to_owned),
        created_at: n(attr::CREATED_AT)?,
        updated_at: n(attr::UPDATED_AT)?,
        first_failure_at: n_opt(attr::FIRST_FAILURE_AT)?,
        last_failure_at: n_opt(attr::LAST_FAILURE_AT)?,
        ttl: n(attr::TTL)?,
        result: item
            .get(attr::RESULT)
            .and_then(AttributeValue::as_s)
            .map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = 3;
    const LEASE: u64 = 30_000;
    const KEEP: u64 = 86_400_000;

    fn target() -> ClaimTarget {
        ClaimTarget {
            key: ClaimKey::new("e1", "ship"),
            tenant: "acme".into(),
            seq: 7,
        }
    }

    fn lease(token: &str) -> Lease {
        Lease {
            owner: "w1".into(),
            token: token.into(),
            lease_ms: LEASE,
        }
    }

    fn pending(now: u64) -> ClaimRow {
        claimed(None, &target(), &lease("t1"), now, KEEP)
    }

    #[test]
    fn keys_follow_the_spec() {
        let k = ClaimKey::new("01J", "orders.mirror");
        assert_eq!(k.idempotency_key(), "01J:orders.mirror");
        assert_eq!(k.pk(), "IDEMP#01J:orders.mirror");
    }

    #[test]
    fn absent_row_is_claimed_with_a_lease() {
        assert_eq!(decide(None, 1_000, MAX), Decision::Claim);
        let row = pending(1_000);
        assert_eq!(row.status, Status::Pending);
        assert_eq!(row.lease_expires_at, 31_000);
        assert_eq!(row.attempts, 0);
        assert_eq!(row.created_at, 1_000);
        assert_eq!(row.ttl, (1_000 + KEEP) / 1000, "whole seconds, rounded up");
        assert_eq!(ttl_seconds(1_001, 0), 2);
    }

    #[test]
    fn pending_with_a_live_lease_is_busy_until_it_expires() {
        let row = pending(1_000);
        assert_eq!(
            decide(Some(&row), 30_999, MAX),
            Decision::Busy { until: 31_000 }
        );
        assert!(!may_claim(Some(&row), 30_999, MAX));
        // A crashed worker's claim is taken over once the lease ran out.
        assert!(may_claim(Some(&row), 31_000, MAX));
        let taken = claimed(Some(&row), &target(), &lease("t2"), 31_000, KEEP);
        assert_eq!(taken.lease_token, "t2");
        assert_eq!(taken.created_at, 1_000);
        assert_eq!(taken.attempts, 0, "a crash is not a handler failure");
    }

    #[test]
    fn completed_and_dead_are_final() {
        let done = completed(&pending(1_000), 2_000);
        assert_eq!(done.status, Status::Completed);
        assert_eq!(
            decide(Some(&done), u64::MAX, MAX),
            Decision::Final(Status::Completed)
        );
        let dead = failed(&pending(1_000), 2_000, "boom", FailureKind::Terminal, MAX);
        assert_eq!(
            decide(Some(&dead), u64::MAX, MAX),
            Decision::Final(Status::Dead)
        );
        assert!(Status::Completed.is_final() && Status::Dead.is_final());
        assert!(!Status::Pending.is_final() && !Status::Failed.is_final());
    }

    #[test]
    fn retryable_failure_releases_the_claim_until_the_last_attempt() {
        let first = failed(
            &pending(1_000),
            2_000,
            "timeout",
            FailureKind::Retryable,
            MAX,
        );
        assert_eq!((first.status, first.attempts), (Status::Failed, 1));
        assert_eq!(first.last_error.as_deref(), Some("timeout"));
        assert_eq!(
            (first.first_failure_at, first.last_failure_at),
            (Some(2_000), Some(2_000))
        );
        // Released: claimable at once, no need to wait for the old lease.
        assert!(may_claim(Some(&first), 2_000, MAX));
        let second = failed(
            &claimed(Some(&first), &target(), &lease("t2"), 3_000, KEEP),
            4_000,
            "timeout again",
            FailureKind::Retryable,
            MAX,
        );
        assert_eq!((second.status, second.attempts), (Status::Failed, 2));
        assert_eq!(
            (second.first_failure_at, second.last_failure_at),
            (Some(2_000), Some(4_000))
        );
        let third = failed(
            &claimed(Some(&second), &target(), &lease("t3"), 5_000, KEEP),
            6_000,
            "still",
            FailureKind::Retryable,
            MAX,
        );
        assert_eq!(
            (third.status, third.attempts),
            (Status::Dead, 3),
            "the last attempt dead-letters"
        );
    }

    #[test]
    fn terminal_failure_is_dead_at_once() {
        let dead = failed(
            &pending(1_000),
            2_000,
            "400 bad request",
            FailureKind::Terminal,
            MAX,
        );
        assert_eq!((dead.status, dead.attempts), (Status::Dead, 1));
    }

    #[test]
    fn failed_without_attempts_left_is_exhausted_not_claimable() {
        let mut row = failed(&pending(1_000), 2_000, "x", FailureKind::Retryable, MAX);
        row.attempts = MAX;
        assert_eq!(decide(Some(&row), 3_000, MAX), Decision::Exhausted);
        assert_eq!(exhausted(&row, 3_000).status, Status::Dead);
    }

    #[test]
    fn renewal_moves_only_the_lease() {
        let row = pending(1_000);
        let r = renewed(&row, 20_000, LEASE);
        assert_eq!(r.lease_expires_at, 50_000);
        assert_eq!(
            (r.status, &r.lease_token),
            (Status::Pending, &row.lease_token)
        );
    }

    #[test]
    fn replay_resets_dead_claims_only() {
        let dead = failed(&pending(1_000), 2_000, "x", FailureKind::Terminal, MAX);
        let reset = reset_for_replay(&dead, 3_000).unwrap();
        assert_eq!((reset.status, reset.attempts), (Status::Failed, 0));
        assert!(may_claim(Some(&reset), 3_000, MAX));
        assert!(reset_for_replay(&completed(&pending(1_000), 2_000), 3_000).is_none());
    }

    #[test]
    fn backoff_doubles_and_rounds_up_to_seconds() {
        assert_eq!(backoff_seconds(0, 1), 0);
        assert_eq!(backoff_seconds(200, 1), 1);
        assert_eq!(backoff_seconds(1_000, 1), 1);
        assert_eq!(backoff_seconds(1_000, 3), 4);
        assert_eq!(backoff_seconds(1_000, 40), 900);
    }

    #[test]
    fn rows_round_trip_through_items() {
        let rows = [
            pending(1_000),
            failed(&pending(1_000), 2_000, "x", FailureKind::Retryable, MAX),
            completed(&pending(1_000), 2_000),
        ];
        for row in rows {
            assert_eq!(from_item(&to_item(&row)).unwrap(), row);
        }
    }
}

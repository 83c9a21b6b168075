//! The reader lease: one row per pipe (owner, fencing token, expiry) in the
//! store, so two relay processes on one store never both deliver a pipe's
//! records.
//!
//! A relay acquires the lease when it is absent, expired, or already its
//! own; every delivery commit checks, in the same transaction as its
//! enqueues and checkpoint move, that the row still names this owner and
//! token and has not expired (and renews it when half used). A relay that
//! paused past its expiry therefore cannot deliver: its commit finds the
//! other relay's token and writes nothing. The decision is a pure function
//! of the row and the clock ([`decide`]).

use std::time::Duration;

use postbox_item::{AttributeValue, Item};
use postbox_store::api::{
    AttributeDefinition, CreateTableInput, KeySchemaElement, KeyType, ScalarType,
};
use postbox_store::embedded::{EmbeddedStore, WriteContext};
use postbox_store::{ItemStore, StoreError};

/// The table holding the leases (no stream).
pub const LEASE_TABLE: &str = postbox_topology::RELAY_LEASES_TABLE;

/// A lease row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Who holds it.
    pub owner: String,
    /// Bumped at every change of owner: a fencing token.
    pub token: u64,
    /// When it lapses, ms since the epoch.
    pub expires_at: u64,
}

/// What acquiring finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take (or keep) the lease with this row.
    Take(Lease),
    /// Another owner holds it until then.
    Held(Lease),
}

/// Whether `me` may take the lease given the current row at `now`.
pub fn decide(current: Option<&Lease>, me: &str, now: u64, duration: Duration) -> Decision {
    let expires_at = now + duration.as_millis() as u64;
    match current {
        None => Decision::Take(Lease {
            owner: me.to_owned(),
            token: 1,
            expires_at,
        }),
        Some(l) if l.owner == me => Decision::Take(Lease {
            expires_at,
            ..l.clone()
        }),
        Some(l) if l.expires_at <= now => Decision::Take(Lease {
            owner: me.to_owned(),
            token: l.token + 1,
            expires_at,
        }),
        Some(l) => Decision::Held(l.clone()),
    }
}

/// Whether the lease row still belongs to `me` with `token` at `now`.
pub fn holds(current: Option<&Lease>, me: &str, token: u64, now: u64) -> bool {
    current.is_some_and(|l| l.owner == me && l.token == token && l.expires_at > now)
}

/// Creates the lease table unless it exists.
pub async fn ensure_table(store: &EmbeddedStore) -> Result<(), StoreError> {
    let input = CreateTableInput {
        table_name: LEASE_TABLE.to_owned(),
        key_schema: vec![KeySchemaElement {
            attribute_name: "pk".to_owned(),
            key_type: KeyType::Hash,
        }],
        attribute_definitions: vec![AttributeDefinition {
            attribute_name: "pk".to_owned(),
            attribute_type: ScalarType::S,
        }],
        billing_mode: Some("PAY_PER_REQUEST".to_owned()),
        provisioned_throughput: None,
        stream_specification: None,
        ..Default::default()
    };
    match store.create_table(input).await {
        Ok(_) | Err(StoreError::ResourceInUse(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

fn key(pipe: &str) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::S(format!("PIPE#{pipe}")))])
}

/// Reads pipe's lease row inside a commit.
pub fn read(ctx: &WriteContext<'_>, pipe: &str) -> Result<Option<Lease>, StoreError> {
    let Some(item) = ctx.get_item(LEASE_TABLE, &key(pipe))? else {
        return Ok(None);
    };
    let num = |name: &str| {
        item.get(name)
            .and_then(AttributeValue::as_n)
            .and_then(|n| n.to_i64())
            .unwrap_or(0) as u64
    };
    Ok(Some(Lease {
        owner: item
            .get("owner")
            .and_then(AttributeValue::as_s)
            .unwrap_or_default()
            .to_owned(),
        token: num("token"),
        expires_at: num("expires_at"),
    }))
}

/// Stages the lease row (it commits only if the operation succeeds).
pub fn write(ctx: &mut WriteContext<'_>, pipe: &str, lease: &Lease) -> Result<(), StoreError> {
    let mut item = key(pipe);
    item.insert("owner".to_owned(), AttributeValue::S(lease.owner.clone()));
    item.insert("token".to_owned(), AttributeValue::n(lease.token as i64));
    item.insert(
        "expires_at".to_owned(),
        AttributeValue::n(lease.expires_at as i64),
    );
    ctx.put_item(LEASE_TABLE, item)?;
    Ok(())
}

/// Tries to take pipe's lease for `me`; the held lease on success, the
/// other holder's row otherwise.
pub async fn acquire(
    store: &EmbeddedStore,
    pipe: &str,
    me: &str,
    duration: Duration,
) -> Result<Decision, StoreError> {
    let (pipe, me) = (pipe.to_owned(), me.to_owned());
    store
        .submit(move |ctx| {
            let decision = decide(read(ctx, &pipe)?.as_ref(), &me, ctx.now_ms(), duration);
            if let Decision::Take(lease) = &decision {
                write(ctx, &pipe, lease)?;
            }
            Ok(decision)
        })
        .await
}

/// Inside a delivery commit: whether `me` still holds the lease with
/// `token`; renews it when less than half of `duration` is left.
pub fn check_in(
    ctx: &mut WriteContext<'_>,
    pipe: &str,
    me: &str,
    token: u64,
    duration: Duration,
) -> Result<bool, StoreError> {
    let now = ctx.now_ms();
    let current = read(ctx, pipe)?;
    if !holds(current.as_ref(), me, token, now) {
        return Ok(false);
    }
    let lease = current.expect("held");
    if lease.expires_at - now < duration.as_millis() as u64 / 2 {
        write(
            ctx,
            pipe,
            &Lease {
                expires_at: now + duration.as_millis() as u64,
                ..lease
            },
        )?;
    }
    Ok(true)
}

/// Renews the lease outside a delivery (while idle); false when lost.
pub async fn renew(
    store: &EmbeddedStore,
    pipe: &str,
    me: &str,
    token: u64,
    duration: Duration,
) -> Result<bool, StoreError> {
    let (pipe, me) = (pipe.to_owned(), me.to_owned());
    store
        .submit(move |ctx| check_in(ctx, &pipe, &me, token, duration))
        .await
}

/// Gives the lease up (expires it now) so another relay can take over at
/// once rather than after the expiry.
pub async fn release(
    store: &EmbeddedStore,
    pipe: &str,
    me: &str,
    token: u64,
) -> Result<(), StoreError> {
    let (pipe, me) = (pipe.to_owned(), me.to_owned());
    store
        .submit(move |ctx| {
            let now = ctx.now_ms();
            if let Some(lease) = read(ctx, &pipe)?
                && holds(Some(&lease), &me, token, now)
            {
                write(
                    ctx,
                    &pipe,
                    &Lease {
                        expires_at: now,
                        ..lease
                    },
                )?;
            }
            Ok(())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(10);

    #[test]
    fn absent_expired_or_own_leases_are_taken() {
        assert_eq!(
            decide(None, "a", 100, D),
            Decision::Take(Lease {
                owner: "a".into(),
                token: 1,
                expires_at: 10_100
            })
        );
        let b = Lease {
            owner: "b".into(),
            token: 4,
            expires_at: 500,
        };
        assert_eq!(decide(Some(&b), "a", 100, D), Decision::Held(b.clone()));
        assert_eq!(
            decide(Some(&b), "a", 500, D),
            Decision::Take(Lease {
                owner: "a".into(),
                token: 5,
                expires_at: 10_500
            })
        );
        assert_eq!(
            decide(Some(&b), "b", 200, D),
            Decision::Take(Lease {
                owner: "b".into(),
                token: 4,
                expires_at: 10_200
            })
        );
    }

    #[test]
    fn holding_needs_owner_token_and_time() {
        let l = Lease {
            owner: "a".into(),
            token: 2,
            expires_at: 1000,
        };
        assert!(holds(Some(&l), "a", 2, 999));
        assert!(!holds(Some(&l), "a", 2, 1000));
        assert!(!holds(Some(&l), "a", 1, 10));
        assert!(!holds(Some(&l), "b", 2, 10));
        assert!(!holds(None, "a", 2, 10));
    }
}

//! The event log's keys: the rows a tenant's log is made of and how their
//! keys are spelled (the rows' attributes are the engine's `layout`).
//!
//! | row | pk | sk |
//! |---|---|---|
//! | head | `TENANT#<t>#HEAD` | `HEAD` |
//! | event | `TENANT#<t>#EVENT` | seq, 20 digits, zero-padded |
//! | verified checkpoint | `TENANT#<t>#VERIFIED` | `VERIFIED` |
//!
//! Tenant names cannot contain `#`, so no tenant's keys reach another's.

/// Partition key attribute of the events table.
pub const PK: &str = "pk";
/// Sort key attribute of the events table.
pub const SK: &str = "sk";
/// Sort key of head rows.
pub const HEAD_SK: &str = "HEAD";
/// Sort key of verified-checkpoint rows.
pub const VERIFIED_SK: &str = "VERIFIED";
/// What every pk of the log starts with.
pub const TENANT_PREFIX: &str = "TENANT#";
/// What the pk of event rows ends with.
pub const EVENT_SUFFIX: &str = "#EVENT";
/// What the pk of head rows ends with.
pub const HEAD_SUFFIX: &str = "#HEAD";
/// What the pk of verified-checkpoint rows ends with.
pub const VERIFIED_SUFFIX: &str = "#VERIFIED";

/// pk of a tenant's head row.
pub fn head_pk(tenant: &str) -> String {
    format!("{TENANT_PREFIX}{tenant}{HEAD_SUFFIX}")
}

/// pk of a tenant's event rows.
pub fn event_pk(tenant: &str) -> String {
    format!("{TENANT_PREFIX}{tenant}{EVENT_SUFFIX}")
}

/// pk of a tenant's verified checkpoint.
pub fn verified_pk(tenant: &str) -> String {
    format!("{TENANT_PREFIX}{tenant}{VERIFIED_SUFFIX}")
}

/// The sort key of event `seq`.
pub fn seq_sk(seq: u64) -> String {
    format!("{seq:020}")
}

/// The tenant of a head-row pk.
pub fn tenant_of_head_pk(pk: &str) -> Option<&str> {
    tenant_of(pk, HEAD_SUFFIX)
}

/// The tenant of a verified-checkpoint pk.
pub fn tenant_of_verified_pk(pk: &str) -> Option<&str> {
    tenant_of(pk, VERIFIED_SUFFIX)
}

/// The tenant of a pk of the log's rows ending in `suffix`; `None` for
/// another row or an empty tenant.
fn tenant_of<'a>(pk: &'a str, suffix: &str) -> Option<&'a str> {
    let tenant = pk.strip_prefix(TENANT_PREFIX)?.strip_suffix(suffix)?;
    (!tenant.is_empty()).then_some(tenant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_spelled_as_the_table_documents() {
        assert_eq!(head_pk("acme"), "TENANT#acme#HEAD");
        assert_eq!(event_pk("acme"), "TENANT#acme#EVENT");
        assert_eq!(verified_pk("acme"), "TENANT#acme#VERIFIED");
        assert_eq!(seq_sk(42), "00000000000000000042");
        // Sort keys order as numbers do.
        assert!(seq_sk(9) < seq_sk(10) && seq_sk(10) < seq_sk(u64::MAX));
    }

    #[test]
    fn the_tenant_comes_back_from_a_head_pk_only() {
        assert_eq!(tenant_of_head_pk(&head_pk("acme")), Some("acme"));
        assert_eq!(tenant_of_head_pk(&event_pk("acme")), None);
        assert_eq!(tenant_of_head_pk("acme#HEAD"), None);
        assert_eq!(tenant_of_head_pk("TENANT##HEAD"), None);
        assert_eq!(tenant_of_verified_pk(&verified_pk("a#b")), Some("a#b"));
        assert_eq!(tenant_of_verified_pk(&head_pk("acme")), None);
    }
}

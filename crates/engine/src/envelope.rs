//! The event envelope, the request context it is built from, event ids and
//! timestamps.
//!
//! # The request context
//!
//! Tenant, correlation id and actor come from the request, not from each call
//! site: a request handler builds one [`Context`] when the request arrives
//! and passes it to every `emit` of that request. An explicit value was
//! chosen over a tokio task-local because it survives `tokio::spawn` and
//! thread hops without ceremony, is visible in signatures (so nobody emits
//! without a tenant by accident) and makes tests trivial. Handlers get the
//! context of the event they handle through [`Context::caused_by`], which
//! keeps the tenant and correlation id and sets the causation id.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest tenant id accepted, in bytes.
pub const MAX_TENANT_LEN: usize = 128;

/// Why a context cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The tenant id cannot be used in keys.
    #[error(
        "tenant id {0:?} is not usable: it must be 1..=128 bytes of letters, digits, '-', '_', '.' or ':' (it is part of every key)"
    )]
    BadTenant(String),
}

/// Who is acting, for whom, in which request. Built once per request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    tenant: String,
    correlation_id: String,
    actor: String,
    causation_id: Option<String>,
    trace: Option<String>,
}

impl Context {
    /// A context for `tenant` acting as `actor`, with a fresh correlation id.
    pub fn new(
        tenant: impl Into<String>,
        actor: impl Into<String>,
    ) -> Result<Context, ContextError> {
        let tenant = tenant.into();
        let ok = !tenant.is_empty()
            && tenant.len() <= MAX_TENANT_LEN
            && tenant
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        if !ok {
            return Err(ContextError::BadTenant(tenant));
        }
        Ok(Context {
            tenant,
            correlation_id: new_event_id(now_ms()),
            actor: actor.into(),
            causation_id: None,
            trace: None,
        })
    }

    /// The same context carrying a W3C `traceparent`, kept on the event's
    /// row (outside the hashed envelope) for the parts that deliver it.
    pub fn with_trace(mut self, traceparent: Option<String>) -> Context {
        self.trace = traceparent;
        self
    }

    /// The same context with the correlation id the request came with.
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Context {
        self.correlation_id = id.into();
        self
    }

    /// The context for work caused by `event`: same tenant and correlation
    /// id, causation id = the event's id, acting as `actor`.
    pub fn caused_by(event: &Envelope, actor: impl Into<String>) -> Context {
        Context {
            tenant: event.tenant.clone(),
            correlation_id: event.correlation_id.clone(),
            actor: actor.into(),
            causation_id: Some(event.id.clone()),
            trace: event.trace.clone(),
        }
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// The correlation id.
    pub fn correlation_id(&self) -> &str {
        &self.correlation_id
    }
    /// The actor.
    pub fn actor(&self) -> &str {
        &self.actor
    }
    /// The event that caused this work, if any.
    pub fn causation_id(&self) -> Option<&str> {
        self.causation_id.as_deref()
    }
    /// The W3C `traceparent` the event will carry, if any.
    pub fn trace(&self) -> Option<&str> {
        self.trace.as_deref()
    }
}

/// One event. Serialises to the JSON whose RFC 8785 form (without `hash`)
/// the chain hashes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Time-ordered unique id (26 characters, ULID layout).
    pub id: String,
    /// The event type, declared in the catalog.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The tenant whose log holds it.
    pub tenant: String,
    /// Position in the tenant's log, from 1, assigned when the commit is
    /// planned (INLINE handlers already see it).
    pub seq: u64,
    /// The request it belongs to.
    pub correlation_id: String,
    /// The event that caused it, if any.
    pub causation_id: Option<String>,
    /// Who did it.
    pub actor: String,
    /// When, RFC 3339 UTC with milliseconds.
    pub occurred_at: String,
    /// The payload, an I-JSON object.
    pub payload: Value,
    /// The W3C `traceparent` the event carries beside it (on its row, as
    /// `trace`): neither hashed nor serialised.
    #[serde(skip)]
    pub trace: Option<String>,
}

/// The system clock in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The last id handed out, so ids are strictly increasing in this process
/// even within one millisecond.
static LAST_ID: Mutex<u128> = Mutex::new(0);

/// A new id: 48 bits of milliseconds then 80 random bits, in Crockford
/// base32 (the ULID layout), strictly increasing within the process (the
/// random part is incremented within a millisecond, as monotonic ULIDs do).
pub fn new_event_id(now_ms: u64) -> String {
    let random =
        (u128::from(fastrand::u64(..)) << 16 | u128::from(fastrand::u16(..))) & ((1u128 << 80) - 1);
    let mut candidate = (u128::from(now_ms & ((1 << 48) - 1)) << 80) | random;
    {
        let mut last = LAST_ID.lock().unwrap_or_else(|p| p.into_inner());
        if candidate <= *last {
            candidate = *last + 1;
        }
        *last = candidate;
    }
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut out = [0u8; 26];
    for (i, slot) in out.iter_mut().enumerate() {
        let shift = 125 - 5 * i as i32;
        let v = if shift >= 0 {
            (candidate >> shift) & 31
        } else {
            (candidate << -shift) & 31
        };
        *slot = ALPHABET[v as usize];
    }
    String::from_utf8(out.to_vec()).expect("the alphabet is ASCII")
}

/// Milliseconds since the epoch as RFC 3339 UTC, e.g.
/// `2026-11-29T19:27:16.123Z`.
pub fn format_timestamp(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    let (h, min, sec, milli) = (rem / 3600, rem / 60 % 60, rem % 60, ms % 1000);
    if y > 9999 {
        return format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{sec:02}.{milli:03}Z");
    }
    // Written digit by digit: every emit stamps its event, and `format!`
    // cost more than the rest of stamping it.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, y as u64);
    put(5, 2, u64::from(m));
    put(8, 2, u64::from(d));
    put(11, 2, h);
    put(14, 2, min);
    put(17, 2, sec);
    put(20, 3, milli);
    String::from_utf8(out.to_vec()).expect("ASCII digits")
}

/// Milliseconds since the Unix epoch of a timestamp [`format_timestamp`]
/// wrote (`YYYY-MM-DDTHH:MM:SS.mmmZ`); None for anything else.
pub fn parse_timestamp(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u64> {
        let part = &text[from..to];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, sec, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, m as u32, d as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + mi * 60 + sec;
    Some(secs * 1000 + ms)
}

/// Howard Hinnant's civil-to-days algorithm.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_timestamp_parses_back_to_its_milliseconds() {
        for ms in [0, 951_782_400_000, 1_700_000_000_123, 4_102_444_799_999] {
            assert_eq!(parse_timestamp(&format_timestamp(ms)), Some(ms), "{ms}");
        }
        for bad in [
            "",
            "2026-13-01T00:00:00.000Z",
            "2026-01-01 00:00:00.000Z",
            "2026-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn ids_are_time_ordered_and_unique() {
        let a = new_event_id(1_000);
        let b = new_event_id(1_000);
        let c = new_event_id(2_000);
        assert_eq!(a.len(), 26);
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_timestamp(1_893_456_000_123),
            "2030-01-01T00:00:00.123Z"
        );
        assert_eq!(
            format_timestamp(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn timestamps_are_spelled_as_format_spells_them() {
        let spelled = |ms: u64| {
            let secs = ms / 1000;
            let (y, m, d) = civil_from_days((secs / 86_400) as i64);
            let rem = secs % 86_400;
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
                rem / 3600,
                rem / 60 % 60,
                rem % 60,
                ms % 1000
            )
        };
        let edges = [253_402_300_799_999, 253_402_300_800_000, u64::MAX];
        let sweep = (0..60_000).map(|i| i * 6_700_417_919_u64 + i % 1000);
        for ms in edges.into_iter().chain(sweep) {
            assert_eq!(format_timestamp(ms), spelled(ms), "{ms}");
        }
        assert_eq!(
            format_timestamp(253_402_300_799_999),
            "9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn tenants_must_be_key_safe() {
        assert!(Context::new("acme-1", "u").is_ok());
        assert!(Context::new("a#b", "u").is_err());
        assert!(Context::new("", "u").is_err());
    }
}

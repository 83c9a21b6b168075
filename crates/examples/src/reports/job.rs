//! Report jobs as rows, and the rules for what a request may ask for.
//!
//! Table `jobs` (pk S, NEW_AND_OLD_IMAGES stream for the pipes, TTL on
//! `expires_at`): one row `JOB#<jobId>` per job, with `jobId`, `tenant`,
//! `branch`, `status` (PENDING, RUNNING, SUCCEEDED, FAILED), `attempts`,
//! the runner's `lease_until` (ms) while RUNNING, `result` (a URL) once
//! SUCCEEDED, `error` after a failed attempt, timestamps.
//!
//! Table `job_keys` (pk S, TTL on `expires_at`): one row
//! `KEY#<tenant>#<Idempotency-Key>` per key, naming the job it created and
//! the branch asked for. A key row outlives its job by a grace period, so a
//! key whose job expired answers 404 instead of silently starting a new job.

use postbox_item::{AttributeValue, Item};

/// The jobs table.
pub const JOBS_TABLE: &str = "jobs";
/// The Idempotency-Key table.
pub const KEYS_TABLE: &str = "job_keys";
/// The TTL attribute of both tables (seconds since the epoch).
pub const EXPIRES_AT: &str = "expires_at";

/// Shortest and longest Idempotency-Key.
pub const KEY_LENGTH: std::ops::RangeInclusive<usize> = 8..=128;

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobStatus {
    /// Accepted, waiting for a runner.
    Pending,
    /// A runner holds it.
    Running,
    /// Done; `result` holds the report's URL.
    Succeeded,
    /// Given up after the last attempt.
    Failed,
}

impl JobStatus {
    /// As stored and served.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "PENDING",
            JobStatus::Running => "RUNNING",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
        }
    }

    /// From its stored form.
    pub fn parse(s: &str) -> Option<JobStatus> {
        Some(match s {
            "PENDING" => JobStatus::Pending,
            "RUNNING" => JobStatus::Running,
            "SUCCEEDED" => JobStatus::Succeeded,
            "FAILED" => JobStatus::Failed,
            _ => return None,
        })
    }

    /// SUCCEEDED or FAILED: it will not change again.
    pub fn is_final(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed)
    }
}

/// A job row, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The job's id (time-ordered, 26 characters).
    pub id: String,
    /// The tenant that asked for it.
    pub tenant: String,
    /// The branch the report is about.
    pub branch: String,
    /// Where it stands.
    pub status: JobStatus,
    /// Runs started so far.
    pub attempts: u32,
    /// The report's URL, once SUCCEEDED.
    pub result: Option<String>,
    /// The last failure, if any.
    pub error: Option<String>,
    /// The runner holding it, while RUNNING.
    pub runner: Option<String>,
    /// When the runner's lease ends (ms), while RUNNING.
    pub lease_until: Option<u64>,
    /// When it was accepted, RFC 3339.
    pub created_at: String,
    /// When the store's TTL removes it (seconds since the epoch).
    pub expires_at: u64,
}

/// The key of job `id`'s row.
pub fn job_key(id: &str) -> Item {
    pk(format!("JOB#{id}"))
}

/// The key of the row of Idempotency-Key `key` for `tenant`.
pub fn idempotency_key(tenant: &str, key: &str) -> Item {
    pk(format!("KEY#{tenant}#{key}"))
}

fn pk(value: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::s(value))])
}

impl Job {
    /// The row of a new PENDING job.
    pub fn to_item(&self) -> Item {
        let mut item = job_key(&self.id);
        let mut s = |k: &str, v: &str| {
            item.insert(k.to_owned(), AttributeValue::s(v));
        };
        s("jobId", &self.id);
        s("tenant", &self.tenant);
        s("branch", &self.branch);
        s("status", self.status.as_str());
        s("created_at", &self.created_at);
        if let Some(r) = &self.result {
            s("result", r);
        }
        if let Some(e) = &self.error {
            s("error", e);
        }
        if let Some(r) = &self.runner {
            s("runner", r);
        }
        item.insert(
            "attempts".into(),
            AttributeValue::n(i64::from(self.attempts)),
        );
        if let Some(l) = self.lease_until {
            item.insert("lease_until".into(), number(l));
        }
        item.insert(EXPIRES_AT.into(), number(self.expires_at));
        item
    }

    /// The job in `item`, or what is wrong with it.
    pub fn from_item(item: &Item) -> Result<Job, String> {
        let s = |k: &str| {
            item.get(k)
                .and_then(AttributeValue::as_s)
                .map(str::to_owned)
        };
        let n = |k: &str| {
            item.get(k)
                .and_then(AttributeValue::as_n)
                .and_then(|n| n.to_i64())
                .and_then(|i| u64::try_from(i).ok())
        };
        let need = |k: &str| s(k).ok_or_else(|| format!("the job row has no string {k}"));
        let status = need("status")?;
        Ok(Job {
            id: need("jobId")?,
            tenant: need("tenant")?,
            branch: need("branch")?,
            status: JobStatus::parse(&status)
                .ok_or_else(|| format!("the job row has an unknown status {status:?}"))?,
            attempts: n("attempts").unwrap_or(0) as u32,
            result: s("result"),
            error: s("error"),
            runner: s("runner"),
            lease_until: n("lease_until"),
            created_at: need("created_at")?,
            expires_at: n(EXPIRES_AT).unwrap_or(0),
        })
    }
}

/// A non-negative number attribute.
pub(crate) fn number(n: u64) -> AttributeValue {
    AttributeValue::n(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The branch of a `POST /reports` body, or the message of a 400: the body
/// must be a JSON object with exactly one member, `branch`, a string of
/// 2-40 lowercase letters, digits and '-' (`^[a-z0-9-]{2,40}$`).
pub fn parse_request(body: &[u8]) -> Result<String, String> {
    // The engine's I-JSON parser: a duplicate key is refused, as on /v1.
    let value = std::str::from_utf8(body)
        .map_err(|_| "the body is not UTF-8".to_owned())
        .and_then(|text| postbox_engine::json::parse(text).map_err(|e| e.to_string()))
        .map_err(|e| format!("the body is not valid JSON ({e}); send {{\"branch\": \"main\"}}"))?;
    let Some(object) = value.as_object() else {
        return Err("the body must be a JSON object such as {\"branch\": \"main\"}".into());
    };
    if let Some(other) = object.keys().find(|k| *k != "branch") {
        return Err(format!(
            "unknown field {other:?}; the only field is \"branch\""
        ));
    }
    let branch = match object.get("branch") {
        None => return Err("the field \"branch\" is required".into()),
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err("the field \"branch\" must be a string".into()),
    };
    check_branch(branch)?;
    Ok(branch.clone())
}

/// `^[a-z0-9-]{2,40}$`, with a message that says which part failed.
pub fn check_branch(branch: &str) -> Result<(), String> {
    let len = branch.chars().count();
    if !(2..=40).contains(&len) {
        return Err(format!(
            "the branch must be 2 to 40 characters long, got {len}"
        ));
    }
    if let Some(c) = branch
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "the branch {branch:?} contains {c:?}; use lowercase letters, digits and '-' only (^[a-z0-9-]{{2,40}}$)"
        ));
    }
    Ok(())
}

/// An Idempotency-Key header value, or the message of a 400.
pub fn check_key(key: &str) -> Result<(), String> {
    let len = key.chars().count();
    if !KEY_LENGTH.contains(&len) {
        return Err(format!(
            "the Idempotency-Key must be {} to {} characters long, got {len}",
            KEY_LENGTH.start(),
            KEY_LENGTH.end()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &str, expect: Result<&str, &str>) {
        match (parse_request(body.as_bytes()), expect) {
            (Ok(b), Ok(e)) => assert_eq!(b, e),
            (Err(m), Err(e)) => assert!(m.contains(e), "{body}: {m:?} lacks {e:?}"),
            (got, _) => panic!("{body}: got {got:?}, expected {expect:?}"),
        }
    }

    #[test]
    fn request_bodies() {
        check(r#"{"branch": "main"}"#, Ok("main"));
        check(r#"{"branch": "release-2026-11"}"#, Ok("release-2026-11"));
        check(
            &format!(r#"{{"branch": "{}"}}"#, "a".repeat(40)),
            Ok(&"a".repeat(40)),
        );
        check("{not json", Err("not valid JSON"));
        check("", Err("not valid JSON"));
        check(r#"["main"]"#, Err("JSON object"));
        check("{}", Err("is required"));
        check(r#"{"branch": 7}"#, Err("must be a string"));
        check(r#"{"branch": "main", "x": 1}"#, Err("unknown field \"x\""));
        check(r#"{"branch": "m"}"#, Err("2 to 40 characters long, got 1"));
        check(
            &format!(r#"{{"branch": "{}"}}"#, "a".repeat(41)),
            Err("got 41"),
        );
        check(r#"{"branch": "Main"}"#, Err("contains 'M'"));
        check(r#"{"branch": "feat/x"}"#, Err("contains '/'"));
        check(r#"{"branch": "ünï"}"#, Err("contains 'ü'"));
    }

    #[test]
    fn idempotency_keys_are_8_to_128_characters() {
        assert!(check_key("12345678").is_ok());
        assert!(check_key(&"k".repeat(128)).is_ok());
        assert!(check_key("1234567").unwrap_err().contains("got 7"));
        assert!(check_key(&"k".repeat(129)).unwrap_err().contains("got 129"));
    }

    #[test]
    fn a_job_row_round_trips() {
        let job = Job {
            id: "01J".into(),
            tenant: "acme".into(),
            branch: "main".into(),
            status: JobStatus::Succeeded,
            attempts: 2,
            result: Some("https://reports.example/main.csv".into()),
            error: Some("worker crashed".into()),
            runner: Some("r1".into()),
            lease_until: Some(1_700_000_000_000),
            created_at: "2026-11-29T00:00:00.000Z".into(),
            expires_at: 1_700_000_000,
        };
        assert_eq!(Job::from_item(&job.to_item()).unwrap(), job);
        assert!(JobStatus::Succeeded.is_final() && !JobStatus::Running.is_final());
    }
}

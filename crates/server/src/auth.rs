//! Who may call the wire protocols: AWS Signature Version 4 checked against
//! the access keys Postbox issues, and what a key may do to Postbox's own
//! tables and queues ([`crate::policy`]).
//!
//! A request is checked the way AWS checks it: its `Authorization` header is
//! parsed, the request is rebuilt from the headers it names as signed, signed
//! again (by `aws-sigv4`) with the stored secret at the request's
//! `X-Amz-Date`, region and service, and the two signatures are compared in
//! constant time. Its date must be within [`MAX_SKEW`] of the server's clock.
//!
//! Replays: where others can read the traffic (plain HTTP off loopback,
//! `serve --insecure-http`), the signature of a request that writes is
//! accepted once: an identical signed write (same headers, same body, same
//! second) seen again within the window is refused as a replay. Reads and
//! ReceiveMessage may repeat (stock clients poll with identical requests
//! and sign no nonce; see `reads_only`). On a channel no one else reads
//! (loopback, TLS) a repeat is accepted, as AWS accepts it: boto3 signs no
//! nonce, so its retry within the same second, or the same write sent twice,
//! is the identical request, and refusing it failed writes that had done
//! nothing wrong ([`WireAuth::sigv4_accepting_repeats`]).
//!
//! Access keys live in the store's [`ACCESS_KEYS_TABLE`], which no wire
//! request can read, write or list ([`crate::policy`]); the secret is kept
//! as is (SigV4 needs it to recompute signatures), so the store's file is
//! as secret as the keys.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, Method, Uri};
use postbox_item::AttributeValue;
use postbox_store::api::{CreateTableInput, GetItemInput, PutItemInput};
use postbox_store::{ItemStore, StoreError};
use serde_json::json;

/// The table holding the access keys. The wire never sees it.
pub const ACCESS_KEYS_TABLE: &str = postbox_topology::ACCESS_KEYS_TABLE;

/// Largest difference between a request's `X-Amz-Date` and the server's
/// clock, either way, as on AWS.
pub const MAX_SKEW: Duration = Duration::from_secs(5 * 60);

/// Most signatures remembered for refusing replays. Only correctly signed
/// requests are remembered, each for at most twice [`MAX_SKEW`]; past this
/// many in that window, requests are refused as throttled (clients retry).
pub const MAX_REMEMBERED_SIGNATURES: usize = 1_000_000;

/// The only signing algorithm accepted.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// How the wire endpoints authenticate requests. No default: whoever
/// builds a server says which.
#[derive(Clone)]
pub enum WireAuth {
    /// Every request is accepted, signed or not, and Postbox's own tables
    /// are not guarded, as DynamoDB Local does. Only for a loopback
    /// listener or tests.
    None,
    /// AWS Signature Version 4 with a Postbox access key.
    SigV4(SigV4),
}

impl WireAuth {
    /// SigV4 checking that refuses a repeated signed write (an empty replay
    /// memory): for a channel others may read.
    pub fn sigv4() -> WireAuth {
        WireAuth::SigV4(SigV4::default())
    }

    /// SigV4 checking that accepts an identical signed request repeated,
    /// as AWS does: for a channel no one else reads (loopback, TLS).
    pub fn sigv4_accepting_repeats() -> WireAuth {
        WireAuth::SigV4(SigV4 {
            accept_repeats: true,
            ..SigV4::default()
        })
    }
}

/// The SigV4 checker's state: the signatures seen recently.
#[derive(Clone, Default)]
pub struct SigV4 {
    seen: Arc<Mutex<Seen>>,
    /// Accept a repeated signed write instead of refusing it as a replay.
    accept_repeats: bool,
}

/// Signatures accepted within the replay window: by signature, and by the
/// time each may be forgotten, so expired ones are dropped oldest first.
#[derive(Default)]
struct Seen {
    by_signature: HashSet<[u8; 32]>,
    by_expiry: BTreeSet<(u64, [u8; 32])>,
}

impl Seen {
    /// Remembers `signature` until `expiry` (seconds since the epoch);
    /// false if it is already remembered (a replay).
    fn insert(&mut self, signature: [u8; 32], now: u64, expiry: u64) -> Result<(), Denied> {
        while let Some(&(t, s)) = self.by_expiry.first() {
            if t > now {
                break;
            }
            self.by_expiry.pop_first();
            self.by_signature.remove(&s);
        }
        if self.by_signature.contains(&signature) {
            return Err(Denied::Replay);
        }
        if self.by_signature.len() >= MAX_REMEMBERED_SIGNATURES {
            return Err(Denied::Throttled);
        }
        self.by_signature.insert(signature);
        self.by_expiry.insert((expiry, signature));
        Ok(())
    }
}

/// The key a request was signed with.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The access key id.
    pub key_id: String,
    /// Whether the key is an operator's.
    pub admin: bool,
    /// The tenant a tenant-scoped key acts for ([`crate::tenant_scope`]).
    pub tenant: Option<String>,
}

/// Why a request is refused, in AWS's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization` header.
    Missing,
    /// An `Authorization` header that cannot be a SigV4 one.
    Incomplete(String),
    /// An access key id Postbox did not issue.
    UnknownKey,
    /// The signature does not match, or its scope is wrong.
    BadSignature(String),
    /// `X-Amz-Date` is more than [`MAX_SKEW`] away.
    Expired(String),
    /// The same signature was already used.
    Replay,
    /// Too many signatures to remember.
    Throttled,
    /// Signed correctly, but the key may not do this.
    AccessDenied(String),
    /// The key table could not be read.
    Internal(String),
}

const BAD_SIGNATURE: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

impl Denied {
    /// The error's type (`__type` after the `#`) and message.
    pub fn code_and_message(&self) -> (&'static str, String) {
        match self {
            Denied::Missing => (
                "MissingAuthenticationTokenException",
                "Request is missing Authentication Token".to_owned(),
            ),
            Denied::Incomplete(m) => ("IncompleteSignatureException", m.clone()),
            Denied::UnknownKey => (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.".to_owned(),
            ),
            Denied::BadSignature(m) => ("InvalidSignatureException", m.clone()),
            Denied::Expired(m) => ("InvalidSignatureException", m.clone()),
            Denied::Replay => (
                "InvalidSignatureException",
                "Signature already used: this signed request was seen within the last 5 minutes (a replay). Sign each request afresh; repeat an identical request in another second or with a different signed header."
                    .to_owned(),
            ),
            Denied::Throttled => (
                "ThrottlingException",
                "Rate of requests exceeds the allowed throughput: too many signed requests within 5 minutes to guard against replays; retry later.".to_owned(),
            ),
            Denied::AccessDenied(m) => ("AccessDeniedException", m.clone()),
            Denied::Internal(m) => ("InternalServerError", m.clone()),
        }
    }

    /// The error as a JSON protocol answer.
    pub fn into_response(self) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let (code, message) = self.code_and_message();
        let status = if matches!(self, Denied::Internal(_)) {
            axum::http::StatusCode::INTERNAL_SERVER_ERROR
        } else {
            axum::http::StatusCode::BAD_REQUEST
        };
        let body =
            json!({"__type": format!("com.amazon.coral.service#{code}"), "message": message});
        let mut resp = (status, body.to_string()).into_response();
        resp.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/x-amz-json-1.0"),
        );
        resp
    }
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Authorization {
    pub key_id: String,
    pub date: String,
    pub region: String,
    pub service: String,
    pub signed_headers: Vec<String>,
    pub signature: String,
}

/// Parses an `Authorization` header value.
pub(crate) fn parse_authorization(value: &str) -> Result<Authorization, Denied> {
    let incomplete = |m: &str| Denied::Incomplete(m.to_owned());
    let rest = value
        .strip_prefix(ALGORITHM)
        .filter(|r| r.starts_with(' '))
        .ok_or_else(|| {
            incomplete(&format!(
                "Authorization header requires the {ALGORITHM} algorithm: AWS Signature Version 4 is the only scheme accepted."
            ))
        })?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let Some((k, v)) = part.trim().split_once('=') else {
            return Err(incomplete(&format!(
                "Authorization header has a malformed element {:?}.",
                part.trim()
            )));
        };
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let credential = credential.ok_or_else(|| {
        incomplete("Authorization header requires 'Credential' parameter. Authorization header requires 'Signature' parameter. Authorization header requires 'SignedHeaders' parameter.")
    })?;
    let signed = signed
        .ok_or_else(|| incomplete("Authorization header requires 'SignedHeaders' parameter."))?;
    let signature = signature
        .ok_or_else(|| incomplete("Authorization header requires 'Signature' parameter."))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, region, service, terminator] = scope[..] else {
        return Err(incomplete(&format!(
            "Credential should have 5 slash-separated parts (key id/date/region/service/aws4_request): {credential:?}."
        )));
    };
    if terminator != "aws4_request" {
        return Err(Denied::BadSignature(format!(
            "Credential should be scoped with a valid terminator: 'aws4_request', not '{terminator}'."
        )));
    }
    if key_id.is_empty() || region.is_empty() {
        return Err(incomplete(&format!(
            "Credential names no access key id or no region: {credential:?}."
        )));
    }
    let signed_headers: Vec<String> = signed.split(';').map(str::to_ascii_lowercase).collect();
    if signed_headers.iter().any(String::is_empty) {
        return Err(incomplete("SignedHeaders has an empty header name."));
    }
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Denied::BadSignature(BAD_SIGNATURE.to_owned()));
    }
    Ok(Authorization {
        key_id: key_id.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
        signed_headers,
        signature: signature.to_ascii_lowercase(),
    })
}

/// The service name a target's requests must be signed for.
pub(crate) fn signing_service(target_service: &str) -> &'static str {
    match target_service {
        "AmazonSQS" => "sqs",
        // DynamoDB and DynamoDB Streams are both signed as `dynamodb` by
        // aws-cli and boto3.
        _ => "dynamodb",
    }
}

impl SigV4 {
    /// Checks the request's signature; the caller on success.
    pub async fn check<S: ItemStore>(
        &self,
        store: &S,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        target_service: &str,
    ) -> Result<Caller, Denied> {
        self.check_at(
            store,
            method,
            uri,
            headers,
            body,
            target_service,
            SystemTime::now(),
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn check_at<S: ItemStore>(
        &self,
        store: &S,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        target_service: &str,
        now: SystemTime,
    ) -> Result<Caller, Denied> {
        let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
            return Err(Denied::Missing);
        };
        let value = value
            .to_str()
            .map_err(|_| Denied::Incomplete("Authorization header is not ASCII.".to_owned()))?;
        let auth = parse_authorization(value)?;
        for required in ["host", "x-amz-date", "x-amz-target"] {
            if !auth.signed_headers.iter().any(|h| h == required) {
                return Err(Denied::Incomplete(format!(
                    "'{required}' must be a 'SignedHeader' in the AWS Authorization."
                )));
            }
        }
        let expected_service = signing_service(target_service);
        if auth.service != expected_service {
            return Err(Denied::BadSignature(format!(
                "Credential should be scoped to correct service: '{expected_service}'."
            )));
        }
        let amz_date = headers
            .get("x-amz-date")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                Denied::Incomplete(
                    "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
                        .to_owned(),
                )
            })?;
        let signed_at = parse_amz_date(amz_date).ok_or_else(|| {
            Denied::Incomplete(format!(
                "X-Amz-Date {amz_date:?} is not an ISO-8601 basic date-time (YYYYMMDDTHHMMSSZ)."
            ))
        })?;
        if !amz_date.starts_with(&auth.date) || auth.date.len() != 8 {
            return Err(Denied::BadSignature(format!(
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{}', from '{amz_date}'.",
                auth.date,
                &amz_date[..8]
            )));
        }
        let key = lookup(store, &auth.key_id)
            .await
            .map_err(|e| Denied::Internal(format!("cannot read the access keys: {e}")))?
            .ok_or(Denied::UnknownKey)?;

        let now_s = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let skew = MAX_SKEW.as_secs();
        if signed_at + skew < now_s {
            return Err(Denied::Expired(format!(
                "Signature expired: {amz_date} is now earlier than {} ({} - 5 min.)",
                format_amz_date(now_s - skew),
                format_amz_date(now_s)
            )));
        }
        if signed_at > now_s + skew {
            return Err(Denied::Expired(format!(
                "Signature not yet current: {amz_date} is still later than {} ({} + 5 min.)",
                format_amz_date(now_s + skew),
                format_amz_date(now_s)
            )));
        }

        let expected = signature(
            &auth,
            &key.secret,
            method,
            uri,
            headers,
            body,
            UNIX_EPOCH + Duration::from_secs(signed_at),
        )?;
        let given = decode_hex(&auth.signature)
            .ok_or_else(|| Denied::BadSignature(BAD_SIGNATURE.to_owned()))?;
        if !bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], &given[..])) {
            return Err(Denied::BadSignature(BAD_SIGNATURE.to_owned()));
        }
        let operation = headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .and_then(|t| t.split_once('.'))
            .map_or("", |(_, op)| op);
        if !self.accept_repeats && !reads_only(operation) {
            self.seen
                .lock()
                .map_err(|_| Denied::Internal("the replay memory is poisoned".to_owned()))?
                .insert(given, now_s, signed_at + skew + 1)?;
        }
        Ok(Caller {
            key_id: auth.key_id,
            admin: key.admin,
            tenant: key.tenant,
        })
    }
}

/// Whether `operation` only reads (or, for ReceiveMessage, is polled with
/// identical requests by every SQS consumer): its replay does nothing a
/// replayer could not see, so identical requests are accepted. Stock AWS
/// clients sign no per-request nonce, so refusing them would refuse every
/// poll repeated within a second.
fn reads_only(operation: &str) -> bool {
    [
        "Get",
        "List",
        "Describe",
        "Query",
        "Scan",
        "BatchGet",
        "TransactGet",
        "Receive",
    ]
    .iter()
    .any(|p| operation.starts_with(p))
}

/// The signature `aws-sigv4` computes for the request as `auth` says it was
/// signed: only its signed headers, its body, at `time`.
fn signature(
    auth: &Authorization,
    secret: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    time: SystemTime,
) -> Result<[u8; 32], Denied> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let mismatch = || Denied::BadSignature(BAD_SIGNATURE.to_owned());
    let mut signed = Vec::new();
    for name in &auth.signed_headers {
        let mut any = false;
        for v in headers.get_all(name.as_str()) {
            any = true;
            signed.push((name.as_str(), v.to_str().map_err(|_| mismatch())?));
        }
        if !any {
            return Err(mismatch());
        }
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or_else(mismatch)?;
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let url = format!("http://{host}{path}");
    let identity: aws_smithy_runtime_api::client::identity::Identity =
        aws_credential_types::Credentials::new(&auth.key_id, secret, None, None, "postbox").into();
    let mut settings = SigningSettings::default();
    // Exactly the headers the client signed, user-agent included if it did.
    settings.excluded_headers = Some(Vec::new());
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&auth.region)
        .name(&auth.service)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|_| mismatch())?
        .into();
    let request = SignableRequest::new(
        method.as_str(),
        url,
        signed.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|_| mismatch())?;
    let (_, signature) = sign(request, &params).map_err(|_| mismatch())?.into_parts();
    decode_hex(&signature).ok_or_else(mismatch)
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// Seconds since the epoch of an ISO-8601 basic UTC date-time,
/// `YYYYMMDDTHHMMSSZ`.
pub fn parse_amz_date(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u64> {
        let s = &text[r];
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (y, m, d) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hh, mm, ss) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, m as i64, d as i64);
    let secs = days * 86_400 + (hh * 3600 + mm * 60 + ss) as i64;
    u64::try_from(secs).ok()
}

/// `YYYYMMDDTHHMMSSZ` of seconds since the epoch.
pub fn format_amz_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

// Howard Hinnant's civil calendar algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Whether `name` is a tenant name a token or key may carry: 1 to 64 of
/// `[A-Za-z0-9_.-]` (no `#`, so no name reaches into another's namespace).
pub fn is_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// An access key as issued: shown once.
#[derive(Clone)]
pub struct AccessKey {
    /// `AKIA` and 16 characters.
    pub id: String,
    /// 40 characters.
    pub secret: String,
}

impl std::fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// What the key table keeps of a key.
struct StoredKey {
    secret: String,
    admin: bool,
    tenant: Option<String>,
}

/// Issues a new access key and stores it in [`ACCESS_KEYS_TABLE`]
/// (created if missing): an admin key, or one scoped to `tenant` (1 to 64
/// of `[A-Za-z0-9_.-]`), which reaches only that tenant's items
/// ([`crate::tenant_scope`]).
pub async fn create_access_key<S: ItemStore>(
    store: &S,
    tenant: Option<&str>,
) -> Result<AccessKey, String> {
    if let Some(t) = tenant
        && !is_tenant_name(t)
    {
        return Err(format!(
            "tenant {t:?} must be 1 to 64 characters of letters, digits, '_', '-' and '.'"
        ));
    }
    match store
        .create_table(CreateTableInput::keyed_by(ACCESS_KEYS_TABLE, "key_id"))
        .await
    {
        Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
        Err(e) => return Err(format!("cannot create {ACCESS_KEYS_TABLE}: {e}")),
    }
    const ID_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const SECRET_ALPHABET: &[u8] =
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut random = [0u8; 56];
    getrandom::fill(&mut random).map_err(|e| format!("no random bytes for an access key: {e}"))?;
    // 32 and 64 divide 256: taking the low bits keeps every character equally likely.
    let id: String = std::iter::once("AKIA".to_owned())
        .chain(
            random[..16]
                .iter()
                .map(|b| (ID_ALPHABET[(*b % 32) as usize] as char).to_string()),
        )
        .collect();
    let secret: String = random[16..]
        .iter()
        .map(|b| SECRET_ALPHABET[(*b % 64) as usize] as char)
        .collect();
    let mut item = postbox_item::Item::new();
    item.insert("key_id".to_owned(), AttributeValue::s(&id));
    item.insert("secret".to_owned(), AttributeValue::s(&secret));
    match tenant {
        Some(t) => item.insert("tenant".to_owned(), AttributeValue::s(t)),
        None => item.insert("admin".to_owned(), AttributeValue::Bool(true)),
    };
    item.insert(
        "created_at".to_owned(),
        AttributeValue::s(format_amz_date(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        )),
    );
    store
        .put_item(PutItemInput {
            table_name: ACCESS_KEYS_TABLE.to_owned(),
            item,
            condition_expression: Some("attribute_not_exists(key_id)".to_owned()),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot store the access key: {e}"))?;
    Ok(AccessKey { id, secret })
}

/// A stored access key, without its secret: what `postbox token list`
/// shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessKeyInfo {
    pub id: String,
    pub admin: bool,
    pub tenant: Option<String>,
    pub created_at: Option<String>,
}

/// Every stored access key.
pub async fn list_access_keys<S: ItemStore>(store: &S) -> Result<Vec<AccessKeyInfo>, StoreError> {
    let items = match store
        .scan_all(postbox_store::api::ScanInput {
            table_name: ACCESS_KEYS_TABLE.to_owned(),
            ..Default::default()
        })
        .await
    {
        Ok(items) => items,
        Err(StoreError::ResourceNotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let text = |item: &postbox_item::Item, name: &str| {
        item.get(name).and_then(|v| v.as_s()).map(str::to_owned)
    };
    Ok(items
        .iter()
        .filter_map(|item| {
            Some(AccessKeyInfo {
                id: text(item, "key_id")?,
                admin: matches!(item.get("admin"), Some(AttributeValue::Bool(true))),
                tenant: text(item, "tenant"),
                created_at: text(item, "created_at"),
            })
        })
        .collect())
}

/// Deletes access key `id`; whether it existed. The next request signed
/// with it is refused (UnrecognizedClientException): every request looks
/// its key up afresh.
pub async fn revoke_access_key<S: ItemStore>(store: &S, id: &str) -> Result<bool, StoreError> {
    let mut key = postbox_item::Item::new();
    key.insert("key_id".to_owned(), AttributeValue::s(id));
    match store
        .delete_item(postbox_store::api::DeleteItemInput {
            table_name: ACCESS_KEYS_TABLE.to_owned(),
            key,
            condition_expression: Some("attribute_exists(key_id)".to_owned()),
            ..Default::default()
        })
        .await
    {
        Ok(_) => Ok(true),
        Err(StoreError::ConditionalCheckFailed { .. }) | Err(StoreError::ResourceNotFound(_)) => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Whether `id` names a stored access key.
pub async fn access_key_exists<S: ItemStore>(store: &S, id: &str) -> Result<bool, StoreError> {
    Ok(lookup(store, id).await?.is_some())
}

async fn lookup<S: ItemStore>(store: &S, id: &str) -> Result<Option<StoredKey>, StoreError> {
    let mut key = postbox_item::Item::new();
    key.insert("key_id".to_owned(), AttributeValue::s(id));
    // The last commit, synced or not (as the API's token check): a key whose
    // row is not synced yet has not been handed out, and a revocation
    // refuses as soon as it commits; no request waits for another's sync.
    let out = match store
        .get_item_committed(GetItemInput {
            table_name: ACCESS_KEYS_TABLE.to_owned(),
            key,
            consistent_read: Some(true),
            ..Default::default()
        })
        .await
    {
        Ok(out) => out,
        Err(StoreError::ResourceNotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(out.item.and_then(|item| {
        Some(StoredKey {
            secret: item.get("secret")?.as_s()?.to_owned(),
            admin: matches!(item.get("admin"), Some(AttributeValue::Bool(true))),
            tenant: item.get("tenant").and_then(|v| v.as_s()).map(str::to_owned),
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_dates_round_trip() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(format_amz_date(1_440_938_160), "20150830T123600Z");
        for s in [0u64, 951_782_400, 1_709_164_799, 4_102_444_800] {
            assert_eq!(parse_amz_date(&format_amz_date(s)), Some(s));
        }
        for bad in [
            "",
            "20150830T123600",
            "2015083OT123600Z",
            "20151330T123600Z",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn authorization_headers_parse() {
        let a = parse_authorization(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/dynamodb/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
        )
        .unwrap();
        assert_eq!(a.key_id, "AKIDEXAMPLE");
        assert_eq!(a.date, "20150830");
        assert_eq!(a.region, "us-east-1");
        assert_eq!(a.service, "dynamodb");
        assert_eq!(
            a.signed_headers,
            ["content-type", "host", "x-amz-date", "x-amz-target"]
        );
        assert!(matches!(
            parse_authorization("Bearer abc"),
            Err(Denied::Incomplete(_))
        ));
        assert!(matches!(
            parse_authorization("AWS4-HMAC-SHA256 Credential=A/B/C/D/aws4_request"),
            Err(Denied::Incomplete(_))
        ));
        assert!(matches!(
            parse_authorization(
                "AWS4-HMAC-SHA256 Credential=A/20150830/r/dynamodb/aws4_request, SignedHeaders=host, Signature=zz"
            ),
            Err(Denied::BadSignature(_))
        ));
    }

    #[test]
    fn a_signature_is_remembered_once_and_forgotten_after_its_window() {
        let mut seen = Seen::default();
        seen.insert([1; 32], 100, 200).unwrap();
        assert_eq!(seen.insert([1; 32], 150, 250), Err(Denied::Replay));
        seen.insert([2; 32], 150, 250).unwrap();
        // At 200 the first has expired; the second is still remembered.
        seen.insert([1; 32], 200, 300).unwrap();
        assert_eq!(seen.insert([2; 32], 200, 300), Err(Denied::Replay));
        assert_eq!(seen.by_signature.len(), 2);
        assert_eq!(seen.by_expiry.len(), 2);
    }
}

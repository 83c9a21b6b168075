//! Emitting events (reading them back is `log`).
//!
//! `POST /v1/events` emits one event with the caller's extra writes in one
//! transaction. The body is `{"type": ..., "payload": {...}, "writes": [...]}`
//! where each write is a TransactWriteItems entry in DynamoDB JSON
//! (`{"Put": {...}}`, `{"Update": ...}`, `{"Delete": ...}`,
//! `{"ConditionCheck": ...}`). Tenant data is namespaced: a write's partition
//! key must be a string starting with `<tenant>#` (tenant names cannot
//! contain `#`, so no name reaches into another's namespace, and every row
//! the server's own code keeps in a writable table starts with its tenant
//! too), and Postbox's own tables (`postbox_*`) and the application's
//! reserved ones cannot be written; anything else is another tenant's data
//! and answers 404.
//!
//! An `Idempotency-Key` header makes the emit safe to retry: the key's row
//! is stored in the same transaction as the event and names its seq, so the
//! same key with the same body answers the first event again, read from the
//! log (also when the first answer was lost after the commit), and with
//! another body 409. A keyed emit is one commit.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use postbox_engine::{Context, EmitError, Envelope, InlineHandler, Write};
use postbox_item::{AttributeValue, Item};
use postbox_queue::QueueClient;
use postbox_store::api::{CreateTableInput, GetItemInput, KeyType, TransactWriteItem};
use postbox_store::{ItemStore, StoreError};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::Instrument as _;

use crate::body::{from_value, header, parse_value, read_body};
use crate::{Api, ApiError, Caller};

/// The requests table's TTL attribute: a key's row expires after
/// `ApiConfig::idempotency_ttl_secs`.
pub const REQUESTS_TTL: &str = "expires_at";

pub(crate) async fn ensure_requests_table<S: ItemStore>(
    store: &S,
    table: &str,
) -> Result<(), ApiError> {
    let input = CreateTableInput::keyed_by(table.to_owned(), "pk");
    match store.create_table(input).await {
        Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let spec = postbox_store::api::TimeToLiveSpecification {
        enabled: true,
        attribute_name: REQUESTS_TTL.into(),
    };
    match store.update_time_to_live(table, spec).await {
        Ok(_) => {}
        // Already enabled on this attribute: nothing to do.
        Err(StoreError::Validation(m)) if m.contains("already enabled") => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Longest X-Correlation-Id: it is stored in the event, forever.
const MAX_CORRELATION_ID: usize = 128;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmitRequest {
    #[serde(rename = "type")]
    event_type: String,
    payload: Value,
    #[serde(default)]
    writes: Vec<Value>,
}

impl EmitRequest {
    /// The request in `body`. Its tree is taken apart where it lies:
    /// deriving the request from it would build the payload's tree and each
    /// write's again, a copy of every emit's kilobytes. A body of any other
    /// shape goes through the derived parse, whose message says what is
    /// wrong.
    fn parse(body: &[u8]) -> Result<EmitRequest, ApiError> {
        let value = parse_value(body)?;
        let Value::Object(mut fields) = value else {
            return from_value(value);
        };
        let expected = fields
            .keys()
            .all(|k| matches!(k.as_str(), "type" | "payload" | "writes"))
            && matches!(fields.get("type"), Some(Value::String(_)))
            && fields.contains_key("payload")
            && matches!(fields.get("writes"), None | Some(Value::Array(_)));
        if !expected {
            return from_value(Value::Object(fields));
        }
        let (Some(Value::String(event_type)), Some(payload)) =
            (fields.remove("type"), fields.remove("payload"))
        else {
            unreachable!("checked above")
        };
        let writes = match fields.remove("writes") {
            Some(Value::Array(writes)) => writes,
            _ => Vec::new(),
        };
        Ok(EmitRequest {
            event_type,
            payload,
            writes,
        })
    }
}

/// An emit's answer, `{"event": ..., "hash": ...}`.
#[expect(
    clippy::large_enum_variant,
    reason = "built once per request and moved once: boxing the envelope would cost every emit an allocation"
)]
pub(crate) enum Answer {
    /// The event this request emitted, written straight from the envelope
    /// in the bytes a JSON tree of it gives (keys in order), so that no tree
    /// is built for every emit.
    New { envelope: Envelope, hash: String },
    /// The answer of the earlier request with this Idempotency-Key.
    Earlier(Value),
}

impl Answer {
    /// The answer's JSON text: for a new event written straight from the
    /// envelope, its fields in the order of a JSON tree's keys, with the
    /// strings escaped by `postbox_item::json` (serde_json's escaping, a
    /// byte at a time, was most of writing a kilobyte payload).
    fn text(&self) -> String {
        use postbox_item::json::{write_string, write_value};
        use std::fmt::Write as _;
        let (e, hash) = match self {
            Answer::New { envelope, hash } => (envelope, hash),
            Answer::Earlier(v) => {
                let mut out = String::new();
                write_value(&mut out, v);
                return out;
            }
        };
        // The envelope's fields are about 300 bytes; a payload of a
        // kilobyte or two then fits without the text being copied.
        let mut out = String::with_capacity(2048);
        out.push_str("{\"event\":{\"actor\":");
        write_string(&mut out, &e.actor);
        out.push_str(",\"causation_id\":");
        match &e.causation_id {
            Some(c) => write_string(&mut out, c),
            None => out.push_str("null"),
        }
        out.push_str(",\"correlation_id\":");
        write_string(&mut out, &e.correlation_id);
        out.push_str(",\"id\":");
        write_string(&mut out, &e.id);
        out.push_str(",\"occurred_at\":");
        write_string(&mut out, &e.occurred_at);
        out.push_str(",\"payload\":");
        write_value(&mut out, &e.payload);
        out.push_str(",\"seq\":");
        let _ = write!(out, "{}", e.seq);
        out.push_str(",\"tenant\":");
        write_string(&mut out, &e.tenant);
        out.push_str(",\"type\":");
        write_string(&mut out, &e.event_type);
        out.push_str("},\"hash\":");
        write_string(&mut out, hash);
        out.push('}');
        out
    }
}

impl axum::response::IntoResponse for Answer {
    fn into_response(self) -> axum::response::Response {
        let json = axum::http::HeaderValue::from_static("application/json");
        ([(axum::http::header::CONTENT_TYPE, json)], self.text()).into_response()
    }
}

/// `POST /v1/events`.
pub(crate) async fn emit<S: ItemStore, Q: QueueClient>(
    state: State<Api<S, Q>>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Answer), ApiError> {
    let started = std::time::Instant::now();
    // A span only when spans are exported: the emit path stays as cheap
    // as it was otherwise, and a received `traceparent` is kept as it came.
    let received = headers
        .get(postbox_trace::HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let out = if postbox_trace::enabled() {
        let span = tracing::info_span!("emit", tenant = caller.tenant.as_deref().unwrap_or(""));
        postbox_trace::follow(&span, received.as_deref());
        let trace = postbox_trace::pass_on(&span, received.as_deref());
        emit_once(state, caller, headers, body, trace)
            .instrument(span)
            .await
    } else {
        let trace = postbox_trace::pass_on(&tracing::Span::none(), received.as_deref());
        emit_once(state, caller, headers, body, trace).await
    };
    let outcome = match &out {
        Ok((StatusCode::CREATED, _)) => "created",
        Ok(_) => "repeated",
        Err(_) => "refused",
    };
    metrics::histogram!("postbox_http_emit_seconds", "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
    out
}

/// [`emit`], unmeasured.
async fn emit_once<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
    trace: Option<String>,
) -> Result<(StatusCode, Answer), ApiError> {
    let tenant = caller.tenant()?.to_owned();
    take_emit_budget(&api, &tenant)?;
    let body = read_body(&api, body).await?;
    let idempotency_key = header(&headers, "idempotency-key")?;
    if let Some(k) = &idempotency_key
        && (k.is_empty() || k.len() > 255)
    {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            "the Idempotency-Key header must be 1 to 255 characters",
        ));
    }
    let req = EmitRequest::parse(&body)?;
    let cfg = &api.inner.config;
    if req.writes.len() > cfg.max_writes {
        return Err(ApiError::bad_request(
            "too_many_writes",
            format!(
                "an emit carries at most {} extra writes; this one has {}",
                cfg.max_writes,
                req.writes.len()
            ),
        ));
    }
    let mut writes = Vec::with_capacity(req.writes.len() + 1);
    for (i, w) in req.writes.into_iter().enumerate() {
        let item: TransactWriteItem = serde_json::from_value(w).map_err(|e| {
            ApiError::bad_request(
                "invalid_write",
                format!("writes[{i}] is not a TransactWriteItems entry: {e}"),
            )
        })?;
        check_write(&api, &tenant, i, &item).await?;
        writes.push(Write::from_transact(item));
    }
    let body_hash = hex::encode(Sha256::digest(&body));
    // A key is not looked up before the emit: most keys are new, and the
    // key's row, conditioned on being absent, commits with the event. A
    // key used before fails the emit, which commits nothing, and is
    // answered below.
    let idem_pk = idempotency_key
        .as_ref()
        .map(|k| format!("EMIT#{tenant}#{k}"));
    let correlation = header(&headers, "x-correlation-id")?;
    if let Some(c) = &correlation
        && (c.is_empty() || c.len() > MAX_CORRELATION_ID)
    {
        return Err(ApiError::bad_request(
            "invalid_correlation_id",
            format!("the X-Correlation-Id header must be 1 to {MAX_CORRELATION_ID} characters"),
        ));
    }
    let mut ctx = Context::new(&tenant, &caller.subject)
        .map_err(|e| ApiError::bad_request("invalid_context", e.to_string()))?
        .with_trace(trace);
    if let Some(c) = correlation {
        ctx = ctx.with_correlation_id(c);
    }
    let idem_index = writes.len();
    let now = postbox_engine::envelope::now_ms();
    let expires_at = now / 1000 + cfg.idempotency_ttl_secs;
    // The key's row commits with the event and names its seq: a retry
    // reads the answer back from the log, so nothing is written after.
    let record = idem_pk.clone().map(|pk| -> InlineHandler {
        let (table, body_hash) = (cfg.requests_table.clone(), body_hash.clone());
        Arc::new(move |env: &Envelope| {
            let row = request_row(&pk, &body_hash, env.seq, expires_at);
            Ok(vec![
                Write::put(table.clone(), row).condition("attribute_not_exists(pk)"),
            ])
        })
    });
    let emitted = api
        .inner
        .engine
        .emit_recorded(&ctx, &req.event_type, req.payload, writes, record)
        .await;
    match emitted {
        Ok(e) => Ok((
            StatusCode::CREATED,
            Answer::New {
                envelope: e.envelope,
                hash: e.hash,
            },
        )),
        Err(e) => match idem_pk {
            Some(pk) => earlier_or(&api, &tenant, &pk, &body_hash, e, idem_index).await,
            None => Err(emit_error(e)),
        },
    }
}

/// The answer to a keyed emit that was refused (nothing committed): the
/// earlier request's answer when the key has one (or 409 for another
/// body), whatever this attempt met, since a retry's conditional writes
/// fail on the state its first attempt left and its key's row fails
/// whenever the key was used; else the refusal. When only the key's row
/// failed and it has no answer yet, a concurrent request with the same key
/// is committing: it is waited for. An error whose outcome is unknown
/// (5xx) is answered as it is: the client's retry finds the key then.
async fn earlier_or<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    tenant: &str,
    pk: &str,
    body_hash: &str,
    e: EmitError,
    idem_index: usize,
) -> Result<(StatusCode, Answer), ApiError> {
    let key_row_failed =
        matches!(&e, EmitError::ConditionalCheckFailed { index, .. } if *index == idem_index);
    let refusal = emit_error(e);
    if !refusal.status.is_client_error() {
        return Err(refusal);
    }
    if let Some(previous) = remembered(api, tenant, pk, body_hash).await? {
        return Ok((StatusCode::OK, Answer::Earlier(previous)));
    }
    if !key_row_failed {
        return Err(refusal);
    }
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(previous) = remembered(api, tenant, pk, body_hash).await? {
            return Ok((StatusCode::OK, Answer::Earlier(previous)));
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "idempotency_key_in_use",
        "another request with this Idempotency-Key is still in progress; retry shortly",
    ))
}

/// Takes one emit from `tenant`'s budget (a token bucket of the catalog's
/// `[limits]`), or 429 with the seconds until one is there.
fn take_emit_budget<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    tenant: &str,
) -> Result<(), ApiError> {
    let Some((rate, burst)) = api.inner.engine.catalog().limits.tenant_emits() else {
        return Ok(());
    };
    let now = std::time::Instant::now();
    let mut buckets = api.inner.emit_buckets.lock().expect("emit buckets");
    let (tokens, last) = buckets.entry(tenant.to_owned()).or_insert((burst, now));
    *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
    *last = now;
    if *tokens >= 1.0 {
        *tokens -= 1.0;
        return Ok(());
    }
    let wait = ((1.0 - *tokens) / rate).ceil().max(1.0) as u64;
    Err(ApiError::too_many(
        "rate_limited",
        format!(
            "tenant {tenant:?} may emit {rate} events per second (burst {burst}); retry in {wait} s"
        ),
        wait,
    ))
}

/// The row of an idempotency key: the request's body hash, the seq of its
/// event and when the row expires.
fn request_row(pk: &str, body_hash: &str, seq: u64, expires_at: u64) -> Item {
    let mut row = Item::new();
    row.insert("pk".into(), AttributeValue::s(pk));
    row.insert("body_sha256".into(), AttributeValue::s(body_hash));
    row.insert("event_seq".into(), AttributeValue::n(seq as i64));
    row.insert(REQUESTS_TTL.into(), AttributeValue::n(expires_at as i64));
    row
}

/// The answer of an earlier emit with this key: Some if the body is the
/// same, 409 if it differs. The answer is the event the row names, read
/// from the log: the row commits with the event, so a keyed emit costs one
/// commit and its answer can never be lost. (Rows written by earlier
/// versions may also hold the answer's text; it is used when present.)
async fn remembered<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    tenant: &str,
    pk: &str,
    body_hash: &str,
) -> Result<Option<Value>, ApiError> {
    let mut key = Item::new();
    key.insert("pk".into(), AttributeValue::s(pk));
    // The last commit, synced or not: a failed emit learns whether its key
    // was used without waiting for other requests' syncs. A row found here
    // is answered from a consistent read of the log below, which waits for
    // its sync.
    let out = api
        .inner
        .store
        .get_item_committed(GetItemInput {
            table_name: api.inner.config.requests_table.clone(),
            key,
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    let Some(row) = out.item else {
        return Ok(None);
    };
    if row.get("body_sha256") != Some(&AttributeValue::s(body_hash)) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different request body",
        ));
    }
    if let Some(AttributeValue::S(text)) = row.get("answer") {
        return Ok(serde_json::from_str(text).ok());
    }
    let Some(seq) = row
        .get("event_seq")
        .and_then(AttributeValue::as_n)
        .and_then(|n| u64::try_from(n.to_i64()?).ok())
    else {
        return Ok(None);
    };
    Ok(crate::log::page(api, tenant, seq, 1)
        .await?
        .into_iter()
        .find(|(s, _)| *s == seq)
        .map(|(_, answer)| answer))
}

/// Postbox's own tables cannot be written through the API, and a write's
/// partition key must be in the caller's namespace.
async fn check_write<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    tenant: &str,
    index: usize,
    item: &TransactWriteItem,
) -> Result<(), ApiError> {
    let (table, key) = item.target().ok_or_else(|| {
        ApiError::bad_request(
            "invalid_write",
            format!(
                "writes[{index}] must have exactly one of Put, Update, Delete or ConditionCheck"
            ),
        )
    })?;
    let cfg = &api.inner.config;
    let reserved = table.starts_with(postbox_server::policy::TABLE_PREFIX)
        || [
            &cfg.events_table,
            &cfg.inbox_table,
            &cfg.tokens_table,
            &cfg.requests_table,
        ]
        .into_iter()
        .chain(&cfg.reserved_tables)
        .any(|t| t.as_str() == table);
    if reserved {
        return Err(ApiError::bad_request(
            "reserved_table",
            format!("writes[{index}] targets {table:?}, a table only Postbox writes"),
        ));
    }
    let key_schema = api
        .inner
        .store
        .key_schema(table)
        .await
        .map_err(|e| match e {
            StoreError::ResourceNotFound(_) => {
                ApiError::not_found(format!("writes[{index}]: table {table:?} does not exist"))
            }
            e => e.into(),
        })?;
    let hash_key = key_schema
        .iter()
        .find(|k| k.key_type == KeyType::Hash)
        .map(|k| k.attribute_name.as_str())
        .unwrap_or("pk");
    let prefix = format!("{tenant}#");
    match key.get(hash_key) {
        Some(AttributeValue::S(v)) if v.starts_with(&prefix) => Ok(()),
        Some(_) => Err(ApiError::not_found(format!(
            "writes[{index}]: no such item in tenant {tenant:?}'s data (the partition key {hash_key:?} of tenant data starts with {prefix:?})"
        ))),
        None => Err(ApiError::bad_request(
            "invalid_write",
            format!("writes[{index}] has no partition key {hash_key:?}"),
        )),
    }
}

fn emit_error(e: EmitError) -> ApiError {
    use EmitError as E;
    let message = e.to_string();
    match e {
        E::UnknownType { .. } => ApiError::bad_request("unknown_event_type", message),
        E::PayloadNotObject { .. } | E::Payload(_) => {
            ApiError::bad_request("invalid_payload", message)
        }
        E::SchemaViolation { .. } => ApiError::bad_request("schema_violation", message),
        E::WriteOnEventsTable { .. } => ApiError::bad_request("reserved_table", message),
        E::TooManyWrites { .. } | E::EventTooLarge { .. } | E::TransactionTooLarge { .. } => {
            ApiError::bad_request("too_large", message)
        }
        E::WriteRefused { .. } => ApiError::bad_request("write_refused", message),
        E::InlineAborted { .. } => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "inline_aborted", message)
        }
        E::ConditionalCheckFailed { .. } => {
            ApiError::new(StatusCode::CONFLICT, "condition_failed", message)
        }
        E::Contention { .. } | E::Closed => ApiError::unavailable(message, 1),
        E::Store(s) => s.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Taking the request's tree apart gives what the derived parse gives,
    /// and a body it refuses is refused with the derived parse's message.
    #[test]
    fn an_emit_body_is_read_as_the_derived_parse_reads_it() {
        let bodies = [
            r#"{"type":"t","payload":{"a":[1,"x"]},"writes":[{"Put":{}},{}]}"#,
            r#"{"payload":null,"type":"t"}"#,
            r#"{"type":"t","payload":1,"writes":[]}"#,
            r#"{"type":"t"}"#,
            r#"{"payload":{}}"#,
            r#"{"type":1,"payload":{}}"#,
            r#"{"type":"t","payload":{},"writes":null}"#,
            r#"{"type":"t","payload":{},"writes":{}}"#,
            r#"{"type":"t","payload":{},"extra":1}"#,
            r#"["t"]"#,
            r#""t""#,
            r#"{"type":"t","payload":{}"#,
        ];
        for body in bodies {
            let derived = crate::body::parse_json::<EmitRequest>(body.as_bytes());
            match (EmitRequest::parse(body.as_bytes()), derived) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.event_type, b.event_type, "{body}");
                    assert_eq!(a.payload, b.payload, "{body}");
                    assert_eq!(a.writes, b.writes, "{body}");
                }
                (Err(a), Err(b)) => {
                    assert_eq!((a.code, &a.message), (b.code, &b.message), "{body}");
                }
                (a, b) => panic!(
                    "{body}: taken apart {:?}, derived {:?}",
                    a.map(|r| r.event_type).map_err(|e| e.message),
                    b.map(|r| r.event_type).map_err(|e| e.message)
                ),
            }
        }
    }

    /// The answer written from the envelope is the text of its JSON tree,
    /// which the log's pages and the earlier answers are.
    #[test]
    fn an_emits_answer_is_the_text_of_its_json_tree() {
        let mut envelope = Envelope {
            id: "01JAAAAAAAAAAAAAAAAAAAAAAA".into(),
            event_type: "ORDER_PLACED".into(),
            tenant: "acme".into(),
            seq: 42,
            correlation_id: "c\"1".into(),
            causation_id: None,
            actor: "alice".into(),
            occurred_at: "2026-12-05T00:00:00.000Z".into(),
            payload: json!({"z": [1, 2.5, {"b": null, "a": "é\n"}], "a": true}),
            trace: Some("00-aa-bb-01".into()),
        };
        for causation in [None, Some("01JBBBBBBBBBBBBBBBBBBBBBBB".to_owned())] {
            envelope.causation_id = causation;
            let hash = "ab".repeat(32);
            let tree = json!({"event": envelope, "hash": hash}).to_string();
            let answer = Answer::New {
                envelope: envelope.clone(),
                hash,
            };
            assert_eq!(answer.text(), tree);
            let earlier = Answer::Earlier(serde_json::from_str(&tree).unwrap());
            assert_eq!(earlier.text(), tree);
        }
    }
}

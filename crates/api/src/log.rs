//! Reading a tenant's log: `GET /v1/events` (a page, oldest first),
//! `GET /v1/events/{seq}` (one event and where it stands with each DURABLE
//! subscription) and `GET /v1/events/stream` (server-sent events following
//! new commits). A tenant token reads its own log; an admin token names the
//! tenant with `?tenant=`.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use postbox_engine::layout;
use postbox_item::AttributeValue;
use postbox_queue::QueueClient;
use postbox_store::ItemStore;
use postbox_store::api::{QueryInput, Values};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::body::header;
use crate::{Api, ApiError, Caller};

/// `?from=`, `?limit=` and (admin tokens) `?tenant=` of the log endpoints.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    from: Option<u64>,
    limit: Option<usize>,
    tenant: Option<String>,
}

/// `?tenant=` of `GET /v1/events/{seq}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantQuery {
    tenant: Option<String>,
}

/// The tenant whose log a request reads: a tenant token's own (naming
/// another answers 404, as if it did not exist), or the one an admin token
/// names with `?tenant=` (404 with the known tenants when it has no events).
async fn log_tenant<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    caller: &Caller,
    named: Option<String>,
) -> Result<String, ApiError> {
    match (&caller.tenant, named) {
        (Some(own), None) => Ok(own.clone()),
        (Some(own), Some(t)) if *own == t => Ok(t),
        (Some(_), Some(t)) => Err(ApiError::not_found(format!(
            "no tenant {t:?} has events in the log"
        ))),
        (None, Some(t)) if caller.is_admin() => {
            crate::ops::known_tenant(api, &t).await?;
            Ok(t)
        }
        (None, None) if caller.is_admin() => Err(ApiError::bad_request(
            "invalid_query",
            "an admin token reads one tenant's log: add ?tenant=T",
        )),
        _ => caller.tenant().map(str::to_owned),
    }
}

/// Events of `tenant` from seq `from`, at most `limit`, each as its seq
/// and its JSON (`{"event": .., "hash": ..}`).
pub(crate) async fn page<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    tenant: &str,
    from: u64,
    limit: usize,
) -> Result<Vec<(u64, Value)>, ApiError> {
    let out = api
        .inner
        .store
        .query(QueryInput {
            table_name: api.inner.config.events_table.clone(),
            key_condition_expression: Some("pk = :pk AND sk >= :from".into()),
            expression_attribute_values: Some(Values::from([
                (
                    ":pk".to_owned(),
                    AttributeValue::s(layout::event_pk(tenant)),
                ),
                (":from".to_owned(), AttributeValue::s(layout::seq_sk(from))),
            ])),
            limit: Some(limit as i64),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    out.items
        .unwrap_or_default()
        .iter()
        .map(|item| {
            let (envelope, hash) = layout::envelope_of(item).map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "malformed_event", e.0)
            })?;
            Ok((envelope.seq, json!({"event": envelope, "hash": hash})))
        })
        .collect()
}

/// The seq to read after `events`, which started at `from`.
fn next_seq(events: &[(u64, Value)], from: u64) -> u64 {
    events.last().map_or(from, |(seq, _)| seq + 1)
}

/// `GET /v1/events?from=1&limit=100`: the caller's log, oldest first.
pub(crate) async fn read<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    query: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let tenant = log_tenant(&api, &caller, q.tenant).await?;
    let from = q.from.unwrap_or(1).max(1);
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "limit must be 1 to 1000",
        ));
    }
    let events = page(&api, &tenant, from, limit).await?;
    let next = next_seq(&events, from);
    let events: Vec<Value> = events.into_iter().map(|(_, e)| e).collect();
    Ok(Json(json!({"events": events, "next": next})))
}

/// `GET /v1/events/{seq}`: one event of the caller's log (an admin names
/// the tenant with `?tenant=`), its hash, and where it stands with each
/// DURABLE subscription that matches its type: `pending`, `completed`,
/// `failed`, `dead`, or `waiting` when no worker has claimed it yet.
pub(crate) async fn one<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    Path(seq): Path<String>,
    query: Result<Query<TenantQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let seq: u64 = seq.parse().ok().filter(|s| *s >= 1).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_path",
            format!("{seq:?} is not an event's seq (a whole number from 1)"),
        )
    })?;
    let tenant = log_tenant(&api, &caller, q.tenant).await?;
    let Some((_, mut entry)) = page(&api, &tenant, seq, 1)
        .await?
        .into_iter()
        .find(|(s, _)| *s == seq)
    else {
        return Err(ApiError::not_found(format!(
            "no event {seq} in the log of tenant {tenant}"
        )));
    };
    let id = entry["event"]["id"].as_str().unwrap_or_default().to_owned();
    let event_type = entry["event"]["type"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut deliveries = Vec::new();
    for sub in api
        .inner
        .engine
        .catalog()
        .subscribers_of(&event_type)
        .into_iter()
        .filter(|s| s.lane == postbox_engine::Lane::Durable)
    {
        let row = api
            .inner
            .inbox
            .get(&postbox_worker::ClaimKey::new(id.clone(), sub.name.clone()))
            .await?;
        deliveries.push(match row {
            Some(r) => json!({
                "subscription": sub.name,
                "status": r.status.as_str().to_ascii_lowercase(),
                "attempts": r.attempts,
                "last_error": r.last_error,
                "updated_at": postbox_engine::envelope::format_timestamp(r.updated_at),
                "result": r.result.as_deref().and_then(|t| serde_json::from_str::<Value>(t).ok()),
            }),
            None => json!({"subscription": sub.name, "status": "waiting", "attempts": 0}),
        });
    }
    entry["deliveries"] = Value::Array(deliveries);
    Ok(Json(entry))
}

/// `GET /v1/events/stream?from=1`: the caller's log as server-sent events,
/// following new events as they commit. Each event's SSE id is its seq, so
/// a client that reconnects with `Last-Event-ID` resumes after it.
pub(crate) async fn follow<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    headers: HeaderMap,
    query: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let tenant = log_tenant(&api, &caller, q.tenant).await?;
    let resume = header(&headers, "last-event-id")?
        .map(|v| {
            v.parse::<u64>()
                .ok()
                .and_then(|s| s.checked_add(1))
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_header",
                        "Last-Event-ID must be a seq number below 18446744073709551615",
                    )
                })
        })
        .transpose()?;
    let from = resume.or(q.from).unwrap_or(1).max(1);
    let slot = StreamSlot::take(&api, &caller)?;
    let state = (
        api,
        tenant,
        from,
        std::collections::VecDeque::<(u64, Value)>::new(),
        slot,
    );
    let stream = futures_util::stream::unfold(
        state,
        |(api, tenant, mut next, mut buffered, slot)| async move {
            loop {
                if let Some((seq, e)) = buffered.pop_front() {
                    let sse = SseEvent::default()
                        .id(seq.to_string())
                        .event("event")
                        .data(e.to_string());
                    return Some((Ok(sse), (api, tenant, next, buffered, slot)));
                }
                match page(&api, &tenant, next, 100).await {
                    Ok(events) if !events.is_empty() => {
                        next = next_seq(&events, next);
                        buffered.extend(events);
                    }
                    Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(e) => {
                        let sse = SseEvent::default().event("error").data(e.message);
                        return Some((Ok(sse), (api, tenant, next, buffered, slot)));
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// One open log stream of a caller, counted while it lives: a caller may
/// hold `ApiConfig::max_streams_per_token` at once.
struct StreamSlot<S, Q> {
    api: Api<S, Q>,
    key: (Option<String>, String),
}

impl<S, Q> StreamSlot<S, Q> {
    fn take(api: &Api<S, Q>, caller: &Caller) -> Result<StreamSlot<S, Q>, ApiError> {
        let key = (caller.tenant.clone(), caller.subject.clone());
        let max = api.inner.config.max_streams_per_token;
        let mut open = api.inner.streams.lock().expect("stream counts");
        let n = open.entry(key.clone()).or_default();
        if *n >= max {
            return Err(ApiError::too_many(
                "too_many_streams",
                format!("this token already holds {max} open log streams; close one first"),
                5,
            ));
        }
        *n += 1;
        Ok(StreamSlot {
            api: api.clone(),
            key,
        })
    }
}

impl<S, Q> Drop for StreamSlot<S, Q> {
    fn drop(&mut self) {
        let mut open = self.api.inner.streams.lock().expect("stream counts");
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

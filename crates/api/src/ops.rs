//! Operator and support endpoints: dead letters and replay, queue redrive,
//! the catalog, the reconciliation report, health, readiness and metrics.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use postbox_queue::QueueClient;
use postbox_store::ItemStore;
use postbox_worker::deadletter::DeadLetter;
use postbox_worker::replay::{self, Selection};
use postbox_worker::report::{self, Verdict};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::body::{parse_json, read_body};
use crate::{Api, ApiError, Caller};

/// Requests answered, by status class, for the metrics.
#[derive(Default)]
pub(crate) struct RequestCounters {
    by_class: [AtomicU64; 6],
}

/// Counts every answered request by status class.
pub(crate) async fn count_requests<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    let class = (response.status().as_u16() / 100) as usize;
    if let Some(c) = api.inner.requests.by_class.get(class) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    response
}

/// `GET /v1/health`: the process is up. No token needed.
pub(crate) async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /v1/ready`: the store answers reads. No token needed, so it costs
/// one point read (never a count of the events table).
pub(crate) async fn ready<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
) -> Result<Json<Value>, ApiError> {
    use postbox_engine::layout;
    let key = layout::key(layout::event_pk("_ready"), &layout::seq_sk(0));
    api.inner
        .store
        .get_item(postbox_store::api::GetItemInput {
            table_name: api.inner.config.events_table.clone(),
            key,
            consistent_read: Some(true),
            ..Default::default()
        })
        .await
        .map_err(|e| ApiError::unavailable(format!("the store is not ready: {e}"), 1))?;
    Ok(Json(json!({"status": "ready"})))
}

fn dead_letter_json(d: &DeadLetter) -> Value {
    json!({
        "tenant": d.tenant,
        "event_id": d.event_id,
        "seq": d.seq,
        "event_type": d.event_type,
        "subscription": d.subscription,
        "error": d.error,
        "attempts": d.attempts,
        "first_failure_at": postbox_engine::envelope::format_timestamp(d.first_failure_at),
        "last_failure_at": postbox_engine::envelope::format_timestamp(d.last_failure_at),
    })
}

/// Selects dead letters: tenant tokens always within their tenant, admin
/// tokens in one tenant or all.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct SelectionQuery {
    tenant: Option<String>,
    subscription: Option<String>,
    /// Comma-separated event ids (query) or a list (body).
    event_ids: Option<IdList>,
    /// Failures at or after this time, milliseconds since the epoch.
    from_ms: Option<u64>,
    /// Failures at or before this time, milliseconds since the epoch.
    to_ms: Option<u64>,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IdList {
    Csv(String),
    List(Vec<String>),
}

/// The catalog's subscription `name`, or 404 naming those it has.
pub(crate) fn subscription<'c>(
    catalog: &'c postbox_engine::Catalog,
    name: &str,
) -> Result<&'c postbox_engine::catalog::Subscription, ApiError> {
    catalog
        .subscriptions
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = catalog
                .subscriptions
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            ApiError::not_found(format!(
                "no subscription {name:?} in the catalog{} (subscriptions: {})",
                meant(name, &known),
                known.join(", ")
            ))
        })
}

/// "; did you mean X?" when a name of `known` is close to `wrong`.
fn meant(wrong: &str, known: &[&str]) -> String {
    postbox_engine::contract::did_you_mean(wrong, known)
        .map(|m| format!("; did you mean {m:?}?"))
        .unwrap_or_default()
}

/// 404 for an operator's filter on a tenant with no log (it would select
/// nothing, in silence), naming the tenant meant when one is close.
pub(crate) async fn known_tenant<S: ItemStore, Q: QueueClient>(
    api: &Api<S, Q>,
    tenant: &str,
) -> Result<(), ApiError> {
    if api.inner.engine.head_seq(tenant).await? > 0 {
        return Ok(());
    }
    let tenants = api.inner.engine.tenants().await?;
    let known: Vec<&str> = tenants.iter().map(String::as_str).collect();
    Err(ApiError::not_found(format!(
        "no tenant {tenant:?} has events in the log{}",
        meant(tenant, &known)
    )))
}

impl SelectionQuery {
    /// The selection, or 404 for another tenant, or for a subscription
    /// the catalog does not have (which would select nothing in silence).
    fn selection(
        self,
        caller: &Caller,
        catalog: &postbox_engine::Catalog,
    ) -> Result<(Selection, bool), ApiError> {
        if let Some(name) = &self.subscription {
            subscription(catalog, name)?;
        }
        let tenant = match (&caller.tenant, self.tenant) {
            (Some(own), Some(asked)) if *own != asked => {
                return Err(ApiError::not_found(format!("no tenant {asked:?}")));
            }
            (Some(own), _) => Some(own.clone()),
            (None, asked) => asked,
        };
        let event_ids = self.event_ids.map(|ids| match ids {
            IdList::Csv(s) => s
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            IdList::List(v) => v,
        });
        Ok((
            Selection {
                tenant,
                subscription: self.subscription,
                event_ids,
                from_ms: self.from_ms,
                to_ms: self.to_ms,
            },
            self.dry_run,
        ))
    }
}

/// `GET /v1/dead-letters`.
pub(crate) async fn dead_letters<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    query: Result<Query<SelectionQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let (selection, _) = q.selection(&caller, api.inner.engine.catalog())?;
    if let (true, Some(t)) = (caller.is_admin(), &selection.tenant) {
        known_tenant(&api, t).await?;
    }
    let list = replay::list(&api.inner.inbox, &selection).await?;
    Ok(Json(json!({
        "dead_letters": list.iter().map(dead_letter_json).collect::<Vec<_>>(),
    })))
}

/// `POST /v1/dead-letters/replay`: resets the selected dead letters' claims
/// and sends their events again (`"dry_run": true` only lists them).
pub(crate) async fn replay<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let body = read_body(&api, body).await?;
    let q: SelectionQuery = if body.iter().all(u8::is_ascii_whitespace) {
        SelectionQuery::default()
    } else {
        parse_json(&body)?
    };
    let (selection, dry_run) = q.selection(&caller, api.inner.engine.catalog())?;
    if let (true, Some(t)) = (caller.is_admin(), &selection.tenant) {
        known_tenant(&api, t).await?;
    }
    if let Some(ids) = &selection.event_ids {
        let found = replay::list(&api.inner.inbox, &selection).await?;
        if let Some(missing) = ids
            .iter()
            .find(|id| !found.iter().any(|d| &d.event_id == *id))
        {
            return Err(ApiError::not_found(format!(
                "no dead letter for event {missing:?}"
            )));
        }
    }
    let cfg = &api.inner.config;
    let report = replay::replay(
        &api.inner.inbox,
        &api.inner.queues,
        &cfg.queue,
        &cfg.events_table,
        &selection,
        dry_run,
        postbox_engine::envelope::now_ms(),
    )
    .await?;
    Ok(Json(json!({
        "dry_run": report.dry_run,
        "selected": report.selected.iter().map(dead_letter_json).collect::<Vec<_>>(),
        "reset": report.reset,
        "skipped": report.skipped,
        "enqueued": report.enqueued,
    })))
}

/// `POST /v1/queues/redrive` (admin): moves the events queue's dead-letter
/// queue back, clearing the claims its messages need first.
pub(crate) async fn redrive<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let cfg = &api.inner.config;
    let attrs = api
        .inner
        .queues
        .queue_attributes(&cfg.queue, &["RedrivePolicy".to_owned()])
        .await
        .map_err(|e| ApiError::not_found(format!("queue {}: {e}", cfg.queue)))?;
    let dlq = attrs
        .get("RedrivePolicy")
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .and_then(|p| p["deadLetterTargetArn"].as_str().map(str::to_owned))
        .and_then(|arn| arn.rsplit(':').next().map(str::to_owned))
        .ok_or_else(|| {
            ApiError::not_found(format!("queue {} has no dead-letter queue", cfg.queue))
        })?;
    let report = replay::redrive(
        &api.inner.inbox,
        &api.inner.queues,
        &cfg.queue,
        &dlq,
        postbox_engine::envelope::now_ms(),
    )
    .await?;
    Ok(Json(json!({
        "dead_letter_queue": dlq,
        "moved": report.moved,
        "reset": report.reset,
        "poison": report.poison,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CatalogQuery {
    format: Option<String>,
}

/// `GET /v1/catalog`: the catalog and its contract report (JSON, or
/// Markdown with `?format=markdown`).
pub(crate) async fn catalog<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    _caller: Caller,
    query: Result<Query<CatalogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let report = postbox_engine::contract::Report::new(api.inner.engine.catalog());
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(report.to_json()).into_response()),
        Some("markdown") => Ok((
            [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
            report.to_markdown(),
        )
            .into_response()),
        Some(other) => Err(ApiError::bad_request(
            "invalid_query",
            format!("format {other:?} is not one of json, markdown"),
        )),
    }
}

/// `GET /v1/reconciliation`: the whole report for an admin token, the
/// caller's own line for a tenant token.
pub(crate) async fn reconciliation<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let cfg = &api.inner.config;
    let line_json = |t: &report::TenantLine| {
        json!({
            "tenant": t.tenant,
            "head_seq": t.head_seq,
            "chain_intact": t.chain_intact,
            "broken": t.broken,
            "dead_letters": t.dead_letters,
        })
    };
    if let Some(own) = &caller.tenant {
        // A tenant's view: its own log is the only one verified.
        let line =
            report::tenant_line(&api.inner.store, &api.inner.inbox, &cfg.events_table, own).await?;
        let attention: Vec<String> = line.iter().flat_map(|t| t.problems()).collect();
        return Ok(Json(json!({
            "tenants": line.iter().map(line_json).collect::<Vec<_>>(),
            "verdict": if attention.is_empty() { "ok" } else { "attention" },
            "reasons": attention,
        })));
    }
    let r = report::reconcile(
        &api.inner.store,
        &api.inner.queues,
        &api.inner.inbox,
        &cfg.events_table,
        &cfg.queue,
    )
    .await?;
    let stats = api.inner.engine.stats();
    let tenants: Vec<Value> = r.tenants.iter().map(line_json).collect();
    let (verdict, reasons) = match &r.verdict {
        Verdict::Ok => ("ok", Vec::new()),
        Verdict::Attention(reasons) => ("attention", reasons.clone()),
    };
    let mut extra = api
        .inner
        .sources
        .report
        .as_ref()
        .map(|f| f())
        .unwrap_or_default();
    let mut reasons = reasons;
    if let Some(Value::Array(more)) = extra.remove("reasons") {
        reasons.extend(
            more.into_iter()
                .filter_map(|r| r.as_str().map(str::to_owned)),
        );
    }
    let verdict = if reasons.is_empty() {
        verdict
    } else {
        "attention"
    };
    let mut report = json!({
        "tenants": tenants,
        "queue_depth": r.queue_depth,
        "queue_in_flight": r.queue_in_flight,
        "dlq_depth": r.dlq_depth,
        "poison": r.poison,
        "events_delivered_to_nobody": stats.undelivered,
        "verdict": verdict,
        "reasons": reasons,
    });
    if let Value::Object(fields) = &mut report {
        fields.extend(extra);
    }
    Ok(Json(report))
}

/// `GET /v1/metrics` (admin): Prometheus text exposition.
pub(crate) async fn metrics<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    Ok(metrics_response(render_metrics(&api)))
}

/// The Prometheus text of `/v1/metrics`, as a response.
pub(crate) fn metrics_response(text: String) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Every metric of the node in the Prometheus text format: the API's and
/// the engine's, then what [`crate::Sources::metrics`] adds.
pub(crate) fn render_metrics<S: ItemStore, Q: QueueClient>(api: &Api<S, Q>) -> String {
    let mut out = String::new();
    let s = api.inner.engine.stats();
    for (name, help, value) in [
        ("postbox_emit_events_total", "Events committed.", s.emitted),
        (
            "postbox_emit_transactions_total",
            "Emit transactions committed.",
            s.transactions,
        ),
        (
            "postbox_emit_contention_retries_total",
            "Emit transactions retried on a moved head.",
            s.contention_retries,
        ),
        (
            "postbox_emit_rejected_total",
            "Emits refused before writing.",
            s.rejected,
        ),
        (
            "postbox_emit_condition_failures_total",
            "Emits whose own condition failed.",
            s.condition_failures,
        ),
        (
            "postbox_emit_inline_aborts_total",
            "Emits aborted by an INLINE handler.",
            s.inline_aborts,
        ),
        (
            "postbox_local_handler_ok_total",
            "LOCAL handler runs that succeeded.",
            s.local_ok,
        ),
        (
            "postbox_local_handler_failed_total",
            "LOCAL handler runs that failed.",
            s.local_failed,
        ),
        (
            "postbox_local_handler_dropped_total",
            "LOCAL handler runs dropped on a full pool.",
            s.local_dropped,
        ),
        (
            "postbox_emit_undelivered_total",
            "Events that matched no subscription.",
            s.undelivered,
        ),
    ] {
        counter(&mut out, name, help, value);
    }
    let classes: Vec<(String, u64)> = (api.inner.requests.by_class.iter().enumerate().skip(1))
        .map(|(class, c)| (format!("{class}xx"), c.load(Ordering::Relaxed)))
        .collect();
    family(
        &mut out,
        "postbox_http_requests_total",
        "counter",
        "API requests answered, by status class.",
        classes
            .iter()
            .map(|(class, v)| ("class", class.as_str(), *v)),
    );
    if let Some(pull) = &api.inner.sources.pull {
        let subs = pull.waiting();
        family(
            &mut out,
            "postbox_pull_waiting",
            "gauge",
            "Pull deliveries waiting for a consumer, per subscription.",
            subs.iter()
                .map(|(s, waiting, _)| ("subscription", s.as_str(), *waiting as u64)),
        );
        family(
            &mut out,
            "postbox_pull_leased",
            "gauge",
            "Pull deliveries a consumer holds, per subscription.",
            subs.iter()
                .map(|(s, _, leased)| ("subscription", s.as_str(), *leased as u64)),
        );
    }
    if let Some(source) = &api.inner.sources.metrics {
        source(&mut out);
    }
    out
}

/// The embedded backend's own metrics: messages per queue and state, the
/// oldest message's age, and the store's writer (commits, operations, time
/// running and committing). [`crate::Api::embedded`] adds them.
pub fn embedded_metrics(
    store: postbox_store::embedded::EmbeddedStore,
    queues: postbox_queue::Queues,
) -> impl Fn(&mut String) + Send + Sync + 'static {
    move |out: &mut String| {
        let all = queues.all_stats();
        samples(
            out,
            "postbox_queue_messages",
            "gauge",
            "Messages in a queue by state.",
            all.iter().flat_map(|q| {
                [
                    ("visible", q.visible),
                    ("in_flight", q.in_flight),
                    ("delayed", q.delayed),
                ]
                .map(|(state, v)| (vec![("queue", q.name.as_str()), ("state", state)], v))
            }),
        );
        samples(
            out,
            "postbox_queue_oldest_message_age_seconds",
            "gauge",
            "Age of the oldest message.",
            all.iter().map(|q| {
                (
                    vec![("queue", q.name.as_str())],
                    q.oldest_age_ms as f64 / 1000.0,
                )
            }),
        );
        let w = store.writer_stats();
        counter(
            out,
            "postbox_store_commits_total",
            "Store transactions committed (group commits).",
            w.commits,
        );
        counter(
            out,
            "postbox_store_operations_total",
            "Store write operations committed; over postbox_store_commits_total, the mean group size.",
            w.operations,
        );
        samples(
            out,
            "postbox_store_writer_seconds_total",
            "counter",
            "Time the store's writer thread spent running operations and committing them.",
            [("run", w.run_us), ("commit", w.commit_us)]
                .map(|(phase, us)| (vec![("phase", phase)], us as f64 / 1e6)),
        );
    }
}

/// Writes one metric family in the Prometheus text format: its HELP and
/// TYPE lines, then one sample per row of labels (name, value) and value.
/// Label values are escaped as the format requires.
pub fn samples<'a, V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, V)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in rows {
        out.push_str(name);
        for (i, (label, value)) in labels.iter().enumerate() {
            out.push(if i == 0 { '{' } else { ',' });
            out.push_str(label);
            out.push_str("=\"");
            for c in value.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        if !labels.is_empty() {
            out.push('}');
        }
        let _ = writeln!(out, " {v}");
    }
}

/// Writes one metric family with one label: a sample per `(label, label
/// value, value)`.
pub fn family<'a>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    rows: impl IntoIterator<Item = (&'a str, &'a str, u64)>,
) {
    let rows = rows
        .into_iter()
        .map(|(label, value, v)| (vec![(label, value)], v));
    samples(out, name, kind, help, rows);
}

/// Writes one counter with its HELP and TYPE lines.
pub fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    samples(out, name, "counter", help, [(Vec::new(), value)]);
}

/// Writes one gauge with its HELP and TYPE lines.
pub fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    samples(out, name, "gauge", help, [(Vec::new(), value)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_written_in_the_text_format_with_label_values_escaped() {
        let mut out = String::new();
        samples(
            &mut out,
            "m_total",
            "counter",
            "Help.",
            [
                (vec![("q", "a\"b\\c\nd"), ("s", "x")], 1.5),
                (Vec::new(), 2.0),
            ],
        );
        assert_eq!(
            out,
            "# HELP m_total Help.\n# TYPE m_total counter\nm_total{q=\"a\\\"b\\\\c\\nd\",s=\"x\"} 1.5\nm_total 2\n"
        );
    }
}

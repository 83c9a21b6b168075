//! The relay's pipes over HTTP, for operators (admin tokens):
//! `GET /v1/pipes` lists each pipe with every setting, and
//! `POST /v1/pipes/{name}/test` runs one pipe's filters and templates over
//! a stream record, as `postbox pipe test` does, without sending anything.
//! Both answer 404 when this process runs no relay.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use postbox_queue::QueueClient;
use postbox_relay::RelayConfig;
use postbox_relay::config::{PipeSpec, PipeTarget, QueueTarget, StartPosition};
use postbox_relay::plan::TestError;
use postbox_store::ItemStore;
use serde_json::{Value, json};

use crate::body::{parse_value, read_body};
use crate::{Api, ApiError, Caller};

fn config<S, Q>(api: &Api<S, Q>) -> Result<&Arc<RelayConfig>, ApiError> {
    api.inner
        .sources
        .pipes
        .as_ref()
        .ok_or_else(|| ApiError::not_found("this node runs no relay, so it has no pipes"))
}

fn queue_json(q: &QueueTarget) -> Value {
    json!({
        "queue": q.queue,
        "fifo": q.fifo,
        "group_id": q.group_id.as_ref().map(|t| t.source()),
        "deduplication_id": q.dedup_id.as_ref().map(|t| t.source()),
    })
}

fn pipe_json(p: &PipeSpec) -> Value {
    let target = match &p.target {
        PipeTarget::Queue(q) => json!({"kind": "queue", "queue": queue_json(q)}),
        PipeTarget::Bus {
            bus,
            detail_type,
            source,
        } => json!({"kind": "bus", "bus": bus, "detail_type": detail_type, "source": source}),
    };
    json!({
        "name": p.name,
        "table": p.table,
        "start": match p.start {
            StartPosition::TrimHorizon => "TRIM_HORIZON",
            StartPosition::Latest => "LATEST",
        },
        "filters": p.filters.iter().map(|f| f.source()).collect::<Vec<_>>(),
        "warnings": p.warnings,
        "template": p.template.source(),
        "target": target,
        "batch_size": p.batch_size,
        "max_retries": p.max_retries,
        "max_record_age_seconds": p.max_record_age.as_secs(),
        "bisect_on_failure": p.bisect_on_failure,
        "dead_letter_queue": p.dead_letter_queue,
        "retry_backoff_ms": p.retry_backoff.as_millis() as u64,
    })
}

/// `GET /v1/pipes` (admin).
pub(crate) async fn list<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let config = config(&api)?;
    Ok(Json(json!({
        "pipes": config.pipes.iter().map(pipe_json).collect::<Vec<_>>(),
        "buses": config.buses.keys().collect::<Vec<_>>(),
    })))
}

/// `POST /v1/pipes/{name}/test` (admin): the body is one stream record as
/// a Pipe receives it. 200 with `"outcome"`: `delivered` (and what would be
/// sent), `filtered`, or `dead_letter` with the reason; 404 for a pipe the
/// relay does not run; 400 for a body that is no record.
pub(crate) async fn test<S: ItemStore, Q: QueueClient>(
    State(api): State<Api<S, Q>>,
    caller: Caller,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let config = config(&api)?;
    if config.pipe(&name).is_none() {
        let names: Vec<&str> = config.pipes.iter().map(|p| p.name.as_str()).collect();
        return Err(ApiError::not_found(format!(
            "no pipe {name:?} (pipes: {})",
            names.join(", ")
        )));
    }
    let record = parse_value(&read_body(&api, body).await?)?;
    if !record.is_object() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the body must be one DynamoDB stream record (a JSON object) as a Pipe receives it",
        ));
    }
    match postbox_relay::plan::test_record(config, &name, &record) {
        Ok(report) => Ok(Json(json!({
            "outcome": if report.filtered { "filtered" } else { "delivered" },
            "report": report.text,
        }))),
        Err(TestError::Dead(reason)) => Ok(Json(json!({
            "outcome": "dead_letter",
            "report": reason,
        }))),
        Err(TestError::Input(e)) => Err(ApiError::bad_request("invalid_request", e)),
    }
}

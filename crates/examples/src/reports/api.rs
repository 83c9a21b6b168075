//! The report-job HTTP API, an axum [`Router`]:
//!
//! - `POST /reports` with `{"branch": "<^[a-z0-9-]{2,40}$>"}` and an
//!   optional `Idempotency-Key` header (8-128 characters) accepts a job:
//!   `202 Accepted` with `Location` and `Retry-After` headers and
//!   `{"jobId", "status", "statusUrl"}`. The same key with the same branch
//!   answers with the same job (202 while it runs, 200 once it is done);
//!   with another branch, 409; a key whose job has expired, 404; a bad
//!   key, bad JSON or a bad branch, 400 with a message saying what to send.
//! - `GET /reports/{jobId}` reads the job (404 if unknown, expired or
//!   another tenant's), with `Retry-After` while it is not done.
//!
//! The tenant comes from the `X-Tenant-Id` header (`default` without it);
//! jobs and keys are scoped to it.
//!
//! A job and its key row are written in ONE transaction, each conditioned
//! on not existing, so two concurrent requests with one key create one job:
//! the loser finds the winner's key row and answers with its job.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use postbox_engine::Write;
use postbox_engine::envelope::{Context, format_timestamp, new_event_id, now_ms};
use postbox_item::AttributeValue;
use postbox_store::api::{GetItemInput, TransactWriteItemsInput};
use postbox_store::{ItemStore, StoreError};
use serde_json::{Value, json};

use super::job::{
    EXPIRES_AT, JOBS_TABLE, Job, JobStatus, KEYS_TABLE, check_key, idempotency_key, job_key,
    number, parse_request,
};

/// The header naming the tenant.
pub const TENANT_HEADER: &str = "x-tenant-id";
/// The tenant of requests without [`TENANT_HEADER`].
pub const DEFAULT_TENANT: &str = "default";

/// How the API behaves.
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// How long a job lives after it was accepted (its row's TTL).
    pub job_ttl: Duration,
    /// How much longer than its job an Idempotency-Key is remembered; a
    /// reused key answers 404 (job expired) during this time, and is free
    /// again after it.
    pub key_grace: Duration,
    /// The `Retry-After` of answers about unfinished jobs.
    pub retry_after: Duration,
}

impl Default for ApiOptions {
    fn default() -> ApiOptions {
        ApiOptions {
            job_ttl: Duration::from_secs(24 * 3600),
            key_grace: Duration::from_secs(24 * 3600),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// The API's state: the store holding jobs and keys. Cheap to clone.
pub struct ReportsApi<S> {
    store: Arc<S>,
    options: ApiOptions,
}

impl<S> Clone for ReportsApi<S> {
    fn clone(&self) -> Self {
        ReportsApi {
            store: self.store.clone(),
            options: self.options.clone(),
        }
    }
}

/// What a submission did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// A new job was accepted.
    Created(Job),
    /// The Idempotency-Key had created this job before.
    Existing(Job),
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The key was used for another branch.
    #[error(
        "this Idempotency-Key was used for a report on branch {branch:?}; send a new key for another request"
    )]
    KeyReused {
        /// The branch the key was first used for.
        branch: String,
    },
    /// The key's job has expired.
    #[error("the job this Idempotency-Key created has expired; send the request with a new key")]
    Expired,
    /// Concurrent requests with the key kept colliding.
    #[error("concurrent requests with this Idempotency-Key collided; retry the request")]
    Contended,
    /// The store failed.
    #[error("the job store failed: {0}")]
    Store(#[from] StoreError),
}

impl<S: ItemStore> ReportsApi<S> {
    /// The API over `store` (which must hold the tables of
    /// [`super::create_tables`]).
    pub fn new(store: Arc<S>, options: ApiOptions) -> ReportsApi<S> {
        ReportsApi { store, options }
    }

    /// Accepts a report on `branch` for `tenant` at `now_ms`, once per
    /// Idempotency-Key when one is given. `branch` and `key` must have
    /// passed [`super::job::check_branch`] and [`check_key`].
    pub async fn submit(
        &self,
        tenant: &str,
        branch: &str,
        key: Option<&str>,
        now_ms: u64,
    ) -> Result<Submitted, Refusal> {
        let Some(key) = key else {
            let job = self.new_job(tenant, branch, now_ms);
            let put = Write::put(JOBS_TABLE, job.to_item()).condition("attribute_not_exists(pk)");
            self.transact(vec![put]).await?;
            return Ok(Submitted::Created(job));
        };
        // Two rounds: if a concurrent request with this key commits between
        // our read and our write, our transaction fails and the second read
        // finds its key row.
        for _ in 0..2 {
            if let Some((job_id, first_branch)) = self.key_row(tenant, key).await? {
                if first_branch != branch {
                    return Err(Refusal::KeyReused {
                        branch: first_branch,
                    });
                }
                return match self.job(tenant, &job_id).await? {
                    Some(job) => Ok(Submitted::Existing(job)),
                    None => Err(Refusal::Expired),
                };
            }
            let job = self.new_job(tenant, branch, now_ms);
            let mut key_row = idempotency_key(tenant, key);
            key_row.insert("jobId".into(), AttributeValue::s(&job.id));
            key_row.insert("branch".into(), AttributeValue::s(branch));
            key_row.insert(
                EXPIRES_AT.into(),
                number(job.expires_at + self.options.key_grace.as_secs()),
            );
            let writes = vec![
                Write::put(JOBS_TABLE, job.to_item()).condition("attribute_not_exists(pk)"),
                Write::put(KEYS_TABLE, key_row).condition("attribute_not_exists(pk)"),
            ];
            match self.transact(writes).await {
                Ok(()) => return Ok(Submitted::Created(job)),
                Err(StoreError::TransactionCanceled { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Refusal::Contended)
    }

    /// Job `id` if it exists, has not expired and belongs to `tenant`.
    pub async fn job(&self, tenant: &str, id: &str) -> Result<Option<Job>, StoreError> {
        // Job ids are event ids (26 characters of Crockford base32): any
        // other text names no job, and is never sent to the store (a key
        // of thousands of characters is the store's validation error).
        if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Ok(None);
        }
        let item = self.get(JOBS_TABLE, job_key(id)).await?;
        let Some(item) = item else { return Ok(None) };
        let job = Job::from_item(&item).map_err(StoreError::Validation)?;
        Ok((job.tenant == tenant).then_some(job))
    }

    fn new_job(&self, tenant: &str, branch: &str, now_ms: u64) -> Job {
        Job {
            id: new_event_id(now_ms),
            tenant: tenant.to_owned(),
            branch: branch.to_owned(),
            status: JobStatus::Pending,
            attempts: 0,
            result: None,
            error: None,
            runner: None,
            lease_until: None,
            created_at: format_timestamp(now_ms),
            expires_at: now_ms / 1000 + self.options.job_ttl.as_secs(),
        }
    }

    /// The job id and branch a key was first used for.
    async fn key_row(
        &self,
        tenant: &str,
        key: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        let item = self.get(KEYS_TABLE, idempotency_key(tenant, key)).await?;
        Ok(item.and_then(|i| {
            let s = |k: &str| i.get(k).and_then(AttributeValue::as_s).map(str::to_owned);
            Some((s("jobId")?, s("branch")?))
        }))
    }

    async fn get(
        &self,
        table: &str,
        key: postbox_item::Item,
    ) -> Result<Option<postbox_item::Item>, StoreError> {
        let out = self
            .store
            .get_item(GetItemInput {
                table_name: table.to_owned(),
                key,
                consistent_read: Some(true),
                ..Default::default()
            })
            .await?;
        Ok(out.item)
    }

    async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.store
            .transact_write_items(TransactWriteItemsInput {
                transact_items: writes.into_iter().map(Write::into_transact).collect(),
                client_request_token: None,
            })
            .await
    }
}

/// The router: `POST /reports` and `GET /reports/{jobId}`.
pub fn router<S: ItemStore>(api: ReportsApi<S>) -> Router {
    Router::new()
        .route("/reports", post(create::<S>))
        .route("/reports/{job_id}", get(read::<S>))
        .with_state(api)
}

async fn create<S: ItemStore>(
    State(api): State<ReportsApi<S>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(m) => return error(StatusCode::BAD_REQUEST, "InvalidTenant", &m),
    };
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => match v.to_str() {
            Ok(k) => match check_key(k) {
                Ok(()) => Some(k.to_owned()),
                Err(m) => return error(StatusCode::BAD_REQUEST, "InvalidIdempotencyKey", &m),
            },
            Err(_) => {
                let m = "the Idempotency-Key must be visible ASCII characters";
                return error(StatusCode::BAD_REQUEST, "InvalidIdempotencyKey", m);
            }
        },
    };
    let branch = match parse_request(&body) {
        Ok(b) => b,
        Err(m) => return error(StatusCode::BAD_REQUEST, "InvalidRequest", &m),
    };
    match api.submit(&tenant, &branch, key.as_deref(), now_ms()).await {
        Ok(Submitted::Created(job)) => accepted(&api, &job, StatusCode::ACCEPTED),
        Ok(Submitted::Existing(job)) => {
            let status = if job.status.is_final() {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            accepted(&api, &job, status)
        }
        Err(e @ Refusal::KeyReused { .. }) => {
            error(StatusCode::CONFLICT, "IdempotencyKeyReused", &e.to_string())
        }
        Err(e @ Refusal::Expired) => error(StatusCode::NOT_FOUND, "JobExpired", &e.to_string()),
        Err(e @ (Refusal::Store(_) | Refusal::Contended)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "StoreFailed",
            &e.to_string(),
        ),
    }
}

async fn read<S: ItemStore>(
    State(api): State<ReportsApi<S>>,
    Path(job_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(m) => return error(StatusCode::BAD_REQUEST, "InvalidTenant", &m),
    };
    match api.job(&tenant, &job_id).await {
        Ok(Some(job)) => {
            let mut body = json!({
                "jobId": job.id,
                "branch": job.branch,
                "status": job.status.as_str(),
                "attempts": job.attempts,
                "createdAt": job.created_at,
                "statusUrl": status_url(&job.id),
            });
            if let Some(r) = &job.result {
                body["result"] = json!(r);
            }
            if let Some(e) = &job.error {
                body["error"] = json!(e);
            }
            let mut r = respond(StatusCode::OK, &body);
            if !job.status.is_final() {
                retry_after(&mut r, &api.options);
            }
            r
        }
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("no report job {job_id:?} (it may have expired)"),
        ),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "StoreFailed",
            &format!("the job store failed: {e}"),
        ),
    }
}

/// The request's tenant, or why it is not usable (a 400).
fn tenant(headers: &HeaderMap) -> Result<String, String> {
    let tenant = match headers.get(TENANT_HEADER).map(|v| v.to_str()) {
        None => DEFAULT_TENANT,
        Some(Ok(t)) => t,
        Some(Err(_)) => "",
    };
    Context::new(tenant, "reports-api")
        .map(|c| c.tenant().to_owned())
        .map_err(|e| e.to_string())
}

/// `/reports/<id>`.
pub fn status_url(job_id: &str) -> String {
    format!("/reports/{job_id}")
}

/// 202 (or 200 for a finished job) with Location, Retry-After and the
/// job's id, status and status URL.
fn accepted<S>(api: &ReportsApi<S>, job: &Job, status: StatusCode) -> Response {
    let url = status_url(&job.id);
    let body = json!({"jobId": job.id, "status": job.status.as_str(), "statusUrl": url});
    let mut r = respond(status, &body);
    if let Ok(v) = url.parse() {
        r.headers_mut().insert(header::LOCATION, v);
    }
    if !job.status.is_final() {
        retry_after(&mut r, &api.options);
    }
    r
}

fn retry_after(r: &mut Response, options: &ApiOptions) {
    let secs = options.retry_after.as_secs().max(1);
    r.headers_mut().insert(header::RETRY_AFTER, secs.into());
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    respond(status, &json!({"error": code, "message": message}))
}

fn respond(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

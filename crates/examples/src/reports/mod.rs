//! The asynchronous report-job example.
//!
//! ```text
//! POST /reports ──▶ jobs row PENDING ──pipe jobs-pending──▶ jobs.fifo ──▶ runner
//!                                                              claim RUNNING ─▶ SUCCEEDED
//! GET /reports/{id} ◀── jobs row            ReportReady ◀──pipe report-ready──┘
//!                                           (bus `reports`, rule logs it to a JSON-lines file)
//! ```
//!
//! The parts a server mounts: [`router`] over [`ReportsApi`] (the HTTP
//! API), [`pipes_toml`] (the relay config of both pipes), [`JobRunner`]
//! (drains `jobs.fifo`), and [`create_tables`] / [`create_queues`]. [`run`]
//! assembles them in a directory and drives the API over real HTTP.

mod api;
mod client;
mod job;
mod pipes;
mod run;
mod runner;

use postbox_queue::Queues;
use postbox_store::ItemStore;

use crate::assembly::{self, TableSpec};
use crate::error::ExampleError;

pub use api::{
    ApiOptions, DEFAULT_TENANT, Refusal, ReportsApi, Submitted, TENANT_HEADER, router, status_url,
};
pub use client::{HttpResponse, request};
pub use job::{
    EXPIRES_AT, JOBS_TABLE, Job, JobStatus, KEY_LENGTH, KEYS_TABLE, check_branch, check_key,
    parse_request,
};
pub use pipes::{JOBS_DLQ, JOBS_QUEUE, pipes_toml};
pub use run::{Exchange, ReportsReport, run};
pub use runner::{JobRunner, RunnerOptions, RunnerStats, Work, fake_report, work};

/// Receives of a job message before it goes to [`JOBS_DLQ`]: above the
/// runner's 5 attempts, so the job, not the queue, decides when to give up.
pub const MAX_RECEIVES: u32 = 10;

/// Creates the jobs table (with the stream the pipes read and TTL) and the
/// Idempotency-Key table (with TTL).
pub async fn create_tables<S: ItemStore>(store: &S) -> Result<(), ExampleError> {
    for (name, spec) in TABLES {
        assembly::create_table(store, name, spec).await?;
    }
    Ok(())
}

/// The jobs table (with the stream the pipes read) and the Idempotency-Key
/// table (random keys read by key: in arrival order), both expiring items
/// by [`EXPIRES_AT`].
pub(crate) const TABLES: [(&str, TableSpec<'static>); 2] = [
    (
        JOBS_TABLE,
        TableSpec {
            stream: true,
            ttl: Some(EXPIRES_AT),
            arrival: false,
        },
    ),
    (
        KEYS_TABLE,
        TableSpec {
            stream: false,
            ttl: Some(EXPIRES_AT),
            arrival: true,
        },
    ),
];

/// Creates `jobs.fifo` with its dead-letter queue.
pub async fn create_queues(queues: &Queues) -> Result<(), ExampleError> {
    assembly::create_fifo_with_dlq(queues, JOBS_QUEUE, JOBS_DLQ, MAX_RECEIVES).await
}

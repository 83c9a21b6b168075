//! The report-job example end to end: the API on 127.0.0.1:0 driven by
//! real HTTP requests, both pipes in the relay, one runner.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use postbox_engine::Catalog;
use postbox_engine::envelope::now_ms;
use postbox_node::{Handlers, NodeOptions};
use postbox_queue::Queues;
use postbox_store::embedded::EmbeddedStore;
use serde_json::json;

use super::api::{ApiOptions, ReportsApi, TENANT_HEADER, router};
use super::client::{HttpResponse, request};
use super::job::{Job, JobStatus};
use super::pipes::{JOBS_QUEUE, pipes_toml};
use super::runner::{JobRunner, RunnerOptions, RunnerStats, fake_report};
use super::{create_queues, create_tables};
use crate::assembly::{self, wait_for};
use crate::error::ExampleError;

/// The tenant of the run's requests.
const TENANT: &str = "acme";
/// How long jobs may take to succeed.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// One request of the run and its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// What the request shows.
    pub step: String,
    /// `POST /reports ...` or `GET /reports/...`.
    pub request: String,
    /// The status code.
    pub status: u16,
    /// The `jobId` of the answer, if any.
    pub job_id: Option<String>,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// The body.
    pub body: String,
}

/// What the report-job example showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportsReport {
    /// Every request, in order.
    pub exchanges: Vec<Exchange>,
    /// The jobs the run created, as they ended.
    pub jobs: Vec<Job>,
    /// The ReportReady log file's lines.
    pub ready_lines: Vec<String>,
    /// ReportReady lines per job id.
    pub ready_per_job: BTreeMap<String, usize>,
    /// What the runner did.
    pub runner: RunnerStats,
}

impl ReportsReport {
    /// The exchange of step `step`.
    pub fn exchange(&self, step: &str) -> Option<&Exchange> {
        self.exchanges.iter().find(|e| e.step == step)
    }
}

/// The API's address and the requests made so far.
struct Driver<'o, W> {
    addr: SocketAddr,
    exchanges: Vec<Exchange>,
    out: &'o mut W,
}

impl<W: std::io::Write> Driver<'_, W> {
    /// Sends a request as tenant [`TENANT`], prints and records it.
    async fn send(
        &mut self,
        step: &str,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> Result<HttpResponse, ExampleError> {
        let mut headers = vec![(TENANT_HEADER, TENANT)];
        if let Some(k) = key {
            headers.push(("Idempotency-Key", k));
        }
        let r = request(self.addr, method, path, &headers, body).await?;
        let described = format!(
            "{method} {path}{}{}",
            key.map(|k| format!(" Idempotency-Key: {k}"))
                .unwrap_or_default(),
            body.map(|b| format!(" {b}")).unwrap_or_default()
        );
        writeln!(
            self.out,
            "  {step}:\n    {described}\n    -> {} {}",
            r.status, r.body
        )?;
        for h in ["location", "retry-after"] {
            if let Some(v) = r.header(h) {
                writeln!(self.out, "       {h}: {v}")?;
            }
        }
        self.exchanges.push(Exchange {
            step: step.to_owned(),
            request: described,
            status: r.status,
            job_id: r.json()["jobId"].as_str().map(str::to_owned),
            location: r.header("location").map(str::to_owned),
            retry_after: r.header("retry-after").map(str::to_owned),
            body: r.body.clone(),
        });
        Ok(r)
    }
}

/// Runs the report-job example in `dir`, which must not hold a store yet
/// ([`ExampleError::DirectoryInUse`]), printing what happened to `out`.
///
/// Starts a node whose setup creates the tables and queues, with both
/// pipes (ReportReady events logged to `dir/report-ready.jsonl`), then one
/// runner on it, and serves the API on 127.0.0.1:0; then shows over HTTP:
/// a job accepted (202), the same Idempotency-Key answered with the same
/// job, the key reused for another branch (409), a bad key, bad JSON and a
/// bad branch (400), a key whose job expired (404), the jobs reaching
/// SUCCEEDED, and the ReportReady line logged for each.
pub async fn run(dir: &Path, out: &mut impl std::io::Write) -> Result<ReportsReport, ExampleError> {
    let log = dir.join("report-ready.jsonl");
    let mut handlers = Handlers::none();
    handlers.setup = Some(Box::new(|store: EmbeddedStore, queues: Queues| {
        Box::pin(async move {
            create_tables(&store).await.map_err(|e| e.to_string())?;
            create_queues(&queues).await.map_err(|e| e.to_string())
        })
    }));
    handlers.pipes = Some(pipes_toml(&log));
    let node = assembly::start_node(NodeOptions::new(dir, Catalog::default(), handlers)).await?;
    let queues = node.queues.clone();
    let shared = Arc::new(node.store.clone());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let runner = JobRunner::new(
        shared.clone(),
        queues.clone(),
        RunnerOptions {
            owner: "report-runner-1".into(),
            ..RunnerOptions::default()
        },
        fake_report(),
    );
    let runner_task = {
        let (runner, stopped) = (runner.clone(), stopped.clone());
        tokio::spawn(async move { runner.run(stopped).await })
    };
    let api = ReportsApi::new(shared.clone(), ApiOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = {
        let mut stopped = stopped.clone();
        let app = router(api.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.changed().await;
                })
                .await
        })
    };
    writeln!(
        out,
        "Report jobs: API on http://{addr}, pipes jobs-pending and report-ready, one runner (tenant {TENANT})"
    )?;

    let mut d = Driver {
        addr,
        exchanges: Vec::new(),
        out,
    };
    let main = r#"{"branch": "main"}"#;
    let first = d
        .send(
            "create",
            "POST",
            "/reports",
            Some("report-main-0001"),
            Some(main),
        )
        .await?;
    d.send(
        "same key again",
        "POST",
        "/reports",
        Some("report-main-0001"),
        Some(main),
    )
    .await?;
    d.send(
        "same key, other branch",
        "POST",
        "/reports",
        Some("report-main-0001"),
        Some(r#"{"branch": "eu-west"}"#),
    )
    .await?;
    d.send(
        "key too short",
        "POST",
        "/reports",
        Some("short"),
        Some(main),
    )
    .await?;
    d.send(
        "bad JSON",
        "POST",
        "/reports",
        None,
        Some(r#"{"branch": "main""#),
    )
    .await?;
    d.send(
        "bad branch",
        "POST",
        "/reports",
        None,
        Some(r#"{"branch": "Feature/X"}"#),
    )
    .await?;
    let second = d
        .send(
            "create without a key",
            "POST",
            "/reports",
            None,
            Some(r#"{"branch": "eu-west"}"#),
        )
        .await?;
    // A request made yesterday: its job has expired, its key is remembered.
    let yesterday = now_ms() - 25 * 3600 * 1000;
    api.submit(TENANT, "main", Some("report-old-0001"), yesterday)
        .await
        .map_err(|e| ExampleError::Unexpected(e.to_string()))?;
    d.send(
        "key of an expired job",
        "POST",
        "/reports",
        Some("report-old-0001"),
        Some(main),
    )
    .await?;
    d.send("unknown job", "GET", "/reports/01NOSUCHJOB", None, None)
        .await?;

    let ids: Vec<String> = [&first, &second]
        .iter()
        .map(|r| {
            r.json()["jobId"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ExampleError::Unexpected(format!("no jobId in {}", r.body)))
        })
        .collect::<Result<_, _>>()?;
    let addr = d.addr;
    wait_for(
        "the report jobs to succeed",
        JOB_TIMEOUT,
        Duration::from_millis(50),
        || async {
            let mut missing = Vec::new();
            for id in &ids {
                let r = request(
                    addr,
                    "GET",
                    &format!("/reports/{id}"),
                    &[(TENANT_HEADER, TENANT)],
                    None,
                )
                .await?;
                let status = r.json()["status"].as_str().unwrap_or("?").to_owned();
                if status != JobStatus::Succeeded.as_str() {
                    missing.push(format!("job {id} is {status}"));
                }
            }
            Ok(if missing.is_empty() {
                Ok(())
            } else {
                Err(missing.join("; "))
            })
        },
    )
    .await?;
    for id in &ids {
        d.send("finished job", "GET", &format!("/reports/{id}"), None, None)
            .await?;
    }
    d.send(
        "same key after the job finished",
        "POST",
        "/reports",
        Some("report-main-0001"),
        Some(main),
    )
    .await?;

    let ready_lines = wait_for(
        "the ReportReady lines",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| {
                    !lines
                        .iter()
                        .any(|l| job_of_line(l).as_deref() == Some(id.as_str()))
                })
                .collect();
            Ok(if missing.is_empty() {
                Ok(lines)
            } else {
                Err(format!("no ReportReady line yet for {missing:?}"))
            })
        },
    )
    .await?;
    let mut ready_per_job = BTreeMap::new();
    for line in &ready_lines {
        if let Some(id) = job_of_line(line) {
            *ready_per_job.entry(id).or_insert(0) += 1;
        }
    }

    // Every record relayed and every message settled, the expired job's
    // included, before the runner stops.
    wait_for(
        "the relay to catch up and jobs.fifo to empty",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let behind: u64 = node
                .relay_stats()
                .await
                .map_err(ExampleError::Node)?
                .iter()
                .map(|p| p.records_behind)
                .sum();
            let q = queues.stats(JOBS_QUEUE)?;
            let left = q.visible + q.in_flight + q.delayed;
            Ok(if behind == 0 && left == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{behind} record(s) to relay, {left} message(s) in {JOBS_QUEUE}"
                ))
            })
        },
    )
    .await?;
    let _ = stop.send(true);
    let _ = runner_task.await;
    match server.await {
        Ok(r) => r?,
        Err(e) => {
            return Err(ExampleError::Unexpected(format!(
                "the server task failed: {e}"
            )));
        }
    }
    node.shutdown().await;

    let mut jobs = Vec::new();
    for id in &ids {
        let job = api
            .job(TENANT, id)
            .await?
            .ok_or_else(|| ExampleError::Unexpected(format!("job {id} vanished")))?;
        jobs.push(job);
    }
    let report = ReportsReport {
        exchanges: d.exchanges,
        jobs,
        ready_lines,
        ready_per_job,
        runner: runner.stats(),
    };
    print(&report, &log, out)?;
    Ok(report)
}

/// The job id in a ReportReady log line.
fn job_of_line(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    (v["detail-type"] == json!("ReportReady"))
        .then(|| v["detail"]["jobId"].as_str().map(str::to_owned))
        .flatten()
}

fn print(r: &ReportsReport, log: &Path, out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "\njobs:")?;
    for j in &r.jobs {
        writeln!(
            out,
            "  {} (branch {}): {} after {} attempt(s), result {}",
            j.id,
            j.branch,
            j.status.as_str(),
            j.attempts,
            j.result.as_deref().unwrap_or("-")
        )?;
    }
    writeln!(out, "ReportReady events logged to {}:", log.display())?;
    for line in &r.ready_lines {
        writeln!(out, "  {line}")?;
    }
    let s = &r.runner;
    writeln!(
        out,
        "runner: {} message(s) received, {} job(s) succeeded, {} retried, {} failed, {} for jobs gone (expired), {} duplicate(s)",
        s.received, s.succeeded, s.retried, s.failed, s.gone, s.duplicates
    )
}

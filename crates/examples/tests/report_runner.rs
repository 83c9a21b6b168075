//! The report-job runner against the embedded store and queue, with the
//! pipe's messages sent by hand: failed attempts are retried up to five
//! runs in all, a job another runner holds is left alone until its lease
//! ends and is then taken over, and a finished job never runs again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use postbox_examples::reports::{
    self, ApiOptions, JOBS_QUEUE, JOBS_TABLE, Job, JobRunner, JobStatus, ReportsApi, RunnerOptions,
    Submitted, Work, work,
};
use postbox_queue::{NewMessage, Queues, QueuesOptions};
use postbox_store::ItemStore;
use postbox_store::api::PutItemInput;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};

struct Env {
    _dir: tempfile::TempDir,
    store: Arc<EmbeddedStore>,
    queues: Queues,
    api: ReportsApi<EmbeddedStore>,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        dir.path().join("postbox.redb"),
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    let store = Arc::new(store);
    reports::create_tables(&*store).await.unwrap();
    reports::create_queues(&queues).await.unwrap();
    let api = ReportsApi::new(store.clone(), ApiOptions::default());
    Env {
        _dir: dir,
        store,
        queues,
        api,
    }
}

/// A PENDING job, and its message on the queue (what the pipe does).
async fn job(env: &Env, branch: &str) -> Job {
    let now = postbox_engine::envelope::now_ms();
    let Submitted::Created(job) = env.api.submit("acme", branch, None, now).await.unwrap() else {
        panic!("a new job");
    };
    send(env, &job.id, &job.id).await;
    job
}

async fn send(env: &Env, job_id: &str, dedup: &str) {
    let body = format!(r#"{{"jobId": "{job_id}"}}"#);
    env.queues
        .send(JOBS_QUEUE, NewMessage::new(body).group("acme").dedup(dedup))
        .await
        .unwrap();
}

/// Work that fails until attempt `succeed_at` (never if 0), counting calls.
fn flaky(succeed_at: u32, calls: Arc<AtomicU32>) -> Work {
    work(move |job: Job| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if succeed_at != 0 && job.attempts >= succeed_at {
                Ok(format!("https://reports.example.com/{}.csv", job.id))
            } else {
                Err(format!(
                    "the warehouse query timed out (attempt {})",
                    job.attempts
                ))
            }
        }
    })
}

fn runner(env: &Env, owner: &str, w: Work) -> JobRunner<EmbeddedStore, Queues> {
    let options = RunnerOptions {
        owner: owner.into(),
        retry_delay: Duration::ZERO,
        wait_seconds: 0,
        ..RunnerOptions::default()
    };
    JobRunner::new(env.store.clone(), env.queues.clone(), options, w)
}

async fn get(env: &Env, id: &str) -> Job {
    env.api.job("acme", id).await.unwrap().unwrap()
}

async fn put(env: &Env, job: &Job) {
    env.store
        .put_item(PutItemInput {
            table_name: JOBS_TABLE.into(),
            item: job.to_item(),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Runs batches until the queue has nothing visible or in flight.
async fn drain(r: &JobRunner<EmbeddedStore, Queues>, env: &Env) {
    for _ in 0..50 {
        let s = env.queues.stats(JOBS_QUEUE).unwrap();
        if s.visible + s.in_flight + s.delayed == 0 {
            return;
        }
        r.run_once().await.unwrap();
    }
    panic!(
        "the queue did not drain: {:?}",
        env.queues.stats(JOBS_QUEUE)
    );
}

#[tokio::test]
async fn a_failed_attempt_is_retried_and_the_job_succeeds_on_the_third() {
    let env = env().await;
    let calls = Arc::new(AtomicU32::new(0));
    let r = runner(&env, "r1", flaky(3, calls.clone()));
    let j = job(&env, "main").await;
    drain(&r, &env).await;

    let done = get(&env, &j.id).await;
    assert_eq!((done.status, done.attempts), (JobStatus::Succeeded, 3));
    assert_eq!(
        done.result.as_deref(),
        Some(&*format!("https://reports.example.com/{}.csv", j.id))
    );
    assert!(done.error.unwrap().contains("attempt 2"));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let s = r.stats();
    assert_eq!((s.retried, s.succeeded, s.failed), (2, 1, 0), "{s:?}");
}

#[tokio::test]
async fn a_job_that_keeps_failing_is_failed_after_five_runs_and_never_runs_again() {
    let env = env().await;
    let calls = Arc::new(AtomicU32::new(0));
    let r = runner(&env, "r1", flaky(0, calls.clone()));
    let j = job(&env, "main").await;
    drain(&r, &env).await;

    let failed = get(&env, &j.id).await;
    assert_eq!((failed.status, failed.attempts), (JobStatus::Failed, 5));
    assert!(failed.error.unwrap().contains("attempt 5"));
    assert_eq!(calls.load(Ordering::SeqCst), 5);

    // A duplicate message (a pipe redelivery) is deleted without a run.
    send(&env, &j.id, "redelivered").await;
    drain(&r, &env).await;
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    let s = r.stats();
    assert_eq!((s.retried, s.failed, s.duplicates), (4, 1, 1), "{s:?}");
}

#[tokio::test]
async fn a_held_job_waits_for_its_lease_and_a_dead_runners_job_is_taken_over() {
    let env = env().await;
    let calls = Arc::new(AtomicU32::new(0));
    let r = runner(&env, "r2", flaky(1, calls.clone()));
    let j = job(&env, "main").await;
    let now = postbox_engine::envelope::now_ms();
    let held = Job {
        status: JobStatus::Running,
        attempts: 1,
        runner: Some("r1".into()),
        lease_until: Some(now + 60_000),
        ..j.clone()
    };
    put(&env, &held).await;

    assert_eq!(r.run_once().await.unwrap(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "r1 holds it");
    assert_eq!(get(&env, &j.id).await, held);
    let q = env.queues.stats(JOBS_QUEUE).unwrap();
    assert_eq!(
        (q.in_flight, q.deleted),
        (1, 0),
        "the message waits for the lease"
    );

    // r1 died: its lease ran out. The message comes back (here: a redelivery).
    put(
        &env,
        &Job {
            lease_until: Some(now - 1),
            ..held
        },
    )
    .await;
    env.queues.purge_queue(JOBS_QUEUE).await.unwrap();
    send(&env, &j.id, "after-the-crash").await;
    drain(&r, &env).await;
    let done = get(&env, &j.id).await;
    assert_eq!((done.status, done.attempts), (JobStatus::Succeeded, 2));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_job_whose_last_run_died_is_failed_without_running_again() {
    let env = env().await;
    let calls = Arc::new(AtomicU32::new(0));
    let r = runner(&env, "r2", flaky(1, calls.clone()));
    let j = job(&env, "main").await;
    let now = postbox_engine::envelope::now_ms();
    put(
        &env,
        &Job {
            status: JobStatus::Running,
            attempts: 5,
            runner: Some("r1".into()),
            lease_until: Some(now - 1),
            ..j.clone()
        },
    )
    .await;
    drain(&r, &env).await;
    let failed = get(&env, &j.id).await;
    assert_eq!((failed.status, failed.attempts), (JobStatus::Failed, 5));
    assert!(failed.error.unwrap().contains("gave up after 5 attempts"));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

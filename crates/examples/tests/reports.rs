//! The report-job example end to end in a temporary directory: the status
//! codes of every idempotency case, both jobs SUCCEEDED once each, and one
//! ReportReady line logged per job.

use postbox_examples::reports::{self, JobStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_jobs_are_idempotent_run_once_and_are_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let report = reports::run(dir.path(), &mut out).await.unwrap();
    let printed = String::from_utf8(out).unwrap();
    println!("{printed}");
    let step = |name: &str| {
        report
            .exchange(name)
            .unwrap_or_else(|| panic!("no step {name:?}: {printed}"))
    };

    let created = step("create");
    assert_eq!(created.status, 202, "{printed}");
    let job = created.job_id.clone().unwrap();
    assert_eq!(
        created.location.as_deref(),
        Some(&*format!("/reports/{job}"))
    );
    assert_eq!(created.retry_after.as_deref(), Some("1"));
    let body: serde_json::Value = serde_json::from_str(&created.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"jobId": job, "status": "PENDING", "statusUrl": format!("/reports/{job}")})
    );

    let again = step("same key again");
    assert!(matches!(again.status, 200 | 202), "{again:?}");
    assert_eq!(again.job_id.as_deref(), Some(&*job), "the same job");
    assert_eq!(step("same key, other branch").status, 409);
    for bad in ["key too short", "bad JSON", "bad branch"] {
        let e = step(bad);
        assert_eq!(e.status, 400, "{e:?}");
        assert!(e.body.contains("\"message\""), "a clear message: {e:?}");
    }
    assert!(step("key too short").body.contains("8 to 128 characters"));
    assert!(step("bad branch").body.contains("contains 'F'"));
    assert_eq!(step("key of an expired job").status, 404);
    assert_eq!(step("unknown job").status, 404);
    let second = step("create without a key");
    assert_eq!(second.status, 202);
    assert_ne!(second.job_id.as_deref(), Some(&*job));
    let after = step("same key after the job finished");
    assert_eq!((after.status, after.job_id.as_deref()), (200, Some(&*job)));

    assert_eq!(report.jobs.len(), 2);
    for j in &report.jobs {
        assert_eq!((j.status, j.attempts), (JobStatus::Succeeded, 1), "{j:?}");
        assert!(
            j.result
                .as_deref()
                .unwrap()
                .ends_with(&format!("{}.csv", j.id))
        );
    }
    assert_eq!(report.ready_lines.len(), 2, "{printed}");
    for j in &report.jobs {
        assert_eq!(report.ready_per_job.get(&j.id), Some(&1), "{printed}");
    }
    let line: serde_json::Value = serde_json::from_str(&report.ready_lines[0]).unwrap();
    assert_eq!(line["detail-type"], "ReportReady");
    assert_eq!(line["source"], "postbox.reports");
    assert_eq!(line["detail"]["tenant"], "acme");
    let s = &report.runner;
    assert_eq!(
        (s.succeeded, s.retried, s.failed, s.duplicates),
        (2, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.gone, 1, "the expired job's message was dropped: {s:?}");
}

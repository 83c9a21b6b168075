//! The report-job example's two pipes end to end: a PENDING job becomes a
//! `{"jobId": ...}` message on the jobs queue; the RUNNING -> SUCCEEDED
//! transition becomes a ReportReady event on the `reports` bus, whose rule
//! logs it to a JSON-lines file and queues a notification.

mod common;

use common::*;
use serde_json::json;

fn config(log: &std::path::Path) -> String {
    format!(
        r#"
[pipes.jobs-pending]
source = "jobs"
filters = ['{{"dynamodb": {{"NewImage": {{"status": {{"S": ["PENDING"]}}}}, "OldImage": {{"status": {{"S": [{{"exists": false}}]}}}}}}}}']
input_template = '{{"jobId": "<$.dynamodb.NewImage.jobId.S>"}}'
target = {{ queue = "jobs.fifo", message_group_id = "<$.dynamodb.NewImage.tenant.S>" }}

[pipes.report-ready]
source = "jobs"
filters = ['{{"dynamodb": {{"OldImage": {{"status": {{"S": ["RUNNING"]}}}}, "NewImage": {{"status": {{"S": ["SUCCEEDED"]}}}}}}}}']
input_template = '{{"jobId": "<$.dynamodb.NewImage.jobId.S>", "tenant": "<$.dynamodb.NewImage.tenant.S>", "result": "<$.dynamodb.NewImage.result.S>"}}'
target = {{ bus = "reports", detail_type = "ReportReady", source = "postbox.reports" }}

[[buses.reports.rules]]
name = "ready"
pattern = '{{"detail-type": ["ReportReady"], "source": ["postbox.reports"]}}'
targets = [{{ log = "{}" }}, {{ queue = "notifications" }}]
"#,
        log.display()
    )
}

fn job(id: &str, status: &str) -> serde_json::Value {
    let mut j = json!({"pk": {"S": format!("JOB#{id}")}, "jobId": {"S": id}, "tenant": {"S": "acme"}, "status": {"S": status}});
    if status == "SUCCEEDED" {
        j["result"] = json!({"S": format!("s3://reports/{id}.pdf")});
    }
    j
}

#[tokio::test]
async fn pending_jobs_are_queued_and_succeeded_reports_are_announced_and_logged() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let log = env.dir.path().join("reports.jsonl");
    let relay = start(&env, &config(&log), "a").await;

    // j1 runs to success; j2 skips RUNNING (no transition); j3 fails.
    for (id, steps) in [
        ("j1", &["PENDING", "RUNNING", "SUCCEEDED"][..]),
        ("j2", &["PENDING", "SUCCEEDED"]),
        ("j3", &["PENDING", "RUNNING", "FAILED"]),
    ] {
        for status in steps {
            put(&env.store, "jobs", job(id, status)).await;
        }
    }
    let stats = caught_up(&relay).await;

    assert_eq!(
        drain(&env.queues, "jobs.fifo").await,
        vec![
            r#"{"jobId": "j1"}"#,
            r#"{"jobId": "j2"}"#,
            r#"{"jobId": "j3"}"#
        ]
    );
    let notifications = drain(&env.queues, "notifications").await;
    assert_eq!(notifications.len(), 1);
    let event = json(&notifications[0]);
    assert_eq!(event["detail-type"], "ReportReady");
    assert_eq!(event["source"], "postbox.reports");
    assert_eq!(
        event["detail"],
        json!({"jobId": "j1", "tenant": "acme", "result": "s3://reports/j1.pdf"})
    );
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(json(&lines[0]), event);

    let by_pipe = |name: &str| stats.iter().find(|s| s.pipe == name).unwrap().clone();
    assert_eq!(by_pipe("jobs-pending").delivered, 3);
    assert_eq!(by_pipe("report-ready").delivered, 1);
    assert_eq!(
        by_pipe("report-ready").dead_lettered + by_pipe("jobs-pending").dead_lettered,
        0
    );
    relay.shutdown().await;
}

//! The example's two pipes, as relay config text:
//!
//! - `jobs-pending`: a job row INSERTed as PENDING becomes a `{"jobId": ...}`
//!   message on `jobs.fifo`, one message group per tenant. A job put back to
//!   PENDING after a failed attempt is not sent again (its OldImage has a
//!   status): its message is still in the queue and comes back by itself.
//! - `report-ready`: the RUNNING -> SUCCEEDED transition becomes a
//!   ReportReady event on the `reports` bus, whose rule appends it to a
//!   JSON-lines log file.

use std::path::Path;

/// The jobs queue the `jobs-pending` pipe fills and the runner drains.
pub const JOBS_QUEUE: &str = "jobs.fifo";
/// Where messages go after too many receives.
pub const JOBS_DLQ: &str = "jobs-dlq.fifo";

/// The relay config of both pipes, logging ReportReady events to `log`.
/// It declares no `[relay]` table, so it can be appended to a config that
/// does (e.g. one running the default events pipe); the relay checks that
/// the `jobs` table exists with a stream ([`super::create_tables`]).
pub fn pipes_toml(log: &Path) -> String {
    // TOML literal strings cannot hold a quote; a path with one is written
    // as a basic string with escapes instead.
    let log = toml_string(&log.display().to_string());
    format!(
        r#"[pipes.jobs-pending]
source = "jobs"
filters = ['{{"dynamodb": {{"NewImage": {{"status": {{"S": ["PENDING"]}}}}, "OldImage": {{"status": {{"S": [{{"exists": false}}]}}}}}}}}']
input_template = '{{"jobId": "<$.dynamodb.NewImage.jobId.S>"}}'
target = {{ queue = "{JOBS_QUEUE}", message_group_id = "<$.dynamodb.NewImage.tenant.S>" }}
dead_letter_queue = "jobs-pending-relay-dlq"

[pipes.report-ready]
source = "jobs"
filters = ['{{"dynamodb": {{"OldImage": {{"status": {{"S": ["RUNNING"]}}}}, "NewImage": {{"status": {{"S": ["SUCCEEDED"]}}}}}}}}']
input_template = '{{"jobId": "<$.dynamodb.NewImage.jobId.S>", "tenant": "<$.dynamodb.NewImage.tenant.S>", "branch": "<$.dynamodb.NewImage.branch.S>", "result": "<$.dynamodb.NewImage.result.S>"}}'
target = {{ bus = "reports", detail_type = "ReportReady", source = "postbox.reports" }}
dead_letter_queue = "report-ready-relay-dlq"

[[buses.reports.rules]]
name = "log-ready"
pattern = '{{"detail-type": ["ReportReady"], "source": ["postbox.reports"]}}'
targets = [{{ log = {log} }}]
"#
    )
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_relay::RelayConfig;
    use postbox_relay::config::{PipeTarget, RuleTarget};

    #[test]
    fn the_config_parses_with_the_log_path_filled_in() {
        let log = Path::new("/tmp/a \"quoted\" dir/reports.jsonl");
        let config = RelayConfig::from_toml(&pipes_toml(log)).unwrap();
        let names: Vec<&str> = config.pipes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["jobs-pending", "report-ready"]);
        let PipeTarget::Queue(q) = &config.pipe("jobs-pending").unwrap().target else {
            panic!("jobs-pending delivers to a queue");
        };
        assert_eq!(q.queue, JOBS_QUEUE);
        let rules = &config.buses["reports"];
        assert!(matches!(&rules[0].targets[0], RuleTarget::Log(p) if p == log));
    }

    #[test]
    fn it_appends_to_the_events_pipe_config() {
        let text = format!(
            "{}\n{}",
            crate::payments::PIPES_TOML,
            pipes_toml(Path::new("ready.jsonl"))
        );
        let config = RelayConfig::from_toml(&text).unwrap();
        let mut names: Vec<&str> = config.pipes.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["events", "jobs-pending", "report-ready"]);
    }
}

//! `postbox pipe test`: exit 0 when the record would be delivered (printing
//! the message), 1 when it would be dead-lettered (printing why), 2 on bad
//! input (no such pipe, a record that is not JSON, a config that cannot be
//! read), as the README's exit codes say.

use std::process::Command;

const CONFIG: &str = r#"
[pipes.jobs]
source = "jobs"
input_template = '{"jobId": "<$.dynamodb.NewImage.jobId.S>"}'
target = { queue = "jobs.fifo", message_group_id = "<$.dynamodb.NewImage.tenant.S>" }
"#;

fn pipe_test(dir: &std::path::Path, pipe: &str, record: &str) -> (i32, String) {
    let config = dir.join("pipes.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let file = dir.join("record.json");
    std::fs::write(&file, record).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["pipe", "test", "--pipe", pipe, "--config"])
        .arg(&config)
        .arg("--record")
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn record(image: &str) -> String {
    format!(
        r#"{{"eventID": "1", "eventName": "INSERT", "dynamodb": {{"SequenceNumber": "7", "NewImage": {image}}}}}"#
    )
}

#[test]
fn pipe_test_exit_codes_tell_delivered_dead_lettered_and_bad_input_apart() {
    let dir = tempfile::tempdir().unwrap();
    let good = record(r#"{"jobId": {"S": "j1"}, "tenant": {"S": "acme"}}"#);
    let (code, out) = pipe_test(dir.path(), "jobs", &good);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("queue jobs.fifo (MessageGroupId acme"),
        "{out}"
    );

    let (code, out) = pipe_test(dir.path(), "jobs", &record(r#"{"tenant": {"S": "acme"}}"#));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("would go to the dead-letter queue"), "{out}");

    let (code, out) = pipe_test(dir.path(), "nope", &good);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no pipe \"nope\""), "{out}");

    let (code, out) = pipe_test(dir.path(), "jobs", "{not json");
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the record is not JSON"), "{out}");
}

//! Logs an operator can ship: POSTBOX_LOG_FORMAT=json writes one JSON object
//! per line (timestamp, level, target, fields); text written to a file has
//! no colour codes; an unknown format is refused at startup with exit 2.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

/// Runs `postbox serve` on a fresh data directory with `format`, stops it
/// with SIGTERM once it listens, and returns what it wrote to stderr.
fn serve_logs(format: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--wire-listen",
            "off",
            "--data",
        ])
        .arg(dir.path())
        .env("POSTBOX_LOG", "info")
        .env("POSTBOX_LOG_FORMAT", format)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening"), "{line:?}");
    let sent = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    stderr
}

#[test]
fn json_logs_are_one_object_per_line() {
    let logs = serve_logs("json");
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "serve logged nothing at info");
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for key in ["timestamp", "level", "target", "fields"] {
            assert!(v.get(key).is_some(), "no {key} in {line}");
        }
    }
}

#[test]
fn text_logs_to_a_pipe_have_no_colour_codes() {
    let logs = serve_logs("text");
    assert!(!logs.trim().is_empty(), "serve logged nothing at info");
    assert!(!logs.contains('\u{1b}'), "colour codes in {logs:?}");
}

#[test]
fn an_unknown_log_format_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["verify", "--endpoint", "http://127.0.0.1:9"])
        .env("POSTBOX_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("POSTBOX_LOG_FORMAT=\"xml\""), "{stderr}");
}

//! The README's first command: `postbox demo` runs both example
//! applications end to end and exits 0 only when every check holds.

use std::process::Command;

#[test]
fn the_demo_runs_both_examples_and_says_ok() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .arg("demo")
        .arg("--dir")
        .arg(dir.path().join("demo"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Example (a)") && stdout.contains("Example (b)"),
        "{stdout}"
    );
    assert!(stdout.contains("verdict: OK"), "{stdout}");
    assert!(
        stdout.lines().last().unwrap_or("").starts_with("demo: ok"),
        "{stdout}"
    );
    // A second run into the same directory is refused, not mixed with the first.
    let again = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .arg("demo")
        .arg("--dir")
        .arg(dir.path().join("demo"))
        .output()
        .unwrap();
    assert!(!again.status.success());
}

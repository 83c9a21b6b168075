//! `postbox catalog check`: exit code 0 on a sound catalog and non-zero on
//! any violation, a human-readable report, and the generated catalog as JSON
//! and Markdown.

use std::path::PathBuf;
use std::process::Command;

fn write(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn check(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .arg("catalog")
        .arg("check")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const BAD: &str = r#"
[[event_types]]
name = "CONTACTADDRESS"
producers = ["contacts"]
[[entities]]
name = "CONTACT"
[[subscriptions]]
name = "address"
glob = "CONTACTADDR"
lane = "DURABLE"
handler = "h"
[[subscriptions]]
name = "rows"
glob = "row:CONTACT:*"
lane = "DURABLE"
handler = "h"
"#;

#[test]
fn the_example_catalog_passes() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/catalog.toml");
    let (code, out) = check(&["--catalog", example]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("contract: OK"), "{out}");
    let (code, md) = check(&["--catalog", example, "--markdown"]);
    assert_eq!(code, 0);
    assert!(
        md.starts_with("# Event catalog") && md.contains("| `PAYMENT_COMPLETED` | payments |"),
        "{md}"
    );
}

#[test]
fn violations_fail_with_a_readable_report() {
    let path = write("bad-catalog.toml", BAD);
    let (code, out) = check(&["--catalog", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(out.contains("2 violation(s)"), "{out}");
    assert!(out.contains("Did you mean \"CONTACTADDRESS\"?"), "{out}");
    assert!(
        out.contains("subscription \"rows\"") && out.contains("BEST_EFFORT"),
        "{out}"
    );
    let (code, json) = check(&["--catalog", path.to_str().unwrap(), "--json"]);
    assert_ne!(code, 0);
    assert!(
        json.contains("\"ok\": false")
            && json.contains("\"rule\": \"no_match\"")
            && json.contains("\"suggestion\": \"CONTACTADDRESS\""),
        "{json}"
    );
}

#[test]
fn an_unreadable_catalog_is_an_error() {
    let (code, _) = check(&["--catalog", "/nonexistent/catalog.toml"]);
    assert_eq!(code, 2);
    let path = write(
        "typo-catalog.toml",
        "[[subscriptions]]\nname='s'\nglob='A'\nlane='SOMETIMES'\nhandler='h'\n",
    );
    let (code, _) = check(&["--catalog", path.to_str().unwrap()]);
    assert_eq!(code, 2);
}

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
handler = "orders::mirror"
[[subscriptions]]
name = "rows"
glob = "row:CONTACT:*"
lane = "DURABLE"
handler = "orders::mirror"
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

#[test]
fn a_handler_postbox_serve_does_not_have_fails_the_check_with_the_name_meant() {
    let path = write(
        "handlers-catalog.toml",
        r#"
[[event_types]]
name = "PAYMENT_COMPLETED"
producers = ["payments"]
[[producers]]
name = "payments"
emits = ["PAYMENT_COMPLETED"]
[[subscriptions]]
name = "tags"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "crm::tagg"
[[subscriptions]]
name = "mail"
glob = "PAYMENT_*"
lane = "INLINE"
handler = "notify::email"
[[subscriptions]]
name = "hook"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "https://example.com/hook"
[[subscriptions]]
name = "billing"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "pull"
[[subscriptions]]
name = "mirror"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "orders::mirror"
"#,
    );
    let (code, out) = check(&["--catalog", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("2 violation(s)"), "{out}");
    assert!(
        out.contains("names handler \"crm::tagg\", which postbox serve does not have; did you mean \"crm::tag\"?"),
        "{out}"
    );
    assert!(
        out.contains(
            "subscription \"mail\" on lane INLINE runs inside the process that embeds the engine"
        ),
        "{out}"
    );
    let (_, json) = check(&["--catalog", path.to_str().unwrap(), "--json"]);
    assert!(json.contains("\"suggestion\": \"crm::tag\""), "{json}");
}

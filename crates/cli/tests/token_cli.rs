//! `postbox token create|list|revoke|rotate` against a running server.

mod common;

use std::process::Command;

use common::{Server, call};

fn postbox(server: &Server, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(args)
        .args(["--endpoint", &server.base, "--data"])
        .arg(&server.data)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_listed_revoked_and_rotated_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["serve", "--workers", "0"], &dir.path().join("data"));
    let (ok, token, err) = postbox(
        &server,
        &[
            "token",
            "create",
            "--tenant",
            "acme",
            "--subject",
            "ci",
            "--expires-in",
            "1h",
        ],
    );
    assert!(ok, "{err}");
    let token = token.trim().to_owned();
    let (status, _) = call(&server.base, Some(&token), "GET", "/v1/events", None).await;
    assert_eq!(status, 200);
    let (ok, _, err) = postbox(
        &server,
        &["token", "create", "--tenant", "acme", "--expires-in", "off"],
    );
    assert!(!ok, "an expiry of off is refused");
    assert!(err.contains("--expires-in"), "{err}");

    let (ok, listing, err) = postbox(&server, &["token", "list"]);
    assert!(ok, "{err}");
    let line = listing
        .lines()
        .find(|l| l.contains(" ci "))
        .unwrap_or_else(|| panic!("{listing}"));
    let id = line.split_whitespace().next().unwrap().to_owned();
    assert!(
        line.contains("acme") && !listing.contains("pbx_"),
        "{listing}"
    );

    let (ok, new, err) = postbox(&server, &["token", "rotate", &id]);
    assert!(ok, "{err}");
    let new = new.trim().to_owned();
    let (status, _) = call(&server.base, Some(&token), "GET", "/v1/events", None).await;
    assert_eq!(status, 401, "the rotated token is revoked");
    let (status, _) = call(&server.base, Some(&new), "GET", "/v1/events", None).await;
    assert_eq!(status, 200);

    let (ok, listing, _) = postbox(&server, &["token", "list", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let new_id = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["subject"] == "ci")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (ok, _, err) = postbox(&server, &["token", "revoke", &new_id]);
    assert!(ok, "{err}");
    let (status, _) = call(&server.base, Some(&new), "GET", "/v1/events", None).await;
    assert_eq!(status, 401);
    let (ok, _, err) = postbox(&server, &["token", "revoke", &new_id]);
    assert!(!ok && err.contains("no token"), "{err}");
}

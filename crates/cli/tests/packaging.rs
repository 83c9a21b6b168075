//! `packaging/`: the systemd unit and the container image run the binary
//! with settings it accepts. Each file's command line and environment are
//! read from the file and run against the binary (paths moved into a
//! temporary directory, the port made free); the node must start, answer
//! the image's health check, and stop cleanly on SIGTERM.
//! `systemd-analyze verify` checks the unit's syntax. The compose file's
//! two services run as plain processes: its receiver verifies a real
//! delivery of its catalog.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn packaging(file: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../packaging")
            .join(file),
    )
    .unwrap()
}

/// Starts the binary with `args` and `env` (the file's, with data, catalog
/// and listen address replaced), waits for it to listen, then stops it.
fn starts_and_stops(args: &[String], env: &[(String, String)], dir: &Path, health: Option<&str>) {
    std::fs::write(
        dir.join("catalog.toml"),
        "[[event_types]]\nname = \"NOTE\"\nproducers = [\"p\"]\n[[producers]]\nname = \"p\"\nemits = [\"NOTE\"]\n",
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_postbox"));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        let v = match k.as_str() {
            "POSTBOX_DATA" => dir.join("data").display().to_string(),
            "POSTBOX_CATALOG" => dir.join("catalog.toml").display().to_string(),
            "POSTBOX_LISTEN" => v
                .rsplit_once(':')
                .map(|(host, _)| format!("{host}:0"))
                .unwrap(),
            _ => v.clone(),
        };
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.starts_with("postbox listening on ") {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "{args:?} {env:?} did not start: {line}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Some(url) = health {
        // The health check's URL, at the address the node bound (0.0.0.0
        // listens on loopback too).
        let bound = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .replace("0.0.0.0", "127.0.0.1");
        let path = url.splitn(4, '/').nth(3).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (status, body) =
            rt.block_on(common::call(&bound, None, "GET", &format!("/{path}"), None));
        assert_eq!(status, 200, "{url} at {bound}: {body}");
    }
    Command::new("kill")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{args:?}: {status}");
    assert!(dir.join("data").join("admin-token").exists());
}

#[test]
fn the_systemd_units_command_and_environment_start_the_node() {
    let unit = packaging("postbox.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/postbox"));
    let args: Vec<String> = words.map(str::to_owned).collect();
    let env: Vec<(String, String)> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    assert!(env.iter().any(|(k, _)| k == "POSTBOX_DATA"), "{env:?}");
    let dir = tempfile::tempdir().unwrap();
    starts_and_stops(&args, &env, dir.path(), None);

    // The unit's syntax and directives, as systemd reads them (ExecStart
    // pointed at this build's binary).
    let copy = dir.path().join("postbox.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/postbox", env!("CARGO_BIN_EXE_postbox")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze (Debian's systemd package) checks the unit");
    let said = String::from_utf8_lossy(&out.stderr);
    // Outside a booted systemd it may add notes about the machine itself;
    // nothing it says may concern the unit.
    assert!(
        !said.lines().any(|l| l.contains("postbox.service")),
        "{said}"
    );
}

#[test]
fn the_container_images_entrypoint_and_environment_start_the_node() {
    let file = packaging("Dockerfile");
    let entry = file
        .lines()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .expect("ENTRYPOINT");
    let words: Vec<String> = serde_json::from_str(entry).unwrap();
    assert_eq!(words[0], "postbox");
    // The ENV block: `ENV K=V \` lines up to the first line without a backslash.
    let start = file.find("\nENV ").expect("ENV") + 5;
    let mut env = Vec::new();
    for line in file[start..].lines() {
        let kv = line.trim().trim_end_matches('\\').trim();
        let (k, v) = kv.split_once('=').unwrap();
        env.push((k.to_owned(), v.to_owned()));
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    assert!(
        env.iter()
            .any(|(k, v)| k == "POSTBOX_LISTEN" && v.starts_with("0.0.0.0:")),
        "{env:?}"
    );
    // The health check asks the port the node listens on, without a token.
    let check = file
        .lines()
        .find_map(|l| l.strip_prefix("HEALTHCHECK "))
        .expect("HEALTHCHECK");
    let cmd: Vec<String> = serde_json::from_str(&check[check.find('[').unwrap()..]).unwrap();
    let url = cmd.last().unwrap();
    let port = env
        .iter()
        .find(|(k, _)| k == "POSTBOX_LISTEN")
        .and_then(|(_, v)| v.rsplit_once(':'))
        .map(|(_, p)| p.to_owned())
        .unwrap();
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{port}/")),
        "{url}"
    );
    let dir = tempfile::tempdir().unwrap();
    starts_and_stops(&words[1..], &env, dir.path(), Some(url));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_files_receiver_verifies_a_delivery_of_its_catalog() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let compose = packaging("compose.yaml");
    // Every file the services mount is in the repository.
    for mounted in [
        "./compose/catalog.toml",
        "./compose/receiver.py",
        "../clients/python/src",
    ] {
        assert!(compose.contains(mounted), "{mounted}");
        assert!(root.join("packaging").join(mounted).exists(), "{mounted}");
    }
    let catalog = packaging("compose/catalog.toml");
    assert!(catalog.contains("http://receiver:8080/orders"));

    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut receiver = Command::new("python3")
        .arg(root.join("packaging/compose/receiver.py"))
        .arg(port.to_string())
        .env("POSTBOX_WEBHOOK_SECRET", secret)
        .env("PYTHONPATH", root.join("clients/python/src"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut said = BufReader::new(receiver.stdout.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert!(line.starts_with("receiver: listening"), "{line}");

    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("catalog.toml");
    std::fs::write(
        &local,
        catalog.replace("receiver:8080", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let server = common::Server::start_with_env(
        &["serve", "--catalog", local.to_str().unwrap()],
        &dir.path().join("data"),
        &[("POSTBOX_WEBHOOK_SECRET", secret.to_owned())],
    );
    let acme = server.tenant_token("acme").await;
    let (status, e) = common::call(
        &server.base,
        Some(&acme),
        "POST",
        "/v1/events",
        Some(serde_json::json!({"type": "ORDER_PLACED", "payload": {"order": "A-1"}})),
    )
    .await;
    assert_eq!(status, 201, "{e}");
    let reading = std::thread::spawn(move || {
        let mut line = String::new();
        said.read_line(&mut line).unwrap();
        line
    });
    let line = tokio::task::spawn_blocking(move || reading.join().unwrap())
        .await
        .unwrap();
    let _ = receiver.kill();
    let _ = receiver.wait();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line}"));
    assert_eq!(v["verified"]["id"], e["event"]["id"], "{line}");
}

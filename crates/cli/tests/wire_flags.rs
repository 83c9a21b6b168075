//! `postbox serve`'s wire endpoints: the admin access key it writes once
//! and reuses, signed requests on the shared listener, `--wire-listen` on
//! its own address, `--no-wire`, `--wire-auth none` refused off loopback,
//! and `postbox token create --aws --admin`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::Server;
use postbox_client::{Credentials, Endpoint, EndpointOptions, RemoteStore};
use postbox_store::ItemStore;

fn signed(url: &str, credentials: Option<Credentials>) -> RemoteStore {
    RemoteStore::new(
        Endpoint::with_options(
            url,
            EndpointOptions {
                credentials,
                ..EndpointOptions::default()
            },
        )
        .unwrap(),
    )
}

/// A catalog without handlers (the built-in application's setup cannot
/// start twice on one data directory).
fn catalog(dir: &std::path::Path) -> String {
    let path = dir.join("catalog.toml");
    std::fs::write(
        &path,
        "[[event_types]]\nname = \"NOTE\"\nproducers = [\"p\"]\n[[producers]]\nname = \"p\"\nemits = [\"NOTE\"]\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn key_file(data: &std::path::Path) -> (String, Credentials) {
    let text = std::fs::read_to_string(data.join("admin-access-key")).unwrap();
    let c = Credentials::parse_file(&text).expect("two key lines");
    (text, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_writes_an_admin_access_key_once_and_requires_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let catalog = catalog(dir.path());
    let server = Server::start(&["serve", "--catalog", &catalog], &data);
    let (text, key) = key_file(&data);
    assert!(key.access_key_id.starts_with("AKIA") && key.access_key_id.len() == 20);
    assert_eq!(key.secret_access_key.len(), 40);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("admin-access-key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let tables = signed(&server.base, Some(key.clone()))
        .list_tables()
        .await
        .unwrap();
    assert!(tables.iter().any(|t| t == "postbox_events"), "{tables:?}");
    assert!(
        !tables
            .iter()
            .any(|t| t == "postbox_tokens" || t == "postbox_access_keys"),
        "{tables:?}"
    );
    let err = signed(&server.base, None).list_tables().await.unwrap_err();
    assert!(
        err.to_string().contains("MissingAuthenticationToken"),
        "{err}"
    );

    // An access key from the API works too, and is shown once.
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["token", "create", "--aws", "--admin", "--endpoint"])
        .arg(&server.base)
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let issued = Credentials::parse_file(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_ne!(issued.access_key_id, key.access_key_id);
    signed(&server.base, Some(issued))
        .list_tables()
        .await
        .unwrap();
    // A tenant-scoped one, printed the same way.
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["token", "create", "--aws", "--tenant", "acme", "--endpoint"])
        .arg(&server.base)
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("AWS_ACCESS_KEY_ID=AKIA") && printed.contains("AWS_SECRET_ACCESS_KEY="),
        "{printed}"
    );

    // A restart reuses the key.
    let (status, _) = server.terminate();
    assert!(status.success());
    let server = Server::start(&["serve", "--catalog", &catalog], &data);
    assert_eq!(key_file(&data).0, text);
    signed(&server.base, Some(key)).list_tables().await.unwrap();
}

/// Starts `postbox serve` with `args` and returns it and its banner's
/// first `lines` lines.
fn start(args: &[&str], data: &std::path::Path, lines: usize) -> (Kill, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["serve", "--catalog"])
        .arg(catalog(data.parent().unwrap()))
        .arg("--data")
        .arg(data)
        .args(args)
        .env("POSTBOX_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    for _ in 0..lines {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        banner.push(line);
    }
    (Kill(child), banner)
}

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn address(line: &str) -> String {
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_listen_serves_the_wire_apart_and_off_serves_it_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_server, banner) = start(
        &["--listen", "127.0.0.1:0", "--wire-listen", "127.0.0.1:0"],
        &data,
        2,
    );
    let (api, wire) = (address(&banner[0]), address(&banner[1]));
    assert!(banner[1].starts_with("wire endpoints on"), "{banner:?}");
    let (_, key) = key_file(&data);
    signed(&wire, Some(key.clone()))
        .list_tables()
        .await
        .unwrap();
    // The API's listener no longer answers the wire protocols...
    let err = signed(&api, Some(key.clone()))
        .list_tables()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("405") || err.to_string().contains("404"),
        "{err}"
    );
    // ...and the wire listener serves no API.
    let (status, _) = common::call(&wire, None, "GET", "/v1/health", None).await;
    assert_eq!(status, 404);
    drop(_server);

    let (_server, banner) = start(&["--listen", "127.0.0.1:0", "--no-wire"], &data, 2);
    assert_eq!(banner[1].trim(), "wire endpoints off", "{banner:?}");
    let err = signed(&address(&banner[0]), Some(key))
        .list_tables()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("405") || err.to_string().contains("404"),
        "{err}"
    );
}

#[test]
fn wire_auth_none_is_refused_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--wire-auth",
            "none",
            "--data",
        ])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--wire-auth none") && err.contains("loopback"),
        "{err}"
    );
    // Nothing was created.
    assert!(!dir.path().join("data").exists());
}

#[test]
fn no_relay_is_refused_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .args(["serve", "--listen", "127.0.0.1:0", "--no-relay", "--data"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-relay applies to --backend aws"), "{err}");
    assert!(!dir.path().join("data").exists());
}

//! `postbox serve` off loopback: refused without TLS unless --insecure-http;
//! with --tls-cert and --tls-key it speaks HTTPS only.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn postbox() -> Command {
    Command::new(env!("CARGO_BIN_EXE_postbox"))
}

/// Starts `postbox` with `command` and returns it with the first line it
/// prints (the address it listens on).
fn started(command: &mut Command) -> (std::process::Child, String) {
    let mut child = command
        .env("POSTBOX_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

#[test]
fn a_listener_off_loopback_needs_tls_or_insecure_http() {
    let dir = tempfile::tempdir().unwrap();
    let out = postbox()
        .args(["serve", "--listen", "0.0.0.0:0", "--data"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--tls-cert"),
        "{err}"
    );
    assert!(!dir.path().join("data").exists(), "nothing is created");

    let (mut child, line) = started(
        postbox()
            .args([
                "serve",
                "--listen",
                "0.0.0.0:0",
                "--insecure-http",
                "--data",
            ])
            .arg(dir.path().join("data")),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        line.starts_with("postbox listening on http://0.0.0.0:"),
        "{line}"
    );
}

#[test]
fn with_a_certificate_it_speaks_https_only() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();

    // A key that is not PEM is refused with the file's name.
    std::fs::write(dir.path().join("bad.pem"), "not a key").unwrap();
    let out = postbox()
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&cert_file)
        .arg("--tls-key")
        .arg(dir.path().join("bad.pem"))
        .arg("--data")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.pem"), "{err}");

    let (mut child, line) = started(
        postbox()
            .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&cert_file)
            .arg("--tls-key")
            .arg(&key_file)
            .arg("--data")
            .arg(dir.path().join("data")),
    );
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("https://"))
        .unwrap_or_else(|| panic!("no https address in {line:?}"))
        .to_owned();
    let port = url.rsplit(':').next().unwrap();
    let curl = |args: &[&str]| {
        Command::new("curl")
            .args(["-s", "-m", "5"])
            .args(args)
            .output()
            .unwrap()
    };
    let ok = curl(&[
        "--cacert",
        cert_file.to_str().unwrap(),
        &format!("https://localhost:{port}/v1/health"),
    ]);
    let plain = curl(&[&format!("http://127.0.0.1:{port}/v1/health")]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout),
        r#"{"status":"ok"}"#,
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains("status"),
        "plain HTTP was answered"
    );
}

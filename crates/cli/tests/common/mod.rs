//! What the end-to-end tests of the binary share: a `postbox serve` child
//! process on a free port, and JSON calls to its HTTP API.

#![allow(dead_code)] // each test binary uses a part

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Polls `ready` every 100 ms until it holds; fails the test after `secs`
/// seconds, naming `what` it waited for.
pub async fn until(what: &str, secs: u64, ready: impl AsyncFnMut() -> bool) {
    until_else(secs, ready, || format!("timed out waiting for {what}")).await;
}

/// [`until`], failing with the message `explain` gives at the timeout.
pub async fn until_else(
    secs: u64,
    mut ready: impl AsyncFnMut() -> bool,
    explain: impl FnOnce() -> String,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !ready().await {
        if std::time::Instant::now() >= deadline {
            panic!("{}", explain());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A running `postbox serve`, killed when dropped.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Its data directory.
    pub data: PathBuf,
    /// The admin token it wrote on first start.
    pub admin: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `postbox <args> --listen 127.0.0.1:0 --data <data>` (args
    /// usually begin with `serve`) and waits for its address.
    pub fn start(args: &[&str], data: &Path) -> Server {
        Server::start_with_env(args, data, &[])
    }

    /// [`Server::start`] with `env` added to the child's environment.
    pub fn start_with_env(args: &[&str], data: &Path, env: &[(&str, String)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_postbox"))
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .env("POSTBOX_LOG", "warn")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Drained in the background so a chatty server never blocks on a full pipe.
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}: {}", stderr.lock().unwrap()))
            .to_owned();
        let admin = std::fs::read_to_string(data.join("admin-token"))
            .unwrap()
            .trim()
            .to_owned();
        Server {
            child: Some(child),
            base,
            data: data.to_owned(),
            admin,
            stderr,
        }
    }

    /// A new tenant token, made with the admin token.
    pub async fn tenant_token(&self, tenant: &str) -> String {
        let (status, t) = call(
            &self.base,
            Some(&self.admin),
            "POST",
            "/v1/tokens",
            Some(json!({"tenant": tenant})),
        )
        .await;
        assert_eq!(status, 201, "{t}");
        t["token"].as_str().unwrap().to_owned()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// What the server has written to stderr so far.
    pub fn logs(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM and waits: the exit status and everything it logged.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let child = self.child.as_mut().unwrap();
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        self.child = None;
        (status, self.stderr.lock().unwrap().clone())
    }
}

impl Server {
    /// Kills the process with SIGKILL (no shutdown at all) and waits for it.
    pub fn kill(mut self) {
        let child = self.child.as_mut().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        self.child = None;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Server {
    /// The admin metrics text once `ready` holds for it, polled for up to
    /// 30 s; panics naming `what` if it never does.
    pub async fn metrics_when(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, m) = call(&self.base, Some(&self.admin), "GET", "/v1/metrics", None).await;
            let m = m.as_str().unwrap_or("").to_owned();
            if ready(&m) {
                return m;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {m}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// Calls `base + path`; the answer as JSON, or as a JSON string when it is not JSON.
pub async fn call(
    base: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let res = client
        .request(
            req.body(Full::new(
                body.map(|b| b.to_string()).unwrap_or_default().into(),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The JSON objects of a JSON-lines file (none when it does not exist).
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The examples' report-job API end to end: `owner` asks for a report on
/// `main` (202), `other` (another tenant) cannot see it (404), and the job
/// reaches SUCCEEDED within 60 s. Returns the accepted job.
#[allow(dead_code)]
pub async fn report_job_succeeds(base: &str, owner: &str, other: &str) -> Value {
    let (status, job) = call(
        base,
        Some(owner),
        "POST",
        "/reports",
        Some(json!({"branch": "main"})),
    )
    .await;
    assert_eq!(status, 202, "{job}");
    let path = job["statusUrl"].as_str().unwrap().to_owned();
    let (status, _) = call(base, Some(other), "GET", &path, None).await;
    assert_eq!(status, 404);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, j) = call(base, Some(owner), "GET", &path, None).await;
        assert_eq!(status, 200, "{j}");
        if j["status"] == "SUCCEEDED" {
            return job;
        }
        assert!(std::time::Instant::now() < deadline, "{j}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Serves `app` on a free loopback port, for as long as the test runs.
#[allow(dead_code)]
pub async fn serve_router(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A webhook receiver at `path` on a free port: its address and the ids of
/// the events it was sent (`?` for a body without one), in arrival order.
#[allow(dead_code)]
pub async fn id_receiver(path: &str) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        path,
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                let id = v["id"]
                    .as_str()
                    .or(v["event"]["id"].as_str())
                    .unwrap_or("?");
                sink.lock().unwrap().push(id.to_owned());
                "ok"
            }
        }),
    );
    (serve_router(app).await, got)
}

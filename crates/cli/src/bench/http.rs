//! `postbox bench --http`: the emit a user's application makes, measured
//! over real TCP connections against a `postbox serve` process.
//!
//! Each request is the README tour's payment: `POST /v1/events` with a
//! PAYMENT_COMPLETED event carrying `--payload-bytes` of filler, a fresh
//! Idempotency-Key and one Put of the same size into `shop`, spread over
//! the tenants' tokens. `--connections` clients each keep one request in
//! flight on a keep-alive connection for `--secs` seconds; every scenario
//! (1 tenant, then 100 tenants, `--runs` times, alternating) runs against
//! the same server, so its tables grow from run to run as a user's do.
//!
//! Without `--endpoint` the bench starts `postbox serve` itself, with the
//! built-in examples (their catalog and the `shop` table) on an empty data
//! directory and `--workers 0`: the relay runs, delivery is left out, so
//! the figures are the emit path's (the delivery rows of `postbox bench`
//! measure the workers). With `--endpoint` it drives a running server that
//! serves the built-in examples, with the admin token from `--token` or
//! `<data>/admin-token`.
//!
//! Per scenario: successful emits/s, p50 and p99 latency of the successful
//! emits, the rate of the last tenth of the run against the first (growth
//! must not slow it; `--json` also gives every tenth's) and, for runs of 20 s
//! or more, of the last 10 s against the first 10 s (the growth target's own
//! windows), non-2xx answers, and for a self-started server its CPU time per
//! emit.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use super::pct;
use crate::http::Failure;

/// What `--http` takes from `postbox bench`'s arguments.
pub struct HttpBench {
    pub endpoint: Option<String>,
    pub token: Option<String>,
    pub data: Option<PathBuf>,
    pub connections: usize,
    pub tenants: Vec<usize>,
    pub runs: usize,
    pub secs: u64,
    pub payload_bytes: u32,
    pub json: bool,
    /// Fail (exit 1) on a missed target.
    pub check: bool,
}

type HttpClient = Client<HttpConnector, Full<bytes::Bytes>>;

/// A `postbox serve` child on a free port, stopped (SIGTERM) when dropped.
struct Served {
    child: Child,
    base: String,
    admin: String,
}

impl Served {
    fn start(data: &Path) -> Result<Served, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::from(format!("cannot find the postbox binary: {e}")))?;
        let log = std::fs::File::create(data.with_extension("log"))
            .map_err(|e| Failure::from(format!("cannot create the server's log: {e}")))?;
        let mut child = Command::new(exe)
            .args([
                "serve",
                "--examples",
                "--listen",
                "127.0.0.1:0",
                "--workers",
                "0",
                "--data",
            ])
            .arg(data)
            .env("POSTBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| Failure::from(format!("cannot start postbox serve: {e}")))?;
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .map_err(|e| Failure::from(format!("postbox serve said nothing: {e}")))?;
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .filter(|_| read > 0)
            .map(str::to_owned);
        let Some(base) = base else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
            return Err(Failure::from(format!(
                "postbox serve did not start: {}",
                log.trim()
            )));
        };
        let admin = std::fs::read_to_string(data.join("admin-token"))
            .map_err(|e| Failure::from(format!("no admin token in {}: {e}", data.display())))?
            .trim()
            .to_owned();
        Ok(Served { child, base, admin })
    }

    /// User plus system CPU time the server has used so far (Linux only).
    fn cpu(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command name, which is in parentheses.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // The kernel's USER_HZ is 100 on every Linux this runs on.
        Some(Duration::from_millis(ticks * 10))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// One request and its answer: status and body.
async fn send(
    client: &HttpClient,
    req: hyper::Request<Full<bytes::Bytes>>,
) -> Result<(u16, bytes::Bytes), String> {
    answer(client.request(req).await.map_err(|e| e.to_string())?).await
}

/// The status and the whole body of `res`.
async fn answer(
    res: hyper::Response<hyper::body::Incoming>,
) -> Result<(u16, bytes::Bytes), String> {
    let status = res.status().as_u16();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// Makes a tenant token with the admin token.
async fn tenant_token(
    client: &HttpClient,
    base: &str,
    admin: &str,
    tenant: &str,
) -> Result<String, Failure> {
    let req = hyper::Request::post(format!("{base}/v1/tokens"))
        .header("authorization", format!("Bearer {admin}"))
        .header("content-type", "application/json")
        .body(Full::new(
            json!({"tenant": tenant, "subject": "bench"})
                .to_string()
                .into(),
        ))
        .map_err(|e| Failure::from(e.to_string()))?;
    let (status, body) = send(client, req)
        .await
        .map_err(|e| Failure::from(format!("cannot reach {base}: {e}")))?;
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match v["token"].as_str() {
        Some(t) if status == 201 => Ok(t.to_owned()),
        _ => Err(Failure::from(format!(
            "cannot create a token for tenant {tenant} ({status}): {}",
            String::from_utf8_lossy(&body)
        ))),
    }
}

/// The README's payment for `tenant`, as a request body; `filler` is the
/// filler as a JSON string (quoted). Written as text: building it as a
/// `serde_json::Value` first cost the load generator a fifth of its CPU.
fn payment(tenant: &str, id: &str, filler: &str) -> String {
    let quoted = |s: &str| serde_json::to_string(s).expect("a string serialises");
    let (order, pk) = (quoted(id), quoted(&format!("{tenant}#payment#{id}")));
    format!(
        r#"{{"type":"PAYMENT_COMPLETED","payload":{{"order_id":{order},"amount":100,"currency":"EUR","buyer":"ada@example.com","tag":"t","note":{filler}}},"writes":[{{"Put":{{"TableName":"shop","Item":{{"pk":{{"S":{pk}}},"sk":{{"S":"PAYMENT"}},"body":{{"S":{filler}}}}}}}}}]}}"#
    )
}

/// The growth target's windows: the first and the last 10 s of a run.
const GROWTH_WINDOW: Duration = Duration::from_secs(10);

/// Answers in the last [`GROWTH_WINDOW`] of a `secs`-long run over those in
/// its first, given when each came in (after the deadline counts as last);
/// `None` when the run is too short for two windows apart.
fn growth(answered: impl Iterator<Item = Duration>, secs: u64) -> Option<f64> {
    let run = Duration::from_secs(secs);
    if run < 2 * GROWTH_WINDOW {
        return None;
    }
    let last_from = run - GROWTH_WINDOW;
    let (mut first, mut last) = (0usize, 0usize);
    for at in answered {
        if at < GROWTH_WINDOW {
            first += 1;
        } else if at >= last_from {
            last += 1;
        }
    }
    Some(if first > 0 {
        last as f64 / first as f64
    } else {
        0.0
    })
}

/// What one scenario measured.
pub struct Measured {
    pub tenants: usize,
    pub run: usize,
    /// Successful emits per second over the whole run.
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Successful emits/s in the last tenth of the run over the first tenth.
    pub last_over_first: f64,
    /// Successful emits/s in each tenth of the run, in order: whether a
    /// slow last tenth is a trend or a dip.
    pub tenths: Vec<f64>,
    /// Successful emits in the last 10 s of the run over those in the first
    /// 10 s, for runs of at least 20 s (two windows that do not overlap).
    pub last_10s_over_first_10s: Option<f64>,
    pub non_2xx: usize,
    pub first_error: Option<String>,
    /// Server CPU per successful emit, if the bench started the server.
    pub cpu_us_per_emit: Option<f64>,
    /// Successful emits.
    pub emits: usize,
    /// What the store file's disk space grew by over the run, per successful
    /// emit, when the bench can see the file (it started the server, or
    /// `--data` names the server's data directory on this machine).
    pub store_bytes_per_emit: Option<f64>,
}

/// A keep-alive HTTP/1.1 connection to `authority` of its own: no pool
/// between the client and its connection.
async fn connect(authority: &str) -> Result<SendRequest<Full<bytes::Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One request on `conn` (opened first when there is none; dropped when
/// it fails) and its answer: status and body.
async fn send_on(
    conn: &mut Option<SendRequest<Full<bytes::Bytes>>>,
    authority: &str,
    req: hyper::Request<Full<bytes::Bytes>>,
) -> Result<(u16, bytes::Bytes), String> {
    let sender = match conn {
        Some(sender) => sender,
        None => conn.insert(connect(authority).await?),
    };
    let answered = async {
        sender.ready().await.map_err(|e| e.to_string())?;
        answer(sender.send_request(req).await.map_err(|e| e.to_string())?).await
    }
    .await;
    if answered.is_err() {
        *conn = None;
    }
    answered
}

/// Drives `connections` clients for `secs` against `base`, each request for
/// a token of `tokens` taken round-robin. Each client has a connection of
/// its own, as a load generator's threads do.
async fn load(
    base: &str,
    tokens: &[(String, String)],
    connections: usize,
    secs: u64,
    filler: &str,
) -> Result<(Vec<(Duration, Duration)>, usize, Option<String>), Failure> {
    let invalid = |e: String| Failure::from(format!("invalid endpoint {base}: {e}"));
    let base_uri: hyper::Uri = base.parse().map_err(|e| invalid(format!("{e}")))?;
    let authority = match (base_uri.scheme_str(), base_uri.authority()) {
        (Some("http"), Some(a)) => a.to_string(),
        _ => return Err(invalid("not http://host:port".to_owned())),
    };
    let path = format!("{}/v1/events", base_uri.path().trim_end_matches('/'));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    // Keys never repeat across runs against one server.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tokens = Arc::new(tokens.to_vec());
    let filler = Arc::new(serde_json::to_string(filler).expect("a string serialises"));
    let mut tasks = Vec::with_capacity(connections);
    for c in 0..connections {
        let (tokens, filler) = (tokens.clone(), filler.clone());
        let (authority, path) = (authority.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            // (completed at, latency) of each 2xx; count and first text of the others.
            let mut done = Vec::new();
            let (mut failed, mut first_error) = (0usize, None);
            let mut conn = None;
            let mut n = 0usize;
            while Instant::now() < deadline {
                let (tenant, token) = &tokens[(c + n * connections) % tokens.len()];
                let id = format!("{run_id}-{c}-{n}");
                n += 1;
                let req = hyper::Request::post(path.as_str())
                    .header("host", authority.as_str())
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .header("idempotency-key", format!("k-{id}"))
                    .body(Full::new(payment(tenant, &id, &filler).into()))
                    .expect("a valid request");
                let sent = Instant::now();
                match send_on(&mut conn, &authority, req).await {
                    Ok((status, _)) if (200..300).contains(&status) => {
                        let now = Instant::now();
                        done.push((now - started, now - sent));
                    }
                    Ok((status, body)) => {
                        failed += 1;
                        first_error.get_or_insert_with(|| {
                            format!("{status}: {}", String::from_utf8_lossy(&body))
                        });
                    }
                    Err(e) => {
                        failed += 1;
                        first_error.get_or_insert(e);
                        // A refused connection would otherwise spin.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (done, failed, first_error)
        }));
    }
    let (mut all, mut failed, mut first_error) = (Vec::new(), 0, None);
    for t in tasks {
        let (done, f, e) = t
            .await
            .map_err(|e| Failure::from(format!("a client task failed: {e}")))?;
        all.extend(done);
        failed += f;
        if first_error.is_none() {
            first_error = e;
        }
    }
    Ok((all, failed, first_error))
}

pub async fn run(b: HttpBench) -> Result<(), Failure> {
    let dir =
        tempfile::tempdir().map_err(|e| Failure::from(format!("no temporary directory: {e}")))?;
    let served_data = dir.path().join("data");
    let served = match &b.endpoint {
        Some(_) => None,
        None => Some(Served::start(&served_data)?),
    };
    let (base, admin) = match (&served, &b.endpoint) {
        (Some(s), _) => (s.base.clone(), s.admin.clone()),
        (None, Some(e)) => {
            let admin = match (&b.token, &b.data) {
                (Some(t), _) => t.clone(),
                (None, data) => {
                    let file = data
                        .clone()
                        .unwrap_or_else(|| PathBuf::from("postbox-data"))
                        .join("admin-token");
                    std::fs::read_to_string(&file)
                        .map_err(|err| {
                            Failure::from(format!(
                                "no admin token: pass --token or --data ({}: {err})",
                                file.display()
                            ))
                        })?
                        .trim()
                        .to_owned()
                }
            };
            (e.trim_end_matches('/').to_owned(), admin)
        }
        (None, None) => unreachable!("a server is started without --endpoint"),
    };
    let store_file = match (&served, &b.data) {
        (Some(_), _) => Some(served_data.join(postbox_node::STORE_FILE)),
        (None, Some(data)) => Some(data.join(postbox_node::STORE_FILE)),
        (None, None) => None,
    };
    // Bytes the file takes on disk, not its length: the store extends the
    // file ahead of what it writes, and the gap is a hole.
    let store_size = || {
        let meta = std::fs::metadata(store_file.as_ref()?).ok()?;
        #[cfg(unix)]
        let size = std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
        #[cfg(not(unix))]
        let size = meta.len();
        Some(size)
    };
    let setup: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let filler = "x".repeat(b.payload_bytes as usize);
    let mut measured = Vec::new();
    for run in 1..=b.runs {
        for &tenants in &b.tenants {
            eprintln!(
                "bench: HTTP emit, {tenants} tenant(s), {} connections, {} s (run {run} of {}) ...",
                b.connections, b.secs, b.runs
            );
            let mut tokens = Vec::with_capacity(tenants);
            for t in 0..tenants {
                let tenant = if tenants == 1 {
                    "acme".to_owned()
                } else {
                    format!("t{t:03}")
                };
                let token = tenant_token(&setup, &base, &admin, &tenant).await?;
                tokens.push((tenant, token));
            }
            let cpu_before = served.as_ref().and_then(Served::cpu);
            let size_before = store_size();
            let (mut done, non_2xx, first_error) =
                load(&base, &tokens, b.connections, b.secs, &filler).await?;
            let cpu = served
                .as_ref()
                .and_then(Served::cpu)
                .zip(cpu_before)
                .map(|(after, before)| after.saturating_sub(before));
            if done.is_empty() {
                return Err(Failure::from(format!(
                    "no emit succeeded ({non_2xx} failed): {}",
                    first_error.unwrap_or_default()
                )));
            }
            let tenth = Duration::from_secs(b.secs).as_secs_f64() / 10.0;
            // Answers counted by the tenth of the run they came in; the last
            // tenth also counts those that came after the deadline, so every
            // answer is in one tenth.
            let mut tenths = [0.0f64; 10];
            for (at, _) in &done {
                tenths[((at.as_secs_f64() / tenth) as usize).min(9)] += 1.0;
            }
            let (first, last) = (tenths[0], tenths[9]);
            let last_10s_over_first_10s = growth(done.iter().map(|(at, _)| *at), b.secs);
            let ok = done.len();
            let store_bytes_per_emit = store_size()
                .zip(size_before)
                .map(|(after, before)| after.saturating_sub(before) as f64 / ok as f64);
            let mut latencies: Vec<Duration> = done.drain(..).map(|(_, l)| l).collect();
            latencies.sort_unstable();
            measured.push(Measured {
                tenants,
                run,
                rate: ok as f64 / b.secs as f64,
                p50_ms: pct(&latencies, 0.5),
                p99_ms: pct(&latencies, 0.99),
                last_over_first: if first > 0.0 { last / first } else { 0.0 },
                tenths: tenths.iter().map(|n| (n / tenth).round()).collect(),
                last_10s_over_first_10s,
                non_2xx,
                first_error,
                cpu_us_per_emit: cpu.map(|c| c.as_secs_f64() * 1e6 / ok as f64),
                emits: ok,
                store_bytes_per_emit,
            });
        }
    }
    print(&b, &measured, served.is_some());
    if b.check {
        use super::Bound;
        let missed: Vec<String> = measured
            .iter()
            .flat_map(|m| {
                // The growth target speaks of the first and last 10 s; a
                // run too short for two such windows uses tenths.
                let (growth_name, growth) = match m.last_10s_over_first_10s {
                    Some(ratio) => ("last_10s_over_first_10s", ratio),
                    None => ("last_over_first", m.last_over_first),
                };
                [
                    Bound::Below(20.0).missed("p99_ms", m.p99_ms),
                    Bound::AtLeast(0.9).missed(growth_name, growth),
                ]
                .into_iter()
                .flatten()
                .map(move |why| format!("{} tenant(s), run {}: {why}", m.tenants, m.run))
            })
            .collect();
        super::fail_on_misses(&missed)?;
    }
    Ok(())
}

fn print(b: &HttpBench, measured: &[Measured], self_started: bool) {
    let kb = if b.payload_bytes == 1000 {
        "1 KB".to_owned()
    } else {
        format!("{} B", b.payload_bytes)
    };
    if b.json {
        let rows: Vec<Value> = measured
            .iter()
            .map(|m| {
                json!({
                    "scenario": "http_emit",
                    "tenants": m.tenants,
                    "run": m.run,
                    "connections": b.connections,
                    "secs": b.secs,
                    "payload_bytes": b.payload_bytes,
                    "emits_per_sec": m.rate.round(),
                    "p50_ms": m.p50_ms,
                    "p99_ms": m.p99_ms,
                    "last_over_first": m.last_over_first,
                    "emits_per_sec_by_tenth": m.tenths,
                    "last_10s_over_first_10s": m.last_10s_over_first_10s,
                    "non_2xx": m.non_2xx,
                    "first_error": m.first_error,
                    "server_cpu_us_per_emit": m.cpu_us_per_emit,
                    "emits": m.emits,
                    "store_bytes_per_emit": m.store_bytes_per_emit.map(f64::round),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return;
    }
    println!(
        "postbox bench --http: keyed emits of a {kb} payload + one {kb} write over {} HTTP connections, {} s per run, {} CPU(s){}",
        b.connections,
        b.secs,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        if self_started {
            "; postbox serve --workers 0 started by the bench"
        } else {
            ""
        }
    );
    println!(
        "{:<8} {:>4} {:>10} {:>9} {:>9} {:>11} {:>14} {:>8} {:>13} {:>13}",
        "tenants",
        "run",
        "emits/s",
        "p50 ms",
        "p99 ms",
        "last/first",
        "last/first 10s",
        "non-2xx",
        "server us/emit",
        "store B/emit"
    );
    for m in measured {
        println!(
            "{:<8} {:>4} {:>10.0} {:>9.2} {:>9.2} {:>11.2} {:>14} {:>8} {:>13} {:>13}",
            m.tenants,
            m.run,
            m.rate,
            m.p50_ms,
            m.p99_ms,
            m.last_over_first,
            m.last_10s_over_first_10s
                .map_or("-".to_owned(), |r| format!("{r:.2}")),
            m.non_2xx,
            m.cpu_us_per_emit
                .map_or("-".to_owned(), |c| format!("{c:.0}")),
            m.store_bytes_per_emit
                .map_or("-".to_owned(), |s| format!("{s:.0}"))
        );
        if let Some(e) = &m.first_error {
            println!(
                "         first failure: {}",
                e.chars().take(300).collect::<String>()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_compares_the_first_and_last_ten_seconds() {
        let at = |ms: &[u64]| {
            ms.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        // A 60-s run: 4 answers in [0, 10 s), 2 in the middle, 3 in
        // [50 s, 60 s) and 1 after the deadline (counted as last).
        let answers = at(&[
            0, 5_000, 9_000, 9_999, 10_000, 49_999, 50_000, 55_000, 59_999, 60_500,
        ]);
        assert_eq!(growth(answers.iter().copied(), 60), Some(1.0));
        let answers = at(&[1_000, 2_000, 55_000]);
        assert_eq!(growth(answers.iter().copied(), 60), Some(0.5));
        // 20 s is the shortest run with two windows apart; the 10-s mark
        // belongs to the last one.
        assert_eq!(growth(at(&[9_999, 10_000]).into_iter(), 20), Some(1.0));
        assert_eq!(growth(at(&[1_000]).into_iter(), 19), None);
        assert_eq!(growth(at(&[55_000]).into_iter(), 60), Some(0.0));
    }

    #[test]
    fn the_payment_is_the_readme_payment() {
        let (tenant, id, filler) = ("t\"07", "17-3-9", "x\\y".repeat(4));
        let quoted = serde_json::to_string(&filler).unwrap();
        let body: Value = serde_json::from_str(&payment(tenant, id, &quoted)).unwrap();
        assert_eq!(
            body,
            json!({
                "type": "PAYMENT_COMPLETED",
                "payload": {"order_id": id, "amount": 100, "currency": "EUR", "buyer": "ada@example.com", "tag": "t", "note": filler},
                "writes": [{"Put": {"TableName": "shop", "Item": {
                    "pk": {"S": format!("{tenant}#payment#{id}")},
                    "sk": {"S": "PAYMENT"},
                    "body": {"S": filler}
                }}}]
            })
        );
    }
}

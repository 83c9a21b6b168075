//! The commands that talk to a running `postbox serve`: emit, tail, verify,
//! status, dead-letters and redrive (tokens: [`crate::tokens`]). Text by
//! default, `--json` for scripts; exit codes in [`crate::http`].

use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use postbox_client::RemoteStore;
use postbox_engine::VerifyOptions;
use serde_json::{Value, json};

use crate::http::{Api, EXIT_ATTENTION, EXIT_REFUSED, EXIT_UNREACHABLE, Failure, Remote};

/// `postbox emit`
#[derive(clap::Args)]
pub struct EmitArgs {
    #[command(flatten)]
    remote: Remote,
    /// The event type (declared in the catalog).
    #[arg(long = "type")]
    event_type: String,
    /// The payload, a JSON object.
    #[arg(long, default_value = "{}")]
    payload: String,
    /// An extra write in the same transaction, a TransactWriteItems entry
    /// in DynamoDB JSON (repeatable).
    #[arg(long = "write")]
    writes: Vec<String>,
    /// Makes the emit safe to retry: the same key and body give the same event.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// The correlation id of the request this belongs to.
    #[arg(long)]
    correlation_id: Option<String>,
}

/// `postbox tail`
#[derive(clap::Args)]
pub struct TailArgs {
    #[command(flatten)]
    remote: Remote,
    /// First seq to show.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Keep following new events.
    #[arg(long, short)]
    follow: bool,
}

/// `postbox verify`
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The running server's address (its DynamoDB endpoint).
    #[arg(
        long,
        default_value = "http://127.0.0.1:8000",
        env = "POSTBOX_ENDPOINT"
    )]
    endpoint: String,
    /// Only this tenant (default: every tenant).
    #[arg(long)]
    tenant: Option<String>,
    /// Recompute from genesis instead of from the verified checkpoint.
    #[arg(long)]
    full: bool,
    /// Without --full, also check this many links chosen at random among
    /// the events before the checkpoint, and that the checkpoint still
    /// matches its event (0: only what is new).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    sample: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// The events table.
    #[arg(long, default_value = postbox_topology::EVENTS_TABLE)]
    table: String,
    /// The server's data directory, to find its admin access key when
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set.
    #[arg(long, default_value = "postbox-data", env = "POSTBOX_DATA")]
    data: std::path::PathBuf,
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
}

/// `postbox status`
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    remote: Remote,
}

/// `postbox dead-letters ...`
#[derive(clap::Args)]
pub struct DeadLettersArgs {
    #[command(subcommand)]
    command: DeadLettersCommand,
}

#[derive(clap::Subcommand)]
enum DeadLettersCommand {
    /// List dead letters.
    List(SelectionArgs),
    /// Reset the selected dead letters' claims and send their events again;
    /// subscriptions that completed never run again.
    Replay(ReplayArgs),
}

#[derive(clap::Args)]
struct SelectionArgs {
    #[command(flatten)]
    remote: Remote,
    /// Only this tenant (admin token; a tenant token always means its own).
    #[arg(long)]
    tenant: Option<String>,
    /// Only this subscription.
    #[arg(long)]
    subscription: Option<String>,
    /// Only these event ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    event_ids: Vec<String>,
    /// Failures at or after this time: UTC (`2026-12-04T10:00:00Z`) or a
    /// span ago (`90m`, `2h`, `7d`).
    #[arg(long, value_parser = parse_time, conflicts_with = "from_ms")]
    since: Option<u64>,
    /// Failures at or before this time, as for --since.
    #[arg(long, value_parser = parse_time, conflicts_with = "to_ms")]
    until: Option<u64>,
    /// Failures at or after this time, milliseconds since the epoch.
    #[arg(long)]
    from_ms: Option<u64>,
    /// Failures at or before this time, milliseconds since the epoch.
    #[arg(long)]
    to_ms: Option<u64>,
}

/// `--since` and `--until`: milliseconds since the epoch of a UTC time
/// (`2026-12-04T10:00:00Z`, fractions of a second dropped) or of a span
/// before now (`90m`, `2h`, `7d`).
fn parse_time(text: &str) -> Result<u64, String> {
    if text.contains('T') {
        let whole = match text.split_once('.') {
            Some((head, tail)) if tail.ends_with('Z') => format!("{head}Z"),
            _ => text.to_owned(),
        };
        let basic: String = whole.chars().filter(|c| *c != '-' && *c != ':').collect();
        return postbox_server::auth::parse_amz_date(&basic)
            .map(|secs| secs * 1000)
            .ok_or_else(|| format!("{text:?} is not a UTC time like 2026-12-04T10:00:00Z"));
    }
    let span = crate::verifier::parse_every(text)
        .ok()
        .flatten()
        .ok_or_else(|| {
            format!("{text:?} is not a UTC time (2026-12-04T10:00:00Z) or a span ago (90m, 2h, 7d)")
        })?;
    Ok(postbox_engine::envelope::now_ms().saturating_sub(span.as_millis() as u64))
}

#[derive(clap::Args)]
struct ReplayArgs {
    #[command(flatten)]
    selection: SelectionArgs,
    /// Only show what would be replayed.
    #[arg(long)]
    dry_run: bool,
}

/// `postbox redrive`
#[derive(clap::Args)]
pub struct RedriveArgs {
    #[command(flatten)]
    remote: Remote,
}

pub(crate) fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn parse_object(what: &str, text: &str) -> Result<Value, Failure> {
    postbox_engine::json::parse(text)
        .map_err(|e| Failure::new(EXIT_REFUSED, format!("{what}: {e}")))
}

pub async fn emit(args: EmitArgs) -> Result<(), Failure> {
    let payload = parse_object("--payload", &args.payload)?;
    let writes = args
        .writes
        .iter()
        .map(|w| parse_object("--write", w))
        .collect::<Result<Vec<_>, _>>()?;
    let mut headers = Vec::new();
    if let Some(k) = args.idempotency_key {
        headers.push(("idempotency-key", k));
    }
    if let Some(c) = args.correlation_id {
        headers.push(("x-correlation-id", c));
    }
    let api = Api::new(&args.remote)?;
    let body = json!({"type": args.event_type, "payload": payload, "writes": writes});
    let out = api
        .call("POST", "/v1/events", &headers, Some(&body))
        .await?;
    if args.remote.json {
        print_json(&out);
    } else {
        let e = &out["event"];
        println!(
            "emitted {} #{} for {} (id {}, hash {})",
            e["type"].as_str().unwrap_or("?"),
            e["seq"],
            e["tenant"].as_str().unwrap_or("?"),
            e["id"].as_str().unwrap_or("?"),
            out["hash"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

fn print_event(entry: &Value, as_json: bool) {
    if as_json {
        println!("{entry}");
        return;
    }
    let e = &entry["event"];
    println!(
        "#{:<6} {}  {:<24} {}  {}",
        e["seq"].to_string(),
        e["occurred_at"].as_str().unwrap_or(""),
        e["type"].as_str().unwrap_or(""),
        e["actor"].as_str().unwrap_or(""),
        e["payload"]
    );
}

pub async fn tail(args: TailArgs) -> Result<(), Failure> {
    let api = Api::new(&args.remote)?;
    let as_json = args.remote.json;
    if args.follow {
        return api
            .follow(&format!("/v1/events/stream?from={}", args.from), |data| {
                let entry: Value = serde_json::from_str(data)
                    .map_err(|e| Failure::new(1, format!("a streamed event is not JSON: {e}")))?;
                print_event(&entry, as_json);
                let _ = std::io::stdout().flush();
                Ok(())
            })
            .await;
    }
    let mut from = args.from;
    loop {
        let page = api
            .call(
                "GET",
                &format!("/v1/events?from={from}&limit=1000"),
                &[],
                None,
            )
            .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        for e in &events {
            print_event(e, as_json);
        }
        if events.len() < 1000 {
            return Ok(());
        }
        from = page["next"].as_u64().unwrap_or(from + 1000);
    }
}

pub async fn verify(args: VerifyArgs) -> Result<(), Failure> {
    match args.backend.backend {
        crate::backend::Backend::Embedded => {
            let endpoint = crate::http::wire_endpoint(&args.endpoint, &args.data)?;
            let store = Arc::new(RemoteStore::new(endpoint.clone()));
            let explain = |e: String| crate::http::explain_wire_error(e, &endpoint);
            verify_on(store, &args, &explain).await
        }
        crate::backend::Backend::Aws => {
            let (store, _) = crate::backend::aws(&args.backend).await?;
            verify_on(Arc::new(store), &args, &|e| {
                format!("verify on DynamoDB: {e}")
            })
            .await
        }
    }
}

/// `postbox verify` on `store`; `explain` words a failure to read it.
async fn verify_on<S: postbox_store::ItemStore>(
    store: Arc<S>,
    args: &VerifyArgs,
    explain: &(dyn Fn(String) -> String + Sync),
) -> Result<(), Failure> {
    let failed = |e: postbox_engine::verify::VerifyError| {
        // A store that did not answer is "unreachable" (3), as for every
        // client command; anything else failed (1).
        let code = match &e {
            postbox_engine::verify::VerifyError::Store(postbox_store::StoreError::Unavailable(
                _,
            )) => EXIT_UNREACHABLE,
            _ => 1,
        };
        Failure::new(code, explain(e.to_string()))
    };
    let options = VerifyOptions {
        full: args.full,
        sample: args.sample as usize,
        ..VerifyOptions::default()
    };
    let started = Instant::now();
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_draw = Instant::now();
    let mut progress = |p: &postbox_engine::Progress| {
        if interactive && last_draw.elapsed().as_millis() >= 100 {
            last_draw = Instant::now();
            let done = p.seq.min(p.head_seq);
            let width = 30usize;
            let filled = if p.head_seq == 0 {
                width
            } else {
                (done as usize * width) / p.head_seq as usize
            };
            eprint!(
                "\r{:<16} [{}{}] {}/{} events",
                p.tenant,
                "#".repeat(filled),
                "-".repeat(width - filled),
                done,
                p.head_seq
            );
        }
    };
    let reports = match &args.tenant {
        Some(t) => {
            let report = postbox_engine::verify::verify_tenant(
                &store,
                &args.table,
                t,
                &options,
                &mut progress,
            )
            .await
            .map_err(failed)?;
            if report.head_seq == 0 && report.checked == 0 {
                let tenants = postbox_engine::verify::tenants(store.as_ref(), &args.table)
                    .await
                    .unwrap_or_default();
                let known: Vec<&str> = tenants.iter().map(String::as_str).collect();
                let meant = postbox_engine::contract::did_you_mean(t, &known)
                    .map(|m| format!(" (did you mean {m:?}?)"))
                    .unwrap_or_default();
                return Err(Failure::new(
                    EXIT_REFUSED,
                    format!(
                        "tenant {t:?} has no events in the log{meant}: nothing to verify (without --tenant, every tenant is verified)"
                    ),
                ));
            }
            vec![report]
        }
        None => postbox_engine::verify::verify_all(&store, &args.table, &options, &mut progress)
            .await
            .map_err(failed)?,
    };
    if interactive {
        eprint!("\r{:70}\r", "");
    }
    let checked: u64 = reports.iter().map(|r| r.checked).sum();
    let secs = started.elapsed().as_secs_f64();
    let broken: Vec<_> = reports.iter().filter(|r| !r.intact()).collect();
    if args.json {
        print_json(&json!({
            "tenants": reports.iter().map(|r| json!({
                "tenant": r.tenant,
                "head_seq": r.head_seq,
                "from_seq": r.from_seq,
                "checked": r.checked,
                "intact": r.intact(),
                "broken_at": r.broken.as_ref().map(|(s, _)| s),
                "problem": r.broken.as_ref().map(|(_, p)| p.to_string()),
            })).collect::<Vec<_>>(),
            "checked": checked,
            "seconds": secs,
        }));
    } else {
        for r in &reports {
            match &r.broken {
                None => println!(
                    "{:<24} intact    head #{:<8} checked {} new event(s) from #{}",
                    r.tenant,
                    r.head_seq,
                    r.checked,
                    r.from_seq + 1
                ),
                Some((seq, problem)) => {
                    println!("{:<24} BROKEN at #{seq}: {problem}", r.tenant)
                }
            }
        }
        println!(
            "{} tenant(s), {checked} event(s) checked in {secs:.2}s; {}",
            reports.len(),
            if broken.is_empty() {
                "every chain is intact".to_owned()
            } else {
                format!("{} chain(s) broken", broken.len())
            }
        );
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            EXIT_ATTENTION,
            format!("{} chain(s) broken", broken.len()),
        ))
    }
}

pub async fn status(args: StatusArgs) -> Result<(), Failure> {
    let api = Api::new(&args.remote)?;
    let r = api.call("GET", "/v1/reconciliation", &[], None).await?;
    if args.remote.json {
        print_json(&r);
    } else {
        println!(
            "{:<24} {:>8} {:>7} {:>12}",
            "tenant", "head", "chain", "dead letters"
        );
        for t in r["tenants"].as_array().into_iter().flatten() {
            println!(
                "{:<24} {:>8} {:>7} {:>12}",
                t["tenant"].as_str().unwrap_or("?"),
                t["head_seq"].to_string(),
                if t["chain_intact"] == true {
                    "intact"
                } else {
                    "BROKEN"
                },
                t["dead_letters"].to_string()
            );
        }
        if r.get("queue_depth").is_some() {
            println!(
                "events queue: {} waiting, {} in flight; its DLQ: {}; poison: {}; delivered to nobody: {}",
                r["queue_depth"],
                r["queue_in_flight"],
                r["dlq_depth"],
                r["poison"],
                r["events_delivered_to_nobody"]
            );
        }
        for p in r["relay_lag"].as_array().into_iter().flatten() {
            println!(
                "relay pipe {}: {} record(s) behind",
                p["pipe"].as_str().unwrap_or("?"),
                p["records_behind"]
            );
        }
        let verdict = r["verdict"].as_str().unwrap_or("?");
        println!("verdict: {verdict}");
        for reason in r["reasons"].as_array().into_iter().flatten() {
            println!("  - {}", reason.as_str().unwrap_or(""));
        }
    }
    if r["verdict"] == "ok" {
        Ok(())
    } else {
        Err(Failure::new(EXIT_ATTENTION, "the report needs attention"))
    }
}

fn selection_json(s: &SelectionArgs) -> Value {
    let mut v = json!({});
    if let Some(t) = &s.tenant {
        v["tenant"] = json!(t);
    }
    if let Some(sub) = &s.subscription {
        v["subscription"] = json!(sub);
    }
    if !s.event_ids.is_empty() {
        v["event_ids"] = json!(s.event_ids);
    }
    if let Some(f) = s.since.or(s.from_ms) {
        v["from_ms"] = json!(f);
    }
    if let Some(t) = s.until.or(s.to_ms) {
        v["to_ms"] = json!(t);
    }
    v
}

fn print_dead_letter(d: &Value) {
    println!(
        "{:<16} #{:<6} {:<24} {:<20} attempts {}  last {}  {}",
        d["tenant"].as_str().unwrap_or("?"),
        d["seq"].to_string(),
        d["event_type"].as_str().unwrap_or("?"),
        d["subscription"].as_str().unwrap_or("?"),
        d["attempts"],
        d["last_failure_at"].as_str().unwrap_or("?"),
        d["error"].as_str().unwrap_or("")
    );
}

pub async fn dead_letters(args: DeadLettersArgs) -> Result<(), Failure> {
    match args.command {
        DeadLettersCommand::List(s) => {
            let api = Api::new(&s.remote)?;
            let q = selection_json(&s);
            let query: Vec<String> = q
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| match v {
                    Value::Array(ids) => format!(
                        "{k}={}",
                        ids.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            let out = api
                .call(
                    "GET",
                    &format!("/v1/dead-letters?{}", query.join("&")),
                    &[],
                    None,
                )
                .await?;
            if s.remote.json {
                print_json(&out);
            } else {
                let list = out["dead_letters"].as_array().cloned().unwrap_or_default();
                for d in &list {
                    print_dead_letter(d);
                }
                println!("{} dead letter(s)", list.len());
            }
            Ok(())
        }
        DeadLettersCommand::Replay(r) => {
            let api = Api::new(&r.selection.remote)?;
            let mut body = selection_json(&r.selection);
            body["dry_run"] = json!(r.dry_run);
            if !r.dry_run && !r.selection.remote.json {
                eprint!("replaying ...");
            }
            let out = api
                .call("POST", "/v1/dead-letters/replay", &[], Some(&body))
                .await?;
            if r.selection.remote.json {
                print_json(&out);
                return Ok(());
            }
            if !r.dry_run {
                eprintln!("\r{:20}\r", "");
            }
            let selected = out["selected"].as_array().cloned().unwrap_or_default();
            for d in &selected {
                print_dead_letter(d);
            }
            if r.dry_run {
                println!(
                    "dry run: {} dead letter(s) would be replayed",
                    selected.len()
                );
            } else {
                println!(
                    "replayed {} dead letter(s): {} claim(s) reset, {} event(s) sent again, {} already replayed",
                    selected.len(),
                    out["reset"],
                    out["enqueued"],
                    out["skipped"]
                );
            }
            Ok(())
        }
    }
}

pub async fn redrive(args: RedriveArgs) -> Result<(), Failure> {
    let api = Api::new(&args.remote)?;
    let out = api.call("POST", "/v1/queues/redrive", &[], None).await?;
    if args.remote.json {
        print_json(&out);
    } else {
        println!(
            "moved {} message(s) back from {} ({} claim(s) reset, {} poison)",
            out["moved"],
            out["dead_letter_queue"].as_str().unwrap_or("?"),
            out["reset"],
            out["poison"]
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times_are_utc_instants_or_spans_ago() {
        assert_eq!(parse_time("2026-12-04T10:00:00Z"), Ok(1_796_378_400_000));
        assert_eq!(
            parse_time("2026-12-04T10:00:00.250Z"),
            Ok(1_796_378_400_000)
        );
        let now = postbox_engine::envelope::now_ms();
        let ago = parse_time("2h").unwrap();
        assert!(
            (now - 7_200_000..=now - 7_190_000).contains(&ago),
            "{ago} vs {now}"
        );
        for bad in [
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-12-04T10:00:00",
            "0m",
        ] {
            assert!(parse_time(bad).is_err(), "{bad} was taken");
        }
    }
}

//! `postbox`: the command line of Postbox.
//!
//! With no subcommand it serves the embedded default, so `cargo run` on a
//! fresh clone starts a working store with no configuration.

mod backend;
mod bench;
mod bench_aws;
mod catalog;
mod demo;
mod http;
mod init;

mod node_aws;
mod ops;
mod pipe;
mod synth;
mod telemetry;
mod tokens;
mod traces;
mod verifier;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use postbox_queue::ShiftedClock;

/// mimalloc, with purging off (see `postbox_alloc`): glibc's malloc cost the
/// writer and the relay about a quarter of their time.
#[global_allocator]
static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;

#[derive(Parser)]
#[command(
    name = "postbox",
    version,
    about = "Postbox: an event engine with a DynamoDB-compatible embedded store",
    // `postbox [--data ..]` is `postbox serve [--data ..]`: the serve flags
    // and their defaults and environment variables are declared once.
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the embedded store and queues over the DynamoDB, DynamoDB
    /// Streams and SQS wire protocols (the default when no subcommand is given).
    Serve(ServeArgs),
    /// Run both example applications end to end and print what happened.
    Demo(demo::DemoArgs),
    /// Work with the event catalog (`catalog check`).
    Catalog(catalog::CatalogArgs),
    /// Test a pipe over a sample record (`pipe test`).
    Pipe(pipe::PipeArgs),
    /// Run the pipes of a config file: change stream -> filter -> template -> queue or bus.
    Relay(pipe::RelayArgs),
    /// Run durable workers for webhook subscriptions against a running server
    /// (or DynamoDB and SQS with --backend aws).
    Worker(worker::WorkerArgs),
    /// Create the tables and queues a node needs on AWS (--backend aws), if
    /// missing; refuse existing ones that differ.
    Init(init::InitArgs),
    /// Emit an event (with extra writes) through a running server.
    Emit(ops::EmitArgs),
    /// Print a tenant's log; with --follow, keep printing new events.
    Tail(ops::TailArgs),
    /// Recompute the hash chains and report the first broken seq.
    Verify(ops::VerifyArgs),
    /// The reconciliation report; exit code 4 when it needs attention.
    Status(ops::StatusArgs),
    /// List and replay dead letters (`dead-letters list|replay`).
    DeadLetters(ops::DeadLettersArgs),
    /// Move the events queue's dead-letter queue back, clearing the claims it needs.
    Redrive(ops::RedriveArgs),
    /// Create API tokens (`token create --tenant T`).
    Token(tokens::TokenArgs),
    /// Measure the whole pipeline on this machine and print one table.
    Bench(bench::BenchArgs),
    /// Write the CloudFormation template of the stack on AWS (tables,
    /// queues, pipes, buses, roles, alarms) from the pipes config.
    Synth(synth::SynthArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Directory holding the store's file (created if missing).
    #[arg(long, default_value = "postbox-data", env = "POSTBOX_DATA")]
    data: PathBuf,
    /// Address to listen on; use port 0 to pick a free one.
    #[arg(long, default_value = "127.0.0.1:8000", env = "POSTBOX_LISTEN")]
    listen: SocketAddr,
    /// Run the pipes of this relay config file inside the server (change
    /// stream -> filter -> template -> queue or bus).
    #[arg(long, env = "POSTBOX_PIPES")]
    pipes: Option<PathBuf>,
    /// The event catalog (TOML). Without it (and without --examples) the
    /// node starts empty: no event types, no subscriptions.
    #[arg(long, env = "POSTBOX_CATALOG")]
    catalog: Option<PathBuf>,
    /// Serve the built-in example applications (the payment fan-out and the
    /// report-job API of `examples/`, with their tables, queues and the
    /// `/reports` route) instead of a catalog of your own. With --backend
    /// aws their tables and queues come from `postbox init --backend aws
    /// --examples`.
    #[arg(long, env = "POSTBOX_EXAMPLES", conflicts_with = "catalog")]
    examples: bool,
    /// Durable worker loops in this process, each with up to 8 batches in
    /// flight (0: leave the work to `postbox worker` processes).
    #[arg(long, default_value_t = postbox_node::DEFAULT_WORKERS, env = "POSTBOX_WORKERS")]
    workers: usize,
    /// MiB of the store file's pages kept in memory (the rest is read from
    /// the OS page cache). Half of it bounds the pages left for a
    /// checkpoint to write while commits wait: larger serves a hot read set
    /// a little faster and makes write latency spikier.
    #[arg(long, default_value_t = (postbox_store::embedded::DEFAULT_CACHE_BYTES >> 20) as u32, env = "POSTBOX_CACHE_MB", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    cache_mb: u32,
    /// Let `POST /_postbox/test/clock` move time forward (conformance tests only).
    #[arg(long)]
    test_clock: bool,
    /// How the DynamoDB, DynamoDB Streams and SQS endpoints authenticate:
    /// `sigv4` (AWS Signature Version 4 with an access key Postbox issued,
    /// such as `<data>/admin-access-key`) or `none` (any request, signed or
    /// not, as DynamoDB Local does; only on a loopback address).
    #[arg(long, value_enum, default_value_t = WireAuthMode::Sigv4, env = "POSTBOX_WIRE_AUTH")]
    wire_auth: WireAuthMode,
    /// Serve the wire endpoints on this address instead of --listen (which
    /// then serves only the HTTP API); `off` serves them nowhere.
    #[arg(long, env = "POSTBOX_WIRE_LISTEN", value_parser = parse_wire_listen)]
    wire_listen: Option<WireListen>,
    /// Serve no wire endpoints (same as `--wire-listen off`).
    #[arg(long, conflicts_with = "wire_listen")]
    no_wire: bool,
    /// PEM certificate chain to serve HTTPS with (with --tls-key); both
    /// listeners then speak TLS only.
    #[arg(long, env = "POSTBOX_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "POSTBOX_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback address (tokens and signed
    /// requests then cross the network in clear); without it, a listener
    /// off loopback needs --tls-cert and --tls-key.
    #[arg(long)]
    insecure_http: bool,
    /// Start on a store whose commit log is damaged (a region cut short,
    /// a record damaged before the last, a region missing after a crash)
    /// with what survives, and log what was lost; without it such a store
    /// is refused with a message naming the file and position.
    #[arg(long)]
    recover_truncated: bool,
    /// How often every chain is verified from genesis in the background
    /// (`30s`, `10m`, `6h`, `1d`, or `off`); a broken chain is logged,
    /// counted in the metrics and named by `postbox status`.
    #[arg(long, default_value = "1d", env = "POSTBOX_VERIFY_EVERY", value_parser = verifier::parse_flag)]
    verify_every: verifier::Every,
    /// How long a worker's claim on a delivery holds (renewed every third
    /// while its handler runs): after a crash, another worker takes the
    /// delivery over this long after the last renewal (`2s`, `30s`, `5m`).
    #[arg(long, default_value = "30s", env = "POSTBOX_LEASE", value_parser = parse_lease)]
    lease: Duration,
    /// Connections each listener serves at once; one beyond it is closed
    /// at once. Keep it under the process's open-files limit (`ulimit -n`).
    #[arg(long, default_value_t = 512, env = "POSTBOX_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Seconds a client has to send a request's header, and that an idle
    /// keep-alive connection is kept.
    #[arg(long, default_value_t = 10, env = "POSTBOX_HEADER_TIMEOUT", value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout: u64,
    /// `--backend aws` only: run no relay in this process, because a
    /// deployed EventBridge Pipe (`postbox synth`) or a `postbox relay`
    /// process moves the events table's stream into the queue.
    #[arg(long, env = "POSTBOX_NO_RELAY", conflicts_with = "pipes")]
    no_relay: bool,
    /// Also serve `GET /metrics` (the page of `/v1/metrics`) without a
    /// token on this address, for a Prometheus agent on the same machine;
    /// loopback addresses only.
    #[arg(long, env = "POSTBOX_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// `--backend aws`: serve on DynamoDB, DynamoDB Streams and SQS (the
    /// stack `postbox init --backend aws` created) instead of a local file.
    #[command(flatten)]
    backend: backend::BackendArgs,
}

/// `--wire-auth`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum WireAuthMode {
    Sigv4,
    None,
}

/// `--wire-listen`.
#[derive(Clone, Copy)]
enum WireListen {
    Off,
    At(SocketAddr),
}

/// `--lease`: a duration of 1 second to 12 hours (the longest a queue
/// message can stay hidden).
fn parse_lease(text: &str) -> Result<Duration, String> {
    let d = verifier::parse_every(text)?.ok_or_else(|| "a lease cannot be `off`".to_owned())?;
    if !(Duration::from_secs(1)..=Duration::from_secs(12 * 3600)).contains(&d) {
        return Err(format!("{text}: a lease is 1s to 12h"));
    }
    Ok(d)
}

fn parse_wire_listen(text: &str) -> Result<WireListen, String> {
    if text == "off" {
        return Ok(WireListen::Off);
    }
    text.parse()
        .map(WireListen::At)
        .map_err(|e| format!("{e}: expected an address such as 127.0.0.1:8001, or `off`"))
}

/// Logs to stderr, filtered by POSTBOX_LOG (default `default_filter`), as
/// text (coloured only on a terminal) or, with POSTBOX_LOG_FORMAT=json, as
/// one JSON object per line (timestamp, level, target, fields, spans).
/// With an OTLP endpoint configured, spans are also exported ([`traces`]).
fn init_logs(default_filter: &str) -> Result<(), String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("POSTBOX_LOG")
        .unwrap_or_else(|_| default_filter.into());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match std::env::var("POSTBOX_LOG_FORMAT").as_deref() {
        Err(_) | Ok("text") => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        Ok("json") => fmt
            .json()
            .with_current_span(true)
            .with_filter(filter)
            .boxed(),
        Ok(other) => {
            return Err(format!(
                "POSTBOX_LOG_FORMAT={other:?}: expected `text` or `json`"
            ));
        }
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces::layer()?)
        .try_init()
        .map_err(|e| format!("cannot set up logging: {e}"))
}

fn main() -> ExitCode {
    postbox_alloc::tune();
    let cli = Cli::parse();
    // A server logs what it does; the other commands print their results
    // and log only warnings unless POSTBOX_LOG asks for more.
    let default_filter = match cli.command {
        None | Some(Command::Serve(_)) | Some(Command::Relay(_)) | Some(Command::Worker(_)) => {
            "info"
        }
        // Per-event warnings (events delivered to nobody) would cost the bench throughput.
        Some(Command::Bench(_)) => "error",
        _ => "warn",
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the trace exporter's batch task runs on it.
    if let Err(e) = runtime.block_on(async { init_logs(default_filter) }) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let code = match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => remote(runtime.block_on(serve(args))),
        Command::Catalog(args) => catalog::run(args),
        Command::Pipe(args) => pipe::run(args),
        Command::Relay(args) => pipe::relay(args, &runtime),
        Command::Demo(a) => remote(runtime.block_on(demo::run(a))),
        Command::Worker(a) => remote(runtime.block_on(worker::run(a))),
        Command::Init(a) => remote(runtime.block_on(init::run(a))),
        Command::Emit(a) => remote(runtime.block_on(ops::emit(a))),
        Command::Tail(a) => remote(runtime.block_on(ops::tail(a))),
        Command::Verify(a) => remote(runtime.block_on(ops::verify(a))),
        Command::Status(a) => remote(runtime.block_on(ops::status(a))),
        Command::DeadLetters(a) => remote(runtime.block_on(ops::dead_letters(a))),
        Command::Redrive(a) => remote(runtime.block_on(ops::redrive(a))),
        Command::Token(a) => remote(runtime.block_on(tokens::token(a))),
        Command::Bench(a) => remote(runtime.block_on(bench::run(a))),
        Command::Synth(a) => synth::run(a),
    };
    traces::shutdown();
    code
}

async fn serve(args: ServeArgs) -> Result<(), http::Failure> {
    install_shutdown();
    telemetry::install();
    // Read the configuration first: a bad file is reported before anything opens.
    let pipes = args.pipes.as_ref().map(pipe::load).transpose()?;
    let (catalog, handlers) = match (&args.catalog, args.examples) {
        (Some(path), _) => (
            postbox_engine::Catalog::load(path).map_err(|e| e.to_string())?,
            postbox_examples::code_handlers(),
        ),
        (None, true) => postbox_examples::embedded_application(&args.data),
        (None, false) => (
            postbox_engine::Catalog::default(),
            postbox_node::Handlers::none(),
        ),
    };
    let empty = args.catalog.is_none() && !args.examples;
    let test_clock = args.test_clock.then(|| Arc::new(ShiftedClock::new()));
    // Where the wire endpoints are served: with the API, apart, or nowhere.
    let wire = match (args.no_wire, args.wire_listen) {
        (true, _) | (false, Some(WireListen::Off)) => None,
        (false, Some(WireListen::At(addr))) => Some(Some(addr)),
        (false, None) => Some(None),
    };
    if args.wire_auth == WireAuthMode::None
        && let Some(at) = wire
    {
        let addr = at.unwrap_or(args.listen);
        if !addr.ip().is_loopback() {
            return Err(format!(
                "--wire-auth none accepts unsigned requests from anyone who can reach {addr}, so it is allowed only on a loopback address: use --wire-listen 127.0.0.1:PORT (or --listen 127.0.0.1:PORT), or keep --wire-auth sigv4"
            ).into());
        }
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(postbox_server::load_tls(cert, key)?),
        _ => None,
    };
    if tls.is_none() && !args.insecure_http {
        let wire_apart = match wire {
            Some(Some(addr)) => Some(addr),
            _ => None,
        };
        for addr in std::iter::once(args.listen).chain(wire_apart) {
            if !addr.ip().is_loopback() {
                return Err(format!(
                    "{addr} is not a loopback address: serve it with --tls-cert and --tls-key, or pass --insecure-http to send tokens and data in clear"
                ).into());
            }
        }
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    // A signed request can be captured and replayed only where others read
    // the traffic: plain HTTP off loopback. There repeats are refused;
    // elsewhere they are accepted, as AWS accepts an SDK's retry.
    let wire_auth = match args.wire_auth {
        WireAuthMode::Sigv4 => {
            let wire_at = match wire {
                Some(Some(addr)) => addr,
                _ => args.listen,
            };
            if tls.is_none() && !wire_at.ip().is_loopback() {
                postbox_server::WireAuth::sigv4()
            } else {
                postbox_server::WireAuth::sigv4_accepting_repeats()
            }
        }
        WireAuthMode::None => postbox_server::WireAuth::None,
    };
    let limits = postbox_server::Limits {
        max_connections: args.max_connections as usize,
        header_timeout: std::time::Duration::from_secs(args.header_timeout),
    };
    if let Some(at) = args.metrics_listen
        && !at.ip().is_loopback()
    {
        return Err(http::Failure::new(
            http::EXIT_REFUSED,
            format!(
                "--metrics-listen {at}: the metrics listener asks for no token, so it is allowed only on a loopback address (127.0.0.1:PORT); off loopback, scrape /v1/metrics with an admin token"
            ),
        ));
    }
    if args.no_relay && args.backend.backend != backend::Backend::Aws {
        return Err(http::Failure::new(
            http::EXIT_REFUSED,
            "--no-relay applies to --backend aws: the embedded node's relay reads its own store file, which no other process can open",
        ));
    }
    if args.backend.backend == backend::Backend::Aws {
        return serve_aws(args, catalog, pipes, tls, scheme, limits).await;
    }
    let node = postbox_node::Node::start(postbox_node::NodeOptions {
        data: args.data.clone(),
        catalog,
        handlers,
        pipes,
        workers: args.workers,
        cache_bytes: (args.cache_mb as usize) << 20,
        test_clock,
        wire_auth,
        verify_every: args.verify_every.0,
        lease: args.lease,
        recover_truncated: args.recover_truncated,
        on_completed: None,
        metrics: Some(Arc::new(telemetry::render)),
    })
    .await?;
    let (listener, addr) = postbox_server::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let (main_router, wire_apart) = match wire {
        Some(None) => (
            node.api_router.clone().merge(node.wire_router.clone()),
            None,
        ),
        Some(Some(wire_addr)) => {
            let (wire_listener, bound) = postbox_server::bind(wire_addr)
                .await
                .map_err(|e| format!("cannot listen on {wire_addr} (--wire-listen): {e}"))?;
            (node.api_router.clone(), Some((wire_listener, bound)))
        }
        None => (node.api_router.clone(), None),
    };
    // One line on stdout that scripts can wait for and parse, written at
    // once; a reader that went away after reading it must not kill the server.
    let mut banner = format!(
        "postbox listening on {scheme}://{addr} (data: {})\n",
        node.file.display()
    );
    match (&wire, &wire_apart) {
        (Some(_), Some((_, bound))) => {
            banner.push_str(&format!("wire endpoints on {scheme}://{bound}\n"))
        }
        (None, _) => banner.push_str("wire endpoints off\n"),
        _ => {}
    }
    let metrics_task = admin_and_metrics(
        &mut banner,
        node.created_admin_token.then_some(&node.admin_token_file),
        args.metrics_listen,
        &node.metrics_router,
        limits,
    )
    .await?;
    if empty {
        banner.push_str(
            "no catalog: an empty node (no event types, no subscriptions); start it with --catalog FILE, or --examples for the built-in example applications\n",
        );
    }
    if node.created_admin_access_key {
        banner.push_str(&format!(
            "admin access key written to {} (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the wire endpoints)\n",
            node.admin_access_key_file.display()
        ));
    }
    print_banner(&banner);
    if wire.is_some() && args.wire_auth == WireAuthMode::None {
        tracing::warn!(
            "--wire-auth none: the DynamoDB, DynamoDB Streams and SQS endpoints accept unsigned requests; anyone who can reach them can read and change every table, the tokens included"
        );
    }
    let wire_task = wire_apart.map(|(wire_listener, bound)| {
        tracing::info!(addr = %bound, "serving the DynamoDB, DynamoDB Streams and SQS wire protocols");
        tokio::spawn(postbox_server::serve_with(
            node.wire_router.clone(),
            wire_listener,
            shutdown_signal(),
            limits,
            tls.clone(),
        ))
    });
    match (&wire, &wire_task) {
        (Some(None), _) => {
            tracing::info!(%addr, data = %node.file.display(), "serving the HTTP API and the DynamoDB, DynamoDB Streams and SQS wire protocols")
        }
        _ => tracing::info!(%addr, data = %node.file.display(), "serving the HTTP API"),
    }
    postbox_server::serve_with(main_router, listener, shutdown_signal(), limits, tls)
        .await
        .map_err(|e| format!("server failed: {e}"))?;
    if let Some(task) = wire_task {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the wire listener failed: {e}"),
            Err(e) => tracing::warn!("the wire listener's task failed: {e}"),
        }
    }
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    let closed = node.store.closed();
    node.shutdown().await;
    // The store closes when its last handle goes, with a checkpoint that
    // saves the arrival indexes for the next start.
    if tokio::time::timeout(STORE_CLOSE_WAIT, closed)
        .await
        .is_err()
    {
        tracing::warn!(
            "the store was still in use {}s after the shutdown; it closes as the process exits",
            STORE_CLOSE_WAIT.as_secs()
        );
    }
    tracing::info!("shut down cleanly");
    Ok(())
}

/// How long `serve` waits for the store's closing checkpoint once every
/// part has stopped (the packaged unit allows a stop 60 s).
const STORE_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(45);

/// What both backends' serve add to the banner before it is printed:
/// the admin token this start wrote (`created`), and the
/// `--metrics-listen` listener, started here; its task, if asked for.
async fn admin_and_metrics(
    banner: &mut String,
    created: Option<&PathBuf>,
    metrics_listen: Option<SocketAddr>,
    metrics_router: &axum::Router,
    limits: postbox_server::Limits,
) -> Result<Option<tokio::task::JoinHandle<()>>, http::Failure> {
    if let Some(file) = created {
        banner.push_str(&format!(
            "admin token written to {} (use it as 'Authorization: Bearer <token>')\n",
            file.display()
        ));
    }
    serve_metrics(metrics_listen, metrics_router, limits, banner).await
}

/// Prints the server's banner at once (scripts wait for its address).
fn print_banner(banner: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
}

/// `--metrics-listen`: `GET /metrics` without a token, until the shutdown
/// signal, its address added to `banner`; the task, if asked for.
async fn serve_metrics(
    at: Option<SocketAddr>,
    router: &axum::Router,
    limits: postbox_server::Limits,
    banner: &mut String,
) -> Result<Option<tokio::task::JoinHandle<()>>, http::Failure> {
    let Some(at) = at else {
        return Ok(None);
    };
    let (listener, bound) = postbox_server::bind(at)
        .await
        .map_err(|e| format!("cannot listen on {at} (--metrics-listen): {e}"))?;
    tracing::info!(addr = %bound, "serving GET /metrics without a token");
    banner.push_str(&format!("metrics on http://{bound}/metrics\n"));
    let router = router.clone();
    let task = tokio::spawn(async move {
        if let Err(e) =
            postbox_server::serve_with(router, listener, shutdown_signal(), limits, None).await
        {
            tracing::warn!("the metrics listener failed: {e}");
        }
    });
    Ok(Some(task))
}

/// `serve --backend aws` ([`node_aws`]): the API on --listen, no wire
/// endpoints.
async fn serve_aws(
    args: ServeArgs,
    catalog: postbox_engine::Catalog,
    pipes: Option<postbox_relay::RelayConfig>,
    tls: Option<postbox_server::Tls>,
    scheme: &str,
    limits: postbox_server::Limits,
) -> Result<(), http::Failure> {
    let (catalog, handlers) = match (&args.catalog, args.examples) {
        (Some(_), _) => (catalog, postbox_examples::code_handlers()),
        (None, true) => postbox_examples::application(&args.data),
        (None, false) => {
            return Err(http::Failure::new(
                http::EXIT_REFUSED,
                "serve --backend aws needs --catalog FILE, or --examples for the built-in example applications",
            ));
        }
    };
    let node = node_aws::AwsNode::start(node_aws::AwsNodeOptions {
        prefix: args.backend.aws_prefix.clone(),
        data: args.data.clone(),
        catalog,
        handlers,
        examples: args.catalog.is_none() && args.examples,
        pipes,
        workers: args.workers,
        relay: !args.no_relay,
        lease: args.lease,
    })
    .await?;
    let (listener, addr) = postbox_server::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let mut banner = format!(
        "postbox listening on {scheme}://{addr} ({})\n",
        node_aws::describe(&args.data, &args.backend.aws_prefix)
    );
    let metrics_task = admin_and_metrics(
        &mut banner,
        node.created_admin_token.then_some(&node.admin_token_file),
        args.metrics_listen,
        &node.metrics_router,
        limits,
    )
    .await?;
    print_banner(&banner);
    tracing::info!(%addr, prefix = %args.backend.aws_prefix, "serving the HTTP API on DynamoDB and SQS");
    postbox_server::serve_with(
        node.router.clone(),
        listener,
        shutdown_signal(),
        limits,
        tls,
    )
    .await
    .map_err(|e| format!("server failed: {e}"))?;
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    node.shutdown().await;
    tracing::info!("shut down cleanly");
    Ok(())
}

/// The exit of a command that talks to a server.
fn remote(result: Result<(), http::Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// The process's stop request: set once SIGINT or SIGTERM arrives.
static SHUTDOWN: std::sync::OnceLock<tokio::sync::watch::Receiver<bool>> =
    std::sync::OnceLock::new();

/// Takes SIGINT and SIGTERM over now (inside the runtime), so a signal
/// that arrives right after a server printed its address stops it cleanly
/// instead of killing it before its own listener was polled. Idempotent.
pub(crate) fn install_shutdown() -> tokio::sync::watch::Receiver<bool> {
    SHUTDOWN
        .get_or_init(|| {
            let (tx, rx) = tokio::sync::watch::channel(false);
            #[cfg(unix)]
            {
                use tokio::signal::unix::{SignalKind, signal};
                let term = signal(SignalKind::terminate()).ok();
                let int = signal(SignalKind::interrupt()).ok();
                tokio::spawn(async move {
                    let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                        match s {
                            Some(mut s) => {
                                s.recv().await;
                            }
                            None => std::future::pending::<()>().await,
                        }
                    };
                    tokio::select! {
                        () = wait(term) => {},
                        () = wait(int) => {},
                    }
                    let _ = tx.send(true);
                });
            }
            #[cfg(not(unix))]
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                let _ = tx.send(true);
            });
            rx
        })
        .clone()
}

/// Resolves on SIGINT or SIGTERM (once one arrived, at once).
pub(crate) async fn shutdown_signal() {
    let mut rx = install_shutdown();
    let _ = rx.wait_for(|stop| *stop).await;
}

//! `postbox relay` runs the pipes of a config file on the embedded store,
//! or with `--backend aws` on DynamoDB Streams and SQS;
//! `postbox pipe test` runs one pipe's filters and templates over a sample
//! record and prints the message it would send, or the error that would
//! send the record to the dead-letter queue.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use postbox_queue::{Queues, QueuesOptions};
use postbox_relay::RelayConfig;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};

use crate::backend::{Backend, BackendArgs};
use crate::http::{EXIT_REFUSED, Failure};

/// `postbox pipe ...`
#[derive(clap::Args)]
pub struct PipeArgs {
    #[command(subcommand)]
    command: PipeCommand,
}

#[derive(clap::Subcommand)]
enum PipeCommand {
    /// Run a pipe's filters and input template over one stream record (a
    /// JSON file, as DynamoDB Streams gives it) and print the result.
    Test(TestArgs),
}

#[derive(clap::Args)]
struct TestArgs {
    /// The config file declaring the pipes.
    #[arg(long, default_value = "postbox.toml", env = "POSTBOX_CONFIG")]
    config: PathBuf,
    /// The pipe to run.
    #[arg(long)]
    pipe: String,
    /// The record file.
    #[arg(long)]
    record: PathBuf,
}

/// `postbox relay`
#[derive(clap::Args)]
pub struct RelayArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Directory holding the store's file (embedded backend).
    #[arg(long, default_value = "postbox-data", env = "POSTBOX_DATA")]
    data: PathBuf,
    /// The config file declaring the pipes.
    #[arg(long, default_value = "postbox.toml", env = "POSTBOX_CONFIG")]
    config: PathBuf,
    /// How often to log each pipe's lag and counters, in seconds.
    #[arg(long, default_value_t = 30)]
    stats_every: u64,
}

/// Reads and checks a relay config file.
pub fn load(path: &PathBuf) -> Result<RelayConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config {}: {e}", path.display()))?;
    RelayConfig::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `postbox pipe test`: success when the record would be delivered
/// or filtered out; exit 1 when it would be dead-lettered; exit 2 on bad
/// input (a config or record that cannot be read, no such pipe).
pub fn run(args: PipeArgs) -> ExitCode {
    use postbox_relay::plan::TestError;
    let PipeCommand::Test(args) = args.command;
    let result = load(&args.config)
        .map_err(TestError::Input)
        .and_then(|config| {
            let text = std::fs::read_to_string(&args.record).map_err(|e| {
                TestError::Input(format!(
                    "cannot read the record {}: {e}",
                    args.record.display()
                ))
            })?;
            postbox_relay::plan::test_record_text(&config, &args.pipe, &text)
        });
    match result {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                TestError::Input(_) => ExitCode::from(EXIT_REFUSED),
                TestError::Dead(_) => ExitCode::FAILURE,
            }
        }
    }
}

/// Runs `postbox relay` until SIGINT or SIGTERM.
pub fn relay(args: RelayArgs, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let result = match args.backend.backend {
        Backend::Embedded => runtime.block_on(run_relay(args)).map_err(Failure::from),
        Backend::Aws => runtime.block_on(run_relay_on_aws(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// The relay config of `args`, with at least one pipe.
fn pipes_of(args: &RelayArgs) -> Result<RelayConfig, Failure> {
    let config = load(&args.config).map_err(|e| Failure::new(EXIT_REFUSED, e))?;
    if config.pipes.is_empty() {
        return Err(Failure::new(
            EXIT_REFUSED,
            format!(
                "{}: no pipes are declared (add [pipes.NAME] or relay.events_pipe = true)",
                args.config.display()
            ),
        ));
    }
    Ok(config)
}

/// `postbox relay --backend aws`: the pipes on DynamoDB Streams, delivering
/// to SQS, their state in the stack's relay-shards table.
async fn run_relay_on_aws(args: RelayArgs) -> Result<(), Failure> {
    let config = pipes_of(&args)?;
    let sdk = crate::backend::aws_config().await?;
    let prefix = &args.backend.aws_prefix;
    let names: Vec<String> = config.pipes.iter().map(|p| p.name.clone()).collect();
    let relay = postbox_aws::StreamsRelay::start(
        postbox_aws::DynamoStore::new(&sdk, prefix),
        postbox_aws::Streams::new(&sdk),
        postbox_aws::SqsQueues::new(&sdk, prefix),
        config,
        postbox_aws::StreamsRelayOptions::default(),
    )
    .await
    .map_err(|e| Failure::new(EXIT_REFUSED, e.to_string()))?;
    crate::install_shutdown();
    println!(
        "postbox relay running pipes {} on DynamoDB Streams (prefix {prefix:?})",
        names.join(", ")
    );
    let mut every = tokio::time::interval(Duration::from_secs(args.stats_every.max(1)));
    let stop = crate::shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = every.tick() => {
                for s in relay.stats() {
                    tracing::info!(pipe = %s.pipe, lease = s.holds_lease, delivered = s.delivered,
                        filtered = s.filtered, dead = s.dead_lettered, gaps = s.gaps, "relay");
                }
            }
        }
    }
    relay.shutdown().await;
    tracing::info!("relay stopped cleanly");
    Ok(())
}

async fn run_relay(args: RelayArgs) -> Result<(), String> {
    let config = pipes_of(&args).map_err(|f| f.message)?;
    std::fs::create_dir_all(&args.data).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            args.data.display()
        )
    })?;
    let file = args.data.join(postbox_node::STORE_FILE);
    let store = EmbeddedStore::open(
        &file,
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .map_err(|e| format!("cannot open the store {}: {e}", file.display()))?;
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .map_err(|e| format!("cannot open the queues: {e}"))?;
    let names: Vec<String> = config.pipes.iter().map(|p| p.name.clone()).collect();
    let relay = postbox_node::start_relay(store, queues, config).await?;
    crate::install_shutdown();
    println!(
        "postbox relay running pipes {} (data: {})",
        names.join(", "),
        file.display()
    );
    let mut every = tokio::time::interval(Duration::from_secs(args.stats_every.max(1)));
    let stop = crate::shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = every.tick() => {
                for s in relay.stats().await.map_err(|e| e.to_string())? {
                    tracing::info!(pipe = %s.pipe, lease = s.holds_lease, behind = s.records_behind,
                        oldest_ms = ?s.oldest_unrelayed_age_ms, delivered = s.delivered, dead = s.dead_lettered, "relay lag");
                }
            }
        }
    }
    relay.shutdown().await;
    tracing::info!("relay stopped cleanly");
    Ok(())
}

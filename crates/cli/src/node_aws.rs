//! `postbox serve --backend aws`: the node on DynamoDB, DynamoDB Streams
//! and SQS. The HTTP API and the engine emit into the stack's events table,
//! the relay reads its stream into the events FIFO queue, and the workers
//! run the catalog's DURABLE subscriptions (webhooks, pull, and the code
//! handlers built into the binary) with the inbox on DynamoDB. With
//! `--examples` it runs the built-in example applications as the embedded
//! node does: the payment catalog and its four handlers, the `/reports`
//! API, its two pipes and its job runner. No DynamoDB or SQS wire endpoint
//! is served: clients reach AWS directly.
//!
//! The stack must exist (`postbox init --backend aws`, with `--examples`
//! for the examples' tables and queues): a missing table or queue is
//! refused at start, naming it; nothing is created in the account.
//! The admin token and the webhook secret are kept in the data directory,
//! as on the embedded backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use postbox_api::{Api, ApiConfig, Sources};
use postbox_aws::{DynamoStore, SqsQueues, Streams, StreamsRelay, StreamsRelayOptions};
use postbox_engine::{Catalog, Engine, Lane};
use postbox_queue::QueueClient;
use postbox_relay::RelayConfig;
use postbox_store::{ItemStore, StoreError};
use postbox_topology::Topology;
use postbox_worker::{Worker, WorkerOptions};
use tokio::sync::watch;

use crate::http::{EXIT_REFUSED, EXIT_UNREACHABLE, Failure};
use postbox_node::Handlers;

/// What `serve --backend aws` runs.
pub struct AwsNodeOptions {
    /// The stack's name prefix.
    pub prefix: String,
    /// Where the admin token and the webhook secret are kept.
    pub data: PathBuf,
    /// The event catalog.
    pub catalog: Catalog,
    /// The handlers and applications it runs (`postbox_examples::application`); their `setup`
    /// is the embedded store's: on AWS, `postbox init` makes tables.
    pub handlers: Handlers<DynamoStore, SqsQueues>,
    /// Whether the handlers are the built-in examples, whose tables and
    /// queues the stack must have.
    pub examples: bool,
    /// Pipes beyond the default events pipe.
    pub pipes: Option<RelayConfig>,
    /// Worker loops in this process.
    pub workers: usize,
    /// Whether this process relays the stream (off when a deployed Pipe
    /// or a `postbox relay` process does it).
    pub relay: bool,
    /// How long a worker's claim holds before another may take it over.
    pub lease: std::time::Duration,
}

/// The node, started: its API router and what stops with it.
pub struct AwsNode {
    /// The HTTP API.
    pub router: axum::Router,
    /// `GET /metrics` without a token (`serve --metrics-listen`).
    pub metrics_router: axum::Router,
    /// The admin token's file.
    pub admin_token_file: PathBuf,
    /// Whether this start created the admin token.
    pub created_admin_token: bool,
    relay: Option<StreamsRelay>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    pull: Option<postbox_worker::PullHub>,
}

impl AwsNode {
    /// Checks the stack, then starts the engine, the API, the relay and
    /// the workers.
    pub async fn start(options: AwsNodeOptions) -> Result<AwsNode, Failure> {
        let refused = |m: String| Failure::new(EXIT_REFUSED, m);
        let AwsNodeOptions {
            catalog,
            handlers: mut app,
            examples,
            ..
        } = options;
        crate::catalog::check_lanes_on_aws(&catalog)?;
        let sdk = crate::backend::aws_config().await?;
        let store = DynamoStore::new(&sdk, &options.prefix);
        let queues = SqsQueues::new(&sdk, &options.prefix);
        let topology = Topology::default();
        check_stack(&store, &queues, &topology, examples).await?;
        std::fs::create_dir_all(&options.data).map_err(|e| {
            refused(format!(
                "cannot create the data directory {}: {e}",
                options.data.display()
            ))
        })?;

        let durable = catalog
            .subscriptions
            .iter()
            .any(|s| s.lane == Lane::Durable);
        let data = options.data.clone();
        let mut handlers = postbox_node::durable_handlers(
            &catalog,
            &mut || postbox_node::webhook_secret(&data),
            "postbox serve --backend aws",
            true,
            std::mem::take(&mut app.durable),
        )
        .map_err(refused)?;
        let pull = postbox_node::pull_hub(&catalog, options.workers, &mut handlers);
        let store = Arc::new(store);
        let engine = Arc::new(
            (app.engine)(Engine::builder(store.clone(), catalog.clone()))
                .build()
                .await
                .map_err(|e| refused(format!("the engine refuses to start: {e}")))?,
        );
        let relay_config =
            postbox_node::node_relay_config(options.pipes, app.pipes.as_deref(), &catalog)
                .map_err(refused)?;
        let pipes = (options.relay && !relay_config.pipes.is_empty())
            .then(|| Arc::new(relay_config.clone()));
        let relay = if relay_config.pipes.is_empty() || !options.relay {
            None
        } else {
            Some(
                StreamsRelay::start(
                    (*store).clone(),
                    Streams::new(&sdk),
                    queues.clone(),
                    relay_config,
                    StreamsRelayOptions::default(),
                )
                .await
                .map_err(|e| refused(e.to_string()))?,
            )
        };

        let relay_stats = relay.as_ref().map(|r| r.stats_source());
        let (sdk_store, sdk_queues) = (store.clone(), queues.clone());
        let metrics: postbox_api::MetricsSource = Arc::new(move |out: &mut String| {
            if let Some(stats) = &relay_stats {
                relay_metrics(&stats(), out);
            }
            aws_metrics(&sdk_store.stats(), &sdk_queues.sdk_stats(), out);
            crate::telemetry::render(out);
        });
        let sources = Sources {
            metrics: Some(metrics),
            report: None,
            pull: pull.clone(),
            pipes,
        };
        let config = ApiConfig {
            reserved_tables: std::mem::take(&mut app.reserved_tables),
            ..ApiConfig::default()
        };
        let api = Api::new(engine.clone(), queues.clone(), config, sources)
            .await
            .map_err(|e| Failure::new(1, format!("the API refuses to start: {}", e.message)))?;
        let admin_token_file = options.data.join("admin-token");
        let created_admin_token = postbox_node::ensure_admin_token(&api, &admin_token_file)
            .await
            .map_err(|e| Failure::new(1, e))?;

        let (stop, stop_rx) = watch::channel(false);
        let mut workers = Vec::new();
        if durable {
            let worker = Worker::new(
                store.clone(),
                queues.clone(),
                &catalog,
                handlers,
                WorkerOptions {
                    lease: options.lease,
                    ..WorkerOptions::default()
                },
            )
            .await
            .map_err(|e| Failure::new(1, format!("the workers refuse to start: {e}")))?;
            workers.extend(postbox_node::worker_loops(
                &worker,
                options.workers,
                &stop_rx,
            ));
        }
        let router = postbox_node::api_router(&api, app.routes, engine);
        if let Some(background) = app.background {
            workers.push(background(
                (*store).clone(),
                queues.clone(),
                stop_rx.clone(),
            ));
        }
        Ok(AwsNode {
            router,
            metrics_router: api.metrics_router(),
            admin_token_file,
            created_admin_token,
            relay,
            workers,
            stop,
            pull,
        })
    }

    /// Stops the workers after their current batches, then the relay.
    pub async fn shutdown(self) {
        postbox_node::stop_tasks(&self.stop, self.pull.as_ref(), self.workers).await;
        if let Some(relay) = self.relay {
            relay.shutdown().await;
        }
    }
}

/// What the AWS SDK retried and AWS throttled, per service, and the
/// transactions retried after a conflict, in the Prometheus text format.
fn aws_metrics(dynamo: &postbox_aws::DynamoStats, sqs: &postbox_aws::SdkStats, out: &mut String) {
    use postbox_api::ops::{counter, family};
    let services = [("dynamodb", &dynamo.sdk), ("sqs", sqs)];
    family(
        out,
        "postbox_aws_sdk_retries_total",
        "counter",
        "Attempts the AWS SDK made after a request's first (throttling, transient failures), per service.",
        services.map(|(name, s)| ("service", name, s.retries)),
    );
    family(
        out,
        "postbox_aws_throttled_total",
        "counter",
        "Attempts AWS answered with throttling, per service.",
        services.map(|(name, s)| ("service", name, s.throttled)),
    );
    counter(
        out,
        "postbox_dynamodb_conflict_retries_total",
        "Transactions tried again after a TransactionConflict.",
        dynamo.conflict_retries,
    );
}

/// The relay's counters in the Prometheus text format, named as on the
/// embedded backend where they mean the same.
fn relay_metrics(pipes: &[postbox_aws::StreamsPipeStats], out: &mut String) {
    postbox_node::relay_records(
        out,
        pipes.iter().map(|p| {
            let outcomes = [
                ("filtered", p.filtered),
                ("delivered", p.delivered),
                ("dead_lettered", p.dead_lettered),
            ];
            (p.pipe.as_str(), outcomes.to_vec())
        }),
    );
    postbox_api::ops::family(
        out,
        "postbox_relay_gaps_total",
        "counter",
        "Records lost to the stream's retention or a replaced stream, per pipe.",
        pipes.iter().map(|p| ("pipe", p.pipe.as_str(), p.gaps)),
    );
}

/// Every table and queue of `topology` the node uses exists, or a refusal
/// naming what is missing.
async fn check_stack(
    store: &DynamoStore,
    queues: &SqsQueues,
    topology: &Topology,
    examples: bool,
) -> Result<(), Failure> {
    let mut missing = Vec::new();
    let mut differ = Vec::new();
    let stack = crate::init::stack(topology, examples);
    let wanted_queues: Vec<&String> = stack.fifos.iter().flat_map(|(q, d, _)| [q, d]).collect();
    for want in stack.tables.iter().map(|w| &w.input) {
        let table = &want.table_name;
        match store.describe_table(table).await {
            Ok(got) => {
                let diff = crate::init::differences(want, &got);
                if !diff.is_empty() {
                    differ.push(format!("table {table}: {}", diff.join("; ")));
                }
            }
            Err(StoreError::ResourceNotFound(_)) => missing.push(format!("table {table}")),
            Err(e) => {
                return Err(Failure::new(
                    EXIT_UNREACHABLE,
                    format!("DynamoDB did not answer DescribeTable {table}: {e}"),
                ));
            }
        }
    }
    for queue in wanted_queues {
        if let Err(e) = queues
            .queue_attributes(queue, &["QueueArn".to_owned()])
            .await
        {
            match e {
                postbox_queue::QueueError::Unavailable(_) => {
                    return Err(Failure::new(
                        EXIT_UNREACHABLE,
                        format!("SQS did not answer for queue {queue}: {e}"),
                    ));
                }
                _ => missing.push(format!("queue {queue}")),
            }
        }
    }
    if !differ.is_empty() {
        // init refuses these too: the table must be replaced by hand.
        return Err(Failure::new(
            EXIT_REFUSED,
            format!(
                "this stack's tables differ from what Postbox needs: {}",
                differ.join("; ")
            ),
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            EXIT_REFUSED,
            format!(
                "this stack lacks {}; create it with `postbox init --backend aws{}` (same --aws-prefix)",
                missing.join(", "),
                if examples { " --examples" } else { "" }
            ),
        ))
    }
}

/// Where the admin token of `data` lives (for the banner).
pub fn describe(data: &Path, prefix: &str) -> String {
    format!("backend: aws, prefix {prefix:?}, data: {}", data.display())
}

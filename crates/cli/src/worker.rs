//! `postbox worker`: durable workers in their own process, reaching the
//! store and the queues of a running `postbox serve` over the wire, or
//! DynamoDB and SQS with `--backend aws`. They run
//! the catalog's webhook subscriptions (handlers that are URLs); subscriptions
//! whose handlers are code run inside the process that registers that code.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use postbox_client::{RemoteQueues, RemoteStore};
use postbox_engine::Catalog;
use postbox_worker::{Worker, WorkerOptions};

use crate::http::{EXIT_REFUSED, Failure};

/// `postbox worker`
#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The running server's address.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8000",
        env = "POSTBOX_ENDPOINT"
    )]
    endpoint: String,
    /// The event catalog (TOML).
    #[arg(long, env = "POSTBOX_CATALOG")]
    catalog: PathBuf,
    /// Worker loops in this process, each with up to 8 batches in flight
    /// (as `serve --workers`; `--tasks` is the former name).
    #[arg(
        long = "workers",
        alias = "tasks",
        default_value_t = 4,
        env = "POSTBOX_WORKERS"
    )]
    tasks: usize,
    /// The secret webhook deliveries are signed with (default: the
    /// server's, in `<--data>/webhook-secret`).
    #[arg(long, env = "POSTBOX_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// The server's data directory, to find its admin access key when
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set.
    #[arg(long, default_value = "postbox-data", env = "POSTBOX_DATA")]
    data: PathBuf,
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
}

pub async fn run(args: WorkerArgs) -> Result<(), Failure> {
    crate::install_shutdown();
    let catalog =
        Catalog::load(&args.catalog).map_err(|e| Failure::new(EXIT_REFUSED, e.to_string()))?;
    let handlers = postbox_node::durable_handlers(
        &catalog,
        &mut || webhook_secret(args.webhook_secret.as_deref(), &args.data),
        "postbox worker",
        false,
        HashMap::new(),
    )
    .map_err(|e| Failure::new(EXIT_REFUSED, e))?;
    match args.backend.backend {
        crate::backend::Backend::Embedded => {
            let endpoint = crate::http::wire_endpoint(&args.endpoint, &args.data)?;
            let store = Arc::new(RemoteStore::new(endpoint.clone()));
            let queues = RemoteQueues::new(endpoint.clone());
            let explain = |e: String| crate::http::explain_wire_error(e, &endpoint);
            run_on(
                store,
                queues,
                &catalog,
                handlers,
                &args.endpoint,
                args.tasks,
                &explain,
            )
            .await
        }
        crate::backend::Backend::Aws => {
            let (store, queues) = crate::backend::aws(&args.backend).await?;
            let at = format!("DynamoDB and SQS (prefix {:?})", args.backend.aws_prefix);
            let explain = |e: String| e;
            run_on(
                Arc::new(store),
                queues,
                &catalog,
                handlers,
                &at,
                args.tasks,
                &explain,
            )
            .await
        }
    }
}

/// The webhook secret: `given`, else the server's `<data>/webhook-secret`
/// (which `postbox serve` writes on first use), else a refusal saying both.
fn webhook_secret(given: Option<&str>, data: &std::path::Path) -> Result<Vec<u8>, String> {
    if let Some(s) = given.filter(|s| !s.is_empty()) {
        return Ok(s.as_bytes().to_vec());
    }
    let path = data.join("webhook-secret");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().as_bytes().to_vec()),
        _ => Err(format!(
            "no webhook secret: {} does not exist; pass --webhook-secret (or POSTBOX_WEBHOOK_SECRET), or --data naming the server's data directory",
            path.display()
        )),
    }
}

/// Runs `tasks` worker loops on `store` and `queues` until a stop signal.
async fn run_on<S: postbox_store::ItemStore, Q: postbox_queue::QueueClient>(
    store: Arc<S>,
    queues: Q,
    catalog: &Catalog,
    handlers: HashMap<String, postbox_worker::Handler>,
    at: &str,
    tasks: usize,
    explain: &(dyn Fn(String) -> String + Sync),
) -> Result<(), Failure> {
    let worker = Worker::new(store, queues, catalog, handlers, WorkerOptions::default())
        .await
        .map_err(|e| {
            // A store or queue that did not answer is "unreachable" (3), as
            // for every client command.
            let code = match &e {
                postbox_worker::WorkerError::Store(postbox_store::StoreError::Unavailable(_))
                | postbox_worker::WorkerError::Queue(postbox_queue::QueueError::Unavailable(_)) => {
                    crate::http::EXIT_UNREACHABLE
                }
                _ => 1,
            };
            Failure::new(code, explain(format!("the worker refuses to start: {e}")))
        })?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = (0..tasks.max(1))
        .map(|_| {
            let w = worker.clone();
            let rx = rx.clone();
            tokio::spawn(async move { w.run(rx).await })
        })
        .collect();
    println!(
        "postbox worker running {} task(s) against {at}",
        tasks.len()
    );
    crate::shutdown_signal().await;
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let s = worker.stats();
    println!(
        "postbox worker stopped: {} completed, {} retried, {} dead",
        s.completed, s.retried, s.dead
    );
    Ok(())
}

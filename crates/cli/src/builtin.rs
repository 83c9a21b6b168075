//! The application `postbox serve --examples` runs: both example
//! applications of `crates/examples` — the payment fan-out (its catalog,
//! its four durable handlers) and the report-job API (`POST /reports`,
//! `GET /reports/{jobId}`, its two pipes and its job runner) — on either
//! backend.

use std::path::Path;
use std::sync::Arc;

use postbox_examples::{payments, reports};
use postbox_queue::{QueueClient, Queues};
use postbox_store::ItemStore;
use postbox_store::embedded::EmbeddedStore;

use postbox_node::Handlers;

/// The catalog and everything a node on store `S` and queues `Q` needs to
/// run the examples, but their tables and queues (on the embedded store,
/// [`embedded_application`] makes them; on AWS, `postbox init --backend aws
/// --examples`). The report-ready log goes to `<data>/report-ready.jsonl`.
pub fn application<S, Q>(data: &Path) -> (postbox_engine::Catalog, Handlers<S, Q>)
where
    S: ItemStore + Send + Sync + 'static,
    Q: QueueClient + Clone + Send + Sync + 'static,
{
    let log = data.join("report-ready.jsonl");
    let handlers = Handlers {
        durable: payments::handlers(),
        routes: Some(Box::new(|engine: Arc<postbox_engine::Engine<S>>| {
            reports::router(reports::ReportsApi::new(
                engine.store().clone(),
                reports::ApiOptions::default(),
            ))
        })),
        pipes: Some(postbox_examples::pipes_toml(&log)),
        background: Some(Box::new(|store: S, queues: Q, stop| {
            let runner = reports::JobRunner::new(
                Arc::new(store),
                queues,
                reports::RunnerOptions::default(),
                reports::fake_report(),
            );
            tokio::spawn(async move { runner.run(stop).await })
        })),
        reserved_tables: vec![reports::JOBS_TABLE.into(), reports::KEYS_TABLE.into()],
        ..Handlers::none()
    };
    (payments::catalog(), handlers)
}

/// [`application`] on the embedded store, which makes the examples'
/// tables and queues when the node starts.
pub fn embedded_application(data: &Path) -> (postbox_engine::Catalog, Handlers) {
    let (catalog, mut handlers) = application::<EmbeddedStore, Queues>(data);
    handlers.setup = Some(Box::new(|store, queues| {
        Box::pin(async move {
            let err =
                |e: postbox_examples::ExampleError| format!("cannot set up the examples: {e}");
            payments::create_tables(&store).await.map_err(err)?;
            reports::create_tables(&store).await.map_err(err)?;
            reports::create_queues(&queues).await.map_err(err)?;
            Ok(())
        })
    }));
    (catalog, handlers)
}

/// The code handlers built into this binary (the payment example's), for a
/// catalog given with `--catalog`; webhook handlers need no code.
pub fn code_handlers<S, Q>() -> Handlers<S, Q> {
    Handlers {
        durable: payments::handlers(),
        ..Handlers::none()
    }
}

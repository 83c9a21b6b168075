//! The examples as one application of a node ([`postbox_node::Handlers`]):
//! what `postbox serve --examples` runs on either backend.

use std::path::Path;
use std::sync::Arc;

use postbox_node::Handlers;
use postbox_queue::{QueueClient, Queues};
use postbox_store::ItemStore;
use postbox_store::embedded::EmbeddedStore;

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
        durable: crate::payments::handlers(),
        routes: Some(Box::new(|engine: Arc<postbox_engine::Engine<S>>| {
            crate::reports::router(crate::reports::ReportsApi::new(
                engine.store().clone(),
                crate::reports::ApiOptions::default(),
            ))
        })),
        pipes: Some(crate::pipes_toml(&log)),
        background: Some(Box::new(|store: S, queues: Q, stop| {
            let runner = crate::reports::JobRunner::new(
                Arc::new(store),
                queues,
                crate::reports::RunnerOptions::default(),
                crate::reports::fake_report(),
            );
            tokio::spawn(async move { runner.run(stop).await })
        })),
        reserved_tables: vec![
            crate::reports::JOBS_TABLE.into(),
            crate::reports::KEYS_TABLE.into(),
        ],
        ..Handlers::none()
    };
    (crate::payments::catalog(), handlers)
}

/// [`application`] on the embedded store, which makes the examples'
/// tables and queues when the node starts.
pub fn embedded_application(data: &Path) -> (postbox_engine::Catalog, Handlers) {
    let (catalog, mut handlers) = application::<EmbeddedStore, Queues>(data);
    handlers.setup = Some(Box::new(|store, queues| {
        Box::pin(async move {
            let err = |e: crate::ExampleError| format!("cannot set up the examples: {e}");
            crate::payments::create_tables(&store).await.map_err(err)?;
            crate::reports::create_tables(&store).await.map_err(err)?;
            crate::reports::create_queues(&queues).await.map_err(err)?;
            Ok(())
        })
    }));
    (catalog, handlers)
}

/// The code handlers of the examples (the payment example's), for a node
/// whose catalog names them; webhook handlers need no code.
pub fn code_handlers<S, Q>() -> Handlers<S, Q> {
    Handlers {
        durable: crate::payments::handlers(),
        ..Handlers::none()
    }
}

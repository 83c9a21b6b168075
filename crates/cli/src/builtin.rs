//! The application `postbox serve` runs when no catalog is given: both
//! example applications of `crates/examples` — the payment fan-out (its
//! catalog, its four durable handlers) and the report-job API (`POST
//! /reports`, `GET /reports/{jobId}`, its two pipes and its job runner).

use std::path::Path;
use std::sync::Arc;

use postbox_examples::{payments, reports};

use crate::node::Handlers;

/// The catalog and everything the node needs to run the examples; the
/// report-ready log goes to `<data>/report-ready.jsonl`.
pub fn application(data: &Path) -> (postbox_engine::Catalog, Handlers) {
    let log = data.join("report-ready.jsonl");
    let handlers = Handlers {
        durable: payments::handlers(),
        best_effort: std::collections::HashMap::new(),
        engine: Box::new(|b| b),
        routes: Some(Box::new(|engine| {
            reports::router(reports::ReportsApi::new(
                engine.store().clone(),
                reports::ApiOptions::default(),
            ))
        })),
        pipes: Some(postbox_examples::pipes_toml(&log)),
        setup: Some(Box::new(|store, queues| {
            Box::pin(async move {
                let err =
                    |e: postbox_examples::ExampleError| format!("cannot set up the examples: {e}");
                payments::create_tables(&store).await.map_err(err)?;
                reports::create_tables(&store).await.map_err(err)?;
                reports::create_queues(&queues).await.map_err(err)?;
                Ok(())
            })
        })),
        background: Some(Box::new(|store, queues, stop| {
            let runner = reports::JobRunner::new(
                Arc::new(store),
                queues,
                reports::RunnerOptions::default(),
                reports::fake_report(),
            );
            tokio::spawn(async move { runner.run(stop).await })
        })),
        reserved_tables: vec![reports::JOBS_TABLE.into(), reports::KEYS_TABLE.into()],
    };
    (payments::catalog(), handlers)
}

/// The code handlers built into this binary (the payment example's), for a
/// catalog given with `--catalog`; webhook handlers need no code.
pub fn code_handlers() -> Handlers {
    Handlers {
        durable: payments::handlers(),
        ..Handlers::none()
    }
}

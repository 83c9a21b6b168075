//! The pipes a node relays, and starting them on the embedded store.

use postbox_queue::Queues;
use postbox_relay::{Relay, RelayConfig, RelayOptions};
use postbox_store::ItemStore;
use postbox_store::embedded::EmbeddedStore;

/// The pipes a node relays: `given` (a `--pipes` file), then those of its
/// applications (`app`, TOML) whose names are not taken, then the default
/// events pipe when a DURABLE subscription of `catalog` reads the events
/// queue (otherwise events would pile up there unread).
pub fn node_relay_config(
    given: Option<RelayConfig>,
    app: Option<&str>,
    catalog: &postbox_engine::Catalog,
) -> Result<RelayConfig, String> {
    let mut config = match given {
        Some(c) => c,
        None => RelayConfig::from_toml("").map_err(|e| e.to_string())?,
    };
    if let Some(text) = app {
        let extra = RelayConfig::from_toml(text).map_err(|e| format!("built-in pipes: {e}"))?;
        for pipe in extra.pipes {
            if !config.pipes.iter().any(|p| p.name == pipe.name) {
                config.pipes.push(pipe);
            }
        }
        config.buses.extend(extra.buses);
    }
    let durable = catalog
        .subscriptions
        .iter()
        .any(|s| s.lane == postbox_engine::Lane::Durable);
    if durable && !config.pipes.iter().any(|p| p.name == "events") {
        let topology = postbox_topology::Topology::default();
        config
            .pipes
            .push(postbox_relay::config::default_events_pipe(
                &topology.events_table,
                &topology.events_queue,
            ));
    }
    Ok(config)
}

/// Starts the pipes of `config` on an open store, creating the engine's events
/// table first when the default events pipe reads it, so the relay can start
/// before the first emit. Shared by `postbox relay` and `postbox serve --pipes`.
pub async fn start_relay(
    store: EmbeddedStore,
    queues: Queues,
    config: RelayConfig,
) -> Result<Relay, String> {
    for p in config.pipes.iter().filter(|p| p.name == "events") {
        match store
            .create_table(postbox_engine::layout::create_events_table(&p.table))
            .await
        {
            Ok(_) | Err(postbox_store::StoreError::ResourceInUse(_)) => {}
            Err(e) => return Err(format!("cannot create the events table {}: {e}", p.table)),
        }
    }
    Relay::start(store, queues, config, RelayOptions::default())
        .await
        .map_err(|e| e.to_string())
}

//! Shared set-up of the client tests: a real `postbox serve` router on
//! `127.0.0.1:0` over an embedded store and queues in a temporary directory,
//! and a second embedded store and queues on the same manual clock for the
//! same calls made directly, so each test compares the wire with the
//! embedded behaviour.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use postbox_client::{Credentials, Endpoint, EndpointOptions, RemoteQueues, RemoteStore};
use postbox_queue::{Queues, QueuesOptions};
use postbox_store::ManualClock;
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Start of the manual clock: 2030-01-01T00:00:00Z in ms.
pub const T0: u64 = 1_893_456_000_000;

/// An embedded store and its queues on one file.
pub async fn open_at(path: &Path, clock: Arc<ManualClock>) -> (EmbeddedStore, Queues) {
    let options = EmbeddedOptions {
        durability: Durability::NoFsync,
        clock: clock.clone(),
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open(path, options).unwrap();
    let queues = Queues::open(
        store.clone(),
        QueuesOptions {
            clock,
            ..QueuesOptions::default()
        },
    )
    .await
    .unwrap();
    (store, queues)
}

/// A served store and queues, and a direct pair to compare with.
pub struct Pair {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    /// The served side, as the server holds it (for set-up).
    pub served_store: EmbeddedStore,
    pub served_queues: Queues,
    /// The served side, over the wire.
    pub remote: RemoteStore,
    pub remote_queues: RemoteQueues,
    /// The other side, called directly.
    pub direct: EmbeddedStore,
    pub direct_queues: Queues,
    pub addr: SocketAddr,
    /// The issued key the remote side signs with.
    pub credentials: Credentials,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

pub async fn pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (served_store, served_queues) =
        open_at(&dir.path().join("served.redb"), clock.clone()).await;
    let (direct, direct_queues) = open_at(&dir.path().join("direct.redb"), clock.clone()).await;
    // The wire as `postbox serve` runs it: signed with an issued key.
    let key = postbox_server::create_access_key(&served_store, None)
        .await
        .unwrap();
    let (addr, shutdown, server) = serve_with(
        served_store.clone(),
        served_queues.clone(),
        postbox_server::WireAuth::sigv4(),
    )
    .await;
    let credentials = Credentials::new(key.id, key.secret);
    let endpoint = Endpoint::with_options(
        &format!("http://{addr}"),
        EndpointOptions {
            credentials: Some(credentials.clone()),
            ..EndpointOptions::default()
        },
    )
    .unwrap();
    Pair {
        dir,
        clock,
        served_store,
        served_queues,
        remote: RemoteStore::new(endpoint.clone()),
        remote_queues: RemoteQueues::new(endpoint),
        direct,
        direct_queues,
        addr,
        credentials,
        shutdown: Some(shutdown),
        server: Some(server),
    }
}

/// Serves `store` and `queues` on a fresh loopback port, accepting
/// unsigned requests (`--wire-auth none`).
pub async fn serve(
    store: EmbeddedStore,
    queues: Queues,
) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    serve_with(store, queues, postbox_server::WireAuth::None).await
}

/// Serves `store` and `queues` on a fresh loopback port with `auth`.
pub async fn serve_with(
    store: EmbeddedStore,
    queues: Queues,
    auth: postbox_server::WireAuth,
) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    let (listener, addr) = postbox_server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let app = postbox_server::app(postbox_server::Services {
        store,
        queues: Some(queues),
        test_clock: None,
        auth,
    });
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        postbox_server::serve(app, listener, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    (addr, tx, task)
}

impl Pair {
    /// Stops the server and waits until it no longer listens.
    pub async fn stop_server(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.server.take() {
            // Graceful: idle keep-alive connections are closed too, so
            // nothing answers on this port afterwards.
            tokio::time::timeout(std::time::Duration::from_secs(10), task)
                .await
                .expect("the server stops")
                .unwrap();
        }
    }
}

pub fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A request (or any API type) from its DynamoDB JSON.
pub fn req<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

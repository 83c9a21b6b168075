//! Shared set-up of the client tests: a real `postbox serve` router on
//! `127.0.0.1:0` over an embedded store and queues in a temporary directory,
//! and a second embedded store and queues on the same manual clock for the
//! same calls made directly, so each test compares the wire with the
//! embedded behaviour.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use postbox_client::{Credentials, Endpoint, EndpointOptions, RemoteQueues, RemoteStore};
use postbox_queue::Queues;
use postbox_store::ManualClock;
use postbox_store::embedded::EmbeddedStore;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[allow(unused_imports)]
pub use postbox_queue::testing::{T0, attrs, open_at};
#[allow(unused_imports)]
pub use postbox_store::testing::from_json as req;

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

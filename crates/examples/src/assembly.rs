//! What both examples share: a node in a fresh directory, pk-keyed
//! tables, a FIFO queue with its dead-letter queue, and waiting for
//! something to happen with a deadline.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use postbox_node::{Node, NodeOptions};
use postbox_queue::Queues;
use postbox_store::api::{
    CreateTableInput, StreamSpecification, StreamViewType, Tag, TimeToLiveSpecification,
};
use postbox_store::embedded::ROW_ORDER_TAG;
use postbox_store::{ItemStore, StoreError};

use crate::error::ExampleError;

/// Starts a node with `options`. An example's output and report describe
/// one run from scratch, so a data directory that already holds a store is
/// refused.
pub(crate) async fn start_node(options: NodeOptions) -> Result<Node, ExampleError> {
    if options.data.join(postbox_node::STORE_FILE).exists() {
        return Err(ExampleError::DirectoryInUse(options.data));
    }
    Node::start(options).await.map_err(ExampleError::Node)
}

/// How a table is made.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TableSpec<'a> {
    /// A NEW_AND_OLD_IMAGES stream, for pipes to read.
    pub stream: bool,
    /// The TTL attribute (seconds since the epoch), if items expire.
    pub ttl: Option<&'a str>,
    /// Rows written at random keys and read by key: the embedded store
    /// keeps them in arrival order (the tag `postbox:row-order`; inert on
    /// AWS).
    pub arrival: bool,
}

/// The CreateTable request of table `name` keyed by `pk` (S).
pub(crate) fn table_input(name: &str, spec: TableSpec<'_>) -> CreateTableInput {
    CreateTableInput {
        stream_specification: spec.stream.then_some(StreamSpecification {
            stream_enabled: true,
            stream_view_type: Some(StreamViewType::NewAndOldImages),
        }),
        tags: spec.arrival.then(|| {
            vec![Tag {
                key: ROW_ORDER_TAG.to_owned(),
                value: "arrival".to_owned(),
            }]
        }),
        ..CreateTableInput::keyed_by(name, "pk")
    }
}

/// Creates table `name` keyed by `pk` (S) unless it exists.
pub(crate) async fn create_table<S: ItemStore>(
    store: &S,
    name: &str,
    spec: TableSpec<'_>,
) -> Result<(), ExampleError> {
    match store.create_table(table_input(name, spec)).await {
        Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(attribute) = spec.ttl {
        // A restart finds TTL already on: enabling it again is an error.
        match store.describe_time_to_live(name).await? {
            Some(current) if current == attribute => {}
            Some(current) => {
                return Err(StoreError::validation(format!(
                    "table {name} expires items by {current:?}, not {attribute:?}"
                ))
                .into());
            }
            None => {
                let spec = TimeToLiveSpecification {
                    enabled: true,
                    attribute_name: attribute.to_owned(),
                };
                store.update_time_to_live(name, spec).await?;
            }
        }
    }
    Ok(())
}

/// Creates FIFO queue `name` whose messages go to the FIFO queue `dlq`
/// after `max_receives` receives (both are left as they are if they exist
/// with these attributes).
pub(crate) async fn create_fifo_with_dlq(
    queues: &Queues,
    name: &str,
    dlq: &str,
    max_receives: u32,
) -> Result<(), ExampleError> {
    let attrs = |pairs: &[(&str, String)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    queues
        .create_queue(dlq, attrs(&[("FifoQueue", "true".into())]))
        .await?;
    let policy = postbox_queue::attributes::redrive_policy_text(&queues.arn(dlq), max_receives);
    queues
        .create_queue(
            name,
            attrs(&[("FifoQueue", "true".into()), ("RedrivePolicy", policy)]),
        )
        .await?;
    Ok(())
}

/// Calls `check` every `every` until it returns `Ok(value)`; `Err(missing)`
/// says what is not there yet, and becomes the timeout error's detail
/// after `timeout`.
pub(crate) async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T, ExampleError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Result<T, String>, ExampleError>>,
{
    let start = Instant::now();
    loop {
        match check().await? {
            Ok(value) => return Ok(value),
            Err(missing) if start.elapsed() >= timeout => {
                return Err(ExampleError::Timeout {
                    what: what.to_owned(),
                    seconds: timeout.as_secs(),
                    missing,
                });
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

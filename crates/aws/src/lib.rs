//! Postbox on AWS: the item store on DynamoDB, through the official AWS SDK
//! for Rust.
//!
//! [`DynamoStore`] (`store`) implements [`postbox_store::ItemStore`] with
//! DynamoDB's own operations, so the engine, the inbox and everything else written against the trait
//! run on DynamoDB unchanged. Requests and answers keep DynamoDB's shapes
//! (the store's `api` is modelled on them); errors map to the same
//! `StoreError` variants the embedded store gives (`error`).
//!
//! Configuration is the AWS way: the SDK's default credential and region
//! chain and its standard endpoint variables (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_DYNAMODB`), so the same binary reaches DynamoDB Local
//! or an account. A name prefix lets two stacks share an account: every
//! table Postbox names is `<prefix><name>` in DynamoDB, and answers name it
//! without the prefix.
//!
//! Retries: the SDK retries throttling and transient failures with jittered
//! exponential backoff (its standard mode). A transaction cancelled only by
//! `TransactionConflict` (another transaction on the same items) is retried
//! here, with jittered, bounded backoff, and counted ([`DynamoStats`]).
//!
//! Known differences from the embedded store: the `*_unsynced` and
//! `get_item_committed` calls are the plain ones (every DynamoDB write is
//! durable when answered), and `query_encoded` encodes after a Query. The
//! legacy parameters (Expected, AttributesToGet, ...) are rewritten as
//! expressions (`postbox_store::legacy`) on both backends.
//!
//! [`SqsQueues`] implements the queues' [`postbox_queue::QueueClient`] on
//! SQS (`sqs`). [`StreamsRelay`] runs the relay config's pipes on DynamoDB
//! Streams (`relay`): shards and records read with the SDK (`streams`), the
//! order shards are read in (`lineage`), and each pipe's lease and shard
//! checkpoints in a DynamoDB table (`pipe_state`).

mod config;
mod convert;
mod error;
pub mod lineage;
pub mod pipe_state;
pub mod relay;
mod sdk_counters;
mod shapes;
mod sqs;
mod store;
pub mod streams;

pub use aws_config::SdkConfig;
pub use config::{
    check_credentials, config_loader, local_config, local_config_with_key, sdk_config,
};
pub use relay::{StreamsPipeStats, StreamsRelay, StreamsRelayOptions};
pub use streams::Streams;

pub use sdk_counters::SdkStats;
pub use sqs::SqsQueues;
pub use store::{DynamoStats, DynamoStore};

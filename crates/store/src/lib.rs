//! The item store: DynamoDB's data model, operations and change streams.
//!
//! [`ItemStore`] and [`ChangeStreams`] are the contract every backend
//! fulfils; they know nothing of any backend. [`Clock`] is the time every
//! part of a node reads, injected so tests need not sleep. [`api`] holds the requests and
//! responses in DynamoDB's own shapes. The `embedded` module is the default
//! backend: one durable local file.

pub mod api;
pub mod clock;
pub mod embedded;
mod error;
pub mod faults;
pub mod legacy;
mod query_only;
pub mod shards;
pub mod tags;
#[cfg(feature = "test-support")]
pub mod testing;

use std::future::Future;
use std::time::Duration;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::StoreError;
pub use query_only::QueryOnly;

use api::*;
use postbox_item::Item;

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

/// The items of every page `read` answers, from `start` on: each call is
/// given the ExclusiveStartKey of the page to read (Query or Scan).
async fn every_page<F, Fut>(mut start: Option<Item>, mut read: F) -> StoreResult<Vec<Item>>
where
    F: FnMut(Option<Item>) -> Fut,
    Fut: Future<Output = StoreResult<QueryOutput>>,
{
    let mut out = Vec::new();
    loop {
        let page = read(start.take()).await?;
        out.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return Ok(out),
        }
    }
}

/// The refusal of an operation a backend does not implement.
fn unsupported(operation: &str) -> StoreError {
    StoreError::validation(format!("{operation} is not supported by this backend"))
}

/// DynamoDB's item operations and table control plane.
///
/// Architecture Invariant: a call that returned `Ok` for a write is durable
/// (survives kill -9 and power loss) and its change-stream record, if the
/// table has a stream, was committed in the same commit.
pub trait ItemStore: Send + Sync + 'static {
    fn create_table(
        &self,
        input: CreateTableInput,
    ) -> impl Future<Output = StoreResult<TableDescription>> + Send;
    fn describe_table(
        &self,
        table_name: &str,
    ) -> impl Future<Output = StoreResult<TableDescription>> + Send;
    /// The table's key schema: what a request check needs, without
    /// DescribeTable's item count and size (which a backend may have to
    /// count). ResourceNotFound if there is no such table.
    fn key_schema(
        &self,
        table_name: &str,
    ) -> impl Future<Output = StoreResult<Vec<api::KeySchemaElement>>> + Send {
        async move { Ok(self.describe_table(table_name).await?.key_schema) }
    }
    /// DescribeTable without its item counts and sizes (zeros where a
    /// backend would have to count): for callers that need the schema, the
    /// stream or the indexes, such as DynamoDB Streams' DescribeStream.
    fn describe_table_uncounted(
        &self,
        table_name: &str,
    ) -> impl Future<Output = StoreResult<TableDescription>> + Send {
        self.describe_table(table_name)
    }
    fn delete_table(
        &self,
        table_name: &str,
    ) -> impl Future<Output = StoreResult<TableDescription>> + Send;
    fn list_tables(&self) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    fn update_time_to_live(
        &self,
        table_name: &str,
        spec: TimeToLiveSpecification,
    ) -> impl Future<Output = StoreResult<TimeToLiveSpecification>> + Send;
    /// The TTL attribute, if TTL is enabled.
    fn describe_time_to_live(
        &self,
        table_name: &str,
    ) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    /// UpdateTable: billing mode, provisioned throughput, the stream.
    fn update_table(
        &self,
        input: UpdateTableInput,
    ) -> impl Future<Output = StoreResult<TableDescription>> + Send {
        let _ = input;
        async { Err(unsupported("UpdateTable")) }
    }
    /// TagResource: adds tags to the table `arn` names, replacing a key's
    /// value when it is already there.
    fn tag_resource(
        &self,
        arn: &str,
        tags: Vec<Tag>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = (arn, tags);
        async { Err(unsupported("TagResource")) }
    }
    /// UntagResource: removes tags by key (a key not there is no error).
    fn untag_resource(
        &self,
        arn: &str,
        keys: Vec<String>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = (arn, keys);
        async { Err(unsupported("UntagResource")) }
    }
    /// ListTagsOfResource: every tag of the table, by key.
    fn list_tags_of_resource(
        &self,
        arn: &str,
    ) -> impl Future<Output = StoreResult<Vec<Tag>>> + Send {
        let _ = arn;
        async { Err(unsupported("ListTagsOfResource")) }
    }

    fn get_item(
        &self,
        input: GetItemInput,
    ) -> impl Future<Output = StoreResult<GetItemOutput>> + Send;
    fn put_item(
        &self,
        input: PutItemInput,
    ) -> impl Future<Output = StoreResult<WriteOutput>> + Send;
    fn update_item(
        &self,
        input: UpdateItemInput,
    ) -> impl Future<Output = StoreResult<WriteOutput>> + Send;
    /// [`ItemStore::update_item`] for a write whose durability a later
    /// write of the same caller implies: a backend may answer it before it
    /// is durable (the embedded store answers at the commit, before the
    /// commit log's sync), and a crash in between loses it although its
    /// caller saw it succeed. Every later write is ordered after it, so
    /// once one of them is durable this one is too. The worker's claims over
    /// an existing row use it: a lost claim means the handler runs again, as
    /// after an expired lease, and a completion (durable) implies its claim.
    /// The default is `update_item`.
    fn update_item_unsynced(
        &self,
        input: UpdateItemInput,
    ) -> impl Future<Output = StoreResult<WriteOutput>> + Send {
        self.update_item(input)
    }
    /// GetItem from the last commit, whether or not it is synced yet: no
    /// wait for the log's sync. The caller must not act on what it reads as
    /// if it were durable: the API reads a token this way (a token whose
    /// creation is unsynced has not been handed to anyone yet; a revocation
    /// not yet synced already refuses) and an Idempotency-Key's row (found,
    /// it answers from a consistent read of the log, which waits). The
    /// default is `get_item`.
    fn get_item_committed(
        &self,
        input: GetItemInput,
    ) -> impl Future<Output = StoreResult<GetItemOutput>> + Send {
        self.get_item(input)
    }
    /// A number that differs after every commit that changed an item of
    /// `table_name`, when the backend can tell without a request (the
    /// embedded store: `EmbeddedStore::change_count`). A caller that reads
    /// it before it reads the table may keep what it read while the number
    /// stays the same. The default, None, says nothing may be kept.
    fn change_count(&self, table_name: &str) -> Option<u64> {
        let _ = table_name;
        None
    }
    /// [`ItemStore::put_item`] answered as early as
    /// [`ItemStore::update_item_unsynced`], on the same terms: the worker's
    /// first claim of an event, whose durability its completion implies.
    /// The default is `put_item`.
    fn put_item_unsynced(
        &self,
        input: PutItemInput,
    ) -> impl Future<Output = StoreResult<WriteOutput>> + Send {
        self.put_item(input)
    }
    fn delete_item(
        &self,
        input: DeleteItemInput,
    ) -> impl Future<Output = StoreResult<WriteOutput>> + Send;
    fn query(&self, input: QueryInput) -> impl Future<Output = StoreResult<QueryOutput>> + Send;
    /// Query, answering with the items in their encoded form
    /// ([`postbox_item::encode_item`]) instead of built: the same request,
    /// validation, errors, pages (Limit, 1 MB, LastEvaluatedKey) and
    /// consistency as [`query`](ItemStore::query). It serves readers of long
    /// ranges that look at a few attributes of each item
    /// ([`postbox_item::encoded_attributes`] reads them borrowed); a backend
    /// that keeps items encoded overrides it to skip building them. The
    /// default is `query` followed by an encode of each item, so every
    /// backend has it.
    fn query_encoded(
        &self,
        input: QueryInput,
    ) -> impl Future<Output = StoreResult<EncodedQueryOutput>> + Send {
        let query = self.query(input);
        async move { Ok(EncodedQueryOutput::from(query.await?)) }
    }
    fn scan(&self, input: ScanInput) -> impl Future<Output = StoreResult<QueryOutput>> + Send;
    /// Every item Query `input` matches, page after page from its
    /// ExclusiveStartKey to the last (for results known to be small).
    fn query_all(&self, input: QueryInput) -> impl Future<Output = StoreResult<Vec<Item>>> + Send {
        let start = input.exclusive_start_key.clone();
        every_page(start, move |start| {
            self.query(QueryInput {
                exclusive_start_key: start,
                ..input.clone()
            })
        })
    }
    /// Every item Scan `input` finds, page after page (for small tables).
    fn scan_all(&self, input: ScanInput) -> impl Future<Output = StoreResult<Vec<Item>>> + Send {
        let start = input.exclusive_start_key.clone();
        every_page(start, move |start| {
            self.scan(ScanInput {
                exclusive_start_key: start,
                ..input.clone()
            })
        })
    }
    fn batch_get_item(
        &self,
        input: BatchGetItemInput,
    ) -> impl Future<Output = StoreResult<BatchGetItemOutput>> + Send;
    fn batch_write_item(
        &self,
        input: BatchWriteItemInput,
    ) -> impl Future<Output = StoreResult<BatchWriteItemOutput>> + Send;
    fn transact_write_items(
        &self,
        input: TransactWriteItemsInput,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn transact_get_items(
        &self,
        input: TransactGetItemsInput,
    ) -> impl Future<Output = StoreResult<TransactGetItemsOutput>> + Send;
}

/// Change streams: one ordered record per committed change of a
/// stream-enabled table, and named readers with durable checkpoints.
pub trait ChangeStreams: Send + Sync + 'static {
    /// Records of `table_name`'s stream with sequence numbers greater than
    /// `after` (0 = from the oldest retained), at most `limit`, in order.
    /// Errors with `TrimmedData` when `after` is older than the retention.
    fn read_stream(
        &self,
        table_name: &str,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<StreamRecord>>> + Send;
    /// The newest sequence number of the stream (0 when empty).
    fn stream_head(&self, table_name: &str) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Waits until the stream has a record after `after`, or `timeout` passes,
    /// without polling. Returns whether new records exist.
    fn wait_for_records(
        &self,
        table_name: &str,
        after: u64,
        timeout: Duration,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// The durable checkpoint of reader `reader` on `table_name`'s stream.
    fn checkpoint(
        &self,
        table_name: &str,
        reader: &str,
    ) -> impl Future<Output = StoreResult<Option<u64>>> + Send;
    /// Durably moves reader `reader`'s checkpoint to `sequence_number`.
    fn set_checkpoint(
        &self,
        table_name: &str,
        reader: &str,
        sequence_number: u64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

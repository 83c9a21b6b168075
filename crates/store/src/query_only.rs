//! [`QueryOnly`]: a store whose reads of encoded items go through Query.

use std::sync::Arc;

use crate::api::*;
use crate::{ItemStore, StoreResult};

/// An [`ItemStore`] that forwards every call to the store it wraps but
/// keeps the trait's default `query_encoded` (Query, then an encode of each
/// item): what a backend without its own `query_encoded` does. Tests and
/// benchmarks compare the two read paths with it; callers must see the
/// same answers through both.
pub struct QueryOnly<S>(pub Arc<S>);

impl<S: ItemStore> ItemStore for QueryOnly<S> {
    async fn create_table(&self, input: CreateTableInput) -> StoreResult<TableDescription> {
        self.0.create_table(input).await
    }
    async fn describe_table(&self, t: &str) -> StoreResult<TableDescription> {
        self.0.describe_table(t).await
    }
    async fn key_schema(&self, t: &str) -> StoreResult<Vec<KeySchemaElement>> {
        self.0.key_schema(t).await
    }
    async fn describe_table_uncounted(&self, t: &str) -> StoreResult<TableDescription> {
        self.0.describe_table_uncounted(t).await
    }
    async fn delete_table(&self, t: &str) -> StoreResult<TableDescription> {
        self.0.delete_table(t).await
    }
    async fn list_tables(&self) -> StoreResult<Vec<String>> {
        self.0.list_tables().await
    }
    async fn update_time_to_live(
        &self,
        t: &str,
        spec: TimeToLiveSpecification,
    ) -> StoreResult<TimeToLiveSpecification> {
        self.0.update_time_to_live(t, spec).await
    }
    async fn describe_time_to_live(&self, t: &str) -> StoreResult<Option<String>> {
        self.0.describe_time_to_live(t).await
    }
    async fn get_item(&self, input: GetItemInput) -> StoreResult<GetItemOutput> {
        self.0.get_item(input).await
    }
    async fn get_item_committed(&self, input: GetItemInput) -> StoreResult<GetItemOutput> {
        self.0.get_item_committed(input).await
    }
    async fn put_item(&self, input: PutItemInput) -> StoreResult<WriteOutput> {
        self.0.put_item(input).await
    }
    async fn update_item(&self, input: UpdateItemInput) -> StoreResult<WriteOutput> {
        self.0.update_item(input).await
    }
    async fn delete_item(&self, input: DeleteItemInput) -> StoreResult<WriteOutput> {
        self.0.delete_item(input).await
    }
    async fn query(&self, input: QueryInput) -> StoreResult<QueryOutput> {
        self.0.query(input).await
    }
    async fn scan(&self, input: ScanInput) -> StoreResult<QueryOutput> {
        self.0.scan(input).await
    }
    async fn batch_get_item(&self, input: BatchGetItemInput) -> StoreResult<BatchGetItemOutput> {
        self.0.batch_get_item(input).await
    }
    async fn batch_write_item(
        &self,
        input: BatchWriteItemInput,
    ) -> StoreResult<BatchWriteItemOutput> {
        self.0.batch_write_item(input).await
    }
    async fn transact_write_items(&self, input: TransactWriteItemsInput) -> StoreResult<()> {
        self.0.transact_write_items(input).await
    }
    async fn transact_get_items(
        &self,
        input: TransactGetItemsInput,
    ) -> StoreResult<TransactGetItemsOutput> {
        self.0.transact_get_items(input).await
    }
}

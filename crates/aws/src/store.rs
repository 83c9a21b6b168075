//! [`DynamoStore`]: the item store on DynamoDB, each [`ItemStore`] call one
//! (or, for a conflicted transaction, a few) DynamoDB operation through the
//! SDK, names prefixed by the stack's prefix.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types as sdk;
use postbox_store::api::*;
use postbox_store::{ItemStore, StoreError, StoreResult};

use crate::config::sdk_config;
use crate::convert::{from_sdk_item, from_sdk_opt, to_sdk_item, to_sdk_names, to_sdk_values};
use crate::sdk_counters::{self, SdkStats};
use crate::shapes::{key_of, on_failure, page, return_values, to_json, wire};
use crate::{error, shapes};

/// Most attempts of a transaction cancelled only by conflicts.
const CONFLICT_ATTEMPTS: u32 = 8;
/// First delay before retrying a conflicted transaction (doubled per
/// attempt, with full jitter).
const CONFLICT_BACKOFF: Duration = Duration::from_millis(10);

/// What the backend has retried since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DynamoStats {
    /// Transactions tried again after a `TransactionConflict`.
    pub conflict_retries: u64,
    /// Transactions given up after [`CONFLICT_ATTEMPTS`] conflicts.
    pub conflicts_given_up: u64,
    /// Write capacity units DynamoDB reported for the writes so far (every
    /// write asks for `ReturnConsumedCapacity = TOTAL`): what the writes
    /// cost in an account's bill.
    pub write_capacity_units: f64,
    /// What the SDK retried (throttling, transient failures), and how often
    /// DynamoDB throttled.
    pub sdk: SdkStats,
}

#[derive(Default)]
struct Counters {
    conflict_retries: AtomicU64,
    conflicts_given_up: AtomicU64,
    /// Thousandths of a write capacity unit.
    write_milli_units: AtomicU64,
}

/// The item store on DynamoDB. Cheap to clone.
#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    prefix: Arc<str>,
    counters: Arc<Counters>,
    sdk: sdk_counters::SdkCounters,
}

impl std::fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl DynamoStore {
    /// A store on the tables of `config`'s account whose names start with
    /// `prefix` (may be empty).
    pub fn new(config: &aws_config::SdkConfig, prefix: &str) -> DynamoStore {
        let sdk = sdk_counters::SdkCounters::default();
        DynamoStore {
            client: Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(config)
                    .interceptor(sdk.clone())
                    .build(),
            ),
            prefix: prefix.into(),
            counters: Arc::default(),
            sdk,
        }
    }

    /// [`DynamoStore::new`] with the configuration from the environment
    /// ([`sdk_config`]). Fails, naming what was tried, when no region is
    /// configured.
    pub async fn from_env(prefix: &str) -> StoreResult<DynamoStore> {
        let config = sdk_config().await;
        if config.region().is_none() {
            return Err(StoreError::Validation(
                "no AWS region: set AWS_REGION (or a region in the profile of AWS_PROFILE)".into(),
            ));
        }
        Ok(DynamoStore::new(&config, prefix))
    }

    /// The SDK client, for what the trait does not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// What was retried so far.
    pub fn stats(&self) -> DynamoStats {
        DynamoStats {
            conflict_retries: self.counters.conflict_retries.load(Ordering::Relaxed),
            conflicts_given_up: self.counters.conflicts_given_up.load(Ordering::Relaxed),
            write_capacity_units: self.counters.write_milli_units.load(Ordering::Relaxed) as f64
                / 1000.0,
            sdk: self.sdk.stats(),
        }
    }

    /// A single-item write's answer: its capacity counted, its returned
    /// attributes.
    fn written(
        &self,
        capacity: Option<&sdk::ConsumedCapacity>,
        attributes: Option<&std::collections::HashMap<String, sdk::AttributeValue>>,
    ) -> StoreResult<WriteOutput> {
        self.consumed(capacity);
        Ok(WriteOutput {
            attributes: from_sdk_opt(attributes)?,
        })
    }

    /// Counts the capacity a write consumed.
    fn consumed<'a>(&self, capacity: impl IntoIterator<Item = &'a sdk::ConsumedCapacity>) {
        let units: f64 = capacity
            .into_iter()
            .map(|c| c.capacity_units().unwrap_or(0.0))
            .sum();
        self.counters
            .write_milli_units
            .fetch_add((units * 1000.0).round() as u64, Ordering::Relaxed);
    }

    /// The DynamoDB name of Postbox's table `name`.
    pub fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Postbox's name of DynamoDB's table `name`, if it has the prefix.
    pub(crate) fn unprefixed<'a>(&self, name: &'a str) -> Option<&'a str> {
        name.strip_prefix(&*self.prefix)
    }
}

impl ItemStore for DynamoStore {
    async fn create_table(&self, input: CreateTableInput) -> StoreResult<TableDescription> {
        if input.global_secondary_indexes.is_some() || input.local_secondary_indexes.is_some() {
            return Err(StoreError::validation(
                "CreateTable on the AWS backend creates Postbox's own tables, which have no secondary indexes; create indexed tables of your own with the AWS tools",
            ));
        }
        let mut req = self
            .client
            .create_table()
            .table_name(self.name(&input.table_name))
            .set_key_schema(Some(
                input
                    .key_schema
                    .iter()
                    .map(|k| {
                        sdk::KeySchemaElement::builder()
                            .attribute_name(&k.attribute_name)
                            .key_type(sdk::KeyType::from(wire(&k.key_type).as_str()))
                            .build()
                            .map_err(|e| StoreError::Validation(e.to_string()))
                    })
                    .collect::<StoreResult<Vec<_>>>()?,
            ))
            .set_attribute_definitions(Some(
                input
                    .attribute_definitions
                    .iter()
                    .map(|a| {
                        sdk::AttributeDefinition::builder()
                            .attribute_name(&a.attribute_name)
                            .attribute_type(sdk::ScalarAttributeType::from(
                                wire(&a.attribute_type).as_str(),
                            ))
                            .build()
                            .map_err(|e| StoreError::Validation(e.to_string()))
                    })
                    .collect::<StoreResult<Vec<_>>>()?,
            ));
        match (&input.billing_mode, &input.provisioned_throughput) {
            (Some(mode), _) if mode != "PAY_PER_REQUEST" => {
                req = req.billing_mode(sdk::BillingMode::from(mode.as_str()));
            }
            (None, Some(_)) => {}
            _ => req = req.billing_mode(sdk::BillingMode::PayPerRequest),
        }
        if let Some(p) = &input.provisioned_throughput {
            req = req.provisioned_throughput(shapes::sdk_throughput(p)?);
        }
        if let Some(s) = &input.stream_specification {
            req = req.stream_specification(shapes::sdk_stream(s)?);
        }
        if let Some(tags) = &input.tags {
            req = req.set_tags(Some(shapes::sdk_tags(tags)?));
        }
        let out = req.send().await.map_err(|e| error::map("CreateTable", e))?;
        self.describe(out.table_description().ok_or_else(|| {
            StoreError::Storage("CreateTable answered no TableDescription".into())
        })?)
    }

    async fn describe_table(&self, table_name: &str) -> StoreResult<TableDescription> {
        let out = self
            .client
            .describe_table()
            .table_name(self.name(table_name))
            .send()
            .await
            .map_err(|e| error::map("DescribeTable", e))?;
        self.describe(
            out.table()
                .ok_or_else(|| StoreError::Storage("DescribeTable answered no Table".into()))?,
        )
    }

    async fn delete_table(&self, table_name: &str) -> StoreResult<TableDescription> {
        let out = self
            .client
            .delete_table()
            .table_name(self.name(table_name))
            .send()
            .await
            .map_err(|e| error::map("DeleteTable", e))?;
        self.describe(out.table_description().ok_or_else(|| {
            StoreError::Storage("DeleteTable answered no TableDescription".into())
        })?)
    }

    async fn list_tables(&self) -> StoreResult<Vec<String>> {
        let mut names = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .list_tables()
                .set_exclusive_start_table_name(start.take())
                .send()
                .await
                .map_err(|e| error::map("ListTables", e))?;
            names.extend(
                out.table_names()
                    .iter()
                    .filter_map(|n| self.unprefixed(n).map(str::to_owned)),
            );
            match out.last_evaluated_table_name() {
                Some(last) => start = Some(last.to_owned()),
                None => return Ok(names),
            }
        }
    }

    async fn update_time_to_live(
        &self,
        table_name: &str,
        spec: TimeToLiveSpecification,
    ) -> StoreResult<TimeToLiveSpecification> {
        self.client
            .update_time_to_live()
            .table_name(self.name(table_name))
            .time_to_live_specification(
                sdk::TimeToLiveSpecification::builder()
                    .enabled(spec.enabled)
                    .attribute_name(&spec.attribute_name)
                    .build()
                    .map_err(|e| StoreError::Validation(e.to_string()))?,
            )
            .send()
            .await
            .map_err(|e| error::map("UpdateTimeToLive", e))?;
        Ok(spec)
    }

    async fn update_table(&self, input: UpdateTableInput) -> StoreResult<TableDescription> {
        if let Some(name) = input.other.keys().next() {
            return Err(StoreError::validation(format!(
                "UpdateTable: {name} is not supported by Postbox's AWS backend (it changes billing mode, provisioned throughput and the stream)"
            )));
        }
        if input.global_secondary_index_updates.is_some() {
            return Err(StoreError::validation(
                "UpdateTable on the AWS backend changes Postbox's own tables, which have no secondary indexes; change indexes of your own tables with the AWS tools",
            ));
        }
        let mut req = self
            .client
            .update_table()
            .table_name(self.name(&input.table_name));
        if let Some(mode) = &input.billing_mode {
            req = req.billing_mode(sdk::BillingMode::from(mode.as_str()));
        }
        if let Some(p) = &input.provisioned_throughput {
            req = req.provisioned_throughput(shapes::sdk_throughput(p)?);
        }
        if let Some(s) = &input.stream_specification {
            req = req.stream_specification(shapes::sdk_stream(s)?);
        }
        let out = req.send().await.map_err(|e| error::map("UpdateTable", e))?;
        self.describe(out.table_description().ok_or_else(|| {
            StoreError::Storage("UpdateTable answered no TableDescription".into())
        })?)
    }

    async fn tag_resource(&self, arn: &str, tags: Vec<Tag>) -> StoreResult<()> {
        self.client
            .tag_resource()
            .resource_arn(arn)
            .set_tags(Some(shapes::sdk_tags(&tags)?))
            .send()
            .await
            .map_err(|e| error::map("TagResource", e))?;
        Ok(())
    }

    async fn untag_resource(&self, arn: &str, keys: Vec<String>) -> StoreResult<()> {
        self.client
            .untag_resource()
            .resource_arn(arn)
            .set_tag_keys(Some(keys))
            .send()
            .await
            .map_err(|e| error::map("UntagResource", e))?;
        Ok(())
    }

    async fn list_tags_of_resource(&self, arn: &str) -> StoreResult<Vec<Tag>> {
        let mut tags = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let out = self
                .client
                .list_tags_of_resource()
                .resource_arn(arn)
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| error::map("ListTagsOfResource", e))?;
            tags.extend(out.tags().iter().map(|t| Tag {
                key: t.key().to_owned(),
                value: t.value().to_owned(),
            }));
            match out.next_token() {
                Some(token) => next = Some(token.to_owned()),
                None => return Ok(tags),
            }
        }
    }

    async fn describe_time_to_live(&self, table_name: &str) -> StoreResult<Option<String>> {
        let out = self
            .client
            .describe_time_to_live()
            .table_name(self.name(table_name))
            .send()
            .await
            .map_err(|e| error::map("DescribeTimeToLive", e))?;
        Ok(out.time_to_live_description().and_then(|d| {
            let on = matches!(
                d.time_to_live_status(),
                Some(sdk::TimeToLiveStatus::Enabled | sdk::TimeToLiveStatus::Enabling)
            );
            on.then(|| d.attribute_name().map(str::to_owned)).flatten()
        }))
    }

    async fn get_item(&self, mut input: GetItemInput) -> StoreResult<GetItemOutput> {
        postbox_store::legacy::get_item(&mut input)?;
        let out = self
            .client
            .get_item()
            .table_name(self.name(&input.table_name))
            .set_key(Some(key_of(&input.key)))
            .set_projection_expression(input.projection_expression)
            .set_expression_attribute_names(to_sdk_names(input.expression_attribute_names.as_ref()))
            .set_consistent_read(input.consistent_read)
            .send()
            .await
            .map_err(|e| error::map("GetItem", e))?;
        Ok(GetItemOutput {
            item: from_sdk_opt(out.item())?,
        })
    }

    async fn put_item(&self, mut input: PutItemInput) -> StoreResult<WriteOutput> {
        postbox_store::legacy::put_item(&mut input)?;
        let out = self
            .client
            .put_item()
            .table_name(self.name(&input.table_name))
            .set_item(Some(to_sdk_item(&input.item)))
            .set_condition_expression(input.condition_expression)
            .set_expression_attribute_names(to_sdk_names(input.expression_attribute_names.as_ref()))
            .set_expression_attribute_values(to_sdk_values(
                input.expression_attribute_values.as_ref(),
            ))
            .return_values(return_values(input.return_values))
            .return_values_on_condition_check_failure(on_failure(
                input.return_values_on_condition_check_failure,
            ))
            .return_consumed_capacity(sdk::ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(c)) => {
                    error::condition_failed(c.item())
                }
                _ => error::map("PutItem", e),
            })?;
        self.written(out.consumed_capacity(), out.attributes())
    }

    async fn update_item(&self, mut input: UpdateItemInput) -> StoreResult<WriteOutput> {
        postbox_store::legacy::update_item(&mut input)?;
        let out = self
            .client
            .update_item()
            .table_name(self.name(&input.table_name))
            .set_key(Some(key_of(&input.key)))
            .set_update_expression(input.update_expression)
            .set_condition_expression(input.condition_expression)
            .set_expression_attribute_names(to_sdk_names(input.expression_attribute_names.as_ref()))
            .set_expression_attribute_values(to_sdk_values(
                input.expression_attribute_values.as_ref(),
            ))
            .return_values(return_values(input.return_values))
            .return_values_on_condition_check_failure(on_failure(
                input.return_values_on_condition_check_failure,
            ))
            .return_consumed_capacity(sdk::ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    error::condition_failed(c.item())
                }
                _ => error::map("UpdateItem", e),
            })?;
        self.written(out.consumed_capacity(), out.attributes())
    }

    async fn delete_item(&self, mut input: DeleteItemInput) -> StoreResult<WriteOutput> {
        postbox_store::legacy::delete_item(&mut input)?;
        let out = self
            .client
            .delete_item()
            .table_name(self.name(&input.table_name))
            .set_key(Some(key_of(&input.key)))
            .set_condition_expression(input.condition_expression)
            .set_expression_attribute_names(to_sdk_names(input.expression_attribute_names.as_ref()))
            .set_expression_attribute_values(to_sdk_values(
                input.expression_attribute_values.as_ref(),
            ))
            .return_values(return_values(input.return_values))
            .return_values_on_condition_check_failure(on_failure(
                input.return_values_on_condition_check_failure,
            ))
            .return_consumed_capacity(sdk::ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(c)) => {
                    error::condition_failed(c.item())
                }
                _ => error::map("DeleteItem", e),
            })?;
        self.written(out.consumed_capacity(), out.attributes())
    }

    async fn query(&self, mut input: QueryInput) -> StoreResult<QueryOutput> {
        postbox_store::legacy::query(&mut input)?;
        let out = self
            .client
            .query()
            .table_name(self.name(&input.table_name))
            .set_index_name(input.index_name)
            .set_key_condition_expression(input.key_condition_expression)
            .set_filter_expression(input.filter_expression)
            .set_projection_expression(input.projection_expression)
            .set_expression_attribute_names(to_sdk_names(input.expression_attribute_names.as_ref()))
            .set_expression_attribute_values(to_sdk_values(
                input.expression_attribute_values.as_ref(),
            ))
            .set_scan_index_forward(input.scan_index_forward)
            .set_limit(input.limit.map(|l| l.clamp(0, i32::MAX as i64) as i32))
            .set_exclusive_start_key(input.exclusive_start_key.as_ref().map(to_sdk_item))
            .set_select(input.select.map(|s| sdk::Select::from(wire(&s).as_str())))
            .set_consistent_read(input.consistent_read)
            .send()
            .await
            .map_err(|e| error::map("Query", e))?;
        page(
            input.select,
            out.items(),
            out.count(),
            out.scanned_count(),
            out.last_evaluated_key(),
        )
    }

    async fn scan(&self, mut input: ScanInput) -> StoreResult<QueryOutput> {
        postbox_store::legacy::scan(&mut input)?;
        let out = self
            .client
            .scan()
            .table_name(self.name(&input.table_name))
            .set_index_name(input.index_name)
            .set_filter_expression(input.filter_expression)
            .set_projection_expression(input.projection_expression)
            .set_expression_attribute_names(to_sdk_names(input.expression_attribute_names.as_ref()))
            .set_expression_attribute_values(to_sdk_values(
                input.expression_attribute_values.as_ref(),
            ))
            .set_limit(input.limit.map(|l| l.clamp(0, i32::MAX as i64) as i32))
            .set_exclusive_start_key(input.exclusive_start_key.as_ref().map(to_sdk_item))
            .set_select(input.select.map(|s| sdk::Select::from(wire(&s).as_str())))
            .set_segment(
                input
                    .segment
                    .map(|s| s.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            )
            .set_total_segments(
                input
                    .total_segments
                    .map(|s| s.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            )
            .set_consistent_read(input.consistent_read)
            .send()
            .await
            .map_err(|e| error::map("Scan", e))?;
        page(
            input.select,
            out.items(),
            out.count(),
            out.scanned_count(),
            out.last_evaluated_key(),
        )
    }

    async fn batch_get_item(&self, input: BatchGetItemInput) -> StoreResult<BatchGetItemOutput> {
        let mut request = std::collections::HashMap::new();
        for (table, ka) in &input.request_items {
            let keys = sdk::KeysAndAttributes::builder()
                .set_keys(Some(ka.keys.iter().map(key_of).collect()))
                .set_projection_expression(ka.projection_expression.clone())
                .set_expression_attribute_names(to_sdk_names(
                    ka.expression_attribute_names.as_ref(),
                ))
                .set_consistent_read(ka.consistent_read)
                .build()
                .map_err(|e| StoreError::Validation(e.to_string()))?;
            request.insert(self.name(table), keys);
        }
        let out = self
            .client
            .batch_get_item()
            .set_request_items(Some(request))
            .send()
            .await
            .map_err(|e| error::map("BatchGetItem", e))?;
        let mut responses = BTreeMap::new();
        for (table, items) in out.responses().into_iter().flatten() {
            let name = self.unprefixed(table).unwrap_or(table).to_owned();
            let items = items
                .iter()
                .map(from_sdk_item)
                .collect::<StoreResult<Vec<_>>>()?;
            responses.insert(name, items);
        }
        let mut unprocessed_keys = BTreeMap::new();
        for (table, ka) in out.unprocessed_keys().into_iter().flatten() {
            let name = self.unprefixed(table).unwrap_or(table).to_owned();
            let left = KeysAndAttributes {
                keys: ka
                    .keys()
                    .iter()
                    .map(from_sdk_item)
                    .collect::<StoreResult<_>>()?,
                projection_expression: ka.projection_expression().map(str::to_owned),
                expression_attribute_names: ka
                    .expression_attribute_names()
                    .map(|n| n.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
                consistent_read: ka.consistent_read(),
            };
            unprocessed_keys.insert(name, to_json(&left)?);
        }
        Ok(BatchGetItemOutput {
            responses,
            unprocessed_keys,
        })
    }

    async fn batch_write_item(
        &self,
        input: BatchWriteItemInput,
    ) -> StoreResult<BatchWriteItemOutput> {
        let mut request = std::collections::HashMap::new();
        for (table, writes) in &input.request_items {
            let writes = writes
                .iter()
                .map(|w| {
                    let mut b = sdk::WriteRequest::builder();
                    if let Some(p) = &w.put_request {
                        b = b.put_request(
                            sdk::PutRequest::builder()
                                .set_item(Some(to_sdk_item(&p.item)))
                                .build()
                                .map_err(|e| StoreError::Validation(e.to_string()))?,
                        );
                    }
                    if let Some(d) = &w.delete_request {
                        b = b.delete_request(
                            sdk::DeleteRequest::builder()
                                .set_key(Some(key_of(&d.key)))
                                .build()
                                .map_err(|e| StoreError::Validation(e.to_string()))?,
                        );
                    }
                    Ok(b.build())
                })
                .collect::<StoreResult<Vec<_>>>()?;
            request.insert(self.name(table), writes);
        }
        let out = self
            .client
            .batch_write_item()
            .set_request_items(Some(request))
            .return_consumed_capacity(sdk::ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| error::map("BatchWriteItem", e))?;
        self.consumed(out.consumed_capacity());
        let mut unprocessed_items = BTreeMap::new();
        for (table, writes) in out.unprocessed_items().into_iter().flatten() {
            let name = self.unprefixed(table).unwrap_or(table).to_owned();
            let left = writes
                .iter()
                .map(|w| {
                    Ok(WriteRequest {
                        put_request: w
                            .put_request()
                            .map(|p| {
                                Ok::<_, StoreError>(PutRequest {
                                    item: from_sdk_item(p.item())?,
                                })
                            })
                            .transpose()?,
                        delete_request: w
                            .delete_request()
                            .map(|d| {
                                Ok::<_, StoreError>(DeleteRequest {
                                    key: from_sdk_item(d.key())?,
                                })
                            })
                            .transpose()?,
                    })
                })
                .collect::<StoreResult<Vec<_>>>()?;
            unprocessed_items.insert(name, to_json(&left)?);
        }
        Ok(BatchWriteItemOutput { unprocessed_items })
    }

    async fn transact_write_items(&self, input: TransactWriteItemsInput) -> StoreResult<()> {
        let items = input
            .transact_items
            .iter()
            .map(|i| self.transact_item(i))
            .collect::<StoreResult<Vec<_>>>()?;
        let mut attempt = 0;
        loop {
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .set_client_request_token(input.client_request_token.clone())
                .return_consumed_capacity(sdk::ReturnConsumedCapacity::Total)
                .send()
                .await;
            let e = match sent {
                Ok(out) => {
                    self.consumed(out.consumed_capacity());
                    return Ok(());
                }
                Err(e) => match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(t)) => {
                        error::cancelled(t.cancellation_reasons())
                    }
                    _ => error::map("TransactWriteItems", e),
                },
            };
            let conflicted = matches!(&e, StoreError::TransactionCanceled { reasons } if error::only_conflicts(reasons));
            attempt += 1;
            if !conflicted {
                return Err(e);
            }
            if attempt >= CONFLICT_ATTEMPTS {
                self.counters
                    .conflicts_given_up
                    .fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            self.counters
                .conflict_retries
                .fetch_add(1, Ordering::Relaxed);
            let cap = CONFLICT_BACKOFF.as_micros() as u64 * (1 << attempt.min(10));
            tokio::time::sleep(Duration::from_micros(fastrand::u64(0..=cap))).await;
        }
    }

    async fn transact_get_items(
        &self,
        input: TransactGetItemsInput,
    ) -> StoreResult<TransactGetItemsOutput> {
        let items = input
            .transact_items
            .iter()
            .map(|i| {
                let g = &i.get;
                Ok(sdk::TransactGetItem::builder()
                    .get(
                        sdk::Get::builder()
                            .table_name(self.name(&g.table_name))
                            .set_key(Some(key_of(&g.key)))
                            .set_projection_expression(g.projection_expression.clone())
                            .set_expression_attribute_names(to_sdk_names(
                                g.expression_attribute_names.as_ref(),
                            ))
                            .build()
                            .map_err(|e| StoreError::Validation(e.to_string()))?,
                    )
                    .build())
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let out = self
            .client
            .transact_get_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| error::map("TransactGetItems", e))?;
        Ok(TransactGetItemsOutput {
            responses: out
                .responses()
                .iter()
                .map(|r| {
                    Ok(ItemResponse {
                        item: from_sdk_opt(r.item())?,
                    })
                })
                .collect::<StoreResult<_>>()?,
        })
    }
}

//! What [`EmbeddedStore`] answers as an [`ItemStore`] and as
//! [`ChangeStreams`]: each operation planned from the catalog and run on a
//! read snapshot (`read_ops`) or in the writer's next group commit
//! (`write_ops`, `submit`).

use std::collections::BTreeMap;

use super::*;

impl EmbeddedStore {
    /// Item counts and sizes of a table and its indexes, counted from a
    /// snapshot on a blocking thread (the count visits every row of the
    /// table, so it must not hold a runtime thread). Only DescribeTable,
    /// UpdateTable and DeleteTable ask for it; request checks read the
    /// catalog ([`ItemStore::key_schema`]).
    async fn table_stats(&self, meta: &Arc<Meta>) -> StoreResult<Counts> {
        let txn = self.snapshot().await?;
        let meta = meta.clone();
        let counts = tokio::task::spawn_blocking(move || count_rows(&txn, &meta))
            .await
            .map_err(storage_err)??;
        self.count_ranged(counts.table.0 + counts.indexes.iter().map(|c| c.0).sum::<u64>());
        Ok(counts)
    }
}

/// Item counts and sizes of `meta`'s table and indexes in `txn`. An index's
/// size is that of the items as it projects them.
fn count_rows(txn: &ReadTransaction, meta: &Meta) -> StoreResult<Counts> {
    let mut counts = Counts {
        indexes: vec![(0, 0); meta.indexes.len()],
        ..Counts::default()
    };
    let Some(items) = tables::open_if_present(txn, tables::ITEMS)? else {
        return Ok(counts);
    };
    let rows = |id: u32| {
        let prefix = keys::table_prefix(id);
        let end = keys::prefix_end(&prefix);
        items
            .range(prefix.as_slice()..end.as_slice())
            .map_err(storage_err)
    };
    for row in rows(meta.id)? {
        let (_, v) = row.map_err(storage_err)?;
        counts.table.0 += 1;
        counts.table.1 += row::item_bytes(v.value()).len() as u64;
    }
    for (n, index) in meta.indexes.iter().enumerate() {
        // An index row holds its item's key.
        for row in rows(index.id)? {
            let (_, item_key) = row.map_err(storage_err)?;
            let Some(v) = items.get(item_key.value()).map_err(storage_err)? else {
                continue;
            };
            let item = row::item(v.value())?;
            counts.indexes[n].0 += 1;
            counts.indexes[n].1 += postbox_item::item_size(&index.project(meta, &item)) as u64;
        }
    }
    Ok(counts)
}

impl EmbeddedStore {
    /// Replaces the tags of table `name` (which `arn` names) by what `f`
    /// makes of them, in one commit.
    async fn retag(
        &self,
        arn: &str,
        name: String,
        f: impl FnOnce(&BTreeMap<String, String>) -> StoreResult<BTreeMap<String, String>>
        + Send
        + 'static,
    ) -> StoreResult<()> {
        let arn = arn.to_owned();
        self.submit(move |ctx| {
            let meta = ctx.table(&name).map_err(|_| crate::tags::not_found(&arn))?;
            let tags = f(&meta.tags)?;
            ctx.replace_meta(
                Meta {
                    tags,
                    ..(*meta).clone()
                },
                false,
            )
        })
        .await?;
        Ok(())
    }
}

impl ItemStore for EmbeddedStore {
    async fn create_table(&self, input: CreateTableInput) -> StoreResult<TableDescription> {
        Meta::from_create(&input, 0, 0)?;
        let meta = self.submit(move |ctx| ctx.create_table(&input)).await?;
        Ok(meta.describe("ACTIVE", &Counts::default()))
    }

    async fn describe_table(&self, table_name: &str) -> StoreResult<TableDescription> {
        let meta = self.catalog().get(table_name)?;
        let counts = self.table_stats(&meta).await?;
        Ok(meta.describe("ACTIVE", &counts))
    }

    async fn describe_table_uncounted(&self, table_name: &str) -> StoreResult<TableDescription> {
        Ok(self
            .catalog()
            .get(table_name)?
            .describe("ACTIVE", &Counts::default()))
    }

    async fn key_schema(&self, table_name: &str) -> StoreResult<Vec<KeySchemaElement>> {
        Ok(self.catalog().get(table_name)?.key_schema())
    }

    async fn delete_table(&self, table_name: &str) -> StoreResult<TableDescription> {
        let meta = self.catalog().get(table_name)?;
        let counts = self.table_stats(&meta).await?;
        let name = table_name.to_owned();
        let meta = self
            .submit(move |ctx| {
                let meta = ctx.table(&name)?;
                ctx.delete_table(&meta)?;
                Ok(meta)
            })
            .await?;
        Ok(meta.describe("DELETING", &counts))
    }

    async fn list_tables(&self) -> StoreResult<Vec<String>> {
        Ok(self
            .catalog()
            .all()
            .iter()
            .map(|m| m.name.clone())
            .collect())
    }

    async fn update_time_to_live(
        &self,
        table_name: &str,
        spec: TimeToLiveSpecification,
    ) -> StoreResult<TimeToLiveSpecification> {
        let meta = self.catalog().get(table_name)?;
        if spec.attribute_name.is_empty() || spec.attribute_name.len() > 255 {
            return Err(StoreError::validation(
                "1 validation error detected: Value at 'timeToLiveSpecification.attributeName' failed to satisfy constraint: Member must have length between 1 and 255",
            ));
        }
        match (&meta.ttl_attribute, spec.enabled) {
            (Some(current), true) if *current != spec.attribute_name => {
                return Err(StoreError::validation(format!(
                    "TimeToLive is active on a different AttributeName: current AttributeName is {current}"
                )));
            }
            (Some(_), true) => return Err(StoreError::validation("TimeToLive is already enabled")),
            (None, false) => return Err(StoreError::validation("TimeToLive is already disabled")),
            (Some(current), false) if *current != spec.attribute_name => {
                return Err(StoreError::validation(format!(
                    "TimeToLive is active on a different AttributeName: current AttributeName is {current}"
                )));
            }
            _ => {}
        }
        let name = table_name.to_owned();
        let attribute = spec.enabled.then(|| spec.attribute_name.clone());
        self.submit(move |ctx| {
            let meta = ctx.table(&name)?;
            ctx.set_ttl(&meta, attribute)
        })
        .await?;
        Ok(spec)
    }

    async fn describe_time_to_live(&self, table_name: &str) -> StoreResult<Option<String>> {
        Ok(self.catalog().get(table_name)?.ttl_attribute.clone())
    }

    async fn update_table(&self, input: UpdateTableInput) -> StoreResult<TableDescription> {
        let meta = self.catalog().get(&input.table_name)?;
        meta.updated(&input, 0)?;
        let meta = self
            .submit(move |ctx| {
                let meta = ctx.table(&input.table_name)?;
                let (mut next, stream_off) = meta.updated(&input, ctx.now_ms())?;
                ctx.change_indexes(&meta, &mut next)?;
                ctx.replace_meta(next, stream_off)
            })
            .await?;
        if meta.indexes.iter().any(|i| i.backfilled_through.is_some()) {
            // The backfill runs in chunks behind the answer; the index
            // reads as CREATING until it is done.
            let inner = self.running.inner.clone();
            let table = meta.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(e) = index::backfill(&inner, &table) {
                    tracing::warn!(table = %table.name, error = %e, "index backfill stopped; the sweeper resumes it");
                }
            });
        }
        let counts = self.table_stats(&meta).await?;
        Ok(meta.describe("ACTIVE", &counts))
    }

    async fn tag_resource(&self, arn: &str, tags: Vec<Tag>) -> StoreResult<()> {
        let name = crate::tags::table_of_arn(arn)?.to_owned();
        crate::tags::check_tags(&tags)?;
        if tags.is_empty() {
            return Err(StoreError::validation(
                "1 validation error detected: Value '[]' at 'tags' failed to satisfy constraint: Member must have length greater than or equal to 1",
            ));
        }
        if let Some(asked) = tags.iter().find(|t| t.key == super::arrival::TAG) {
            let meta = self
                .catalog()
                .get(&name)
                .map_err(|_| crate::tags::not_found(arn))?;
            let order = match meta.arrival_order {
                true => super::arrival::ARRIVAL,
                false => super::arrival::KEY,
            };
            if asked.value != order {
                return Err(StoreError::validation(format!(
                    "Table {name} keeps its rows in {order} order, which is set when a table is created: the tag {} cannot change it",
                    super::arrival::TAG
                )));
            }
        }
        self.retag(arn, name, move |current| {
            crate::tags::merged(current, &tags)
        })
        .await
    }

    async fn untag_resource(&self, arn: &str, keys: Vec<String>) -> StoreResult<()> {
        let name = crate::tags::table_of_arn(arn)?.to_owned();
        crate::tags::check_keys(&keys)?;
        self.retag(arn, name, move |current| {
            let mut tags = current.clone();
            for k in &keys {
                tags.remove(k);
            }
            Ok(tags)
        })
        .await
    }

    async fn list_tags_of_resource(&self, arn: &str) -> StoreResult<Vec<Tag>> {
        let name = crate::tags::table_of_arn(arn)?;
        let meta = self
            .catalog()
            .get(name)
            .map_err(|_| crate::tags::not_found(arn))?;
        Ok(meta
            .tags
            .iter()
            .map(|(key, value)| Tag {
                key: key.clone(),
                value: value.clone(),
            })
            .collect())
    }

    async fn get_item(&self, input: GetItemInput) -> StoreResult<GetItemOutput> {
        read_ops::get_item(
            &self.snapshot().await?,
            self.catalog(),
            self.now_ms(),
            input,
        )
    }

    fn change_count(&self, table_name: &str) -> Option<u64> {
        EmbeddedStore::change_count(self, table_name)
    }

    async fn get_item_committed(&self, input: GetItemInput) -> StoreResult<GetItemOutput> {
        read_ops::get_item(
            &self.committed_snapshot()?,
            self.catalog(),
            self.now_ms(),
            input,
        )
    }

    async fn put_item(&self, input: PutItemInput) -> StoreResult<WriteOutput> {
        let plan = write_ops::SingleWrite::put(self.catalog(), input)?;
        self.submit(move |ctx| plan.run(ctx)).await
    }

    async fn update_item(&self, input: UpdateItemInput) -> StoreResult<WriteOutput> {
        let plan = write_ops::SingleWrite::update(self.catalog(), input)?;
        self.submit(move |ctx| plan.run(ctx)).await
    }

    async fn update_item_unsynced(&self, input: UpdateItemInput) -> StoreResult<WriteOutput> {
        let plan = write_ops::SingleWrite::update(self.catalog(), input)?;
        self.submit_unsynced(move |ctx| plan.run(ctx)).await
    }

    async fn put_item_unsynced(&self, input: PutItemInput) -> StoreResult<WriteOutput> {
        let plan = write_ops::SingleWrite::put(self.catalog(), input)?;
        self.submit_unsynced(move |ctx| plan.run(ctx)).await
    }

    async fn delete_item(&self, input: DeleteItemInput) -> StoreResult<WriteOutput> {
        let plan = write_ops::SingleWrite::delete(self.catalog(), input)?;
        self.submit(move |ctx| plan.run(ctx)).await
    }

    async fn query(&self, input: QueryInput) -> StoreResult<QueryOutput> {
        let out = range_ops::query(
            &self.snapshot().await?,
            self.catalog(),
            self.now_ms(),
            input,
        )?;
        self.count_ranged(out.scanned_count);
        Ok(out)
    }

    /// Reads the stored bytes straight from the snapshot: no item is built
    /// except to answer a filter or projection (see `read_ops`).
    async fn query_encoded(&self, input: QueryInput) -> StoreResult<EncodedQueryOutput> {
        let out = range_ops::query_encoded(
            &self.snapshot().await?,
            self.catalog(),
            self.now_ms(),
            input,
        )?;
        self.count_ranged(out.scanned_count);
        Ok(out)
    }

    async fn scan(&self, input: ScanInput) -> StoreResult<QueryOutput> {
        let out = range_ops::scan(
            &self.snapshot().await?,
            self.catalog(),
            self.now_ms(),
            input,
        )?;
        self.count_ranged(out.scanned_count);
        Ok(out)
    }

    async fn batch_get_item(&self, input: BatchGetItemInput) -> StoreResult<BatchGetItemOutput> {
        read_ops::batch_get_item(
            &self.snapshot().await?,
            self.catalog(),
            self.now_ms(),
            input,
        )
    }

    async fn batch_write_item(
        &self,
        input: BatchWriteItemInput,
    ) -> StoreResult<BatchWriteItemOutput> {
        let plan = write_ops::BatchWrite::compile(self.catalog(), input)?;
        self.submit(move |ctx| plan.run(ctx)).await
    }

    async fn transact_write_items(&self, input: TransactWriteItemsInput) -> StoreResult<()> {
        let token = match &input.client_request_token {
            None => None,
            Some(token) => Some(idempotency::Token::new(token, &input.transact_items)?),
        };
        let plan = write_ops::TransactWrite::compile(self.catalog(), input)?;
        self.submit(move |ctx| {
            let Some(token) = token else {
                return plan.run(ctx);
            };
            if token.check(ctx)? == idempotency::TokenUse::Replay {
                return Ok(());
            }
            plan.run(ctx)?;
            token.record(ctx)
        })
        .await
    }

    async fn transact_get_items(
        &self,
        input: TransactGetItemsInput,
    ) -> StoreResult<TransactGetItemsOutput> {
        read_ops::transact_get_items(
            &self.snapshot().await?,
            self.catalog(),
            self.now_ms(),
            input,
        )
    }
}

impl ChangeStreams for EmbeddedStore {
    async fn read_stream(
        &self,
        table_name: &str,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<StreamRecord>> {
        let meta = self.stream_meta(table_name)?;
        stream::read(
            &self.snapshot().await?,
            &meta,
            after,
            limit,
            &mut stream::every,
            Some(&self.inner().shared.recent),
        )
    }

    async fn stream_head(&self, table_name: &str) -> StoreResult<u64> {
        let meta = self.stream_meta(table_name)?;
        Ok(stream::head(&self.snapshot().await?, meta.id)?.0)
    }

    async fn wait_for_records(
        &self,
        table_name: &str,
        after: u64,
        timeout: Duration,
    ) -> StoreResult<bool> {
        self.wait_for_head(table_name, after, timeout, true).await
    }

    async fn checkpoint(&self, table_name: &str, reader: &str) -> StoreResult<Option<u64>> {
        let meta = self.catalog().get(table_name)?;
        let txn = self.snapshot().await?;
        let Some(table) = tables::open_if_present(&txn, tables::CHECKPOINTS)? else {
            return Ok(None);
        };
        Ok(table
            .get((meta.id, reader))
            .map_err(storage_err)?
            .map(|g| g.value()))
    }

    async fn set_checkpoint(
        &self,
        table_name: &str,
        reader: &str,
        sequence_number: u64,
    ) -> StoreResult<()> {
        self.catalog().get(table_name)?;
        let (table, reader) = (table_name.to_owned(), reader.to_owned());
        self.submit(move |ctx| ctx.set_checkpoint(&table, &reader, sequence_number))
            .await
    }
}

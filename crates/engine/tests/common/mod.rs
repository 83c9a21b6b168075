//! Shared test scaffolding: an embedded store on a temporary file, a small
//! catalog, an engine over them, a caller table `orders`, and `Faulty`, a
//! store wrapper that makes the head look contended.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, EngineOptions, Write};
use postbox_item::{AttributeValue, Item};
use postbox_store::api::*;
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore};
use postbox_store::{ItemStore, StoreError, StoreResult};

pub const EVENTS: &str = "postbox_events";
pub const ORDERS: &str = "orders";

pub const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]
schema = { type = "object", required = ["order"], properties = { order = { type = "string", minLength = 1 }, amount = { type = "integer", minimum = 0 } } }

[[event_types]]
name = "ORDER_SHIPPED"
producers = ["shipping"]

[[event_types]]
name = "AUDIT_NOTE"
producers = ["ops"]

[[subscriptions]]
name = "mirror"
glob = "ORDER_*"
lane = "DURABLE"
handler = "orders::mirror"
"#;

/// A store on a temporary file; the file lives as long as this.
pub struct TestStore {
    pub store: Arc<EmbeddedStore>,
    pub dir: tempfile::TempDir,
}

pub fn store_options(durability: Durability) -> EmbeddedOptions {
    EmbeddedOptions {
        durability,
        ttl_sweep_interval: Duration::from_secs(3600),
        ..Default::default()
    }
}

/// A fresh store (no fsync: tests are about logic, the crash test uses fsync)
/// with the caller table `orders` (pk S).
pub async fn open() -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        EmbeddedStore::open(
            dir.path().join("store.redb"),
            store_options(Durability::NoFsync),
        )
        .unwrap(),
    );
    create_orders(&*store).await;
    TestStore { store, dir }
}

pub async fn create_orders<S: ItemStore>(store: &S) {
    let input = CreateTableInput::keyed_by(ORDERS, "pk");
    match store.create_table(input).await {
        Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
        Err(e) => panic!("create orders: {e}"),
    }
}

pub fn catalog() -> Catalog {
    Catalog::from_toml(CATALOG, "test catalog").unwrap()
}

pub async fn engine<S: ItemStore>(store: Arc<S>) -> Engine<S> {
    Engine::builder(store, catalog()).build().await.unwrap()
}

pub async fn engine_with<S: ItemStore>(store: Arc<S>, options: EngineOptions) -> Engine<S> {
    Engine::builder(store, catalog())
        .options(options)
        .build()
        .await
        .unwrap()
}

pub fn ctx(tenant: &str) -> Context {
    Context::new(tenant, "tester").unwrap()
}

pub fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

pub fn order_item(id: &str) -> Item {
    Item::from([
        ("pk".to_owned(), s(&format!("ORDER#{id}"))),
        ("status".to_owned(), s("placed")),
    ])
}

/// Put the order, refusing to overwrite one that exists.
pub fn put_order(id: &str) -> Write {
    Write::put(ORDERS, order_item(id)).condition("attribute_not_exists(pk)")
}

pub async fn get<S: ItemStore>(store: &S, table: &str, key: Item) -> Option<Item> {
    store
        .get_item(GetItemInput {
            table_name: table.to_owned(),
            key,
            consistent_read: Some(true),
            ..Default::default()
        })
        .await
        .unwrap()
        .item
}

pub async fn get_order<S: ItemStore>(store: &S, id: &str) -> Option<Item> {
    get(
        store,
        ORDERS,
        Item::from([("pk".to_owned(), s(&format!("ORDER#{id}")))]),
    )
    .await
}

/// Every event row of a tenant, in log order.
pub async fn events<S: ItemStore>(store: &S, tenant: &str) -> Vec<Item> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = store
            .query(QueryInput {
                table_name: EVENTS.to_owned(),
                key_condition_expression: Some("pk = :pk".to_owned()),
                expression_attribute_values: Some(Values::from([(
                    ":pk".to_owned(),
                    s(&format!("TENANT#{tenant}#EVENT")),
                )])),
                exclusive_start_key: start.take(),
                ..Default::default()
            })
            .await
            .unwrap();
        out.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return out,
        }
    }
}

/// The head row of a tenant.
pub async fn head<S: ItemStore>(store: &S, tenant: &str) -> Option<Item> {
    get(
        store,
        EVENTS,
        Item::from([
            ("pk".to_owned(), s(&format!("TENANT#{tenant}#HEAD"))),
            ("sk".to_owned(), s("HEAD")),
        ]),
    )
    .await
}

pub fn attr_s<'a>(item: &'a Item, name: &str) -> &'a str {
    item.get(name)
        .and_then(|v| v.as_s())
        .unwrap_or_else(|| panic!("{name} missing in {item:?}"))
}

pub fn attr_n(item: &Item, name: &str) -> i64 {
    item.get(name)
        .and_then(|v| v.as_n())
        .and_then(|n| n.to_i64())
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// Seqs of a tenant's log must be exactly 1..=n.
#[track_caller]
pub fn assert_contiguous(rows: &[Item]) {
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(attr_n(row, "seq"), i as i64 + 1, "seq at position {i}");
        assert_eq!(attr_s(row, "sk"), format!("{:020}", i + 1));
    }
}

/// A store whose TransactWriteItems reports the head's condition as failed
/// (as when another process appended) for the next `contended` calls.
pub struct Faulty<S> {
    pub inner: S,
    pub contended: AtomicU32,
    pub calls: AtomicU32,
}

impl<S: ItemStore> Faulty<S> {
    pub fn new(inner: S, contended: u32) -> Faulty<S> {
        Faulty {
            inner,
            contended: AtomicU32::new(contended),
            calls: AtomicU32::new(0),
        }
    }
}

impl<S: ItemStore> ItemStore for Faulty<S> {
    async fn create_table(&self, input: CreateTableInput) -> StoreResult<TableDescription> {
        self.inner.create_table(input).await
    }
    async fn describe_table(&self, t: &str) -> StoreResult<TableDescription> {
        self.inner.describe_table(t).await
    }
    async fn delete_table(&self, t: &str) -> StoreResult<TableDescription> {
        self.inner.delete_table(t).await
    }
    async fn list_tables(&self) -> StoreResult<Vec<String>> {
        self.inner.list_tables().await
    }
    async fn update_time_to_live(
        &self,
        t: &str,
        spec: TimeToLiveSpecification,
    ) -> StoreResult<TimeToLiveSpecification> {
        self.inner.update_time_to_live(t, spec).await
    }
    async fn describe_time_to_live(&self, t: &str) -> StoreResult<Option<String>> {
        self.inner.describe_time_to_live(t).await
    }
    async fn get_item(&self, input: GetItemInput) -> StoreResult<GetItemOutput> {
        self.inner.get_item(input).await
    }
    async fn put_item(&self, input: PutItemInput) -> StoreResult<WriteOutput> {
        self.inner.put_item(input).await
    }
    async fn update_item(&self, input: UpdateItemInput) -> StoreResult<WriteOutput> {
        self.inner.update_item(input).await
    }
    async fn delete_item(&self, input: DeleteItemInput) -> StoreResult<WriteOutput> {
        self.inner.delete_item(input).await
    }
    async fn query(&self, input: QueryInput) -> StoreResult<QueryOutput> {
        self.inner.query(input).await
    }
    async fn scan(&self, input: ScanInput) -> StoreResult<QueryOutput> {
        self.inner.scan(input).await
    }
    async fn batch_get_item(&self, input: BatchGetItemInput) -> StoreResult<BatchGetItemOutput> {
        self.inner.batch_get_item(input).await
    }
    async fn batch_write_item(
        &self,
        input: BatchWriteItemInput,
    ) -> StoreResult<BatchWriteItemOutput> {
        self.inner.batch_write_item(input).await
    }
    async fn transact_write_items(&self, input: TransactWriteItemsInput) -> StoreResult<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let left = self.contended.load(Ordering::SeqCst);
        if left > 0 {
            self.contended.store(left - 1, Ordering::SeqCst);
            let mut reasons: Vec<CancellationReason> = input
                .transact_items
                .iter()
                .map(|_| CancellationReason {
                    code: "None".into(),
                    message: None,
                    item: None,
                })
                .collect();
            reasons[0] = CancellationReason {
                code: "ConditionalCheckFailed".into(),
                message: Some("The conditional request failed".into()),
                item: None,
            };
            return Err(StoreError::TransactionCanceled { reasons });
        }
        self.inner.transact_write_items(input).await
    }
    async fn transact_get_items(
        &self,
        input: TransactGetItemsInput,
    ) -> StoreResult<TransactGetItemsOutput> {
        self.inner.transact_get_items(input).await
    }
}

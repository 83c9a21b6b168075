//! Verifying a tenant's hash chain, incrementally from a checkpoint.
//!
//! The log is read with plain Query pages (sk ascending) through
//! [`ItemStore`], so it works on every backend. A reader task fetches the
//! next page while this task hashes the current one. Each event is checked
//! in order:
//! - its sort key must be the next seq (else a **gap**: events are missing);
//! - its `seq` attribute must equal its sort key (else **reordered**: the
//!   row claims another place in the log);
//! - `sha256(previous hash || canonical envelope)` must equal its stored
//!   `hash` (else **hash mismatch**: some byte of the event or of its hash
//!   changed);
//!
//! and at the end the head row must agree with the last event. The first
//! problem is reported with its seq. After a clean run (or up to the event
//! before the first problem) the checkpoint row `TENANT#<t>#VERIFIED` moves
//! to the last verified seq and hash, so the next run reads only newer
//! events; `full: true` ignores the checkpoint.

use std::sync::Arc;

use postbox_item::{AttributeValue, Item};
use postbox_store::api::{GetItemInput, PutItemInput, QueryInput, ScanInput, Values};
use postbox_store::{ItemStore, StoreError};
use tokio::sync::mpsc;

use crate::chain::{self, GENESIS, Hash};
use crate::envelope::{format_timestamp, now_ms};
use crate::layout;

/// How to verify.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// Start from genesis, ignoring the checkpoint.
    pub full: bool,
    /// Move the checkpoint after verifying.
    pub update_checkpoint: bool,
    /// Events per Query page.
    pub page_size: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions { full: false, update_checkpoint: true, page_size: 1000 }
    }
}

/// Where a verify run is.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// The tenant being verified.
    pub tenant: &'a str,
    /// Events checked so far in this run.
    pub checked: u64,
    /// The last seq checked.
    pub seq: u64,
    /// The head's seq when the run started.
    pub head_seq: u64,
}

/// What is wrong at the first broken seq.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The stored hash is not the recomputed one.
    HashMismatch { stored: String, computed: String },
    /// Events are missing: `expected` was not found (the next row, if any,
    /// is `found`).
    Gap { expected: u64, found: Option<u64> },
    /// The row at this place says it is event `claimed`.
    Reordered { claimed: u64 },
    /// The row cannot be read as an event.
    Malformed(String),
    /// The head row disagrees with the log's last event.
    HeadMismatch(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::HashMismatch { stored, computed } => write!(f, "hash mismatch: stored {stored}, recomputed {computed}"),
            Problem::Gap { expected, found: Some(n) } => write!(f, "gap: event {expected} is missing (next is {n})"),
            Problem::Gap { expected, found: None } => write!(f, "gap: event {expected} is missing (the head says it exists)"),
            Problem::Reordered { claimed } => write!(f, "reordered: the row in this place says it is event {claimed}"),
            Problem::Malformed(m) => write!(f, "malformed event row: {m}"),
            Problem::HeadMismatch(m) => write!(f, "head mismatch: {m}"),
        }
    }
}

/// The outcome for one tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantReport {
    /// The tenant.
    pub tenant: String,
    /// The seq verification started after (the checkpoint, or 0).
    pub from_seq: u64,
    /// Events checked in this run.
    pub checked: u64,
    /// The head's seq.
    pub head_seq: u64,
    /// The first broken seq and what is wrong there; None if intact.
    pub broken: Option<(u64, Problem)>,
}

impl TenantReport {
    /// Whether the chain is intact.
    pub fn intact(&self) -> bool {
        self.broken.is_none()
    }
}

/// Verify could not run (as opposed to finding a broken chain).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Reading the log failed.
    #[error("verify could not read the events table: {0}")]
    Store(#[from] StoreError),
}

/// Verifies one tenant.
pub async fn verify_tenant<S: ItemStore>(
    store: &Arc<S>,
    table: &str,
    tenant: &str,
    options: &VerifyOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<TenantReport, VerifyError> {
    let head = super::emit::read_head(&**store, table, tenant).await?;
    let checkpoint = if options.full { None } else { read_checkpoint(&**store, table, tenant).await? };
    let (from_seq, from_hash) = checkpoint.unwrap_or((0, GENESIS));
    let mut report = TenantReport { tenant: tenant.to_owned(), from_seq, checked: 0, head_seq: head.seq, broken: None };
    let (mut last_seq, mut last_hash) = (from_seq, from_hash);

    // A reader task fetches pages ahead while this one hashes.
    let (tx, mut rx) = mpsc::channel::<Result<Vec<Item>, StoreError>>(2);
    let reader = tokio::spawn(read_pages(store.clone(), table.to_owned(), tenant.to_owned(), from_seq, options.page_size.max(1), tx));
    let mut scratch = String::with_capacity(4096);
    'pages: while let Some(page) = rx.recv().await {
        for item in page? {
            let problem = check_event(&item, last_seq, &last_hash, &mut scratch);
            match problem {
                Ok(hash) => {
                    last_seq += 1;
                    last_hash = hash;
                    report.checked += 1;
                }
                Err((seq, p)) => {
                    report.broken = Some((seq, p));
                    break 'pages;
                }
            }
        }
        progress(&Progress { tenant, checked: report.checked, seq: last_seq, head_seq: head.seq });
    }
    reader.abort();
    if report.broken.is_none() {
        report.broken = check_head(&head, last_seq, &last_hash);
    }
    if options.update_checkpoint && last_seq > from_seq {
        write_checkpoint(&**store, table, tenant, last_seq, &last_hash).await?;
    }
    Ok(report)
}

/// Checks one row after `prev_seq`/`prev_hash`; its hash, or the broken seq
/// and problem.
fn check_event(item: &Item, prev_seq: u64, prev_hash: &Hash, scratch: &mut String) -> Result<Hash, (u64, Problem)> {
    let expected = prev_seq + 1;
    let (fields, row_seq, stored) = layout::fields_of(item).map_err(|m| (expected, Problem::Malformed(m.0)))?;
    if row_seq != expected {
        return Err((expected, Problem::Gap { expected, found: Some(row_seq) }));
    }
    if fields.seq != row_seq {
        return Err((row_seq, Problem::Reordered { claimed: fields.seq }));
    }
    let computed = chain::hash_envelope(prev_hash, &fields, scratch);
    if chain::from_hex(stored) != Some(computed) {
        return Err((row_seq, Problem::HashMismatch { stored: stored.to_owned(), computed: chain::to_hex(&computed) }));
    }
    Ok(computed)
}

fn check_head(head: &super::emit::Head, last_seq: u64, last_hash: &Hash) -> Option<(u64, Problem)> {
    if head.seq > last_seq {
        return Some((last_seq + 1, Problem::Gap { expected: last_seq + 1, found: None }));
    }
    if head.seq < last_seq {
        return Some((last_seq, Problem::HeadMismatch(format!("the head says the last event is {}, the log goes to {last_seq}", head.seq))));
    }
    if head.exists && head.hash != *last_hash {
        return Some((last_seq, Problem::HeadMismatch(format!("the head's hash {} is not event {last_seq}'s", chain::to_hex(&head.hash)))));
    }
    None
}

async fn read_pages<S: ItemStore>(store: Arc<S>, table: String, tenant: String, after: u64, page: usize, tx: mpsc::Sender<Result<Vec<Item>, StoreError>>) {
    let mut start: Option<Item> = None;
    loop {
        let values = Values::from([
            (":pk".to_owned(), AttributeValue::S(layout::event_pk(&tenant))),
            (":after".to_owned(), AttributeValue::S(layout::seq_sk(after))),
        ]);
        let out = store
            .query(QueryInput {
                table_name: table.clone(),
                key_condition_expression: Some("pk = :pk AND sk > :after".to_owned()),
                expression_attribute_values: Some(values),
                limit: Some(page as i64),
                exclusive_start_key: start.take(),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await;
        match out {
            Ok(out) => {
                let last = out.last_evaluated_key;
                let items = out.items.unwrap_or_default();
                if !items.is_empty() && tx.send(Ok(items)).await.is_err() {
                    return;
                }
                match last {
                    Some(k) => start = Some(k),
                    None => return,
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
    }
}

async fn read_checkpoint<S: ItemStore>(store: &S, table: &str, tenant: &str) -> Result<Option<(u64, Hash)>, StoreError> {
    let out = store
        .get_item(GetItemInput {
            table_name: table.to_owned(),
            key: layout::key(layout::verified_pk(tenant), layout::VERIFIED_SK),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(out.item.and_then(|i| {
        let seq = i.get("seq")?.as_n()?.to_i64()?;
        let hash = chain::from_hex(i.get("hash")?.as_s()?)?;
        Some((u64::try_from(seq).ok()?, hash))
    }))
}

async fn write_checkpoint<S: ItemStore>(store: &S, table: &str, tenant: &str, seq: u64, hash: &Hash) -> Result<(), StoreError> {
    let mut item = layout::key(layout::verified_pk(tenant), layout::VERIFIED_SK);
    item.insert("seq".to_owned(), AttributeValue::n(seq as i64));
    item.insert("hash".to_owned(), AttributeValue::S(chain::to_hex(hash)));
    item.insert("verified_at".to_owned(), AttributeValue::S(format_timestamp(now_ms())));
    store.put_item(PutItemInput { table_name: table.to_owned(), item, ..Default::default() }).await?;
    Ok(())
}

/// Every tenant with a head row, found by scanning the events table (a
/// full scan: fine for an operator's command, not for a hot path).
pub async fn tenants<S: ItemStore>(store: &S, table: &str) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = store
            .scan(ScanInput {
                table_name: table.to_owned(),
                filter_expression: Some("sk = :h".to_owned()),
                expression_attribute_values: Some(Values::from([(":h".to_owned(), AttributeValue::s(layout::HEAD_SK))])),
                exclusive_start_key: start.take(),
                ..Default::default()
            })
            .await?;
        for item in page.items.unwrap_or_default() {
            if let Some(t) = item.get(layout::PK).and_then(|v| v.as_s()).and_then(layout::tenant_of_head_pk) {
                out.push(t.to_owned());
            }
        }
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return Ok(out),
        }
    }
}

/// Verifies every tenant.
pub async fn verify_all<S: ItemStore>(
    store: &Arc<S>,
    table: &str,
    options: &VerifyOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<Vec<TenantReport>, VerifyError> {
    let mut out = Vec::new();
    for t in tenants(&**store, table).await? {
        out.push(verify_tenant(store, table, &t, options, progress).await?);
    }
    Ok(out)
}

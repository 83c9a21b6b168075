//! Verifying a tenant's hash chain, incrementally from a checkpoint.
//!
//! The log is read with plain Query pages (sk ascending) through
//! [`ItemStore::query_encoded`], so it works on every backend, and each row
//! is read from its encoded bytes without building an item (the embedded
//! store hands out its stored bytes as they are). A reader fetches the next
//! page while the checker hashes the current one (two futures of one task,
//! so a page is hashed where it was read), and a long log is split
//! into ranges checked in parallel (see [`verify_tenant`]). Each event is
//! checked in order:
//! - its sort key must be the next seq (else a **gap**: events are missing);
//! - its `seq` attribute must equal its sort key (else **reordered**: the
//!   row claims another place in the log);
//! - `sha256(previous hash || canonical envelope)` must equal its stored
//!   `hash` (else **hash mismatch**: some byte of the event or of its hash
//!   changed);
//!
//! and at the end the head row must agree with the last event. The first
//! problem is reported with its seq. Each link is checked from the stored
//! hash of the event before it, which is the hash a pass in order computes
//! wherever the earlier links hold; so the links are independent, and a
//! group of them is hashed at once in SIMD lanes
//! ([`chain::hash_envelopes`]). After a clean run (or up to the event
//! before the first problem) the checkpoint row `TENANT#<t>#VERIFIED` moves
//! to the last verified seq and hash, so the next run reads only newer
//! events; `full: true` ignores the checkpoint.

use std::sync::Arc;

use postbox_item::{AttributeValue, Item};
use postbox_store::api::{
    EncodedQueryOutput, GetItemInput, Names, PutItemInput, QueryInput, ScanInput, Values,
};
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
    /// Ranges of a long log checked in parallel (a log is split only when
    /// each range gets at least four pages).
    pub segments: usize,
    /// Without `full`, also check this many links chosen at random among
    /// the events the checkpoint already vouches for, and that the
    /// checkpoint's hash is still the stored hash of its event: an old
    /// event edited in the file is found without reading the whole log.
    pub sample: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            full: false,
            update_checkpoint: true,
            page_size: 1000,
            segments: 2,
            sample: 32,
        }
    }
}

/// Where a verify run is.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// The tenant being verified.
    pub tenant: &'a str,
    /// Events checked so far in this run.
    pub checked: u64,
    /// How far the run is: `from_seq + checked` (with several ranges
    /// checked in parallel there is no single last seq).
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
            Problem::HashMismatch { stored, computed } => {
                write!(f, "hash mismatch: stored {stored}, recomputed {computed}")
            }
            Problem::Gap {
                expected,
                found: Some(n),
            } => write!(f, "gap: event {expected} is missing (next is {n})"),
            Problem::Gap {
                expected,
                found: None,
            } => write!(
                f,
                "gap: event {expected} is missing (the head says it exists)"
            ),
            Problem::Reordered { claimed } => write!(
                f,
                "reordered: the row in this place says it is event {claimed}"
            ),
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
///
/// Long logs are split into `options.segments` consecutive ranges checked
/// in parallel, each from the stored hash of the event before it. That is
/// the same check as one pass: every link `hash(n) = sha256(hash(n-1) ||
/// canonical(n))` is checked against the stored hashes, and an earlier
/// range that is intact vouches for the stored hash a later range starts
/// from; the first problem by seq is the one reported.
pub async fn verify_tenant<S: ItemStore>(
    store: &Arc<S>,
    table: &str,
    tenant: &str,
    options: &VerifyOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<TenantReport, VerifyError> {
    let head = super::emit::read_head(&**store, table, tenant).await?;
    let checkpoint = if options.full {
        None
    } else {
        read_checkpoint(&**store, table, tenant).await?
    };
    let (from_seq, from_hash) = checkpoint.unwrap_or((0, GENESIS));
    let page = options.page_size.max(1);

    // Segment k covers (bounds[k], bounds[k+1]]; the last one is open-ended
    // so rows beyond the head are seen too.
    let span = head.seq.saturating_sub(from_seq);
    let segments = options.segments.max(1) as u64;
    let segments = if span >= segments * 4 * page as u64 {
        segments
    } else {
        1
    };
    let bounds: Vec<u64> = (0..segments)
        .map(|k| from_seq + k * span / segments)
        .collect();

    let (ptx, mut prx) = mpsc::unbounded_channel::<u64>();
    let mut tasks = Vec::new();
    for (k, &after) in bounds.iter().enumerate() {
        let start_hash = if k == 0 {
            Some(from_hash)
        } else {
            stored_hash(&**store, table, tenant, after).await?
        };
        let upto = bounds.get(k + 1).copied();
        let job = Segment {
            store: store.clone(),
            table: table.to_owned(),
            tenant: tenant.to_owned(),
            after,
            upto,
            page,
        };
        let ptx = ptx.clone();
        tasks.push(tokio::spawn(async move {
            match start_hash {
                Some(h) => job.check(h, ptx).await,
                // The row before this range is missing or malformed, so
                // the range before reports a problem at or before it.
                None => Ok(SegmentResult {
                    checked: 0,
                    last: (after, GENESIS),
                    broken: None,
                }),
            }
        }));
    }
    drop(ptx);
    let mut checked = 0;
    while let Some(n) = prx.recv().await {
        checked += n;
        progress(&Progress {
            tenant,
            checked,
            seq: from_seq + checked,
            head_seq: head.seq,
        });
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(
            task.await
                .map_err(|e| StoreError::Storage(format!("a verify task failed: {e}")))??,
        );
    }

    let mut report = TenantReport {
        tenant: tenant.to_owned(),
        from_seq,
        checked: 0,
        head_seq: head.seq,
        broken: None,
    };
    let (mut last_seq, mut last_hash) = (from_seq, from_hash);
    for r in &results {
        report.checked += r.checked;
        if r.checked > 0 {
            (last_seq, last_hash) = r.last;
        }
        if let Some((seq, problem)) = &r.broken {
            let mut problem = problem.clone();
            // A range that ended early: name the next row that does exist.
            if let Problem::Gap {
                found: found @ None,
                ..
            } = &mut problem
            {
                *found = next_row(&**store, table, tenant, *seq).await?;
            }
            report.broken = Some((*seq, problem));
            break;
        }
    }
    if report.broken.is_none() {
        report.broken = check_head(&head, last_seq, &last_hash);
    }
    if report.broken.is_none() && checkpoint.is_some() && from_seq > 0 {
        report.broken = check_sample(store, table, tenant, from_seq, &from_hash, options).await?;
    }
    if options.update_checkpoint && last_seq > from_seq {
        write_checkpoint(&**store, table, tenant, last_seq, &last_hash).await?;
    }
    Ok(report)
}

/// The events before a checkpoint at `from_seq` (whose hash is
/// `from_hash`): the checkpoint's own event must still have that hash, and
/// `options.sample` links chosen at random must hold. The first problem
/// found, by seq.
async fn check_sample<S: ItemStore>(
    store: &Arc<S>,
    table: &str,
    tenant: &str,
    from_seq: u64,
    from_hash: &Hash,
    options: &VerifyOptions,
) -> Result<Option<(u64, Problem)>, StoreError> {
    if options.sample == 0 {
        return Ok(None);
    }
    match stored_hash(&**store, table, tenant, from_seq).await? {
        Some(h) if h == *from_hash => {}
        stored => {
            return Ok(Some((
                from_seq,
                Problem::HashMismatch {
                    stored: stored.map_or("nothing".to_owned(), |h| chain::to_hex(&h)),
                    computed: chain::to_hex(from_hash),
                },
            )));
        }
    }
    let mut seqs: Vec<u64> = if from_seq as usize <= options.sample {
        (1..=from_seq).collect()
    } else {
        (0..options.sample)
            .map(|_| fastrand::u64(1..=from_seq))
            .collect()
    };
    seqs.sort_unstable();
    seqs.dedup();
    let mut found = None;
    for seq in seqs {
        let start = if seq == 1 {
            Some(GENESIS)
        } else {
            stored_hash(&**store, table, tenant, seq - 1).await?
        };
        let Some(start) = start else {
            found = Some((
                seq - 1,
                Problem::Gap {
                    expected: seq - 1,
                    found: next_row(&**store, table, tenant, seq - 1).await?,
                },
            ));
            break;
        };
        let job = Segment {
            store: store.clone(),
            table: table.to_owned(),
            tenant: tenant.to_owned(),
            after: seq - 1,
            upto: Some(seq),
            page: 1,
        };
        let (tx, _rx) = mpsc::unbounded_channel();
        if let Some(broken) = job.check(start, tx).await?.broken {
            found = Some(broken);
            break;
        }
    }
    Ok(found)
}

/// One range of a tenant's log to check.
struct Segment<S> {
    store: Arc<S>,
    table: String,
    tenant: String,
    /// The range starts after this seq...
    after: u64,
    /// ...and ends at this one (None: the end of the log).
    upto: Option<u64>,
    page: usize,
}

struct SegmentResult {
    checked: u64,
    /// The last verified (seq, hash).
    last: (u64, Hash),
    broken: Option<(u64, Problem)>,
}

impl<S: ItemStore> Segment<S> {
    /// Checks the range from `start_hash`, a reader fetching the next page
    /// while the checker hashes this one; reports progress per page.
    /// Reader and checker are two futures of this one task, so a page is
    /// checked on the thread (and in the cache) that read it, while a store
    /// that waits on the network still reads ahead.
    async fn check(
        self,
        start_hash: Hash,
        progress: mpsc::UnboundedSender<u64>,
    ) -> Result<SegmentResult, StoreError> {
        let (tx, mut rx) = mpsc::channel::<Result<EncodedQueryOutput, StoreError>>(1);
        let reader = read_pages(
            self.store.clone(),
            self.table.clone(),
            self.tenant.clone(),
            self.after,
            self.upto,
            self.page,
            tx,
        );
        let checker = async move {
            let mut r = SegmentResult {
                checked: 0,
                last: (self.after, start_hash),
                broken: None,
            };
            let mut scratch = chain::LinkScratch::default();
            while let Some(page) = rx.recv().await {
                let page = page?;
                let before = r.checked;
                let rows: Vec<&[u8]> = page.items().collect();
                for group in rows.chunks(LINKS_AT_ONCE) {
                    if let Err(broken) = check_events(group, &mut r, &mut scratch) {
                        r.broken = Some(broken);
                        break;
                    }
                }
                let _ = progress.send(r.checked - before);
                if r.broken.is_some() {
                    break;
                }
            }
            // Dropping the receiver stops the reader at its next page.
            drop(rx);
            Ok::<_, StoreError>(r)
        };
        let ((), r) = tokio::join!(reader, checker);
        let mut r = r?;
        if r.broken.is_none()
            && let Some(upto) = self.upto
            && r.last.0 < upto
        {
            let expected = r.last.0 + 1;
            r.broken = Some((
                expected,
                Problem::Gap {
                    expected,
                    found: None,
                },
            ));
        }
        Ok(r)
    }
}

/// The seq of the first event row at or after `seq`.
async fn next_row<S: ItemStore>(
    store: &S,
    table: &str,
    tenant: &str,
    seq: u64,
) -> Result<Option<u64>, StoreError> {
    let values = Values::from([
        (
            ":pk".to_owned(),
            AttributeValue::S(layout::event_pk(tenant)),
        ),
        (":from".to_owned(), AttributeValue::S(layout::seq_sk(seq))),
    ]);
    let out = store
        .query(QueryInput {
            table_name: table.to_owned(),
            key_condition_expression: Some("pk = :pk AND sk >= :from".to_owned()),
            expression_attribute_values: Some(values),
            limit: Some(1),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(out
        .items
        .unwrap_or_default()
        .first()
        .and_then(|i| i.get(layout::SK)?.as_s()?.parse().ok()))
}

/// The stored hash of event `seq` (None if the row or its hash is missing).
async fn stored_hash<S: ItemStore>(
    store: &S,
    table: &str,
    tenant: &str,
    seq: u64,
) -> Result<Option<Hash>, StoreError> {
    let out = store
        .get_item(GetItemInput {
            table_name: table.to_owned(),
            key: layout::key(layout::event_pk(tenant), &layout::seq_sk(seq)),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    Ok(out
        .item
        .and_then(|i| chain::from_hex(i.get("hash")?.as_s()?)))
}

/// Rows checked, and their links hashed, together: enough for every
/// SIMD lane of the hashing kernels (16 per wave, two waves on some CPUs)
/// several times over.
const LINKS_AT_ONCE: usize = 64;

/// Checks `rows`, the next events after `r.last`, in order, and moves
/// `r.last` and `r.checked` over those that are intact. Each row's link is
/// checked from the stored hash of the row before it: where every earlier
/// link holds, that is the hash a pass in order would have computed, so
/// the links are independent and are hashed at once
/// ([`chain::hash_envelopes`]). The first problem by seq is returned.
fn check_events(
    rows: &[&[u8]],
    r: &mut SegmentResult,
    scratch: &mut chain::LinkScratch,
) -> Result<(), (u64, Problem)> {
    let (mut seq, mut prev) = r.last;
    let (mut prevs, mut fields, mut stored) = (Vec::new(), Vec::new(), Vec::new());
    let mut problem = None;
    for row in rows {
        match read_event(row, seq + 1) {
            Ok((f, text)) => {
                let hash = chain::from_hex(text);
                prevs.push(prev);
                fields.push(f);
                stored.push((text, hash));
                seq += 1;
                match hash {
                    Some(h) => prev = h,
                    // Its link cannot hold: the comparison below reports it.
                    None => break,
                }
            }
            Err(p) => {
                problem = Some(p);
                break;
            }
        }
    }
    let mut computed = vec![GENESIS; fields.len()];
    chain::hash_envelopes(&prevs, &fields, scratch, &mut computed);
    for (hash, (text, stored)) in computed.into_iter().zip(stored) {
        let at = r.last.0 + 1;
        if stored != Some(hash) {
            return Err((
                at,
                Problem::HashMismatch {
                    stored: text.to_owned(),
                    computed: chain::to_hex(&hash),
                },
            ));
        }
        r.last = (at, hash);
        r.checked += 1;
    }
    problem.map_or(Ok(()), Err)
}

/// A row's envelope and stored hash, if it is the event `expected` and
/// says so.
fn read_event(
    row: &[u8],
    expected: u64,
) -> Result<(chain::EnvelopeFields<'_>, &str), (u64, Problem)> {
    let (fields, row_seq, stored) =
        layout::fields_of_encoded(row).map_err(|m| (expected, Problem::Malformed(m.0)))?;
    if row_seq != expected {
        return Err((
            expected,
            Problem::Gap {
                expected,
                found: Some(row_seq),
            },
        ));
    }
    if fields.seq != row_seq {
        return Err((
            row_seq,
            Problem::Reordered {
                claimed: fields.seq,
            },
        ));
    }
    Ok((fields, stored))
}

fn check_head(head: &super::emit::Head, last_seq: u64, last_hash: &Hash) -> Option<(u64, Problem)> {
    if head.seq > last_seq {
        return Some((
            last_seq + 1,
            Problem::Gap {
                expected: last_seq + 1,
                found: None,
            },
        ));
    }
    if head.seq < last_seq {
        return Some((
            last_seq,
            Problem::HeadMismatch(format!(
                "the head says the last event is {}, the log goes to {last_seq}",
                head.seq
            )),
        ));
    }
    if head.exists && head.hash != *last_hash {
        return Some((
            last_seq,
            Problem::HeadMismatch(format!(
                "the head's hash {} is not event {last_seq}'s",
                chain::to_hex(&head.hash)
            )),
        ));
    }
    None
}

async fn read_pages<S: ItemStore>(
    store: Arc<S>,
    table: String,
    tenant: String,
    after: u64,
    upto: Option<u64>,
    page: usize,
    tx: mpsc::Sender<Result<EncodedQueryOutput, StoreError>>,
) {
    let mut start: Option<Item> = None;
    loop {
        let mut values = Values::from([(
            ":pk".to_owned(),
            AttributeValue::S(layout::event_pk(&tenant)),
        )]);
        let condition = match upto {
            Some(upto) => {
                values.insert(
                    ":lo".to_owned(),
                    AttributeValue::S(layout::seq_sk(after + 1)),
                );
                values.insert(":hi".to_owned(), AttributeValue::S(layout::seq_sk(upto)));
                "pk = :pk AND sk BETWEEN :lo AND :hi"
            }
            None => {
                values.insert(
                    ":after".to_owned(),
                    AttributeValue::S(layout::seq_sk(after)),
                );
                "pk = :pk AND sk > :after"
            }
        };
        let out = store
            .query_encoded(QueryInput {
                table_name: table.clone(),
                key_condition_expression: Some(condition.to_owned()),
                expression_attribute_values: Some(values),
                limit: Some(page as i64),
                exclusive_start_key: start.take(),
                consistent_read: Some(true),
                ..Default::default()
            })
            .await;
        match out {
            Ok(mut out) => {
                let last = out.last_evaluated_key.take();
                if !out.is_empty() && tx.send(Ok(out)).await.is_err() {
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

async fn read_checkpoint<S: ItemStore>(
    store: &S,
    table: &str,
    tenant: &str,
) -> Result<Option<(u64, Hash)>, StoreError> {
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

async fn write_checkpoint<S: ItemStore>(
    store: &S,
    table: &str,
    tenant: &str,
    seq: u64,
    hash: &Hash,
) -> Result<(), StoreError> {
    let mut item = layout::key(layout::verified_pk(tenant), layout::VERIFIED_SK);
    item.insert("seq".to_owned(), AttributeValue::n(seq as i64));
    item.insert("hash".to_owned(), AttributeValue::S(chain::to_hex(hash)));
    item.insert(
        "verified_at".to_owned(),
        AttributeValue::S(format_timestamp(now_ms())),
    );
    store
        .put_item(PutItemInput {
            table_name: table.to_owned(),
            item,
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// A sort key after every sort key the events table's rows have (20-digit
/// seqs, `HEAD`, `VERIFIED`): the largest one-character string. A Scan
/// from a key no item has continues after it on DynamoDB too: the
/// conformance case `query-scan/scan-exclusive-start-key-of-no-item`
/// checks it against DynamoDB Local.
const PAST_EVERY_SK: &str = "\u{10FFFF}";

/// Every tenant with a head row, in the events table's scan order.
///
/// The table is walked one partition at a time: a Scan of one item gives
/// the next partition's key, and the next Scan starts after the last sort
/// key that partition can have. So finding the tenants costs two or three
/// one-item reads per tenant (its event, head and checkpoint partitions),
/// not a read of every event in the log.
pub async fn tenants<S: ItemStore>(store: &S, table: &str) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let mut start = None;
    let mut last_pk: Option<String> = None;
    loop {
        let page = store
            .scan(ScanInput {
                table_name: table.to_owned(),
                limit: Some(1),
                projection_expression: Some("#pk, #sk".to_owned()),
                expression_attribute_names: Some(Names::from([
                    ("#pk".to_owned(), layout::PK.to_owned()),
                    ("#sk".to_owned(), layout::SK.to_owned()),
                ])),
                exclusive_start_key: start.take(),
                ..Default::default()
            })
            .await?;
        let first = page.items.unwrap_or_default().into_iter().next();
        let Some(pk) = first
            .as_ref()
            .and_then(|item| item.get(layout::PK))
            .and_then(|v| v.as_s())
        else {
            match page.last_evaluated_key {
                Some(k) => {
                    start = Some(k);
                    continue;
                }
                None => return Ok(out),
            }
        };
        if last_pk.as_deref() == Some(pk) {
            // A row sorting after PAST_EVERY_SK (not one Postbox writes):
            // go on from it.
            start = first;
            continue;
        }
        if let Some(t) = layout::tenant_of_head_pk(pk) {
            out.push(t.to_owned());
        }
        last_pk = Some(pk.to_owned());
        start = Some(layout::key(pk.to_owned(), PAST_EVERY_SK));
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

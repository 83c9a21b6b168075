//! The payment example end to end on a node: six payments for two
//! tenants, then the proof that every effect happened exactly once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postbox_engine::{Context, Engine, EngineOptions, Envelope, layout};
use postbox_item::item_to_json;
use postbox_node::{Handlers, NodeOptions};
use postbox_queue::{NewMessage, Queues};
use postbox_relay::RelayConfig;
use postbox_store::ItemStore;
use postbox_store::api::GetItemInput;
use postbox_store::embedded::EmbeddedStore;
use postbox_worker::inbox::DEFAULT_INBOX_TABLE;
use postbox_worker::report::{Reconciliation, Verdict, reconcile};
use postbox_worker::{ClaimKey, Inbox, Status, WorkerOptions};

use super::external::External;
use super::handlers::{EFFECTS, handlers_with};
use super::{PIPES_TOML, Payment, SHOP_TABLE, catalog, create_tables, pay};
use crate::assembly::{self, wait_for};
use crate::error::ExampleError;

/// The events queue.
const EVENTS_QUEUE: &str = postbox_topology::EVENTS_QUEUE;
/// Workers competing for the queue.
const WORKERS: usize = 3;
/// How long every delivery may take, the flaky retries included.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// What happened to one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventLine {
    /// The tenant.
    pub tenant: String,
    /// Its seq in the tenant's log.
    pub seq: u64,
    /// The event id.
    pub event_id: String,
    /// The order paid for.
    pub order_id: String,
    /// One line per subscription, in catalog order.
    pub effects: Vec<EffectLine>,
}

/// What one subscription did with one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectLine {
    /// The subscription.
    pub subscription: String,
    /// The effect, for people.
    pub description: String,
    /// How many times the effect was applied to the store (1 = exactly once).
    pub applied: u64,
    /// How many times the handler ran, failed runs included.
    pub runs: u32,
    /// The claim's failed attempts before it completed.
    pub failed_attempts: u32,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// The claim's status.
    pub status: Status,
}

/// One event delivered again after it completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redelivery {
    /// Its tenant.
    pub tenant: String,
    /// Its seq.
    pub seq: u64,
    /// Its id.
    pub event_id: String,
    /// Handler runs the second delivery caused (0: the inbox stopped it).
    pub extra_runs: u32,
}

/// What the payment example proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentsReport {
    /// Every emitted event, in emit order.
    pub events: Vec<EventLine>,
    /// The event delivered a second time.
    pub redelivery: Redelivery,
    /// Calls made to the carrier, repeats included.
    pub carrier_calls: u64,
    /// Shipments the carrier booked (one per idempotency key).
    pub carrier_bookings: usize,
    /// Calls made to the mail provider, repeats included.
    pub mail_calls: u64,
    /// Emails the provider sent (one per idempotency key).
    pub emails_sent: usize,
    /// Retryable failures the workers released for a retry.
    pub retried: u64,
    /// Claims the workers dead-lettered.
    pub dead: u64,
    /// The reconciliation report after the run.
    pub reconciliation: Reconciliation,
}

/// The payments of the run: three per tenant.
fn payments() -> Vec<(&'static str, Payment)> {
    let p = |order: &str, amount, currency: &str, buyer: &str, tag: &str| Payment {
        order_id: order.into(),
        amount,
        currency: currency.into(),
        buyer: buyer.into(),
        tag: tag.into(),
    };
    vec![
        (
            "acme",
            p("A-1001", 4999, "EUR", "ada@example.com", "lamp-42"),
        ),
        (
            "globex",
            p("G-2001", 1250, "USD", "bob@example.com", "mug-7"),
        ),
        ("acme", p("A-1002", 1999, "EUR", "cy@example.com", "desk-3")),
        (
            "globex",
            p("G-2002", 8000, "GBP", "dee@example.com", "chair-9"),
        ),
        ("acme", p("A-1003", 350, "EUR", "eve@example.com", "pen-1")),
        (
            "globex",
            p("G-2003", 2100, "USD", "fay@example.com", "rug-5"),
        ),
    ]
}

/// Runs the payment example in `dir`, which must not hold a store yet
/// ([`ExampleError::DirectoryInUse`]), printing what happened to `out`.
///
/// Starts a node (`postbox_node::Node`: the store, the events queue with
/// its DLQ, the relay with the default events pipe, three worker loops)
/// whose setup creates the shop table, emits six payments for two
/// tenants, waits until every (event, subscription) is COMPLETED, delivers
/// one event a second time (as a relay retry or a DLQ redrive would), then
/// reports per event the four effects with their counts, the flaky
/// handler's retries and the reconciliation report.
pub async fn run(
    dir: &Path,
    out: &mut impl std::io::Write,
) -> Result<PaymentsReport, ExampleError> {
    let external = External::default();
    let mut handlers = Handlers::none();
    handlers.durable = handlers_with(&external);
    handlers.setup = Some(Box::new(|store: EmbeddedStore, _| {
        Box::pin(async move { create_tables(&store).await.map_err(|e| e.to_string()) })
    }));
    let pipes = RelayConfig::from_toml(PIPES_TOML)
        .map_err(|e| ExampleError::Unexpected(format!("examples/pipes.toml: {e}")))?;
    let node = assembly::start_node(NodeOptions {
        pipes: Some(pipes),
        workers: WORKERS,
        lease: Duration::from_secs(10),
        ..NodeOptions::new(dir, catalog(), handlers)
    })
    .await?;
    let (store, queues) = (node.store.clone(), node.queues.clone());
    let shared = Arc::new(store.clone());
    let engine = node.engine.clone();
    writeln!(
        out,
        "Payments: {} payments for 2 tenants, each fanned out to {} DURABLE handlers by {WORKERS} workers",
        payments().len(),
        EFFECTS.len()
    )?;

    let started = Instant::now();
    let emitted = emit_payments(&engine, out).await?;
    let inbox = Inbox::new(
        shared.clone(),
        DEFAULT_INBOX_TABLE,
        WorkerOptions::default().claim_retention.as_millis() as u64,
    );
    wait_until_completed(&inbox, &emitted).await?;
    writeln!(
        out,
        "  all {} deliveries COMPLETED in {:.1}s",
        emitted.len() * EFFECTS.len(),
        started.elapsed().as_secs_f64()
    )?;
    // The last messages are deleted just after their claims complete.
    wait_until_settled(&queues, 0).await?;
    let redelivery = redeliver(&store, &queues, &external, &emitted[0].0).await?;
    writeln!(
        out,
        "  delivered {} seq {} again: its subscriptions were COMPLETED, the handlers ran {} more time(s)",
        redelivery.tenant, redelivery.seq, redelivery.extra_runs
    )?;

    let stats = node.worker_stats();
    let (retried, dead) = (stats.retried, stats.dead);
    node.shutdown().await;

    let events = event_lines(&*shared, &inbox, &external, &emitted).await?;
    let reconciliation = reconcile(
        &shared,
        &queues,
        &inbox,
        &EngineOptions::default().events_table,
        EVENTS_QUEUE,
    )
    .await?;
    let report = PaymentsReport {
        events,
        redelivery,
        carrier_calls: external.carrier.calls(),
        carrier_bookings: external.carrier.effects(),
        mail_calls: external.mailer.calls(),
        emails_sent: external.mailer.effects(),
        retried,
        dead,
        reconciliation,
    };
    print(&report, out)?;
    Ok(report)
}

/// Emits the run's payments, each with its payment row.
async fn emit_payments<S: ItemStore>(
    engine: &Engine<S>,
    out: &mut impl std::io::Write,
) -> Result<Vec<(Envelope, Payment)>, ExampleError> {
    let mut emitted = Vec::new();
    for (tenant, payment) in payments() {
        let ctx = Context::new(tenant, "payments")
            .map_err(|e| ExampleError::Unexpected(e.to_string()))?;
        let e = pay(engine, &ctx, &payment).await?.envelope;
        writeln!(
            out,
            "  emitted {tenant} seq {} {} {} (order {}, {} {} with the payment row)",
            e.seq, e.event_type, e.id, payment.order_id, payment.amount, payment.currency
        )?;
        emitted.push((e, payment));
    }
    Ok(emitted)
}

/// Waits until every (event, subscription) claim is COMPLETED; the timeout
/// error lists the others and where they stand.
async fn wait_until_completed<S: ItemStore>(
    inbox: &Inbox<S>,
    emitted: &[(Envelope, Payment)],
) -> Result<(), ExampleError> {
    let deliveries = emitted.len() * EFFECTS.len();
    wait_for(
        &format!("all {deliveries} (event, subscription) deliveries to complete"),
        DELIVERY_TIMEOUT,
        Duration::from_millis(50),
        || async {
            let mut missing = Vec::new();
            for (e, _) in emitted {
                for effect in EFFECTS {
                    let key = ClaimKey::new(&e.id, effect.subscription);
                    let at = format!("{} seq {} {}", e.tenant, e.seq, effect.subscription);
                    match inbox.get(&key).await? {
                        Some(row) if row.status == Status::Completed => {}
                        Some(row) => missing.push(format!(
                            "{at}: {} after {} failed attempt(s){}",
                            row.status.as_str(),
                            row.attempts,
                            row.last_error
                                .map(|m| format!(" (last error: {m})"))
                                .unwrap_or_default()
                        )),
                        None => missing.push(format!("{at}: not claimed yet")),
                    }
                }
            }
            Ok(if missing.is_empty() {
                Ok(())
            } else {
                Err(missing.join("; "))
            })
        },
    )
    .await
}

/// Waits until the events queue is empty and more than `deleted_before`
/// messages were deleted from it.
async fn wait_until_settled(queues: &Queues, deleted_before: u64) -> Result<(), ExampleError> {
    wait_for(
        "the events queue to empty",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let s = queues.stats(EVENTS_QUEUE)?;
            let left = s.visible + s.in_flight + s.delayed;
            Ok(if left == 0 && s.deleted > deleted_before {
                Ok(())
            } else {
                Err(format!("{left} message(s) still in the queue"))
            })
        },
    )
    .await
}

/// Sends `event`'s row to the events queue once more, as a relay retry or
/// a redrive from a DLQ would, and counts the handler runs it causes.
async fn redeliver(
    store: &EmbeddedStore,
    queues: &Queues,
    external: &External,
    event: &Envelope,
) -> Result<Redelivery, ExampleError> {
    let runs = || -> u32 {
        EFFECTS
            .iter()
            .map(|f| external.runs(&event.id, f.subscription))
            .sum()
    };
    let before = runs();
    let deleted_before = queues.stats(EVENTS_QUEUE)?.deleted;
    let row = store
        .get_item(GetItemInput {
            table_name: EngineOptions::default().events_table,
            key: layout::key(layout::event_pk(&event.tenant), &layout::seq_sk(event.seq)),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?
        .item
        .ok_or_else(|| ExampleError::Unexpected(format!("event {} is not in the log", event.id)))?;
    let message = NewMessage::new(item_to_json(&row).to_string())
        .group(&event.tenant)
        .dedup(format!("{}:again", event.id));
    queues.send(EVENTS_QUEUE, message).await?;
    wait_until_settled(queues, deleted_before).await?;
    Ok(Redelivery {
        tenant: event.tenant.clone(),
        seq: event.seq,
        event_id: event.id.clone(),
        extra_runs: runs() - before,
    })
}

/// One line per event: each effect's count from the store, the handler
/// runs and the claim's failed attempts.
async fn event_lines<S: ItemStore>(
    store: &S,
    inbox: &Inbox<S>,
    external: &External,
    emitted: &[(Envelope, Payment)],
) -> Result<Vec<EventLine>, ExampleError> {
    let mut events = Vec::new();
    for (e, payment) in emitted {
        let mut effects = Vec::new();
        for effect in EFFECTS {
            let row = inbox
                .get(&ClaimKey::new(&e.id, effect.subscription))
                .await?
                .ok_or_else(|| ExampleError::Unexpected("a completed claim vanished".into()))?;
            let key = effect
                .key(e)
                .map_err(|m| ExampleError::Unexpected(m.to_string()))?;
            effects.push(EffectLine {
                subscription: effect.subscription.into(),
                description: effect.description.into(),
                applied: applied(store, key, effect.counter).await?,
                runs: external.runs(&e.id, effect.subscription),
                failed_attempts: row.attempts,
                last_error: row.last_error,
                status: row.status,
            });
        }
        events.push(EventLine {
            tenant: e.tenant.clone(),
            seq: e.seq,
            event_id: e.id.clone(),
            order_id: payment.order_id.clone(),
            effects,
        });
    }
    Ok(events)
}

/// The effect counter of the row at `key` (0 if the row is absent).
async fn applied<S: ItemStore>(
    store: &S,
    key: postbox_item::Item,
    counter: &str,
) -> Result<u64, ExampleError> {
    let item = store
        .get_item(GetItemInput {
            table_name: SHOP_TABLE.into(),
            key,
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?
        .item;
    Ok(item
        .as_ref()
        .and_then(|i| i.get(counter))
        .and_then(|v| v.as_n())
        .and_then(|n| n.to_i64())
        .map_or(0, |n| n.max(0) as u64))
}

fn print(r: &PaymentsReport, out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out)?;
    for e in &r.events {
        writeln!(
            out,
            "{} seq {} event {} (order {}):",
            e.tenant, e.seq, e.event_id, e.order_id
        )?;
        for f in &e.effects {
            let retry = match (&f.last_error, f.failed_attempts) {
                (Some(err), n) if n > 0 => {
                    format!("; {n} failed attempt(s), retried: {err}")
                }
                _ => String::new(),
            };
            writeln!(
                out,
                "  {:<13} {:<26} applied x{}  ({} run(s), {}{retry})",
                f.subscription,
                f.description,
                f.applied,
                f.runs,
                f.status.as_str()
            )?;
        }
    }
    writeln!(
        out,
        "\nexternal calls: carrier {} call(s) / {} booking(s); mail provider {} call(s) / {} email(s) sent",
        r.carrier_calls, r.carrier_bookings, r.mail_calls, r.emails_sent
    )?;
    writeln!(
        out,
        "workers: {} retryable failure(s) retried, {} dead-lettered",
        r.retried, r.dead
    )?;
    let rec = &r.reconciliation;
    writeln!(out, "reconciliation:")?;
    for t in &rec.tenants {
        writeln!(
            out,
            "  tenant {}: head seq {}, chain {}, {} dead letter(s)",
            t.tenant,
            t.head_seq,
            if t.chain_intact {
                "intact".to_owned()
            } else {
                format!("BROKEN at {}", t.broken.clone().unwrap_or_default())
            },
            t.dead_letters
        )?;
    }
    writeln!(
        out,
        "  events queue: {} waiting, {} in flight, {} in its DLQ; {} poison message(s)",
        rec.queue_depth, rec.queue_in_flight, rec.dlq_depth, rec.poison
    )?;
    match &rec.verdict {
        Verdict::Ok => writeln!(out, "  verdict: OK"),
        Verdict::Attention(reasons) => {
            writeln!(out, "  verdict: ATTENTION")?;
            for reason in reasons {
                writeln!(out, "    - {reason}")?;
            }
            Ok(())
        }
    }
}

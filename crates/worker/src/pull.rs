//! Pull subscriptions: a DURABLE subscription whose handler is `pull` is
//! run by a consumer in any language that asks for its deliveries over
//! HTTP, with the inbox semantics a Rust handler gets.
//!
//! The worker runs such a subscription like any other: it claims the
//! (event, subscription) in the inbox, renews the claim while the handler
//! runs and settles it with the handler's outcome. The handler ([`PullHub::
//! handler`]) parks the delivery here and waits; a consumer takes it with
//! [`PullHub::receive`], which hands it out under a consumer lease and a
//! handle no other handout has, and settles it with [`PullHub::complete`]
//! or [`PullHub::fail`] (or keeps it with [`PullHub::extend`]). So:
//!
//! - per-tenant order per subscription is the worker's: a tenant's next
//!   event is not parked before its previous one is settled;
//! - a consumer lease that runs out fails the attempt (as an SQS receive
//!   whose visibility timeout ran out counts toward its dead-letter queue):
//!   the delivery comes back after the subscription's backoff and
//!   dead-letters after its attempts, and its old handle is refused;
//! - a delivery whose claim the worker lost (another worker took the lease
//!   over, or this one stopped) leaves the hub, and its handle is refused.
//!
//! A settled delivery's claim completes (or fails) in the worker's next
//! step; a crash between a consumer's `complete` and that commit brings the
//! delivery back under the same idempotency key, as for a webhook whose
//! receiver answered 2xx just before the crash.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use postbox_engine::Envelope;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::handler::{Delivery, Handler, HandlerError};

/// The handler name that makes a DURABLE subscription a pull subscription.
pub const PULL_HANDLER: &str = "pull";

/// Most deliveries one receive hands out.
pub const MAX_RECEIVE: usize = 10;

/// Longest long poll of a receive.
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// Longest consumer lease one receive or extend grants.
pub const MAX_LEASE: Duration = Duration::from_secs(12 * 3600);

/// Why a consumer's request about a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    /// The subscription is not a pull subscription of this node.
    #[error("subscription {0:?} is not a pull subscription of this node")]
    NotPull(String),
    /// The handle is not one this hub writes.
    #[error("malformed delivery handle: {0}")]
    BadHandle(String),
    /// The handle's delivery is no longer handed out under it: its lease
    /// ran out, it was settled, or the worker lost its claim.
    #[error(
        "the delivery of this handle is no longer leased to it (its lease ran out, it was settled, or its claim moved on); it will come back with a new handle unless it was completed"
    )]
    Gone,
}

/// What a consumer decided for a delivery.
enum Settle {
    Complete(Option<String>),
    Fail(HandlerError),
}

/// One delivery handed to a consumer.
#[derive(Clone, Debug)]
pub struct Handout {
    /// Names the delivery and this handout: `<id>.<token>`.
    pub handle: String,
    /// The subscription.
    pub subscription: String,
    /// The event.
    pub envelope: Envelope,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// `<event_id>:<subscription>`: the key for external effects.
    pub idempotency_key: String,
    /// When the consumer lease ends unless extended (milliseconds since the
    /// Unix epoch).
    pub lease_expires_at_ms: u64,
    /// The W3C `traceparent` the consumer continues (the handler's hop in
    /// the event's trace), if the event carries one.
    pub traceparent: Option<String>,
}

struct Parked {
    delivery: Delivery,
    /// The current handout's token and lease end, if handed out.
    lease: Option<(String, Instant)>,
    settle: Option<oneshot::Sender<Settle>>,
    /// Wakes the handler when the lease is granted or moved.
    moved: Arc<Notify>,
}

#[derive(Default)]
struct Sub {
    /// Parked deliveries not handed out, in arrival order.
    waiting: VecDeque<u64>,
    parked: HashMap<u64, Parked>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    subs: HashMap<String, Sub>,
    /// When the node began to stop ([`PullHub::close`]).
    closed_at: Option<Instant>,
}

/// How long a stopping node waits for consumers to settle what they hold.
pub const CLOSE_GRACE: Duration = Duration::from_secs(30);

/// The meeting point of a node's workers and its pull consumers. Cheap to
/// clone; every clone is the same hub.
#[derive(Clone, Default)]
pub struct PullHub {
    state: Arc<Mutex<State>>,
    /// Wakes long-polling receivers when a delivery is parked.
    arrived: Arc<Notify>,
}

impl std::fmt::Debug for PullHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullHub").finish_non_exhaustive()
    }
}

impl PullHub {
    /// A hub serving these pull subscriptions.
    pub fn new<I: IntoIterator<Item = String>>(subscriptions: I) -> PullHub {
        let hub = PullHub::default();
        {
            let mut state = hub.state.lock().expect("pull hub lock");
            for s in subscriptions {
                state.subs.entry(s).or_default();
            }
        }
        hub
    }

    /// Whether `subscription` is one of this hub's.
    pub fn serves(&self, subscription: &str) -> bool {
        self.lock().subs.contains_key(subscription)
    }

    /// Deliveries parked and not handed out, per subscription.
    pub fn waiting(&self) -> Vec<(String, usize, usize)> {
        let state = self.lock();
        let mut out: Vec<_> = state
            .subs
            .iter()
            .map(|(name, s)| {
                (
                    name.clone(),
                    s.waiting.len(),
                    s.parked.len() - s.waiting.len(),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// The node is stopping: deliveries no consumer took are given back
    /// unrun (attempts untouched) at once, and those a consumer holds once
    /// it settles them or after [`CLOSE_GRACE`], so the workers can stop.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed_at.get_or_insert_with(Instant::now);
        for sub in state.subs.values() {
            for parked in sub.parked.values() {
                parked.moved.notify_one();
            }
        }
        drop(state);
        self.arrived.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("pull hub lock")
    }

    /// The worker's handler for every pull subscription of this hub.
    pub fn handler(&self) -> Handler {
        let hub = self.clone();
        Arc::new(move |delivery: Delivery| {
            let hub = hub.clone();
            Box::pin(async move { hub.park(delivery).await.map(|()| Vec::new()) })
        })
    }

    /// Parks `delivery` until a consumer settles it or its lease runs out.
    async fn park(&self, delivery: Delivery) -> Result<(), HandlerError> {
        let (tx, mut rx) = oneshot::channel();
        let moved = Arc::new(Notify::new());
        let subscription = delivery.subscription.clone();
        let slot = delivery.result.clone();
        let id = {
            let mut state = self.lock();
            if state.closed_at.is_some() {
                return Err(HandlerError::Released(
                    "the node is stopping; the delivery waits for the next start".into(),
                ));
            }
            let id = state.next_id;
            state.next_id += 1;
            let Some(sub) = state.subs.get_mut(&subscription) else {
                return Err(HandlerError::terminal(format!(
                    "subscription {subscription:?} is not a pull subscription of this node"
                )));
            };
            sub.parked.insert(
                id,
                Parked {
                    delivery,
                    lease: None,
                    settle: Some(tx),
                    moved: moved.clone(),
                },
            );
            sub.waiting.push_back(id);
            id
        };
        // Whatever ends this wait (settled, lease out, the worker dropping
        // the handler because it lost the claim or stops), the delivery
        // leaves the hub.
        let _leave = Leave {
            hub: self,
            subscription: &subscription,
            id,
        };
        self.arrived.notify_waiters();
        loop {
            let (lease_end, closed_at) = {
                let state = self.lock();
                let lease_end = state
                    .subs
                    .get(&subscription)
                    .and_then(|s| s.parked.get(&id))
                    .and_then(|p| p.lease.as_ref().map(|(_, end)| *end));
                (lease_end, state.closed_at)
            };
            let notified = moved.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let grace_end = closed_at.map(|at| at + CLOSE_GRACE);
            match (lease_end, grace_end) {
                (None, Some(_)) => {
                    return Err(HandlerError::Released(
                        "the node stopped before a consumer took the delivery".into(),
                    ));
                }
                (Some(end), Some(grace)) if grace < end && grace <= now => {
                    return Err(HandlerError::Released(
                        "the node stopped while a consumer held the delivery".into(),
                    ));
                }
                (Some(end), _) if end <= now => {
                    return Err(HandlerError::retryable(
                        "the pull consumer's lease ran out before it completed the delivery",
                    ));
                }
                (Some(end), grace) => {
                    let end = grace.map_or(end, |g| g.min(end));
                    tokio::select! {
                        settled = &mut rx => return settled_outcome(settled, &slot),
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(end) => {}
                    }
                }
                (None, None) => {
                    tokio::select! {
                        settled = &mut rx => return settled_outcome(settled, &slot),
                        _ = &mut notified => {}
                    }
                }
            }
        }
    }

    /// Up to `max` deliveries of `subscription` (of `tenant` only, if
    /// given), each leased to the caller for `lease`; waits up to `wait`
    /// for the first.
    pub async fn receive(
        &self,
        subscription: &str,
        tenant: Option<&str>,
        max: usize,
        wait: Duration,
        lease: Duration,
    ) -> Result<Vec<Handout>, PullError> {
        let deadline = Instant::now() + wait.min(MAX_WAIT);
        let lease = lease.min(MAX_LEASE);
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let out = self.take(subscription, tenant, max.clamp(1, MAX_RECEIVE), lease)?;
            if !out.is_empty() || Instant::now() >= deadline {
                return Ok(out);
            }
            tokio::select! {
                _ = &mut arrived => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    fn take(
        &self,
        subscription: &str,
        tenant: Option<&str>,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Handout>, PullError> {
        let mut state = self.lock();
        let sub = state
            .subs
            .get_mut(subscription)
            .ok_or_else(|| PullError::NotPull(subscription.to_owned()))?;
        let mut out = Vec::new();
        let mut i = 0;
        while i < sub.waiting.len() && out.len() < max {
            let id = sub.waiting[i];
            let Some(parked) = sub.parked.get_mut(&id) else {
                sub.waiting.remove(i);
                continue;
            };
            if tenant.is_some_and(|t| t != parked.delivery.envelope.tenant) {
                i += 1;
                continue;
            }
            sub.waiting.remove(i);
            let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
            parked.lease = Some((token.clone(), Instant::now() + lease));
            parked.moved.notify_one();
            let d = &parked.delivery;
            out.push(Handout {
                handle: format!("{id}.{token}"),
                subscription: subscription.to_owned(),
                envelope: d.envelope.clone(),
                attempt: d.attempt + 1,
                idempotency_key: d.idempotency_key.clone(),
                lease_expires_at_ms: epoch_ms_after(lease),
                traceparent: d.context.trace().map(str::to_owned),
            });
        }
        Ok(out)
    }

    /// Finds the delivery `handle` names, still leased under it, and
    /// applies `f` to it. `tenant` limits the caller to its tenant's.
    fn with_leased<T>(
        &self,
        subscription: &str,
        handle: &str,
        tenant: Option<&str>,
        f: impl FnOnce(&mut Parked) -> T,
    ) -> Result<T, PullError> {
        let (id, token) = parse_handle(handle)?;
        let mut state = self.lock();
        let sub = state
            .subs
            .get_mut(subscription)
            .ok_or_else(|| PullError::NotPull(subscription.to_owned()))?;
        let parked = sub.parked.get_mut(&id).ok_or(PullError::Gone)?;
        // Another tenant's delivery reads as gone: a tenant token learns
        // nothing of other tenants' deliveries.
        if tenant.is_some_and(|t| t != parked.delivery.envelope.tenant) {
            return Err(PullError::Gone);
        }
        match &parked.lease {
            Some((t, end)) if t == token && *end > Instant::now() => Ok(f(parked)),
            _ => Err(PullError::Gone),
        }
    }

    /// Completes the delivery: the worker completes its claim.
    pub fn complete(
        &self,
        subscription: &str,
        handle: &str,
        tenant: Option<&str>,
    ) -> Result<(), PullError> {
        self.settle(subscription, handle, tenant, Settle::Complete(None))
    }

    /// [`PullHub::complete`], recording `result` (JSON text, at most
    /// [`crate::handler::MAX_RESULT_BYTES`]) in the claim.
    pub fn complete_with_result(
        &self,
        subscription: &str,
        handle: &str,
        tenant: Option<&str>,
        result: String,
    ) -> Result<(), PullError> {
        self.settle(subscription, handle, tenant, Settle::Complete(Some(result)))
    }

    /// Fails the delivery: retried after the subscription's backoff (and
    /// at least `error`'s own delay), or dead-lettered when terminal or out
    /// of attempts.
    pub fn fail(
        &self,
        subscription: &str,
        handle: &str,
        tenant: Option<&str>,
        error: HandlerError,
    ) -> Result<(), PullError> {
        self.settle(subscription, handle, tenant, Settle::Fail(error))
    }

    fn settle(
        &self,
        subscription: &str,
        handle: &str,
        tenant: Option<&str>,
        outcome: Settle,
    ) -> Result<(), PullError> {
        let sender = self.with_leased(subscription, handle, tenant, |p| {
            // The handle is spent: a second settle is refused.
            p.lease = None;
            p.settle.take()
        })?;
        match sender {
            Some(tx) => tx.send(outcome).map_err(|_| PullError::Gone),
            None => Err(PullError::Gone),
        }
    }

    /// Moves the consumer lease to `lease` from now; the new end (epoch ms).
    pub fn extend(
        &self,
        subscription: &str,
        handle: &str,
        tenant: Option<&str>,
        lease: Duration,
    ) -> Result<u64, PullError> {
        let lease = lease.min(MAX_LEASE);
        self.with_leased(subscription, handle, tenant, |p| {
            if let Some((_, end)) = &mut p.lease {
                *end = Instant::now() + lease;
            }
            p.moved.notify_one();
        })?;
        Ok(epoch_ms_after(lease))
    }
}

/// Removes a parked delivery from the hub when its handler's wait ends.
struct Leave<'a> {
    hub: &'a PullHub,
    subscription: &'a str,
    id: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if let Ok(mut state) = self.hub.state.lock()
            && let Some(sub) = state.subs.get_mut(self.subscription)
        {
            sub.parked.remove(&self.id);
            sub.waiting.retain(|id| *id != self.id);
        }
    }
}

fn settled_outcome(
    settled: Result<Settle, oneshot::error::RecvError>,
    slot: &crate::handler::ResultSlot,
) -> Result<(), HandlerError> {
    match settled {
        Ok(Settle::Complete(result)) => {
            if let Some(r) = result {
                slot.record(r);
            }
            Ok(())
        }
        Ok(Settle::Fail(e)) => Err(e),
        // The sender is dropped only with its parked entry, which only this
        // wait removes.
        Err(_) => Err(HandlerError::retryable("the pull delivery was dropped")),
    }
}

fn parse_handle(handle: &str) -> Result<(u64, &str), PullError> {
    let bad = |why: &str| PullError::BadHandle(why.to_owned());
    let (id, token) = handle
        .split_once('.')
        .ok_or_else(|| bad("expected <id>.<token>, as a receive returned it"))?;
    let id = id
        .parse::<u64>()
        .map_err(|_| bad("its id is not a number"))?;
    if token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("its token is not 32 hexadecimal digits"));
    }
    Ok((id, token))
}

fn epoch_ms_after(d: Duration) -> u64 {
    (SystemTime::now() + d)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|t| t.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use postbox_engine::Context;

    use super::*;

    fn delivery(tenant: &str, seq: u64, attempt: u32) -> Delivery {
        let envelope = Envelope {
            id: format!("E{seq}"),
            event_type: "ORDER_PLACED".into(),
            tenant: tenant.into(),
            seq,
            correlation_id: "c".into(),
            causation_id: None,
            actor: "a".into(),
            occurred_at: "2026-01-01T00:00:00.000Z".into(),
            payload: serde_json::json!({}),
            trace: None,
        };
        Delivery {
            idempotency_key: format!("{}:sub", envelope.id),
            envelope,
            subscription: "sub".into(),
            context: Context::new(tenant, "subscription:sub").unwrap(),
            attempt,
            result: Default::default(),
        }
    }

    async fn handed(hub: &PullHub, tenant: Option<&str>) -> Vec<Handout> {
        hub.receive(
            "sub",
            tenant,
            10,
            Duration::from_secs(2),
            Duration::from_secs(30),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn a_completed_delivery_ends_its_handler_with_success_and_its_handle_is_spent() {
        let hub = PullHub::new(["sub".to_owned()]);
        let run = tokio::spawn((hub.handler())(delivery("acme", 1, 2)));
        let got = handed(&hub, None).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].attempt, 3);
        assert_eq!(got[0].idempotency_key, "E1:sub");
        hub.complete("sub", &got[0].handle, None).unwrap();
        assert!(matches!(run.await.unwrap(), Ok(w) if w.is_empty()));
        assert_eq!(
            hub.complete("sub", &got[0].handle, None),
            Err(PullError::Gone)
        );
        assert_eq!(hub.waiting(), vec![("sub".to_owned(), 0, 0)]);
    }

    #[tokio::test]
    async fn a_failure_reaches_the_worker_as_the_consumer_said_it() {
        let hub = PullHub::new(["sub".to_owned()]);
        let run = tokio::spawn((hub.handler())(delivery("acme", 1, 0)));
        let got = handed(&hub, None).await;
        let e = HandlerError::retry_after("down", Duration::from_secs(5));
        hub.fail("sub", &got[0].handle, None, e.clone()).unwrap();
        assert_eq!(run.await.unwrap().err(), Some(e));
    }

    #[tokio::test]
    async fn a_lease_that_runs_out_fails_the_attempt_and_refuses_the_old_handle() {
        let hub = PullHub::new(["sub".to_owned()]);
        let run = tokio::spawn((hub.handler())(delivery("acme", 1, 0)));
        let got = hub
            .receive(
                "sub",
                None,
                1,
                Duration::from_secs(1),
                Duration::from_secs(2),
            )
            .await
            .unwrap();
        // Extended once: still running after the first lease's end.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        hub.extend("sub", &got[0].handle, None, Duration::from_secs(2))
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!run.is_finished());
        let out = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(out, Err(HandlerError::Retryable(_))), "{out:?}");
        assert_eq!(
            hub.complete("sub", &got[0].handle, None),
            Err(PullError::Gone)
        );
    }

    #[tokio::test]
    async fn a_tenant_receives_only_its_own_deliveries_and_cannot_settle_others() {
        let hub = PullHub::new(["sub".to_owned()]);
        let _a = tokio::spawn((hub.handler())(delivery("acme", 1, 0)));
        let _b = tokio::spawn((hub.handler())(delivery("globex", 1, 0)));
        let got = handed(&hub, Some("globex")).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].envelope.tenant, "globex");
        assert_eq!(
            hub.complete("sub", &got[0].handle, Some("acme")),
            Err(PullError::Gone)
        );
        let rest = handed(&hub, None).await;
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].envelope.tenant, "acme");
    }

    #[tokio::test]
    async fn a_dropped_handler_takes_its_delivery_out_of_the_hub() {
        // The worker drops the handler when it loses the claim.
        let hub = PullHub::new(["sub".to_owned()]);
        let run = tokio::spawn((hub.handler())(delivery("acme", 1, 0)));
        let got = handed(&hub, None).await;
        run.abort();
        let _ = run.await;
        assert_eq!(
            hub.complete("sub", &got[0].handle, None),
            Err(PullError::Gone)
        );
        assert_eq!(hub.waiting(), vec![("sub".to_owned(), 0, 0)]);
    }

    #[tokio::test]
    async fn a_long_poll_wakes_for_a_delivery_parked_during_it() {
        let hub = PullHub::new(["sub".to_owned()]);
        let poll = {
            let hub = hub.clone();
            tokio::spawn(async move {
                hub.receive(
                    "sub",
                    None,
                    10,
                    Duration::from_secs(10),
                    Duration::from_secs(30),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _run = tokio::spawn((hub.handler())(delivery("acme", 1, 0)));
        let got = tokio::time::timeout(Duration::from_secs(5), poll)
            .await
            .expect("woken before its wait ended")
            .unwrap()
            .unwrap();
        assert_eq!(got.len(), 1);
    }

    #[tokio::test]
    async fn closing_gives_back_what_no_consumer_took_and_keeps_what_one_holds() {
        let hub = PullHub::new(["sub".to_owned()]);
        let held = tokio::spawn((hub.handler())(delivery("acme", 1, 0)));
        let got = handed(&hub, None).await;
        let waiting = tokio::spawn((hub.handler())(delivery("globex", 1, 0)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        hub.close();
        let out = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("released at once")
            .unwrap();
        assert!(matches!(out, Err(HandlerError::Released(_))), "{out:?}");
        // The held one may still be settled by its consumer.
        assert!(!held.is_finished());
        hub.complete("sub", &got[0].handle, None).unwrap();
        assert!(matches!(held.await.unwrap(), Ok(w) if w.is_empty()));
        // After the close nothing more is parked.
        let late = (hub.handler())(delivery("acme", 2, 0)).await;
        assert!(matches!(late, Err(HandlerError::Released(_))), "{late:?}");
    }

    #[test]
    fn handles_are_checked_before_anything_is_looked_up() {
        let hub = PullHub::new(["sub".to_owned()]);
        for bad in ["", "x", "1", "a.0123456789abcdef0123456789abcdef", "1.xyz"] {
            assert!(
                matches!(hub.complete("sub", bad, None), Err(PullError::BadHandle(_))),
                "{bad}"
            );
        }
        assert_eq!(
            hub.complete("other", "1.0123456789abcdef0123456789abcdef", None),
            Err(PullError::NotPull("other".into()))
        );
    }
}

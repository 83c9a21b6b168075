//! The four DURABLE handlers of the payment example. Each returns its store
//! writes instead of writing: the worker commits them in the same
//! transaction as the claim's completion, so a crash or a retry can never
//! apply them twice. Calls to systems outside the store carry the
//! delivery's idempotency key, so a retried call has no second effect.
//!
//! Every effect row counts its own applications (`ADD <counter> :one`):
//! the count would show a duplicate instead of hiding it, and the example
//! reports it.

use std::collections::HashMap;

use postbox_engine::{Envelope, Write};
use postbox_item::{AttributeValue, Item};
use postbox_worker::{Delivery, Handler, HandlerError, handler};

use super::SHOP_TABLE;
use super::external::External;

/// One handler's effect row: subscription, handler reference, the row's pk
/// kind (its pk is `<tenant>#<kind>#<key>`: the tenant first, so the row is
/// in its tenant's namespace and no other tenant's name can reach it), the
/// payload field keying it, and the attribute counting its applications.
#[derive(Clone, Copy, Debug)]
pub struct Effect {
    /// The subscription, as in the catalog.
    pub subscription: &'static str,
    /// The handler reference, as in the catalog.
    pub handler: &'static str,
    /// What the effect is, for people.
    pub description: &'static str,
    /// The row's kind, after the tenant in its pk.
    pub prefix: &'static str,
    /// The payload field that keys the row.
    pub key_field: &'static str,
    /// The attribute counting applications of the effect.
    pub counter: &'static str,
}

/// The four effects, in the order the catalog lists their subscriptions.
pub const EFFECTS: [Effect; 4] = [
    Effect {
        subscription: "order-mirror",
        handler: "orders::mirror",
        description: "order mirror row written",
        prefix: "ORDER",
        key_field: "order_id",
        counter: "mirror_writes",
    },
    Effect {
        subscription: "shipment",
        handler: "shipping::create_shipment",
        description: "shipment booked",
        prefix: "SHIPMENT",
        key_field: "order_id",
        counter: "bookings",
    },
    Effect {
        subscription: "notification",
        handler: "notify::email",
        description: "buyer notified",
        prefix: "NOTIFICATION",
        key_field: "order_id",
        counter: "notifications",
    },
    Effect {
        subscription: "tag-update",
        handler: "crm::tag",
        description: "tag marked as ordered",
        prefix: "TAG",
        key_field: "tag",
        counter: "times_marked",
    },
];

impl Effect {
    /// The key of this effect's row for `event`.
    pub fn key(&self, event: &Envelope) -> Result<Item, HandlerError> {
        let value = field(event, self.key_field)?;
        Ok(pk(format!("{}#{}#{value}", event.tenant, self.prefix)))
    }

    /// An UpdateItem on this effect's row: `set` (SET clauses over
    /// placeholders the caller adds) plus one more application counted.
    fn update(&self, event: &Envelope, set: &str) -> Result<Write, HandlerError> {
        Ok(Write::update(
            SHOP_TABLE,
            self.key(event)?,
            format!("SET {set} ADD #counter :one"),
        )
        .name("#counter", self.counter)
        .value(":one", AttributeValue::n(1)))
    }
}

/// The worker's handlers for the catalog's DURABLE subscriptions, by
/// handler reference; external calls go to `external`.
pub fn handlers_with(external: &External) -> HashMap<String, Handler> {
    let [mirror, shipment, notification, tag] = EFFECTS;
    let mut out = HashMap::new();
    let ext = external.clone();
    out.insert(
        mirror.handler.to_owned(),
        handler(move |d: Delivery| {
            ext.count_run(&d.envelope.id, mirror.subscription);
            async move { mirror_order(&d).map(|w| vec![w]) }
        }),
    );
    let ext = external.clone();
    out.insert(
        shipment.handler.to_owned(),
        handler(move |d: Delivery| {
            ext.count_run(&d.envelope.id, shipment.subscription);
            let ext = ext.clone();
            async move { book_shipment(&d, &ext).map(|w| vec![w]) }
        }),
    );
    let ext = external.clone();
    out.insert(
        notification.handler.to_owned(),
        handler(move |d: Delivery| {
            ext.count_run(&d.envelope.id, notification.subscription);
            let ext = ext.clone();
            async move { notify_buyer(&d, &ext).map(|w| vec![w]) }
        }),
    );
    let ext = external.clone();
    out.insert(
        tag.handler.to_owned(),
        handler(move |d: Delivery| {
            ext.count_run(&d.envelope.id, tag.subscription);
            async move { mark_tag(&d).map(|w| vec![w]) }
        }),
    );
    out
}

/// order-mirror: the order service's read model says PAID.
fn mirror_order(d: &Delivery) -> Result<Write, HandlerError> {
    let e = &d.envelope;
    let amount = e.payload["amount"]
        .as_i64()
        .ok_or_else(|| HandlerError::terminal("the payment has no integer amount"))?;
    Ok(EFFECTS[0]
        .update(
            e,
            "#status = :paid, amount = :amount, currency = :currency, paid_by = :event",
        )?
        .name("#status", "status")
        .value(":paid", AttributeValue::s("PAID"))
        .value(":amount", AttributeValue::n(amount))
        .value(":currency", AttributeValue::s(field(e, "currency")?))
        .value(":event", AttributeValue::s(&e.id)))
}

/// shipment: books with the carrier (idempotency key) and records the
/// booking reference.
fn book_shipment(d: &Delivery, external: &External) -> Result<Write, HandlerError> {
    let booking = external.carrier.call(&d.idempotency_key);
    Ok(EFFECTS[1]
        .update(&d.envelope, "booking_ref = :booking, order_id = :order")?
        .value(":booking", AttributeValue::s(booking))
        .value(":order", AttributeValue::s(field(&d.envelope, "order_id")?)))
}

/// notification: emails the buyer (idempotency key) and records the
/// message id. FLAKY on purpose: on the first attempt for each event the
/// provider accepts the email but the answer is lost, so the handler fails
/// retryably; the retry calls again with the same key, and the provider
/// sends nothing twice.
fn notify_buyer(d: &Delivery, external: &External) -> Result<Write, HandlerError> {
    let buyer = field(&d.envelope, "buyer")?;
    let message_id = external.mailer.call(&d.idempotency_key);
    if d.attempt == 0 {
        return Err(HandlerError::retryable(format!(
            "mail provider timed out emailing {buyer} (it may have accepted the message)"
        )));
    }
    Ok(EFFECTS[2]
        .update(
            &d.envelope,
            "channel = :email, recipient = :buyer, message_id = :id",
        )?
        .value(":email", AttributeValue::s("email"))
        .value(":buyer", AttributeValue::s(buyer))
        .value(":id", AttributeValue::s(message_id)))
}

/// tag-update: the product tag is ordered.
fn mark_tag(d: &Delivery) -> Result<Write, HandlerError> {
    Ok(EFFECTS[3]
        .update(&d.envelope, "#state = :ordered, order_id = :order")?
        .name("#state", "state")
        .value(":ordered", AttributeValue::s("ORDERED"))
        .value(":order", AttributeValue::s(field(&d.envelope, "order_id")?)))
}

/// A string field of the payload; the catalog's schema requires it, so a
/// missing one will not get better on a retry.
fn field<'a>(event: &'a Envelope, name: &str) -> Result<&'a str, HandlerError> {
    event.payload[name].as_str().ok_or_else(|| {
        HandlerError::terminal(format!(
            "the {} payload has no string field {name:?}",
            event.event_type
        ))
    })
}

/// A key item `{pk: S}`.
pub(crate) fn pk(value: String) -> Item {
    Item::from([("pk".to_owned(), AttributeValue::s(value))])
}

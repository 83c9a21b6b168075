//! The payment fan-out example.
//!
//! The payments module captures a payment: it writes the payment row and
//! emits PAYMENT_COMPLETED in ONE transaction ([`pay`]). The default events
//! pipe moves the event into the FIFO queue (one message group per tenant);
//! workers deliver it to four DURABLE subscriptions ([`handlers`]):
//!
//! | subscription | effect | outside the store |
//! |---|---|---|
//! | order-mirror | order row `ORDER#<tenant>#<order>` status PAID | - |
//! | shipment | shipment row with the booking reference | carrier, idempotency key |
//! | notification | notification row with the email's id | mail provider, idempotency key; flaky |
//! | tag-update | tag row `TAG#<tenant>#<tag>` state ORDERED | - |
//!
//! The catalog is `examples/catalog.toml` ([`CATALOG_TOML`]); all its
//! subscriptions are DURABLE, so the engine needs no INLINE or LOCAL
//! handlers. [`run`] assembles everything in a directory and proves each
//! effect happened exactly once.

mod external;
mod handlers;
mod run;

use std::collections::HashMap;

use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, EmitError, Emitted, Engine, Write};
use postbox_item::AttributeValue;
use postbox_store::ItemStore;
use postbox_worker::Handler;

use crate::assembly::{self, TableSpec};
use crate::error::ExampleError;

pub use external::{External, ExternalSystem};
pub use handlers::{EFFECTS, Effect, handlers_with};
pub use run::{EffectLine, EventLine, PaymentsReport, Redelivery, run};

/// The example's catalog, `examples/catalog.toml`.
pub const CATALOG_TOML: &str = include_str!("../../../../examples/catalog.toml");
/// The relay config the example runs, `examples/pipes.toml`: the default
/// events pipe.
pub const PIPES_TOML: &str = include_str!("../../../../examples/pipes.toml");
/// The application's table: payments and every handler's effect rows.
pub const SHOP_TABLE: &str = "shop";
/// The event the example emits.
pub const PAYMENT_COMPLETED: &str = "PAYMENT_COMPLETED";

/// The catalog, parsed.
pub fn catalog() -> Catalog {
    Catalog::from_toml(CATALOG_TOML, "examples/catalog.toml")
        .expect("examples/catalog.toml is checked by this crate's tests")
}

/// The worker's handlers, by the catalog's handler reference, calling
/// fresh stand-ins of the carrier and the mail provider. Use
/// [`handlers_with`] to share and inspect them.
pub fn handlers() -> HashMap<String, Handler> {
    handlers_with(&External::default())
}

/// The application's tables: the shop's rows (no stream, no TTL; written
/// at random keys, read by key: in arrival order).
pub(crate) const TABLES: [(&str, TableSpec<'static>); 1] = [(
    SHOP_TABLE,
    TableSpec {
        stream: false,
        ttl: None,
        arrival: true,
    },
)];

/// Creates the application's table.
pub async fn create_tables<S: ItemStore>(store: &S) -> Result<(), ExampleError> {
    for (name, spec) in TABLES {
        assembly::create_table(store, name, spec).await?;
    }
    Ok(())
}

/// A captured payment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// The order paid for.
    pub order_id: String,
    /// Minor units (cents).
    pub amount: i64,
    /// EUR, USD or GBP.
    pub currency: String,
    /// The buyer's email address.
    pub buyer: String,
    /// The product tag the order is for.
    pub tag: String,
}

/// The payments module's write: the payment row (which must not exist yet)
/// and its PAYMENT_COMPLETED event, in one transaction.
pub async fn pay<S: ItemStore>(
    engine: &Engine<S>,
    ctx: &Context,
    payment: &Payment,
) -> Result<Emitted, EmitError> {
    // Tenant first: the row is in the tenant's namespace of the table.
    let row = handlers::pk(format!("{}#PAYMENT#{}", ctx.tenant(), payment.order_id));
    let mut item = row;
    item.insert("amount".into(), AttributeValue::n(payment.amount));
    item.insert("currency".into(), AttributeValue::s(&payment.currency));
    item.insert("buyer".into(), AttributeValue::s(&payment.buyer));
    let payload = serde_json::json!({
        "order_id": payment.order_id,
        "amount": payment.amount,
        "currency": payment.currency,
        "buyer": payment.buyer,
        "tag": payment.tag,
    });
    engine
        .emit(
            ctx,
            PAYMENT_COMPLETED,
            payload,
            vec![Write::put(SHOP_TABLE, item).condition("attribute_not_exists(pk)")],
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_engine::catalog::Lane;
    use postbox_engine::contract::Report;

    #[test]
    fn the_catalog_keeps_the_contract_and_every_durable_handler_is_provided() {
        let catalog = catalog();
        let report = Report::new(&catalog);
        assert!(report.ok(), "{}", report.to_text());
        let handlers = handlers();
        let durable: Vec<&str> = catalog
            .subscriptions
            .iter()
            .filter(|s| s.lane == Lane::Durable)
            .map(|s| s.handler.as_str())
            .collect();
        assert_eq!(durable.len(), 4);
        for h in durable {
            assert!(handlers.contains_key(h), "no handler for {h}");
        }
        let names: Vec<&str> = catalog
            .subscriptions
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        let effects: Vec<&str> = EFFECTS.iter().map(|e| e.subscription).collect();
        assert_eq!(names, effects, "EFFECTS follows the catalog");
    }
}

//! Stand-ins for the systems outside Postbox that the payment handlers
//! call: a carrier that books shipments and a mail provider. Like real
//! providers that take an idempotency key, a call repeated with the same
//! key returns the first call's receipt and has no second effect. That is
//! what makes a retried delivery safe for effects outside the store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One external system: counts calls, remembers one effect per
/// idempotency key. Cheap to clone; clones share state.
#[derive(Clone, Debug)]
pub struct ExternalSystem {
    name: &'static str,
    state: Arc<Mutex<Calls>>,
}

#[derive(Debug, Default)]
struct Calls {
    calls: u64,
    /// Idempotency key -> receipt of the effect.
    effects: BTreeMap<String, String>,
}

impl ExternalSystem {
    /// A system called `name` (used in receipts).
    pub fn new(name: &'static str) -> ExternalSystem {
        ExternalSystem {
            name,
            state: Arc::new(Mutex::new(Calls::default())),
        }
    }

    /// Performs the effect for `idempotency_key` once; later calls with the
    /// same key return the same receipt and do nothing.
    pub fn call(&self, idempotency_key: &str) -> String {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.calls += 1;
        let n = state.effects.len() + 1;
        state
            .effects
            .entry(idempotency_key.to_owned())
            .or_insert_with(|| format!("{}-{n:04}", self.name))
            .clone()
    }

    /// Calls received, repeats included.
    pub fn calls(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).calls
    }

    /// Effects performed: one per distinct idempotency key.
    pub fn effects(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .effects
            .len()
    }
}

/// The systems the payment handlers call, and a count of handler runs.
#[derive(Clone, Debug)]
pub struct External {
    /// Books shipments.
    pub carrier: ExternalSystem,
    /// Sends emails.
    pub mailer: ExternalSystem,
    /// Handler runs per (event id, subscription), failed runs included.
    runs: Arc<Mutex<BTreeMap<(String, String), u32>>>,
}

impl Default for External {
    fn default() -> External {
        External {
            carrier: ExternalSystem::new("carrier"),
            mailer: ExternalSystem::new("mail"),
            runs: Arc::default(),
        }
    }
}

impl External {
    /// Counts one run of `subscription`'s handler on `event_id`.
    pub(crate) fn count_run(&self, event_id: &str, subscription: &str) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        *runs
            .entry((event_id.to_owned(), subscription.to_owned()))
            .or_insert(0) += 1;
    }

    /// How many times `subscription`'s handler ran on `event_id`.
    pub fn runs(&self, event_id: &str, subscription: &str) -> u32 {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.get(&(event_id.to_owned(), subscription.to_owned()))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_returns_the_first_receipt_and_has_no_second_effect() {
        let mail = ExternalSystem::new("mail");
        let first = mail.call("e1:notification");
        assert_eq!(mail.call("e1:notification"), first);
        assert_ne!(mail.call("e2:notification"), first);
        assert_eq!((mail.calls(), mail.effects()), (3, 2));
    }
}

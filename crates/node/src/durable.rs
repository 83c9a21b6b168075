//! The handlers of a node's DURABLE subscriptions: code handlers by
//! name, webhooks, and the pull hub.

use std::collections::HashMap;

use postbox_engine::{Catalog, Lane};
use postbox_worker::PullHub;
use postbox_worker::pull::PULL_HANDLER;

/// The handlers of the catalog's DURABLE subscriptions: the handlers of
/// `code` by name, and webhooks signed with the secret `secret` gives (asked
/// for once, at the first webhook); a subscription whose handler is neither
/// (nor `pull`, when `serves_pull`) is refused, naming it.
pub fn durable_handlers(
    catalog: &Catalog,
    secret: &mut dyn FnMut() -> Result<Vec<u8>, String>,
    command: &str,
    serves_pull: bool,
    mut code: HashMap<String, postbox_worker::Handler>,
) -> Result<HashMap<String, postbox_worker::Handler>, String> {
    let mut hooks: Option<(Vec<u8>, postbox_api::webhook::WebhookOptions)> = None;
    let mut known: Vec<String> = code.keys().cloned().collect();
    known.sort_unstable();
    let mut handlers = HashMap::new();
    for s in catalog
        .subscriptions
        .iter()
        .filter(|s| s.lane == Lane::Durable)
    {
        if s.handler == PULL_HANDLER {
            if serves_pull {
                continue;
            }
            return Err(format!(
                "subscription {:?} is a pull subscription: its consumers receive from `postbox serve`, whose workers run it; `{command}` cannot hand its deliveries out",
                s.name
            ));
        }
        if let Some(handler) = code.remove(&s.handler) {
            handlers.insert(s.handler.clone(), handler);
            continue;
        }
        if handlers.contains_key(&s.handler) {
            continue;
        }
        if !postbox_api::webhook::is_webhook(&s.handler) {
            return Err(if known.is_empty() {
                format!(
                    "subscription {:?} names code handler {:?}; `{command}` runs webhook subscriptions only (run code handlers in the process that registers them)",
                    s.name, s.handler
                )
            } else {
                format!(
                    "subscription {:?} names handler {:?}, which is no URL and none of this binary's code handlers ({})",
                    s.name,
                    s.handler,
                    known.join(", ")
                )
            });
        }
        if hooks.is_none() {
            let options = webhook_options()?;
            hooks = Some((secret()?, options));
        }
        let (secret, options) = hooks.as_ref().expect("just set");
        let hook = postbox_api::webhook::webhook(&s.handler, secret.clone(), options)
            .map_err(|e| format!("subscription {:?}: {e}", s.name))?;
        handlers.insert(s.handler.clone(), hook);
    }
    Ok(handlers)
}

/// The pull hub of a node's workers, when the catalog has DURABLE
/// subscriptions whose handler is `pull`: its handler is registered under
/// that name in `handlers`, and the hub is returned for the API when the
/// node runs worker loops (`workers` > 0; without them nothing is handed out).
pub fn pull_hub(
    catalog: &Catalog,
    workers: usize,
    handlers: &mut HashMap<String, postbox_worker::Handler>,
) -> Option<PullHub> {
    let names: Vec<String> = catalog
        .subscriptions
        .iter()
        .filter(|s| s.lane == Lane::Durable && s.handler == PULL_HANDLER)
        .map(|s| s.name.clone())
        .collect();
    if names.is_empty() {
        return None;
    }
    let hub = PullHub::new(names);
    handlers.insert(PULL_HANDLER.to_owned(), hub.handler());
    (workers > 0).then_some(hub)
}

/// Webhook delivery options: a 10 s timeout, and the private CA
/// certificates of the PEM file named by `POSTBOX_WEBHOOK_CA`, if set.
pub fn webhook_options() -> Result<postbox_api::webhook::WebhookOptions, String> {
    let mut options = postbox_api::webhook::WebhookOptions::default();
    if let Some(path) = std::env::var_os("POSTBOX_WEBHOOK_CA").filter(|p| !p.is_empty()) {
        options.extra_roots = postbox_api::webhook::read_roots(std::path::Path::new(&path))
            .map_err(|e| format!("POSTBOX_WEBHOOK_CA: {e}"))?;
    }
    Ok(options)
}

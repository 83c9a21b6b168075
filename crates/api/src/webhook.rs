//! Webhook subscriptions: a DURABLE subscription whose handler is an
//! `https://` (or `http://`) URL gets each event POSTed to it. TLS is
//! rustls with the Mozilla root certificates, plus any private CA given in
//! [`WebhookOptions::extra_roots`] (`postbox serve` reads them from the PEM
//! file named by `POSTBOX_WEBHOOK_CA`).
//!
//! The request body is the event envelope as JSON. Headers:
//! - `Idempotency-Key: <event_id>:<subscription>` — the same on every retry,
//!   so the receiver can drop a delivery it already acted on;
//! - `Postbox-Event-Id`, `Postbox-Event-Type`, `Postbox-Subscription`,
//!   `Postbox-Attempt` (1 on the first delivery);
//! - the Standard Webhooks headers (<https://www.standardwebhooks.com>), so
//!   receivers can check deliveries with that specification's libraries:
//!   `webhook-id` (the idempotency key), `webhook-timestamp` (unix seconds)
//!   and `webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`;
//! - `Postbox-Timestamp: <unix seconds>` and
//!   `Postbox-Signature: v1=<hex HMAC-SHA256(key, "<timestamp>.<body>")>`,
//!   Postbox's earlier scheme, for receivers written against it.
//!
//! The key is the shared secret: a Standard Webhooks secret `whsec_<base64>`
//! stands for the bytes it encodes ([`signing_key`]; new data directories
//! get one), any other secret for its own bytes. The setting may hold two
//! secrets separated by a space while a new one rolls out: each delivery is
//! then signed with both ([`signing_keys`]). Receivers recompute the MAC,
//! compare in constant time, and reject old timestamps to stop replays.
//!
//! The answer decides: 2xx completes; 408, 429, 5xx, a timeout or a
//! connection error is retryable (the queue's backoff retries it, and a
//! `Retry-After` in seconds is reported with the error); any other status is
//! terminal and dead-letters the delivery at once.

use std::time::Duration;

use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use postbox_worker::{Delivery, Handler, HandlerError};
use sha2::Sha256;

/// Whether a catalog handler reference is a webhook URL.
pub fn is_webhook(reference: &str) -> bool {
    reference.starts_with("http://") || reference.starts_with("https://")
}

/// The HMAC key a webhook secret stands for: the bytes a Standard Webhooks
/// secret (`whsec_<base64>`) encodes, else the secret's own bytes.
pub fn signing_key(secret: &[u8]) -> Vec<u8> {
    use base64::Engine;
    secret
        .strip_prefix(b"whsec_")
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .unwrap_or_else(|| secret.to_vec())
}

/// The keys of a secret setting that may hold several secrets separated by
/// whitespace: while a new secret rolls out, deliveries carry a signature
/// for each (`webhook-signature: v1,<a> v1,<b>`), so receivers holding
/// either accept them; `Postbox-Signature` uses the first.
pub fn signing_keys(secrets: &[u8]) -> Vec<Vec<u8>> {
    secrets
        .split(|b| b.is_ascii_whitespace())
        .filter(|s| !s.is_empty())
        .map(signing_key)
        .collect()
}

/// The `webhook-signature` value of the Standard Webhooks specification:
/// `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`.
pub fn standard_signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    use base64::Engine;
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The MAC a signature carries: HMAC-SHA256 of `<timestamp>.<body>`.
fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `Postbox-Signature` value for `body` sent at `timestamp`, with the
/// HMAC key `key` ([`signing_key`] of the secret).
pub fn signature(key: &[u8], timestamp: u64, body: &[u8]) -> String {
    let bytes = mac(key, timestamp, body).finalize().into_bytes();
    format!("v1={}", hex::encode(bytes))
}

/// Checks a delivery's signature as a receiver would: the MAC matches
/// (compared in constant time) and the timestamp is within `tolerance` of `now`.
pub fn verify_signature(
    secret: &[u8],
    timestamp: &str,
    body: &[u8],
    header: &str,
    now_secs: u64,
    tolerance: Duration,
) -> bool {
    let Ok(ts) = timestamp.parse::<u64>() else {
        return false;
    };
    if now_secs.abs_diff(ts) > tolerance.as_secs() {
        return false;
    }
    let Some(hex) = header.strip_prefix("v1=") else {
        return false;
    };
    let Some(given) = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    signing_keys(secret)
        .iter()
        .any(|k| mac(k, ts, body).verify_slice(&given).is_ok())
}

/// Why a webhook URL cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("webhook {url:?}: {reason}")]
pub struct WebhookError {
    url: String,
    reason: String,
}

/// How webhook deliveries are made.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Longest wait to connect, and then for the answer.
    pub timeout: Duration,
    /// Certificates of private CAs trusted besides the Mozilla roots.
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            timeout: Duration::from_secs(10),
            extra_roots: Vec::new(),
        }
    }
}

/// Reads the certificates of a PEM file, for [`WebhookOptions::extra_roots`].
pub fn read_roots(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} is not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", path.display()));
    }
    Ok(certs)
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// A handler POSTing each delivery to `url`, signed with `secret`.
pub fn webhook(
    url: &str,
    secret: Vec<u8>,
    options: &WebhookOptions,
) -> Result<Handler, WebhookError> {
    let err = |reason: String| WebhookError {
        url: url.to_owned(),
        reason,
    };
    let uri: hyper::Uri = url.parse().map_err(|_| err("not a valid URL".into()))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(err(
            "expected https://host[:port]/path or http://host[:port]/path".into(),
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in &options.extra_roots {
        roots.add(cert.clone()).map_err(|e| {
            err(format!(
                "a certificate of the extra roots is not usable: {e}"
            ))
        })?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| err(format!("TLS setup: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let timeout = options.timeout;
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(timeout));
    http.enforce_http(false);
    let connector: Connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client: Client<Connector, Full<bytes::Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let keys = std::sync::Arc::new(signing_keys(&secret));
    if keys.is_empty() {
        return Err(err("the webhook secret is empty".into()));
    }
    Ok(postbox_worker::handler(move |d: Delivery| {
        let client = client.clone();
        let uri = uri.clone();
        let keys = keys.clone();
        async move {
            let body = serde_json::to_vec(&d.envelope)
                .map_err(|e| HandlerError::terminal(format!("the event cannot be encoded: {e}")))?;
            let timestamp = postbox_engine::envelope::now_ms() / 1000;
            let mut req = hyper::Request::post(uri.clone());
            if let Some(t) = d.context.trace() {
                req = req.header(postbox_trace::HEADER, t);
            }
            let req = req
                .header("content-type", "application/json")
                .header("idempotency-key", &d.idempotency_key)
                .header("postbox-event-id", &d.envelope.id)
                .header("postbox-event-type", &d.envelope.event_type)
                .header("postbox-subscription", &d.subscription)
                .header("postbox-attempt", (d.attempt + 1).to_string())
                .header("webhook-id", &d.idempotency_key)
                .header("webhook-timestamp", timestamp.to_string())
                .header(
                    "webhook-signature",
                    keys.iter()
                        .map(|k| standard_signature(k, &d.idempotency_key, timestamp, &body))
                        .collect::<Vec<_>>()
                        .join(" "),
                )
                .header("postbox-timestamp", timestamp.to_string())
                .header("postbox-signature", signature(&keys[0], timestamp, &body))
                .body(Full::new(bytes::Bytes::from(body)))
                .map_err(|e| HandlerError::terminal(format!("cannot build the request: {e}")))?;
            let res = match tokio::time::timeout(timeout, client.request(req)).await {
                Err(_) => {
                    return Err(HandlerError::retryable(format!(
                        "POST {uri}: no answer within {}s",
                        timeout.as_secs_f64()
                    )));
                }
                Ok(Err(e)) => {
                    return Err(HandlerError::retryable(format!(
                        "POST {uri}: {}",
                        with_causes(&e)
                    )));
                }
                Ok(Ok(res)) => res,
            };
            let status = res.status();
            let retry_after = res
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            // Read (a bounded part of) the answer for the error message.
            let text = match tokio::time::timeout(timeout, res.into_body().collect()).await {
                Ok(Ok(b)) => {
                    let b = b.to_bytes();
                    String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned()
                }
                _ => String::new(),
            };
            let code = status.as_u16();
            if status.is_success() {
                return Ok(Vec::new());
            }
            let message = format!(
                "POST {uri} answered {status}{}{}",
                if text.is_empty() {
                    String::new()
                } else {
                    format!(": {}", text.trim())
                },
                retry_after
                    .map(|s| format!(" (Retry-After {s}s)"))
                    .unwrap_or_default()
            );
            if code == 408 || code == 429 || status.is_server_error() {
                Err(match retry_after {
                    Some(s) => HandlerError::retry_after(message, Duration::from_secs(s)),
                    None => HandlerError::retryable(message),
                })
            } else {
                Err(HandlerError::terminal(message))
            }
        }
    }))
}

/// An error with its causes, `a: b: c`: the client's own message alone
/// ("client error (Connect)") does not say that a certificate was refused.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference
    /// libraries.
    #[test]
    fn the_standard_signature_matches_the_specifications_example() {
        let key = signing_key(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let sig = standard_signature(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn several_secrets_are_several_keys_in_order() {
        let keys = signing_keys(b" whsec_AAEC\n raw ");
        assert_eq!(keys, vec![vec![0u8, 1, 2], b"raw".to_vec()]);
        assert!(signing_keys(b"  ").is_empty());
    }

    #[test]
    fn a_secret_without_the_prefix_is_its_own_key() {
        assert_eq!(signing_key(b"0123abcd"), b"0123abcd");
        assert_eq!(signing_key(b"whsec_AAEC"), [0u8, 1, 2]);
        // Not base64 after the prefix: the bytes as given.
        assert_eq!(signing_key(b"whsec_!!"), b"whsec_!!");
    }
}

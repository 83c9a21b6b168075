//! https:// webhooks: a delivery to a TLS receiver whose certificate a
//! private CA signed completes once that CA is trusted, carries the
//! idempotency key and a valid signature; without the CA it is refused as
//! retryable (the receiver may be fixed), never delivered in clear.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use postbox_api::webhook::{WebhookOptions, verify_signature, webhook};
use postbox_engine::{Context, Envelope};
use postbox_worker::{Delivery, HandlerError};
use serde_json::json;

type Seen = Arc<Mutex<Vec<(hyper::HeaderMap, Vec<u8>)>>>;

/// A TLS receiver for `localhost` on 127.0.0.1:0; returns its port and the
/// CA certificate (PEM) that signed its certificate.
async fn receiver(seen: Seen) -> (u16, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return; // a client that did not trust us
                };
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let headers = req.headers().clone();
                        let body = req.into_body().collect().await.unwrap().to_bytes().to_vec();
                        seen.lock().unwrap().push((headers, body));
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            bytes::Bytes::from_static(b"ok"),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, ca.pem())
}

fn delivery() -> Delivery {
    let envelope = Envelope {
        id: "01TESTEVENT0000000000000000".into(),
        event_type: "ORDER_PLACED".into(),
        tenant: "acme".into(),
        seq: 1,
        correlation_id: "req-1".into(),
        causation_id: None,
        actor: "alice".into(),
        occurred_at: "2026-11-29T00:00:00.000Z".into(),
        payload: json!({"order_id": "7"}),
        trace: None,
    };
    Delivery {
        context: Context::caused_by(&envelope, "subscription:hook"),
        idempotency_key: format!("{}:hook", envelope.id),
        subscription: "hook".into(),
        envelope,
        attempt: 0,
        result: Default::default(),
    }
}

#[tokio::test]
async fn https_webhooks_trust_the_given_ca_and_refuse_an_unknown_one() {
    let seen: Seen = Arc::default();
    let (port, ca_pem) = receiver(seen.clone()).await;
    let url = format!("https://localhost:{port}/hook");
    let secret = b"s3cret".to_vec();

    // Without the private CA: the certificate is not trusted, nothing is sent.
    let untrusted = webhook(
        &url,
        secret.clone(),
        &WebhookOptions {
            timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .unwrap();
    match untrusted(delivery()).await {
        Err(HandlerError::Retryable(m)) => assert!(m.to_lowercase().contains("certificate"), "{m}"),
        other => panic!("expected a retryable certificate error, got {other:?}"),
    }
    assert!(seen.lock().unwrap().is_empty());

    // With it (read from a PEM file, as POSTBOX_WEBHOOK_CA gives it): delivered.
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let options = WebhookOptions {
        timeout: Duration::from_secs(5),
        extra_roots: postbox_api::webhook::read_roots(&ca_file).unwrap(),
    };
    let trusted = webhook(&url, secret.clone(), &options).unwrap();
    trusted(delivery()).await.expect("a 200 over TLS completes");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    let h = |n: &str| headers[n].to_str().unwrap().to_owned();
    assert_eq!(h("idempotency-key"), "01TESTEVENT0000000000000000:hook");
    let now = postbox_engine::envelope::now_ms() / 1000;
    assert!(verify_signature(
        &secret,
        &h("postbox-timestamp"),
        body,
        &h("postbox-signature"),
        now,
        Duration::from_secs(300)
    ));

    // A file without certificates is refused with its name.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    assert!(
        postbox_api::webhook::read_roots(&empty)
            .unwrap_err()
            .contains("empty.pem")
    );
}

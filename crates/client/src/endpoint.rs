//! One HTTP/1 endpoint that speaks the AWS JSON 1.0 protocols: a POST to `/`
//! with an `X-Amz-Target` header and a JSON body, over a small pool of
//! keep-alive connections, with a deadline on every call.
//!
//! This module knows nothing of DynamoDB or SQS: it answers a status and a
//! body, or says why there was no answer ([`Unreachable`]). With
//! [`Credentials`], every request is signed with AWS Signature Version 4
//! (by `aws-sigv4`), as `postbox serve` requires; without, requests go
//! unsigned (a server run with `--wire-auth none`, or a local emulator).
//! Each signed request carries a fresh `amz-sdk-invocation-id`, so two
//! identical calls within a second are not refused as a replay. No TLS.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

const CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// How an [`Endpoint`] talks to its server.
#[derive(Clone, Debug)]
pub struct EndpointOptions {
    /// Longest wait for one answer, on top of any long-poll wait the request
    /// itself asks for (10 s).
    pub timeout: Duration,
    /// Longest wait to open a TCP connection (2 s).
    pub connect_timeout: Duration,
    /// Idle keep-alive connections kept open (8).
    pub max_idle_connections: usize,
    /// The access key requests are signed with; `None`: unsigned.
    pub credentials: Option<Credentials>,
    /// The region signatures are scoped to (`us-east-1`; `postbox serve`
    /// accepts any).
    pub region: String,
}

/// An AWS access key pair.
#[derive(Clone)]
pub struct Credentials {
    /// The access key id (`AKIA...`).
    pub access_key_id: String,
    /// Its secret.
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// A key pair.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Credentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
        }
    }

    /// The pair in `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, if both
    /// are set and not empty.
    pub fn from_env() -> Option<Credentials> {
        let id = std::env::var("AWS_ACCESS_KEY_ID")
            .ok()
            .filter(|v| !v.is_empty())?;
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY")
            .ok()
            .filter(|v| !v.is_empty())?;
        Some(Credentials::new(id, secret))
    }

    /// Reads `AWS_ACCESS_KEY_ID=...` and `AWS_SECRET_ACCESS_KEY=...` lines
    /// (the `admin-access-key` file `postbox serve` writes).
    pub fn parse_file(text: &str) -> Option<Credentials> {
        let mut id = None;
        let mut secret = None;
        for line in text.lines() {
            let line = line.trim().trim_start_matches("export ");
            if let Some(v) = line.strip_prefix("AWS_ACCESS_KEY_ID=") {
                id = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("AWS_SECRET_ACCESS_KEY=") {
                secret = Some(v.trim().to_owned());
            }
        }
        Some(Credentials::new(
            id.filter(|v| !v.is_empty())?,
            secret.filter(|v| !v.is_empty())?,
        ))
    }
}

impl Default for EndpointOptions {
    fn default() -> EndpointOptions {
        EndpointOptions {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            max_idle_connections: 8,
            credentials: None,
            region: "us-east-1".to_owned(),
        }
    }
}

/// The address given to [`Endpoint::new`] is not an `http://host:port` URL.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid endpoint {url:?}: {reason} (expected http://host:port)")]
pub struct InvalidEndpoint {
    url: String,
    reason: String,
}

/// A server reached over HTTP/1. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    options: EndpointOptions,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("uri", &self.inner.uri)
            .finish()
    }
}

/// A status and a body: what the server answered.
pub(crate) struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// Why a call got no answer. The message names the endpoint, the operation
/// and whether the request may have been applied.
#[derive(Debug)]
pub(crate) struct Unreachable(pub String);

impl Endpoint {
    /// An endpoint at `url` (`http://host:port`) with default options.
    pub fn new(url: &str) -> Result<Endpoint, InvalidEndpoint> {
        Endpoint::with_options(url, EndpointOptions::default())
    }

    /// An endpoint at `url` (`http://host:port`).
    pub fn with_options(url: &str, options: EndpointOptions) -> Result<Endpoint, InvalidEndpoint> {
        let invalid = |reason: &str| InvalidEndpoint {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return Err(invalid("only http is supported (no TLS)")),
            None => return Err(invalid("no scheme")),
        }
        if uri.host().is_none() {
            return Err(invalid("no host"));
        }
        let uri = Uri::builder()
            .scheme("http")
            .authority(uri.authority().expect("a host was checked").clone())
            .path_and_query("/")
            .build()
            .map_err(|e| invalid(&e.to_string()))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(options.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(options.max_idle_connections)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Endpoint {
            inner: Arc::new(Inner {
                client,
                uri,
                options,
            }),
        })
    }

    /// The endpoint's URL, `http://host:port/`.
    pub fn url(&self) -> String {
        self.inner.uri.to_string()
    }

    /// Sends one request for `target` and waits up to the timeout plus
    /// `extra_wait` (a long poll's own wait) for the whole answer.
    pub(crate) async fn call(
        &self,
        target: &str,
        body: Vec<u8>,
        extra_wait: Duration,
    ) -> Result<Answer, Unreachable> {
        let deadline = self.inner.options.timeout + extra_wait;
        match tokio::time::timeout(deadline, self.exchange(target, body)).await {
            Ok(answer) => answer,
            Err(_) => Err(Unreachable(format!(
                "no answer from {} to {target} within {deadline:?}; the request may or may not \
                 have been applied: retry it once the server answers",
                self.inner.uri
            ))),
        }
    }

    /// Whether requests are signed.
    pub fn signs(&self) -> bool {
        self.inner.options.credentials.is_some()
    }

    async fn exchange(&self, target: &str, body: Vec<u8>) -> Result<Answer, Unreachable> {
        let body = Bytes::from(body);
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.inner.uri.clone())
            .header(hyper::header::CONTENT_TYPE, CONTENT_TYPE)
            .header("x-amz-target", target)
            .body(Full::new(body.clone()))
            .map_err(|e| Unreachable(format!("cannot build the {target} request: {e}")))?;
        if let Some(credentials) = &self.inner.options.credentials {
            sign(
                &mut request,
                &body,
                credentials,
                &self.inner.options.region,
                target,
                std::time::SystemTime::now(),
            )
            .map_err(|e| Unreachable(format!("cannot sign the {target} request: {e}")))?;
        }
        let response = self.inner.client.request(request).await.map_err(|e| {
            let uri = &self.inner.uri;
            let cause = causes(&e);
            if e.is_connect() {
                Unreachable(format!(
                    "cannot connect to {uri} for {target}: {cause}; nothing was sent: \
                     retry once the server is up"
                ))
            } else {
                Unreachable(format!(
                    "the connection to {uri} failed during {target}: {cause}; the request may \
                     or may not have been applied: retry it once the server answers"
                ))
            }
        })?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| {
                Unreachable(format!(
                    "the answer from {} to {target} broke off: {}; the request may or may not \
                     have been applied: retry it once the server answers",
                    self.inner.uri,
                    causes(&e)
                ))
            })?
            .to_bytes();
        Ok(Answer { status, body })
    }
}

/// Signs `request`, whose body is `body`, with SigV4 at `time`: adds the
/// `Host`, `amz-sdk-invocation-id`, `X-Amz-Date` and `Authorization`
/// headers. The service is `sqs` for `AmazonSQS.*` targets, else `dynamodb`.
pub fn sign(
    request: &mut Request<Full<Bytes>>,
    body: &[u8],
    credentials: &Credentials,
    region: &str,
    target: &str,
    time: std::time::SystemTime,
) -> Result<(), String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
    let service = if target.starts_with("AmazonSQS.") {
        "sqs"
    } else {
        "dynamodb"
    };
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .ok_or("the request has no host")?;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| format!("no random bytes: {e}"))?;
    let nonce = hex::encode(nonce);
    let headers = request.headers_mut();
    headers.insert(
        hyper::header::HOST,
        host.parse()
            .map_err(|e| format!("bad host {host:?}: {e}"))?,
    );
    headers.insert(
        "amz-sdk-invocation-id",
        nonce.parse().map_err(|e| format!("{e}"))?,
    );
    let identity: aws_smithy_runtime_api::client::identity::Identity =
        aws_credential_types::Credentials::new(
            &credentials.access_key_id,
            &credentials.secret_access_key,
            None,
            None,
            "postbox",
        )
        .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let uri = request.uri().to_string();
    let header_pairs: Vec<(&str, &str)> = request
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
        .collect();
    let signable = SignableRequest::new(
        request.method().as_str(),
        uri,
        header_pairs.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _signature) = aws_sigv4::http_request::sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}

/// An error and its sources, `outer: inner: innermost`.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_http_urls() {
        assert_eq!(
            Endpoint::new("http://127.0.0.1:8000").unwrap().url(),
            "http://127.0.0.1:8000/"
        );
        assert_eq!(
            Endpoint::new("http://localhost:1/ignored/path")
                .unwrap()
                .url(),
            "http://localhost:1/"
        );
        let err = Endpoint::new("https://example.com").unwrap_err();
        assert!(err.to_string().contains("no TLS"), "{err}");
        assert!(Endpoint::new("127.0.0.1:8000").is_err());
        assert!(Endpoint::new("not a url").is_err());
    }
}

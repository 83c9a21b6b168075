//! The CLI's HTTP client for a running `postbox serve`: one request at a
//! time, JSON in and out, the API's error body turned into a message.

use std::path::PathBuf;

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Where the server is and who we are to it.
#[derive(clap::Args, Clone, Debug)]
pub struct Remote {
    /// The running server's address.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8000",
        env = "POSTBOX_ENDPOINT"
    )]
    pub endpoint: String,
    /// API token. Without it, the admin token that `postbox serve` wrote to
    /// `<data>/admin-token` is used.
    #[arg(long, env = "POSTBOX_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The server's data directory, to find the admin token.
    #[arg(long, default_value = "postbox-data", env = "POSTBOX_DATA")]
    pub data: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A failed call: the message to print, and the exit code to leave with.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code,
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::new(1, message)
    }
}

/// Exit codes: 0 done, 1 the request failed, 2 bad usage or refused input,
/// 3 the server is unreachable, 4 the report needs attention.
pub const EXIT_REFUSED: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;
pub const EXIT_ATTENTION: u8 = 4;

pub struct Api {
    client: Client<HttpConnector, Full<bytes::Bytes>>,
    endpoint: String,
    token: String,
}

impl Api {
    pub fn new(remote: &Remote) -> Result<Api, Failure> {
        let token = match &remote.token {
            Some(t) => t.clone(),
            None => {
                let path = remote.data.join("admin-token");
                std::fs::read_to_string(&path)
                    .map(|t| t.trim().to_owned())
                    .map_err(|e| {
                        Failure::new(
                            EXIT_REFUSED,
                            format!(
                                "no token: pass --token (or POSTBOX_TOKEN), or --data with the server's data directory to use its admin token ({}: {e})",
                                path.display()
                            ),
                        )
                    })?
            }
        };
        Ok(Api {
            client: Client::builder(TokioExecutor::new()).build_http(),
            endpoint: remote.endpoint.trim_end_matches('/').to_owned(),
            token,
        })
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> hyper::Request<Full<bytes::Bytes>> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.endpoint))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        req.body(Full::new(bytes.into())).expect("a valid request")
    }

    async fn send(
        &self,
        req: hyper::Request<Full<bytes::Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Failure> {
        self.client.request(req).await.map_err(|e| {
            Failure::new(
                EXIT_UNREACHABLE,
                format!(
                    "cannot reach postbox at {}: {e} (is `postbox serve` running?)",
                    self.endpoint
                ),
            )
        })
    }

    /// Calls the API; a non-2xx answer becomes a Failure with the server's message.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        let res = self.send(self.request(method, path, headers, body)).await?;
        let status = res.status();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| Failure::new(EXIT_UNREACHABLE, format!("the answer was cut off: {e}")))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        if status.is_success() {
            return serde_json::from_str(&text).or_else(|_| Ok(Value::String(text.into_owned())));
        }
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.into_owned());
        let code = if status.is_client_error() {
            EXIT_REFUSED
        } else {
            1
        };
        Err(Failure::new(code, format!("{status}: {message}")))
    }

    /// Follows a server-sent-events path, calling `each` with every data line.
    pub async fn follow(
        &self,
        path: &str,
        mut each: impl FnMut(&str) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let res = self.send(self.request("GET", path, &[], None)).await?;
        if !res.status().is_success() {
            let status = res.status();
            let bytes = res
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(Failure::new(
                EXIT_REFUSED,
                format!("{status}: {}", String::from_utf8_lossy(&bytes)),
            ));
        }
        let mut body = res.into_body();
        let mut pending = String::new();
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| Failure::new(EXIT_UNREACHABLE, format!("the stream broke: {e}")))?;
            if let Some(data) = frame.data_ref() {
                pending.push_str(&String::from_utf8_lossy(data));
                while let Some(end) = pending.find('\n') {
                    let line: String = pending.drain(..=end).collect();
                    if let Some(data) = line.trim_end().strip_prefix("data: ") {
                        each(data)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// An endpoint for the wire protocols at `url`, signing with the access
/// key in `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, or else the one
/// `postbox serve` wrote to `<data>/admin-access-key`; unsigned when there
/// is neither (a server run with `--wire-auth none`).
pub fn wire_endpoint(
    url: &str,
    data: &std::path::Path,
) -> Result<postbox_client::Endpoint, Failure> {
    use postbox_client::{Credentials, Endpoint, EndpointOptions};
    let credentials = match Credentials::from_env() {
        Some(c) => Some(c),
        None => {
            let path = data.join("admin-access-key");
            match std::fs::read_to_string(&path) {
                Ok(text) => Some(Credentials::parse_file(&text).ok_or_else(|| {
                    Failure::new(
                        EXIT_REFUSED,
                        format!(
                            "{} holds no AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines",
                            path.display()
                        ),
                    )
                })?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    return Err(Failure::new(
                        EXIT_REFUSED,
                        format!("cannot read {}: {e}", path.display()),
                    ));
                }
            }
        }
    };
    Endpoint::with_options(
        url,
        EndpointOptions {
            credentials,
            ..EndpointOptions::default()
        },
    )
    .map_err(|e| Failure::new(EXIT_REFUSED, e.to_string()))
}

/// `message`, with what to do when it is the server refusing the request's
/// signature.
pub fn explain_wire_error(message: String, endpoint: &postbox_client::Endpoint) -> String {
    if message.contains("MissingAuthenticationToken") && !endpoint.signs() {
        format!(
            "{message}: the server requires signed requests and no access key was found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass --data with the server's data directory (its admin-access-key file)"
        )
    } else if message.contains("UnrecognizedClient") {
        format!(
            "{message}: the access key is not one this server issued (check AWS_ACCESS_KEY_ID, or --data)"
        )
    } else if message.contains("InvalidSignature") {
        format!(
            "{message}: check AWS_SECRET_ACCESS_KEY (or the admin-access-key file) and this machine's clock"
        )
    } else {
        message
    }
}

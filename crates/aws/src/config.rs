//! The SDK's configuration: the AWS way (default chains for credentials,
//! region and endpoints) on the rustls/ring HTTP client, or fixed for local
//! services.

/// The SDK's configuration loader on the rustls/ring HTTP client, with the
/// SDK's default chains for credentials, region and endpoints; a caller may
/// set any of them before loading.
pub fn config_loader() -> aws_config::ConfigLoader {
    use aws_smithy_http_client::tls;
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http)
}

/// The SDK's configuration for services on `endpoint` that accept any
/// credentials (DynamoDB Local, a local SQS server): region `us-east-1`
/// and placeholder keys, nothing read from the environment. For tests and
/// local benchmarks.
pub async fn local_config(endpoint: &str) -> aws_config::SdkConfig {
    local_config_with_key(endpoint, "local", "local").await
}

/// [`local_config`] signing with the given access key: for a local service
/// that checks signatures, such as `postbox serve` with its admin access key.
pub async fn local_config_with_key(
    endpoint: &str,
    access_key_id: &str,
    secret_access_key: &str,
) -> aws_config::SdkConfig {
    config_loader()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_credential_types::Credentials::new(
            access_key_id,
            secret_access_key,
            None,
            None,
            "postbox-local",
        ))
        .load()
        .await
}

/// The SDK's configuration from the environment ([`config_loader`]).
pub async fn sdk_config() -> aws_config::SdkConfig {
    config_loader().load().await
}

/// Resolves `config`'s credentials once, so that a process with none
/// stops at startup with what was tried, instead of failing its first
/// request with the SDK's chain of errors. Waits at most `within` (the
/// instance metadata endpoint can be slow to refuse).
pub async fn check_credentials(
    config: &aws_config::SdkConfig,
    within: std::time::Duration,
) -> Result<(), String> {
    use aws_credential_types::provider::ProvideCredentials;
    let tried = "tried the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), the profile \
                 (AWS_PROFILE in ~/.aws/config and ~/.aws/credentials, or AWS_CONFIG_FILE and \
                 AWS_SHARED_CREDENTIALS_FILE), web identity (AWS_WEB_IDENTITY_TOKEN_FILE), and \
                 the container and instance metadata endpoints";
    let Some(provider) = config.credentials_provider() else {
        return Err(format!(
            "no AWS credentials provider is configured; {tried}"
        ));
    };
    match tokio::time::timeout(within, provider.provide_credentials()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "no AWS credentials: {tried}; the last said: {}",
            last_cause(&e)
        )),
        Err(_) => Err(format!(
            "no AWS credentials within {} s: {tried}",
            within.as_secs()
        )),
    }
}

/// The innermost message of an error's source chain: the part that says
/// what went wrong, without the wrappers around it.
fn last_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

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

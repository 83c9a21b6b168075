//! `--backend`: where a client command finds the store and the queues.
//!
//! `embedded` (the default) reaches a running `postbox serve` over its wire
//! endpoint; `aws` reaches DynamoDB and SQS through the AWS SDK, configured
//! the AWS way (`AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL_DYNAMODB`,
//! `AWS_ENDPOINT_URL_SQS`, ...), with this stack's name prefix.

use postbox_aws::{DynamoStore, SqsQueues};

use crate::http::{EXIT_REFUSED, Failure};

/// Which backend a command runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// A running `postbox serve`, over its wire endpoint.
    Embedded,
    /// DynamoDB and SQS, through the AWS SDK.
    Aws,
}

/// The backend flags of a client command.
#[derive(Clone, Debug, clap::Args)]
pub struct BackendArgs {
    /// Where the store and the queues are: `embedded` (the server at
    /// --endpoint) or `aws` (DynamoDB and SQS, by the AWS SDK's usual
    /// configuration: AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL_DYNAMODB,
    /// AWS_ENDPOINT_URL_SQS, ...).
    #[arg(long, value_enum, default_value_t = Backend::Embedded, env = "POSTBOX_BACKEND")]
    pub backend: Backend,
    /// With --backend aws: the prefix of this stack's table and queue names
    /// (so two stacks can share an account).
    #[arg(long, default_value = "", env = "POSTBOX_AWS_PREFIX")]
    pub aws_prefix: String,
}

/// The SDK's configuration, or a startup error naming what is missing.
pub async fn aws_config() -> Result<postbox_aws::SdkConfig, Failure> {
    let config = postbox_aws::sdk_config().await;
    if config.region().is_none() {
        return Err(Failure::new(
            EXIT_REFUSED,
            "--backend aws: no AWS region; set AWS_REGION (or a region in the profile AWS_PROFILE names)",
        ));
    }
    postbox_aws::check_credentials(&config, std::time::Duration::from_secs(10))
        .await
        .map_err(|e| Failure::new(EXIT_REFUSED, format!("--backend aws: {e}")))?;
    Ok(config)
}

/// The store and queues on AWS, or a startup error naming what is missing.
pub async fn aws(args: &BackendArgs) -> Result<(DynamoStore, SqsQueues), Failure> {
    let config = aws_config().await?;
    Ok((
        DynamoStore::new(&config, &args.aws_prefix),
        SqsQueues::new(&config, &args.aws_prefix),
    ))
}

//! What the AWS SDK retried: an interceptor on every client Postbox makes
//! counts the attempts after the first (the SDK's standard retries of
//! throttling and transient failures, with jittered backoff) and the
//! attempts AWS answered with throttling (`ThrottlingException`,
//! `ProvisionedThroughputExceededException`, `RequestLimitExceeded`, SQS's
//! `RequestThrottled`, HTTP 429), so they show in the node's metrics
//! instead of only as latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// The counts of one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SdkStats {
    /// Attempts after a request's first (any reason the SDK retries for).
    pub retries: u64,
    /// Attempts AWS answered with throttling.
    pub throttled: u64,
}

#[derive(Debug, Default)]
struct Counts {
    retries: AtomicU64,
    throttled: AtomicU64,
}

/// The interceptor, and the counts it keeps. Cheap to clone; clones count
/// together.
#[derive(Clone, Debug, Default)]
pub(crate) struct SdkCounters(Arc<Counts>);

impl SdkCounters {
    pub(crate) fn stats(&self) -> SdkStats {
        SdkStats {
            retries: self.0.retries.load(Ordering::Relaxed),
            throttled: self.0.throttled.load(Ordering::Relaxed),
        }
    }
}

/// Error codes that mean "slow down".
const THROTTLING: &[&str] = &[
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "ThrottledException",
    "TooManyRequestsException",
];

impl Intercept for SdkCounters {
    fn name(&self) -> &'static str {
        "PostboxSdkCounters"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg
            .load::<RequestAttempts>()
            .is_some_and(|a| a.attempts() > 1)
        {
            self.0.retries.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(response) = context.response() else {
            return Ok(());
        };
        let status = response.status().as_u16();
        if status == 429 {
            self.0.throttled.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if status < 400 {
            return Ok(());
        }
        // The error code is in a header (SQS's JSON protocol) or the body
        // (DynamoDB's `__type`), which the SDK has read by now.
        let header = response
            .headers()
            .get("x-amzn-query-error")
            .into_iter()
            .chain(response.headers().get("x-amzn-errortype"))
            .any(|v| THROTTLING.iter().any(|c| v.contains(c)));
        let body = response.body().bytes().is_some_and(|b| {
            let text = String::from_utf8_lossy(&b[..b.len().min(512)]);
            THROTTLING.iter().any(|c| text.contains(c))
        });
        if header || body {
            self.0.throttled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

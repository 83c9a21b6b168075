//! ClientRequestToken of TransactWriteItems: a retried transaction with the
//! same token and the same request, within ten minutes, succeeds again
//! without being applied twice; the same token with another request is
//! refused.
//!
//! The tokens are kept in memory: a restart of the process forgets them
//! (DynamoDB keeps them for ten minutes whatever happens).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::StoreError;

/// How long a token is remembered.
const WINDOW_MS: u64 = 10 * 60 * 1000;
/// Longest token DynamoDB accepts.
const MAX_TOKEN_LEN: usize = 36;

/// What a token means for a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TokenUse {
    /// Not seen in the window: run the request.
    Fresh,
    /// The same request already committed: answer success without running.
    Replay,
}

/// Tokens of committed transactions with a fingerprint of their request.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    seen: Mutex<HashMap<String, (String, u64)>>,
}

impl Tokens {
    /// Checks `token` for the request with `fingerprint` at `now_ms`.
    pub(crate) fn check(
        &self,
        token: &str,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<TokenUse, StoreError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value '{token}' at 'clientRequestToken' failed to satisfy constraint: Member must have length between 1 and {MAX_TOKEN_LEN}"
            )));
        }
        let mut seen = self.seen.lock().expect("token lock");
        seen.retain(|_, (_, at)| now_ms.saturating_sub(*at) < WINDOW_MS);
        match seen.get(token) {
            None => Ok(TokenUse::Fresh),
            Some((f, _)) if f == fingerprint => Ok(TokenUse::Replay),
            Some(_) => Err(StoreError::IdempotentParameterMismatch(
                "The request uses the same client token as a previous, but non-identical request. Use a new ClientRequestToken for a different transaction.".to_owned(),
            )),
        }
    }

    /// Remembers a committed transaction's token.
    pub(crate) fn record(&self, token: String, fingerprint: String, now_ms: u64) {
        self.seen
            .lock()
            .expect("token lock")
            .insert(token, (fingerprint, now_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_token_same_request_replays_other_request_is_refused() {
        let t = Tokens::default();
        assert_eq!(t.check("tok", "a", 0).unwrap(), TokenUse::Fresh);
        t.record("tok".into(), "a".into(), 0);
        assert_eq!(t.check("tok", "a", 1000).unwrap(), TokenUse::Replay);
        assert!(matches!(
            t.check("tok", "b", 1000),
            Err(StoreError::IdempotentParameterMismatch(_))
        ));
        assert_eq!(
            t.check("tok", "b", WINDOW_MS + 1).unwrap(),
            TokenUse::Fresh,
            "forgotten after ten minutes"
        );
        assert!(t.check("", "a", 0).is_err());
    }
}

//! ClientRequestToken of TransactWriteItems: a retried transaction with the
//! same token and the same request, within ten minutes, succeeds again
//! without being applied twice; the same token with another request is
//! refused.
//!
//! A token is checked and recorded by the writer, inside the batch that
//! applies its transaction, in two tables of the store file
//! ([`CLIENT_TOKENS`], and [`CLIENT_TOKEN_TIMES`] to forget tokens in the
//! order they were recorded). So the token commits, is logged and survives
//! a crash exactly when its transaction does, and two requests with one
//! token never both run, even when they arrive together: the second sees
//! the first's row, in the same batch or a later one.

use redb::ReadableTable;
use sha2::{Digest, Sha256};

use crate::StoreError;
use crate::api::TransactWriteItem;

use super::context::WriteContext;
use super::storage_err;
use super::tables::{CLIENT_TOKEN_TIMES, CLIENT_TOKENS};

/// How long a token is remembered.
const WINDOW_MS: u64 = 10 * 60 * 1000;
/// Longest token DynamoDB accepts.
const MAX_TOKEN_LEN: usize = 36;
/// Expired tokens a transaction forgets, at most, so no request pays for a
/// long backlog at once.
const FORGET_PER_USE: usize = 64;

/// What a token means for a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TokenUse {
    /// Not seen in the window: run the request.
    Fresh,
    /// The same request already committed: answer success without running.
    Replay,
}

/// A transaction's token with the fingerprint (SHA-256) of its request.
#[derive(Debug)]
pub(crate) struct Token {
    token: String,
    fingerprint: [u8; 32],
}

impl Token {
    /// Checks the token's length and fingerprints `items`.
    pub(crate) fn new(token: &str, items: &[TransactWriteItem]) -> Result<Token, StoreError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value '{token}' at 'clientRequestToken' failed to satisfy constraint: Member must have length between 1 and {MAX_TOKEN_LEN}"
            )));
        }
        let request = serde_json::to_vec(items).expect("requests serialise");
        Ok(Token {
            token: token.to_owned(),
            fingerprint: Sha256::digest(&request).into(),
        })
    }

    /// What the token means now, from the rows committed so far (this
    /// batch's included). Writes nothing.
    pub(crate) fn check(&self, ctx: &WriteContext<'_>) -> Result<TokenUse, StoreError> {
        let now = ctx.now_ms();
        let tokens = ctx.transaction().open_table(CLIENT_TOKENS)?;
        let Some(row) = tokens.get(self.token.as_str()).map_err(storage_err)? else {
            return Ok(TokenUse::Fresh);
        };
        let (at, fingerprint) = row.value();
        if now.saturating_sub(at) >= WINDOW_MS {
            Ok(TokenUse::Fresh)
        } else if fingerprint == self.fingerprint.as_slice() {
            Ok(TokenUse::Replay)
        } else {
            Err(StoreError::IdempotentParameterMismatch(
                "The request uses the same client token as a previous, but non-identical request. Use a new ClientRequestToken for a different transaction.".to_owned(),
            ))
        }
    }

    /// Records the token of a transaction that has just run in this batch,
    /// and forgets a few tokens whose window has passed.
    pub(crate) fn record(&self, ctx: &WriteContext<'_>) -> Result<(), StoreError> {
        let now = ctx.now_ms();
        let opener = ctx.transaction();
        let mut tokens = opener.open_table(CLIENT_TOKENS)?;
        let mut times = opener.open_table(CLIENT_TOKEN_TIMES)?;
        let expired: Vec<(u64, String)> = times
            .range((0, "")..(now.saturating_sub(WINDOW_MS), ""))
            .map_err(storage_err)?
            .take(FORGET_PER_USE)
            .map(|entry| {
                entry.map(|(k, _)| {
                    let (at, token) = k.value();
                    (at, token.to_owned())
                })
            })
            .collect::<Result<_, _>>()
            .map_err(storage_err)?;
        for (at, token) in &expired {
            times.remove((*at, token.as_str())).map_err(storage_err)?;
            // A token used again after its window has a newer row.
            let recorded_then = tokens
                .get(token.as_str())
                .map_err(storage_err)?
                .is_some_and(|row| row.value().0 == *at);
            if recorded_then {
                tokens.remove(token.as_str()).map_err(storage_err)?;
            }
        }
        let earlier = tokens
            .insert(self.token.as_str(), (now, self.fingerprint.as_slice()))
            .map_err(storage_err)?
            .map(|old| old.value().0);
        if let Some(at) = earlier {
            times
                .remove((at, self.token.as_str()))
                .map_err(storage_err)?;
        }
        times
            .insert((now, self.token.as_str()), ())
            .map_err(storage_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_must_have_one_to_36_characters() {
        assert!(Token::new("", &[]).is_err());
        assert!(Token::new(&"t".repeat(37), &[]).is_err());
        assert!(Token::new(&"t".repeat(36), &[]).is_ok());
    }
}

//! DynamoDB's expression language, as Postbox's item store speaks it.
//!
//! This crate owns the five kinds of expression a DynamoDB request can carry:
//! condition and filter expressions ([`parse_condition`], [`parse_filter`]),
//! update expressions ([`parse_update`]), projection expressions
//! ([`parse_projection`]) and key condition expressions
//! ([`parse_key_condition`]). Each is parsed with DynamoDB's grammar, with
//! `#name` and `:value` placeholders resolved at parse time through one
//! [`Placeholders`] per request, and rejected with DynamoDB's own message
//! when DynamoDB would reject it. Parsed expressions evaluate against items
//! of `postbox-item`.
//!
//! Architecture Invariant: the crate is pure. It knows nothing of tables,
//! storage or the wire; every error is a [`ExprError`] whose message the
//! caller returns verbatim as a ValidationException.
//!
//! Code map: `lexer` (tokens) -> `parser` (shared cursor, paths,
//! placeholders, error order) -> one module per expression kind
//! (`condition`, `update`, `projection`, `key_condition`); `path` holds
//! document paths and `reserved` DynamoDB's reserved words.
//!
//! Testing: every module has data-driven unit tests through one `check`
//! helper; `tests/properties.rs` checks random conditions and updates
//! against small reference models; `tests/dynamodb_local.rs` replays every
//! unit-test expression and 900 random ones against answers recorded from
//! DynamoDB Local (`tests/golden/`, with the scripts that record them), so
//! the messages and semantics here are DynamoDB's, not our reading of its
//! documentation.

#![cfg_attr(test, recursion_limit = "256")]
#![warn(missing_docs)]

mod cache;
mod condition;
mod error;
#[cfg(test)]
mod fixtures;
mod key_condition;
mod lexer;
mod parser;
mod path;
mod placeholders;
mod projection;
mod reserved;
mod update;

pub use condition::{
    Comparator, Condition, MAX_IN_OPERANDS, Operand, parse_condition, parse_filter,
};
pub use error::{ExprError, Kind};
pub use key_condition::{KeyCondition, SortKeyCondition, parse_key_condition};
pub use parser::{MAX_EXPRESSION_BYTES, MAX_PATH_DEPTH};
pub use path::{Path, PathElement};
pub use placeholders::Placeholders;
pub use projection::{Projection, parse_projection, project};
pub use reserved::is_reserved;
pub use update::{Action, SetValue, Update, UpdateOperand, parse_update};

/// The parsers without the cache of parsed expressions (`cache`), for
/// measuring what it saves.
#[doc(hidden)]
pub mod uncached {
    use crate::{Condition, ExprError, Kind, Placeholders, Update};

    /// [`crate::parse_condition`], parsed afresh.
    pub fn parse_condition(src: &str, ph: &mut Placeholders) -> Result<Condition, ExprError> {
        crate::condition::parse_uncached(src, Kind::Condition, ph)
    }

    /// [`crate::parse_update`], parsed afresh.
    pub fn parse_update(src: &str, ph: &mut Placeholders) -> Result<Update, ExprError> {
        crate::update::parse_uncached(src, ph)
    }
}

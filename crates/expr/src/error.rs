//! The one error type of this crate and the expression kinds it names.
//!
//! Every error here is a DynamoDB `ValidationException`: the message is the
//! text DynamoDB answers with, so callers pass it through verbatim.

use postbox_item::ItemError;

/// An expression that DynamoDB would reject, at parse time or while applying
/// an update. The message is DynamoDB's own wording.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    /// DynamoDB's message, e.g. `Invalid UpdateExpression: Syntax error; token: "<EOF>", near: "= "`.
    pub message: String,
}

impl ExprError {
    /// An error with exactly this message.
    pub fn new(message: impl Into<String>) -> ExprError {
        ExprError {
            message: message.into(),
        }
    }

    /// An error about one expression, prefixed as DynamoDB does:
    /// `Invalid ConditionExpression: <what>`.
    pub(crate) fn invalid(kind: Kind, what: impl std::fmt::Display) -> ExprError {
        ExprError::new(format!("Invalid {}: {what}", kind.name()))
    }
}

impl From<ItemError> for ExprError {
    /// Number arithmetic in updates fails with the item model's validation
    /// messages (overflow, too many digits), which DynamoDB uses too.
    fn from(e: ItemError) -> ExprError {
        ExprError::new(e.to_string())
    }
}

/// Which request parameter an expression came from. DynamoDB names it in every
/// parse error, and some rules differ between kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ConditionExpression` of a write or a ConditionCheck.
    Condition,
    /// `FilterExpression` of a Query or Scan: the condition grammar.
    Filter,
    /// `KeyConditionExpression` of a Query: the condition grammar, restricted.
    KeyCondition,
    /// `UpdateExpression`.
    Update,
    /// `ProjectionExpression`.
    Projection,
}

impl Kind {
    /// The parameter name as DynamoDB writes it in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Condition => "ConditionExpression",
            Kind::Filter => "FilterExpression",
            Kind::KeyCondition => "KeyConditionExpression",
            Kind::Update => "UpdateExpression",
            Kind::Projection => "ProjectionExpression",
        }
    }
}

//! DynamoDB's item model, as Postbox keeps and speaks it.
//!
//! This crate owns the values (every DynamoDB attribute type, with `N` an exact
//! decimal of up to 38 digits that never goes through `f64`), their DynamoDB
//! JSON wire form, the compact binary form the embedded store writes, the
//! order-preserving key encodings, and item size accounting. It is pure: no
//! I/O, no clock.

mod codec;
pub mod json;
mod key;
mod number;
mod value;

pub use codec::{
    EncodedAttributes, RawValueRef, ValueRef, decode_item, encode_item, encoded_attributes,
    encoded_item_size, visit_encoded_item, visit_encoded_item_unchecked,
};
pub use key::{encode_partition_key, encode_sort_key};
pub use number::{MAX_DIGITS, Number};
pub use value::{
    AttributeType, AttributeValue, Item, item_from_json, item_size, item_to_json,
    scalar_item_from_json_text,
};

/// DynamoDB's limit on the size of one item.
pub const MAX_ITEM_SIZE: usize = 400 * 1024;

/// Why a value or item is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    /// Input that DynamoDB would answer with a ValidationException.
    #[error("{0}")]
    Validation(String),
    /// Stored bytes that do not decode: the file was damaged or written by
    /// something other than Postbox.
    #[error("corrupt stored item: {0}")]
    Corrupt(String),
}

impl ItemError {
    /// A validation error with the given message.
    pub fn validation(msg: impl Into<String>) -> ItemError {
        ItemError::Validation(msg.into())
    }
}

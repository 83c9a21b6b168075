//! Request rules DynamoDB checks before touching any item, with its messages:
//! table names, placeholder maps, ReturnValues, limits.

use postbox_expr::{ExprError, Placeholders};
use postbox_item::{AttributeValue, Item};

use crate::StoreError;
use crate::api::{Names, ReturnValue, Values};

/// DynamoDB's limit on one item, re-exported for the ops.
pub(crate) use postbox_item::MAX_ITEM_SIZE;

/// Most actions in one TransactWriteItems or TransactGetItems.
pub(crate) const MAX_TRANSACT_ACTIONS: usize = 100;

/// A transaction's item count: 1 to [`MAX_TRANSACT_ACTIONS`], refused in
/// DynamoDB's words otherwise (TransactGetItems and TransactWriteItems).
pub(crate) fn transact_items(n: usize) -> Result<(), StoreError> {
    if (1..=MAX_TRANSACT_ACTIONS).contains(&n) {
        return Ok(());
    }
    let bound = if n == 0 {
        "greater than or equal to 1".to_owned()
    } else {
        format!("less than or equal to {MAX_TRANSACT_ACTIONS}")
    };
    Err(StoreError::validation(format!(
        "1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length {bound}"
    )))
}

/// Largest TransactWriteItems request, summed over its items.
pub(crate) const MAX_TRANSACT_BYTES: usize = 4 * 1024 * 1024;
/// Most keys in one BatchGetItem.
pub(crate) const MAX_BATCH_GET_KEYS: usize = 100;
/// Most writes in one BatchWriteItem.
pub(crate) const MAX_BATCH_WRITES: usize = 25;
/// Data one Query or Scan page reads at most.
pub(crate) const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// DynamoDB's table-name rule: 3 to 255 of `[a-zA-Z0-9_.-]`.
pub(crate) fn table_name(name: &str) -> Result<(), StoreError> {
    let constraint = |what: &str| {
        StoreError::validation(format!(
            "1 validation error detected: Value '{name}' at 'tableName' failed to satisfy constraint: {what}"
        ))
    };
    if name.len() < 3 {
        return Err(constraint(
            "Member must have length greater than or equal to 3",
        ));
    }
    if name.len() > 255 {
        return Err(constraint(
            "Member must have length less than or equal to 255",
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(constraint(
            "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+",
        ));
    }
    Ok(())
}

/// The placeholder maps of a request that has expressions only when
/// `has_expression`: DynamoDB rejects maps sent without any expression.
/// (Empty maps and unused entries are checked by [`Placeholders::finish`].)
pub(crate) fn placeholder_maps(
    names: Option<&Names>,
    values: Option<&Values>,
    has_expression: bool,
) -> Result<(), StoreError> {
    if let Some(n) = names
        && n.is_empty()
    {
        return Err(StoreError::validation(
            "ExpressionAttributeNames must not be empty",
        ));
    }
    if let Some(v) = values
        && v.is_empty()
    {
        return Err(StoreError::validation(
            "ExpressionAttributeValues must not be empty",
        ));
    }
    if !has_expression && names.is_some() {
        return Err(StoreError::validation(
            "ExpressionAttributeNames can only be specified when using expressions",
        ));
    }
    if !has_expression && values.is_some() {
        return Err(StoreError::validation(
            "ExpressionAttributeValues can only be specified when using expressions",
        ));
    }
    Ok(())
}

/// Placeholders for one request's expressions.
pub(crate) fn placeholders<'a>(
    names: Option<&'a Names>,
    values: Option<&'a Values>,
) -> Placeholders<'a> {
    Placeholders::new(names, values)
}

/// An expression error as the ValidationException it is.
pub(crate) fn expr(e: ExprError) -> StoreError {
    StoreError::Validation(e.message)
}

/// PutItem and DeleteItem return only NONE or ALL_OLD.
pub(crate) fn return_values_old_only(rv: ReturnValue) -> Result<(), StoreError> {
    match rv {
        ReturnValue::None | ReturnValue::AllOld => Ok(()),
        _ => Err(StoreError::validation("Return values set to invalid value")),
    }
}

/// A Limit must be at least 1.
pub(crate) fn limit(limit: Option<i64>) -> Result<Option<usize>, StoreError> {
    match limit {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as usize)),
        Some(n) => Err(StoreError::validation(format!(
            "1 validation error detected: Value '{n}' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1"
        ))),
    }
}

/// Deepest nesting of maps and lists DynamoDB stores.
const MAX_NESTING: usize = 32;
/// Longest attribute name: "less than 64 KB".
const MAX_NAME_BYTES: usize = 64 * 1024 - 1;

/// The rules of an item's shape beyond its key and size: non-empty names
/// under 64 KB, and at most 32 levels of nested maps and lists.
pub(crate) fn item_shape(item: &Item) -> Result<(), StoreError> {
    for (name, value) in item {
        if name.is_empty() {
            return Err(StoreError::validation(
                "One or more parameter values were invalid: An attribute name cannot be empty",
            ));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(StoreError::validation(
                "One or more parameter values were invalid: An attribute name must be less than 64 KB long",
            ));
        }
        if depth(value) > MAX_NESTING {
            return Err(StoreError::validation(
                "Nesting Levels have exceeded supported limits: Attributes in the item have nested levels beyond supported limit",
            ));
        }
    }
    Ok(())
}

/// Levels of maps and lists in a value (0 for a scalar or set).
fn depth(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::M(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        AttributeValue::L(l) => 1 + l.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// DynamoDB's error for an item over 400 KB.
pub(crate) fn item_too_large() -> StoreError {
    StoreError::validation("Item size has exceeded the maximum allowed size")
}

/// DynamoDB's error for an update whose result is over 400 KB.
pub(crate) fn updated_item_too_large() -> StoreError {
    StoreError::validation("Item size to update has exceeded the maximum allowed size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_holds_1_to_100_items() {
        assert!(transact_items(1).is_ok() && transact_items(100).is_ok());
        for (n, bound) in [
            (0, "greater than or equal to 1"),
            (101, "less than or equal to 100"),
        ] {
            match transact_items(n) {
                Err(StoreError::Validation(m)) => assert!(m.ends_with(bound), "{m}"),
                other => panic!("{n} items: {other:?}"),
            }
        }
    }

    #[test]
    fn table_names_follow_dynamodb_rules() {
        assert!(table_name("abc").is_ok());
        assert!(table_name("a_b.c-D9").is_ok());
        for bad in ["ab", "a b c", "tab/le", &"x".repeat(256)] {
            assert!(
                matches!(table_name(bad), Err(StoreError::Validation(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn placeholder_maps_need_an_expression() {
        let names: Names = [("#a".to_owned(), "a".to_owned())].into();
        assert!(placeholder_maps(Some(&names), None, true).is_ok());
        let err = placeholder_maps(Some(&names), None, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("can only be specified when using expressions")
        );
        let err = placeholder_maps(Some(&Names::new()), None, true).unwrap_err();
        assert!(err.to_string().contains("must not be empty"));
    }
}

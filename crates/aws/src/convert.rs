//! Postbox's item model to the SDK's types and back.
//!
//! Postbox's `AttributeValue` and the SDK's are the same DynamoDB types;
//! numbers travel as their decimal text (DynamoDB's wire form), sets as
//! lists. The SDK's `Unknown` variant (a type a newer DynamoDB added) is
//! refused rather than dropped.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue as Av;
use postbox_item::{AttributeValue, Item, Number};
use postbox_store::StoreError;

/// One value to the SDK.
pub(crate) fn to_sdk(v: &AttributeValue) -> Av {
    match v {
        AttributeValue::S(s) => Av::S(s.clone()),
        AttributeValue::N(n) => Av::N(n.to_string()),
        AttributeValue::B(b) => Av::B(Blob::new(b.clone())),
        AttributeValue::Bool(b) => Av::Bool(*b),
        AttributeValue::Null => Av::Null(true),
        AttributeValue::M(m) => Av::M(to_sdk_item(m)),
        AttributeValue::L(l) => Av::L(l.iter().map(to_sdk).collect()),
        AttributeValue::Ss(s) => Av::Ss(s.iter().cloned().collect()),
        AttributeValue::Ns(s) => Av::Ns(s.iter().map(Number::to_string).collect()),
        AttributeValue::Bs(s) => Av::Bs(s.iter().map(|b| Blob::new(b.clone())).collect()),
    }
}

/// An item (or a key, or a map of expression values) to the SDK.
pub(crate) fn to_sdk_item(item: &Item) -> HashMap<String, Av> {
    item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()
}

/// Optional maps, as the SDK's builders take them.
pub(crate) fn to_sdk_values(values: Option<&Item>) -> Option<HashMap<String, Av>> {
    values.map(to_sdk_item)
}

/// Names, as the SDK's builders take them.
pub(crate) fn to_sdk_names(
    names: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<HashMap<String, String>> {
    names.map(|n| n.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn number(text: &str) -> Result<Number, StoreError> {
    text.parse::<Number>().map_err(|e| {
        StoreError::Storage(format!(
            "DynamoDB answered a number Postbox cannot read ({text}): {e}"
        ))
    })
}

/// One value from the SDK.
pub(crate) fn from_sdk(v: &Av) -> Result<AttributeValue, StoreError> {
    Ok(match v {
        Av::S(s) => AttributeValue::S(s.clone()),
        Av::N(n) => AttributeValue::N(number(n)?),
        Av::B(b) => AttributeValue::B(b.as_ref().to_vec()),
        Av::Bool(b) => AttributeValue::Bool(*b),
        Av::Null(_) => AttributeValue::Null,
        Av::M(m) => AttributeValue::M(from_sdk_item(m)?),
        Av::L(l) => AttributeValue::L(l.iter().map(from_sdk).collect::<Result<_, _>>()?),
        Av::Ss(s) => AttributeValue::Ss(s.iter().cloned().collect()),
        Av::Ns(s) => AttributeValue::Ns(s.iter().map(|n| number(n)).collect::<Result<_, _>>()?),
        Av::Bs(s) => AttributeValue::Bs(s.iter().map(|b| b.as_ref().to_vec()).collect()),
        other => {
            return Err(StoreError::Storage(format!(
                "DynamoDB answered an attribute type Postbox does not know: {other:?}"
            )));
        }
    })
}

/// An item from the SDK.
pub(crate) fn from_sdk_item(item: &HashMap<String, Av>) -> Result<Item, StoreError> {
    item.iter()
        .map(|(k, v)| Ok((k.clone(), from_sdk(v)?)))
        .collect()
}

/// An optional item from the SDK.
pub(crate) fn from_sdk_opt(item: Option<&HashMap<String, Av>>) -> Result<Option<Item>, StoreError> {
    item.map(from_sdk_item).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn n(s: &str) -> Number {
        s.parse().unwrap()
    }

    #[test]
    fn every_type_goes_to_the_sdk_and_back_unchanged() {
        let item: Item = BTreeMap::from([
            ("s".into(), AttributeValue::S("héllo".into())),
            ("n".into(), AttributeValue::N(n("-12.5E+30"))),
            (
                "big".into(),
                AttributeValue::N(n("99999999999999999999999999999999999999")),
            ),
            ("b".into(), AttributeValue::B(vec![0, 255, 7])),
            ("t".into(), AttributeValue::Bool(true)),
            ("z".into(), AttributeValue::Null),
            (
                "m".into(),
                AttributeValue::M(BTreeMap::from([(
                    "l".into(),
                    AttributeValue::L(vec![AttributeValue::Null, AttributeValue::S("x".into())]),
                )])),
            ),
            (
                "ss".into(),
                AttributeValue::Ss(BTreeSet::from(["a".into(), "b".into()])),
            ),
            (
                "ns".into(),
                AttributeValue::Ns(BTreeSet::from([n("1"), n("0.001")])),
            ),
            (
                "bs".into(),
                AttributeValue::Bs(BTreeSet::from([vec![1], vec![2, 3]])),
            ),
        ]);
        let sdk = to_sdk_item(&item);
        assert_eq!(
            sdk["n"],
            Av::N("-1.25E+31".parse::<Number>().unwrap().to_string())
        );
        assert_eq!(from_sdk_item(&sdk).unwrap(), item);
    }

    #[test]
    fn a_number_postbox_cannot_hold_is_an_error_not_a_rounding() {
        let bad = HashMap::from([("n".to_owned(), Av::N("1e400".into()))]);
        assert!(matches!(from_sdk_item(&bad), Err(StoreError::Storage(_))));
    }
}

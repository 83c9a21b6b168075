//! The crate as the store uses it: every expression of one request shares
//! one `Placeholders`, and `finish` reports what none of them used.

use std::collections::BTreeMap;

use postbox_expr::{
    ExprError, Placeholders, parse_condition, parse_key_condition, parse_projection, parse_update,
    project,
};
use postbox_item::{AttributeValue, Item};

fn names(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn values(pairs: &[(&str, AttributeValue)]) -> BTreeMap<String, AttributeValue> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// A conditional UpdateItem with ReturnValues UPDATED_NEW, start to finish.
#[test]
fn conditional_update_with_updated_new() -> Result<(), ExprError> {
    let n = names(&[("#s", "status"), ("#c", "count")]);
    let v = values(&[
        (":open", AttributeValue::s("open")),
        (":one", AttributeValue::n(1)),
        (":zero", AttributeValue::n(0)),
    ]);
    let mut ph = Placeholders::new(Some(&n), Some(&v));
    let condition = parse_condition("attribute_not_exists(pk) OR #s = :open", &mut ph)?;
    let update = parse_update(
        "SET #c = if_not_exists(#c, :zero) + :one, #s = :open",
        &mut ph,
    )?;
    ph.finish()?;

    let mut item: Item = BTreeMap::new();
    assert!(condition.evaluate(None));
    update.apply(&mut item)?;
    update.apply(&mut item)?;
    assert!(condition.evaluate(Some(&item)));
    assert_eq!(item["count"], AttributeValue::n(2));

    // The "cannot update key attribute" check and UPDATED_NEW both start from paths().
    assert!(
        update
            .paths()
            .iter()
            .all(|p| p.is_top_level() && p.top_level() != "pk")
    );
    let updated_new = project(update.paths(), &item);
    assert_eq!(updated_new.len(), 2);
    Ok(())
}

#[test]
fn unused_placeholders_are_reported_after_all_expressions() {
    let n = names(&[("#a", "a"), ("#b", "b")]);
    let v = values(&[(":x", AttributeValue::n(1)), (":y", AttributeValue::n(2))]);

    let mut ph = Placeholders::new(Some(&n), Some(&v));
    parse_condition("#a = :x", &mut ph).unwrap();
    parse_projection("#b", &mut ph).unwrap();
    assert_eq!(
        ph.finish().unwrap_err().message,
        "Value provided in ExpressionAttributeValues unused in expressions: keys: {:y}"
    );

    let mut ph = Placeholders::new(Some(&n), Some(&v));
    parse_key_condition("#a = :x AND #b > :y", &mut ph, "a", Some("b")).unwrap();
    assert!(ph.finish().is_ok());

    let mut ph = Placeholders::new(Some(&n), Some(&v));
    parse_update("SET #a = :x, c = :y", &mut ph).unwrap();
    assert_eq!(
        ph.finish().unwrap_err().message,
        "Value provided in ExpressionAttributeNames unused in expressions: keys: {#b}"
    );
}

#[test]
fn empty_placeholder_maps_are_refused_before_parsing() {
    let empty = BTreeMap::new();
    let mut ph = Placeholders::new(None, Some(&empty));
    let err = parse_condition("a = :nope", &mut ph).unwrap_err();
    assert_eq!(err.message, "ExpressionAttributeValues must not be empty");
    assert_eq!(err.to_string(), err.message);
}

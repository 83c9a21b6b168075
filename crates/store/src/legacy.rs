//! DynamoDB's legacy parameters, rewritten as the expressions they mean.
//!
//! Older code and libraries still send `AttributesToGet`, `KeyConditions`,
//! `QueryFilter`, `ScanFilter`, `Expected`, `ConditionalOperator` and
//! `AttributeUpdates`; DynamoDB still takes them. Each request that carries
//! them (and no expression parameter: the two kinds do not mix) is rewritten
//! here into `ProjectionExpression`, `KeyConditionExpression`,
//! `FilterExpression`, `ConditionExpression` and `UpdateExpression` with
//! generated placeholders (`#lg0`, `:lg0`), so the expression compiler is
//! the one implementation of their meaning. Validation errors use
//! DynamoDB's words.

use postbox_item::AttributeValue;
use serde_json::Value;

use crate::StoreError;
use crate::api::{
    DeleteItemInput, GetItemInput, Names, PutItemInput, QueryInput, ScanInput, UpdateItemInput,
    Values,
};

type Result<T> = std::result::Result<T, StoreError>;

/// Placeholders generated while rewriting one request.
#[derive(Default)]
struct Placeholders {
    names: Names,
    values: Values,
}

impl Placeholders {
    fn name(&mut self, attribute: &str) -> String {
        let key = format!("#lg{}", self.names.len());
        self.names.insert(key.clone(), attribute.to_owned());
        key
    }

    fn value(&mut self, v: &Value) -> Result<String> {
        let value: AttributeValue = serde_json::from_value(v.clone()).map_err(|e| {
            StoreError::validation(format!("One or more parameter values were invalid: {e}"))
        })?;
        let key = format!(":lg{}", self.values.len());
        self.values.insert(key.clone(), value);
        Ok(key)
    }
}

/// The "do not mix" and "names only with expressions" rules, then whether
/// there is anything to rewrite.
fn check_mix(
    legacy: &[(&str, bool)],
    expressions: &[(&str, bool)],
    names: bool,
    values: bool,
) -> Result<bool> {
    let sent = |params: &[(&str, bool)]| -> Vec<String> {
        params
            .iter()
            .filter(|(_, set)| *set)
            .map(|(n, _)| (*n).to_owned())
            .collect()
    };
    let (old, new) = (sent(legacy), sent(expressions));
    if old.is_empty() {
        return Ok(false);
    }
    if !new.is_empty() {
        return Err(StoreError::validation(format!(
            "Can not use both expression and non-expression parameters in the same request: Non-expression parameters: {{{}}} Expression parameters: {{{}}}",
            old.join(", "),
            new.join(", ")
        )));
    }
    if names {
        return Err(StoreError::validation(
            "ExpressionAttributeNames can only be specified when using expressions",
        ));
    }
    if values {
        return Err(StoreError::validation(
            "ExpressionAttributeValues can only be specified when using expressions",
        ));
    }
    Ok(true)
}

fn object<'a>(v: &'a Value, parameter: &str) -> Result<&'a serde_json::Map<String, Value>> {
    v.as_object().ok_or_else(|| {
        StoreError::validation(format!(
            "1 validation error detected: Value at '{parameter}' failed to satisfy constraint: Member must be a map"
        ))
    })
}

/// `ConditionalOperator`: how the conditions of a map combine.
fn joiner(op: Option<&Value>) -> Result<&'static str> {
    match op.map(|v| v.as_str()) {
        None => Ok(" AND "),
        Some(Some("AND")) => Ok(" AND "),
        Some(Some("OR")) => Ok(" OR "),
        Some(other) => Err(StoreError::validation(format!(
            "1 validation error detected: Value '{}' at 'conditionalOperator' failed to satisfy constraint: Member must satisfy enum value set: [AND, OR]",
            other.unwrap_or_default()
        ))),
    }
}

/// One `{"ComparisonOperator", "AttributeValueList"}` condition on
/// `attribute`, as an expression; `key` limits it to what a key condition
/// may use.
fn comparison(
    ph: &mut Placeholders,
    attribute: &str,
    condition: &serde_json::Map<String, Value>,
    key: bool,
) -> Result<String> {
    let op = condition
        .get("ComparisonOperator")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            StoreError::validation(
                "One or more parameter values were invalid: ComparisonOperator must be specified",
            )
        })?;
    let list: Vec<&Value> = match condition.get("AttributeValueList") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().collect(),
        Some(_) => {
            return Err(StoreError::validation(
                "One or more parameter values were invalid: AttributeValueList must be a list",
            ));
        }
    };
    let wanted: &dyn Fn(usize) -> bool = match op {
        "NULL" | "NOT_NULL" => &|n| n == 0,
        "BETWEEN" => &|n| n == 2,
        "IN" => &|n| n >= 1,
        "EQ" | "NE" | "LE" | "LT" | "GE" | "GT" | "CONTAINS" | "NOT_CONTAINS" | "BEGINS_WITH" => {
            &|n| n == 1
        }
        other => {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value '{other}' at 'comparisonOperator' failed to satisfy constraint: Member must satisfy enum value set: [IN, NULL, BETWEEN, LT, NOT_CONTAINS, EQ, GT, NOT_NULL, NE, LE, BEGINS_WITH, GE, CONTAINS]"
            )));
        }
    };
    if !wanted(list.len()) {
        return Err(StoreError::validation(format!(
            "One or more parameter values were invalid: Invalid number of argument(s) for the {op} ComparisonOperator"
        )));
    }
    if key
        && !matches!(
            op,
            "EQ" | "LE" | "LT" | "GE" | "GT" | "BEGINS_WITH" | "BETWEEN"
        )
    {
        return Err(StoreError::validation(
            "Attempted conditional constraint is not an indexable operation",
        ));
    }
    let a = ph.name(attribute);
    let mut v = Vec::with_capacity(list.len());
    for item in &list {
        v.push(ph.value(item)?);
    }
    Ok(match op {
        "EQ" => format!("{a} = {}", v[0]),
        "NE" => format!("{a} <> {}", v[0]),
        "LE" => format!("{a} <= {}", v[0]),
        "LT" => format!("{a} < {}", v[0]),
        "GE" => format!("{a} >= {}", v[0]),
        "GT" => format!("{a} > {}", v[0]),
        "NULL" => format!("attribute_not_exists({a})"),
        "NOT_NULL" => format!("attribute_exists({a})"),
        "CONTAINS" => format!("contains({a}, {})", v[0]),
        "NOT_CONTAINS" => format!("NOT contains({a}, {})", v[0]),
        "BEGINS_WITH" => format!("begins_with({a}, {})", v[0]),
        "IN" => format!("{a} IN ({})", v.join(", ")),
        "BETWEEN" => format!("{a} BETWEEN {} AND {}", v[0], v[1]),
        _ => unreachable!("checked above"),
    })
}

/// A `QueryFilter`/`ScanFilter`/`KeyConditions` map as one expression.
fn conditions(
    ph: &mut Placeholders,
    map: &Value,
    parameter: &str,
    op: Option<&Value>,
    key: bool,
) -> Result<String> {
    let map = object(map, parameter)?;
    let join = if key { " AND " } else { joiner(op)? };
    let mut parts = Vec::with_capacity(map.len());
    for (attribute, condition) in map {
        let condition = object(condition, parameter)?;
        parts.push(comparison(ph, attribute, condition, key)?);
    }
    Ok(parts.join(join))
}

/// `Expected` as a condition expression.
fn expected(ph: &mut Placeholders, map: &Value, op: Option<&Value>) -> Result<String> {
    let map = object(map, "expected")?;
    let join = joiner(op)?;
    let mut parts = Vec::with_capacity(map.len());
    for (attribute, e) in map {
        let e = object(e, "expected")?;
        let exists = e.get("Exists").and_then(Value::as_bool);
        let value = e.get("Value");
        let part = match (e.get("ComparisonOperator"), exists, value) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Exists and Value cannot be used with ComparisonOperator for Attribute: {attribute}"
                )));
            }
            (Some(_), None, None) => comparison(ph, attribute, e, false)?,
            (None, Some(false), Some(_)) => {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Value cannot be used when Exists is false for Attribute: {attribute}"
                )));
            }
            (None, Some(false), None) => format!("attribute_not_exists({})", ph.name(attribute)),
            (None, _, Some(v)) => {
                let a = ph.name(attribute);
                format!("{a} = {}", ph.value(v)?)
            }
            (None, _, None) => {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Exists is set to TRUE for attribute ({attribute}), Value must also be set"
                )));
            }
        };
        parts.push(part);
    }
    Ok(parts.join(join))
}

/// `AttributesToGet` as a projection expression.
fn projection(ph: &mut Placeholders, list: &Value) -> Result<String> {
    let names = list.as_array().ok_or_else(|| {
        StoreError::validation(
            "One or more parameter values were invalid: AttributesToGet must be a list",
        )
    })?;
    if names.is_empty() {
        return Err(StoreError::validation(
            "1 validation error detected: Value '[]' at 'attributesToGet' failed to satisfy constraint: Member must have length greater than or equal to 1",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let n = n.as_str().unwrap_or_default();
        if !seen.insert(n) {
            return Err(StoreError::validation(format!(
                "One or more parameter values were invalid: Duplicate value in attribute name: {n}"
            )));
        }
        out.push(ph.name(n));
    }
    Ok(out.join(", "))
}

/// `AttributeUpdates` as an update expression.
fn updates(ph: &mut Placeholders, map: &Value) -> Result<String> {
    let map = object(map, "attributeUpdates")?;
    let (mut set, mut remove, mut add, mut delete) = (vec![], vec![], vec![], vec![]);
    for (attribute, u) in map {
        let u = object(u, "attributeUpdates")?;
        let action = u.get("Action").and_then(Value::as_str).unwrap_or("PUT");
        let value = u.get("Value");
        match (action, value) {
            ("PUT", Some(v)) => {
                let a = ph.name(attribute);
                set.push(format!("{a} = {}", ph.value(v)?));
            }
            ("PUT", None) => {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Only DELETE action is allowed when no attribute value is specified: {attribute}"
                )));
            }
            ("DELETE", None) => remove.push(ph.name(attribute)),
            ("DELETE", Some(v)) => {
                let a = ph.name(attribute);
                delete.push(format!("{a} {}", ph.value(v)?));
            }
            ("ADD", Some(v)) if v.get("L").is_some() => {
                // ADD appends to a list in the legacy form; expressions say
                // it with list_append.
                let a = ph.name(attribute);
                let empty = ph.value(&serde_json::json!({"L": []}))?;
                let v = ph.value(v)?;
                set.push(format!(
                    "{a} = list_append(if_not_exists({a}, {empty}), {v})"
                ));
            }
            ("ADD", Some(v)) => {
                let a = ph.name(attribute);
                add.push(format!("{a} {}", ph.value(v)?));
            }
            ("ADD", None) => {
                return Err(StoreError::validation(format!(
                    "One or more parameter values were invalid: Only DELETE action is allowed when no attribute value is specified: {attribute}"
                )));
            }
            (other, _) => {
                return Err(StoreError::validation(format!(
                    "1 validation error detected: Value '{other}' at 'attributeUpdates.{attribute}.member.action' failed to satisfy constraint: Member must satisfy enum value set: [ADD, PUT, DELETE]"
                )));
            }
        }
    }
    let mut clauses = Vec::new();
    for (word, list) in [
        ("SET", set),
        ("REMOVE", remove),
        ("ADD", add),
        ("DELETE", delete),
    ] {
        if !list.is_empty() {
            clauses.push(format!("{word} {}", list.join(", ")));
        }
    }
    Ok(clauses.join(" "))
}

fn finish(ph: Placeholders, names: &mut Option<Names>, values: &mut Option<Values>) {
    if !ph.names.is_empty() {
        *names = Some(ph.names);
    }
    if !ph.values.is_empty() {
        *values = Some(ph.values);
    }
}

/// Rewrites GetItem's `AttributesToGet`.
pub fn get_item(input: &mut GetItemInput) -> Result<()> {
    if !check_mix(
        &[("AttributesToGet", input.attributes_to_get.is_some())],
        &[(
            "ProjectionExpression",
            input.projection_expression.is_some(),
        )],
        input.expression_attribute_names.is_some(),
        false,
    )? {
        return Ok(());
    }
    let mut ph = Placeholders::default();
    let list = input.attributes_to_get.take().expect("checked");
    input.projection_expression = Some(projection(&mut ph, &list)?);
    let mut values = None;
    finish(ph, &mut input.expression_attribute_names, &mut values);
    Ok(())
}

/// `Expected` and `ConditionalOperator` as a condition expression, on the
/// fields PutItem and DeleteItem share.
fn expected_only(
    expected_map: &mut Option<Value>,
    conditional_operator: &mut Option<Value>,
    condition_expression: &mut Option<String>,
    names: &mut Option<Names>,
    values: &mut Option<Values>,
) -> Result<()> {
    if !check_mix(
        &[
            ("Expected", expected_map.is_some()),
            ("ConditionalOperator", conditional_operator.is_some()),
        ],
        &[("ConditionExpression", condition_expression.is_some())],
        names.is_some(),
        values.is_some(),
    )? {
        return Ok(());
    }
    let mut ph = Placeholders::default();
    let op = conditional_operator.take();
    if let Some(e) = expected_map.take() {
        *condition_expression = Some(expected(&mut ph, &e, op.as_ref())?);
    }
    finish(ph, names, values);
    Ok(())
}

/// Rewrites PutItem's `Expected` and `ConditionalOperator`.
pub fn put_item(input: &mut PutItemInput) -> Result<()> {
    expected_only(
        &mut input.expected,
        &mut input.conditional_operator,
        &mut input.condition_expression,
        &mut input.expression_attribute_names,
        &mut input.expression_attribute_values,
    )
}

/// Rewrites DeleteItem's `Expected` and `ConditionalOperator`.
pub fn delete_item(input: &mut DeleteItemInput) -> Result<()> {
    expected_only(
        &mut input.expected,
        &mut input.conditional_operator,
        &mut input.condition_expression,
        &mut input.expression_attribute_names,
        &mut input.expression_attribute_values,
    )
}

/// Rewrites UpdateItem's `AttributeUpdates`, `Expected` and
/// `ConditionalOperator`.
pub fn update_item(input: &mut UpdateItemInput) -> Result<()> {
    if !check_mix(
        &[
            ("AttributeUpdates", input.attribute_updates.is_some()),
            ("Expected", input.expected.is_some()),
            ("ConditionalOperator", input.conditional_operator.is_some()),
        ],
        &[
            ("UpdateExpression", input.update_expression.is_some()),
            ("ConditionExpression", input.condition_expression.is_some()),
        ],
        input.expression_attribute_names.is_some(),
        input.expression_attribute_values.is_some(),
    )? {
        return Ok(());
    }
    let mut ph = Placeholders::default();
    let op = input.conditional_operator.take();
    if let Some(u) = input.attribute_updates.take() {
        let expr = updates(&mut ph, &u)?;
        if !expr.is_empty() {
            input.update_expression = Some(expr);
        }
    }
    if let Some(e) = input.expected.take() {
        input.condition_expression = Some(expected(&mut ph, &e, op.as_ref())?);
    }
    finish(
        ph,
        &mut input.expression_attribute_names,
        &mut input.expression_attribute_values,
    );
    Ok(())
}

/// Rewrites Query's `KeyConditions`, `QueryFilter`, `AttributesToGet` and
/// `ConditionalOperator`.
pub fn query(input: &mut QueryInput) -> Result<()> {
    if !check_mix(
        &[
            ("KeyConditions", input.key_conditions.is_some()),
            ("QueryFilter", input.query_filter.is_some()),
            ("AttributesToGet", input.attributes_to_get.is_some()),
            ("ConditionalOperator", input.conditional_operator.is_some()),
        ],
        &[
            (
                "KeyConditionExpression",
                input.key_condition_expression.is_some(),
            ),
            ("FilterExpression", input.filter_expression.is_some()),
            (
                "ProjectionExpression",
                input.projection_expression.is_some(),
            ),
        ],
        input.expression_attribute_names.is_some(),
        input.expression_attribute_values.is_some(),
    )? {
        return Ok(());
    }
    let mut ph = Placeholders::default();
    let op = input.conditional_operator.take();
    if let Some(k) = input.key_conditions.take() {
        input.key_condition_expression =
            Some(conditions(&mut ph, &k, "keyConditions", None, true)?);
    }
    if let Some(f) = input.query_filter.take() {
        let expr = conditions(&mut ph, &f, "queryFilter", op.as_ref(), false)?;
        if !expr.is_empty() {
            input.filter_expression = Some(expr);
        }
    }
    if let Some(list) = input.attributes_to_get.take() {
        input.projection_expression = Some(projection(&mut ph, &list)?);
    }
    finish(
        ph,
        &mut input.expression_attribute_names,
        &mut input.expression_attribute_values,
    );
    Ok(())
}

/// Rewrites Scan's `ScanFilter`, `AttributesToGet` and `ConditionalOperator`.
pub fn scan(input: &mut ScanInput) -> Result<()> {
    if !check_mix(
        &[
            ("ScanFilter", input.scan_filter.is_some()),
            ("AttributesToGet", input.attributes_to_get.is_some()),
            ("ConditionalOperator", input.conditional_operator.is_some()),
        ],
        &[
            ("FilterExpression", input.filter_expression.is_some()),
            (
                "ProjectionExpression",
                input.projection_expression.is_some(),
            ),
        ],
        input.expression_attribute_names.is_some(),
        input.expression_attribute_values.is_some(),
    )? {
        return Ok(());
    }
    let mut ph = Placeholders::default();
    let op = input.conditional_operator.take();
    if let Some(f) = input.scan_filter.take() {
        let expr = conditions(&mut ph, &f, "scanFilter", op.as_ref(), false)?;
        if !expr.is_empty() {
            input.filter_expression = Some(expr);
        }
    }
    if let Some(list) = input.attributes_to_get.take() {
        input.projection_expression = Some(projection(&mut ph, &list)?);
    }
    finish(
        ph,
        &mut input.expression_attribute_names,
        &mut input.expression_attribute_values,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(v: serde_json::Value) -> QueryInput {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn key_conditions_filters_and_attributes_become_expressions() {
        let mut q = query(serde_json::json!({"TableName": "t",
            "KeyConditions": {"pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "p"}]}},
            "QueryFilter": {"v": {"ComparisonOperator": "IN", "AttributeValueList": [{"N": "1"}, {"N": "2"}]},
                            "w": {"ComparisonOperator": "NOT_NULL"}},
            "ConditionalOperator": "OR",
            "AttributesToGet": ["v"]}));
        super::query(&mut q).unwrap();
        assert_eq!(q.key_condition_expression.as_deref(), Some("#lg0 = :lg0"));
        assert_eq!(
            q.filter_expression.as_deref(),
            Some("#lg1 IN (:lg1, :lg2) OR attribute_exists(#lg2)")
        );
        assert_eq!(q.projection_expression.as_deref(), Some("#lg3"));
        let names = q.expression_attribute_names.unwrap();
        assert_eq!(names["#lg0"], "pk");
        assert_eq!(names["#lg3"], "v");
        assert_eq!(q.expression_attribute_values.unwrap().len(), 3);
        assert!(q.key_conditions.is_none() && q.query_filter.is_none());
    }

    #[test]
    fn the_two_kinds_do_not_mix_and_names_come_only_with_expressions() {
        let mut q = query(serde_json::json!({"TableName": "t",
            "KeyConditions": {"pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "p"}]}},
            "FilterExpression": "v > :v"}));
        let e = super::query(&mut q).unwrap_err().to_string();
        assert!(
            e.contains("Can not use both expression and non-expression parameters"),
            "{e}"
        );
        let mut q = query(serde_json::json!({"TableName": "t",
            "KeyConditions": {"pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "p"}]}},
            "ExpressionAttributeNames": {"#p": "pk"}}));
        let e = super::query(&mut q).unwrap_err().to_string();
        assert!(
            e.contains("ExpressionAttributeNames can only be specified when using expressions"),
            "{e}"
        );
        let mut q = query(serde_json::json!({"TableName": "t",
            "KeyConditions": {"pk": {"ComparisonOperator": "BETWEEN", "AttributeValueList": [{"S": "p"}]}}}));
        let e = super::query(&mut q).unwrap_err().to_string();
        assert!(
            e.contains("Invalid number of argument(s) for the BETWEEN ComparisonOperator"),
            "{e}"
        );
    }

    #[test]
    fn attribute_updates_become_one_update_expression() {
        let mut u: UpdateItemInput = serde_json::from_value(serde_json::json!({"TableName": "t",
            "Key": {"pk": {"S": "a"}},
            "AttributeUpdates": {"a": {"Action": "ADD", "Value": {"N": "1"}}, "b": {"Action": "DELETE"},
                                 "c": {"Value": {"S": "x"}}}}))
        .unwrap();
        update_item(&mut u).unwrap();
        assert_eq!(
            u.update_expression.as_deref(),
            Some("SET #lg2 = :lg1 REMOVE #lg1 ADD #lg0 :lg0")
        );
    }
}

//! The store's api shapes to the SDK's and back: enums by their DynamoDB
//! spelling, table descriptions, pages and transaction actions.

use aws_sdk_dynamodb::types as sdk;
use postbox_item::Item;
use postbox_store::api::*;
use postbox_store::{StoreError, StoreResult};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::DynamoStore;
use crate::convert::{from_sdk_item, from_sdk_opt, to_sdk_item, to_sdk_names, to_sdk_values};

impl DynamoStore {
    /// A table as DynamoDB describes it, named without the prefix.
    pub(crate) fn describe(&self, t: &sdk::TableDescription) -> StoreResult<TableDescription> {
        let name = t.table_name().unwrap_or_default();
        Ok(TableDescription {
            table_name: self.unprefixed(name).unwrap_or(name).to_owned(),
            table_arn: t.table_arn().unwrap_or_default().to_owned(),
            table_status: t
                .table_status()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            creation_date_time: t.creation_date_time().map_or(0.0, |d| d.as_secs_f64()),
            key_schema: t
                .key_schema()
                .iter()
                .map(|k| {
                    Ok(KeySchemaElement {
                        attribute_name: k.attribute_name().to_owned(),
                        key_type: from_wire(k.key_type().as_str())?,
                    })
                })
                .collect::<StoreResult<_>>()?,
            attribute_definitions: t
                .attribute_definitions()
                .iter()
                .map(|a| {
                    Ok(AttributeDefinition {
                        attribute_name: a.attribute_name().to_owned(),
                        attribute_type: from_wire(a.attribute_type().as_str())?,
                    })
                })
                .collect::<StoreResult<_>>()?,
            item_count: t.item_count().unwrap_or(0).max(0) as u64,
            table_size_bytes: t.table_size_bytes().unwrap_or(0).max(0) as u64,
            table_id: t.table_id().map(str::to_owned),
            provisioned_throughput: t.provisioned_throughput().map(|p| {
                serde_json::json!({
                    "NumberOfDecreasesToday": p.number_of_decreases_today().unwrap_or(0),
                    "ReadCapacityUnits": p.read_capacity_units().unwrap_or(0),
                    "WriteCapacityUnits": p.write_capacity_units().unwrap_or(0),
                })
            }),
            billing_mode_summary: t.billing_mode_summary().and_then(|b| {
                b.billing_mode()
                    .map(|m| serde_json::json!({"BillingMode": m.as_str()}))
            }),
            stream_specification: t
                .stream_specification()
                .map(|s| {
                    Ok::<_, StoreError>(StreamSpecification {
                        stream_enabled: s.stream_enabled(),
                        stream_view_type: s
                            .stream_view_type()
                            .map(|v| from_wire(v.as_str()))
                            .transpose()?,
                    })
                })
                .transpose()?,
            latest_stream_arn: t.latest_stream_arn().map(str::to_owned),
            latest_stream_label: t.latest_stream_label().map(str::to_owned),
            // Postbox's own tables on DynamoDB have no secondary indexes.
            global_secondary_indexes: None,
            local_secondary_indexes: None,
        })
    }
}

/// ProvisionedThroughput (`{"ReadCapacityUnits": r, "WriteCapacityUnits": w}`)
/// for the SDK; a unit left out is sent as 0, which DynamoDB refuses by name.
pub(crate) fn sdk_throughput(p: &serde_json::Value) -> StoreResult<sdk::ProvisionedThroughput> {
    let units = |k: &str| p.get(k).and_then(serde_json::Value::as_i64).unwrap_or(0);
    sdk::ProvisionedThroughput::builder()
        .read_capacity_units(units("ReadCapacityUnits"))
        .write_capacity_units(units("WriteCapacityUnits"))
        .build()
        .map_err(|e| StoreError::Validation(e.to_string()))
}

/// A StreamSpecification for the SDK.
pub(crate) fn sdk_stream(s: &StreamSpecification) -> StoreResult<sdk::StreamSpecification> {
    sdk::StreamSpecification::builder()
        .stream_enabled(s.stream_enabled)
        .set_stream_view_type(
            s.stream_view_type
                .map(|v| sdk::StreamViewType::from(wire(&v).as_str())),
        )
        .build()
        .map_err(|e| StoreError::Validation(e.to_string()))
}

/// Tags for the SDK.
pub(crate) fn sdk_tags(tags: &[Tag]) -> StoreResult<Vec<sdk::Tag>> {
    tags.iter()
        .map(|t| {
            sdk::Tag::builder()
                .key(&t.key)
                .value(&t.value)
                .build()
                .map_err(|e| StoreError::Validation(e.to_string()))
        })
        .collect()
}

/// An enum of the store's api as DynamoDB spells it.
pub(crate) fn wire<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => unreachable!("an api enum serialises to a string, not {other:?}"),
    }
}

/// An enum of the store's api from DynamoDB's spelling.
pub(crate) fn from_wire<T: DeserializeOwned>(s: &str) -> StoreResult<T> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        StoreError::Storage(format!(
            "DynamoDB answered a value Postbox does not know: {s}"
        ))
    })
}

pub(crate) fn count(n: i32) -> u64 {
    n.max(0) as u64
}

/// A Query or Scan page from the SDK's answer (no items for SELECT COUNT).
pub(crate) fn page(
    select: Option<Select>,
    items: &[std::collections::HashMap<String, sdk::AttributeValue>],
    n: i32,
    scanned: i32,
    last_key: Option<&std::collections::HashMap<String, sdk::AttributeValue>>,
) -> StoreResult<QueryOutput> {
    let counted = matches!(select, Some(Select::Count));
    Ok(QueryOutput {
        items: (!counted)
            .then(|| items.iter().map(from_sdk_item).collect::<StoreResult<_>>())
            .transpose()?,
        count: count(n),
        scanned_count: count(scanned),
        last_evaluated_key: from_sdk_opt(last_key)?,
    })
}

/// ReturnValues, as the SDK takes it.
pub(crate) fn return_values(v: ReturnValue) -> sdk::ReturnValue {
    sdk::ReturnValue::from(wire(&v).as_str())
}

/// ReturnValuesOnConditionCheckFailure, as the SDK takes it.
pub(crate) fn on_failure(
    v: ReturnValuesOnConditionCheckFailure,
) -> sdk::ReturnValuesOnConditionCheckFailure {
    sdk::ReturnValuesOnConditionCheckFailure::from(wire(&v).as_str())
}

pub(crate) fn key_of(item: &Item) -> std::collections::HashMap<String, sdk::AttributeValue> {
    to_sdk_item(item)
}

impl DynamoStore {
    /// One action of a TransactWriteItems, to the SDK.
    pub(crate) fn transact_item(
        &self,
        i: &TransactWriteItem,
    ) -> StoreResult<sdk::TransactWriteItem> {
        let invalid =
            |e: aws_sdk_dynamodb::error::BuildError| StoreError::Validation(e.to_string());
        let mut b = sdk::TransactWriteItem::builder();
        if let Some(p) = &i.put {
            b = b.put(
                sdk::Put::builder()
                    .table_name(self.name(&p.table_name))
                    .set_item(Some(to_sdk_item(&p.item)))
                    .set_condition_expression(p.condition_expression.clone())
                    .set_expression_attribute_names(to_sdk_names(
                        p.expression_attribute_names.as_ref(),
                    ))
                    .set_expression_attribute_values(to_sdk_values(
                        p.expression_attribute_values.as_ref(),
                    ))
                    .return_values_on_condition_check_failure(on_failure(
                        p.return_values_on_condition_check_failure,
                    ))
                    .build()
                    .map_err(invalid)?,
            );
        }
        if let Some(u) = &i.update {
            b = b.update(
                sdk::Update::builder()
                    .table_name(self.name(&u.table_name))
                    .set_key(Some(key_of(&u.key)))
                    .update_expression(&u.update_expression)
                    .set_condition_expression(u.condition_expression.clone())
                    .set_expression_attribute_names(to_sdk_names(
                        u.expression_attribute_names.as_ref(),
                    ))
                    .set_expression_attribute_values(to_sdk_values(
                        u.expression_attribute_values.as_ref(),
                    ))
                    .return_values_on_condition_check_failure(on_failure(
                        u.return_values_on_condition_check_failure,
                    ))
                    .build()
                    .map_err(invalid)?,
            );
        }
        if let Some(d) = &i.delete {
            b = b.delete(
                sdk::Delete::builder()
                    .table_name(self.name(&d.table_name))
                    .set_key(Some(key_of(&d.key)))
                    .set_condition_expression(d.condition_expression.clone())
                    .set_expression_attribute_names(to_sdk_names(
                        d.expression_attribute_names.as_ref(),
                    ))
                    .set_expression_attribute_values(to_sdk_values(
                        d.expression_attribute_values.as_ref(),
                    ))
                    .return_values_on_condition_check_failure(on_failure(
                        d.return_values_on_condition_check_failure,
                    ))
                    .build()
                    .map_err(invalid)?,
            );
        }
        if let Some(c) = &i.condition_check {
            b = b.condition_check(
                sdk::ConditionCheck::builder()
                    .table_name(self.name(&c.table_name))
                    .set_key(Some(key_of(&c.key)))
                    .condition_expression(&c.condition_expression)
                    .set_expression_attribute_names(to_sdk_names(
                        c.expression_attribute_names.as_ref(),
                    ))
                    .set_expression_attribute_values(to_sdk_values(
                        c.expression_attribute_values.as_ref(),
                    ))
                    .return_values_on_condition_check_failure(on_failure(
                        c.return_values_on_condition_check_failure,
                    ))
                    .build()
                    .map_err(invalid)?,
            );
        }
        Ok(b.build())
    }
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> StoreResult<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| StoreError::Storage(e.to_string()))
}

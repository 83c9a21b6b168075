//! What a tenant-scoped access key may do on the wire: read and write its
//! own tenant's items, and nothing else.
//!
//! Tenant data is namespaced by partition key, as on the HTTP API: an item
//! is tenant `t`'s when its table's partition key is a string starting with
//! `t#` (tenant names cannot contain `#`, so no name reaches another's
//! namespace). A tenant key may:
//! - GetItem, PutItem, UpdateItem, DeleteItem, BatchGetItem, BatchWriteItem,
//!   TransactGetItems and TransactWriteItems, when every key the request
//!   names is its tenant's (one foreign key refuses the whole request, so
//!   nothing of it is applied);
//! - Query one of its partitions (the key condition's partition value is
//!   checked before the query runs, so not even a count of another
//!   partition comes back; no secondary index);
//! - ListTables, DescribeTable and DescribeTimeToLive (names and schemas,
//!   no items).
//!
//! Everything else is refused: Scan (it crosses partitions), the table
//! control plane, DynamoDB Streams (a stream carries every tenant's
//! changes) and SQS. Postbox's own tables stay refused by [`crate::policy`]
//! whatever the key.

use std::collections::BTreeMap;

use postbox_store::ItemStore;
use postbox_store::api::{KeyType, QueryInput};
use serde_json::Value;

use crate::auth::Denied;

/// Operations a tenant key may call at all.
const ALLOWED: &[&str] = &[
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactGetItems",
    "TransactWriteItems",
    "Query",
    "ListTables",
    "DescribeTable",
    "DescribeTimeToLive",
];

fn refused(tenant: &str, what: impl std::fmt::Display) -> Denied {
    Denied::AccessDenied(format!(
        "User is not authorized to perform this request: the access key is scoped to tenant {tenant:?}, {what}"
    ))
}

/// Checks a request of a key scoped to `tenant` to `service.operation`;
/// `body` is the request parsed as JSON (None: not JSON).
pub(crate) async fn check<S: ItemStore>(
    store: &S,
    tenant: &str,
    service: &str,
    operation: &str,
    body: Option<Value>,
) -> Result<(), Denied> {
    if service != "DynamoDB_20120810" {
        return Err(refused(
            tenant,
            format!(
                "which may not call {service}.{operation} (DynamoDB Streams and SQS carry every tenant's data; use an admin key)"
            ),
        ));
    }
    if !ALLOWED.contains(&operation) {
        return Err(refused(
            tenant,
            format!(
                "which may not call {operation} (only its own items: Get, Put, Update, Delete, their Batch and Transact forms, and Query of its partitions)"
            ),
        ));
    }
    if matches!(
        operation,
        "ListTables" | "DescribeTable" | "DescribeTimeToLive"
    ) {
        return Ok(());
    }
    let body = body.ok_or_else(|| refused(tenant, "and the request body is not JSON"))?;
    if operation == "Query" {
        return check_query(store, tenant, body).await;
    }
    let keys = named_keys(operation, &body)
        .ok_or_else(|| refused(tenant, "and the request does not name its items' keys"))?;
    let mut schemas: BTreeMap<String, String> = BTreeMap::new();
    for (table, key) in keys {
        if !schemas.contains_key(&table) {
            let hash = hash_key(store, &table).await.map_err(|_| {
                // An unknown table: the operation itself answers that.
                refused(
                    tenant,
                    format!("and table {table:?} has no key schema it can check"),
                )
            })?;
            schemas.insert(table.clone(), hash);
        }
        let hash = &schemas[&table];
        let value = key
            .get(hash)
            .and_then(|v| v.get("S"))
            .and_then(Value::as_str);
        if !value.is_some_and(|v| in_namespace(tenant, v)) {
            return Err(refused(
                tenant,
                format!(
                    "and an item of {table} named by this request is not its tenant's (its partition key {hash:?} must be a string starting with \"{tenant}#\")"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether a partition key value is in `tenant`'s namespace.
fn in_namespace(tenant: &str, value: &str) -> bool {
    value
        .strip_prefix(tenant)
        .is_some_and(|rest| rest.starts_with('#'))
}

/// The partition key attribute of `table`.
async fn hash_key<S: ItemStore>(store: &S, table: &str) -> Result<String, ()> {
    let schema = store.key_schema(table).await.map_err(|_| ())?;
    schema
        .into_iter()
        .find(|k| k.key_type == KeyType::Hash)
        .map(|k| k.attribute_name)
        .ok_or(())
}

/// Every (table, key or item) a write or read of items names; None when
/// the body does not have the operation's shape (then nothing is allowed).
fn named_keys(
    operation: &str,
    body: &Value,
) -> Option<Vec<(String, serde_json::Map<String, Value>)>> {
    let table = |v: &Value| v["TableName"].as_str().map(str::to_owned);
    let object = |v: &Value| v.as_object().cloned();
    let mut out = Vec::new();
    match operation {
        "GetItem" | "DeleteItem" | "UpdateItem" => out.push((table(body)?, object(&body["Key"])?)),
        "PutItem" => out.push((table(body)?, object(&body["Item"])?)),
        "BatchGetItem" => {
            for (t, spec) in body["RequestItems"].as_object()? {
                for key in spec["Keys"].as_array()? {
                    out.push((t.clone(), object(key)?));
                }
            }
        }
        "BatchWriteItem" => {
            for (t, requests) in body["RequestItems"].as_object()? {
                for r in requests.as_array()? {
                    let key = match (r.get("PutRequest"), r.get("DeleteRequest")) {
                        (Some(p), None) => object(&p["Item"])?,
                        (None, Some(d)) => object(&d["Key"])?,
                        _ => return None,
                    };
                    out.push((t.clone(), key));
                }
            }
        }
        "TransactGetItems" => {
            for item in body["TransactItems"].as_array()? {
                let get = item.get("Get")?;
                out.push((table(get)?, object(&get["Key"])?));
            }
        }
        "TransactWriteItems" => {
            for item in body["TransactItems"].as_array()? {
                let (kind, action) = item.as_object()?.iter().next()?;
                let key = match kind.as_str() {
                    "Put" => object(&action["Item"])?,
                    "Update" | "Delete" | "ConditionCheck" => object(&action["Key"])?,
                    _ => return None,
                };
                out.push((table(action)?, key));
            }
        }
        _ => return None,
    }
    Some(out)
}

/// A Query must read one of `tenant`'s partitions, named by its key
/// condition, on the table itself (no index).
async fn check_query<S: ItemStore>(store: &S, tenant: &str, body: Value) -> Result<(), Denied> {
    let input: QueryInput = serde_json::from_value(body)
        .map_err(|_| refused(tenant, "and the Query is not one it can check"))?;
    if input.index_name.is_some() {
        return Err(refused(tenant, "which may not query a secondary index"));
    }
    let Some(expression) = &input.key_condition_expression else {
        return Err(refused(
            tenant,
            "and its Query needs a KeyConditionExpression",
        ));
    };
    let schema = store.key_schema(&input.table_name).await.map_err(|_| {
        refused(
            tenant,
            format!(
                "and table {:?} has no key schema it can check",
                input.table_name
            ),
        )
    })?;
    let name = |t: KeyType| {
        schema
            .iter()
            .find(|k| k.key_type == t)
            .map(|k| k.attribute_name.as_str())
    };
    let hash =
        name(KeyType::Hash).ok_or_else(|| refused(tenant, "and the table has no partition key"))?;
    let mut ph = postbox_expr::Placeholders::new(
        input.expression_attribute_names.as_ref(),
        input.expression_attribute_values.as_ref(),
    );
    let condition =
        postbox_expr::parse_key_condition(expression, &mut ph, hash, name(KeyType::Range))
            .map_err(|e| {
                refused(
                    tenant,
                    format!("and its key condition is not one it can check: {e}"),
                )
            })?;
    match condition.partition.as_s() {
        Some(v) if in_namespace(tenant, v) => Ok(()),
        _ => Err(refused(
            tenant,
            format!(
                "and this Query reads a partition that is not its tenant's (\"{hash}\" must start with \"{tenant}#\")"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_the_tenant_then_a_hash() {
        assert!(in_namespace("acme", "acme#order#1"));
        assert!(in_namespace("acme", "acme#"));
        assert!(!in_namespace("acme", "acme"));
        assert!(!in_namespace("acme", "acmeco#order#1"));
        assert!(!in_namespace("acme", "ORDER#acme#1"));
        assert!(!in_namespace("acm", "acme#1"));
    }

    #[test]
    fn every_key_of_a_batch_or_transaction_is_named() {
        let body: Value = serde_json::json!({"TransactItems": [
            {"Put": {"TableName": "a", "Item": {"pk": {"S": "x#1"}}}},
            {"ConditionCheck": {"TableName": "b", "Key": {"pk": {"S": "y#1"}}, "ConditionExpression": "attribute_exists(pk)"}}
        ]});
        let keys = named_keys("TransactWriteItems", &body).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].0, "b");
        let bad: Value = serde_json::json!({"TransactItems": [{"Mystery": {"TableName": "a"}}]});
        assert!(named_keys("TransactWriteItems", &bad).is_none());
        let batch: Value = serde_json::json!({"RequestItems": {"t": [
            {"PutRequest": {"Item": {"pk": {"S": "x#1"}}}},
            {"DeleteRequest": {"Key": {"pk": {"S": "y#1"}}}}
        ]}});
        assert_eq!(named_keys("BatchWriteItem", &batch).unwrap().len(), 2);
    }
}

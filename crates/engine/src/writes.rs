//! The caller's own writes that commit in the same transaction as an event:
//! Put, Update, Delete and ConditionCheck on any table but the events
//! table, in DynamoDB's shapes.

use postbox_item::{AttributeValue, Item, item_size};
use postbox_store::api::{
    ConditionCheck, Names, TransactDelete, TransactPut, TransactUpdate, TransactWriteItem, Values,
};

/// One write of the caller (or of an INLINE handler).
#[derive(Clone, Debug)]
pub struct Write(TransactWriteItem);

impl Write {
    /// Put `item` into `table`.
    pub fn put(table: impl Into<String>, item: Item) -> Write {
        Write(TransactWriteItem {
            put: Some(TransactPut {
                table_name: table.into(),
                item,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// Update the item at `key` with `update_expression`.
    pub fn update(
        table: impl Into<String>,
        key: Item,
        update_expression: impl Into<String>,
    ) -> Write {
        Write(TransactWriteItem {
            update: Some(TransactUpdate {
                table_name: table.into(),
                key,
                update_expression: update_expression.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// Delete the item at `key`.
    pub fn delete(table: impl Into<String>, key: Item) -> Write {
        Write(TransactWriteItem {
            delete: Some(TransactDelete {
                table_name: table.into(),
                key,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// Require `condition` on the item at `key`, writing nothing.
    pub fn condition_check(
        table: impl Into<String>,
        key: Item,
        condition: impl Into<String>,
    ) -> Write {
        Write(TransactWriteItem {
            condition_check: Some(ConditionCheck {
                table_name: table.into(),
                key,
                condition_expression: condition.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A write from its DynamoDB shape.
    pub fn from_transact(item: TransactWriteItem) -> Write {
        Write(item)
    }

    /// Sets the condition expression (Put, Update, Delete; replaces a
    /// ConditionCheck's).
    pub fn condition(mut self, expr: impl Into<String>) -> Write {
        let expr = expr.into();
        let w = &mut self.0;
        if let Some(p) = &mut w.put {
            p.condition_expression = Some(expr);
        } else if let Some(u) = &mut w.update {
            u.condition_expression = Some(expr);
        } else if let Some(d) = &mut w.delete {
            d.condition_expression = Some(expr);
        } else if let Some(c) = &mut w.condition_check {
            c.condition_expression = expr;
        }
        self
    }

    /// Adds a `#name` placeholder.
    pub fn name(mut self, placeholder: impl Into<String>, name: impl Into<String>) -> Write {
        self.names_mut()
            .get_or_insert_with(Names::new)
            .insert(placeholder.into(), name.into());
        self
    }

    /// Adds a `:value` placeholder.
    pub fn value(mut self, placeholder: impl Into<String>, value: AttributeValue) -> Write {
        self.values_mut()
            .get_or_insert_with(Values::new)
            .insert(placeholder.into(), value);
        self
    }

    fn names_mut(&mut self) -> &mut Option<Names> {
        let w = &mut self.0;
        if let Some(p) = &mut w.put {
            &mut p.expression_attribute_names
        } else if let Some(u) = &mut w.update {
            &mut u.expression_attribute_names
        } else if let Some(d) = &mut w.delete {
            &mut d.expression_attribute_names
        } else {
            &mut w
                .condition_check
                .as_mut()
                .expect("a write has one action")
                .expression_attribute_names
        }
    }

    fn values_mut(&mut self) -> &mut Option<Values> {
        let w = &mut self.0;
        if let Some(p) = &mut w.put {
            &mut p.expression_attribute_values
        } else if let Some(u) = &mut w.update {
            &mut u.expression_attribute_values
        } else if let Some(d) = &mut w.delete {
            &mut d.expression_attribute_values
        } else {
            &mut w
                .condition_check
                .as_mut()
                .expect("a write has one action")
                .expression_attribute_values
        }
    }

    /// The action's kind: Put, Update, Delete or ConditionCheck.
    pub fn kind(&self) -> &'static str {
        let w = &self.0;
        if w.put.is_some() {
            "Put"
        } else if w.update.is_some() {
            "Update"
        } else if w.delete.is_some() {
            "Delete"
        } else {
            "ConditionCheck"
        }
    }

    /// The table written.
    pub fn table(&self) -> &str {
        let w = &self.0;
        w.put
            .as_ref()
            .map(|p| p.table_name.as_str())
            .or(w.update.as_ref().map(|u| u.table_name.as_str()))
            .or(w.delete.as_ref().map(|d| d.table_name.as_str()))
            .or(w.condition_check.as_ref().map(|c| c.table_name.as_str()))
            .unwrap_or("")
    }

    /// A short description for errors: `Put on orders {pk=ORDER#1}`; a
    /// Put names its item's string and number attributes that look like keys.
    pub fn describe(&self) -> String {
        let w = &self.0;
        let key: Option<&Item> = w
            .update
            .as_ref()
            .map(|u| &u.key)
            .or(w.delete.as_ref().map(|d| &d.key))
            .or(w.condition_check.as_ref().map(|c| &c.key));
        let shown: Vec<String> = match (key, &w.put) {
            (Some(k), _) => k.iter().map(|(n, v)| format!("{n}={}", short(v))).collect(),
            (None, Some(p)) => p
                .item
                .iter()
                .filter(|(n, _)| matches!(n.as_str(), "pk" | "sk" | "id"))
                .map(|(n, v)| format!("{n}={}", short(v)))
                .collect(),
            _ => Vec::new(),
        };
        format!(
            "{} on {} {{{}}}",
            self.kind(),
            self.table(),
            shown.join(", ")
        )
    }

    /// An upper estimate of the bytes this action adds to a transaction.
    pub fn size(&self) -> usize {
        let w = &self.0;
        let exprs = |n: &Option<Names>, v: &Option<Values>| {
            n.as_ref().map_or(0, |n| {
                n.iter().map(|(a, b)| a.len() + b.len()).sum::<usize>()
            }) + v.as_ref().map_or(0, |v| {
                v.iter().map(|(a, b)| a.len() + b.size()).sum::<usize>()
            })
        };
        if let Some(p) = &w.put {
            item_size(&p.item)
                + p.condition_expression.as_ref().map_or(0, String::len)
                + exprs(
                    &p.expression_attribute_names,
                    &p.expression_attribute_values,
                )
        } else if let Some(u) = &w.update {
            item_size(&u.key)
                + u.update_expression.len()
                + u.condition_expression.as_ref().map_or(0, String::len)
                + exprs(
                    &u.expression_attribute_names,
                    &u.expression_attribute_values,
                )
        } else if let Some(d) = &w.delete {
            item_size(&d.key)
                + d.condition_expression.as_ref().map_or(0, String::len)
                + exprs(
                    &d.expression_attribute_names,
                    &d.expression_attribute_values,
                )
        } else if let Some(c) = &w.condition_check {
            item_size(&c.key)
                + c.condition_expression.len()
                + exprs(
                    &c.expression_attribute_names,
                    &c.expression_attribute_values,
                )
        } else {
            0
        }
    }

    /// The DynamoDB action.
    pub fn into_transact(self) -> TransactWriteItem {
        self.0
    }

    /// The DynamoDB action, borrowed.
    pub fn as_transact(&self) -> &TransactWriteItem {
        &self.0
    }
}

fn short(v: &AttributeValue) -> String {
    match v {
        AttributeValue::S(s) => s.clone(),
        AttributeValue::N(n) => n.to_string(),
        other => format!("<{}>", other.attribute_type().as_str()),
    }
}

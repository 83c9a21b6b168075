//! The item writes: PutItem, UpdateItem, DeleteItem, BatchWriteItem and
//! TransactWriteItems.
//!
//! Each request is compiled on the caller's thread (placeholders, expression
//! parsing, key and size validation: everything that does not depend on the
//! stored items), so the writer thread only reads, checks conditions, applies
//! updates and stages the result. In the writer, a request computes every
//! change and checks every condition before it stages anything.

use std::collections::HashSet;
use std::sync::Arc;

use postbox_expr::{Condition, Update, parse_condition, parse_update, project};
use postbox_item::{Item, encode_item, item_size};

use crate::StoreError;
use crate::api::*;

use super::catalog::{Catalog, TableMeta};
use super::context::{Current, WriteContext};
use super::{index, keys, validate};

/// What one action does to its item.
enum Effect {
    /// The item, and its stored form: encoded when the request is compiled,
    /// on the caller's thread, so the writer thread (the store's one
    /// serial resource) only copies the bytes into the B-tree and the
    /// stream record.
    Put(Item, Vec<u8>),
    Update(Option<Update>),
    Delete,
    Check,
}

/// One compiled single-item action.
pub(crate) struct Action {
    meta: Arc<TableMeta>,
    /// The `Key` parameter of an update or delete (empty for a put).
    key: Item,
    key_bytes: Vec<u8>,
    condition: Option<Condition>,
    effect: Effect,
    all_old_on_failure: bool,
    /// A rule the action breaks that DynamoDB reports as a transaction's
    /// cancellation reason (ValidationError) rather than up front.
    rejected: Option<String>,
}

/// Why an action cannot go ahead, found in the writer.
enum Refusal {
    /// Its condition is false; the item when ALL_OLD was asked for.
    Condition(Option<Item>),
    /// Applying its update failed (a type error, the size limit): a
    /// ValidationException for the whole request.
    Invalid(String),
    /// See [`Action::rejected`].
    Rejected(String),
}

/// An action checked against the stored item, ready to stage.
struct Checked {
    meta: Arc<TableMeta>,
    key_bytes: Vec<u8>,
    current: Current,
    /// `None` for a ConditionCheck.
    new: Option<Option<Item>>,
    /// The stored form of a put's item, encoded when it was compiled.
    new_bytes: Option<Vec<u8>>,
}

impl Action {
    /// Reads the item, checks the condition and computes the new item. A
    /// put's item moves into the result, so an action is checked once.
    fn check(&mut self, ctx: &WriteContext<'_>) -> Result<Result<Checked, Refusal>, StoreError> {
        if let Some(message) = &self.rejected {
            return Ok(Err(Refusal::Rejected(message.clone())));
        }
        let meta = ctx.resolve(&self.meta)?;
        let current = ctx.current(&meta, &self.key_bytes)?;
        if let Some(condition) = &self.condition
            && !condition.evaluate(current.live())
        {
            let item = if self.all_old_on_failure {
                current.into_live()
            } else {
                None
            };
            return Ok(Err(Refusal::Condition(item)));
        }
        let mut new_bytes = None;
        let new = match &mut self.effect {
            Effect::Put(item, bytes) => {
                new_bytes = Some(std::mem::take(bytes));
                Some(Some(std::mem::take(item)))
            }
            Effect::Delete => Some(None),
            Effect::Check => None,
            // An update that only takes away (REMOVE, DELETE from a set)
            // creates no item where there is none, as the managed service
            // does (DynamoDB Local writes the bare key).
            Effect::Update(Some(update))
                if current.live().is_none() && update.only_takes_away() =>
            {
                None
            }
            Effect::Update(update) => match updated(&self.key, current.live(), update.as_ref())
                .and_then(|new| match index::check_item(&meta, &new) {
                    Ok(()) => Ok(new),
                    Err(e) => Err(e.to_string()),
                }) {
                Ok(new) => Some(Some(new)),
                Err(message) => return Ok(Err(Refusal::Invalid(message))),
            },
        };
        Ok(Ok(Checked {
            meta,
            key_bytes: self.key_bytes.clone(),
            current,
            new,
            new_bytes,
        }))
    }
}

impl Checked {
    fn stage(self, ctx: &mut WriteContext<'_>) {
        if let Some(new) = self.new {
            ctx.stage_encoded(
                &self.meta,
                self.key_bytes,
                self.current,
                new,
                self.new_bytes,
            );
        }
    }
}

/// The item after `update`. An update of an absent item starts from its key,
/// so even an update that only removes attributes creates the item (as
/// DynamoDB Local does).
fn updated(key: &Item, old: Option<&Item>, update: Option<&Update>) -> Result<Item, String> {
    let mut item = old.cloned().unwrap_or_else(|| key.clone());
    if let Some(update) = update {
        update.apply(&mut item).map_err(|e| e.message)?;
    }
    if item_size(&item) > validate::MAX_ITEM_SIZE {
        return Err(validate::updated_item_too_large().to_string());
    }
    validate::item_shape(&item).map_err(|e| e.to_string())?;
    Ok(item)
}

// ---- compiling requests ----

fn compile_condition(
    src: Option<&str>,
    ph: &mut postbox_expr::Placeholders<'_>,
) -> Result<Option<Condition>, StoreError> {
    src.map(|s| parse_condition(s, ph))
        .transpose()
        .map_err(validate::expr)
}

struct PutParts<'a> {
    table: &'a str,
    item: Item,
    condition: Option<&'a str>,
    names: Option<&'a Names>,
    values: Option<&'a Values>,
    all_old_on_failure: bool,
}

fn compile_put(catalog: &Catalog, p: PutParts<'_>) -> Result<Action, StoreError> {
    validate::placeholder_maps(p.names, p.values, p.condition.is_some())?;
    let mut ph = validate::placeholders(p.names, p.values);
    let condition = compile_condition(p.condition, &mut ph)?;
    ph.finish().map_err(validate::expr)?;
    let meta = catalog.get(p.table)?;
    let key_bytes = keys::item_key(&meta, &p.item)?;
    if item_size(&p.item) > validate::MAX_ITEM_SIZE {
        return Err(validate::item_too_large());
    }
    validate::item_shape(&p.item)?;
    index::check_item(&meta, &p.item)?;
    let encoded = encode_item(&p.item);
    Ok(Action {
        // Only an update starts from its key; a put's key is in its item.
        key: Item::new(),
        meta,
        key_bytes,
        condition,
        effect: Effect::Put(p.item, encoded),
        all_old_on_failure: p.all_old_on_failure,
        rejected: None,
    })
}

struct KeyedParts<'a> {
    table: &'a str,
    key: Item,
    update: Option<&'a str>,
    condition: Option<&'a str>,
    names: Option<&'a Names>,
    values: Option<&'a Values>,
    all_old_on_failure: bool,
}

fn compile_keyed(
    catalog: &Catalog,
    p: KeyedParts<'_>,
    effect: fn(Option<Update>) -> Effect,
) -> Result<Action, StoreError> {
    let mut action = compile_keyed_lenient(catalog, p, effect)?;
    match action.rejected.take() {
        Some(message) => Err(StoreError::Validation(message)),
        None => Ok(action),
    }
}

/// [`compile_keyed`] for transactions: an update of a key attribute becomes
/// the action's cancellation reason.
fn compile_keyed_lenient(
    catalog: &Catalog,
    p: KeyedParts<'_>,
    effect: fn(Option<Update>) -> Effect,
) -> Result<Action, StoreError> {
    validate::placeholder_maps(
        p.names,
        p.values,
        p.condition.is_some() || p.update.is_some(),
    )?;
    let mut ph = validate::placeholders(p.names, p.values);
    let update = p
        .update
        .map(|s| parse_update(s, &mut ph))
        .transpose()
        .map_err(validate::expr)?;
    let condition = compile_condition(p.condition, &mut ph)?;
    ph.finish().map_err(validate::expr)?;
    let meta = catalog.get(p.table)?;
    let key_bytes = keys::key_param(&meta, &p.key)?;
    let rejected = update.as_ref().and_then(|u| u.paths().iter().find(|p| meta.is_key_attribute(p.top_level()))).map(|path| {
        format!(
            "One or more parameter values were invalid: Cannot update attribute {}. This attribute is part of the key",
            path.top_level()
        )
    });
    Ok(Action {
        meta,
        key: p.key,
        key_bytes,
        condition,
        effect: effect(update),
        all_old_on_failure: p.all_old_on_failure,
        rejected,
    })
}

fn all_old(r: ReturnValuesOnConditionCheckFailure) -> bool {
    r == ReturnValuesOnConditionCheckFailure::AllOld
}

// ---- single-item writes ----

/// A compiled PutItem, UpdateItem or DeleteItem.
pub(crate) struct SingleWrite {
    action: Action,
    return_values: ReturnValue,
}

impl SingleWrite {
    pub(crate) fn put(
        catalog: &Catalog,
        mut input: PutItemInput,
    ) -> Result<SingleWrite, StoreError> {
        crate::legacy::put_item(&mut input)?;
        validate::return_values_old_only(input.return_values)?;
        let action = compile_put(
            catalog,
            PutParts {
                table: &input.table_name,
                item: input.item,
                condition: input.condition_expression.as_deref(),
                names: input.expression_attribute_names.as_ref(),
                values: input.expression_attribute_values.as_ref(),
                all_old_on_failure: all_old(input.return_values_on_condition_check_failure),
            },
        )?;
        Ok(SingleWrite {
            action,
            return_values: input.return_values,
        })
    }

    pub(crate) fn update(
        catalog: &Catalog,
        mut input: UpdateItemInput,
    ) -> Result<SingleWrite, StoreError> {
        crate::legacy::update_item(&mut input)?;
        let action = compile_keyed(
            catalog,
            KeyedParts {
                table: &input.table_name,
                key: input.key,
                update: input.update_expression.as_deref(),
                condition: input.condition_expression.as_deref(),
                names: input.expression_attribute_names.as_ref(),
                values: input.expression_attribute_values.as_ref(),
                all_old_on_failure: all_old(input.return_values_on_condition_check_failure),
            },
            Effect::Update,
        )?;
        Ok(SingleWrite {
            action,
            return_values: input.return_values,
        })
    }

    pub(crate) fn delete(
        catalog: &Catalog,
        mut input: DeleteItemInput,
    ) -> Result<SingleWrite, StoreError> {
        crate::legacy::delete_item(&mut input)?;
        validate::return_values_old_only(input.return_values)?;
        let action = compile_keyed(
            catalog,
            KeyedParts {
                table: &input.table_name,
                key: input.key,
                update: None,
                condition: input.condition_expression.as_deref(),
                names: input.expression_attribute_names.as_ref(),
                values: input.expression_attribute_values.as_ref(),
                all_old_on_failure: all_old(input.return_values_on_condition_check_failure),
            },
            |_| Effect::Delete,
        )?;
        Ok(SingleWrite {
            action,
            return_values: input.return_values,
        })
    }

    /// Runs in the writer.
    pub(crate) fn run(mut self, ctx: &mut WriteContext<'_>) -> Result<WriteOutput, StoreError> {
        let checked = match self.action.check(ctx)? {
            Ok(c) => c,
            Err(Refusal::Condition(item)) => {
                return Err(StoreError::ConditionalCheckFailed { item });
            }
            Err(Refusal::Invalid(message) | Refusal::Rejected(message)) => {
                return Err(StoreError::Validation(message));
            }
        };
        // Copies for the answer only when it returns an image.
        let (old, new) = match self.return_values {
            ReturnValue::None => (None, None),
            _ => (
                checked.current.live().cloned(),
                checked.new.clone().flatten(),
            ),
        };
        checked.stage(ctx);
        let paths = match &self.action.effect {
            Effect::Update(Some(u)) => u.paths(),
            _ => &[],
        };
        let attributes = match self.return_values {
            ReturnValue::None => None,
            ReturnValue::AllOld => old,
            ReturnValue::AllNew => new,
            ReturnValue::UpdatedOld => old.map(|i| project(paths, &i)),
            ReturnValue::UpdatedNew => new.map(|i| project(paths, &i)),
        };
        Ok(WriteOutput {
            attributes: attributes.filter(|a| !a.is_empty()),
        })
    }
}

// ---- BatchWriteItem ----

/// A compiled BatchWriteItem: puts and deletes without conditions, applied
/// together.
pub(crate) struct BatchWrite {
    actions: Vec<Action>,
}

impl BatchWrite {
    pub(crate) fn compile(
        catalog: &Catalog,
        input: BatchWriteItemInput,
    ) -> Result<BatchWrite, StoreError> {
        let total: usize = input.request_items.values().map(Vec::len).sum();
        if input.request_items.is_empty() {
            return Err(StoreError::validation(
                "1 validation error detected: Value null at 'requestItems' failed to satisfy constraint: Member must not be null",
            ));
        }
        if total > validate::MAX_BATCH_WRITES {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Map value must satisfy constraint: [Member must have length less than or equal to {}, Member must have length greater than or equal to 1]",
                validate::MAX_BATCH_WRITES
            )));
        }
        let mut actions = Vec::with_capacity(total);
        let mut seen = HashSet::new();
        for (table, requests) in input.request_items {
            if requests.is_empty() {
                return Err(StoreError::validation(format!(
                    "1 validation error detected: Value '[]' at 'requestItems.{table}.member' failed to satisfy constraint: Member must have length greater than or equal to 1"
                )));
            }
            for request in requests {
                let action = match (request.put_request, request.delete_request) {
                    (Some(put), None) => compile_put(
                        catalog,
                        PutParts {
                            table: &table,
                            item: put.item,
                            condition: None,
                            names: None,
                            values: None,
                            all_old_on_failure: false,
                        },
                    )?,
                    (None, Some(delete)) => compile_keyed(
                        catalog,
                        KeyedParts {
                            table: &table,
                            key: delete.key,
                            update: None,
                            condition: None,
                            names: None,
                            values: None,
                            all_old_on_failure: false,
                        },
                        |_| Effect::Delete,
                    )?,
                    _ => {
                        return Err(StoreError::validation(
                            "A WriteRequest must contain exactly one of PutRequest or DeleteRequest",
                        ));
                    }
                };
                if !seen.insert((action.meta.id, action.key_bytes.clone())) {
                    return Err(StoreError::validation(
                        "Provided list of item keys contains duplicates",
                    ));
                }
                actions.push(action);
            }
        }
        Ok(BatchWrite { actions })
    }

    /// Runs in the writer.
    pub(crate) fn run(
        mut self,
        ctx: &mut WriteContext<'_>,
    ) -> Result<BatchWriteItemOutput, StoreError> {
        let mut checked = Vec::with_capacity(self.actions.len());
        for action in &mut self.actions {
            match action.check(ctx)? {
                Ok(c) => checked.push(c),
                Err(Refusal::Condition(_)) => unreachable!("batch writes carry no condition"),
                Err(Refusal::Invalid(message) | Refusal::Rejected(message)) => {
                    return Err(StoreError::Validation(message));
                }
            }
        }
        checked.into_iter().for_each(|c| c.stage(ctx));
        Ok(BatchWriteItemOutput::default())
    }
}

// ---- TransactWriteItems ----

/// A compiled TransactWriteItems: all actions commit together or none does.
pub(crate) struct TransactWrite {
    actions: Vec<Action>,
}

impl TransactWrite {
    pub(crate) fn compile(
        catalog: &Catalog,
        input: TransactWriteItemsInput,
    ) -> Result<TransactWrite, StoreError> {
        let n = input.transact_items.len();
        validate::transact_items(n)?;
        let mut actions = Vec::with_capacity(n);
        let mut size = 0;
        for item in input.transact_items {
            let action = match item {
                TransactWriteItem {
                    put: Some(p),
                    update: None,
                    delete: None,
                    condition_check: None,
                } => {
                    size += item_size(&p.item);
                    compile_put(
                        catalog,
                        PutParts {
                            table: &p.table_name,
                            item: p.item,
                            condition: p.condition_expression.as_deref(),
                            names: p.expression_attribute_names.as_ref(),
                            values: p.expression_attribute_values.as_ref(),
                            all_old_on_failure: all_old(p.return_values_on_condition_check_failure),
                        },
                    )?
                }
                TransactWriteItem {
                    update: Some(u),
                    put: None,
                    delete: None,
                    condition_check: None,
                } => compile_keyed_lenient(
                    catalog,
                    KeyedParts {
                        table: &u.table_name,
                        key: u.key,
                        update: Some(&u.update_expression),
                        condition: u.condition_expression.as_deref(),
                        names: u.expression_attribute_names.as_ref(),
                        values: u.expression_attribute_values.as_ref(),
                        all_old_on_failure: all_old(u.return_values_on_condition_check_failure),
                    },
                    Effect::Update,
                )?,
                TransactWriteItem {
                    delete: Some(d),
                    put: None,
                    update: None,
                    condition_check: None,
                } => compile_keyed(
                    catalog,
                    KeyedParts {
                        table: &d.table_name,
                        key: d.key,
                        update: None,
                        condition: d.condition_expression.as_deref(),
                        names: d.expression_attribute_names.as_ref(),
                        values: d.expression_attribute_values.as_ref(),
                        all_old_on_failure: all_old(d.return_values_on_condition_check_failure),
                    },
                    |_| Effect::Delete,
                )?,
                TransactWriteItem {
                    condition_check: Some(c),
                    put: None,
                    update: None,
                    delete: None,
                } => compile_keyed(
                    catalog,
                    KeyedParts {
                        table: &c.table_name,
                        key: c.key,
                        update: None,
                        condition: Some(&c.condition_expression),
                        names: c.expression_attribute_names.as_ref(),
                        values: c.expression_attribute_values.as_ref(),
                        all_old_on_failure: all_old(c.return_values_on_condition_check_failure),
                    },
                    |_| Effect::Check,
                )?,
                _ => {
                    return Err(StoreError::validation(
                        "TransactItems can only contain one of Check, Put, Update or Delete",
                    ));
                }
            };
            size += action.key_bytes.len();
            actions.push(action);
        }
        let mut seen = HashSet::new();
        if !actions
            .iter()
            .all(|a| seen.insert((a.meta.id, a.key_bytes.as_slice())))
        {
            return Err(StoreError::validation(
                "Transaction request cannot include multiple operations on one item",
            ));
        }
        if size > validate::MAX_TRANSACT_BYTES {
            return Err(StoreError::validation(
                "Transaction size has exceeded the maximum allowed size of 4 MB",
            ));
        }
        Ok(TransactWrite { actions })
    }

    /// Runs in the writer: checks every action, then stages all or nothing.
    /// An update that cannot be applied fails the whole request with a
    /// ValidationException, as DynamoDB does; failed conditions and
    /// rejected actions cancel it with one reason per action.
    pub(crate) fn run(mut self, ctx: &mut WriteContext<'_>) -> Result<(), StoreError> {
        let mut checked = Vec::with_capacity(self.actions.len());
        // Reasons are built only when the request is cancelled: a request
        // that commits (the common case) allocates none.
        let mut refused: Vec<(usize, CancellationReason)> = Vec::new();
        let mut invalid = None;
        for (i, action) in self.actions.iter_mut().enumerate() {
            match action.check(ctx)? {
                Ok(c) => checked.push(c),
                Err(Refusal::Condition(item)) => refused.push((
                    i,
                    CancellationReason {
                        code: "ConditionalCheckFailed".to_owned(),
                        message: Some("The conditional request failed".to_owned()),
                        item,
                    },
                )),
                Err(Refusal::Rejected(message)) => refused.push((
                    i,
                    CancellationReason {
                        code: "ValidationError".to_owned(),
                        message: Some(message),
                        item: None,
                    },
                )),
                Err(Refusal::Invalid(message)) => {
                    invalid.get_or_insert(message);
                }
            }
        }
        if let Some(message) = invalid {
            return Err(StoreError::Validation(message));
        }
        if !refused.is_empty() {
            let mut reasons: Vec<CancellationReason> = (0..self.actions.len())
                .map(|_| CancellationReason {
                    code: "None".to_owned(),
                    message: None,
                    item: None,
                })
                .collect();
            for (i, reason) in refused {
                reasons[i] = reason;
            }
            return Err(StoreError::TransactionCanceled { reasons });
        }
        checked.into_iter().for_each(|c| c.stage(ctx));
        Ok(())
    }
}

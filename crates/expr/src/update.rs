//! Update expressions: SET, REMOVE, ADD and DELETE clauses, parsed and
//! applied to an item in place.
//!
//! ```text
//! update := clause+              each of SET, REMOVE, ADD, DELETE at most once, any order
//! SET    := path = value, ...    value := operand | operand + operand | operand - operand
//! operand := path | :value | if_not_exists(path, operand) | list_append(operand, operand)
//! REMOVE := path, ...
//! ADD    := path :value, ...     number or set
//! DELETE := path :value, ...     set
//! ```
//!
//! Every action reads the item as it was before the update (so `SET a = b,
//! b = a` swaps), and no two actions may touch overlapping paths, so the
//! order of independent writes does not matter. What does matter is list
//! positions: REMOVE of list elements goes from the highest index down, so
//! every index means the position in the original list.

use postbox_item::{AttributeType, AttributeValue, Item, ItemError, Number};

use crate::error::Kind;
use crate::lexer::Tok;
use crate::parser::{Parser, Problem, with_room_for};
use crate::path::{Path, PathElement, step, step_mut};
use crate::{ExprError, Placeholders};

/// A parsed update expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    actions: Vec<Action>,
    paths: Vec<Path>,
}

/// One action of an update expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `SET path = value`.
    Set(Path, SetValue),
    /// `REMOVE path`.
    Remove(Path),
    /// Adds a number to a number, or elements to a set.
    Add(Path, AttributeValue),
    /// Removes elements from a set.
    Delete(Path, AttributeValue),
}

/// The right-hand side of a SET action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetValue {
    /// A plain operand.
    Operand(UpdateOperand),
    /// `a + b` on numbers.
    Plus(UpdateOperand, UpdateOperand),
    /// `a - b` on numbers.
    Minus(UpdateOperand, UpdateOperand),
}

/// An operand of a SET action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateOperand {
    /// The value at a path; an error if the item has none.
    Path(Path),
    /// An expression attribute value.
    Value(AttributeValue),
    /// The value at the path if the item has one, else the operand.
    IfNotExists(Path, Box<UpdateOperand>),
    /// The two lists concatenated.
    ListAppend(Box<UpdateOperand>, Box<UpdateOperand>),
}

const INVALID_PATH: &str =
    "The document path provided in the update expression is invalid for update";
const WRONG_TYPE: &str = "An operand in the update expression has an incorrect data type";
const PRECISION: &str = "DynamoDB only supports precision up to 38 digits";
const MISSING_OPERAND: &str =
    "The provided expression refers to an attribute that does not exist in the item";

/// Parses an `UpdateExpression`.
pub fn parse_update(src: &str, ph: &mut Placeholders) -> Result<Update, ExprError> {
    crate::cache::parse(Kind::Update, src, ph, parse_uncached)
}

/// [`parse_update`] without the cache.
pub(crate) fn parse_uncached(src: &str, ph: &mut Placeholders) -> Result<Update, ExprError> {
    with_room_for(src, || parse_here(src, ph))
}

impl crate::cache::Parsed for Update {
    fn values_mut(&mut self, f: &mut dyn FnMut(&mut AttributeValue)) {
        fn operand(op: &mut UpdateOperand, f: &mut dyn FnMut(&mut AttributeValue)) {
            match op {
                UpdateOperand::Path(_) => {}
                UpdateOperand::Value(v) => f(v),
                UpdateOperand::IfNotExists(_, b) => operand(b, f),
                UpdateOperand::ListAppend(a, b) => {
                    operand(a, f);
                    operand(b, f);
                }
            }
        }
        for action in &mut self.actions {
            match action {
                Action::Set(_, SetValue::Operand(a)) => operand(a, f),
                Action::Set(_, SetValue::Plus(a, b) | SetValue::Minus(a, b)) => {
                    operand(a, f);
                    operand(b, f);
                }
                Action::Remove(_) => {}
                Action::Add(_, v) | Action::Delete(_, v) => f(v),
            }
        }
    }
}

fn parse_here(src: &str, ph: &mut Placeholders) -> Result<Update, ExprError> {
    let mut p = Parser::new(src, Kind::Update, ph)?;
    let mut actions = Vec::new();
    let mut seen: Vec<&'static str> = Vec::new();
    loop {
        let t = p.peek();
        let Some(clause) = CLAUSES.into_iter().find(|w| p.is_word(t, w)) else {
            // An expression must start with a clause, and after a clause's
            // actions only another clause or the end may follow.
            if actions.is_empty() || !p.at(Tok::Eof) {
                return Err(p.syntax_error());
            }
            break;
        };
        p.bump();
        if seen.contains(&clause) {
            p.defer(
                Problem::Section,
                t.start,
                format!("The \"{clause}\" section can only be used once in an update expression;"),
            );
        }
        seen.push(clause);
        loop {
            actions.push(p.action(clause)?);
            if !p.at(Tok::Comma) {
                break;
            }
            p.bump();
        }
    }
    let paths: Vec<Path> = actions.iter().map(|a| a.path().clone()).collect();
    p.check_clashes(&paths);
    p.finish()?;
    Ok(Update { actions, paths })
}

const CLAUSES: [&str; 4] = ["SET", "REMOVE", "ADD", "DELETE"];
/// The update functions; names are case-sensitive.
const FUNCTIONS: [&str; 2] = ["if_not_exists", "list_append"];
/// The functions of condition expressions, which an update may not call.
const CONDITION_FUNCTIONS: [&str; 6] = [
    "attribute_exists",
    "attribute_not_exists",
    "attribute_type",
    "begins_with",
    "contains",
    "size",
];

fn wrong_type(function: &str, t: AttributeType) -> String {
    format!(
        "Incorrect operand type for operator or function; operator or function: {function}, operand type: {}",
        t.as_str()
    )
}

/// The long type names DynamoDB uses in ADD and DELETE operand errors.
fn long_type_name(t: AttributeType) -> &'static str {
    match t {
        AttributeType::S => "STRING",
        AttributeType::N => "NUMBER",
        AttributeType::B => "BINARY",
        AttributeType::Bool => "BOOLEAN",
        AttributeType::Null => "NULL",
        AttributeType::M => "MAP",
        AttributeType::L => "LIST",
        AttributeType::Ss => "SS",
        AttributeType::Ns => "NS",
        AttributeType::Bs => "BS",
    }
}

fn is_set(t: AttributeType) -> bool {
    matches!(t, AttributeType::Ss | AttributeType::Ns | AttributeType::Bs)
}

impl Parser<'_, '_, '_> {
    fn action(&mut self, clause: &str) -> Result<Action, ExprError> {
        if !self.at_path_start() {
            return Err(self.syntax_error());
        }
        let path = self.parse_path()?;
        Ok(match clause {
            "SET" => {
                self.expect(Tok::Eq)?;
                Action::Set(path, self.set_value()?.0)
            }
            "REMOVE" => Action::Remove(path),
            _ => {
                let at = self.peek().start;
                let v = self.value()?;
                let t = v.attribute_type();
                if !(is_set(t) || (clause == "ADD" && t == AttributeType::N)) {
                    self.defer(
                        Problem::OperandType,
                        at,
                        format!(
                            "Incorrect operand type for operator or function; operator: {clause}, operand type: {}, typeSet: ALLOWED_FOR_{clause}_OPERAND",
                            long_type_name(t)
                        ),
                    );
                }
                if clause == "ADD" {
                    Action::Add(path, v)
                } else {
                    Action::Delete(path, v)
                }
            }
        })
    }

    /// `operand`, `operand + operand` or `operand - operand`; the second
    /// result says the value is wrapped in parentheses and nothing else.
    fn set_value(&mut self) -> Result<(SetValue, bool), ExprError> {
        let (a, wrapped) = self.set_term()?;
        let op = self.peek();
        if !matches!(op.kind, Tok::Plus | Tok::Minus) {
            return Ok((a, wrapped));
        }
        let SetValue::Operand(a) = a else {
            return Err(self.syntax_error());
        };
        self.bump();
        let b = match self.set_term()?.0 {
            SetValue::Operand(b) => b,
            _ => return Err(self.syntax_error()),
        };
        let symbol = if op.kind == Tok::Plus { "+" } else { "-" };
        for x in [&a, &b] {
            if let UpdateOperand::Value(v) = x
                && !matches!(v, AttributeValue::N(_))
            {
                self.defer(
                    Problem::OperandType,
                    op.start,
                    wrong_type(symbol, v.attribute_type()),
                );
            }
        }
        Ok((
            if op.kind == Tok::Plus {
                SetValue::Plus(a, b)
            } else {
                SetValue::Minus(a, b)
            },
            false,
        ))
    }

    /// An operand, or a parenthesised value. Two pairs of parentheses
    /// directly around one another are an error.
    fn set_term(&mut self) -> Result<(SetValue, bool), ExprError> {
        if !self.at(Tok::LParen) {
            return Ok((SetValue::Operand(self.update_atom()?), false));
        }
        self.bump();
        let (inner, wrapped) = self.set_value()?;
        self.expect(Tok::RParen)?;
        if wrapped {
            return Err(self.redundant_parentheses());
        }
        Ok((inner, true))
    }

    /// An operand where no arithmetic may follow: a function argument.
    fn update_operand(&mut self) -> Result<UpdateOperand, ExprError> {
        match self.set_term()?.0 {
            SetValue::Operand(op) => Ok(op),
            _ => Err(self.syntax_error()),
        }
    }

    fn update_atom(&mut self) -> Result<UpdateOperand, ExprError> {
        let t = self.peek();
        match t.kind {
            Tok::ValuePlaceholder => Ok(UpdateOperand::Value(self.value()?)),
            Tok::Ident if self.nth(1).kind == Tok::LParen && !self.is_keyword(t) => {
                self.update_function()
            }
            Tok::Ident | Tok::NamePlaceholder => Ok(UpdateOperand::Path(self.parse_path()?)),
            _ => Err(self.syntax_error()),
        }
    }

    fn update_function(&mut self) -> Result<UpdateOperand, ExprError> {
        let t = self.bump();
        let name = self.text(t).to_owned();
        self.bump();
        let mut args = vec![self.update_operand()?];
        while self.at(Tok::Comma) {
            self.bump();
            args.push(self.update_operand()?);
        }
        self.expect(Tok::RParen)?;
        let null = UpdateOperand::Value(AttributeValue::Null);
        if !FUNCTIONS.contains(&name.as_str()) {
            let message = if CONDITION_FUNCTIONS.contains(&name.as_str()) {
                format!("The function is not allowed in an update expression; function: {name}")
            } else {
                format!("Invalid function name; function: {name}")
            };
            self.defer(Problem::UnknownFunction, t.start, message);
            return Ok(null);
        }
        if args.len() != 2 {
            self.defer(
                Problem::OperandCount,
                t.start,
                format!(
                    "Incorrect number of operands for operator or function; operator or function: {name}, number of operands: {}",
                    args.len()
                ),
            );
            return Ok(null);
        }
        let b = args.pop().expect("two operands");
        let a = args.pop().expect("two operands");
        if name == "if_not_exists" {
            return Ok(match a {
                UpdateOperand::Path(p) => UpdateOperand::IfNotExists(p, Box::new(b)),
                _ => {
                    self.defer(
                        Problem::OperandType,
                        t.start,
                        "Operator or function requires a document path; operator or function: if_not_exists",
                    );
                    null
                }
            });
        }
        for x in [&a, &b] {
            if let UpdateOperand::Value(v) = x
                && !matches!(v, AttributeValue::L(_))
            {
                self.defer(
                    Problem::OperandType,
                    t.start,
                    wrong_type("list_append", v.attribute_type()),
                );
            }
        }
        Ok(UpdateOperand::ListAppend(Box::new(a), Box::new(b)))
    }
}

impl Action {
    /// The document path the action writes.
    pub fn path(&self) -> &Path {
        match self {
            Action::Set(p, _) | Action::Remove(p) | Action::Add(p, _) | Action::Delete(p, _) => p,
        }
    }
}

impl Update {
    /// The actions in the order written.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Whether every action takes away (REMOVE, or DELETE of set
    /// elements): the update brings no data of its own.
    pub fn only_takes_away(&self) -> bool {
        self.actions
            .iter()
            .all(|a| matches!(a, Action::Remove(_) | Action::Delete(..)))
    }

    /// Every document path the update touches (SET/REMOVE/ADD/DELETE
    /// targets), in the order written.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    /// Applies the update to `item` in place (pass an empty map for a
    /// missing item). Errors are DynamoDB's runtime validation errors; on
    /// error `item` may be partly updated and must be discarded.
    pub fn apply(&self, item: &mut Item) -> Result<(), ExprError> {
        // Every right-hand side and every ADD/DELETE result is computed from
        // the item as it was, before anything is written. DynamoDB checks an
        // action's target path before its value, and takes the actions in
        // descending path order, which decides which error an update with
        // several faults reports (worked out against DynamoDB Local).
        let mut order: Vec<&Action> = self.actions.iter().collect();
        order.sort_by(|a, b| b.path().cmp(a.path()));
        let mut writes: Vec<(&Path, Option<AttributeValue>)> = Vec::new();
        let mut removes: Vec<&Path> = Vec::new();
        for action in order {
            check_parent(item, action.path())?;
            match action {
                Action::Set(p, v) => writes.push((p, Some(v.evaluate(item)?))),
                Action::Add(p, v) => writes.push((p, Some(add(p.get(item), v)?))),
                Action::Delete(p, v) => {
                    if let Some(old) = p.get(item) {
                        writes.push((p, delete(old, v)?));
                    }
                }
                Action::Remove(p) => removes.push(p),
            }
        }
        // Writes past the end of one list append in index order.
        writes.sort_by(|a, b| a.0.cmp(b.0));
        for (path, value) in writes {
            match value {
                Some(v) => set(item, path, v)?,
                None => remove(item, path)?,
            }
        }
        removes.sort_by(|a, b| b.cmp(a));
        for path in removes {
            remove(item, path)?;
        }
        Ok(())
    }
}

impl SetValue {
    fn evaluate(&self, item: &Item) -> Result<AttributeValue, ExprError> {
        let numbers =
            |a: &UpdateOperand, b: &UpdateOperand| match (a.evaluate(item)?, b.evaluate(item)?) {
                (AttributeValue::N(x), AttributeValue::N(y)) => Ok((x, y)),
                _ => Err(ExprError::new(WRONG_TYPE)),
            };
        Ok(match self {
            SetValue::Operand(op) => op.evaluate(item)?,
            SetValue::Plus(a, b) => {
                let (x, y) = numbers(a, b)?;
                AttributeValue::N(arithmetic(x.add(&y))?)
            }
            SetValue::Minus(a, b) => {
                let (x, y) = numbers(a, b)?;
                AttributeValue::N(arithmetic(x.sub(&y))?)
            }
        })
    }
}

impl UpdateOperand {
    fn evaluate(&self, item: &Item) -> Result<AttributeValue, ExprError> {
        match self {
            UpdateOperand::Path(p) => p
                .get(item)
                .cloned()
                .ok_or_else(|| ExprError::new(MISSING_OPERAND)),
            UpdateOperand::Value(v) => Ok(v.clone()),
            UpdateOperand::IfNotExists(p, fallback) => match p.get(item) {
                Some(v) => Ok(v.clone()),
                None => fallback.evaluate(item),
            },
            UpdateOperand::ListAppend(a, b) => match (a.evaluate(item)?, b.evaluate(item)?) {
                (AttributeValue::L(mut x), AttributeValue::L(y)) => {
                    x.extend(y);
                    Ok(AttributeValue::L(x))
                }
                _ => Err(ExprError::new(WRONG_TYPE)),
            },
        }
    }
}

/// Exact arithmetic with DynamoDB's update errors: overflow keeps the item
/// model's message, but a result needing more than 38 significant digits
/// gets the one DynamoDB gives for arithmetic (it never rounds).
fn arithmetic(result: Result<Number, ItemError>) -> Result<Number, ExprError> {
    result.map_err(|e| {
        let message = e.to_string();
        ExprError::new(if message.contains("38 significant digits") {
            PRECISION.to_owned()
        } else {
            message
        })
    })
}

/// The result of `ADD path v` when the path holds `old`.
fn add(old: Option<&AttributeValue>, v: &AttributeValue) -> Result<AttributeValue, ExprError> {
    use AttributeValue::*;
    Ok(match (old, v) {
        (None, v) => v.clone(),
        (Some(N(x)), N(y)) => N(arithmetic(x.add(y))?),
        (Some(Ss(x)), Ss(y)) => Ss(x.union(y).cloned().collect()),
        (Some(Ns(x)), Ns(y)) => Ns(x.union(y).cloned().collect()),
        (Some(Bs(x)), Bs(y)) => Bs(x.union(y).cloned().collect()),
        _ => return Err(ExprError::new(WRONG_TYPE)),
    })
}

/// The result of `DELETE path v` when the path holds `old`; `None` when no
/// element is left, which removes the attribute (sets are never empty).
fn delete(old: &AttributeValue, v: &AttributeValue) -> Result<Option<AttributeValue>, ExprError> {
    use AttributeValue::*;
    let left = match (old, v) {
        (Ss(x), Ss(y)) => Ss(x.difference(y).cloned().collect()),
        (Ns(x), Ns(y)) => Ns(x.difference(y).cloned().collect()),
        (Bs(x), Bs(y)) => Bs(x.difference(y).cloned().collect()),
        _ => return Err(ExprError::new(WRONG_TYPE)),
    };
    let empty = match &left {
        Ss(s) => s.is_empty(),
        Ns(s) => s.is_empty(),
        Bs(s) => s.is_empty(),
        _ => false,
    };
    Ok((!empty).then_some(left))
}

/// The container the last element of `path` lives in, or DynamoDB's
/// invalid-path error when the item has no such container.
fn parent_mut<'a>(
    item: &'a mut Item,
    path: &Path,
) -> Result<Option<&'a mut AttributeValue>, ExprError> {
    let elements = path.elements();
    if elements.len() == 1 {
        return Ok(None);
    }
    let mut cur = item
        .get_mut(path.top_level())
        .ok_or_else(|| ExprError::new(INVALID_PATH))?;
    for e in &elements[1..elements.len() - 1] {
        cur = step_mut(cur, e).ok_or_else(|| ExprError::new(INVALID_PATH))?;
    }
    Ok(Some(cur))
}

/// DynamoDB's invalid-path error unless `path`'s parent is in the item with
/// the container type (map or list) its last step needs.
fn check_parent(item: &Item, path: &Path) -> Result<(), ExprError> {
    let elements = path.elements();
    if elements.len() == 1 {
        return Ok(());
    }
    let mut cur = item
        .get(path.top_level())
        .ok_or_else(|| ExprError::new(INVALID_PATH))?;
    for e in &elements[1..elements.len() - 1] {
        cur = step(cur, e).ok_or_else(|| ExprError::new(INVALID_PATH))?;
    }
    let last = elements.last().expect("paths are never empty");
    match (cur, last) {
        (AttributeValue::M(_), PathElement::Name(_))
        | (AttributeValue::L(_), PathElement::Index(_)) => Ok(()),
        _ => Err(ExprError::new(INVALID_PATH)),
    }
}

/// Writes `v` at `path`. The parent must exist; an index at or past the end
/// of a list appends.
fn set(item: &mut Item, path: &Path, v: AttributeValue) -> Result<(), ExprError> {
    let last = path.elements().last().expect("paths are never empty");
    match (parent_mut(item, path)?, last) {
        (None, _) => {
            item.insert(path.top_level().to_owned(), v);
        }
        (Some(AttributeValue::M(m)), PathElement::Name(n)) => {
            m.insert(n.clone(), v);
        }
        (Some(AttributeValue::L(l)), PathElement::Index(i)) => match l.get_mut(*i) {
            Some(slot) => *slot = v,
            None => l.push(v),
        },
        _ => return Err(ExprError::new(INVALID_PATH)),
    }
    Ok(())
}

/// Removes what is at `path`; nothing there is not an error, a missing
/// parent is. Removing a list element shifts the later ones down.
fn remove(item: &mut Item, path: &Path) -> Result<(), ExprError> {
    let last = path.elements().last().expect("paths are never empty");
    match (parent_mut(item, path)?, last) {
        (None, _) => {
            item.remove(path.top_level());
        }
        (Some(AttributeValue::M(m)), PathElement::Name(n)) => {
            m.remove(n);
        }
        (Some(AttributeValue::L(l)), PathElement::Index(i)) => {
            if *i < l.len() {
                l.remove(*i);
            }
        }
        _ => return Err(ExprError::new(INVALID_PATH)),
    }
    Ok(())
}

#[cfg(test)]
mod tests;

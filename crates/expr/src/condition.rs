//! Condition expressions (ConditionExpression, FilterExpression): the AST,
//! its parser and its evaluation against an item.
//!
//! Grammar, with DynamoDB's precedence (tightest first: comparators, IN,
//! BETWEEN, functions, parentheses, NOT, AND, OR):
//!
//! ```text
//! condition := operand comparator operand | operand BETWEEN operand AND operand
//!            | operand IN ( operand, ... ) | function ( operand, ... )
//!            | condition AND condition | condition OR condition | NOT condition | ( condition )
//! operand   := path | :value | size ( operand ) | ( operand )
//! ```
//!
//! Parentheses are ambiguous until the token after them is seen (`(a) = :v`
//! versus `(a = :v)`), so the parser builds a [`Node`] that is either a
//! condition, an operand or a function call, and turns it into what the next
//! token requires.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use postbox_item::{AttributeType, AttributeValue, Item, Number};

use crate::error::Kind;
use crate::lexer::Tok;
use crate::parser::{Parser, Problem, brief, with_room_for};
use crate::path::Path;
use crate::{ExprError, Placeholders};

/// Most operands DynamoDB accepts in the list of one `IN`.
pub const MAX_IN_OPERANDS: usize = 100;

/// A value a condition compares: read from the item, given, or computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand {
    /// The value at a document path, if the item has one.
    Path(Path),
    /// An expression attribute value.
    Value(AttributeValue),
    /// `size(operand)`: a number, or nothing for types without a size.
    Size(Box<Operand>),
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparator {
    /// `=`: equal values of the same type.
    Eq,
    /// `<>`: not `=`; true when an operand is missing.
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Comparator {
    /// The operator as written in expressions.
    pub fn symbol(self) -> &'static str {
        match self {
            Comparator::Eq => "=",
            Comparator::Ne => "<>",
            Comparator::Lt => "<",
            Comparator::Le => "<=",
            Comparator::Gt => ">",
            Comparator::Ge => ">=",
        }
    }

    /// The operator with its operands swapped: `:v < a` is `a > :v`.
    pub fn flipped(self) -> Comparator {
        match self {
            Comparator::Lt => Comparator::Gt,
            Comparator::Le => Comparator::Ge,
            Comparator::Gt => Comparator::Lt,
            Comparator::Ge => Comparator::Le,
            other => other,
        }
    }

    fn from_tok(t: Tok) -> Option<Comparator> {
        Some(match t {
            Tok::Eq => Comparator::Eq,
            Tok::Ne => Comparator::Ne,
            Tok::Lt => Comparator::Lt,
            Tok::Le => Comparator::Le,
            Tok::Gt => Comparator::Gt,
            Tok::Ge => Comparator::Ge,
            _ => return None,
        })
    }
}

/// A parsed condition, placeholders resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// `a <op> b`.
    Compare(Comparator, Operand, Operand),
    /// `a BETWEEN lower AND upper`, both bounds inclusive.
    Between(Operand, Operand, Operand),
    /// `a IN (b, c, ...)`: equal to any of the list.
    In(Operand, Vec<Operand>),
    /// `attribute_exists(path)`.
    AttributeExists(Path),
    /// `attribute_not_exists(path)`.
    AttributeNotExists(Path),
    /// `attribute_type(a, :t)`, the type literal already parsed.
    AttributeType(Operand, AttributeType),
    /// `begins_with(a, prefix)`: S or B prefix.
    BeginsWith(Operand, Operand),
    /// `contains(a, b)`: substring, set element or list element.
    Contains(Operand, Operand),
    /// `NOT c`.
    Not(Box<Condition>),
    /// `a AND b`.
    And(Box<Condition>, Box<Condition>),
    /// `a OR b`.
    Or(Box<Condition>, Box<Condition>),
}

/// Parses a `ConditionExpression`.
pub fn parse_condition(src: &str, ph: &mut Placeholders) -> Result<Condition, ExprError> {
    parse(src, Kind::Condition, ph)
}

/// Parses a `FilterExpression`: the condition grammar, with errors naming
/// FilterExpression.
pub fn parse_filter(src: &str, ph: &mut Placeholders) -> Result<Condition, ExprError> {
    parse(src, Kind::Filter, ph)
}

pub(crate) fn parse(src: &str, kind: Kind, ph: &mut Placeholders) -> Result<Condition, ExprError> {
    crate::cache::parse(kind, src, ph, |src, ph| parse_uncached(src, kind, ph))
}

/// [`parse`] without the cache.
pub(crate) fn parse_uncached(
    src: &str,
    kind: Kind,
    ph: &mut Placeholders,
) -> Result<Condition, ExprError> {
    with_room_for(src, || parse_here(src, kind, ph))
}

impl crate::cache::Parsed for Condition {
    fn values_mut(&mut self, f: &mut dyn FnMut(&mut AttributeValue)) {
        fn operand(op: &mut Operand, f: &mut dyn FnMut(&mut AttributeValue)) {
            match op {
                Operand::Path(_) => {}
                Operand::Value(v) => f(v),
                Operand::Size(inner) => operand(inner, f),
            }
        }
        match self {
            Condition::Compare(_, a, b)
            | Condition::BeginsWith(a, b)
            | Condition::Contains(a, b) => {
                operand(a, f);
                operand(b, f);
            }
            Condition::Between(a, b, c) => {
                operand(a, f);
                operand(b, f);
                operand(c, f);
            }
            Condition::In(a, list) => {
                operand(a, f);
                list.iter_mut().for_each(|op| operand(op, f));
            }
            Condition::AttributeType(a, _) => operand(a, f),
            Condition::AttributeExists(_) | Condition::AttributeNotExists(_) => {}
            Condition::Not(c) => c.values_mut(f),
            Condition::And(a, b) | Condition::Or(a, b) => {
                a.values_mut(f);
                b.values_mut(f);
            }
        }
    }
}

fn parse_here(src: &str, kind: Kind, ph: &mut Placeholders) -> Result<Condition, ExprError> {
    let mut p = Parser::new(src, kind, ph)?;
    let parsed = p.or()?;
    let condition = p.require_condition(parsed)?;
    p.finish()?;
    Ok(condition)
}

/// What a parenthesised or bare piece of a condition turned out to be.
enum Node {
    Condition(Condition),
    Operand(Operand),
    Call(Call),
}

/// A function call not yet known to be a condition or an operand.
struct Call {
    name: String,
    /// Where the name stands, for ordering the problems found with it.
    at: usize,
    args: Vec<Operand>,
}

struct Parsed {
    node: Node,
    /// The node is wrapped in parentheses and nothing else: a second pair is redundant.
    parens: bool,
}

impl Parsed {
    fn bare(node: Node) -> Parsed {
        Parsed {
            node,
            parens: false,
        }
    }
}

/// The functions of condition expressions.
const FUNCTIONS: [&str; 6] = [
    "attribute_exists",
    "attribute_not_exists",
    "attribute_type",
    "begins_with",
    "contains",
    "size",
];
/// The functions of update expressions, which a condition may not call.
const UPDATE_FUNCTIONS: [&str; 2] = ["if_not_exists", "list_append"];

/// Placeholder for a condition whose problem is already deferred: the parse
/// fails anyway, so its content never matters.
fn dummy() -> Condition {
    Condition::AttributeExists(Path::attribute(""))
}

fn static_type(op: &Operand) -> Option<AttributeType> {
    match op {
        Operand::Path(_) => None,
        Operand::Value(v) => Some(v.attribute_type()),
        Operand::Size(_) => Some(AttributeType::N),
    }
}

fn is_scalar_key_type(t: AttributeType) -> bool {
    matches!(t, AttributeType::S | AttributeType::N | AttributeType::B)
}

fn wrong_type(function: &str, t: &str) -> String {
    format!(
        "Incorrect operand type for operator or function; operator or function: {function}, operand type: {t}"
    )
}

impl Parser<'_, '_, '_> {
    fn or(&mut self) -> Result<Parsed, ExprError> {
        let mut left = self.and()?;
        while self.at_word("OR") {
            let l = self.require_condition(left)?;
            self.bump();
            let right = self.and()?;
            let r = self.require_condition(right)?;
            left = Parsed::bare(Node::Condition(Condition::Or(Box::new(l), Box::new(r))));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Parsed, ExprError> {
        let mut left = self.not()?;
        while self.at_word("AND") {
            let l = self.require_condition(left)?;
            self.bump();
            let right = self.not()?;
            let r = self.require_condition(right)?;
            left = Parsed::bare(Node::Condition(Condition::And(Box::new(l), Box::new(r))));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Parsed, ExprError> {
        if self.at_word("NOT") {
            self.bump();
            let inner = self.not()?;
            let c = self.require_condition(inner)?;
            return Ok(Parsed::bare(Node::Condition(Condition::Not(Box::new(c)))));
        }
        self.primary()
    }

    /// A parenthesised piece or an atom, then any comparison it starts.
    fn primary(&mut self) -> Result<Parsed, ExprError> {
        let parsed = if self.at(Tok::LParen) {
            self.bump();
            let inner = self.or()?;
            self.expect(Tok::RParen)?;
            if inner.parens {
                return Err(self.redundant_parentheses());
            }
            Parsed {
                node: inner.node,
                parens: true,
            }
        } else {
            Parsed::bare(self.atom()?)
        };
        self.comparison(parsed)
    }

    /// If a comparator, BETWEEN or IN follows, `left` is its first operand.
    fn comparison(&mut self, left: Parsed) -> Result<Parsed, ExprError> {
        let t = self.peek();
        let condition = if let Some(cmp) = Comparator::from_tok(t.kind) {
            let a = self.require_operand(left)?;
            self.bump();
            let b = self.operand()?;
            self.check_comparison(cmp, t.start, &a, &b);
            Condition::Compare(cmp, a, b)
        } else if self.is_word(t, "BETWEEN") {
            let a = self.require_operand(left)?;
            self.bump();
            let lower = self.operand()?;
            if !self.at_word("AND") {
                return Err(self.syntax_error());
            }
            self.bump();
            let upper = self.operand()?;
            self.check_between(t.start, &a, &lower, &upper);
            Condition::Between(a, lower, upper)
        } else if self.is_word(t, "IN") {
            let a = self.require_operand(left)?;
            self.bump();
            self.expect(Tok::LParen)?;
            let list = self.operand_list()?;
            for b in &list {
                self.check_distinct("IN", t.start, &a, b);
            }
            if list.len() > MAX_IN_OPERANDS {
                self.defer(
                    Problem::OperandCount,
                    t.start,
                    format!("The IN operator is provided with too many operands; number of operands: {}", list.len()),
                );
            }
            Condition::In(a, list)
        } else {
            return Ok(left);
        };
        Ok(Parsed::bare(Node::Condition(condition)))
    }

    /// Operands separated by commas up to a closing parenthesis (already opened).
    fn operand_list(&mut self) -> Result<Vec<Operand>, ExprError> {
        let mut list = vec![self.operand()?];
        while self.at(Tok::Comma) {
            self.bump();
            list.push(self.operand()?);
        }
        self.expect(Tok::RParen)?;
        Ok(list)
    }

    /// An operand, possibly in (one pair of) parentheses.
    fn operand(&mut self) -> Result<Operand, ExprError> {
        Ok(self.operand_in_parens()?.0)
    }

    fn operand_in_parens(&mut self) -> Result<(Operand, bool), ExprError> {
        if self.at(Tok::LParen) {
            self.bump();
            let (op, inner_parens) = self.operand_in_parens()?;
            self.expect(Tok::RParen)?;
            if inner_parens {
                return Err(self.redundant_parentheses());
            }
            return Ok((op, true));
        }
        let node = self.atom()?;
        Ok((self.require_operand(Parsed::bare(node))?, false))
    }

    /// A path, a value or a function call.
    fn atom(&mut self) -> Result<Node, ExprError> {
        let t = self.peek();
        match t.kind {
            Tok::ValuePlaceholder => Ok(Node::Operand(Operand::Value(self.value()?))),
            Tok::NamePlaceholder => Ok(Node::Operand(Operand::Path(self.parse_path()?))),
            Tok::Ident if self.is_keyword(t) => Err(self.syntax_error()),
            Tok::Ident if self.nth(1).kind == Tok::LParen => {
                let name = self.text(t).to_owned();
                self.bump();
                self.bump();
                let args = self.operand_list()?;
                if UPDATE_FUNCTIONS.contains(&name.as_str()) {
                    self.defer(
                        Problem::NotAllowedFunction,
                        t.start,
                        format!("The function is not allowed in a condition expression; function: {name}"),
                    );
                } else if !FUNCTIONS.contains(&name.as_str()) {
                    self.defer(
                        Problem::UnknownFunction,
                        t.start,
                        format!("Invalid function name; function: {name}"),
                    );
                }
                Ok(Node::Call(Call {
                    name,
                    at: t.start,
                    args,
                }))
            }
            Tok::Ident => Ok(Node::Operand(Operand::Path(self.parse_path()?))),
            _ => Err(self.syntax_error()),
        }
    }

    /// `parsed` where an operand is required: a path, value or `size(...)`.
    fn require_operand(&mut self, parsed: Parsed) -> Result<Operand, ExprError> {
        match parsed.node {
            Node::Operand(op) => Ok(op),
            Node::Call(call) if call.name == "size" => Ok(self.size(call)),
            Node::Call(call) => {
                if FUNCTIONS.contains(&call.name.as_str()) {
                    self.misused(&call);
                }
                Ok(Operand::Value(AttributeValue::Null))
            }
            Node::Condition(_) => Err(self.syntax_error()),
        }
    }

    /// `parsed` where a condition is required.
    fn require_condition(&mut self, parsed: Parsed) -> Result<Condition, ExprError> {
        match parsed.node {
            Node::Condition(c) => Ok(c),
            Node::Call(call) => Ok(self.function(call)),
            Node::Operand(_) => Err(self.syntax_error()),
        }
    }

    fn misused(&mut self, call: &Call) {
        self.defer(
            Problem::MisusedFunction,
            call.at,
            format!(
                "The function is not allowed to be used this way in an expression; function: {}",
                call.name
            ),
        );
    }

    fn operand_count(&mut self, call: &Call, expected: usize) -> bool {
        if call.args.len() == expected {
            return true;
        }
        self.defer(
            Problem::OperandCount,
            call.at,
            format!(
                "Incorrect number of operands for operator or function; operator or function: {}, number of operands: {}",
                call.name,
                call.args.len()
            ),
        );
        false
    }

    fn size(&mut self, mut call: Call) -> Operand {
        if !self.operand_count(&call, 1) {
            return Operand::Value(AttributeValue::Null);
        }
        let arg = call.args.pop().expect("one operand");
        if let Some(t @ (AttributeType::N | AttributeType::Bool | AttributeType::Null)) =
            static_type(&arg)
        {
            self.defer(
                Problem::OperandType,
                call.at,
                wrong_type("size", t.as_str()),
            );
        }
        Operand::Size(Box::new(arg))
    }

    /// A function call used as a condition.
    fn function(&mut self, call: Call) -> Condition {
        let name = call.name.as_str();
        if !FUNCTIONS.contains(&name) {
            return dummy();
        }
        if name == "size" {
            self.misused(&call);
            return dummy();
        }
        let expected = if name.starts_with("attribute_") && name != "attribute_type" {
            1
        } else {
            2
        };
        if !self.operand_count(&call, expected) {
            return dummy();
        }
        let at = call.at;
        if expected == 2 {
            self.check_distinct(name, at, &call.args[0], &call.args[1]);
        }
        let mut args = call.args.into_iter();
        let first = args.next().expect("checked count");
        let second = args.next();
        match (name, first, second) {
            ("attribute_exists", Operand::Path(p), None) => Condition::AttributeExists(p),
            ("attribute_not_exists", Operand::Path(p), None) => Condition::AttributeNotExists(p),
            ("attribute_exists" | "attribute_not_exists", _, None) => {
                self.defer(
                    Problem::OperandType,
                    at,
                    format!("Operator or function requires a document path; operator or function: {name}"),
                );
                dummy()
            }
            ("attribute_type", a, Some(Operand::Value(AttributeValue::S(t)))) => {
                match AttributeType::parse(&t) {
                    Some(t) => Condition::AttributeType(a, t),
                    None => {
                        self.defer(
                        Problem::OperandType,
                        at,
                        format!("Invalid attribute type name found; type: {t}, valid types: {{N,BS,L,B,NULL,M,S,SS,NS,BOOL}}"),
                    );
                        dummy()
                    }
                }
            }
            ("attribute_type", _, Some(b)) => {
                // For a path DynamoDB lists every type its engine knows.
                const ANY_TYPE: &str = "{B,L,DOUBLE,HDS,BOOL,SS,NULL,INTSET,M,DECIMAL,NS,INT,DOUBLESET,DICT,N,FS,S,FLOAT,DECIMALSET,BS,HD}";
                let t = static_type(&b).map_or(ANY_TYPE, AttributeType::as_str);
                self.defer(Problem::OperandType, at, wrong_type(name, t));
                dummy()
            }
            ("begins_with", a, Some(b)) => {
                for op in [&a, &b] {
                    if let Some(t) = static_type(op)
                        .filter(|t| !matches!(t, AttributeType::S | AttributeType::B))
                    {
                        self.defer(Problem::OperandType, at, wrong_type(name, t.as_str()));
                    }
                }
                Condition::BeginsWith(a, b)
            }
            ("contains", a, Some(b)) => Condition::Contains(a, b),
            _ => unreachable!("operand counts were checked"),
        }
    }

    /// DynamoDB rejects an operator comparing a path with itself.
    fn check_distinct(&mut self, operator: &str, at: usize, a: &Operand, b: &Operand) {
        if let (Operand::Path(x), Operand::Path(y)) = (a, b)
            && x == y
        {
            self.defer(
                Problem::Distinct,
                at,
                format!(
                    "The first operand must be distinct from the remaining operands for this operator or function; operator: {operator}, first operand: {}",
                    x.bracketed()
                ),
            );
        }
    }

    fn check_comparison(&mut self, cmp: Comparator, at: usize, a: &Operand, b: &Operand) {
        self.check_distinct(cmp.symbol(), at, a, b);
        if !matches!(cmp, Comparator::Eq | Comparator::Ne) {
            for op in [a, b] {
                if let Some(t) = static_type(op).filter(|t| !is_scalar_key_type(*t)) {
                    self.defer(
                        Problem::OperandType,
                        at,
                        wrong_type(cmp.symbol(), t.as_str()),
                    );
                }
            }
        }
    }

    fn check_between(&mut self, at: usize, a: &Operand, lower: &Operand, upper: &Operand) {
        for op in [a, lower, upper] {
            if let Some(t) = static_type(op).filter(|t| !is_scalar_key_type(*t)) {
                self.defer(Problem::OperandType, at, wrong_type("BETWEEN", t.as_str()));
            }
        }
        if let (Operand::Value(lo), Operand::Value(hi)) = (lower, upper) {
            let bounds = format!(
                "lower bound operand: AttributeValue: {}, upper bound operand: AttributeValue: {}",
                brief(lo),
                brief(hi)
            );
            if lo.attribute_type() != hi.attribute_type() {
                self.defer(
                    Problem::OperandType,
                    at,
                    format!("The BETWEEN operator requires same data type for lower and upper bounds; {bounds}"),
                );
            } else if order(lo, hi) == Some(Ordering::Greater) {
                self.defer(
                    Problem::OperandType,
                    at,
                    format!("The BETWEEN operator requires upper bound to be greater than or equal to lower bound; {bounds}"),
                );
            }
        }
    }
}

/// DynamoDB's order between two values: strings by UTF-8 bytes, numbers
/// numerically, binaries by unsigned bytes. Other pairs (different types,
/// or types without an order) are not comparable.
pub(crate) fn order(a: &AttributeValue, b: &AttributeValue) -> Option<Ordering> {
    match (a, b) {
        (AttributeValue::S(x), AttributeValue::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (AttributeValue::N(x), AttributeValue::N(y)) => Some(x.cmp(y)),
        (AttributeValue::B(x), AttributeValue::B(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// `begins_with` on values: a string or binary prefix of the same type.
pub(crate) fn begins_with(a: &AttributeValue, prefix: &AttributeValue) -> bool {
    match (a, prefix) {
        (AttributeValue::S(x), AttributeValue::S(p)) => x.starts_with(p.as_str()),
        (AttributeValue::B(x), AttributeValue::B(p)) => x.starts_with(p),
        _ => false,
    }
}

/// `size()` of a value: string length in UTF-16 code units (DynamoDB counts
/// as Java does), binary length in bytes, element count of sets, lists and
/// maps. Numbers, booleans and NULL have no size.
fn size_of(v: &AttributeValue) -> Option<usize> {
    Some(match v {
        AttributeValue::S(s) => s.encode_utf16().count(),
        AttributeValue::B(b) => b.len(),
        AttributeValue::Ss(s) => s.len(),
        AttributeValue::Ns(s) => s.len(),
        AttributeValue::Bs(s) => s.len(),
        AttributeValue::L(l) => l.len(),
        AttributeValue::M(m) => m.len(),
        AttributeValue::N(_) | AttributeValue::Bool(_) | AttributeValue::Null => return None,
    })
}

fn contains(haystack: &AttributeValue, needle: &AttributeValue) -> bool {
    match (haystack, needle) {
        (AttributeValue::S(s), AttributeValue::S(x)) => s.contains(x.as_str()),
        (AttributeValue::B(b), AttributeValue::B(x)) => {
            x.is_empty() || b.windows(x.len()).any(|w| w == x.as_slice())
        }
        (AttributeValue::Ss(s), AttributeValue::S(x)) => s.contains(x),
        (AttributeValue::Ns(s), AttributeValue::N(x)) => s.contains(x),
        (AttributeValue::Bs(s), AttributeValue::B(x)) => s.contains(x),
        (AttributeValue::L(l), x) => l.contains(x),
        _ => false,
    }
}

static NO_ITEM: Item = BTreeMap::new();

impl Operand {
    /// The operand's value for `item`, if it has one.
    pub fn resolve<'a>(&'a self, item: &'a Item) -> Option<Cow<'a, AttributeValue>> {
        match self {
            Operand::Path(p) => p.get(item).map(Cow::Borrowed),
            Operand::Value(v) => Some(Cow::Borrowed(v)),
            Operand::Size(inner) => {
                let n = size_of(inner.resolve(item)?.as_ref())?;
                Some(Cow::Owned(AttributeValue::N(Number::from(n as i64))))
            }
        }
    }
}

impl Condition {
    /// Every document path the condition reads, in the order written; e.g.
    /// for DynamoDB's rule that a Query's FilterExpression must not name a
    /// key attribute.
    pub fn paths(&self) -> Vec<&Path> {
        fn operand<'c>(op: &'c Operand, out: &mut Vec<&'c Path>) {
            match op {
                Operand::Path(p) => out.push(p),
                Operand::Value(_) => {}
                Operand::Size(inner) => operand(inner, out),
            }
        }
        fn walk<'c>(c: &'c Condition, out: &mut Vec<&'c Path>) {
            match c {
                Condition::Compare(_, a, b)
                | Condition::BeginsWith(a, b)
                | Condition::Contains(a, b) => {
                    operand(a, out);
                    operand(b, out);
                }
                Condition::Between(a, lo, hi) => {
                    [a, lo, hi].into_iter().for_each(|o| operand(o, out))
                }
                Condition::In(a, list) => {
                    std::iter::once(a).chain(list).for_each(|o| operand(o, out))
                }
                Condition::AttributeExists(p) | Condition::AttributeNotExists(p) => out.push(p),
                Condition::AttributeType(a, _) => operand(a, out),
                Condition::Not(x) => walk(x, out),
                Condition::And(a, b) | Condition::Or(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Evaluates the condition; `None` stands for an item that does not exist.
    /// A comparison whose operands are missing or of different types is
    /// simply false (only `<>` is then true), never an error.
    pub fn evaluate(&self, item: Option<&Item>) -> bool {
        self.holds(item.unwrap_or(&NO_ITEM))
    }

    /// The logical skeleton, kept free of locals so that deeply nested
    /// conditions (a 4096-byte expression can nest a thousand levels) recurse
    /// in small stack frames; simple conditions are evaluated out of line.
    fn holds(&self, item: &Item) -> bool {
        match self {
            Condition::Not(c) => !c.holds(item),
            Condition::And(a, b) => a.holds(item) && b.holds(item),
            Condition::Or(a, b) => a.holds(item) || b.holds(item),
            simple => simple.simple_holds(item),
        }
    }

    #[inline(never)]
    fn simple_holds(&self, item: &Item) -> bool {
        fn get<'a>(op: &'a Operand, item: &'a Item) -> Option<Cow<'a, AttributeValue>> {
            op.resolve(item)
        }
        let get = |op| get(op, item);
        match self {
            Condition::Compare(cmp, a, b) => {
                let (a, b) = (get(a), get(b));
                match cmp {
                    Comparator::Eq => matches!((&a, &b), (Some(x), Some(y)) if x == y),
                    Comparator::Ne => !matches!((&a, &b), (Some(x), Some(y)) if x == y),
                    _ => {
                        let Some(ord) = a.zip(b).and_then(|(x, y)| order(&x, &y)) else {
                            return false;
                        };
                        match cmp {
                            Comparator::Lt => ord == Ordering::Less,
                            Comparator::Le => ord != Ordering::Greater,
                            Comparator::Gt => ord == Ordering::Greater,
                            _ => ord != Ordering::Less,
                        }
                    }
                }
            }
            Condition::Between(a, lo, hi) => match (get(a), get(lo), get(hi)) {
                (Some(x), Some(lo), Some(hi)) => {
                    order(&x, &lo).is_some_and(|o| o != Ordering::Less)
                        && order(&x, &hi).is_some_and(|o| o != Ordering::Greater)
                }
                _ => false,
            },
            Condition::In(a, list) => {
                get(a).is_some_and(|x| list.iter().any(|op| get(op).is_some_and(|y| y == x)))
            }
            Condition::AttributeExists(p) => p.get(item).is_some(),
            Condition::AttributeNotExists(p) => p.get(item).is_none(),
            Condition::AttributeType(a, t) => get(a).is_some_and(|v| v.attribute_type() == *t),
            Condition::BeginsWith(a, b) => {
                matches!((get(a), get(b)), (Some(x), Some(p)) if begins_with(&x, &p))
            }
            Condition::Contains(a, b) => {
                matches!((get(a), get(b)), (Some(x), Some(y)) if contains(&x, &y))
            }
            Condition::Not(_) | Condition::And(..) | Condition::Or(..) => self.holds(item),
        }
    }
}

#[cfg(test)]
mod tests;

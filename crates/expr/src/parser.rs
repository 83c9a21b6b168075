//! The parser machinery every expression kind shares: the token cursor,
//! DynamoDB's syntax error format, document paths and placeholders, and the
//! ordering of semantic errors.
//!
//! DynamoDB checks an expression in two phases: first the grammar, then the
//! meaning (reserved words, undefined placeholders, operand types, ...). A
//! syntax error therefore always wins, and among semantic problems the one of
//! the highest-ranked class wins regardless of where it stands. The parser
//! mirrors that: syntax errors return at once, semantic problems are recorded
//! with [`Parser::defer`] and the best one is reported when parsing is done.

use postbox_item::AttributeValue;

use crate::lexer::{Tok, Token, tokenize};
use crate::path::{Path, PathElement, clash, clash_message};
use crate::reserved::is_reserved;
use crate::{ExprError, Kind, Placeholders};

/// DynamoDB's limit on the length of one expression, in bytes of the text
/// as sent (placeholders not substituted). It also bounds how deep the
/// recursive-descent parser can nest.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// Nesting (parentheses plus NOTs) up to which parsing runs on the caller's
/// stack. Real expressions stay far below it.
const SHALLOW_NESTING: usize = 32;

/// Stack for parsing deeper expressions. 4096 bytes allow about two thousand
/// levels, which a recursive-descent parser cannot take on a default 2 MB
/// thread stack in a debug build; the memory is reserved, not committed.
const DEEP_STACK_BYTES: usize = 256 << 20;

/// Runs the parse `f` of `src`, on a thread with a large stack when `src`
/// nests deeply. DynamoDB accepts any nesting that fits in 4096 bytes, and a
/// stack overflow would abort the whole process, so deep input gets room
/// instead of a made-up limit.
pub(crate) fn with_room_for<T: Send>(
    src: &str,
    f: impl FnOnce() -> Result<T, ExprError> + Send,
) -> Result<T, ExprError> {
    if nesting(src) <= SHALLOW_NESTING {
        return f();
    }
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("postbox-expr-parse".to_owned())
            .stack_size(DEEP_STACK_BYTES)
            .spawn_scoped(scope, f)
            .map_err(|e| {
                ExprError::new(format!(
                    "Cannot parse a deeply nested expression: no thread for it: {e}"
                ))
            })?;
        parser
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// An upper bound of how deep parsing `src` recurses: the deepest
/// parenthesis nesting plus every `NOT`.
fn nesting(src: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in src.bytes() {
        match b {
            b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let nots = tokenize(src)
        .iter()
        .filter(|t| t.kind == Tok::Ident && src[t.start..t.end].eq_ignore_ascii_case("NOT"))
        .count();
    deepest + nots
}

/// Most elements a document path may have (`a.b[0]` has three).
pub const MAX_PATH_DEPTH: usize = 32;

/// Largest list index DynamoDB accepts in a document path.
const MAX_LIST_INDEX: u64 = i32::MAX as u64;

/// Words that are never attribute names, in any expression kind: DynamoDB's
/// expression grammar is one grammar, so `a.set` is a syntax error even in a
/// condition.
const KEYWORDS: [&str; 9] = [
    "AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE",
];

/// Semantic problems, grouped the way DynamoDB reports them (see [`rank`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A reserved word written as an attribute name.
    Reserved,
    /// A function DynamoDB does not have.
    UnknownFunction,
    /// A function of the other expression kind (`size` in an update,
    /// `if_not_exists` in a condition).
    NotAllowedFunction,
    /// A condition function used as an operand, or `size` used as a condition.
    MisusedFunction,
    /// The same clause twice in an update.
    Section,
    /// A path of more than [`MAX_PATH_DEPTH`] elements.
    PathDepth,
    /// A list index past `i32::MAX`.
    IndexRange,
    /// `#name` with no entry in ExpressionAttributeNames.
    UndefinedName,
    /// `:value` with no entry in ExpressionAttributeValues.
    UndefinedValue,
    /// Two update or projection paths where one contains the other, or that
    /// step into one value by name and by index.
    Overlap,
    /// A function or operator with the wrong number of operands.
    OperandCount,
    /// `a = a`: an operator comparing a path with itself.
    Distinct,
    /// An operand of a type the operator or function cannot take.
    OperandType,
}

/// The class of a problem for `kind`; lower classes are reported first, and
/// within a class the problem that stands first in the text. The classes
/// were worked out against DynamoDB Local: e.g. in a condition a reserved
/// word and an unknown function are one class (`status = :v AND foo(a)`
/// names `status`, `foo(status)` names `foo`), while undefined placeholders
/// come after both; in an update, undefined names come before overlapping
/// paths and those before undefined values.
fn rank(kind: Kind, p: Problem) -> u8 {
    use Problem::*;
    match (kind, p) {
        (
            _,
            Reserved | UnknownFunction | NotAllowedFunction | MisusedFunction | Section | PathDepth
            | IndexRange,
        ) => 0,
        (Kind::Update, UndefinedName) => 1,
        (Kind::Update, Overlap) => 2,
        (Kind::Update, UndefinedValue) => 3,
        (Kind::Update, _) => 4,
        (_, UndefinedName | UndefinedValue) => 1,
        (_, Overlap) => 2,
        (_, OperandCount | Distinct | OperandType) => 3,
    }
}

/// A cursor over the tokens of one expression.
pub(crate) struct Parser<'s, 'p, 'a> {
    pub src: &'s str,
    pub kind: Kind,
    toks: Vec<Token>,
    pos: usize,
    ph: &'p mut Placeholders<'a>,
    /// The problem to report so far: (class, position in the text, message).
    deferred: Option<(u8, usize, String)>,
}

impl<'s, 'p, 'a> Parser<'s, 'p, 'a> {
    /// Starts parsing `src`, after DynamoDB's checks that come before any
    /// grammar: valid placeholder maps, size, and a non-empty expression. A
    /// blank one is not "empty" to DynamoDB but a syntax error at its end.
    pub fn new(src: &'s str, kind: Kind, ph: &'p mut Placeholders<'a>) -> Result<Self, ExprError> {
        ph.check_supplied()?;
        if src.len() > MAX_EXPRESSION_BYTES {
            return Err(ExprError::invalid(
                kind,
                format!(
                    "Expression size has exceeded the maximum allowed size; expression size: {}",
                    src.len()
                ),
            ));
        }
        if src.is_empty() {
            return Err(ExprError::invalid(kind, "The expression can not be empty;"));
        }
        Ok(Parser {
            src,
            kind,
            toks: tokenize(src),
            pos: 0,
            ph,
            deferred: None,
        })
    }

    pub fn peek(&self) -> Token {
        self.toks[self.pos]
    }

    /// The token `n` places ahead (the last one is always `Eof`).
    pub fn nth(&self, n: usize) -> Token {
        self.toks[(self.pos + n).min(self.toks.len() - 1)]
    }

    pub fn at(&self, kind: Tok) -> bool {
        self.peek().kind == kind
    }

    pub fn bump(&mut self) -> Token {
        let t = self.peek();
        if t.kind != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    pub fn text(&self, t: Token) -> &'s str {
        &self.src[t.start..t.end]
    }

    /// True when `t` is the keyword `word` in any letter case.
    pub fn is_word(&self, t: Token, word: &str) -> bool {
        t.kind == Tok::Ident && self.text(t).eq_ignore_ascii_case(word)
    }

    pub fn at_word(&self, word: &str) -> bool {
        self.is_word(self.peek(), word)
    }

    /// True when `t` is a keyword of the expression grammar.
    pub fn is_keyword(&self, t: Token) -> bool {
        KEYWORDS.iter().any(|w| self.is_word(t, w))
    }

    /// DynamoDB's syntax error at the current token. `near` quotes the source
    /// from the previous token through the next one (at the end: through the
    /// end of the text), as DynamoDB does.
    pub fn syntax_error(&self) -> ExprError {
        let cur = self.peek();
        let at_end = cur.kind == Tok::Eof;
        let token = if at_end { "<EOF>" } else { self.text(cur) };
        let from = match self.pos {
            0 if at_end => 0,
            0 => cur.start,
            p => self.toks[p - 1].start,
        };
        let to = if at_end {
            self.src.len()
        } else {
            self.nth(1).end
        };
        ExprError::invalid(
            self.kind,
            format!(
                "Syntax error; token: \"{token}\", near: \"{}\"",
                &self.src[from..to]
            ),
        )
    }

    /// DynamoDB's error for `((...))`. It is raised where the second pair
    /// closes, before any later syntax error.
    pub fn redundant_parentheses(&self) -> ExprError {
        ExprError::invalid(self.kind, "The expression has redundant parentheses;")
    }

    pub fn expect(&mut self, kind: Tok) -> Result<Token, ExprError> {
        if self.at(kind) {
            Ok(self.bump())
        } else {
            Err(self.syntax_error())
        }
    }

    /// Records a semantic problem found at byte `at` of the text; the one
    /// DynamoDB would report is returned by [`Parser::finish`].
    pub fn defer(&mut self, problem: Problem, at: usize, message: impl Into<String>) {
        let key = (rank(self.kind, problem), at);
        if self
            .deferred
            .as_ref()
            .is_none_or(|(r, p, _)| key < (*r, *p))
        {
            self.deferred = Some((key.0, key.1, message.into()));
        }
    }

    /// Ends parsing: the input must be used up, then the problem DynamoDB
    /// reports first (if any) is the error.
    pub fn finish(mut self) -> Result<(), ExprError> {
        self.expect(Tok::Eof)?;
        match self.deferred.take() {
            Some((_, _, message)) => Err(ExprError::invalid(self.kind, message)),
            None => Ok(()),
        }
    }

    /// True when the current token can start a document path.
    pub fn at_path_start(&self) -> bool {
        matches!(self.peek().kind, Tok::Ident | Tok::NamePlaceholder)
    }

    /// Parses `name`, `#name`, then any `.name`, `.#name` and `[index]` steps.
    pub fn parse_path(&mut self) -> Result<Path, ExprError> {
        let start = self.peek().start;
        let first = self.path_name()?;
        let mut elements = vec![PathElement::Name(first)];
        loop {
            match self.peek().kind {
                Tok::Dot => {
                    self.bump();
                    let name = self.path_name()?;
                    elements.push(PathElement::Name(name));
                }
                Tok::LBracket => {
                    self.bump();
                    let digits = self.expect(Tok::Digits)?;
                    self.expect(Tok::RBracket)?;
                    let text = self.text(digits);
                    let index = match text.parse::<u64>() {
                        Ok(i) if i <= MAX_LIST_INDEX => i as usize,
                        _ => {
                            self.defer(
                                Problem::IndexRange,
                                digits.start,
                                format!(
                                    "List index is not within the allowable range; index: [{text}]"
                                ),
                            );
                            0
                        }
                    };
                    elements.push(PathElement::Index(index));
                }
                _ => break,
            }
        }
        let path = Path::from_elements(elements).expect("a path starts with a name");
        let depth = path.elements().len();
        if depth > MAX_PATH_DEPTH {
            self.defer(
                Problem::PathDepth,
                start,
                format!("The document path has too many nesting levels; nesting levels: {depth}"),
            );
        }
        Ok(path)
    }

    /// One name step of a path: a bare word (not a keyword, not reserved) or a `#placeholder`.
    fn path_name(&mut self) -> Result<String, ExprError> {
        let t = self.peek();
        let text = self.text(t);
        match t.kind {
            Tok::Ident if self.is_keyword(t) => Err(self.syntax_error()),
            Tok::Ident => {
                self.bump();
                // SIZE is on DynamoDB's published list, yet DynamoDB accepts
                // it as an attribute name (it is the `size` function's name).
                if is_reserved(text) && !text.eq_ignore_ascii_case("size") {
                    self.defer(
                        Problem::Reserved,
                        t.start,
                        format!("Attribute name is a reserved keyword; reserved keyword: {text}"),
                    );
                }
                Ok(text.to_owned())
            }
            Tok::NamePlaceholder => {
                self.bump();
                match self.ph.name(text) {
                    Some(name) => Ok(name.to_owned()),
                    None => {
                        self.defer(
                            Problem::UndefinedName,
                            t.start,
                            format!("An expression attribute name used in the document path is not defined; attribute name: {text}"),
                        );
                        Ok(text.to_owned())
                    }
                }
            }
            _ => Err(self.syntax_error()),
        }
    }

    /// DynamoDB's rule that no two paths of one update or projection may
    /// overlap (`a`, `a.b`) or conflict (`a.b`, `a[0]`), reported for the
    /// first such pair.
    pub fn check_clashes(&mut self, paths: &[Path]) {
        let mut pair = 0;
        for (i, two) in paths.iter().enumerate() {
            for one in &paths[..i] {
                if let Some(kind) = clash(one, two) {
                    self.defer(Problem::Overlap, pair, clash_message(&kind, one, two));
                }
                pair += 1;
            }
        }
    }

    /// Consumes a `:value` token and returns its value. An undefined one is a
    /// deferred problem; parsing goes on with NULL in its place.
    pub fn value(&mut self) -> Result<AttributeValue, ExprError> {
        let t = self.expect(Tok::ValuePlaceholder)?;
        let text = self.text(t);
        match self.ph.value(text) {
            Some(v) => Ok(v.clone()),
            None => {
                self.defer(
                    Problem::UndefinedValue,
                    t.start,
                    format!("An expression attribute value used in expression is not defined; attribute value: {text}"),
                );
                Ok(AttributeValue::Null)
            }
        }
    }
}

/// A value in DynamoDB's message notation, `{N:1}`, `{S:a}`.
pub(crate) fn brief(v: &AttributeValue) -> String {
    let json = v.to_json();
    let (tag, inner) = json
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("a value is a one-entry object");
    let inner = inner
        .as_str()
        .map_or_else(|| inner.to_string(), str::to_owned);
    format!("{{{tag}:{inner}}}")
}

//! Splits expression text into tokens.
//!
//! Every expression kind shares one token set; keywords (`AND`, `SET`, ...)
//! are plain identifiers here and the parsers decide by context, because
//! which words are keywords differs between condition and update grammar.
//! Each token keeps its byte span so syntax errors can quote the source the
//! way DynamoDB does.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A bare word: an attribute name, a function name or a keyword.
    Ident,
    /// `#name`: an expression attribute name placeholder.
    NamePlaceholder,
    /// `:name`: an expression attribute value placeholder.
    ValuePlaceholder,
    /// A run of decimal digits (only meaningful as a list index).
    Digits,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Dot,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    /// A character no grammar accepts; always a syntax error where it stands.
    Unknown,
    /// End of input; its span is empty and sits at the end of the text.
    Eof,
}

/// One token and where it is in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Tok,
    pub start: usize,
    pub end: usize,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Tokenizes `src`; the last token is always `Eof`. Lexing never fails:
/// characters outside the grammar become `Unknown` tokens, so the parser
/// reports them with DynamoDB's syntax error and context.
pub(crate) fn tokenize(src: &str) -> Vec<Token> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
            continue;
        }
        let start = i;
        let word_end = |from: usize| {
            let mut j = from;
            while j < bytes.len() && is_word_byte(bytes[j]) {
                j += 1;
            }
            j
        };
        let (kind, end) = match b {
            // Names start with a letter: DynamoDB rejects `_a` at the `_`.
            b'a'..=b'z' | b'A'..=b'Z' => (Tok::Ident, word_end(i)),
            // A number with a leading zero is just "0": `[01]` is a syntax error at the `1`.
            b'0' => (Tok::Digits, i + 1),
            b'1'..=b'9' => {
                let mut j = i;
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                (Tok::Digits, j)
            }
            b'#' | b':' => {
                let j = word_end(i + 1);
                if j == i + 1 {
                    (Tok::Unknown, i + 1)
                } else if b == b'#' {
                    (Tok::NamePlaceholder, j)
                } else {
                    (Tok::ValuePlaceholder, j)
                }
            }
            b'(' => (Tok::LParen, i + 1),
            b')' => (Tok::RParen, i + 1),
            b'[' => (Tok::LBracket, i + 1),
            b']' => (Tok::RBracket, i + 1),
            b',' => (Tok::Comma, i + 1),
            b'.' => (Tok::Dot, i + 1),
            b'=' => (Tok::Eq, i + 1),
            b'+' => (Tok::Plus, i + 1),
            b'-' => (Tok::Minus, i + 1),
            b'<' => match bytes.get(i + 1) {
                Some(b'>') => (Tok::Ne, i + 2),
                Some(b'=') => (Tok::Le, i + 2),
                _ => (Tok::Lt, i + 1),
            },
            b'>' => match bytes.get(i + 1) {
                Some(b'=') => (Tok::Ge, i + 2),
                _ => (Tok::Gt, i + 1),
            },
            _ => {
                // One whole character, so the error can quote it intact.
                let len = src[i..].chars().next().map_or(1, char::len_utf8);
                (Tok::Unknown, i + len)
            }
        };
        out.push(Token { kind, start, end });
        i = end;
    }
    out.push(Token {
        kind: Tok::Eof,
        start: src.len(),
        end: src.len(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders the tokens of `src` as `Kind(text)` separated by spaces.
    fn check(src: &str, expect: &str) {
        let got: Vec<String> = tokenize(src)
            .iter()
            .map(|t| format!("{:?}({})", t.kind, &src[t.start..t.end]))
            .collect();
        assert_eq!(got.join(" "), expect, "tokens of {src:?}");
    }

    #[test]
    fn tokens() {
        check(
            "a.b[10] <> :v",
            "Ident(a) Dot(.) Ident(b) LBracket([) Digits(10) RBracket(]) Ne(<>) ValuePlaceholder(:v) Eof()",
        );
        check(
            "#n1<=:x_2>=c<d>e",
            "NamePlaceholder(#n1) Le(<=) ValuePlaceholder(:x_2) Ge(>=) Ident(c) Lt(<) Ident(d) Gt(>) Ident(e) Eof()",
        );
        check(
            " SET a=a+:o, b = b - :o ",
            "Ident(SET) Ident(a) Eq(=) Ident(a) Plus(+) ValuePlaceholder(:o) Comma(,) Ident(b) Eq(=) Ident(b) Minus(-) ValuePlaceholder(:o) Eof()",
        );
        check(
            "f(x,y)",
            "Ident(f) LParen(() Ident(x) Comma(,) Ident(y) RParen()) Eof()",
        );
        check(
            "# : ! é",
            "Unknown(#) Unknown(:) Unknown(!) Unknown(é) Eof()",
        );
        check(
            "x_1 _y 9a 01",
            "Ident(x_1) Unknown(_) Ident(y) Digits(9) Ident(a) Digits(0) Digits(1) Eof()",
        );
        check("", "Eof()");
    }
}

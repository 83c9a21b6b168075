//! I-JSON (RFC 7493) input: a strict JSON parser for payloads, and the same
//! checks for payloads built in code as `serde_json::Value`.
//!
//! The hash of an event covers the canonical form of its payload, and that
//! form writes every number as an IEEE double. A number that does not
//! survive the trip through a double (an integer beyond 2^53 such as
//! 2^53 + 1, a decimal with more digits than a double keeps, a magnitude out
//! of range) would hash as something other than what the caller sent, so it
//! is refused, with advice to send it as a string.
//!
//! The rule, for integers and decimals alike: a number is accepted iff it
//! equals, as an exact decimal, the shortest decimal of the double nearest
//! to it, which is what its canonical form writes. Below 2^53 every integer
//! passes; beyond, only those a double carries exactly and writes back with
//! the same digits (2^54, 10^20), so the canonical form of any accepted
//! payload parses back to itself (a stored payload can always be read and
//! re-emitted).
//!
//! Parsing is done here rather than by `serde_json` because the check needs
//! each number's literal text, and because `serde_json`'s default float
//! parsing is not always correctly rounded. Duplicate member names and
//! unpaired surrogates, which I-JSON forbids, are refused too.

use serde_json::{Map, Number, Value};

use crate::canonical::shortest_digits;

/// Largest integer magnitude below which every integer survives: 2^53 - 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Deepest nesting accepted, so hostile input cannot exhaust the stack.
pub const MAX_DEPTH: usize = 128;

/// Why a payload is not acceptable I-JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all.
    #[error("payload is not valid JSON at byte {at}: {what}")]
    Syntax { at: usize, what: String },
    /// A number a double cannot carry exactly.
    #[error(
        "payload number {literal}{} does not survive as an IEEE double ({why}); send it as a string",
        .path.as_deref().map(|p| format!(" at {p}")).unwrap_or_default()
    )]
    LossyNumber {
        literal: String,
        path: Option<String>,
        why: &'static str,
    },
    /// The same member name twice in one object.
    #[error("payload has the member name {name:?} twice in one object (I-JSON forbids duplicates)")]
    DuplicateName { name: String },
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("payload is nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// Parses I-JSON text into a value.
pub fn parse(text: &str) -> Result<Value, JsonError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("trailing characters after the value"));
    }
    Ok(v)
}

/// Checks a value built in code: every integer within +-(2^53 - 1). Floats
/// in a `Value` are already doubles, so they always survive.
pub fn check_value(value: &Value) -> Result<(), JsonError> {
    check_at(value, &mut String::from("$"), 0)
}

fn check_at(value: &Value, path: &mut String, depth: usize) -> Result<(), JsonError> {
    if depth > MAX_DEPTH {
        return Err(JsonError::TooDeep);
    }
    match value {
        Value::Number(n) => {
            let survives = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => integer_survives(u),
                (None, Some(i)) => integer_survives(i.unsigned_abs()),
                _ => n.as_f64().is_some_and(f64::is_finite),
            };
            if !survives {
                return Err(JsonError::LossyNumber {
                    literal: n.to_string(),
                    path: Some(path.clone()),
                    why: "an integer beyond 2^53 that a double cannot carry exactly",
                });
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                check_at(item, path, depth + 1)?;
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                check_at(v, path, depth + 1)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> JsonError {
        JsonError::Syntax {
            at: self.i,
            what: what.to_owned(),
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, JsonError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("unexpected character"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep);
        }
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.i += 1;
        let mut map = Map::new();
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("expected a member name"));
            }
            let name = self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.err("expected ':'"));
            }
            self.i += 1;
            self.ws();
            let v = self.value(depth + 1)?;
            if map.contains_key(&name) {
                return Err(JsonError::DuplicateName { name });
            }
            map.insert(name, v);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        let h = std::str::from_utf8(h).map_err(|_| self.err("bad \\u escape"))?;
        let v = u32::from_str_radix(h, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.i += 1;
        let mut out = String::new();
        let mut start = self.i;
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(self.err("unterminated string"));
            };
            match b {
                b'"' => {
                    let run = &self.text[start..self.i];
                    self.i += 1;
                    // Without escapes, one allocation of the string's size.
                    if out.is_empty() {
                        return Ok(run.to_owned());
                    }
                    out.push_str(run);
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(&self.text[start..self.i]);
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&hi) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(
                                        self.err("unpaired surrogate (I-JSON needs valid Unicode)")
                                    );
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(
                                        self.err("unpaired surrogate (I-JSON needs valid Unicode)")
                                    );
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(
                                    self.err("unpaired surrogate (I-JSON needs valid Unicode)")
                                );
                            } else {
                                hi
                            };
                            out.push(char::from_u32(c).ok_or_else(|| self.err("bad \\u escape"))?);
                        }
                        _ => return Err(self.err("unknown escape")),
                    }
                    start = self.i;
                }
                _ => {
                    // On to the next quote, backslash or control character
                    // (the bytes a string escapes), at once.
                    self.i =
                        postbox_item::json::next_escaped(self.s, self.i).unwrap_or(self.s.len());
                    if self.s.get(self.i).is_some_and(|&b| b < 0x20) {
                        return Err(self.err("control character in a string"));
                    }
                }
            }
        }
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.i;
        let neg = self.s[self.i] == b'-';
        if neg {
            self.i += 1;
        }
        let int_start = self.i;
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.s.get(self.i) {
                    self.i += 1;
                }
            }
            _ => return Err(self.err("bad number")),
        }
        let int_digits = &self.text[int_start..self.i];
        let mut frac_digits = "";
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            let f = self.i;
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
            if f == self.i {
                return Err(self.err("bad number: no digit after '.'"));
            }
            frac_digits = &self.text[f..self.i];
        }
        let mut exp: i64 = 0;
        let mut has_exp = false;
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            has_exp = true;
            self.i += 1;
            let mut eneg = false;
            if let Some(&c @ (b'+' | b'-')) = self.s.get(self.i) {
                eneg = c == b'-';
                self.i += 1;
            }
            let e = self.i;
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
            if e == self.i {
                return Err(self.err("bad number: no digit in the exponent"));
            }
            // Saturate: anything this large overflows or underflows anyway.
            exp = self.text[e..self.i]
                .parse::<i64>()
                .unwrap_or(i64::MAX / 4)
                .min(100_000);
            if eneg {
                exp = -exp;
            }
        }
        let literal = &self.text[start..self.i];
        let lossy = |why| JsonError::LossyNumber {
            literal: literal.to_owned(),
            path: None,
            why,
        };
        // Integer literals that fit keep their integer form in the value
        // (as_i64/as_u64 work on them), once they pass the check below.
        let integer = if frac_digits.is_empty() && !has_exp {
            int_digits.parse::<u64>().ok()
        } else {
            None
        };
        let f: f64 = literal.parse().map_err(|_| self.err("bad number"))?;
        if f.is_infinite() {
            return Err(lossy("out of the double range"));
        }
        // The literal must equal, as an exact decimal, the shortest decimal
        // of the double it parses to.
        let (digits, point) = normalise(int_digits, frac_digits, exp);
        if f == 0.0 {
            if !digits.is_empty() {
                return Err(lossy("too small for a double"));
            }
            // An integer zero stays an integer (a field typed as one takes
            // it); only "-0" and "0.0"-like literals are the double zero.
            return Ok(Value::Number(match integer {
                Some(0) if !neg => Number::from(0u64),
                _ => Number::from_f64(0.0).expect("zero is finite"),
            }));
        }
        let (sd, sn) = shortest_digits(f.abs());
        if digits != sd || point != sn as i64 {
            return Err(lossy(
                if integer.is_some() || (frac_digits.is_empty() && !has_exp) {
                    "an integer beyond 2^53 that a double cannot carry exactly"
                } else {
                    "more digits than a double keeps"
                },
            ));
        }
        Ok(Value::Number(match integer {
            Some(mag) if !neg => Number::from(mag),
            Some(mag) if mag <= i64::MAX as u64 => Number::from(-(mag as i64)),
            _ => Number::from_f64(f).expect("finite"),
        }))
    }
}

/// Whether an integer of magnitude `mag` survives a double: below 2^53
/// always; beyond, when the double is exact and written back with the same
/// digits.
fn integer_survives(mag: u64) -> bool {
    if mag <= MAX_SAFE_INTEGER {
        return true;
    }
    let mut written = String::new();
    crate::canonical::write_number(&mut written, mag as f64);
    written == mag.to_string()
}

/// The significant digits of a decimal literal (no leading or trailing
/// zeros) and `n` such that its value is `0.digits x 10^n`.
fn normalise(int_digits: &str, frac_digits: &str, exp: i64) -> (String, i64) {
    let all: String = format!("{int_digits}{frac_digits}");
    let mut point = int_digits.len() as i64 + exp;
    let trimmed = all.trim_start_matches('0');
    point -= (all.len() - trimmed.len()) as i64;
    (trimmed.trim_end_matches('0').to_owned(), point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn lossy(text: &str) {
        match parse(text) {
            Err(e @ JsonError::LossyNumber { .. }) => {
                assert!(e.to_string().contains("send it as a string"), "{e}")
            }
            other => panic!("{text}: expected a lossy-number error, got {other:?}"),
        }
    }

    #[test]
    fn numbers_that_survive_are_accepted() {
        for ok in [
            "0",
            "-0",
            "9007199254740991",
            "-9007199254740991",
            "9007199254740992",
            "18014398509481984",
            "100000000000000000000",
            "0.1",
            "1.5e300",
            "1e-7",
            "100.0",
            "1.0e2",
            "0.000",
            "5e-324",
            "2.5E+3",
        ] {
            parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn an_integer_zero_is_an_integer_as_every_other_integer_is() {
        // A request field typed as an integer takes 0 (it used to read a
        // float 0.0 and refuse it), and a payload's 0 reads back as 0.
        assert_eq!(parse("0").unwrap().as_u64(), Some(0));
        assert_eq!(parse("{\"n\":0}").unwrap().to_string(), "{\"n\":0}");
        assert!(parse("0.0").unwrap().is_f64());
    }

    #[test]
    fn numbers_that_do_not_survive_are_refused() {
        for bad in [
            "9007199254740993",
            "18014398509481985",
            "12345678901234567890",
            "123456789012345678901234567890",
            "-9007199254740993",
            "1.00000000000000000001",
            "0.12345678901234567891",
            "1e400",
            "1e-400",
            "9007199254740993.0",
        ] {
            lossy(bad);
        }
    }

    #[test]
    fn values_built_in_code_are_checked() {
        assert!(check_value(&serde_json::json!({"a": [1, 2.5, 9007199254740991u64]})).is_ok());
        let e = check_value(&serde_json::json!({"a": [1, 9007199254740993u64]})).unwrap_err();
        // Exact beyond 2^53 and written back with the same digits: fine.
        assert!(
            check_value(
                &serde_json::json!({"a": 18014398509481984u64, "b": -1000000000000000000i64})
            )
            .is_ok()
        );
        assert!(e.to_string().contains("$.a[1]"), "{e}");
    }

    proptest::proptest! {
        /// Any string, written by serde_json, reads back as itself; a
        /// control character left raw in it is refused where it stands.
        #[test]
        fn strings_read_back_and_raw_controls_are_refused(
            s in "[a-z\"\\\\\u{0}-\u{1f}é\u{1f600} ]{0,40}",
            cut in 0usize..40,
        ) {
            let text = serde_json::to_string(&s).unwrap();
            proptest::prop_assert_eq!(parse(&text).unwrap(), Value::String(s.clone()));
            let raw: String = s.chars().filter(|c| !matches!(c, '"' | '\\')).collect();
            let first_control = raw.bytes().position(|b| b < 0x20);
            let quoted = format!("\"{raw}\"");
            match (parse(&quoted), first_control) {
                (Ok(v), None) => proptest::prop_assert_eq!(v, Value::String(raw.clone())),
                (Err(e), Some(at)) => {
                    let want = format!("at byte {}:", at + 1);
                    proptest::prop_assert!(e.to_string().contains("control character"), "{}", e);
                    proptest::prop_assert!(e.to_string().contains(&want), "{} lacks {}", e, want);
                }
                (got, want) => proptest::prop_assert!(false, "{:?} for control at {:?}", got, want),
            }
            let end = cut.min(text.len() - 1);
            if text.is_char_boundary(end) {
                proptest::prop_assert!(parse(&text[..end]).is_err());
            }
        }
    }

    #[test]
    fn ijson_rules() {
        assert!(matches!(
            parse(r#"{"a":1,"a":2}"#),
            Err(JsonError::DuplicateName { .. })
        ));
        assert!(parse(r#""\ud800""#).is_err());
        assert!(parse(r#""\udc00\ud800""#).is_err());
        assert_eq!(
            parse(r#""\ud83d\ude00""#).unwrap(),
            Value::String("\u{1f600}".into())
        );
        assert!(parse("[1,]").is_err());
        assert!(parse("\"a\u{1}\"").is_err());
        assert!(parse(&"[".repeat(200)).is_err());
    }

    #[test]
    fn a_control_character_far_into_a_long_string_is_refused_where_it_stands() {
        let long = "y".repeat(150);
        let text = format!("\"{long}\u{1f}{long}\"");
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("control character") && e.contains("at byte 151:"),
            "{e}"
        );
        let clean = format!("\"{long}\\n{long}\"");
        assert_eq!(
            parse(&clean).unwrap(),
            Value::String(format!("{long}\n{long}"))
        );
    }
}

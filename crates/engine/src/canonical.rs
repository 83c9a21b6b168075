//! RFC 8785 (JSON Canonicalization Scheme) serialisation of JSON values.
//!
//! The hash chain hashes this form, so it must be byte-for-byte what the
//! reference implementation produces: object members sorted by the UTF-16
//! code units of their names, no whitespace, strings escaped exactly as
//! ECMAScript's `JSON.stringify` does, and numbers written as ECMAScript's
//! `Number.prototype.toString` writes an IEEE double. It is checked against
//! the Python package `rfc8785` on `tests/corpus/canonical.jsonl`.

use serde_json::{Map, Value};

/// The canonical form of `value` as a string.
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_value(&mut out, value);
    out
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            // Numbers were checked on the way in (see `json`), so every one
            // is a finite double; u64/i64 beyond 2^53 never reach here.
            let f = n.as_f64().unwrap_or(f64::NAN);
            write_number(out, f);
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    // RFC 8785 §3.2.3: sort by the UTF-16 code units of the names, which
    // differs from byte (UTF-8) order for characters above U+FFFF versus
    // U+E000..U+FFFF.
    members.sort_by(|a, b| utf16_cmp(a.0, b.0));
    out.push('{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, k);
        out.push(':');
        write_value(out, v);
    }
    out.push('}');
}

/// Compares two strings by their UTF-16 code units.
pub fn utf16_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Appends `s` as a JSON string literal escaped as `JSON.stringify` does:
/// `"` and `\` escaped, the five short escapes for control characters,
/// `\u00xx` (lowercase hex) for the other controls, everything else as is.
pub use postbox_item::json::write_string;

/// Appends a finite double formatted as ECMAScript's `Number::toString`
/// (ECMA-262 §6.1.6.1.20): the shortest digits that round-trip, plain
/// notation for exponents in [-6, 21), scientific (`1e+21`, `1.5e-7`)
/// outside.
pub fn write_number(out: &mut String, f: f64) {
    if f == 0.0 {
        // Both zeros are "0".
        out.push('0');
        return;
    }
    if f.is_nan() || f.is_infinite() {
        // Unreachable for checked input; keep the output valid JSON anyway.
        out.push_str("null");
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    let (digits, n) = shortest_digits(f.abs());
    let k = digits.len() as i32;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        let e = n - 1;
        out.push(if e < 0 { '-' } else { '+' });
        out.push_str(&e.abs().to_string());
    }
}

/// The shortest round-trip decimal digits of a positive finite double and
/// the ECMAScript exponent `n` such that the value is `0.d1d2... x 10^n`.
///
/// Rust's `{:e}` prints the shortest digits that parse back to the same
/// double, choosing the closest such digits; where two are exactly equally
/// close it may pick the odd one, while ECMAScript (and the RFC 8785
/// reference) picks the even one, so ties are settled here.
pub(crate) fn shortest_digits(f: f64) -> (String, i32) {
    // An integer below 2^53 is its own digits: every integer there is a
    // double, so a decimal with fewer significant digits is another double.
    if (1.0..MAX_EXACT_INTEGER).contains(&f) && f.fract() == 0.0 {
        let mut digits = (f as u64).to_string();
        let n = digits.len() as i32;
        digits.truncate(digits.trim_end_matches('0').len());
        return (digits, n);
    }
    formatted_digits(f)
}

/// 2^53: below it every integer is exactly a double.
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// [`shortest_digits`] of any positive finite double, from `{:e}`.
fn formatted_digits(f: f64) -> (String, i32) {
    let s = format!("{f:e}");
    let (mantissa, exp) = s.split_once('e').expect("LowerExp output has an exponent");
    let exp: i32 = exp.parse().expect("LowerExp exponent is an integer");
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let n = exp + 1;
    match tie_to_even(f, &digits, n) {
        Some(even) => (even, n),
        None => (digits, n),
    }
}

/// When `digits` (odd last digit) and a neighbour differing by one in the
/// last place both round-trip and the double lies exactly halfway between
/// them, the even neighbour.
fn tie_to_even(f: f64, digits: &str, n: i32) -> Option<String> {
    let d: u64 = digits.parse().ok()?;
    if d.is_multiple_of(2) {
        return None;
    }
    let k = digits.len() as i32;
    for alt in [d - 1, d + 1] {
        let alt_s = alt.to_string();
        // A neighbour ending in 0 would be a shorter form, which the
        // shortest algorithm would have found; one of another length is
        // not a neighbour in the last place.
        if alt % 10 == 0 || alt_s.len() != digits.len() {
            continue;
        }
        if format!("{alt_s}e{}", n - k).parse::<f64>().ok() != Some(f) {
            continue;
        }
        // Exactly halfway: the double's exact expansion is lo followed by 5.
        let mid = format!("{}5", d.min(alt));
        let exact = format!("{f:.1100e}");
        let (m, e) = exact.split_once('e')?;
        let exact_digits: String = m.chars().filter(|c| c.is_ascii_digit()).collect();
        if e.parse::<i32>().ok()? + 1 == n && exact_digits.trim_end_matches('0') == mid {
            return Some(alt_s);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(f: f64) -> String {
        let mut s = String::new();
        write_number(&mut s, f);
        s
    }

    #[test]
    fn numbers_follow_ecmascript() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740992.0, "9007199254740992"),
            (0.1, "0.1"),
            (333333333.3333333, "333333333.3333333"),
            // Two shortest candidates equally close: the even one.
            (f64::from_bits(0x431a_dadc_edf6_7bd1), "1889747953622772.2"),
        ];
        for (f, want) in cases {
            assert_eq!(num(f), want, "{f:e}");
        }
    }

    #[test]
    fn keys_sort_by_utf16() {
        // U+1F600 is D83D DE00 in UTF-16, which sorts before U+FB01 (FB01)
        // although its UTF-8 bytes sort after.
        let v = json!({"\u{fb01}": 1, "\u{1f600}": 2, "a": 3});
        assert_eq!(
            to_canonical_string(&v),
            "{\"a\":3,\"\u{1f600}\":2,\"\u{fb01}\":1}"
        );
    }

    proptest::proptest! {
        #[test]
        fn an_integers_digits_are_the_shortest_that_round_trip(
            m in 1u64..(1 << 53),
            zeros in 0u32..16,
        ) {
            // Trailing zeros, as many as stay under 2^53.
            let m = (0..zeros).fold(m, |m, _| m.checked_mul(10).filter(|&v| v < 1 << 53).unwrap_or(m));
            let f = m as f64;
            proptest::prop_assert_eq!(shortest_digits(f), formatted_digits(f));
        }
    }

    #[test]
    fn integer_edges_have_the_formatted_digits() {
        let edges = [
            1.0,
            9.0,
            10.0,
            100.0,
            1e15,
            4_503_599_627_370_497.0,
            9_007_199_254_740_991.0,
        ];
        for f in edges {
            assert_eq!(shortest_digits(f), formatted_digits(f), "{f}");
        }
        assert_eq!(shortest_digits(4200.0), ("42".to_owned(), 4));
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let v = json!("\"\\\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}\u{2028}é");
        assert_eq!(
            to_canonical_string(&v),
            "\"\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\u{2028}é\""
        );
    }
}

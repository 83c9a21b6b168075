//! `N`: DynamoDB's exact decimal number.
//!
//! A number is kept as `mantissa * 10^exponent` with the mantissa stripped of
//! trailing zeros, so equal values have equal representations. DynamoDB allows
//! up to 38 significant digits and magnitudes from 1E-130 up to (but not
//! including) 1E+126; 38 digits always fit in a `u128`. Nothing here ever goes
//! through `f64`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::ItemError;

/// Most significant digits DynamoDB stores in a number.
pub const MAX_DIGITS: u32 = 38;
/// Smallest allowed decimal exponent of the most significant digit (1E-130).
const MIN_MAGNITUDE: i32 = -130;
/// Exclusive upper bound of the most significant digit's exponent (1E+126).
const MAX_MAGNITUDE: i32 = 125;

/// An exact decimal number with DynamoDB's precision and range.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Number {
    negative: bool,
    /// Zero, or a value without trailing decimal zeros.
    mantissa: u128,
    exponent: i32,
}

fn digit_count(m: u128) -> u32 {
    m.checked_ilog10().map_or(1, |d| d + 1)
}

impl Number {
    /// The number zero.
    pub const ZERO: Number = Number {
        negative: false,
        mantissa: 0,
        exponent: 0,
    };

    /// Builds `sign * mantissa * 10^exponent`, normalising and checking
    /// DynamoDB's digit and range limits.
    pub fn from_parts(negative: bool, mantissa: u128, exponent: i32) -> Result<Number, ItemError> {
        if mantissa == 0 {
            return Ok(Number::ZERO);
        }
        let (mut m, mut e) = (mantissa, exponent);
        // Most mantissas fit in 64 bits, where division by 10 is a multiply
        // rather than a call.
        if let Ok(mut small) = u64::try_from(m) {
            while small % 10 == 0 {
                small /= 10;
                e += 1;
            }
            m = small as u128;
        } else {
            while m % 10 == 0 {
                m /= 10;
                e += 1;
            }
        }
        let digits = digit_count(m);
        if digits > MAX_DIGITS {
            return Err(ItemError::validation(
                "Attempting to store more than 38 significant digits in a Number",
            ));
        }
        let magnitude = e + digits as i32 - 1;
        if magnitude > MAX_MAGNITUDE {
            return Err(ItemError::validation(
                "Number overflow. Attempting to store a number with magnitude larger than supported range",
            ));
        }
        if magnitude < MIN_MAGNITUDE {
            return Err(ItemError::validation(
                "Number underflow. Attempting to store a number with magnitude smaller than supported range",
            ));
        }
        Ok(Number {
            negative,
            mantissa: m,
            exponent: e,
        })
    }

    /// True for zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// True for values below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Significant digits (1 for zero).
    pub fn significant_digits(&self) -> u32 {
        digit_count(self.mantissa)
    }

    /// The mantissa without trailing zeros and its decimal exponent.
    pub fn parts(&self) -> (bool, u128, i32) {
        (self.negative, self.mantissa, self.exponent)
    }

    /// `self + other`, exact, or an error when the result leaves DynamoDB's range.
    pub fn add(&self, other: &Number) -> Result<Number, ItemError> {
        if self.is_zero() {
            return Ok(*other);
        }
        if other.is_zero() {
            return Ok(*self);
        }
        let e = self.exponent.min(other.exponent);
        let too_many = || {
            ItemError::validation("Attempting to store more than 38 significant digits in a Number")
        };
        let scale = |n: &Number| -> Result<u128, ItemError> {
            let shift = (n.exponent - e) as u32;
            10u128
                .checked_pow(shift)
                .and_then(|p| n.mantissa.checked_mul(p))
                .ok_or_else(too_many)
        };
        let (a, b) = (scale(self)?, scale(other)?);
        let (negative, mantissa) = match (self.negative, other.negative) {
            (x, y) if x == y => (x, a.checked_add(b).ok_or_else(too_many)?),
            (x, _) => match a.cmp(&b) {
                Ordering::Greater => (x, a - b),
                Ordering::Less => (!x, b - a),
                Ordering::Equal => return Ok(Number::ZERO),
            },
        };
        Number::from_parts(negative, mantissa, e)
    }

    /// `self - other`, exact.
    pub fn sub(&self, other: &Number) -> Result<Number, ItemError> {
        self.add(&other.negated())
    }

    /// `-self`.
    pub fn negated(&self) -> Number {
        if self.is_zero() {
            *self
        } else {
            Number {
                negative: !self.negative,
                ..*self
            }
        }
    }

    /// Approximate size in bytes as DynamoDB counts it: one byte per two
    /// significant digits plus one.
    pub fn size(&self) -> usize {
        (self.significant_digits() as usize).div_ceil(2) + 1
    }
}

impl FromStr for Number {
    type Err = ItemError;

    /// Parses DynamoDB's number syntax: optional sign, digits with an optional
    /// decimal point, optional exponent. Leading and trailing zeros do not count
    /// as significant digits.
    fn from_str(s: &str) -> Result<Number, ItemError> {
        let invalid = || {
            ItemError::validation(format!(
                "A value provided cannot be converted into a number: {s:?} is not a decimal number"
            ))
        };
        // DynamoDB refuses surrounding whitespace: " 1" is not a number.
        let t = s;
        let (negative, body) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let (coefficient, exp_part) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let (int_part, frac_part) = match coefficient.find('.') {
            Some(i) => (&coefficient[..i], &coefficient[i + 1..]),
            None => (coefficient, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        if !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(invalid());
        }
        let mut exponent: i64 = match exp_part {
            Some(x) => {
                let digits = x.strip_prefix(['+', '-']).unwrap_or(x);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                x.parse::<i64>()
                    .map_err(|_| invalid())?
                    .clamp(-100_000, 100_000)
            }
            None => 0,
        };
        exponent -= frac_part.len() as i64;
        let all = format!("{int_part}{frac_part}");
        let trimmed_lead = all.trim_start_matches('0');
        let significant = trimmed_lead.trim_end_matches('0');
        if significant.is_empty() {
            return Ok(Number::ZERO);
        }
        exponent += (trimmed_lead.len() - significant.len()) as i64;
        if significant.len() > MAX_DIGITS as usize {
            return Err(ItemError::validation(
                "Attempting to store more than 38 significant digits in a Number",
            ));
        }
        let mantissa: u128 = significant.parse().map_err(|_| invalid())?;
        let exponent = i32::try_from(exponent).map_err(|_| invalid())?;
        Number::from_parts(negative, mantissa, exponent)
    }
}

impl fmt::Display for Number {
    /// Plain notation without exponent, as DynamoDB returns numbers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        let digits = self.mantissa.to_string();
        let mut out = String::with_capacity(digits.len() + 8);
        if self.negative {
            out.push('-');
        }
        if self.exponent >= 0 {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', self.exponent as usize));
        } else {
            let frac = (-self.exponent) as usize;
            if digits.len() > frac {
                let (i, r) = digits.split_at(digits.len() - frac);
                out.push_str(i);
                out.push('.');
                out.push_str(r);
            } else {
                out.push_str("0.");
                out.extend(std::iter::repeat_n('0', frac - digits.len()));
                out.push_str(&digits);
            }
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "N({self})")
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Number) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => cmp_magnitude(self, other),
            (true, true) => cmp_magnitude(other, self),
        }
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Number) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Compares absolute values.
fn cmp_magnitude(a: &Number, b: &Number) -> Ordering {
    match (a.is_zero(), b.is_zero()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    let (da, db) = (
        digit_count(a.mantissa) as i32,
        digit_count(b.mantissa) as i32,
    );
    let (ma, mb) = (a.exponent + da, b.exponent + db);
    if ma != mb {
        return ma.cmp(&mb);
    }
    // Same magnitude: compare the digit strings left-aligned.
    let (sa, sb) = (a.mantissa.to_string(), b.mantissa.to_string());
    let width = sa.len().max(sb.len());
    format!("{sa:0<width$}").cmp(&format!("{sb:0<width$}"))
}

impl From<i64> for Number {
    fn from(v: i64) -> Number {
        Number::from_parts(v < 0, v.unsigned_abs() as u128, 0).expect("i64 fits in 38 digits")
    }
}

impl Number {
    /// The value as an `i64` when it is an integer in range.
    pub fn to_i64(&self) -> Option<i64> {
        if self.exponent < 0 && !self.is_zero() {
            return None;
        }
        let v = 10u128
            .checked_pow(self.exponent as u32)?
            .checked_mul(self.mantissa)?;
        let v = i64::try_from(v).ok()?;
        Some(if self.negative { -v } else { v })
    }

    /// Order-preserving byte encoding, used for sort keys: byte-wise comparison
    /// of two encodings agrees with numeric comparison.
    pub fn encode_ordered(&self, out: &mut Vec<u8>) {
        if self.is_zero() {
            out.push(0x80);
            return;
        }
        let digits = self.mantissa.to_string();
        // Exponent of the most significant digit, biased to be positive.
        let magnitude = (self.exponent + digits.len() as i32 + 1000) as u16;
        if self.negative {
            out.push(0x40);
            out.extend_from_slice(&(!magnitude).to_be_bytes());
            out.extend(digits.bytes().map(|d| 0x0a - (d - b'0')));
            // Terminator above every digit byte: a shorter negative number
            // with the same leading digits is the larger one.
            out.push(0xff);
        } else {
            out.push(0xc0);
            out.extend_from_slice(&magnitude.to_be_bytes());
            out.extend(digits.bytes().map(|d| d - b'0' + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Number {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_prints_plain_notation() {
        for (input, out) in [
            ("1.50", "1.5"),
            ("-0", "0"),
            ("0.000", "0"),
            ("1E+2", "100"),
            ("1e-3", "0.001"),
            ("+7", "7"),
            (".5", "0.5"),
            ("5.", "5"),
            ("-12.3400", "-12.34"),
            ("00120", "120"),
            (
                "12345678901234567890123456789012345678",
                "12345678901234567890123456789012345678",
            ),
        ] {
            assert_eq!(n(input).to_string(), out, "{input}");
        }
    }

    #[test]
    fn rejects_what_dynamodb_rejects() {
        for bad in [
            "", " 1", "1 ", "abc", "1.2.3", "--1", "1e", "e5", "0x10", " ", "1_000", "NaN",
            "Infinity",
        ] {
            assert!(bad.parse::<Number>().is_err(), "{bad:?} should be rejected");
        }
        assert!(
            "123456789012345678901234567890123456789"
                .parse::<Number>()
                .is_err()
        );
        assert!("1E126".parse::<Number>().is_err());
        assert!(
            "9.9999999999999999999999999999999999999E+125"
                .parse::<Number>()
                .is_ok()
        );
        assert!("1E-130".parse::<Number>().is_ok());
        assert!("1E-131".parse::<Number>().is_err());
        // Trailing zeros are not significant.
        assert!(
            "1234567890123456789012345678901234567800000"
                .parse::<Number>()
                .is_ok()
        );
    }

    #[test]
    fn arithmetic_is_exact() {
        assert_eq!(n("0.1").add(&n("0.2")).unwrap(), n("0.3"));
        assert_eq!(n("1").sub(&n("1.000")).unwrap(), Number::ZERO);
        assert_eq!(n("-5").add(&n("3")).unwrap(), n("-2"));
        assert_eq!(n("3").sub(&n("5")).unwrap().to_string(), "-2");
        assert!(n("1E100").add(&n("1")).is_err());
        assert_eq!(
            n("99999999999999999999999999999999999999")
                .sub(&n("1"))
                .unwrap()
                .to_string(),
            "99999999999999999999999999999999999998"
        );
    }

    #[test]
    fn ordering_is_numeric() {
        let sorted = [
            "-1E125", "-100", "-10.5", "-10", "-0.001", "0", "1E-130", "0.5", "1", "1.01", "10",
            "1E100",
        ];
        for w in sorted.windows(2) {
            assert!(n(w[0]) < n(w[1]), "{} < {}", w[0], w[1]);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            n(w[0]).encode_ordered(&mut a);
            n(w[1]).encode_ordered(&mut b);
            assert!(a < b, "encoding of {} < {}", w[0], w[1]);
        }
        assert_eq!(n("1.0").cmp(&n("1")), Ordering::Equal);
    }

    proptest::proptest! {
        #[test]
        fn encoding_agrees_with_ordering(a in -1_000_000_000i64..1_000_000_000, ea in -20i32..20, b in -1_000_000_000i64..1_000_000_000, eb in -20i32..20) {
            let x = Number::from_parts(a < 0, a.unsigned_abs() as u128, ea).unwrap();
            let y = Number::from_parts(b < 0, b.unsigned_abs() as u128, eb).unwrap();
            let (mut ex, mut ey) = (Vec::new(), Vec::new());
            x.encode_ordered(&mut ex);
            y.encode_ordered(&mut ey);
            proptest::prop_assert_eq!(x.cmp(&y), ex.cmp(&ey));
            proptest::prop_assert_eq!(x.to_string().parse::<Number>().unwrap(), x);
        }
    }
}

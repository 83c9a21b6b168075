//! Compact binary encoding of items for storage.
//!
//! Layout (all lengths and counts are LEB128 varints):
//! `item := count (name_len name value)*`;
//! `value := tag payload` with tags 0 S, 1 N, 2 B, 3 false, 4 true, 5 NULL,
//! 6 M (an item), 7 L (count values), 8 SS, 9 NS, 10 BS (count elements).
//! A number is `sign_byte mantissa_varint zigzag_exponent_varint`.

use std::collections::{BTreeMap, BTreeSet};

use crate::{AttributeValue, Item, ItemError, Number};

/// Encodes an item.
pub fn encode_item(item: &Item) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write_item(item, &mut out);
    out
}

/// Decodes an item written by [`encode_item`].
pub fn decode_item(bytes: &[u8]) -> Result<Item, ItemError> {
    let mut r = Reader { bytes, pos: 0 };
    let item = r.item()?;
    if r.pos != bytes.len() {
        return Err(corrupt("trailing bytes after an item"));
    }
    Ok(item)
}

fn corrupt(what: &str) -> ItemError {
    ItemError::Corrupt(what.to_owned())
}

fn write_varint(mut v: u128, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn write_bytes(b: &[u8], out: &mut Vec<u8>) {
    write_varint(b.len() as u128, out);
    out.extend_from_slice(b);
}

fn write_number(n: &Number, out: &mut Vec<u8>) {
    let (neg, mantissa, exponent) = n.parts();
    out.push(neg as u8);
    write_varint(mantissa, out);
    write_varint(((exponent << 1) ^ (exponent >> 31)) as u32 as u128, out);
}

fn write_item(item: &Item, out: &mut Vec<u8>) {
    write_varint(item.len() as u128, out);
    for (k, v) in item {
        write_bytes(k.as_bytes(), out);
        write_value(v, out);
    }
}

fn write_value(v: &AttributeValue, out: &mut Vec<u8>) {
    match v {
        AttributeValue::S(s) => {
            out.push(0);
            write_bytes(s.as_bytes(), out);
        }
        AttributeValue::N(n) => {
            out.push(1);
            write_number(n, out);
        }
        AttributeValue::B(b) => {
            out.push(2);
            write_bytes(b, out);
        }
        AttributeValue::Bool(b) => out.push(3 + *b as u8),
        AttributeValue::Null => out.push(5),
        AttributeValue::M(m) => {
            out.push(6);
            write_item(m, out);
        }
        AttributeValue::L(l) => {
            out.push(7);
            write_varint(l.len() as u128, out);
            l.iter().for_each(|v| write_value(v, out));
        }
        AttributeValue::Ss(s) => {
            out.push(8);
            write_varint(s.len() as u128, out);
            s.iter().for_each(|v| write_bytes(v.as_bytes(), out));
        }
        AttributeValue::Ns(s) => {
            out.push(9);
            write_varint(s.len() as u128, out);
            s.iter().for_each(|v| write_number(v, out));
        }
        AttributeValue::Bs(s) => {
            out.push(10);
            write_varint(s.len() as u128, out);
            s.iter().for_each(|v| write_bytes(v, out));
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, ItemError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated item"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u128, ItemError> {
        let mut v = 0u128;
        for shift in (0..128).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u128) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt("varint too long"))
    }

    fn len(&mut self) -> Result<usize, ItemError> {
        usize::try_from(self.varint()?).map_err(|_| corrupt("length out of range"))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, ItemError> {
        let n = self.len()?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| corrupt("truncated bytes"))?;
        let out = self.bytes[self.pos..end].to_vec();
        self.pos = end;
        Ok(out)
    }

    fn string(&mut self) -> Result<String, ItemError> {
        String::from_utf8(self.bytes()?).map_err(|_| corrupt("invalid UTF-8"))
    }

    fn number(&mut self) -> Result<Number, ItemError> {
        let neg = self.byte()? != 0;
        let mantissa = self.varint()?;
        let z = self.varint()? as u32;
        let exponent = ((z >> 1) as i32) ^ -((z & 1) as i32);
        Number::from_parts(neg, mantissa, exponent)
    }

    fn item(&mut self) -> Result<Item, ItemError> {
        let n = self.len()?;
        let mut item = BTreeMap::new();
        for _ in 0..n {
            let k = self.string()?;
            item.insert(k, self.value()?);
        }
        Ok(item)
    }

    fn value(&mut self) -> Result<AttributeValue, ItemError> {
        Ok(match self.byte()? {
            0 => AttributeValue::S(self.string()?),
            1 => AttributeValue::N(self.number()?),
            2 => AttributeValue::B(self.bytes()?),
            3 => AttributeValue::Bool(false),
            4 => AttributeValue::Bool(true),
            5 => AttributeValue::Null,
            6 => AttributeValue::M(self.item()?),
            7 => {
                let n = self.len()?;
                AttributeValue::L((0..n).map(|_| self.value()).collect::<Result<_, _>>()?)
            }
            8 => {
                let n = self.len()?;
                AttributeValue::Ss(
                    (0..n)
                        .map(|_| self.string())
                        .collect::<Result<BTreeSet<_>, _>>()?,
                )
            }
            9 => {
                let n = self.len()?;
                AttributeValue::Ns(
                    (0..n)
                        .map(|_| self.number())
                        .collect::<Result<BTreeSet<_>, _>>()?,
                )
            }
            10 => {
                let n = self.len()?;
                AttributeValue::Bs(
                    (0..n)
                        .map(|_| self.bytes())
                        .collect::<Result<BTreeSet<_>, _>>()?,
                )
            }
            t => return Err(corrupt(&format!("unknown value tag {t}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item_from_json;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let item = item_from_json(&json!({
            "pk": {"S": "a"}, "n": {"N": "-1.25E-3"}, "big": {"N": "12345678901234567890123456789012345678"},
            "m": {"M": {"x": {"L": [{"NULL": true}, {"BOOL": false}, {"B": "AQI="}]}}},
            "ss": {"SS": ["x", "y"]}, "ns": {"NS": ["1", "-2"]}, "bs": {"BS": ["AQ=="]}
        }))
        .unwrap();
        assert_eq!(decode_item(&encode_item(&item)).unwrap(), item);
        let bytes = encode_item(&item);
        assert!(decode_item(&bytes[..bytes.len() - 1]).is_err());
    }
}

//! Compact binary encoding of items for storage.
//!
//! Layout (all lengths and counts are LEB128 varints):
//! `item := count (name_len name value)*`;
//! `value := tag payload` with tags 0 S, 1 N, 2 B, 3 false, 4 true, 5 NULL,
//! 6 M (an item), 7 L (count values), 8 SS, 9 NS, 10 BS (count elements).
//! A number is `sign_byte mantissa_varint zigzag_exponent_varint`.

use std::collections::{BTreeMap, BTreeSet};

use crate::{AttributeType, AttributeValue, Item, ItemError, Number};

/// Encodes an item.
pub fn encode_item(item: &Item) -> Vec<u8> {
    // Room for the names and values and a few bytes of lengths and tags
    // each: one allocation for nearly every item instead of a few regrowths.
    let mut out = Vec::with_capacity(crate::item_size(item) + 4 * item.len() + 8);
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

/// A borrowed attribute value of an encoded item: scalars as views into
/// the bytes, everything else (M, L and the sets) still encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// String.
    S(&'a str),
    /// Number.
    N(Number),
    /// Binary.
    B(&'a [u8]),
    /// Boolean.
    Bool(bool),
    /// Null.
    Null,
    /// An M, L, SS, NS or BS value: its type and its encoded bytes (tag
    /// included), already checked to decode.
    Encoded(AttributeType, &'a [u8]),
}

impl ValueRef<'_> {
    /// The value's type descriptor.
    pub fn attribute_type(&self) -> AttributeType {
        match self {
            ValueRef::S(_) => AttributeType::S,
            ValueRef::N(_) => AttributeType::N,
            ValueRef::B(_) => AttributeType::B,
            ValueRef::Bool(_) => AttributeType::Bool,
            ValueRef::Null => AttributeType::Null,
            ValueRef::Encoded(t, _) => *t,
        }
    }

    /// The owned value, as [`decode_item`] would have built it.
    pub fn to_value(&self) -> Result<AttributeValue, ItemError> {
        Ok(match *self {
            ValueRef::S(s) => AttributeValue::S(s.to_owned()),
            ValueRef::N(n) => AttributeValue::N(n),
            ValueRef::B(b) => AttributeValue::B(b.to_vec()),
            ValueRef::Bool(b) => AttributeValue::Bool(b),
            ValueRef::Null => AttributeValue::Null,
            ValueRef::Encoded(_, bytes) => Reader { bytes, pos: 0 }.value()?,
        })
    }
}

/// The attributes of an encoded item in stored order, borrowed from the
/// bytes: no map and no copies. Every value is checked exactly as
/// [`decode_item`] checks it (the same errors, at the same place), and
/// trailing bytes are an error at the end, so a walk that meets no error
/// has seen an item `decode_item` accepts. Stored items have their names in
/// ascending order; a name that repeats means the last one wins, as in
/// [`decode_item`].
pub fn encoded_attributes(bytes: &[u8]) -> EncodedAttributes<'_> {
    EncodedAttributes {
        r: Reader { bytes, pos: 0 },
        left: None,
        done: false,
    }
}

/// The iterator of [`encoded_attributes`].
pub struct EncodedAttributes<'a> {
    r: Reader<'a>,
    /// Attributes still to read (None before the count is read).
    left: Option<usize>,
    done: bool,
}

impl<'a> EncodedAttributes<'a> {
    fn step(&mut self) -> Result<Option<(&'a str, ValueRef<'a>)>, ItemError> {
        let left = match self.left {
            Some(n) => n,
            None => self.r.len()?,
        };
        if left == 0 {
            self.left = Some(0);
            if self.r.pos != self.r.bytes.len() {
                return Err(corrupt("trailing bytes after an item"));
            }
            return Ok(None);
        }
        self.left = Some(left);
        let name = self.r.str()?;
        let value = self.r.value_ref()?;
        self.left = Some(left - 1);
        Ok(Some((name, value)))
    }
}

impl<'a> Iterator for EncodedAttributes<'a> {
    type Item = Result<(&'a str, ValueRef<'a>), ItemError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(a)) => Some(Ok(a)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A value of an encoded item as the visits hand it out: a string as its
/// bytes (checked to be UTF-8 by [`visit_encoded_item`], not by
/// [`visit_encoded_item_unchecked`]), anything else as [`ValueRef`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawValueRef<'a> {
    /// An S value's bytes.
    S(&'a [u8]),
    /// Any other value, as [`encoded_attributes`] gives it.
    Value(ValueRef<'a>),
}

/// [`item_size`](crate::item_size) of the item the bytes encode, or the
/// error [`decode_item`] gives for them.
pub fn encoded_item_size(bytes: &[u8]) -> Result<usize, ItemError> {
    visit_encoded_item(bytes, |_, _| {})
}

/// Walks an encoded item, checking it exactly as [`decode_item`] does (the
/// same errors, at the same place), handing every attribute to `visit` in
/// stored order, and returns the item's [`item_size`](crate::item_size).
/// Names and string values come as bytes already checked to be UTF-8
/// (`std::str::from_utf8` on them cannot fail), so a caller converts only
/// the few it uses. A repeated name is handed out each time; decoding keeps
/// the last. The size is computed without building the item when its
/// names are in stored order (ascending, none repeated) and it has no M, L
/// or set values; otherwise the item is decoded to count it as stored.
pub fn visit_encoded_item<'a>(
    bytes: &'a [u8],
    mut visit: impl FnMut(&'a [u8], RawValueRef<'a>),
) -> Result<usize, ItemError> {
    // A plain loop over the reader: this is the walk every row of a long
    // read pays for.
    let mut r = Reader { bytes, pos: 0 };
    let mut size = 0;
    let mut plain = true;
    let mut previous: &[u8] = b"";
    for i in 0..r.len()? {
        let name = r.text()?;
        let value = if r.bytes.get(r.pos) == Some(&0) {
            r.pos += 1;
            let s = r.text()?;
            size += s.len();
            RawValueRef::S(s)
        } else {
            let v = r.value_ref()?;
            match v {
                ValueRef::S(s) => size += s.len(),
                ValueRef::N(n) => size += n.size(),
                ValueRef::B(b) => size += b.len(),
                ValueRef::Bool(_) | ValueRef::Null => size += 1,
                ValueRef::Encoded(..) => plain = false,
            }
            RawValueRef::Value(v)
        };
        // Byte order of UTF-8 is the order of the names' strings.
        if i > 0 && previous >= name {
            plain = false;
        }
        previous = name;
        size += name.len();
        visit(name, value);
    }
    if r.pos != bytes.len() {
        return Err(corrupt("trailing bytes after an item"));
    }
    if plain {
        Ok(size)
    } else {
        Ok(crate::item_size(&decode_item(bytes)?))
    }
}

/// [`visit_encoded_item`] for bytes already checked (a store hands out
/// only items that decode): the structure is walked and numbers and nested
/// values checked, but names and strings are not checked to be UTF-8, so a
/// reader that uses a few of them checks only those. On bytes
/// [`decode_item`] accepts it hands out exactly what [`visit_encoded_item`]
/// does; on bytes it refuses it may hand out attributes, or an error, of
/// its own.
pub fn visit_encoded_item_unchecked<'a>(
    bytes: &'a [u8],
    mut visit: impl FnMut(&'a [u8], RawValueRef<'a>),
) -> Result<(), ItemError> {
    let mut r = Reader { bytes, pos: 0 };
    for _ in 0..r.len()? {
        let name = r.slice()?;
        let value = if r.bytes.get(r.pos) == Some(&0) {
            r.pos += 1;
            RawValueRef::S(r.slice()?)
        } else {
            RawValueRef::Value(r.value_ref()?)
        };
        visit(name, value);
    }
    if r.pos != bytes.len() {
        return Err(corrupt("trailing bytes after an item"));
    }
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn byte(&mut self) -> Result<u8, ItemError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated item"))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
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

    #[inline]
    fn len(&mut self) -> Result<usize, ItemError> {
        // Most lengths and counts are below 128: one byte.
        if let Some(&b) = self.bytes.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(b as usize);
        }
        usize::try_from(self.varint()?).map_err(|_| corrupt("length out of range"))
    }

    #[inline]
    fn slice(&mut self) -> Result<&'a [u8], ItemError> {
        let n = self.len()?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| corrupt("truncated bytes"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// A string's bytes, checked to be UTF-8 (short ASCII strings, the
    /// common case, are checked without the general validator).
    #[inline]
    fn text(&mut self) -> Result<&'a [u8], ItemError> {
        let s = self.slice()?;
        if s.is_ascii() || std::str::from_utf8(s).is_ok() {
            Ok(s)
        } else {
            Err(corrupt("invalid UTF-8"))
        }
    }

    #[inline]
    fn str(&mut self) -> Result<&'a str, ItemError> {
        std::str::from_utf8(self.slice()?).map_err(|_| corrupt("invalid UTF-8"))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, ItemError> {
        Ok(self.slice()?.to_vec())
    }

    fn string(&mut self) -> Result<String, ItemError> {
        Ok(self.str()?.to_owned())
    }

    #[inline]
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

    /// One value, borrowed; nested values are checked as [`Self::value`]
    /// checks them, without being built.
    #[inline]
    fn value_ref(&mut self) -> Result<ValueRef<'a>, ItemError> {
        let start = self.pos;
        Ok(match self.byte()? {
            0 => ValueRef::S(self.str()?),
            1 => ValueRef::N(self.number()?),
            2 => ValueRef::B(self.slice()?),
            3 => ValueRef::Bool(false),
            4 => ValueRef::Bool(true),
            5 => ValueRef::Null,
            t => {
                let ty = match t {
                    6 => AttributeType::M,
                    7 => AttributeType::L,
                    8 => AttributeType::Ss,
                    9 => AttributeType::Ns,
                    10 => AttributeType::Bs,
                    t => return Err(corrupt(&format!("unknown value tag {t}"))),
                };
                self.pos = start;
                self.skip_value()?;
                ValueRef::Encoded(ty, &self.bytes[start..self.pos])
            }
        })
    }

    /// Checks one value as [`Self::value`] does (same errors, same order)
    /// and moves past it, building nothing.
    fn skip_value(&mut self) -> Result<(), ItemError> {
        match self.byte()? {
            0 => {
                self.str()?;
            }
            1 => {
                self.number()?;
            }
            2 => {
                self.slice()?;
            }
            3..=5 => {}
            6 => {
                for _ in 0..self.len()? {
                    self.str()?;
                    self.skip_value()?;
                }
            }
            7 => {
                for _ in 0..self.len()? {
                    self.skip_value()?;
                }
            }
            8 => {
                for _ in 0..self.len()? {
                    self.str()?;
                }
            }
            9 => {
                for _ in 0..self.len()? {
                    self.number()?;
                }
            }
            10 => {
                for _ in 0..self.len()? {
                    self.slice()?;
                }
            }
            t => return Err(corrupt(&format!("unknown value tag {t}"))),
        }
        Ok(())
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

    /// The borrowed walk, checked against `decode_item` on one encoded item:
    /// the same error, or the same attributes (last repeated name wins) and
    /// the same size.
    fn walk_agrees(bytes: &[u8]) -> Result<(), String> {
        let walked: Result<Vec<_>, _> = encoded_attributes(bytes).collect();
        match (decode_item(bytes), walked) {
            (Err(a), Err(b)) => {
                if a != b {
                    return Err(format!("decode says {a}, the walk says {b}"));
                }
                if encoded_item_size(bytes) != Err(a.clone()) {
                    return Err(format!("size did not fail with {a}"));
                }
            }
            (Ok(item), Ok(attrs)) => {
                let mut rebuilt = Item::new();
                for (name, value) in attrs {
                    let v = value.to_value().map_err(|e| e.to_string())?;
                    if v.attribute_type() != value.attribute_type() {
                        return Err(format!("{name}: type {:?}", value.attribute_type()));
                    }
                    rebuilt.insert(name.to_owned(), v);
                }
                if rebuilt != item {
                    return Err(format!("walk {rebuilt:?} != decoded {item:?}"));
                }
                let size = encoded_item_size(bytes).map_err(|e| e.to_string())?;
                if size != crate::item_size(&item) {
                    return Err(format!("size {size} != {}", crate::item_size(&item)));
                }
            }
            (a, b) => return Err(format!("decode {a:?} but walk {b:?}")),
        }
        Ok(())
    }

    fn value_strategy() -> impl proptest::strategy::Strategy<Value = AttributeValue> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            (-1000i64..1000).prop_map(AttributeValue::n),
            "[a-zé\\u{1f600}]{0,4}".prop_map(AttributeValue::S),
            prop::collection::vec(any::<u8>(), 0..4).prop_map(AttributeValue::B),
            any::<bool>().prop_map(AttributeValue::Bool),
            Just(AttributeValue::Null),
        ];
        leaf.prop_recursive(2, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(AttributeValue::L),
                prop::collection::btree_map("[a-c]", inner, 0..3).prop_map(AttributeValue::M),
                prop::collection::btree_set("[a-c]{1,2}", 1..3).prop_map(AttributeValue::Ss),
                prop::collection::btree_set(-5i64..5, 1..3)
                    .prop_map(|s| AttributeValue::Ns(s.into_iter().map(Number::from).collect())),
                prop::collection::btree_set(prop::collection::vec(any::<u8>(), 1..3), 1..3)
                    .prop_map(AttributeValue::Bs),
            ]
        })
    }

    /// On bytes that decode, both visits hand out what the iterator does;
    /// on bytes that do not, the checked visit fails as decoding does.
    fn visits_agree(bytes: &[u8]) -> Result<(), String> {
        let mut checked = Vec::new();
        let visited = visit_encoded_item(bytes, |n, v| checked.push((n, v)));
        let decoded = decode_item(bytes);
        match (&decoded, &visited) {
            (Err(a), Err(b)) if a == b => return Ok(()),
            (Ok(item), Ok(size)) if *size == crate::item_size(item) => {}
            _ => return Err(format!("decode {decoded:?}, visit {visited:?}")),
        }
        let walked: Vec<_> = encoded_attributes(bytes).map(Result::unwrap).collect();
        let as_refs: Vec<(&str, ValueRef<'_>)> = checked
            .iter()
            .map(|(n, v)| {
                let v = match *v {
                    RawValueRef::S(s) => ValueRef::S(std::str::from_utf8(s).unwrap()),
                    RawValueRef::Value(ValueRef::S(_)) => panic!("an S as a ValueRef"),
                    RawValueRef::Value(v) => v,
                };
                (std::str::from_utf8(n).unwrap(), v)
            })
            .collect();
        if as_refs != walked {
            return Err(format!("visited {as_refs:?} != walked {walked:?}"));
        }
        let mut unchecked = Vec::new();
        visit_encoded_item_unchecked(bytes, |n, v| unchecked.push((n, v)))
            .map_err(|e| e.to_string())?;
        if unchecked != checked {
            return Err(format!("unchecked {unchecked:?} != checked {checked:?}"));
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn borrowed_walk_agrees_with_decode_on_good_and_damaged_bytes(
            item in proptest::collection::btree_map("[a-e]{1,2}", value_strategy(), 0..6),
            damage in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 0..3),
            cut in proptest::prelude::any::<Option<proptest::sample::Index>>(),
        ) {
            let mut bytes = encode_item(&item);
            proptest::prop_assert_eq!(walk_agrees(&bytes), Ok(()));
            proptest::prop_assert_eq!(visits_agree(&bytes), Ok(()));
            for (at, b) in damage {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            proptest::prop_assert_eq!(walk_agrees(&bytes), Ok(()));
            proptest::prop_assert_eq!(visits_agree(&bytes), Ok(()));
        }
    }

    proptest::proptest! {
        #[test]
        fn an_item_serialised_directly_is_the_text_of_its_json_tree(
            item in proptest::collection::btree_map("[a-e\"\\\\é]{1,2}", value_strategy(), 0..6),
        ) {
            let direct = serde_json::to_string(&item).unwrap();
            let tree = crate::item_to_json(&item).to_string();
            proptest::prop_assert_eq!(direct, tree);
        }
    }

    /// JSON that is an attribute value, or nearly one (wrong types, extra
    /// or missing tags, bad numbers), nested.
    fn near_attribute_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::{Value as J, json};
        let leaf = prop_oneof![
            value_strategy().prop_map(|v| v.to_json()),
            Just(json!({"S": 5})),
            Just(json!({"N": "x1"})),
            Just(json!({"NULL": false})),
            Just(json!({})),
            Just(json!({"S": "a", "N": "1"})),
            Just(json!({"Q": "a"})),
            Just(json!("bare")),
            Just(json!({"M": [1]})),
            Just(json!({"L": {"a": 1}})),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(|l| json!({"L": l})),
                prop::collection::btree_map("[a-c]", inner, 0..3)
                    .prop_map(|m| json!({"M": J::Object(m.into_iter().collect())})),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn an_attribute_from_owned_json_is_the_one_from_borrowed_json(v in near_attribute_json()) {
            let borrowed = AttributeValue::from_json(&v);
            let owned = AttributeValue::from_json_owned(v);
            proptest::prop_assert_eq!(
                owned.map_err(|e| e.to_string()),
                borrowed.map_err(|e| e.to_string())
            );
        }
    }

    #[test]
    fn repeated_names_and_trailing_bytes() {
        // {"a": S "x", "a": S "yy"}: decode keeps the last; so must the walk
        // and the size.
        let bytes = [2, 1, b'a', 0, 1, b'x', 1, b'a', 0, 2, b'y', b'y'];
        assert_eq!(walk_agrees(&bytes), Ok(()));
        assert_eq!(encoded_item_size(&bytes), Ok(3));
        let mut trailing = bytes.to_vec();
        trailing.push(0);
        assert_eq!(walk_agrees(&trailing), Ok(()));
        assert_eq!(
            encoded_attributes(&trailing).last(),
            Some(Err(corrupt("trailing bytes after an item")))
        );
    }
}

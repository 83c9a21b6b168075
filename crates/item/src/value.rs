//! Attribute values and their DynamoDB JSON form (`{"S": "..."}`).

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};

use crate::{ItemError, Number};

/// An item: attribute names to values.
pub type Item = BTreeMap<String, AttributeValue>;

/// One DynamoDB attribute value. Sets are kept sorted and free of duplicates,
/// as DynamoDB treats them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeValue {
    /// String.
    S(String),
    /// Exact decimal number.
    N(Number),
    /// Binary.
    B(Vec<u8>),
    /// Boolean.
    Bool(bool),
    /// Null.
    Null,
    /// Map of attribute values.
    M(BTreeMap<String, AttributeValue>),
    /// List of attribute values.
    L(Vec<AttributeValue>),
    /// String set (never empty).
    Ss(BTreeSet<String>),
    /// Number set (never empty).
    Ns(BTreeSet<Number>),
    /// Binary set (never empty).
    Bs(BTreeSet<Vec<u8>>),
}

/// The type descriptor of a value, as written in DynamoDB JSON and used by
/// `attribute_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttributeType {
    S,
    N,
    B,
    Bool,
    Null,
    M,
    L,
    Ss,
    Ns,
    Bs,
}

impl AttributeType {
    /// The descriptor as DynamoDB spells it (`S`, `BOOL`, `SS`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AttributeType::S => "S",
            AttributeType::N => "N",
            AttributeType::B => "B",
            AttributeType::Bool => "BOOL",
            AttributeType::Null => "NULL",
            AttributeType::M => "M",
            AttributeType::L => "L",
            AttributeType::Ss => "SS",
            AttributeType::Ns => "NS",
            AttributeType::Bs => "BS",
        }
    }

    /// Parses a descriptor; `None` for anything DynamoDB does not know.
    pub fn parse(s: &str) -> Option<AttributeType> {
        Some(match s {
            "S" => AttributeType::S,
            "N" => AttributeType::N,
            "B" => AttributeType::B,
            "BOOL" => AttributeType::Bool,
            "NULL" => AttributeType::Null,
            "M" => AttributeType::M,
            "L" => AttributeType::L,
            "SS" => AttributeType::Ss,
            "NS" => AttributeType::Ns,
            "BS" => AttributeType::Bs,
            _ => return None,
        })
    }
}

impl AttributeValue {
    /// The value's type descriptor.
    pub fn attribute_type(&self) -> AttributeType {
        match self {
            AttributeValue::S(_) => AttributeType::S,
            AttributeValue::N(_) => AttributeType::N,
            AttributeValue::B(_) => AttributeType::B,
            AttributeValue::Bool(_) => AttributeType::Bool,
            AttributeValue::Null => AttributeType::Null,
            AttributeValue::M(_) => AttributeType::M,
            AttributeValue::L(_) => AttributeType::L,
            AttributeValue::Ss(_) => AttributeType::Ss,
            AttributeValue::Ns(_) => AttributeType::Ns,
            AttributeValue::Bs(_) => AttributeType::Bs,
        }
    }

    /// Shorthand for a string value.
    pub fn s(v: impl Into<String>) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    /// Shorthand for a number value from an integer.
    pub fn n(v: i64) -> AttributeValue {
        AttributeValue::N(Number::from(v))
    }

    /// The string inside an `S`.
    pub fn as_s(&self) -> Option<&str> {
        match self {
            AttributeValue::S(s) => Some(s),
            _ => None,
        }
    }

    /// The number inside an `N`.
    pub fn as_n(&self) -> Option<&Number> {
        match self {
            AttributeValue::N(n) => Some(n),
            _ => None,
        }
    }

    /// Size in bytes as DynamoDB counts it toward the 400 KB item limit
    /// (without the attribute name).
    pub fn size(&self) -> usize {
        match self {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => n.size(),
            AttributeValue::B(b) => b.len(),
            AttributeValue::Bool(_) | AttributeValue::Null => 1,
            AttributeValue::M(m) => {
                3 + m.iter().map(|(k, v)| k.len() + v.size() + 1).sum::<usize>()
            }
            AttributeValue::L(l) => 3 + l.iter().map(|v| v.size() + 1).sum::<usize>(),
            AttributeValue::Ss(s) => s.iter().map(String::len).sum(),
            AttributeValue::Ns(s) => s.iter().map(Number::size).sum(),
            AttributeValue::Bs(s) => s.iter().map(Vec::len).sum(),
        }
    }

    /// [`AttributeValue::from_json`] of a value the caller gives away: its
    /// strings (an `S`, and those inside `M` and `L`) are moved, not
    /// copied. Same answers, same errors.
    pub fn from_json_owned(v: Value) -> Result<AttributeValue, ItemError> {
        let Value::Object(mut obj) = v else {
            return AttributeValue::from_json(&v);
        };
        if obj.len() == 1 {
            match obj.iter().next() {
                Some((tag, Value::String(_))) if tag == "S" => {
                    if let Some(Value::String(s)) = obj.remove("S") {
                        return Ok(AttributeValue::S(s));
                    }
                }
                Some((tag, Value::Object(_))) if tag == "M" => {
                    if let Some(Value::Object(m)) = obj.remove("M") {
                        let mut out = BTreeMap::new();
                        for (k, v) in m {
                            out.insert(k, AttributeValue::from_json_owned(v)?);
                        }
                        return Ok(AttributeValue::M(out));
                    }
                }
                Some((tag, Value::Array(_))) if tag == "L" => {
                    if let Some(Value::Array(l)) = obj.remove("L") {
                        return Ok(AttributeValue::L(
                            l.into_iter()
                                .map(AttributeValue::from_json_owned)
                                .collect::<Result<_, _>>()?,
                        ));
                    }
                }
                _ => {}
            }
        }
        AttributeValue::from_json(&Value::Object(obj))
    }

    /// Parses one value from DynamoDB JSON, with DynamoDB's validation messages.
    pub fn from_json(v: &Value) -> Result<AttributeValue, ItemError> {
        let obj = v.as_object().ok_or_else(|| {
            ItemError::validation(
                "Supplied AttributeValue is not an object of the form {\"<type>\": <value>}",
            )
        })?;
        let mut entries = obj.iter();
        let (tag, inner) = match (entries.next(), entries.next()) {
            (None, _) => {
                return Err(ItemError::validation(
                    "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes",
                ));
            }
            (Some(e), None) => e,
            (Some(_), Some(_)) => {
                return Err(ItemError::validation(
                    "Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes",
                ));
            }
        };
        let wrong = |what: &str| {
            ItemError::validation(format!(
                "Invalid attribute value of type {tag}: expected {what}"
            ))
        };
        let string = |v: &Value| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| wrong("a string"))
        };
        let number = |v: &Value| -> Result<Number, ItemError> {
            v.as_str()
                .ok_or_else(|| wrong("a number written as a string"))?
                .parse()
        };
        let binary = |v: &Value| -> Result<Vec<u8>, ItemError> {
            let s = v.as_str().ok_or_else(|| wrong("base64 text"))?;
            BASE64.decode(s).map_err(|e| {
                ItemError::validation(format!("Invalid base64 in a binary value: {e}"))
            })
        };

        Ok(match tag.as_str() {
            "S" => AttributeValue::S(string(inner)?),
            "N" => AttributeValue::N(number(inner)?),
            "B" => AttributeValue::B(binary(inner)?),
            "BOOL" => AttributeValue::Bool(inner.as_bool().ok_or_else(|| wrong("true or false"))?),
            "NULL" => match inner.as_bool() {
                Some(true) => AttributeValue::Null,
                _ => {
                    return Err(ItemError::validation(
                        "One or more parameter values were invalid: Null attribute value types must have the value of true",
                    ));
                }
            },
            "M" => {
                let m = inner.as_object().ok_or_else(|| wrong("an object"))?;
                let mut out = BTreeMap::new();
                for (k, v) in m {
                    out.insert(k.clone(), AttributeValue::from_json(v)?);
                }
                AttributeValue::M(out)
            }
            "L" => AttributeValue::L(
                array(inner, tag)?
                    .iter()
                    .map(AttributeValue::from_json)
                    .collect::<Result<_, _>>()?,
            ),
            "SS" => AttributeValue::Ss(collect_set(array(inner, tag)?, "string", string)?),
            "NS" => AttributeValue::Ns(collect_set(array(inner, tag)?, "number", number)?),
            "BS" => AttributeValue::Bs(collect_set(array(inner, tag)?, "binary", binary)?),
            other => {
                return Err(ItemError::validation(format!(
                    "Supplied AttributeValue has an unknown datatype {other:?}; expected one of S, N, B, BOOL, NULL, M, L, SS, NS, BS"
                )));
            }
        })
    }

    /// The value in DynamoDB JSON.
    pub fn to_json(&self) -> Value {
        let tagged = |tag: &str, v: Value| {
            let mut m = Map::with_capacity(1);
            m.insert(tag.to_owned(), v);
            Value::Object(m)
        };
        match self {
            AttributeValue::S(s) => tagged("S", Value::String(s.clone())),
            AttributeValue::N(n) => tagged("N", Value::String(n.to_string())),
            AttributeValue::B(b) => tagged("B", Value::String(BASE64.encode(b))),
            AttributeValue::Bool(b) => tagged("BOOL", Value::Bool(*b)),
            AttributeValue::Null => tagged("NULL", Value::Bool(true)),
            AttributeValue::M(m) => tagged("M", item_to_json(m)),
            AttributeValue::L(l) => tagged(
                "L",
                Value::Array(l.iter().map(AttributeValue::to_json).collect()),
            ),
            AttributeValue::Ss(s) => {
                tagged("SS", s.iter().map(|v| Value::String(v.clone())).collect())
            }
            AttributeValue::Ns(s) => tagged(
                "NS",
                s.iter().map(|v| Value::String(v.to_string())).collect(),
            ),
            AttributeValue::Bs(s) => tagged(
                "BS",
                s.iter().map(|v| Value::String(BASE64.encode(v))).collect(),
            ),
        }
    }
}

fn array<'a>(v: &'a Value, tag: &str) -> Result<&'a Vec<Value>, ItemError> {
    v.as_array().ok_or_else(|| {
        ItemError::validation(format!(
            "Invalid attribute value of type {tag}: expected an array"
        ))
    })
}

fn collect_set<T: Ord>(
    values: &[Value],
    kind: &str,
    parse: impl Fn(&Value) -> Result<T, ItemError>,
) -> Result<BTreeSet<T>, ItemError> {
    // DynamoDB's words, down to the double space and the listed values.
    if values.is_empty() {
        return Err(ItemError::validation(if kind == "binary" {
            "One or more parameter values were invalid: Binary sets should not be empty".to_owned()
        } else {
            format!("One or more parameter values were invalid: An {kind} set  may not be empty")
        }));
    }
    let mut set = BTreeSet::new();
    for v in values {
        if !set.insert(parse(v)?) {
            return Err(ItemError::validation(if kind == "binary" {
                "One or more parameter values were invalid: Input collection of type BS contains duplicates."
                    .to_owned()
            } else if kind == "number" {
                "One or more parameter values were invalid: Input collection contains duplicates"
                    .to_owned()
            } else {
                let listed: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
                format!(
                    "One or more parameter values were invalid: Input collection [{}] contains duplicates",
                    listed.join(", ")
                )
            }));
        }
    }
    Ok(set)
}

/// Parses an item (`{"name": {"S": ...}, ...}`) from DynamoDB JSON.
pub fn item_from_json(v: &Value) -> Result<Item, ItemError> {
    let obj = v.as_object().ok_or_else(|| {
        ItemError::validation("An item must be a JSON object of attribute values")
    })?;
    obj.iter()
        .map(|(k, v)| Ok((k.clone(), AttributeValue::from_json(v)?)))
        .collect()
}

/// [`item_from_json`] of JSON text, for an item of `S`, `N`, `BOOL` and
/// `NULL` values only (an event row, a claim row), read straight from the
/// text without the `serde_json::Value` tree in between: about a fifth of
/// a worker's CPU went to that tree when every message body was parsed
/// through it.
///
/// `None` for anything else, text that is no such item included; the caller
/// then parses it with [`item_from_json`], which gives the answer or the
/// error. When this gives an item, it is the item [`item_from_json`] gives.
pub fn scalar_item_from_json_text(text: &str) -> Option<Item> {
    use serde::de::{self, Deserialize, MapAccess, Visitor};

    /// One `{"S": ...}`, `{"N": ...}`, `{"BOOL": ...}` or `{"NULL": ...}`;
    /// serde refuses any other tag and an object with more than one.
    #[derive(serde::Deserialize)]
    enum Scalar {
        S(String),
        N(String),
        #[allow(clippy::upper_case_acronyms)]
        BOOL(bool),
        #[allow(clippy::upper_case_acronyms)]
        NULL(bool),
    }

    struct Scalars(Item);

    impl<'de> Deserialize<'de> for Scalars {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Scalars, D::Error> {
            struct Items;
            impl<'de> Visitor<'de> for Items {
                type Value = Scalars;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an item of S, N, BOOL and NULL values")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalars, A::Error> {
                    let mut item = Item::new();
                    while let Some((name, value)) = map.next_entry::<String, Scalar>()? {
                        // A name serde_json reserves for its own use (with
                        // its `raw_value` feature, which the server's build
                        // turns on): the long way decides.
                        if name.starts_with("$serde_json::private::") {
                            return Err(de::Error::custom("reserved name"));
                        }
                        let value = match value {
                            Scalar::S(s) => AttributeValue::S(s),
                            Scalar::N(n) => {
                                AttributeValue::N(n.parse().map_err(de::Error::custom)?)
                            }
                            Scalar::BOOL(b) => AttributeValue::Bool(b),
                            Scalar::NULL(true) => AttributeValue::Null,
                            // Refused in DynamoDB's words by the long way.
                            Scalar::NULL(false) => return Err(de::Error::custom("NULL false")),
                        };
                        // A repeated name: the last one wins, as in a
                        // `serde_json::Value` object.
                        item.insert(name, value);
                    }
                    Ok(Scalars(item))
                }
            }
            d.deserialize_map(Items)
        }
    }

    serde_json::from_str::<Scalars>(text).ok().map(|s| s.0)
}

/// An item in DynamoDB JSON.
pub fn item_to_json(item: &Item) -> Value {
    Value::Object(item.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
}

/// Size of an item as DynamoDB counts it: names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + v.size()).sum()
}

/// Written straight to the serializer, the same text as [`AttributeValue::to_json`]
/// gives without building its tree: an item's images are rendered this way
/// on the relay's path.
impl serde::Serialize for AttributeValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Base64<'a>(&'a [u8]);
        impl serde::Serialize for Base64<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&BASE64.encode(self.0))
            }
        }
        struct Texts<I>(I);
        impl<I, T> serde::Serialize for Texts<I>
        where
            I: Iterator<Item = T> + Clone,
            T: std::fmt::Display,
        {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let items = self.0.clone();
                let mut seq = s.serialize_seq(None)?;
                for v in items {
                    seq.serialize_element(&format_args!("{v}"))?;
                }
                seq.end()
            }
        }
        let mut map = s.serialize_map(Some(1))?;
        match self {
            AttributeValue::S(v) => map.serialize_entry("S", v)?,
            AttributeValue::N(n) => map.serialize_entry("N", &format_args!("{n}"))?,
            AttributeValue::B(b) => map.serialize_entry("B", &Base64(b))?,
            AttributeValue::Bool(b) => map.serialize_entry("BOOL", b)?,
            AttributeValue::Null => map.serialize_entry("NULL", &true)?,
            AttributeValue::M(m) => map.serialize_entry("M", m)?,
            AttributeValue::L(l) => map.serialize_entry("L", l)?,
            AttributeValue::Ss(set) => map.serialize_entry("SS", set)?,
            AttributeValue::Ns(set) => map.serialize_entry("NS", &Texts(set.iter()))?,
            AttributeValue::Bs(set) => {
                let encoded: Vec<Base64<'_>> = set.iter().map(|b| Base64(b)).collect();
                map.serialize_entry("BS", &encoded)?
            }
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for AttributeValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AttributeValue, D::Error> {
        let v = Value::deserialize(d)?;
        AttributeValue::from_json_owned(v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scalar_item_from_text_is_what_the_value_tree_gives() {
        let row = r#"{"pk":{"S":"EVT#t1"},"sk":{"S":"00000000000000000042"},"seq":{"N":"42"},
            "payload":{"S":"{\"a\":\"\u00e9\\n\"}"},"n":{"N":"-1.50E+3"},"e":{"S":""}}"#;
        let texts = [
            row,
            "{}",
            r#"{"a":{"S":"1"},"a":{"S":"2"}}"#,
            r#"{"a":{"N":"007"}}"#,
            // Each of these the fast path must leave to the slow one.
            r#"{"a":{"S":"x","N":"1"}}"#,
            r#"{"a":{"N":"x"}}"#,
            r#"{"a":{"N":1}}"#,
            r#"{"a":{"S":1}}"#,
            r#"{"a":{}}"#,
            r#"{"a":{"BOOL":true},"b":{"NULL":true},"c":{"BOOL":false}}"#,
            r#"{"a":{"NULL":false}}"#,
            r#"{"a":{"NULL":"true"}}"#,
            r#"{"a":{"M":{"b":{"S":"c"}}}}"#,
            r#"{"a":{"SS":["x"]}}"#,
            r#"{"a":{"s":"x"}}"#,
            r#"{"a":{"S":"x"}} trailing"#,
            r#"[{"a":{"S":"x"}}]"#,
            r#"{"a":{"N":"1e400"}}"#,
            r#"{"$serde_json::private::RawValue":{"S":"x"}}"#,
            "not json",
        ];
        let mut fast = 0;
        for text in texts {
            let slow = serde_json::from_str(text)
                .ok()
                .and_then(|v| item_from_json(&v).ok());
            match scalar_item_from_json_text(text) {
                Some(item) => {
                    fast += 1;
                    assert_eq!(Some(item), slow, "{text}");
                }
                // Left to the long way: whatever that refuses or reads as
                // another type, and a few odd items of these types (a tag
                // repeated in one value, a reserved name).
                None => assert!(
                    slow.is_none_or(|i| {
                        i.keys().any(|k| k.starts_with('$'))
                            || i.values().any(|v| {
                                !matches!(
                                    v,
                                    AttributeValue::S(_)
                                        | AttributeValue::N(_)
                                        | AttributeValue::Bool(_)
                                        | AttributeValue::Null
                                )
                            })
                    }),
                    "{text}"
                ),
            }
        }
        assert_eq!(fast, 5, "the scalar items are read by the fast path");
    }

    #[test]
    fn round_trips_every_type() {
        let doc = json!({
            "s": {"S": "text"}, "n": {"N": "1.5"}, "b": {"B": "AAEC"}, "t": {"BOOL": true},
            "z": {"NULL": true}, "m": {"M": {"a": {"L": [{"N": "1"}, {"S": "x"}]}}},
            "ss": {"SS": ["b", "a"]}, "ns": {"NS": ["10", "2"]}, "bs": {"BS": ["AQ=="]}
        });
        let item = item_from_json(&doc).unwrap();
        let back = item_to_json(&item);
        assert_eq!(back["ss"], json!({"SS": ["a", "b"]}));
        assert_eq!(back["ns"], json!({"NS": ["2", "10"]}));
        assert_eq!(item_from_json(&back).unwrap(), item);
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in [
            json!({}),
            json!({"S": "a", "N": "1"}),
            json!({"NULL": false}),
            json!({"SS": []}),
            json!({"NS": ["1", "1.0"]}),
            json!({"N": 5}),
            json!({"X": "a"}),
            json!({"B": "***"}),
        ] {
            assert!(
                AttributeValue::from_json(&bad).is_err(),
                "{bad} should be rejected"
            );
        }
    }
}

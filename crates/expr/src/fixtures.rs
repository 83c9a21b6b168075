//! Shared test data: one request's placeholders and one item with every
//! type, written in DynamoDB JSON so each test case can stay one line.

use std::collections::BTreeMap;

use postbox_item::{AttributeValue, Item, item_from_json};
use serde_json::json;

use crate::Placeholders;

/// Expression attribute names every test may use.
pub(crate) fn names() -> BTreeMap<String, String> {
    [
        ("#s", "status"),
        ("#a", "a"),
        ("#dot", "a.b"),
        ("#m", "m"),
        ("#n", "n"),
        ("#l", "l"),
        ("#pk", "pk"),
        ("#sk", "sk"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Expression attribute values every test may use.
pub(crate) fn values() -> BTreeMap<String, AttributeValue> {
    let doc = json!({
        ":s": {"S": "abc"}, ":abc": {"S": "abc"}, ":ab": {"S": "ab"}, ":x": {"S": "x"}, ":a": {"S": "a"}, ":z": {"S": "z"},
        ":empty": {"S": ""}, ":p": {"S": "p"}, ":active": {"S": "active"}, ":u": {"S": "é𝄞"},
        ":n0": {"N": "0"}, ":n1": {"N": "1"}, ":n2": {"N": "2"}, ":n3": {"N": "3"}, ":n5": {"N": "5"}, ":n5dot": {"N": "5.00"},
        ":n6": {"N": "6"}, ":n10": {"N": "10"}, ":big": {"N": "9E+125"},
        ":half": {"N": "0.5"}, ":tiny": {"N": "1E-130"}, ":t": {"BOOL": true}, ":f": {"BOOL": false}, ":null": {"NULL": true},
        ":l": {"L": [{"N": "9"}]}, ":lx": {"L": [{"S": "x"}]}, ":m": {"M": {"y": {"N": "2"}}}, ":m0": {"M": {}},
        ":ss": {"SS": ["a", "b"]}, ":ssb": {"SS": ["b", "c"]}, ":ssab": {"SS": ["a", "b", "c"]},
        ":ns": {"NS": ["1", "2"]}, ":ns3": {"NS": ["3"]}, ":bs": {"BS": ["AQ=="]},
        ":b": {"B": "AQI="}, ":b1": {"B": "AQ=="}, ":b23": {"B": "AgM="},
        ":tS": {"S": "S"}, ":tN": {"S": "N"}, ":tL": {"S": "L"}, ":tM": {"S": "M"}, ":tSS": {"S": "SS"},
        ":tNULL": {"S": "NULL"}, ":tBOOL": {"S": "BOOL"}, ":tX": {"S": "XX"}, ":tlower": {"S": "s"}
    });
    item_from_json(&doc).expect("fixture values parse")
}

/// An item with one attribute of every type, nested maps and lists, a name
/// containing a dot and a reserved word as a name.
pub(crate) fn item() -> Item {
    parse_item(&json!({
        "pk": {"S": "p"}, "s": {"S": "abcdef"}, "n": {"N": "5"}, "b": {"B": "AQID"}, "t": {"BOOL": true},
        "z": {"NULL": true}, "u": {"S": "é𝄞"}, "status": {"S": "active"}, "a.b": {"S": "dotted"},
        "l": {"L": [{"N": "1"}, {"S": "x"}, {"M": {"y": {"N": "2"}}}]},
        "m": {"M": {"a": {"M": {"b": {"N": "1"}}}, "x": {"N": "1"}, "l": {"L": [{"S": "p"}, {"S": "q"}]}}},
        "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]}, "bs": {"BS": ["AQ=="]}, "lm": {"L": []}, "m0": {"M": {}}
    }))
}

/// An item from DynamoDB JSON.
pub(crate) fn parse_item(doc: &serde_json::Value) -> Item {
    item_from_json(doc).expect("fixture item parses")
}

/// A value from DynamoDB JSON.
pub(crate) fn value(doc: serde_json::Value) -> AttributeValue {
    AttributeValue::from_json(&doc).expect("fixture value parses")
}

/// Runs `f` with placeholders over the shared names and values.
pub(crate) fn with_placeholders<T>(f: impl FnOnce(&mut Placeholders) -> T) -> T {
    let (n, v) = (names(), values());
    let mut ph = Placeholders::new(Some(&n), Some(&v));
    f(&mut ph)
}

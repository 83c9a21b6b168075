//! A small subset of JSON Schema for payloads, checked on emit.
//!
//! Supported keywords: `type` (a name or a list of names among object,
//! array, string, number, integer, boolean, null), `required`, `properties`,
//! `additionalProperties` (boolean only), `items` (one schema), `enum`,
//! `const`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`
//! (numbers), `minLength`, `maxLength` (in Unicode scalar values),
//! `minItems`, `maxItems`, plus the annotations `description`, `title`,
//! `$comment`, `examples`, `default`. Anything else (`pattern`, `$ref`,
//! `oneOf`, ...) is refused when the catalog loads, so nobody believes a
//! keyword is enforced when it is not.

use serde_json::{Map, Value};

const KNOWN: &[&str] = &[
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "description",
    "title",
    "$comment",
    "examples",
    "default",
    "$schema",
];

const TYPES: &[&str] = &[
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// A schema that has been checked to use only the supported subset.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    root: Value,
}

impl Schema {
    /// Checks `value` uses only supported keywords with well-formed
    /// arguments.
    pub fn new(value: Value) -> Result<Schema, String> {
        check_schema(&value, "#")?;
        Ok(Schema { root: value })
    }

    /// The schema as JSON.
    pub fn as_json(&self) -> &Value {
        &self.root
    }

    /// The first violation of `instance`, as a sentence naming its path.
    pub fn validate(&self, instance: &Value) -> Result<(), String> {
        validate(&self.root, instance, At::Root)
    }
}

/// Where a value is in the instance, spelled (`$.items[2].name`) only when
/// a violation names it: most payloads pass, and a path built for each
/// value was most of what validating them cost.
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Field(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Root => f.write_str("$"),
            At::Field(parent, name) => write!(f, "{parent}.{name}"),
            At::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

fn check_schema(s: &Value, at: &str) -> Result<(), String> {
    let Value::Object(m) = s else {
        return Err(format!("schema at {at} must be an object"));
    };
    for (k, v) in m {
        if !KNOWN.contains(&k.as_str()) {
            return Err(format!(
                "schema keyword {k:?} at {at} is not supported (supported: {})",
                KNOWN.join(", ")
            ));
        }
        let bad = |what: &str| Err(format!("schema keyword {k:?} at {at} must be {what}"));
        match k.as_str() {
            "type" => {
                let ok = match v {
                    Value::String(t) => TYPES.contains(&t.as_str()),
                    Value::Array(ts) => ts
                        .iter()
                        .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))),
                    _ => false,
                };
                if !ok {
                    return bad(&format!("one of {} or a list of them", TYPES.join(", ")));
                }
            }
            "required" if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) => {
                return bad("a list of names");
            }
            "properties" => {
                let Some(props) = v.as_object() else {
                    return bad("an object of schemas");
                };
                for (name, sub) in props {
                    check_schema(sub, &format!("{at}/properties/{name}"))?;
                }
            }
            "items" => check_schema(v, &format!("{at}/items"))?,
            "additionalProperties" if !v.is_boolean() => {
                return bad("a boolean (schemas there are not supported)");
            }
            "enum" if !v.is_array() => return bad("a list"),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" if !v.is_number() => {
                return bad("a number");
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" if !v.is_u64() => {
                return bad("a non-negative integer");
            }
            _ => {}
        }
    }
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        t => type_name(v) == t,
    }
}

fn validate(s: &Value, v: &Value, at: At<'_>) -> Result<(), String> {
    let Some(m) = s.as_object() else {
        return Ok(());
    };
    if let Some(t) = m.get("type") {
        let ok = match t {
            Value::String(t) => is_type(v, t),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| is_type(v, t)),
            _ => true,
        };
        if !ok {
            return Err(format!("{at} must be of type {t}, not {}", type_name(v)));
        }
    }
    if let Some(Value::Array(options)) = m.get("enum")
        && !options.contains(v)
    {
        return Err(format!(
            "{at} must be one of {}",
            Value::Array(options.clone())
        ));
    }
    if let Some(c) = m.get("const")
        && c != v
    {
        return Err(format!("{at} must be {c}"));
    }
    if let Some(f) = v.as_f64() {
        number_bounds(m, f, at)?;
    }
    if let Value::String(s) = v {
        let len = || s.chars().count() as u64;
        if let Some(min) = m.get("minLength").and_then(Value::as_u64)
            && len() < min
        {
            return Err(format!("{at} must be at least {min} characters long"));
        }
        if let Some(max) = m.get("maxLength").and_then(Value::as_u64)
            && len() > max
        {
            return Err(format!("{at} must be at most {max} characters long"));
        }
    }
    if let Value::Array(items) = v {
        let len = items.len() as u64;
        if m.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|min| len < min)
        {
            return Err(format!("{at} has too few items"));
        }
        if m.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|max| len > max)
        {
            return Err(format!("{at} has too many items"));
        }
        if let Some(item_schema) = m.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(item_schema, item, At::Index(&at, i))?;
            }
        }
    }
    if let Value::Object(obj) = v {
        object(m, obj, at)?;
    }
    Ok(())
}

fn number_bounds(m: &Map<String, Value>, f: f64, at: At<'_>) -> Result<(), String> {
    let get = |k: &str| m.get(k).and_then(Value::as_f64);
    if let Some(min) = get("minimum")
        && f < min
    {
        return Err(format!("{at} must be >= {min}"));
    }
    if let Some(max) = get("maximum")
        && f > max
    {
        return Err(format!("{at} must be <= {max}"));
    }
    if let Some(min) = get("exclusiveMinimum")
        && f <= min
    {
        return Err(format!("{at} must be > {min}"));
    }
    if let Some(max) = get("exclusiveMaximum")
        && f >= max
    {
        return Err(format!("{at} must be < {max}"));
    }
    Ok(())
}

fn object(m: &Map<String, Value>, obj: &Map<String, Value>, at: At<'_>) -> Result<(), String> {
    if let Some(Value::Array(required)) = m.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(name) {
                return Err(format!("{at}.{name} is required"));
            }
        }
    }
    let props = m.get("properties").and_then(Value::as_object);
    for (k, v) in obj {
        match props.and_then(|p| p.get(k)) {
            Some(sub) => validate(sub, v, At::Field(&at, k))?,
            None if m.get("additionalProperties") == Some(&Value::Bool(false)) => {
                return Err(format!(
                    "{at}.{k} is not allowed (additionalProperties is false)"
                ));
            }
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::new(json!({
            "type": "object",
            "required": ["amount", "currency"],
            "additionalProperties": false,
            "properties": {
                "amount": {"type": "integer", "minimum": 1, "maximum": 1000000},
                "currency": {"enum": ["EUR", "USD"]},
                "note": {"type": "string", "maxLength": 5},
                "tags": {"type": "array", "items": {"type": "string", "minLength": 1}}
            }
        }))
        .unwrap()
    }

    #[test]
    fn accepts_and_refuses() {
        let s = schema();
        assert!(
            s.validate(&json!({"amount": 5, "currency": "EUR", "tags": ["a"]}))
                .is_ok()
        );
        let cases = [
            (json!({"currency": "EUR"}), "$.amount is required"),
            (
                json!({"amount": 0, "currency": "EUR"}),
                "$.amount must be >= 1",
            ),
            (
                json!({"amount": 1.5, "currency": "EUR"}),
                "type \"integer\"",
            ),
            (
                json!({"amount": 1, "currency": "GBP"}),
                "$.currency must be one of",
            ),
            (
                json!({"amount": 1, "currency": "EUR", "note": "toolong"}),
                "at most 5",
            ),
            (
                json!({"amount": 1, "currency": "EUR", "x": 1}),
                "$.x is not allowed",
            ),
            (
                json!({"amount": 1, "currency": "EUR", "tags": [""]}),
                "$.tags[0] must be at least 1",
            ),
        ];
        for (v, msg) in cases {
            let e = s.validate(&v).unwrap_err();
            assert!(e.contains(msg), "{v}: {e}");
        }
        // A path through lists and objects is spelled in full.
        let nested = Schema::new(json!({"properties": {"lines": {"items": {
            "properties": {"sku": {"type": "string"}}
        }}}}))
        .unwrap();
        let e = nested
            .validate(&json!({"lines": [{"sku": "a"}, {"sku": 7}]}))
            .unwrap_err();
        assert_eq!(e, "$.lines[1].sku must be of type \"string\", not number");
    }

    #[test]
    fn unsupported_keywords_are_refused() {
        let e = Schema::new(json!({"type": "object", "properties": {"a": {"pattern": "x"}}}))
            .unwrap_err();
        assert!(
            e.contains("\"pattern\"") && e.contains("#/properties/a"),
            "{e}"
        );
        assert!(Schema::new(json!({"type": "float"})).is_err());
    }
}

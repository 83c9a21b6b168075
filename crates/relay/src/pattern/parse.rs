//! Pattern validation: every form AWS refuses is refused here with AWS's
//! reason and the dotted path of the field, so a pipe that would fail to
//! deploy on AWS fails to start locally too.

use serde_json::{Map, Value};

use super::wildcard::Glob;
use super::{AnythingBut, Field, Matcher, Object, PatternError, PatternWarning, Range};

/// Longest pattern text a pipe filter takes (Pipes' `Filter.Pattern` limit).
pub const MAX_PATTERN_LEN: usize = 4096;

type Parsed<T> = Result<T, PatternError>;

fn invalid<T>(reason: impl Into<String>) -> Parsed<T> {
    Err(PatternError {
        reason: reason.into(),
    })
}

/// Parses pattern text into its root object and the warnings for pipes.
pub(super) fn parse(text: &str) -> Parsed<(Object, Vec<PatternWarning>)> {
    if text.len() > MAX_PATTERN_LEN {
        return invalid(format!(
            "the pattern is {} bytes; a pipe filter takes at most {MAX_PATTERN_LEN}",
            text.len()
        ));
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return invalid(format!("the pattern is not JSON: {e}")),
    };
    let Value::Object(map) = value else {
        return invalid("Filter is not an object");
    };
    let mut warnings = Vec::new();
    let root = object(&map, "", &mut warnings)?;
    Ok((root, warnings))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn object(
    map: &Map<String, Value>,
    path: &str,
    warnings: &mut Vec<PatternWarning>,
) -> Parsed<Object> {
    let mut out = Object {
        fields: Vec::new(),
        any_of: Vec::new(),
    };
    for (key, value) in map {
        let here = join(path, key);
        if key == "$or" {
            out.any_of = or_list(value, path, warnings)?;
            continue;
        }
        if path.is_empty() && key == "eventName" {
            warnings.push(PatternWarning {
                path: here.clone(),
                message: "EventBridge Pipes cannot filter a DynamoDB stream on eventName; the embedded relay \
                          applies it, but a managed Pipe generated from this config would not. Filter on the \
                          images instead (e.g. dynamodb.OldImage absent for inserts)."
                    .to_owned(),
            });
        }
        let field = match value {
            Value::Object(inner) => Field::Nested(object(inner, &here, warnings)?),
            Value::Array(items) => Field::Leaf(leaf(items, &here, key, warnings)?),
            _ => return invalid(format!("\"{here}\" must be an object or an array")),
        };
        out.fields.push((key.clone(), field));
    }
    Ok(out)
}

fn or_list(value: &Value, path: &str, warnings: &mut Vec<PatternWarning>) -> Parsed<Vec<Object>> {
    let Value::Array(items) = value else {
        return invalid(format!(
            "\"{}\" must be an array of objects",
            join(path, "$or")
        ));
    };
    if items.len() < 2 {
        return invalid(format!(
            "\"{}\" must have at least two alternatives",
            join(path, "$or")
        ));
    }
    items
        .iter()
        .map(|item| match item {
            Value::Object(m) => object(m, path, warnings),
            _ => invalid(format!(
                "\"{}\" must be an array of objects",
                join(path, "$or")
            )),
        })
        .collect()
}

fn leaf(
    items: &[Value],
    path: &str,
    key: &str,
    warnings: &mut Vec<PatternWarning>,
) -> Parsed<Vec<Matcher>> {
    if items.is_empty() {
        return invalid(format!("\"{path}\": Empty arrays are not allowed"));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(match item {
            Value::String(_) | Value::Bool(_) | Value::Null => Matcher::Exact(item.clone()),
            Value::Number(n) => Matcher::Number(n.as_f64().expect("serde_json numbers are finite")),
            Value::Array(_) => {
                return invalid(format!(
                    "\"{path}\": Match value must be String, number, true, false, or null"
                ));
            }
            Value::Object(op) => operator(op, path)?,
        });
        if key == "N" && matches!(out.last(), Some(Matcher::Numeric(_) | Matcher::Number(_))) {
            warnings.push(PatternWarning {
                path: path.to_owned(),
                message: "DynamoDB JSON carries numbers as strings ({\"N\": \"5\"}); a numeric or number \
                          matcher here never matches. Match the string (\"5\") or a prefix instead."
                    .to_owned(),
            });
        }
    }
    Ok(out)
}

fn operator(op: &Map<String, Value>, path: &str) -> Parsed<Matcher> {
    let mut entries = op.iter();
    let (Some((name, value)), None) = (entries.next(), entries.next()) else {
        return invalid(format!(
            "\"{path}\": a match expression must have exactly one key, found {}",
            op.len()
        ));
    };
    let text = |v: &Value, what: &str| -> Parsed<String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            _ => invalid(format!("\"{path}\": {what} match pattern must be a string")),
        }
    };
    match name.as_str() {
        "prefix" | "suffix" => {
            let (value, ignore_case) = match value {
                Value::String(s) => (s.clone(), false),
                Value::Object(m) if m.len() == 1 && m.contains_key("equals-ignore-case") => (
                    text(&m["equals-ignore-case"], "equals-ignore-case")?.to_lowercase(),
                    true,
                ),
                _ => {
                    return invalid(format!(
                        "\"{path}\": {name} match pattern must be a string or an equals-ignore-case object"
                    ));
                }
            };
            Ok(if name == "prefix" {
                Matcher::Prefix { value, ignore_case }
            } else {
                Matcher::Suffix { value, ignore_case }
            })
        }
        "equals-ignore-case" => Ok(Matcher::EqualsIgnoreCase(
            text(value, "equals-ignore-case")?.to_lowercase(),
        )),
        "wildcard" => {
            let glob = Glob::parse(&text(value, "wildcard")?).map_err(|r| PatternError {
                reason: format!("\"{path}\": {r}"),
            })?;
            Ok(Matcher::Wildcard(glob))
        }
        "anything-but" => anything_but(value, path).map(Matcher::AnythingBut),
        "numeric" => numeric(value, path).map(Matcher::Numeric),
        "exists" => match value {
            Value::Bool(b) => Ok(Matcher::Exists(*b)),
            _ => invalid(format!(
                "\"{path}\": exists match pattern must be either true or false."
            )),
        },
        "cidr" => invalid(format!(
            "\"{path}\": cidr matching is not supported by the embedded relay yet"
        )),
        other => invalid(format!("\"{path}\": Unrecognized match type {other}")),
    }
}

fn anything_but(value: &Value, path: &str) -> Parsed<AnythingBut> {
    let reason = |r: &str| PatternError {
        reason: format!("\"{path}\": {r}"),
    };
    match value {
        Value::String(s) => Ok(AnythingBut::Strings(vec![s.clone()])),
        Value::Number(n) => Ok(AnythingBut::Numbers(vec![n.as_f64().expect("finite")])),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {
            Ok(AnythingBut::Strings(
                items
                    .iter()
                    .map(|v| v.as_str().expect("checked").to_owned())
                    .collect(),
            ))
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_number) => Ok(
            AnythingBut::Numbers(items.iter().map(|v| v.as_f64().expect("checked")).collect()),
        ),
        Value::Array(_) => Err(reason(
            "Inside anything but list, start|null|boolean is not supported; use a non-empty list of only strings or only numbers",
        )),
        Value::Object(m) => {
            let mut entries = m.iter();
            let (Some((op, inner)), None) = (entries.next(), entries.next()) else {
                return Err(reason(
                    "anything-but takes exactly one of prefix, suffix, equals-ignore-case, wildcard",
                ));
            };
            let strings = |v: &Value| -> Parsed<Vec<String>> {
                match v {
                    Value::String(s) => Ok(vec![s.clone()]),
                    Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_string) => Ok(a
                        .iter()
                        .map(|v| v.as_str().expect("checked").to_owned())
                        .collect()),
                    _ => Err(reason(&format!(
                        "anything-but/{op} must be a string or a non-empty list of strings"
                    ))),
                }
            };
            match op.as_str() {
                "prefix" | "suffix" => {
                    let Value::String(s) = inner else {
                        return Err(reason(&format!(
                            "anything-but/{op} match pattern must be a string"
                        )));
                    };
                    if s.is_empty() {
                        return Err(reason(&format!("Null {op} not allowed")));
                    }
                    Ok(if op == "prefix" {
                        AnythingBut::Prefix(s.clone())
                    } else {
                        AnythingBut::Suffix(s.clone())
                    })
                }
                "equals-ignore-case" => Ok(AnythingBut::IgnoreCase(
                    strings(inner)?
                        .into_iter()
                        .map(|s| s.to_lowercase())
                        .collect(),
                )),
                "wildcard" => strings(inner)?
                    .iter()
                    .map(|s| Glob::parse(s).map_err(|r| reason(&r)))
                    .collect::<Parsed<_>>()
                    .map(AnythingBut::Wildcard),
                other => Err(reason(&format!(
                    "Unsupported anything-but pattern: {other}"
                ))),
            }
        }
        _ => Err(reason(
            "anything-but must be a string, a number, a list, or an object",
        )),
    }
}

fn numeric(value: &Value, path: &str) -> Parsed<Range> {
    let reason = |r: &str| PatternError {
        reason: format!("\"{path}\": {r}"),
    };
    let Value::Array(items) = value else {
        return Err(reason("Value of numeric must be an array."));
    };
    if items.is_empty() || items.len() % 2 != 0 || items.len() > 4 {
        return Err(reason("numeric takes one or two (operator, number) pairs"));
    }
    let equals = items.iter().step_by(2).any(|op| op == "=");
    if equals && items.len() > 2 {
        return Err(reason("= cannot be combined with another numeric operator"));
    }
    let mut range = Range {
        lower: None,
        upper: None,
    };
    for pair in items.chunks(2) {
        let Value::String(op) = &pair[0] else {
            return Err(reason(
                "Invalid member in numeric match: an operator must come first",
            ));
        };
        let Some(n) = pair[1].as_f64() else {
            return Err(reason(&format!("Value of {op} must be numeric")));
        };
        let slot = match op.as_str() {
            "=" => {
                range.lower = Some((n, true));
                range.upper = Some((n, true));
                continue;
            }
            ">" | ">=" => &mut range.lower,
            "<" | "<=" => &mut range.upper,
            other => {
                return Err(reason(&format!(
                    "Unrecognized numeric range operator: {other}"
                )));
            }
        };
        if slot.is_some() {
            return Err(reason(&format!(
                "Invalid member in numeric match: {op} bounds the same side twice"
            )));
        }
        *slot = Some((n, op.ends_with('=')));
    }
    if let (Some((lo, _)), Some((hi, _))) = (range.lower, range.upper)
        && !equals
        && lo >= hi
    {
        return Err(reason("Bottom must be less than top"));
    }
    Ok(range)
}

//! Input templates: text with `<$.path>` placeholders, rendered against the
//! record as the Pipe sees it.
//!
//! Rules (those of EventBridge Pipes, except that nothing is ever silently
//! empty):
//! - a template whose first non-blank character is `{` or `[` is a JSON
//!   template: a placeholder inside a JSON string (`"id": "<$.a>"`) is
//!   replaced by the value's text escaped for that string (a string without
//!   its quotes, anything else as its JSON text); a placeholder in value
//!   position (`"id": <$.a>`) is replaced by the value's JSON (strings
//!   quoted, objects as objects). The result must be valid JSON.
//! - any other template is plain text: strings are inserted as they are,
//!   other values as their JSON text.
//! - `<$>` or `<aws.pipes.event.json>` is the whole record;
//!   `<aws.pipes.pipe-name>` and `<aws.pipes.event.ingestion-time>` are the
//!   pipe's name and the record's commit time (RFC 3339).
//! - a path that does not resolve FAILS the record with
//!   [`TemplateError::Unresolved`], naming the path and the record. A path
//!   that resolves to `null` or `""` is that value, not a failure.

use postbox_item::Item;
use postbox_item::json::{write_string_contents, write_value};
use postbox_store::api::StreamRecord;
use serde_json::Value;

/// A record's images as items, for templates that insert a whole image:
/// it is written from the item rather than from the record's JSON.
#[derive(Clone, Copy, Debug)]
pub struct Images<'a> {
    /// The item after the change.
    pub new: Option<&'a Item>,
    /// The item before it.
    pub old: Option<&'a Item>,
}

impl<'a> Images<'a> {
    /// The images of `record`.
    pub fn of(record: &'a StreamRecord) -> Images<'a> {
        Images {
            new: record.new_image.as_ref(),
            old: record.old_image.as_ref(),
        }
    }
}

/// A parsed input template.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
    json: bool,
    source: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Placeholder { what: Placeholder, quoted: bool },
}

#[derive(Clone, Debug, PartialEq)]
enum Placeholder {
    /// A JSON path, kept with its text for error messages.
    Path {
        text: String,
        steps: Vec<Step>,
        /// `$.dynamodb.NewImage` or `$.dynamodb.OldImage`: written from
        /// the item when the record's [`Images`] are given.
        image: Option<Side>,
    },
    PipeName,
    IngestionTime,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    New,
    Old,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Why a template could not be parsed, or a record not rendered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template text itself is malformed (found at startup).
    #[error("invalid input template: {0}")]
    Invalid(String),
    /// A placeholder's path is not in the record: the record fails.
    #[error("input template path {path} does not resolve in record {record}")]
    Unresolved {
        /// The placeholder's path, e.g. `$.dynamodb.NewImage.jobId.S`.
        path: String,
        /// Which record (table and sequence number).
        record: String,
    },
    /// A JSON template rendered to text that is not JSON.
    #[error("input template rendered invalid JSON for record {record}: {reason}")]
    NotJson {
        /// Which record.
        record: String,
        /// The JSON parser's complaint.
        reason: String,
    },
}

/// What a placeholder other than a path needs to know.
#[derive(Clone, Copy, Debug)]
pub struct RenderContext<'a> {
    /// The pipe's name.
    pub pipe_name: &'a str,
    /// How error messages name the record, e.g. `jobs#42`.
    pub record_id: &'a str,
    /// The record's commit time, milliseconds since the epoch.
    pub ingestion_time_ms: u64,
    /// The record's images as items, when the record is a stream record
    /// read here (a whole image is then written from its item).
    pub images: Option<Images<'a>>,
}

impl Template {
    /// Parses a template.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let json = matches!(text.trim_start().chars().next(), Some('{' | '['));
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut in_string = false;
        let mut escaped = false;
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if c == '<'
                && let Some(end) = rest.find('>')
                && let Some(what) = placeholder(&rest[1..end])?
            {
                if !literal.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                }
                parts.push(Part::Placeholder {
                    what,
                    quoted: json && in_string,
                });
                rest = &rest[end + 1..];
                continue;
            }
            if json {
                match (c, escaped) {
                    (_, true) => escaped = false,
                    ('\\', false) if in_string => escaped = true,
                    ('"', false) => in_string = !in_string,
                    _ => {}
                }
            }
            literal.push(c);
            rest = &rest[c.len_utf8()..];
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template {
            parts,
            json,
            source: text.to_owned(),
        })
    }

    /// The whole record, unchanged: the template of a pipe without one.
    pub fn whole_record() -> Template {
        Template::parse("<$>").expect("valid")
    }

    /// Whether this is a JSON template (its output is JSON).
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// Whether the template is the record's whole new image and nothing
    /// else (`<$.dynamodb.NewImage>`): rendered with the record's
    /// [`Images`], its output is exactly the new item's DynamoDB JSON.
    pub fn is_whole_new_image(&self) -> bool {
        matches!(
            self.parts.as_slice(),
            [Part::Placeholder {
                what: Placeholder::Path {
                    image: Some(Side::New),
                    ..
                },
                quoted: false,
            }]
        )
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Calls `f` with each path the template reads of the record's JSON
    /// when it is rendered with the record's [`Images`] (a whole image is
    /// written from its item, so its path is not one of them).
    pub(crate) fn visit_record_paths(&self, f: &mut dyn FnMut(&[&str])) {
        for part in &self.parts {
            if let Part::Placeholder {
                what:
                    Placeholder::Path {
                        steps, image: None, ..
                    },
                ..
            } = part
            {
                let names: Vec<String> = steps
                    .iter()
                    .map(|s| match s {
                        Step::Key(k) => k.clone(),
                        Step::Index(i) => i.to_string(),
                    })
                    .collect();
                let path: Vec<&str> = names.iter().map(String::as_str).collect();
                f(&path);
            }
        }
    }

    /// Renders the template over `record`.
    pub fn render(&self, record: &Value, cx: &RenderContext<'_>) -> Result<String, TemplateError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Placeholder { what, quoted } => {
                    if let Some(text) = whole_image(what, cx)? {
                        match quoted {
                            true => write_string_contents(&mut out, &text),
                            false => out.push_str(&text),
                        }
                        continue;
                    }
                    let value = resolve(what, record, cx)?;
                    let value = value.as_ref();
                    match (value, *quoted, self.json) {
                        (Value::String(s), false, false) => out.push_str(s),
                        (Value::String(s), true, _) => write_string_contents(&mut out, s),
                        (other, true, _) => {
                            let mut text = String::new();
                            write_value(&mut text, other);
                            write_string_contents(&mut out, &text);
                        }
                        (other, false, _) => write_value(&mut out, other),
                    }
                }
            }
        }
        if self.json
            && let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&out)
        {
            return Err(TemplateError::NotJson {
                record: cx.record_id.to_owned(),
                reason: e.to_string(),
            });
        }
        Ok(out)
    }
}

/// The JSON text of a whole image placeholder, written from the item when
/// `cx` has the record's images; `None` for any other placeholder.
fn whole_image(
    what: &Placeholder,
    cx: &RenderContext<'_>,
) -> Result<Option<String>, TemplateError> {
    let (
        Placeholder::Path {
            text,
            image: Some(side),
            ..
        },
        Some(images),
    ) = (what, cx.images)
    else {
        return Ok(None);
    };
    let item = match side {
        Side::New => images.new,
        Side::Old => images.old,
    };
    match item {
        Some(item) => Ok(Some(postbox_item::json::item_to_string(item))),
        None => Err(TemplateError::Unresolved {
            path: text.clone(),
            record: cx.record_id.to_owned(),
        }),
    }
}

/// Parses the inside of `<...>`; `None` when it is not a placeholder (then
/// the `<` is literal text, as in `a < b`).
fn placeholder(inner: &str) -> Result<Option<Placeholder>, TemplateError> {
    match inner {
        "aws.pipes.event.json" | "aws.pipes.event" => {
            return Ok(Some(Placeholder::Path {
                text: "$".to_owned(),
                steps: Vec::new(),
                image: None,
            }));
        }
        "aws.pipes.pipe-name" => return Ok(Some(Placeholder::PipeName)),
        "aws.pipes.event.ingestion-time" => return Ok(Some(Placeholder::IngestionTime)),
        other if other.starts_with("aws.") => {
            return Err(TemplateError::Invalid(format!(
                "unknown reserved variable <{other}>"
            )));
        }
        other if !other.starts_with('$') => return Ok(None),
        _ => {}
    }
    let steps = parse_path(inner)
        .map_err(|why| TemplateError::Invalid(format!("placeholder <{inner}>: {why}")))?;
    let image = match steps.as_slice() {
        [Step::Key(a), Step::Key(b)] if a == "dynamodb" && b == "NewImage" => Some(Side::New),
        [Step::Key(a), Step::Key(b)] if a == "dynamodb" && b == "OldImage" => Some(Side::Old),
        _ => None,
    };
    Ok(Some(Placeholder::Path {
        text: inner.to_owned(),
        steps,
        image,
    }))
}

/// `$`, `$.a.b`, `$.a[0]`, `$['a b']`.
fn parse_path(text: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = text.strip_prefix('$').ok_or("a path starts with $")?;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err("empty field name".to_owned());
            }
            steps.push(Step::Key(r[..end].to_owned()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("unterminated ['...']")?;
            steps.push(Step::Key(r[..end].to_owned()));
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or("unterminated [...]")?;
            let index = r[..end]
                .parse()
                .map_err(|_| format!("{:?} is not an array index", &r[..end]))?;
            steps.push(Step::Index(index));
            rest = &r[end + 1..];
        } else {
            return Err(format!("unexpected {rest:?}"));
        }
    }
    Ok(steps)
}

fn resolve<'v>(
    what: &Placeholder,
    record: &'v Value,
    cx: &RenderContext<'_>,
) -> Result<std::borrow::Cow<'v, Value>, TemplateError> {
    use std::borrow::Cow;
    match what {
        Placeholder::PipeName => Ok(Cow::Owned(Value::String(cx.pipe_name.to_owned()))),
        Placeholder::IngestionTime => Ok(Cow::Owned(Value::String(crate::record::rfc3339(
            cx.ingestion_time_ms,
        )))),
        Placeholder::Path { text, steps, .. } => {
            let mut at = record;
            for step in steps {
                let next = match step {
                    Step::Key(k) => at.get(k.as_str()),
                    Step::Index(i) => at.get(*i),
                };
                at = next.ok_or_else(|| TemplateError::Unresolved {
                    path: text.clone(),
                    record: cx.record_id.to_owned(),
                })?;
            }
            Ok(Cow::Borrowed(at))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CX: RenderContext<'static> = RenderContext {
        pipe_name: "jobs",
        record_id: "jobs#7",
        ingestion_time_ms: 0,
        images: None,
    };

    fn check(template: &str, record: Value, want: &str) {
        let t = Template::parse(template).unwrap();
        assert_eq!(t.render(&record, &CX).unwrap(), want, "{template}");
    }

    #[test]
    fn json_templates_quote_by_position() {
        let r = json!({"a": "x\"y", "n": 5, "o": {"k": [1, 2]}, "z": null});
        check(r#"{"v": "<$.a>"}"#, r.clone(), r#"{"v": "x\"y"}"#);
        check(r#"{"v": <$.a>}"#, r.clone(), r#"{"v": "x\"y"}"#);
        check(
            r#"{"v": <$.n>, "w": "n=<$.n>"}"#,
            r.clone(),
            r#"{"v": 5, "w": "n=5"}"#,
        );
        check(
            r#"{"v": <$.o>, "i": <$.o.k[1]>}"#,
            r.clone(),
            r#"{"v": {"k":[1,2]}, "i": 2}"#,
        );
        check(r#"{"v": "<$.o>"}"#, r.clone(), r#"{"v": "{\"k\":[1,2]}"}"#);
        check(r#"{"z": <$.z>}"#, r.clone(), r#"{"z": null}"#);
        check(r#"{"q": "a \"<$.n>\" b"}"#, r, r#"{"q": "a \"5\" b"}"#);
    }

    #[test]
    fn plain_text_and_reserved_variables() {
        let r = json!({"a": "x", "b": {"c": true}});
        check(
            "job <$.a> is <$.b.c>; 1 < 2",
            r.clone(),
            "job x is true; 1 < 2",
        );
        check("<aws.pipes.pipe-name>:<$['a']>", r.clone(), "jobs:x");
        check(
            "<aws.pipes.event.json>",
            r.clone(),
            r#"{"a":"x","b":{"c":true}}"#,
        );
        check(
            "<aws.pipes.event.ingestion-time>",
            r,
            "1970-01-01T00:00:00.000Z",
        );
    }

    #[test]
    fn an_unresolved_path_fails_naming_path_and_record() {
        let t = Template::parse(r#"{"jobId": "<$.dynamodb.NewImage.jobId.S>"}"#).unwrap();
        let err = t
            .render(&json!({"dynamodb": {"NewImage": {}}}), &CX)
            .unwrap_err();
        assert_eq!(
            err,
            TemplateError::Unresolved {
                path: "$.dynamodb.NewImage.jobId.S".into(),
                record: "jobs#7".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "input template path $.dynamodb.NewImage.jobId.S does not resolve in record jobs#7"
        );
        assert!(matches!(
            Template::parse("<$.a[9]>")
                .unwrap()
                .render(&json!({"a": [1]}), &CX),
            Err(TemplateError::Unresolved { .. })
        ));
    }

    #[test]
    fn malformed_templates_are_refused() {
        assert!(matches!(
            Template::parse("<$.a..b>"),
            Err(TemplateError::Invalid(_))
        ));
        assert!(matches!(
            Template::parse("<$.a[x]>"),
            Err(TemplateError::Invalid(_))
        ));
        assert!(matches!(
            Template::parse("<aws.pipes.nope>"),
            Err(TemplateError::Invalid(_))
        ));
        let t = Template::parse(r#"{"v": <$.a> <$.a>}"#).unwrap();
        assert!(matches!(
            t.render(&json!({"a": 1}), &CX),
            Err(TemplateError::NotJson { .. })
        ));
    }
}

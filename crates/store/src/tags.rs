//! Table tags as DynamoDB checks them: at most 50 on a table; keys of 1 to
//! 128 and values of 0 to 256 characters, letters, digits, whitespace and
//! `_ . : / = + - @`; keys starting with `aws:` reserved. And the table a
//! `ResourceArn` names. Pure: both backends' callers use it.

use std::collections::BTreeMap;

use crate::api::Tag;
use crate::error::StoreError;

/// Most tags on one table.
pub const MAX_TAGS: usize = 50;

/// The table name `arn` names (`arn:<partition>:dynamodb:<region>:<account>:table/<name>`),
/// or DynamoDB's refusal.
pub fn table_of_arn(arn: &str) -> Result<&str, StoreError> {
    if !arn.starts_with("arn:") {
        return Err(StoreError::validation(format!(
            "Invalid TableArn: Invalid ResourceArn provided as input {arn}: ARNs must start with 'arn:'"
        )));
    }
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", _, "dynamodb", _, _, resource] => resource
            .strip_prefix("table/")
            .filter(|name| !name.is_empty() && !name.contains('/'))
            .ok_or_else(|| {
                StoreError::validation(format!(
                    "Invalid TableArn: Invalid ResourceArn provided as input {arn}"
                ))
            }),
        _ => Err(StoreError::validation(format!(
            "Invalid TableArn: Invalid ResourceArn provided as input {arn}"
        ))),
    }
}

/// The refusal for an ARN naming no table.
pub fn not_found(arn: &str) -> StoreError {
    StoreError::ResourceNotFound(format!(
        "Requested resource not found: ResourceArn: {arn} not found"
    ))
}

fn allowed(c: char) -> bool {
    c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c)
}

fn check_key(key: &str, at: &str) -> Result<(), StoreError> {
    let n = key.chars().count();
    if !(1..=128).contains(&n) {
        return Err(StoreError::validation(format!(
            "1 validation error detected: Value '{key}' at '{at}' failed to satisfy constraint: Member must have length {}",
            if n == 0 {
                "greater than or equal to 1"
            } else {
                "less than or equal to 128"
            }
        )));
    }
    if !key.chars().all(allowed) {
        return Err(StoreError::validation(format!(
            "1 validation error detected: Value '{key}' at '{at}' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\p{{L}}\\p{{Z}}\\p{{N}}_.:/=+\\-@]*"
        )));
    }
    if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
        return Err(StoreError::validation(format!(
            "Invalid tag key {key:?}: keys starting with 'aws:' are reserved for AWS"
        )));
    }
    Ok(())
}

/// Checks the tags of a TagResource or CreateTable request.
pub fn check_tags(tags: &[Tag]) -> Result<(), StoreError> {
    for (i, t) in tags.iter().enumerate() {
        check_key(&t.key, &format!("tags.{}.member.key", i + 1))?;
        let n = t.value.chars().count();
        if n > 256 {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value '{}' at 'tags.{}.member.value' failed to satisfy constraint: Member must have length less than or equal to 256",
                t.value,
                i + 1
            )));
        }
        if !t.value.chars().all(allowed) {
            return Err(StoreError::validation(format!(
                "1 validation error detected: Value '{}' at 'tags.{}.member.value' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\p{{L}}\\p{{Z}}\\p{{N}}_.:/=+\\-@]*",
                t.value,
                i + 1
            )));
        }
    }
    Ok(())
}

/// `current` with `tags` added (a key already there takes the new value),
/// or the refusal when the table would have more than [`MAX_TAGS`].
pub fn merged(
    current: &BTreeMap<String, String>,
    tags: &[Tag],
) -> Result<BTreeMap<String, String>, StoreError> {
    let mut out = current.clone();
    for t in tags {
        out.insert(t.key.clone(), t.value.clone());
    }
    if out.len() > MAX_TAGS {
        return Err(StoreError::validation(format!(
            "One or more parameter values were invalid: The number of tags on the table would be {}, over the limit of {MAX_TAGS}",
            out.len()
        )));
    }
    Ok(out)
}

/// Checks the keys of an UntagResource request.
pub fn check_keys(keys: &[String]) -> Result<(), StoreError> {
    if keys.is_empty() {
        return Err(StoreError::validation(
            "1 validation error detected: Value '[]' at 'tagKeys' failed to satisfy constraint: Member must have length greater than or equal to 1",
        ));
    }
    for (i, k) in keys.iter().enumerate() {
        check_key(k, &format!("tagKeys.{}.member", i + 1))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn an_arn_names_its_table_or_is_refused() {
        assert_eq!(
            table_of_arn("arn:aws:dynamodb:local:000000000000:table/orders").ok(),
            Some("orders")
        );
        for bad in [
            "orders",
            "arn:aws:s3:::bucket",
            "arn:aws:dynamodb:local:000000000000:table/",
            "arn:aws:dynamodb:local:000000000000:table/t/stream/1",
            "arn:aws:dynamodb:local:000000000000:backup/x",
        ] {
            let e = table_of_arn(bad).unwrap_err();
            assert_eq!(e.code(), "ValidationException", "{bad}");
        }
    }

    #[test]
    fn tags_follow_dynamodbs_rules() {
        check_tags(&[tag("env", "prod"), tag(" ", ""), tag("a+b=c@d/e:f", "x y")]).unwrap();
        for bad in [
            tag("", "v"),
            tag(&"k".repeat(129), "v"),
            tag("k", &"v".repeat(257)),
            tag("aws:x", "v"),
            tag("AWS:x", "v"),
            tag("k#", "v"),
            tag("k", "<>"),
        ] {
            assert!(check_tags(std::slice::from_ref(&bad)).is_err(), "{bad:?}");
        }
        let fifty: Vec<Tag> = (0..50).map(|i| tag(&i.to_string(), "v")).collect();
        let full = merged(&BTreeMap::new(), &fifty).unwrap();
        assert_eq!(full.len(), 50);
        assert!(
            merged(&full, &[tag("0", "again")]).is_ok(),
            "a key already there is replaced"
        );
        assert!(merged(&full, &[tag("new", "v")]).is_err());
        assert!(check_keys(&[]).is_err());
        assert!(check_keys(&["aws:k".into()]).is_err());
    }
}

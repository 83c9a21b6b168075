//! Expression attribute names (`#n`) and values (`:v`) of one request.
//!
//! DynamoDB resolves placeholders when it parses, and rejects a request that
//! supplies a name or value no expression uses. One `Placeholders` therefore
//! lives for all expressions of a request (condition, update, projection, ...)
//! and remembers what they used; [`Placeholders::finish`] reports the rest.

use std::collections::{BTreeMap, BTreeSet};

use postbox_item::AttributeValue;

use crate::ExprError;

/// The `ExpressionAttributeNames` and `ExpressionAttributeValues` of one
/// request, and which of them the request's expressions have used so far.
#[derive(Debug)]
pub struct Placeholders<'a> {
    names: Option<&'a BTreeMap<String, String>>,
    values: Option<&'a BTreeMap<String, AttributeValue>>,
    used_names: BTreeSet<&'a str>,
    used_values: BTreeSet<&'a str>,
}

impl<'a> Placeholders<'a> {
    /// Placeholders as supplied with a request; `None` where the request has none.
    pub fn new(
        names: Option<&'a BTreeMap<String, String>>,
        values: Option<&'a BTreeMap<String, AttributeValue>>,
    ) -> Self {
        Placeholders {
            names,
            values,
            used_names: BTreeSet::new(),
            used_values: BTreeSet::new(),
        }
    }

    /// DynamoDB's checks of the maps themselves, done before any expression
    /// is parsed: present maps must not be empty and their keys must be
    /// placeholder tokens (`#word`, `:word`).
    pub(crate) fn check_supplied(&self) -> Result<(), ExprError> {
        if let Some(names) = self.names {
            if names.is_empty() {
                return Err(ExprError::new("ExpressionAttributeNames must not be empty"));
            }
            if let Some(bad) = names.keys().find(|k| !is_placeholder(k, '#')) {
                return Err(ExprError::new(format!(
                    "ExpressionAttributeNames contains invalid key: Syntax error; key: \"{bad}\""
                )));
            }
        }
        if let Some(values) = self.values {
            if values.is_empty() {
                return Err(ExprError::new(
                    "ExpressionAttributeValues must not be empty",
                ));
            }
            if let Some(bad) = values.keys().find(|k| !is_placeholder(k, ':')) {
                return Err(ExprError::new(format!(
                    "ExpressionAttributeValues contains invalid key: Syntax error; key: \"{bad}\""
                )));
            }
        }
        Ok(())
    }

    /// The attribute name behind `#token`, marking it used.
    pub(crate) fn name(&mut self, token: &str) -> Option<&'a str> {
        let (key, name) = self.names?.get_key_value(token)?;
        self.used_names.insert(key.as_str());
        Some(name.as_str())
    }

    /// The value behind `:token`, marking it used.
    pub(crate) fn value(&mut self, token: &str) -> Option<&'a AttributeValue> {
        let (key, value) = self.values?.get_key_value(token)?;
        self.used_values.insert(key.as_str());
        Some(value)
    }

    /// `ExpressionAttributeNames` as supplied.
    pub(crate) fn names_map(&self) -> Option<&'a BTreeMap<String, String>> {
        self.names
    }

    /// `ExpressionAttributeValues` as supplied.
    pub(crate) fn values_map(&self) -> Option<&'a BTreeMap<String, AttributeValue>> {
        self.values
    }

    /// The names and values used so far.
    pub(crate) fn used(&self) -> (Vec<String>, Vec<String>) {
        let own = |set: &BTreeSet<&str>| set.iter().map(|k| (*k).to_owned()).collect();
        (own(&self.used_names), own(&self.used_values))
    }

    /// After parsing every expression of one request: DynamoDB's errors for
    /// supplied-but-unused names and values.
    pub fn finish(self) -> Result<(), ExprError> {
        self.check_supplied()?;
        let unused = |all: Option<Vec<&'a str>>, used: &BTreeSet<&'a str>| -> Vec<&'a str> {
            all.unwrap_or_default()
                .into_iter()
                .filter(|k| !used.contains(k))
                .collect()
        };
        let names = unused(
            self.names.map(|m| m.keys().map(String::as_str).collect()),
            &self.used_names,
        );
        if !names.is_empty() {
            return Err(ExprError::new(format!(
                "Value provided in ExpressionAttributeNames unused in expressions: keys: {{{}}}",
                names.join(", ")
            )));
        }
        let values = unused(
            self.values.map(|m| m.keys().map(String::as_str).collect()),
            &self.used_values,
        );
        if !values.is_empty() {
            return Err(ExprError::new(format!(
                "Value provided in ExpressionAttributeValues unused in expressions: keys: {{{}}}",
                values.join(", ")
            )));
        }
        Ok(())
    }
}

fn is_placeholder(key: &str, sigil: char) -> bool {
    key.strip_prefix(sigil).is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn values(keys: &[&str]) -> BTreeMap<String, AttributeValue> {
        keys.iter()
            .map(|k| (k.to_string(), AttributeValue::n(1)))
            .collect()
    }

    #[test]
    fn reports_unused_names_before_values() {
        let (n, v) = (names(&[("#a", "a"), ("#b", "b")]), values(&[":x", ":y"]));
        let mut ph = Placeholders::new(Some(&n), Some(&v));
        assert_eq!(ph.name("#a"), Some("a"));
        assert_eq!(ph.name("#zz"), None);
        assert!(ph.value(":x").is_some());
        assert_eq!(
            ph.finish().unwrap_err().message,
            "Value provided in ExpressionAttributeNames unused in expressions: keys: {#b}"
        );

        let mut ph = Placeholders::new(Some(&n), Some(&v));
        ph.name("#a");
        ph.name("#b");
        assert_eq!(
            ph.finish().unwrap_err().message,
            "Value provided in ExpressionAttributeValues unused in expressions: keys: {:x, :y}"
        );
    }

    #[test]
    fn rejects_empty_maps_and_bad_keys() {
        let empty_names = BTreeMap::new();
        let ph = Placeholders::new(Some(&empty_names), None);
        assert_eq!(
            ph.check_supplied().unwrap_err().message,
            "ExpressionAttributeNames must not be empty"
        );
        let empty_values = BTreeMap::new();
        let ph = Placeholders::new(None, Some(&empty_values));
        assert_eq!(
            ph.check_supplied().unwrap_err().message,
            "ExpressionAttributeValues must not be empty"
        );
        let bad = names(&[("a", "a")]);
        let ph = Placeholders::new(Some(&bad), None);
        assert_eq!(
            ph.check_supplied().unwrap_err().message,
            "ExpressionAttributeNames contains invalid key: Syntax error; key: \"a\""
        );
        let bad = values(&["x"]);
        let ph = Placeholders::new(None, Some(&bad));
        assert_eq!(
            ph.check_supplied().unwrap_err().message,
            "ExpressionAttributeValues contains invalid key: Syntax error; key: \"x\""
        );
        assert!(Placeholders::new(None, None).finish().is_ok());
    }
}

//! `--verify-every` and the other intervals the command line takes.

use std::time::Duration;

/// `--verify-every`: an interval, or None for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Every(pub Option<Duration>);

/// Parses `--verify-every` (see [`parse_every`]).
pub fn parse_flag(text: &str) -> Result<Every, String> {
    parse_every(text).map(Every)
}

/// Parses `off`, or a number with a unit (`s`, `m`, `h`, `d`).
pub fn parse_every(text: &str) -> Result<Option<Duration>, String> {
    if text == "off" {
        return Ok(None);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{text:?} is not `off` or a number with a unit (30s, 10m, 6h, 1d)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(format!(
                "{text:?}: the unit must be s, m, h or d (30s, 10m, 6h, 1d)"
            ));
        }
    };
    if secs == 0 {
        return Err("the interval must be at least 1s (or `off`)".to_owned());
    }
    Ok(Some(Duration::from_secs(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_take_a_unit_or_off() {
        assert_eq!(parse_every("off"), Ok(None));
        assert_eq!(parse_every("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse_every("10m"), Ok(Some(Duration::from_secs(600))));
        assert_eq!(parse_every("1d"), Ok(Some(Duration::from_secs(86_400))));
        for bad in ["", "10", "1w", "s", "0s", "-1h"] {
            assert!(parse_every(bad).is_err(), "{bad:?}");
        }
    }
}

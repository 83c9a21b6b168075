//! A change-stream record as an EventBridge Pipe sees it: the DynamoDB
//! Streams record in DynamoDB JSON, which is what filters match and input
//! templates address (`$.dynamodb.NewImage.status.S`).

use postbox_item::item_to_json;
use postbox_store::api::{EventName, StreamRecord};
use serde_json::{Value, json};

/// The region written into records, as the embedded wire layer does.
const REGION: &str = "us-east-1";

/// `record` from table `table` in the Pipe's JSON form.
pub fn to_json(table: &str, record: &StreamRecord) -> Value {
    let mut dynamodb = json!({
        "ApproximateCreationDateTime": (record.approximate_creation_time_ms / 1000) as f64,
        "Keys": item_to_json(&record.keys),
        "SequenceNumber": format!("{:021}", record.sequence_number),
        "SizeBytes": record.size_bytes,
        "StreamViewType": record.view_type,
    });
    if let Some(image) = &record.new_image {
        dynamodb["NewImage"] = item_to_json(image);
    }
    if let Some(image) = &record.old_image {
        dynamodb["OldImage"] = item_to_json(image);
    }
    let mut out = json!({
        "eventID": format!("{:032x}", record.sequence_number),
        "eventName": event_name(record.event_name),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": dynamodb,
        "eventSourceARN": format!("arn:aws:dynamodb:{REGION}:000000000000:table/{table}/stream/embedded"),
    });
    if record.ttl_removal {
        out["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    }
    out
}

/// `INSERT`, `MODIFY` or `REMOVE`.
pub fn event_name(name: EventName) -> &'static str {
    match name {
        EventName::Insert => "INSERT",
        EventName::Modify => "MODIFY",
        EventName::Remove => "REMOVE",
    }
}

/// How errors and dead letters name a record: `table#sequence`.
pub fn record_id(table: &str, sequence_number: u64) -> String {
    format!("{table}#{sequence_number}")
}

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_764_441_000_000), "2025-11-29T18:30:00.000Z");
    }
}

//! A change-stream record as an EventBridge Pipe sees it: the DynamoDB
//! Streams record in DynamoDB JSON, which is what filters match and input
//! templates address (`$.dynamodb.NewImage.status.S`).

use postbox_item::item_to_json;
use postbox_store::api::{EventName, StreamRecord, StreamViewType};
use serde_json::{Map, Value, json};

/// The region written into records, as the embedded wire layer does.
const REGION: &str = "us-east-1";

/// `record` from table `table` in the Pipe's JSON form.
///
/// Built by moving values into maps rather than with `json!`, which
/// serialises each interpolated value again (a deep copy of the images):
/// this conversion is most of the relay's own work per record.
pub fn to_json(table: &str, record: &StreamRecord) -> Value {
    let mut dynamodb = Map::new();
    dynamodb.insert(
        "ApproximateCreationDateTime".into(),
        json!((record.approximate_creation_time_ms / 1000) as f64),
    );
    dynamodb.insert("Keys".into(), item_to_json(&record.keys));
    if let Some(image) = &record.new_image {
        dynamodb.insert("NewImage".into(), item_to_json(image));
    }
    if let Some(image) = &record.old_image {
        dynamodb.insert("OldImage".into(), item_to_json(image));
    }
    dynamodb.insert(
        "SequenceNumber".into(),
        Value::String(format!("{:021}", record.sequence_number)),
    );
    dynamodb.insert("SizeBytes".into(), Value::from(record.size_bytes));
    dynamodb.insert(
        "StreamViewType".into(),
        Value::String(view_type(record.view_type).to_owned()),
    );
    let mut out = Map::new();
    out.insert(
        "eventID".into(),
        Value::String(format!("{:032x}", record.sequence_number)),
    );
    out.insert(
        "eventName".into(),
        Value::String(event_name(record.event_name).to_owned()),
    );
    out.insert("eventVersion".into(), Value::String("1.1".to_owned()));
    out.insert(
        "eventSource".into(),
        Value::String("aws:dynamodb".to_owned()),
    );
    out.insert("awsRegion".into(), Value::String(REGION.to_owned()));
    out.insert("dynamodb".into(), Value::Object(dynamodb));
    out.insert(
        "eventSourceARN".into(),
        Value::String(format!(
            "arn:aws:dynamodb:{REGION}:000000000000:table/{table}/stream/embedded"
        )),
    );
    if record.ttl_removal {
        out.insert(
            "userIdentity".into(),
            json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"}),
        );
    }
    Value::Object(out)
}

fn view_type(v: StreamViewType) -> &'static str {
    match v {
        StreamViewType::KeysOnly => "KEYS_ONLY",
        StreamViewType::NewImage => "NEW_IMAGE",
        StreamViewType::OldImage => "OLD_IMAGE",
        StreamViewType::NewAndOldImages => "NEW_AND_OLD_IMAGES",
    }
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
    fn records_have_the_shape_of_dynamodb_streams() {
        use postbox_item::AttributeValue;
        let item = postbox_item::Item::from([("pk".to_owned(), AttributeValue::s("a"))]);
        let r = StreamRecord {
            sequence_number: 42,
            event_name: EventName::Modify,
            approximate_creation_time_ms: 1_500,
            keys: item.clone(),
            new_image: Some(item.clone()),
            old_image: Some(item),
            view_type: StreamViewType::NewAndOldImages,
            ttl_removal: true,
            size_bytes: 9,
        };
        let j = to_json("t", &r);
        assert_eq!(j["eventName"], "MODIFY");
        assert_eq!(j["eventID"], format!("{:032x}", 42));
        assert_eq!(j["dynamodb"]["SequenceNumber"], "000000000000000000042");
        assert_eq!(j["dynamodb"]["ApproximateCreationDateTime"], 1.0);
        assert_eq!(j["dynamodb"]["StreamViewType"], "NEW_AND_OLD_IMAGES");
        assert_eq!(j["dynamodb"]["NewImage"]["pk"]["S"], "a");
        assert_eq!(j["dynamodb"]["OldImage"]["pk"]["S"], "a");
        assert_eq!(j["dynamodb"]["Keys"]["pk"]["S"], "a");
        assert_eq!(j["userIdentity"]["principalId"], "dynamodb.amazonaws.com");
        assert_eq!(
            j["eventSourceARN"],
            "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/embedded"
        );
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_764_441_000_000), "2025-11-29T18:30:00.000Z");
    }
}

//! A change-stream record as an EventBridge Pipe sees it: the DynamoDB
//! Streams record in DynamoDB JSON, which is what filters match and input
//! templates address (`$.dynamodb.NewImage.status.S`).

use std::collections::BTreeSet;

use postbox_item::{Item, item_to_json};
use postbox_store::api::{EventName, StreamRecord, StreamViewType};
use serde_json::{Map, Value, json};

/// The region written into records, as the embedded wire layer does.
const REGION: &str = "us-east-1";

/// `record` from table `table` in the Pipe's JSON form.
pub fn to_json(table: &str, record: &StreamRecord) -> Value {
    to_json_projected(table, record, &Projection::whole())
}

/// `record` in the Pipe's JSON form with only what `projection` keeps of
/// it: what a pipe's filters and templates read (its keys always).
///
/// Built by moving values into maps rather than with `json!`, which
/// serialises each interpolated value again (a deep copy of the images):
/// this conversion is most of the relay's own work per record.
pub fn to_json_projected(table: &str, record: &StreamRecord, projection: &Projection) -> Value {
    let mut dynamodb = Map::new();
    dynamodb.insert("Keys".into(), item_to_json(&record.keys));
    if let Some(image) = projection.new.of(record.new_image.as_ref()) {
        dynamodb.insert("NewImage".into(), image);
    }
    if let Some(image) = projection.old.of(record.old_image.as_ref()) {
        dynamodb.insert("OldImage".into(), image);
    }
    if !projection.rest {
        let mut out = Map::new();
        out.insert("dynamodb".into(), Value::Object(dynamodb));
        return Value::Object(out);
    }
    dynamodb.insert(
        "ApproximateCreationDateTime".into(),
        json!((record.approximate_creation_time_ms / 1000) as f64),
    );
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

/// What of a record a pipe reads: the attributes of its images that its
/// filters and templates name, each kept whole, and the record's other
/// fields if any is named (its keys are always there), so they see exactly
/// what they would in the whole record. A template that inserts a whole
/// image (`<$.dynamodb.NewImage>`) does not count: it writes the image from
/// the item ([`Images`](crate::template::Images)).
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    new: Part,
    old: Part,
    /// Every field besides `dynamodb.Keys` and the images.
    rest: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Whole,
    Attributes(BTreeSet<String>),
}

impl Part {
    /// The JSON of `image` as far as this part keeps it; `None` when the
    /// pipe reads nothing of it (or there is no image).
    fn of(&self, image: Option<&Item>) -> Option<Value> {
        let image = image?;
        match self {
            Part::Whole => Some(item_to_json(image)),
            Part::Attributes(names) if names.is_empty() => None,
            Part::Attributes(names) => Some(Value::Object(
                names
                    .iter()
                    .filter_map(|n| image.get(n).map(|v| (n.clone(), v.to_json())))
                    .collect(),
            )),
        }
    }
}

impl Projection {
    /// Every attribute of both images.
    pub fn whole() -> Projection {
        Projection {
            new: Part::Whole,
            old: Part::Whole,
            rest: true,
        }
    }

    /// Nothing of either image; [`Projection::add`] names what is read.
    pub(crate) fn nothing() -> Projection {
        Projection {
            new: Part::Attributes(BTreeSet::new()),
            old: Part::Attributes(BTreeSet::new()),
            rest: false,
        }
    }

    /// Keeps what `path` (from the record's root) reads.
    pub(crate) fn add(&mut self, path: &[&str]) {
        match path {
            [] | ["dynamodb"] => *self = Projection::whole(),
            ["dynamodb", "Keys", ..] => {}
            ["dynamodb", side, rest @ ..] => {
                let part = match *side {
                    "NewImage" => &mut self.new,
                    "OldImage" => &mut self.old,
                    _ => {
                        self.rest = true;
                        return;
                    }
                };
                match (part, rest.first()) {
                    (Part::Whole, _) => {}
                    (part, None) => *part = Part::Whole,
                    (Part::Attributes(names), Some(name)) => {
                        names.insert((*name).to_owned());
                    }
                }
            }
            _ => self.rest = true,
        }
    }
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

    fn record(
        name: EventName,
        new: Option<&[(&str, &str)]>,
        old: Option<&[(&str, &str)]>,
    ) -> StreamRecord {
        use postbox_item::AttributeValue;
        let item = |pairs: &[(&str, &str)]| -> Item {
            let mut item: Item = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), AttributeValue::s(*v)))
                .collect();
            item.insert("n".into(), AttributeValue::n(7));
            item.insert(
                "l".into(),
                AttributeValue::L(vec![AttributeValue::Bool(true), AttributeValue::Null]),
            );
            item
        };
        let new_image = new.map(item);
        let old_image = old.map(item);
        let pk = new_image.as_ref().or(old_image.as_ref()).unwrap()["pk"].clone();
        StreamRecord {
            sequence_number: 9,
            event_name: name,
            approximate_creation_time_ms: 1_000,
            keys: Item::from([("pk".to_owned(), pk)]),
            new_image,
            old_image,
            view_type: StreamViewType::NewAndOldImages,
            ttl_removal: false,
            size_bytes: 100,
        }
    }

    /// Planning over a projected record with its images gives what
    /// planning over the whole record gives, for pipes that read images
    /// in every way a pipe can: whole, by attribute, quoted in a JSON
    /// template, in filters with `$or`, `exists: false` and prefixes.
    #[test]
    fn a_projected_record_plans_as_the_whole_record_does() {
        let mut config = crate::RelayConfig::from_toml(
            r##"
[pipes.whole]
source = "t"
target = { queue = "q" }

[pipes.quoted]
source = "t"
input_template = '{"image": "<$.dynamodb.NewImage>", "old": <$.dynamodb.OldImage>, "k": "<$.dynamodb.Keys.pk.S>"}'
target = { queue = "q" }

[pipes.by_attribute]
source = "t"
filters = ['{"$or": [{"dynamodb": {"NewImage": {"status": {"S": ["PAID"]}}}}, {"dynamodb": {"OldImage": {"status": {"S": [{"prefix": "PEN"}]}}}}]}']
input_template = '{"s": <$.dynamodb.NewImage.status>, "n": <$.dynamodb.NewImage.n.N>, "l": <$.dynamodb.NewImage.l>}'
target = { queue = "q.fifo", message_group_id = "<$.dynamodb.OldImage.tenant.S>" }

[pipes.fields]
source = "t"
filters = ['{"eventName": ["INSERT", "REMOVE"]}']
input_template = '{"seq": "<$.dynamodb.SequenceNumber>", "arn": "<$.eventSourceARN>", "new": <$.dynamodb.NewImage>}'
target = { queue = "q" }

[pipes.image_exists]
source = "t"
filters = ['{"dynamodb": {"OldImage": [{"exists": false}]}}']
input_template = '<$.dynamodb.NewImage>'
target = { queue = "q" }
"##,
        )
        .unwrap();
        config
            .pipes
            .push(crate::config::default_events_pipe("t", "e.fifo"));
        let records = [
            record(
                EventName::Insert,
                Some(&[
                    ("pk", "T#a#EVENT"),
                    ("id", "e1"),
                    ("tenant", "a"),
                    ("status", "PAID"),
                ]),
                None,
            ),
            record(
                EventName::Modify,
                Some(&[("pk", "T#a#HEAD"), ("status", "PAID"), ("tenant", "a")]),
                Some(&[("pk", "T#a#HEAD"), ("status", "PENDING"), ("tenant", "a")]),
            ),
            record(
                EventName::Remove,
                None,
                Some(&[("pk", "T#b#EVENT"), ("status", "PENDING")]),
            ),
            record(
                EventName::Insert,
                Some(&[("pk", "x\"y"), ("status", "NEW")]),
                None,
            ),
        ];
        let mut outcomes = std::collections::BTreeSet::new();
        for pipe in &config.pipes {
            let projection = pipe.projection();
            for r in &records {
                let whole = to_json("t", r);
                let projected = to_json_projected("t", r, &projection);
                let view = |json, images| crate::plan::RecordView {
                    json,
                    id: "t#9",
                    created_ms: 1_000,
                    images,
                };
                let want = crate::plan::plan(pipe, &config.buses, view(&whole, None), 1_000);
                let got = crate::plan::plan(
                    pipe,
                    &config.buses,
                    view(&projected, Some(crate::template::Images::of(r))),
                    1_000,
                );
                assert_eq!(got, want, "pipe {} record {:?}", pipe.name, r.keys);
                outcomes.insert(format!("{want:?}").chars().take(7).collect::<String>());
            }
        }
        // The cases cover delivery, filtering and a failed template.
        assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    }

    #[test]
    fn the_events_pipe_reads_few_attributes_of_a_record() {
        let pipe = crate::config::default_events_pipe("t", "e.fifo");
        let head = record(
            EventName::Modify,
            Some(&[("pk", "T#a#HEAD"), ("hash", "h2")]),
            Some(&[("pk", "T#a#HEAD"), ("hash", "h1")]),
        );
        let j = to_json_projected("t", &head, &pipe.projection());
        let names = |side: &str| -> Vec<String> {
            j["dynamodb"][side]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        // The filter names the old image's `pk` and the new one's `id`; the
        // group and deduplication ids its `tenant` and `id`.
        assert!(names("NewImage").is_empty());
        assert_eq!(names("OldImage"), ["pk"]);
        let event = record(
            EventName::Insert,
            Some(&[("pk", "T#a#EVENT"), ("id", "e1"), ("tenant", "a")]),
            None,
        );
        let j = to_json_projected("t", &event, &pipe.projection());
        let new: Vec<_> = j["dynamodb"]["NewImage"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(new, ["id", "tenant"]);
        assert!(j["dynamodb"]["Keys"]["pk"]["S"].is_string());
        // Nothing but the keys and the images: no ids or names to format.
        let fields: Vec<_> = j.as_object().unwrap().keys().cloned().collect();
        assert_eq!(fields, ["dynamodb"]);
        assert_eq!(
            to_json_projected("t", &head, &Projection::whole()),
            to_json("t", &head)
        );
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_764_441_000_000), "2025-11-29T18:30:00.000Z");
    }
}

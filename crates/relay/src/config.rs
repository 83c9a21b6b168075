//! Pipes and event buses declared in the TOML config file, validated into
//! the forms the relay runs: patterns parsed (AWS's refusals), templates
//! parsed, every number within bounds. An error names the field.
//!
//! ```toml
//! [relay]
//! lease_seconds = 10
//! events_pipe = true                   # the default events pipe
//! # events_table, events_queue: default to the node's topology
//!
//! [pipes.jobs-pending]
//! source = "jobs"                      # a table with a stream
//! start_position = "TRIM_HORIZON"      # or LATEST
//! filters = ['{"dynamodb": {"NewImage": {"status": {"S": ["PENDING"]}}}}']
//! input_template = '{"jobId": "<$.dynamodb.NewImage.id.S>"}'
//! batch_size = 10                      # 1-10
//! max_retries = 3                      # 0-10000, never "forever"
//! max_record_age_seconds = 86400       # 60-604800
//! bisect_on_failure = true
//! dead_letter_queue = "jobs-pending-dlq"
//! target = { queue = "jobs.fifo", message_group_id = "<$.dynamodb.Keys.pk.S>" }
//!
//! [pipes.report-ready]
//! source = "jobs"
//! target = { bus = "reports", detail_type = "ReportReady", source = "postbox.reports" }
//!
//! [[buses.reports.rules]]
//! name = "log-ready"
//! pattern = '{"detail-type": ["ReportReady"]}'
//! targets = [{ log = "reports.jsonl" }, { queue = "notify" }]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use postbox_item::Item;
use serde::Deserialize;

use crate::pattern::Pattern;
use crate::record::Projection;
use crate::template::Template;

/// Most filters on one pipe (Pipes' limit).
pub const MAX_FILTERS: usize = 5;
/// Default and bounds of the pipe settings.
pub const DEFAULT_BATCH_SIZE: usize = 10;
/// Default retries of a failing batch before it is bisected.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// Default maximum record age: the stream's retention.
pub const DEFAULT_MAX_RECORD_AGE: Duration = Duration::from_secs(24 * 3600);
/// Default first retry delay (doubled per retry, capped at 30 s).
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// The engine's events table.
pub const DEFAULT_EVENTS_TABLE: &str = postbox_topology::EVENTS_TABLE;
/// The FIFO queue the default events pipe fills.
pub const DEFAULT_EVENTS_QUEUE: &str = postbox_topology::EVENTS_QUEUE;
/// The standard queue the default row-change pipes fill.
pub const DEFAULT_ROW_CHANGES_QUEUE: &str = postbox_topology::ROW_CHANGES_QUEUE;

/// A config value that cannot run, naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The dotted path of the field, e.g. `pipes.jobs.batch_size`.
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

fn err<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        field: field.into(),
        message: message.into(),
    })
}

// ---- the file as written ----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    relay: RelayToml,
    #[serde(default)]
    pipes: BTreeMap<String, PipeToml>,
    #[serde(default)]
    buses: BTreeMap<String, BusToml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RelayToml {
    lease_seconds: Option<u64>,
    create_missing_queues: Option<bool>,
    /// Run the default events pipe.
    events_pipe: Option<bool>,
    events_table: Option<String>,
    events_queue: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PipeToml {
    source: String,
    start_position: Option<String>,
    #[serde(default)]
    filters: Vec<String>,
    input_template: Option<String>,
    target: TargetToml,
    batch_size: Option<i64>,
    max_retries: Option<i64>,
    max_record_age_seconds: Option<i64>,
    bisect_on_failure: Option<bool>,
    dead_letter_queue: Option<String>,
    retry_backoff_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetToml {
    queue: Option<String>,
    bus: Option<String>,
    log: Option<PathBuf>,
    message_group_id: Option<String>,
    message_deduplication_id: Option<String>,
    detail_type: Option<String>,
    source: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BusToml {
    #[serde(default)]
    rules: Vec<RuleToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleToml {
    name: String,
    pattern: String,
    targets: Vec<TargetToml>,
}

// ---- the validated forms ----

/// Where a pipe starts reading a stream it has no checkpoint for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartPosition {
    /// The oldest retained record.
    TrimHorizon,
    /// Only records committed after the pipe first started.
    Latest,
}

/// A queue a pipe or a rule delivers to.
#[derive(Clone, Debug)]
pub struct QueueTarget {
    /// The queue's name; `.fifo` names a FIFO queue.
    pub queue: String,
    /// Whether it is a FIFO queue.
    pub fifo: bool,
    /// MessageGroupId, rendered over the delivered document (FIFO).
    pub group_id: Option<Template>,
    /// MessageDeduplicationId, rendered over the delivered document (FIFO).
    pub dedup_id: Option<Template>,
}

/// What a pipe delivers to.
#[derive(Clone, Debug)]
pub enum PipeTarget {
    /// A queue: the rendered input is the message body.
    Queue(QueueTarget),
    /// An event bus: the rendered input is the `detail` of an event.
    Bus {
        /// The bus's name.
        bus: String,
        /// The event's `detail-type`.
        detail_type: String,
        /// The event's `source`.
        source: String,
    },
}

/// One target of a bus rule.
#[derive(Clone, Debug)]
pub enum RuleTarget {
    /// The event as the message body.
    Queue(QueueTarget),
    /// The event appended as one JSON line (fsync'd before the checkpoint moves).
    Log(PathBuf),
    /// The event put on another bus.
    Bus(String),
}

/// A rule of a bus: a pattern over the event and where matches go.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The rule's name.
    pub name: String,
    /// The pattern events must match.
    pub pattern: Pattern,
    /// Where matching events go.
    pub targets: Vec<RuleTarget>,
}

/// A validated pipe.
#[derive(Clone, Debug)]
pub struct PipeSpec {
    /// The pipe's name (its checkpoint reader and lease are named after it).
    pub name: String,
    /// The table whose stream it reads.
    pub table: String,
    /// Where it starts without a checkpoint.
    pub start: StartPosition,
    /// A record passes when any filter matches (none: every record).
    pub filters: Vec<Pattern>,
    /// Warnings about the filters, for the operator.
    pub warnings: Vec<String>,
    /// The input template (the whole record when none is given).
    pub template: Template,
    /// Where it delivers.
    pub target: PipeTarget,
    /// Records per delivery batch (1-10).
    pub batch_size: usize,
    /// Retries of a failing batch before it is bisected.
    pub max_retries: u32,
    /// Records older than this go to the dead-letter queue.
    pub max_record_age: Duration,
    /// Whether a failing batch is split to find the bad record.
    pub bisect_on_failure: bool,
    /// Where failed records go, with the reason.
    pub dead_letter_queue: String,
    /// The first retry delay.
    pub retry_backoff: Duration,
}

/// The relay section of the config: pipes, buses, lease.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// The pipes, by name order.
    pub pipes: Vec<PipeSpec>,
    /// The buses and their rules.
    pub buses: BTreeMap<String, Vec<Rule>>,
    /// How long a relay's lease on a pipe lasts without renewal.
    pub lease: Duration,
    /// Whether missing target and dead-letter queues are created at start.
    pub create_missing_queues: bool,
}

impl PipeSpec {
    /// The queues this pipe may deliver to: its dead-letter queue, then its
    /// target queue or, for a bus target, the queue targets of every bus's
    /// rules (an event can reach any bus through the rules' bus targets).
    pub fn queues(&self, buses: &BTreeMap<String, Vec<Rule>>) -> Vec<String> {
        let mut wanted = vec![self.dead_letter_queue.clone()];
        match &self.target {
            PipeTarget::Queue(q) => wanted.push(q.queue.clone()),
            PipeTarget::Bus { .. } => {
                for rule in buses.values().flatten() {
                    for t in &rule.targets {
                        if let RuleTarget::Queue(q) = t {
                            wanted.push(q.queue.clone());
                        }
                    }
                }
            }
        }
        wanted
    }
}

impl RelayConfig {
    /// Parses and validates the relay part of a config file.
    pub fn from_toml(text: &str) -> Result<RelayConfig, ConfigError> {
        let file: FileToml = toml::from_str(text).map_err(|e| ConfigError {
            field: "config".to_owned(),
            message: e.to_string().trim().to_owned(),
        })?;
        let lease = match file.relay.lease_seconds {
            None => Duration::from_secs(10),
            Some(s @ 1..=600) => Duration::from_secs(s),
            Some(s) => {
                return err(
                    "relay.lease_seconds",
                    format!("must be between 1 and 600, got {s}"),
                );
            }
        };
        let mut buses = BTreeMap::new();
        for (name, bus) in &file.buses {
            buses.insert(name.clone(), rules(name, bus, &file.buses)?);
        }
        check_bus_cycles(&buses)?;
        let mut pipes: Vec<PipeSpec> = file
            .pipes
            .iter()
            .map(|(name, p)| pipe(name, p, &buses))
            .collect::<Result<_, _>>()?;
        if file.relay.events_pipe.unwrap_or(false) {
            if file.pipes.contains_key("events") {
                return err(
                    "pipes.events",
                    "the name is taken by the default events pipe (relay.events_pipe = true)",
                );
            }
            let table = file
                .relay
                .events_table
                .as_deref()
                .unwrap_or(DEFAULT_EVENTS_TABLE);
            let queue = file
                .relay
                .events_queue
                .as_deref()
                .unwrap_or(DEFAULT_EVENTS_QUEUE);
            if !queue.ends_with(".fifo") {
                return err(
                    "relay.events_queue",
                    format!(
                        "the events queue must be a FIFO queue (name ending in .fifo), got {queue:?}"
                    ),
                );
            }
            pipes.push(default_events_pipe(table, queue));
        }
        Ok(RelayConfig {
            pipes,
            buses,
            lease,
            create_missing_queues: file.relay.create_missing_queues.unwrap_or(true),
        })
    }

    /// The pipe called `name`.
    pub fn pipe(&self, name: &str) -> Option<&PipeSpec> {
        self.pipes.iter().find(|p| p.name == name)
    }
}

impl PipeSpec {
    /// What this pipe reads of a record rendered with its
    /// [`Images`](crate::template::Images): its filters' and templates'
    /// paths, and the trace attribute.
    pub fn projection(&self) -> Projection {
        let mut p = Projection::nothing();
        let mut add = |path: &[&str]| p.add(path);
        for filter in &self.filters {
            filter.visit_paths(&mut add);
        }
        self.template.visit_record_paths(&mut add);
        if let PipeTarget::Queue(q) = &self.target {
            for t in [&q.group_id, &q.dedup_id].into_iter().flatten() {
                t.visit_record_paths(&mut add);
            }
            if q.fifo && q.dedup_id.is_none() {
                // A FIFO message deduplicates on the record's eventID.
                add(&["eventID"]);
            }
        }
        add(&["dynamodb", "NewImage", postbox_trace::ATTRIBUTE]);
        p
    }

    /// Whether the pipe's filters can refuse a record on its keys alone:
    /// each of them says something of `dynamodb.Keys`. Such a pipe reads a
    /// record's images only when [`PipeSpec::keys_allow`] its keys.
    pub fn filters_on_keys(&self) -> bool {
        !self.filters.is_empty() && self.filters.iter().all(Pattern::has_keys_field)
    }

    /// Whether a record with `keys` may pass the pipe's filters: false only
    /// when none of them can match it, whatever its images hold.
    pub fn keys_allow(&self, keys: &Item) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| f.keys_allow(keys))
    }
}

/// The default events pipe: INSERTs of event rows of `table`
/// only (head and checkpoint rows dropped), the raw NewImage as the body,
/// MessageGroupId = tenant, MessageDeduplicationId = event id, into the
/// FIFO queue `queue`.
///
/// The filter selects inserts of event rows without naming eventName
/// (Pipes cannot filter on it): the key's `pk` ends in `#EVENT`, the new
/// image has an `id` (not a removal), and there is no old image (not a
/// modification).
pub fn default_events_pipe(table: &str, queue: &str) -> PipeSpec {
    use postbox_topology::keys::{EVENT_SUFFIX, PK};
    let filter = serde_json::json!({"dynamodb": {
        "Keys": {PK: {"S": [{"suffix": EVENT_SUFFIX}]}},
        "NewImage": {"id": {"S": [{"exists": true}]}},
        "OldImage": {PK: {"S": [{"exists": false}]}},
    }})
    .to_string();
    let template = |t: &str| Template::parse(t).expect("valid template");
    PipeSpec {
        name: "events".to_owned(),
        table: table.to_owned(),
        start: StartPosition::TrimHorizon,
        filters: vec![Pattern::parse(&filter).expect("valid pattern").0],
        warnings: Vec::new(),
        template: template("<$.dynamodb.NewImage>"),
        target: PipeTarget::Queue(QueueTarget {
            queue: queue.to_owned(),
            fifo: queue.ends_with(".fifo"),
            group_id: Some(template("<$.dynamodb.NewImage.tenant.S>")),
            dedup_id: Some(template("<$.dynamodb.NewImage.id.S>")),
        }),
        batch_size: DEFAULT_BATCH_SIZE,
        max_retries: DEFAULT_MAX_RETRIES,
        max_record_age: DEFAULT_MAX_RECORD_AGE,
        bisect_on_failure: true,
        dead_letter_queue: postbox_topology::EVENTS_RELAY_DLQ.to_owned(),
        retry_backoff: DEFAULT_RETRY_BACKOFF,
    }
}

/// The default row-change pipes (lane BEST_EFFORT): one per table
/// of `entities` (pairs of the catalog's entity name and its table),
/// forwarding every stream record of an item of a declared entity — `pk`
/// equal to the name or starting with `<name>#` — whole, as the Pipe sees
/// it, to the standard queue `queue`. The row-change consumer derives the
/// type `row:<ENTITY>:<INSERT|MODIFY|REMOVE>` from the record.
///
/// Rows of other entities on the same tables are filtered out here rather
/// than counted as "delivered to nobody" downstream: the catalog does not
/// declare them, so no subscription can match them. Entity tables are keyed
/// by `pk`, as Postbox's own tables are. A pipe is named `rows-<table>`.
pub fn default_row_change_pipes(entities: &[(&str, &str)], queue: &str) -> Vec<PipeSpec> {
    let mut tables: Vec<(&str, Vec<&str>)> = Vec::new();
    for &(entity, table) in entities {
        match tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, names)) if names.contains(&entity) => {}
            Some((_, names)) => names.push(entity),
            None => tables.push((table, vec![entity])),
        }
    }
    tables
        .into_iter()
        .map(|(table, names)| row_change_pipe(table, &names, queue))
        .collect()
}

fn row_change_pipe(table: &str, entities: &[&str], queue: &str) -> PipeSpec {
    let keys: Vec<serde_json::Value> = entities
        .iter()
        .flat_map(|e| {
            [
                serde_json::json!(e),
                serde_json::json!({"prefix": format!("{e}#")}),
            ]
        })
        .collect();
    let filter = serde_json::json!({"dynamodb": {"Keys": {"pk": {"S": keys}}}}).to_string();
    let name = format!("rows-{table}");
    PipeSpec {
        dead_letter_queue: format!("{name}-dlq"),
        name,
        table: table.to_owned(),
        start: StartPosition::TrimHorizon,
        filters: vec![Pattern::parse(&filter).expect("valid pattern").0],
        warnings: Vec::new(),
        template: Template::whole_record(),
        target: PipeTarget::Queue(QueueTarget {
            queue: queue.to_owned(),
            fifo: queue.ends_with(".fifo"),
            group_id: None,
            dedup_id: None,
        }),
        batch_size: DEFAULT_BATCH_SIZE,
        max_retries: DEFAULT_MAX_RETRIES,
        max_record_age: DEFAULT_MAX_RECORD_AGE,
        bisect_on_failure: true,
        retry_backoff: DEFAULT_RETRY_BACKOFF,
    }
}

fn pipe(
    name: &str,
    p: &PipeToml,
    buses: &BTreeMap<String, Vec<Rule>>,
) -> Result<PipeSpec, ConfigError> {
    let field = |f: &str| format!("pipes.{name}.{f}");
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return err(
            format!("pipes.{name}"),
            "a pipe name is 1-64 letters, digits, '-', '_' or '.'",
        );
    }
    if p.source.is_empty() {
        return err(
            field("source"),
            "name the table whose stream the pipe reads",
        );
    }
    let start = match p.start_position.as_deref() {
        None | Some("TRIM_HORIZON") => StartPosition::TrimHorizon,
        Some("LATEST") => StartPosition::Latest,
        Some(other) => {
            return err(
                field("start_position"),
                format!("must be TRIM_HORIZON or LATEST, got {other:?}"),
            );
        }
    };
    if p.filters.len() > MAX_FILTERS {
        return err(
            field("filters"),
            format!("at most {MAX_FILTERS} filters, got {}", p.filters.len()),
        );
    }
    let mut filters = Vec::new();
    let mut warnings = Vec::new();
    for (i, text) in p.filters.iter().enumerate() {
        let (pattern, w) = Pattern::parse(text)
            .or_else(|e| err(format!("{}[{i}]", field("filters")), e.to_string()))?;
        warnings.extend(
            w.into_iter()
                .map(|w| format!("{}[{i}]: {w}", field("filters"))),
        );
        filters.push(pattern);
    }
    let template = match &p.input_template {
        None => Template::whole_record(),
        Some(t) => Template::parse(t).or_else(|e| err(field("input_template"), e.to_string()))?,
    };
    let target = pipe_target(&field("target"), &p.target, buses)?;
    let batch_size = bounded(
        &field("batch_size"),
        p.batch_size,
        DEFAULT_BATCH_SIZE as i64,
        1,
        10,
    )? as usize;
    let max_retries = bounded(
        &field("max_retries"),
        p.max_retries,
        DEFAULT_MAX_RETRIES as i64,
        0,
        10_000,
    )? as u32;
    let age = bounded(
        &field("max_record_age_seconds"),
        p.max_record_age_seconds,
        DEFAULT_MAX_RECORD_AGE.as_secs() as i64,
        60,
        604_800,
    )?;
    let backoff = bounded(
        &field("retry_backoff_ms"),
        p.retry_backoff_ms,
        DEFAULT_RETRY_BACKOFF.as_millis() as i64,
        1,
        60_000,
    )?;
    let dead_letter_queue = p
        .dead_letter_queue
        .clone()
        .unwrap_or_else(|| format!("{name}-dlq"));
    if dead_letter_queue.is_empty() {
        return err(field("dead_letter_queue"), "must name a queue");
    }
    Ok(PipeSpec {
        name: name.to_owned(),
        table: p.source.clone(),
        start,
        filters,
        warnings,
        template,
        target,
        batch_size,
        max_retries,
        max_record_age: Duration::from_secs(age as u64),
        bisect_on_failure: p.bisect_on_failure.unwrap_or(true),
        dead_letter_queue,
        retry_backoff: Duration::from_millis(backoff as u64),
    })
}

fn bounded(
    field: &str,
    value: Option<i64>,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, ConfigError> {
    match value.unwrap_or(default) {
        v if (min..=max).contains(&v) => Ok(v),
        v => err(field, format!("must be between {min} and {max}, got {v}")),
    }
}

fn pipe_target(
    field: &str,
    t: &TargetToml,
    buses: &BTreeMap<String, Vec<Rule>>,
) -> Result<PipeTarget, ConfigError> {
    if t.log.is_some() {
        return err(
            field,
            "a pipe delivers to a queue or a bus; log files are targets of bus rules",
        );
    }
    match (&t.queue, &t.bus) {
        (Some(_), None) => Ok(PipeTarget::Queue(queue_target(field, t)?)),
        (None, Some(bus)) => {
            if !buses.contains_key(bus) {
                return err(
                    format!("{field}.bus"),
                    format!("no bus {bus:?} is declared under [buses]"),
                );
            }
            let need = |v: &Option<String>, f: &str| match v {
                Some(s) if !s.is_empty() => Ok(s.clone()),
                _ => err(format!("{field}.{f}"), "required for a bus target"),
            };
            Ok(PipeTarget::Bus {
                bus: bus.clone(),
                detail_type: need(&t.detail_type, "detail_type")?,
                source: need(&t.source, "source")?,
            })
        }
        _ => err(field, "set exactly one of queue or bus"),
    }
}

fn queue_target(field: &str, t: &TargetToml) -> Result<QueueTarget, ConfigError> {
    let queue = t.queue.clone().unwrap_or_default();
    if queue.is_empty() {
        return err(format!("{field}.queue"), "must name a queue");
    }
    let fifo = queue.ends_with(".fifo");
    let id_template = |v: &Option<String>, f: &str| -> Result<Option<Template>, ConfigError> {
        let Some(text) = v else { return Ok(None) };
        if !fifo {
            return err(
                format!("{field}.{f}"),
                format!("only FIFO queues (names ending in .fifo) take a {f}"),
            );
        }
        let t = Template::parse(text).or_else(|e| err(format!("{field}.{f}"), e.to_string()))?;
        if t.is_json() {
            return err(
                format!("{field}.{f}"),
                "must be a plain-text template, e.g. \"<$.dynamodb.Keys.pk.S>\"",
            );
        }
        Ok(Some(t))
    };
    let group_id = id_template(&t.message_group_id, "message_group_id")?;
    if fifo && group_id.is_none() {
        return err(
            format!("{field}.message_group_id"),
            "required for a FIFO queue",
        );
    }
    let dedup_id = id_template(&t.message_deduplication_id, "message_deduplication_id")?;
    if t.detail_type.is_some() || t.source.is_some() {
        return err(field, "detail_type and source belong to bus targets");
    }
    Ok(QueueTarget {
        queue,
        fifo,
        group_id,
        dedup_id,
    })
}

fn rules(
    bus: &str,
    b: &BusToml,
    all: &BTreeMap<String, BusToml>,
) -> Result<Vec<Rule>, ConfigError> {
    let mut out = Vec::new();
    for (i, r) in b.rules.iter().enumerate() {
        let field = format!("buses.{bus}.rules[{i}]");
        let (pattern, _) = Pattern::parse(&r.pattern)
            .or_else(|e| err(format!("{field}.pattern"), e.to_string()))?;
        if r.targets.is_empty() {
            return err(
                format!("{field}.targets"),
                "a rule needs at least one target",
            );
        }
        let mut targets = Vec::new();
        for (j, t) in r.targets.iter().enumerate() {
            let tf = format!("{field}.targets[{j}]");
            targets.push(match (&t.queue, &t.log, &t.bus) {
                (Some(_), None, None) => RuleTarget::Queue(queue_target(&tf, t)?),
                (None, Some(path), None) => RuleTarget::Log(path.clone()),
                (None, None, Some(other)) if all.contains_key(other) => {
                    RuleTarget::Bus(other.clone())
                }
                (None, None, Some(other)) => {
                    return err(format!("{tf}.bus"), format!("no bus {other:?} is declared"));
                }
                _ => return err(tf, "set exactly one of queue, log or bus"),
            });
        }
        out.push(Rule {
            name: r.name.clone(),
            pattern,
            targets,
        });
    }
    Ok(out)
}

/// Refuses buses that forward to each other in a loop: an event would
/// circulate for ever.
fn check_bus_cycles(buses: &BTreeMap<String, Vec<Rule>>) -> Result<(), ConfigError> {
    fn visit(
        bus: &str,
        buses: &BTreeMap<String, Vec<Rule>>,
        path: &mut Vec<String>,
    ) -> Result<(), ConfigError> {
        if path.iter().any(|b| b == bus) {
            path.push(bus.to_owned());
            return err(
                format!("buses.{}", path[0]),
                format!(
                    "buses forward to each other in a loop: {}",
                    path.join(" -> ")
                ),
            );
        }
        path.push(bus.to_owned());
        for rule in buses.get(bus).into_iter().flatten() {
            for t in &rule.targets {
                if let RuleTarget::Bus(next) = t {
                    visit(next, buses, path)?;
                }
            }
        }
        path.pop();
        Ok(())
    }
    for bus in buses.keys() {
        visit(bus, buses, &mut Vec::new())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(toml: &str, field: &str, why: &str) {
        let e = RelayConfig::from_toml(toml).expect_err(toml);
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(why), "{e}");
    }

    const QUEUE: &str = "target = { queue = \"q\" }";

    #[test]
    fn defaults_are_bounded() {
        let c = RelayConfig::from_toml(&format!("[pipes.p]\nsource = \"t\"\n{QUEUE}\n")).unwrap();
        let p = &c.pipes[0];
        assert_eq!(
            (p.batch_size, p.max_retries, p.bisect_on_failure),
            (10, 3, true)
        );
        assert_eq!(p.max_record_age, DEFAULT_MAX_RECORD_AGE);
        assert_eq!(p.dead_letter_queue, "p-dlq");
        assert_eq!(p.start, StartPosition::TrimHorizon);
        assert_eq!(c.lease, Duration::from_secs(10));
    }

    #[test]
    fn errors_name_the_field() {
        let pipe = |extra: &str| format!("[pipes.p]\nsource = \"t\"\n{QUEUE}\n{extra}\n");
        refused(
            &pipe("batch_size = 11"),
            "pipes.p.batch_size",
            "between 1 and 10, got 11",
        );
        refused(
            &pipe("max_retries = -1"),
            "pipes.p.max_retries",
            "between 0 and 10000",
        );
        refused(
            &pipe("max_record_age_seconds = 5"),
            "pipes.p.max_record_age_seconds",
            "between 60 and 604800",
        );
        refused(
            &pipe("start_position = \"AT_TIMESTAMP\""),
            "pipes.p.start_position",
            "TRIM_HORIZON or LATEST",
        );
        refused(
            &pipe("filters = ['{\"a\": \"x\"}']"),
            "pipes.p.filters[0]",
            "must be an object or an array",
        );
        refused(
            &pipe("input_template = '<$.a..b>'"),
            "pipes.p.input_template",
            "empty field name",
        );
        refused(
            "[pipes.p]\nsource = \"t\"\ntarget = { queue = \"q.fifo\" }\n",
            "pipes.p.target.message_group_id",
            "required for a FIFO",
        );
        refused(
            "[pipes.p]\nsource = \"t\"\ntarget = { queue = \"q\", message_group_id = \"x\" }\n",
            "pipes.p.target.message_group_id",
            "only FIFO",
        );
        refused(
            "[pipes.p]\nsource = \"t\"\ntarget = { bus = \"nope\", detail_type = \"d\", source = \"s\" }\n",
            "pipes.p.target.bus",
            "no bus",
        );
        refused(
            "[pipes.p]\nsource = \"t\"\ntarget = {}\n",
            "pipes.p.target",
            "exactly one of queue or bus",
        );
        refused(&pipe("retries = 3"), "config", "unknown field `retries`");
        refused(
            "[[buses.a.rules]]\nname = \"r\"\npattern = '{\"x\": [1]}'\ntargets = [{ bus = \"b\" }]\n[[buses.b.rules]]\nname = \"r\"\npattern = '{\"x\": [1]}'\ntargets = [{ bus = \"a\" }]\n",
            "buses.a",
            "a -> b -> a",
        );
    }

    #[test]
    fn event_name_filters_warn() {
        let c = RelayConfig::from_toml(&format!(
            "[pipes.p]\nsource = \"t\"\n{QUEUE}\nfilters = ['{{\"eventName\": [\"INSERT\"]}}']\n"
        ))
        .unwrap();
        assert_eq!(c.pipes[0].warnings.len(), 1);
        assert!(
            c.pipes[0].warnings[0].starts_with("pipes.p.filters[0]: eventName:"),
            "{}",
            c.pipes[0].warnings[0]
        );
    }
}

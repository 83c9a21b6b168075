//! `postbox synth`: the CloudFormation template of the stack Postbox runs
//! on in AWS, from the pipes config (and the catalog): the tables `postbox
//! init --backend aws` would create (one definition, `init::tables`), the
//! queues with dead-letter queues and redrive policies, one EventBridge Pipe
//! per configured pipe with every setting explicit (never an unbounded retry
//! or record age), event buses and rules, least-privilege IAM roles, and an
//! alarm on every dead-letter queue and pipe.
//!
//! Pure: [`template`] maps a [`Stack`] to JSON; nothing is deployed.
//! What Pipes cannot express is refused with the pipe and the reason: a
//! FIFO dead-letter queue on a stream source, a group or deduplication id
//! template that is not one path, a rule target that is another bus.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use postbox_engine::{Catalog, Lane};
use postbox_relay::RelayConfig;
use postbox_relay::config::{PipeSpec, PipeTarget, QueueTarget, RuleTarget, StartPosition};
use postbox_relay::template::Template;
use postbox_store::api::{CreateTableInput, KeyType, ScalarType};
use postbox_topology::Topology;
use serde_json::{Map, Value, json};

mod guards;
mod pipes;

use guards::{add_alarms, add_roles, alarm_topic};
use pipes::add_pipe;

/// `postbox synth`
#[derive(clap::Args)]
pub struct SynthArgs {
    /// The relay config whose pipes and buses to deploy (default: the
    /// default events pipe alone).
    #[arg(long, env = "POSTBOX_PIPES")]
    pipes: Option<PathBuf>,
    /// The event catalog: with a DURABLE subscription, the default events
    /// pipe is added when the pipes config lacks it.
    #[arg(long, env = "POSTBOX_CATALOG")]
    catalog: Option<PathBuf>,
    /// The prefix of every table, queue, pipe and bus name (as `--aws-prefix`).
    #[arg(long, default_value = "", env = "POSTBOX_AWS_PREFIX")]
    prefix: String,
    /// Send the alarms to this SNS topic.
    #[arg(long, conflicts_with = "alarm_email")]
    alarm_topic: Option<String>,
    /// Create an SNS topic for the alarms with this address subscribed.
    #[arg(long)]
    alarm_email: Option<String>,
    /// Write the template here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The template's format (default: YAML when --out ends in .yaml or
    /// .yml, else JSON).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Instead of writing the template, run every pipe's filters and input
    /// template over these sample stream records (JSON files, or
    /// directories of them): fail on a record a pipe would dead-letter (a
    /// template path that does not resolve, which a deployed Pipe turns
    /// into an empty value in silence) and on a filter a Pipe cannot apply.
    #[arg(long, num_args = 1..)]
    check: Vec<PathBuf>,
}

/// A template's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML (block style; every string quoted, so nothing is read as a
    /// number, a boolean or a tag).
    Yaml,
}

/// Where the alarms go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Alarms {
    /// An existing SNS topic.
    Topic(String),
    /// A topic made by the stack, with this address subscribed.
    Email(String),
    /// A topic made by the stack, with no subscription (add one later).
    NewTopic,
}

/// What the template deploys.
#[derive(Clone, Debug)]
pub struct Stack {
    /// Name prefix.
    pub prefix: String,
    /// Pipes and buses.
    pub relay: RelayConfig,
    /// Where the alarms go.
    pub alarms: Alarms,
}

pub fn run(args: SynthArgs) -> ExitCode {
    if !args.check.is_empty() {
        return match check(&args) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(CheckFailure::Input(e)) => {
                eprintln!("error: {e}");
                ExitCode::from(crate::http::EXIT_REFUSED)
            }
            Err(CheckFailure::Problems(list)) => {
                for p in &list {
                    eprintln!("{p}");
                }
                eprintln!(
                    "error: {} problem(s); the stack would deliver wrong or nothing",
                    list.len()
                );
                ExitCode::FAILURE
            }
        };
    }
    match synth(&args) {
        Ok(text) => match &args.out {
            Some(path) => match std::fs::write(path, text + "\n") {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    ExitCode::FAILURE
                }
            },
            None => {
                println!("{text}");
                ExitCode::SUCCESS
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(crate::http::EXIT_REFUSED)
        }
    }
}

/// Why `synth --check` did not pass.
enum CheckFailure {
    /// A file could not be read or is not a record.
    Input(String),
    /// What the records and the pipes showed.
    Problems(Vec<String>),
}

/// `synth --check`: every record through every pipe.
fn check(args: &SynthArgs) -> Result<String, CheckFailure> {
    let relay = relay_config(args).map_err(CheckFailure::Input)?;
    let mut files = Vec::new();
    for path in &args.check {
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .map_err(|e| CheckFailure::Input(format!("{}: {e}", path.display())))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    if files.is_empty() {
        return Err(CheckFailure::Input("--check names no record files".into()));
    }
    let mut problems = Vec::new();
    for pipe in &relay.pipes {
        for w in &pipe.warnings {
            problems.push(format!("pipe {}: {w}", pipe.name));
        }
    }
    let mut report = String::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CheckFailure::Input(format!("{}: {e}", file.display())))?;
        for pipe in &relay.pipes {
            match postbox_relay::plan::test_record_text(&relay, &pipe.name, &text) {
                Ok(out) => {
                    let first = out
                        .text
                        .lines()
                        .find(|l| !l.starts_with("warning:"))
                        .unwrap_or("");
                    report.push_str(&format!(
                        "{} -> pipe {}: {first}\n",
                        file.display(),
                        pipe.name
                    ));
                }
                Err(postbox_relay::plan::TestError::Input(e)) => {
                    return Err(CheckFailure::Input(format!("{}: {e}", file.display())));
                }
                Err(postbox_relay::plan::TestError::Dead(e)) => {
                    problems.push(format!("{} -> pipe {}: {e}", file.display(), pipe.name));
                }
            }
        }
    }
    if problems.is_empty() {
        report.push_str(&format!(
            "checked {} record(s) against {} pipe(s): ok\n",
            files.len(),
            relay.pipes.len()
        ));
        Ok(report)
    } else {
        Err(CheckFailure::Problems(problems))
    }
}

/// The pipes `synth` deploys: the config's, plus the default events pipe
/// when the catalog has a DURABLE subscription and the config lacks it.
fn relay_config(args: &SynthArgs) -> Result<RelayConfig, String> {
    let mut relay = match &args.pipes {
        Some(path) => crate::pipe::load(path)?,
        None => RelayConfig::from_toml("[relay]\nevents_pipe = true\n").expect("valid"),
    };
    if let Some(path) = &args.catalog {
        let catalog = Catalog::load(path).map_err(|e| e.to_string())?;
        let durable = catalog
            .subscriptions
            .iter()
            .any(|s| s.lane == Lane::Durable);
        if durable && !relay.pipes.iter().any(|p| p.name == "events") {
            let t = Topology::default();
            relay.pipes.push(postbox_relay::config::default_events_pipe(
                &t.events_table,
                &t.events_queue,
            ));
        }
    }
    Ok(relay)
}

fn synth(args: &SynthArgs) -> Result<String, String> {
    let relay = relay_config(args)?;
    let alarms = match (&args.alarm_topic, &args.alarm_email) {
        (Some(arn), _) => Alarms::Topic(arn.clone()),
        (None, Some(email)) => Alarms::Email(email.clone()),
        (None, None) => Alarms::NewTopic,
    };
    let template = template(&Stack {
        prefix: args.prefix.clone(),
        relay,
        alarms,
    })?;
    let yaml = args
        .out
        .as_ref()
        .and_then(|p| p.extension())
        .is_some_and(|x| x == "yaml" || x == "yml");
    Ok(
        match args
            .format
            .unwrap_or(if yaml { Format::Yaml } else { Format::Json })
        {
            Format::Json => serde_json::to_string_pretty(&template).expect("JSON"),
            Format::Yaml => {
                let mut out = String::new();
                to_yaml(&template, 0, &mut out);
                out.trim_end().to_owned()
            }
        },
    )
}

/// `value` as block-style YAML at `indent`: maps and lists nested by two
/// spaces, scalars in their JSON form (a JSON string is a YAML
/// double-quoted scalar with the same escapes).
fn to_yaml(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                out.push_str(&pad);
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                yaml_child(v, indent, out);
            }
        }
        Value::Array(list) if !list.is_empty() => {
            for v in list {
                out.push_str(&pad);
                out.push('-');
                yaml_child(v, indent, out);
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&scalar.to_string());
            out.push('\n');
        }
    }
}

/// The value after `key:` or `-`: on the same line when a scalar (or an
/// empty map or list), else on the next lines, indented.
fn yaml_child(v: &Value, indent: usize, out: &mut String) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            to_yaml(v, indent + 2, out);
        }
        Value::Array(l) if !l.is_empty() => {
            out.push('\n');
            to_yaml(v, indent + 2, out);
        }
        scalar => {
            out.push(' ');
            out.push_str(&scalar.to_string());
            out.push('\n');
        }
    }
}

/// A CloudFormation logical id from any name: its alphanumeric runs,
/// capitalised and joined, then `kind`.
fn logical(name: &str, kind: &str) -> String {
    let mut out = String::new();
    for part in name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
    {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    out.push_str(kind);
    out
}

fn get_att(id: &str, attribute: &str) -> Value {
    json!({"Fn::GetAtt": [id, attribute]})
}

fn reference(id: &str) -> Value {
    json!({"Ref": id})
}

/// The template being built.
struct Builder<'a> {
    stack: &'a Stack,
    resources: Map<String, Value>,
    outputs: Map<String, Value>,
    parameters: Map<String, Value>,
    /// Logical ids of the dead-letter queues, for their alarms.
    dlqs: BTreeSet<String>,
}

impl Builder<'_> {
    fn name(&self, name: &str) -> String {
        format!("{}{name}", self.stack.prefix)
    }

    fn add(&mut self, id: &str, resource: Value) {
        self.resources.insert(id.to_owned(), resource);
    }

    fn output(&mut self, id: &str, value: Value, description: &str) {
        self.outputs.insert(
            id.to_owned(),
            json!({"Description": description, "Value": value}),
        );
    }

    fn table(&mut self, input: &CreateTableInput, ttl: Option<&str>) -> String {
        let id = logical(&input.table_name, "Table");
        let scalar = |t: &ScalarType| match t {
            ScalarType::S => "S",
            ScalarType::N => "N",
            ScalarType::B => "B",
        };
        let mut props = json!({
            "TableName": self.name(&input.table_name),
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": input.attribute_definitions.iter().map(|d| json!({
                "AttributeName": d.attribute_name, "AttributeType": scalar(&d.attribute_type),
            })).collect::<Vec<_>>(),
            "KeySchema": input.key_schema.iter().map(|k| json!({
                "AttributeName": k.attribute_name,
                "KeyType": if k.key_type == KeyType::Hash { "HASH" } else { "RANGE" },
            })).collect::<Vec<_>>(),
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": true},
        });
        if input
            .stream_specification
            .as_ref()
            .is_some_and(|s| s.stream_enabled)
        {
            props["StreamSpecification"] = json!({"StreamViewType": "NEW_AND_OLD_IMAGES"});
        }
        if let Some(attribute) = ttl {
            props["TimeToLiveSpecification"] = json!({"AttributeName": attribute, "Enabled": true});
        }
        self.add(
            &id,
            json!({
                "Type": "AWS::DynamoDB::Table",
                "DeletionPolicy": "Retain",
                "UpdateReplacePolicy": "Retain",
                "Properties": props,
            }),
        );
        self.output(&id, reference(&id), &format!("table {}", input.table_name));
        id
    }

    /// Queue `name` with `properties`; its logical id.
    fn queue(&mut self, name: &str, mut properties: Value) -> String {
        let full = self.name(name);
        // Two names with the same letters and digits ("a-b", "a.b") get
        // distinct ids; the same name, the same queue.
        let mut id = logical(name, "Queue");
        let mut n = 1;
        while let Some(existing) = self.resources.get(&id) {
            if existing["Properties"]["QueueName"] == full {
                return id;
            }
            n += 1;
            id = format!("{}{n}", logical(name, "Queue"));
        }
        properties["QueueName"] = json!(full);
        if name.ends_with(".fifo") {
            properties["FifoQueue"] = json!(true);
        }
        properties["MessageRetentionPeriod"] = json!(1_209_600);
        self.add(
            &id,
            json!({"Type": "AWS::SQS::Queue", "Properties": properties}),
        );
        self.output(&id, reference(&id), &format!("queue {name} (URL)"));
        id
    }

    /// A dead-letter queue (alarmed).
    fn dead_letter_queue(&mut self, name: &str) -> String {
        let id = self.queue(name, json!({}));
        self.dlqs.insert(id.clone());
        id
    }

    /// A delivery queue with a dead-letter queue of its own (`<queue>-dlq`)
    /// after `max_receives` receives.
    fn queue_with_dlq(&mut self, name: &str, max_receives: u32, fifo_per_group: bool) -> String {
        let dlq_name = match name.strip_suffix(".fifo") {
            Some(base) => format!("{base}-dlq.fifo"),
            None => format!("{name}-dlq"),
        };
        let dlq = self.dead_letter_queue(&dlq_name);
        let mut props = json!({
            // Above the worker's 30 s lease, so a message is not handed out
            // again while its claim is held.
            "VisibilityTimeout": 60,
            "RedrivePolicy": {"deadLetterTargetArn": get_att(&dlq, "Arn"), "maxReceiveCount": max_receives},
        });
        if fifo_per_group && name.ends_with(".fifo") {
            props["DeduplicationScope"] = json!("messageGroup");
            props["FifoThroughputLimit"] = json!("perMessageGroupId");
        }
        self.queue(name, props)
    }
}

/// The CloudFormation template of `stack`.
pub fn template(stack: &Stack) -> Result<Value, String> {
    let mut b = Builder {
        stack,
        resources: Map::new(),
        outputs: Map::new(),
        parameters: Map::new(),
        dlqs: BTreeSet::new(),
    };
    let topology = Topology::default();
    let mut table_ids = Vec::new();
    for want in crate::init::tables(&topology) {
        table_ids.push(b.table(&want.input, want.ttl));
    }
    let events_table = logical(&topology.events_table, "Table");
    // The events queue, as `init` makes it: its DLQ after 20 receives.
    let events_dlq = b.dead_letter_queue(&topology.events_dlq);
    let events_queue = b.queue(
        &topology.events_queue,
        json!({
            "VisibilityTimeout": 60,
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
            "RedrivePolicy": {"deadLetterTargetArn": get_att(&events_dlq, "Arn"), "maxReceiveCount": postbox_node::MAX_RECEIVE_COUNT},
        }),
    );

    // Buses first: pipes and rules address them.
    for (bus, rules) in &stack.relay.buses {
        let bus_id = logical(bus, "Bus");
        b.add(
            &bus_id,
            json!({"Type": "AWS::Events::EventBus", "Properties": {"Name": b.name(bus)}}),
        );
        b.output(
            &bus_id,
            get_att(&bus_id, "Arn"),
            &format!("event bus {bus}"),
        );
        for rule in rules {
            let rule_id = logical(&format!("{bus}-{}", rule.name), "Rule");
            let pattern: Value = serde_json::from_str(rule.pattern.source())
                .map_err(|e| format!("bus {bus}, rule {}: {e}", rule.name))?;
            let mut targets = Vec::new();
            for (i, target) in rule.targets.iter().enumerate() {
                let target_id = format!("t{i}");
                match target {
                    RuleTarget::Queue(q) => {
                        let queue = b.queue_with_dlq(&q.queue, 5, true);
                        let mut t = json!({"Id": target_id, "Arn": get_att(&queue, "Arn")});
                        if q.fifo {
                            let group = q.group_id.as_ref().ok_or_else(|| {
                                format!(
                                    "bus {bus}, rule {}: FIFO queue {} needs a message group id",
                                    rule.name, q.queue
                                )
                            })?;
                            t["SqsParameters"] = json!({"MessageGroupId": group.source()});
                        }
                        targets.push(t);
                        b.add(
                            &logical(&format!("{bus}-{}-{}", rule.name, q.queue), "QueuePolicy"),
                            json!({"Type": "AWS::SQS::QueuePolicy", "Properties": {
                                "Queues": [reference(&queue)],
                                "PolicyDocument": {"Version": "2012-10-17", "Statement": [{
                                    "Effect": "Allow",
                                    "Principal": {"Service": "events.amazonaws.com"},
                                    "Action": "sqs:SendMessage",
                                    "Resource": get_att(&queue, "Arn"),
                                    "Condition": {"ArnEquals": {"aws:SourceArn": get_att(&rule_id, "Arn")}},
                                }]},
                            }}),
                        );
                    }
                    RuleTarget::Log(_) => {
                        let group_id = logical(&format!("{bus}-{}", rule.name), "LogGroup");
                        b.add(
                            &group_id,
                            json!({"Type": "AWS::Logs::LogGroup", "Properties": {
                                "LogGroupName": format!("/aws/events/{}{bus}/{}", stack.prefix, rule.name),
                                "RetentionInDays": 30,
                            }}),
                        );
                        b.output(
                            &group_id,
                            reference(&group_id),
                            &format!("log group of rule {}", rule.name),
                        );
                        targets.push(json!({"Id": target_id, "Arn": get_att(&group_id, "Arn")}));
                        b.add(
                            &logical(&format!("{bus}-{}", rule.name), "LogPolicy"),
                            json!({"Type": "AWS::Logs::ResourcePolicy", "Properties": {
                                "PolicyName": format!("{}{bus}-{}-events", stack.prefix, rule.name),
                                "PolicyDocument": {"Fn::Sub": [
                                    "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":[\"events.amazonaws.com\",\"delivery.logs.amazonaws.com\"]},\"Action\":[\"logs:CreateLogStream\",\"logs:PutLogEvents\"],\"Resource\":\"${Group}\"}]}",
                                    {"Group": get_att(&group_id, "Arn")},
                                ]},
                            }}),
                        );
                    }
                    RuleTarget::Bus(other) => {
                        return Err(format!(
                            "bus {bus}, rule {}: a rule that targets another bus ({other}) is not synthesised yet",
                            rule.name
                        ));
                    }
                }
            }
            b.add(
                &rule_id,
                json!({"Type": "AWS::Events::Rule", "Properties": {
                    "EventBusName": reference(&bus_id),
                    "EventPattern": pattern,
                    "State": "ENABLED",
                    "Targets": targets,
                }}),
            );
        }
    }

    for pipe in &stack.relay.pipes {
        add_pipe(&mut b, pipe, &events_table, &events_queue, &topology)?;
    }
    add_roles(&mut b, &table_ids, &events_queue, &events_dlq);
    add_alarms(&mut b);

    let mut template = json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": format!("Postbox stack{} (postbox synth)", if stack.prefix.is_empty() { String::new() } else { format!(" {}", stack.prefix) }),
        "Resources": b.resources,
        "Outputs": b.outputs,
    });
    if !b.parameters.is_empty() {
        template["Parameters"] = Value::Object(b.parameters);
    }
    Ok(template)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(toml: &str) -> Value {
        template(&Stack {
            prefix: "shop-".into(),
            relay: RelayConfig::from_toml(toml).unwrap(),
            alarms: Alarms::NewTopic,
        })
        .unwrap()
    }

    fn of_type<'a>(t: &'a Value, kind: &str) -> Vec<(&'a String, &'a Value)> {
        t["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["Type"] == kind)
            .collect()
    }

    #[test]
    fn the_events_pipe_filters_event_rows_and_groups_by_tenant_with_bounded_retries() {
        let t = stack("[relay]\nevents_pipe = true\n");
        let pipe = &t["Resources"]["EventsPipe"]["Properties"];
        assert_eq!(pipe["Name"], "shop-events");
        assert_eq!(pipe["Source"], get_att("PostboxEventsTable", "StreamArn"));
        let stream = &pipe["SourceParameters"]["DynamoDBStreamParameters"];
        assert_eq!(stream["StartingPosition"], "TRIM_HORIZON");
        assert_eq!(stream["MaximumRetryAttempts"], 3);
        assert_eq!(stream["MaximumRecordAgeInSeconds"], 86_400);
        assert_eq!(stream["OnPartialBatchItemFailure"], "AUTOMATIC_BISECT");
        let filter = pipe["SourceParameters"]["FilterCriteria"]["Filters"][0]["Pattern"]
            .as_str()
            .unwrap();
        assert!(filter.contains("#EVENT"), "{filter}");
        let target = &pipe["TargetParameters"];
        assert_eq!(target["InputTemplate"], "<$.dynamodb.NewImage>");
        assert_eq!(
            target["SqsQueueParameters"],
            json!({"MessageGroupId": "$.dynamodb.NewImage.tenant.S", "MessageDeduplicationId": "$.dynamodb.NewImage.id.S"})
        );
        assert_eq!(pipe["LogConfiguration"]["Level"], "ERROR");
    }

    #[test]
    fn the_pipe_role_holds_exactly_the_stream_reads_the_sends_and_the_log_writes() {
        let t = stack("[relay]\nevents_pipe = true\n");
        let statements = &t["Resources"]["EventsPipeRole"]["Properties"]["Policies"][0]["PolicyDocument"]
            ["Statement"];
        let actions: Vec<Value> = statements
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Action"].clone())
            .collect();
        assert_eq!(
            actions,
            [
                json!([
                    "dynamodb:DescribeStream",
                    "dynamodb:GetRecords",
                    "dynamodb:GetShardIterator",
                    "dynamodb:ListStreams"
                ]),
                json!("sqs:SendMessage"),
                json!(["logs:CreateLogStream", "logs:PutLogEvents"]),
            ]
        );
        assert_eq!(
            statements[0]["Resource"],
            get_att("PostboxEventsTable", "StreamArn")
        );
        assert_eq!(
            statements[1]["Resource"],
            json!([
                get_att("EventsRelayDlqQueue", "Arn"),
                get_att("PostboxEventsFifoQueue", "Arn")
            ])
        );
    }

    #[test]
    fn every_queue_has_a_dead_letter_queue_and_every_dead_letter_queue_an_alarm() {
        let t = stack(
            "[pipes.jobs]\nsource = \"jobs\"\ntarget = { queue = \"jobs.fifo\", message_group_id = \"<$.dynamodb.NewImage.tenant.S>\" }\n",
        );
        let name = |v: &Value| v.as_str().unwrap().to_owned();
        let alarmed: BTreeSet<String> = of_type(&t, "AWS::CloudWatch::Alarm")
            .iter()
            .filter(|(_, a)| a["Properties"]["Namespace"] == "AWS/SQS")
            .map(|(_, a)| name(&a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]))
            .collect();
        let queues = of_type(&t, "AWS::SQS::Queue");
        let redriven: BTreeSet<String> = queues
            .iter()
            .filter_map(|(_, q)| q["Properties"].get("RedrivePolicy"))
            .map(|p| name(&p["deadLetterTargetArn"]["Fn::GetAtt"][0]))
            .collect();
        for (id, q) in &queues {
            let is_dlq = alarmed.contains(*id);
            assert!(
                is_dlq || q["Properties"].get("RedrivePolicy").is_some(),
                "{id} has no dead-letter queue"
            );
            if redriven.contains(*id) {
                assert!(is_dlq, "{id} receives dead letters and has no alarm");
            }
        }
        assert!(alarmed.contains("JobsDlqFifoQueue"), "{alarmed:?}");
        assert!(alarmed.contains("JobsDlqQueue"), "{alarmed:?}");
        // The application table is the user's: its stream is a parameter.
        assert_eq!(t["Parameters"]["JobsStreamArn"]["Type"], "String");
        // No pipe retries forever or keeps records forever.
        for (_, p) in of_type(&t, "AWS::Pipes::Pipe") {
            let s = &p["Properties"]["SourceParameters"]["DynamoDBStreamParameters"];
            assert!(s["MaximumRetryAttempts"].as_i64().unwrap() >= 0);
            assert!(s["MaximumRecordAgeInSeconds"].as_i64().unwrap() > 0);
        }
    }

    #[test]
    fn every_application_role_denies_changing_event_rows() {
        let t = stack("[relay]\nevents_pipe = true\n");
        for id in ["ProducerRole", "WorkerRole"] {
            let statements =
                t["Resources"][id]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                    .as_array()
                    .unwrap();
            let deny = statements
                .iter()
                .find(|s| s["Effect"] == "Deny")
                .unwrap_or_else(|| panic!("{id} has no Deny"));
            assert_eq!(
                deny["Action"],
                json!(["dynamodb:UpdateItem", "dynamodb:DeleteItem"])
            );
            assert_eq!(
                deny["Condition"]["ForAnyValue:StringLike"]["dynamodb:LeadingKeys"],
                json!(["TENANT#*#EVENT"])
            );
        }
    }

    /// The template of the examples' pipes (both applications), unprefixed.
    fn examples() -> Value {
        let text = postbox_examples::pipes_toml(std::path::Path::new("report-ready.jsonl"));
        template(&Stack {
            prefix: String::new(),
            relay: RelayConfig::from_toml(&text).unwrap(),
            alarms: Alarms::NewTopic,
        })
        .unwrap()
    }

    #[test]
    fn the_jobs_pipe_filters_on_pending_and_the_report_pipe_on_running_to_succeeded() {
        let t = examples();
        let pattern = |pipe: &str| -> Value {
            let p = &t["Resources"][pipe]["Properties"];
            serde_json::from_str(
                p["SourceParameters"]["FilterCriteria"]["Filters"][0]["Pattern"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap()
        };
        let jobs = pattern("JobsPendingPipe");
        assert_eq!(
            jobs["dynamodb"]["NewImage"]["status"]["S"],
            json!(["PENDING"])
        );
        assert_eq!(
            t["Resources"]["JobsPendingPipe"]["Properties"]["TargetParameters"]["InputTemplate"],
            r#"{"jobId": "<$.dynamodb.NewImage.jobId.S>"}"#
        );
        let ready = pattern("ReportReadyPipe");
        assert_eq!(
            ready["dynamodb"]["OldImage"]["status"]["S"],
            json!(["RUNNING"])
        );
        assert_eq!(
            ready["dynamodb"]["NewImage"]["status"]["S"],
            json!(["SUCCEEDED"])
        );
        let ready = &t["Resources"]["ReportReadyPipe"]["Properties"];
        assert_eq!(ready["Target"], get_att("ReportsBus", "Arn"));
        assert_eq!(
            ready["TargetParameters"]["EventBridgeEventBusParameters"],
            json!({"DetailType": "ReportReady", "Source": "postbox.reports"})
        );
        // The bus's log rule can write to its log group.
        assert_eq!(
            t["Resources"]["ReportsLogReadyLogPolicy"]["Type"],
            "AWS::Logs::ResourcePolicy"
        );
    }

    #[test]
    fn the_examples_template_is_the_reviewed_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/aws/template.json");
        let text = serde_json::to_string_pretty(&examples()).unwrap() + "\n";
        if std::env::var_os("POSTBOX_UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let golden = std::fs::read_to_string(&path).unwrap();
        assert!(
            golden == text,
            "postbox synth's template for the examples changed; review it and regenerate {} with POSTBOX_UPDATE_GOLDEN=1",
            path.display()
        );
    }

    #[test]
    fn check_fails_on_a_record_a_pipe_would_dead_letter_and_passes_good_ones() {
        let dir = tempfile::tempdir().unwrap();
        let pipes = dir.path().join("pipes.toml");
        std::fs::write(
            &pipes,
            "[pipes.jobs]\nsource = \"jobs\"\ninput_template = '{\"jobId\": \"<$.dynamodb.NewImage.jobId.S>\"}'\ntarget = { queue = \"jobs.fifo\", message_group_id = \"<$.dynamodb.NewImage.tenant.S>\" }\n",
        )
        .unwrap();
        let records = dir.path().join("records");
        std::fs::create_dir(&records).unwrap();
        let record = |image: &str| {
            format!(
                r#"{{"eventID": "1", "eventName": "INSERT", "dynamodb": {{"SequenceNumber": "7", "NewImage": {image}}}}}"#
            )
        };
        std::fs::write(
            records.join("a-good.json"),
            record(r#"{"jobId": {"S": "j1"}, "tenant": {"S": "acme"}}"#),
        )
        .unwrap();
        let args = |check: Vec<PathBuf>| SynthArgs {
            pipes: Some(pipes.clone()),
            catalog: None,
            prefix: String::new(),
            alarm_topic: None,
            alarm_email: None,
            out: None,
            format: None,
            check,
        };
        let report = check(&args(vec![records.clone()])).ok().unwrap();
        assert!(
            report.ends_with("checked 1 record(s) against 1 pipe(s): ok\n"),
            "{report}"
        );
        // A job row written without its jobId: the deployed Pipe would send
        // `{"jobId": ""}`; the check names it.
        std::fs::write(
            records.join("b-no-job-id.json"),
            record(r#"{"tenant": {"S": "acme"}}"#),
        )
        .unwrap();
        match check(&args(vec![records.clone()])) {
            Err(CheckFailure::Problems(p)) => {
                assert_eq!(p.len(), 1, "{p:?}");
                assert!(p[0].contains("b-no-job-id.json -> pipe jobs"), "{p:?}");
                assert!(p[0].contains("jobId.S does not resolve"), "{p:?}");
            }
            _ => panic!("the record was not caught"),
        }
        std::fs::write(records.join("c-not-json.json"), "{").unwrap();
        assert!(matches!(
            check(&args(vec![records])),
            Err(CheckFailure::Input(_))
        ));
    }

    #[test]
    fn yaml_nests_maps_and_lists_and_quotes_every_string() {
        let mut out = String::new();
        to_yaml(
            &json!({"A": {"B": ["x", 1, {"C": true, "D": "y: z"}], "E": {}, "F": []}}),
            0,
            &mut out,
        );
        assert_eq!(
            out,
            "\"A\":\n  \"B\":\n    - \"x\"\n    - 1\n    -\n      \"C\": true\n      \"D\": \"y: z\"\n  \"E\": {}\n  \"F\": []\n"
        );
    }

    #[test]
    fn what_a_pipe_cannot_express_is_refused_naming_the_pipe() {
        let refused = |toml: &str| {
            template(&Stack {
                prefix: String::new(),
                relay: RelayConfig::from_toml(toml).unwrap(),
                alarms: Alarms::NewTopic,
            })
            .unwrap_err()
        };
        let e = refused(
            "[pipes.p]\nsource = \"t\"\ntarget = { queue = \"q.fifo\", message_group_id = \"tenant-<$.dynamodb.NewImage.tenant.S>\" }\n",
        );
        assert!(e.contains("pipe p: its message group id template"), "{e}");
        let e = refused(
            "[pipes.p]\nsource = \"t\"\ntarget = { queue = \"q\" }\ndead_letter_queue = \"p-dlq.fifo\"\n",
        );
        assert!(e.contains("needs a standard queue"), "{e}");
    }
}

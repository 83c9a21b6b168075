//! One EventBridge Pipe per configured pipe, every setting explicit, and
//! what Pipes cannot express refused with the pipe and the reason.

use super::*;

/// A group or deduplication id template as a Pipes dynamic path: exactly
/// one `<$.path>` placeholder.
pub(super) fn path_parameter(pipe: &str, what: &str, t: &Template) -> Result<String, String> {
    let source = t.source().trim();
    match source.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
        Some(path) if path.starts_with('$') && !path.contains(['<', '>']) => Ok(path.to_owned()),
        _ => Err(format!(
            "pipe {pipe}: its {what} template {source:?} is not one path (<$.a.b>); an EventBridge Pipe takes only a path there"
        )),
    }
}

pub(super) fn add_pipe(
    b: &mut Builder<'_>,
    pipe: &PipeSpec,
    events_table: &str,
    events_queue: &str,
    topology: &Topology,
) -> Result<(), String> {
    let id = logical(&pipe.name, "Pipe");
    let source = if pipe.table == topology.events_table {
        get_att(events_table, "StreamArn")
    } else {
        // An application table this stack does not own: its stream's ARN
        // is a parameter.
        let param = logical(&pipe.table, "StreamArn");
        b.parameters.insert(
            param.clone(),
            json!({"Type": "String", "Description": format!("the stream ARN (NEW_AND_OLD_IMAGES) of table {}, which this stack does not own", pipe.table)}),
        );
        reference(&param)
    };
    if pipe.dead_letter_queue.ends_with(".fifo") {
        return Err(format!(
            "pipe {}: its dead-letter queue {} is FIFO; a pipe on a DynamoDB stream needs a standard queue",
            pipe.name, pipe.dead_letter_queue
        ));
    }
    let dlq = b.dead_letter_queue(&pipe.dead_letter_queue);
    let mut stream = json!({
        "StartingPosition": match pipe.start { StartPosition::TrimHorizon => "TRIM_HORIZON", StartPosition::Latest => "LATEST" },
        "BatchSize": pipe.batch_size,
        "MaximumRetryAttempts": pipe.max_retries,
        "MaximumRecordAgeInSeconds": pipe.max_record_age.as_secs().clamp(60, 604_800),
        "DeadLetterConfig": {"Arn": get_att(&dlq, "Arn")},
    });
    if pipe.bisect_on_failure {
        stream["OnPartialBatchItemFailure"] = json!("AUTOMATIC_BISECT");
    }
    let mut source_parameters = json!({"DynamoDBStreamParameters": stream});
    if !pipe.filters.is_empty() {
        source_parameters["FilterCriteria"] = json!({"Filters": pipe.filters.iter().map(|f| json!({"Pattern": f.source()})).collect::<Vec<_>>()});
    }
    let mut target_parameters = Map::new();
    let template = pipe.template.source();
    if !template.is_empty() && template != "<$>" {
        target_parameters.insert("InputTemplate".into(), json!(template));
    }
    let mut sends = vec![get_att(&dlq, "Arn")];
    let mut puts = Vec::new();
    let target = match &pipe.target {
        PipeTarget::Queue(q) => {
            let queue = if q.queue == topology.events_queue {
                events_queue.to_owned()
            } else {
                b.queue_with_dlq(&q.queue, 5, true)
            };
            if q.fifo {
                sqs_parameters(&pipe.name, q, &mut target_parameters)?;
            }
            sends.push(get_att(&queue, "Arn"));
            get_att(&queue, "Arn")
        }
        PipeTarget::Bus {
            bus,
            detail_type,
            source,
        } => {
            let bus_id = logical(bus, "Bus");
            if !b.resources.contains_key(&bus_id) {
                return Err(format!("pipe {}: bus {bus} is not declared", pipe.name));
            }
            target_parameters.insert(
                "EventBridgeEventBusParameters".into(),
                json!({"DetailType": detail_type, "Source": source}),
            );
            puts.push(get_att(&bus_id, "Arn"));
            get_att(&bus_id, "Arn")
        }
    };
    let log_group = logical(&pipe.name, "PipeLogGroup");
    b.add(
        &log_group,
        json!({"Type": "AWS::Logs::LogGroup", "Properties": {
            "LogGroupName": format!("/aws/vendedlogs/pipes/{}{}", b.stack.prefix, pipe.name),
            "RetentionInDays": 30,
        }}),
    );
    b.output(
        &log_group,
        reference(&log_group),
        &format!("log group of pipe {}", pipe.name),
    );
    // The pipe's role: exactly what it does.
    let role = logical(&pipe.name, "PipeRole");
    let mut statements = vec![
        json!({"Effect": "Allow", "Action": ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"], "Resource": source.clone()}),
        json!({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": sends}),
        json!({"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Resource": get_att(&log_group, "Arn")}),
    ];
    if !puts.is_empty() {
        statements.push(json!({"Effect": "Allow", "Action": "events:PutEvents", "Resource": puts}));
    }
    b.add(
        &role,
        json!({"Type": "AWS::IAM::Role", "Properties": {
            "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow",
                "Principal": {"Service": "pipes.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"aws:SourceAccount": reference("AWS::AccountId")}},
            }]},
            "Policies": [{"PolicyName": "pipe", "PolicyDocument": {"Version": "2012-10-17", "Statement": statements}}],
        }}),
    );
    let mut properties = json!({
        "Name": b.name(&pipe.name),
        "RoleArn": get_att(&role, "Arn"),
        "Source": source,
        "SourceParameters": source_parameters,
        "Target": target,
        "LogConfiguration": {"Level": "ERROR", "CloudwatchLogsLogDestination": {"LogGroupArn": get_att(&log_group, "Arn")}},
    });
    if !target_parameters.is_empty() {
        properties["TargetParameters"] = Value::Object(target_parameters);
    }
    b.add(
        &id,
        json!({"Type": "AWS::Pipes::Pipe", "Properties": properties}),
    );
    b.add(
        &logical(&pipe.name, "PipeFailedAlarm"),
        json!({"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "AlarmDescription": format!("pipe {} failed to deliver", pipe.name),
            "Namespace": "AWS/EventBridge/Pipes",
            "MetricName": "ExecutionFailed",
            "Dimensions": [{"Name": "PipeName", "Value": reference(&id)}],
            "Statistic": "Sum", "Period": 60, "EvaluationPeriods": 1, "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
            "AlarmActions": [alarm_topic(b)],
        }}),
    );
    Ok(())
}

/// MessageGroupId and MessageDeduplicationId of a FIFO queue target, as
/// Pipes paths (the deduplication id defaults to the record's eventID, as
/// the relay's does).
pub(super) fn sqs_parameters(
    pipe: &str,
    q: &QueueTarget,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let group = q.group_id.as_ref().ok_or_else(|| {
        format!(
            "pipe {pipe}: FIFO queue {} needs a message group id",
            q.queue
        )
    })?;
    let dedup = match &q.dedup_id {
        Some(t) => path_parameter(pipe, "deduplication id", t)?,
        None => "$.eventID".to_owned(),
    };
    out.insert(
        "SqsQueueParameters".into(),
        json!({"MessageGroupId": path_parameter(pipe, "message group id", group)?, "MessageDeduplicationId": dedup}),
    );
    Ok(())
}

//! What guards the stack: an alarm on every dead-letter queue and pipe
//! (and the topic they go to), and the least-privilege application roles.

use super::*;

pub(super) fn alarm_topic(b: &Builder<'_>) -> Value {
    match &b.stack.alarms {
        Alarms::Topic(arn) => json!(arn),
        Alarms::Email(_) | Alarms::NewTopic => reference("AlarmTopic"),
    }
}

/// An alarm on every dead-letter queue, and the topic they go to.
pub(super) fn add_alarms(b: &mut Builder<'_>) {
    match b.stack.alarms.clone() {
        Alarms::Topic(_) => {}
        other => {
            b.add(
                "AlarmTopic",
                json!({"Type": "AWS::SNS::Topic", "Properties": {"TopicName": b.name("postbox-alarms")}}),
            );
            b.output(
                "AlarmTopic",
                reference("AlarmTopic"),
                "SNS topic of the alarms",
            );
            if let Alarms::Email(address) = other {
                b.add(
                    "AlarmEmail",
                    json!({"Type": "AWS::SNS::Subscription", "Properties": {
                        "TopicArn": reference("AlarmTopic"), "Protocol": "email", "Endpoint": address,
                    }}),
                );
            }
        }
    }
    for dlq in b.dlqs.clone() {
        let topic = alarm_topic(b);
        b.add(
            &format!("{dlq}Alarm"),
            json!({"Type": "AWS::CloudWatch::Alarm", "Properties": {
                "AlarmDescription": "messages in a dead-letter queue: a person should look",
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateNumberOfMessagesVisible",
                "Dimensions": [{"Name": "QueueName", "Value": get_att(&dlq, "QueueName")}],
                "Statistic": "Maximum", "Period": 60, "EvaluationPeriods": 1, "Threshold": 0,
                "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
                "AlarmActions": [topic],
            }}),
        );
    }
}

/// The application roles: a producer (emit over the SDK or `serve`) and a
/// worker; each with an explicit Deny of UpdateItem and DeleteItem on event
/// rows.
pub(super) fn add_roles(
    b: &mut Builder<'_>,
    tables: &[String],
    events_queue: &str,
    events_dlq: &str,
) {
    let table_arns: Vec<Value> = tables.iter().map(|t| get_att(t, "Arn")).collect();
    let deny = json!({
        "Effect": "Deny",
        "Action": ["dynamodb:UpdateItem", "dynamodb:DeleteItem"],
        "Resource": get_att(&logical(postbox_topology::EVENTS_TABLE, "Table"), "Arn"),
        "Condition": {"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [format!("{}*{}", postbox_topology::keys::TENANT_PREFIX, postbox_topology::keys::EVENT_SUFFIX)]}},
    });
    let trust = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Service": ["ecs-tasks.amazonaws.com", "ec2.amazonaws.com", "lambda.amazonaws.com"]},
        "Action": "sts:AssumeRole",
    }]});
    let items = json!([
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DescribeTable",
        "dynamodb:DescribeTimeToLive",
        "dynamodb:BatchGetItem",
    ]);
    let queues = json!([get_att(events_queue, "Arn"), get_att(events_dlq, "Arn")]);
    for (id, extra) in [
        (
            "ProducerRole",
            json!({"Effect": "Allow", "Action": ["sqs:GetQueueAttributes"], "Resource": queues.clone()}),
        ),
        (
            "WorkerRole",
            json!({"Effect": "Allow", "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"], "Resource": queues.clone()}),
        ),
    ] {
        b.add(
            id,
            json!({"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": trust.clone(),
                "Policies": [{"PolicyName": "postbox", "PolicyDocument": {"Version": "2012-10-17", "Statement": [
                    {"Effect": "Allow", "Action": items.clone(), "Resource": table_arns.clone()},
                    extra,
                    deny.clone(),
                ]}}],
            }}),
        );
        b.output(
            id,
            get_att(id, "Arn"),
            "application role (Deny on event rows)",
        );
    }
}

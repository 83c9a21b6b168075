//! Event buses: a pipe with a bus target turns each record into an
//! EventBridge event; every rule of the bus whose pattern matches the event
//! sends it to each of its targets (a queue, a JSON-lines log file, another
//! bus). Routing is pure: it says what to deliver, the relay delivers it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::{Rule, RuleTarget};
use crate::delivery::{Delivery, queue_message};
use crate::template::{RenderContext, TemplateError};

/// The EventBridge event a pipe puts on a bus for one record. Its `id` is
/// derived from the pipe and the record so a redelivery carries the same id
/// (a FIFO queue behind a rule deduplicates on it by default).
pub fn event(
    pipe: &str,
    record_id: &str,
    detail_type: &str,
    source: &str,
    time_ms: u64,
    detail: Value,
) -> Value {
    json!({
        "version": "0",
        "id": format!("{pipe}:{record_id}"),
        "detail-type": detail_type,
        "source": source,
        "account": "000000000000",
        "time": crate::record::rfc3339(time_ms),
        "region": "us-east-1",
        "resources": [format!("arn:aws:pipes:us-east-1:000000000000:pipe/{pipe}")],
        "detail": detail,
    })
}

/// Routes `event` on `bus`: one delivery per matching rule target, bus
/// targets followed (the config refuses loops).
pub fn route(
    buses: &BTreeMap<String, Vec<Rule>>,
    bus: &str,
    event: &Value,
    cx: &RenderContext<'_>,
    out: &mut Vec<Delivery>,
) -> Result<(), TemplateError> {
    for rule in buses.get(bus).into_iter().flatten() {
        if !rule.pattern.matches(event) {
            continue;
        }
        for target in &rule.targets {
            match target {
                RuleTarget::Queue(q) => out.push(Delivery::Queue(queue_message(
                    q,
                    event.to_string(),
                    event,
                    cx,
                    "<$.id>",
                )?)),
                RuleTarget::Log(path) => out.push(Delivery::Log {
                    path: path.clone(),
                    line: event.to_string(),
                }),
                RuleTarget::Bus(next) => route(buses, next, event, cx, out)?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::RelayConfig;

    const BUSES: &str = r#"
[[buses.front.rules]]
name = "ready"
pattern = '{"detail-type": ["ReportReady"]}'
targets = [{ bus = "audit" }, { queue = "notify" }]

[[buses.front.rules]]
name = "big"
pattern = '{"detail": {"pages": [{"numeric": [">", 100]}]}}'
targets = [{ log = "big.jsonl" }]

[[buses.audit.rules]]
name = "all"
pattern = '{"source": [{"prefix": ""}]}'
targets = [{ log = "audit.jsonl" }]
"#;

    #[test]
    fn rules_route_to_queues_logs_and_other_buses() {
        let c = RelayConfig::from_toml(BUSES).unwrap();
        let cx = RenderContext {
            pipe_name: "p",
            record_id: "t#1",
            ingestion_time_ms: 0,
            images: None,
        };
        let e = event(
            "p",
            "t#1",
            "ReportReady",
            "postbox.reports",
            0,
            json!({"pages": 7}),
        );
        let mut out = Vec::new();
        route(&c.buses, "front", &e, &cx, &mut out).unwrap();
        let kinds: Vec<String> = out
            .iter()
            .map(|d| match d {
                Delivery::Queue(q) => format!("queue {}", q.queue),
                Delivery::Log { path, .. } => format!("log {}", path.display()),
            })
            .collect();
        assert_eq!(kinds, vec!["log audit.jsonl", "queue notify"]);
        let big = event("p", "t#2", "Other", "x", 0, json!({"pages": 700}));
        let mut out = Vec::new();
        route(&c.buses, "front", &big, &cx, &mut out).unwrap();
        assert!(matches!(&out[..], [Delivery::Log { .. }]));
        assert_eq!(e["id"], "p:t#1");
        assert_eq!(e["time"], "1970-01-01T00:00:00.000Z");
    }
}

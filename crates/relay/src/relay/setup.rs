//! Checks made once per pipe when the relay starts: its source table can
//! be read as a stream, and every queue it may deliver to exists (or is
//! created, when the config says so), so a misconfigured pipe stops the
//! start instead of dead-lettering every record.

use std::collections::BTreeMap;

use postbox_queue::Queues;
use postbox_store::ChangeStreams;
use postbox_store::embedded::EmbeddedStore;

use super::RelayError;
use crate::config::{PipeSpec, Rule};

/// Checks a pipe's source and creates its missing queues (`create`) or
/// refuses to start without them.
pub(super) async fn prepare(
    store: &EmbeddedStore,
    queues: &Queues,
    spec: &PipeSpec,
    buses: &BTreeMap<String, Vec<Rule>>,
    create: bool,
) -> Result<(), RelayError> {
    store
        .stream_head(&spec.table)
        .await
        .map_err(|e| RelayError::Setup {
            pipe: spec.name.clone(),
            message: format!(
                "its source table {} cannot be read as a stream: {e}",
                spec.table
            ),
        })?;
    for queue in spec.queues(buses) {
        if queues.queue_exists(&queue).is_ok() {
            continue;
        }
        if !create {
            return Err(RelayError::Setup {
                pipe: spec.name.clone(),
                message: format!("queue {queue} does not exist; create it first"),
            });
        }
        queues
            .create_queue(&queue, creation_attributes(&queue))
            .await
            .map_err(|error| RelayError::Queue {
                queue: queue.clone(),
                error,
            })?;
        tracing::info!(pipe = %spec.name, %queue, "created a missing queue");
    }
    Ok(())
}

/// The attributes a missing queue is created with: a `.fifo` name makes a
/// FIFO queue, as SQS requires.
fn creation_attributes(queue: &str) -> BTreeMap<String, String> {
    let mut attributes = BTreeMap::new();
    if queue.ends_with(".fifo") {
        attributes.insert("FifoQueue".to_owned(), "true".to_owned());
    }
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RelayConfig;

    #[test]
    fn a_queue_pipe_wants_its_dead_letter_queue_and_its_target() {
        let c = RelayConfig::from_toml(
            "[pipes.p]\nsource = \"t\"\ntarget = { queue = \"jobs.fifo\", message_group_id = \"g\" }\n",
        )
        .unwrap();
        assert_eq!(c.pipes[0].queues(&c.buses), ["p-dlq", "jobs.fifo"]);
    }

    #[test]
    fn a_bus_pipe_wants_the_queue_targets_of_every_bus() {
        let c = RelayConfig::from_toml(
            r#"
[pipes.p]
source = "t"
dead_letter_queue = "dead"
target = { bus = "front", detail_type = "D", source = "s" }

[[buses.front.rules]]
name = "r"
pattern = '{"source": ["s"]}'
targets = [{ queue = "a" }, { log = "a.jsonl" }, { bus = "back" }]

[[buses.back.rules]]
name = "r"
pattern = '{"source": ["s"]}'
targets = [{ queue = "b" }]
"#,
        )
        .unwrap();
        let mut wanted = c.pipes[0].queues(&c.buses);
        wanted[1..].sort();
        assert_eq!(wanted, ["dead", "a", "b"]);
    }

    #[test]
    fn fifo_names_make_fifo_queues() {
        assert_eq!(
            creation_attributes("q.fifo"),
            BTreeMap::from([("FifoQueue".to_owned(), "true".to_owned())])
        );
        assert!(creation_attributes("q").is_empty());
    }
}

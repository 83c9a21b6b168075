//! `postbox init --backend aws`: creates what a node needs on AWS and is
//! missing, for development accounts and local services; production stacks
//! come from a template. Idempotent: what exists is checked, not changed,
//! and a table whose keys or stream differ from what Postbox needs is
//! refused, naming the table and the difference. Nothing else ever creates
//! resources in an account.
//!
//! Tables: the events table (pk, sk; stream NEW_AND_OLD_IMAGES), the inbox
//! (pk, sk; TTL), the Idempotency-Key requests table and the tokens table
//! (pk; the first with TTL), the relay's leases and shard checkpoints (pk,
//! sk). Queues: the events FIFO queue with its dead-letter queue
//! (RedrivePolicy after 20 receives), and the events pipe's dead-letter
//! queue. With `--examples`, also the built-in examples' tables and queues;
//! with `--pipes F`, the queues of F's pipes and a stream on their sources.

use aws_sdk_sqs::types::QueueAttributeName;
use postbox_aws::{DynamoStore, SqsQueues};
use postbox_store::api::{CreateTableInput, KeyType, StreamViewType, TimeToLiveSpecification};
use postbox_store::{ItemStore, StoreError};
use postbox_topology::Topology;

use crate::backend::{Backend, BackendArgs};
use crate::http::{EXIT_REFUSED, Failure};

/// `postbox init`
#[derive(clap::Args)]
pub struct InitArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Also create what the built-in examples need (`serve --backend aws
    /// --examples`): the shop, jobs and Idempotency-Key tables, the jobs
    /// FIFO queue with its dead-letter queue, and the report pipes'
    /// dead-letter queues.
    #[arg(long)]
    examples: bool,
    /// Also create what these pipes need (the config `serve --pipes` and
    /// `relay --config` read): their target and dead-letter queues, and a
    /// NEW_AND_OLD_IMAGES stream on each source table that has none. A
    /// source table that does not exist is refused: its keys are yours.
    #[arg(long, value_name = "FILE")]
    pipes: Option<std::path::PathBuf>,
    /// The catalog the node will serve, checked before anything is made:
    /// a subscription `serve --backend aws` would not run refuses the whole
    /// run. Its DURABLE subscriptions need the events queue, which init
    /// always makes.
    #[arg(long, value_name = "FILE")]
    catalog: Option<std::path::PathBuf>,
}

/// One table a node needs: how to create it and its TTL attribute.
pub(crate) struct Want {
    pub(crate) input: CreateTableInput,
    pub(crate) ttl: Option<&'static str>,
}

pub(crate) fn tables(t: &Topology) -> Vec<Want> {
    vec![
        Want {
            input: postbox_engine::layout::create_events_table(&t.events_table),
            ttl: None,
        },
        Want {
            input: postbox_worker::inbox::table_input(t.inbox_table.clone()),
            ttl: Some(postbox_worker::claim::attr::TTL),
        },
        Want {
            input: CreateTableInput::keyed_by(t.requests_table.clone(), "pk"),
            ttl: Some(postbox_api::events::REQUESTS_TTL),
        },
        Want {
            input: CreateTableInput::keyed_by(t.tokens_table.clone(), "pk"),
            ttl: None,
        },
        Want {
            input: postbox_aws::pipe_state::table_input(t.relay_shards_table.clone()),
            ttl: None,
        },
    ]
}

/// How an existing table differs from what Postbox needs, if it does.
pub(crate) fn differences(
    want: &CreateTableInput,
    got: &postbox_store::api::TableDescription,
) -> Vec<String> {
    let mut out = Vec::new();
    let keys = |schema: &[postbox_store::api::KeySchemaElement],
                defs: &[postbox_store::api::AttributeDefinition]| {
        schema
            .iter()
            .map(|k| {
                let ty = defs
                    .iter()
                    .find(|d| d.attribute_name == k.attribute_name)
                    .map(|d| format!("{:?}", d.attribute_type))
                    .unwrap_or_else(|| "?".into());
                let role = if k.key_type == KeyType::Hash {
                    "HASH"
                } else {
                    "RANGE"
                };
                format!("{} {role} {ty}", k.attribute_name)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (w, g) = (
        keys(&want.key_schema, &want.attribute_definitions),
        keys(&got.key_schema, &got.attribute_definitions),
    );
    if w != g {
        out.push(format!("key schema is [{g}], Postbox needs [{w}]"));
    }
    let view = |s: Option<&postbox_store::api::StreamSpecification>| -> Option<StreamViewType> {
        s.filter(|s| s.stream_enabled)
            .and_then(|s| s.stream_view_type)
    };
    let want_view = view(want.stream_specification.as_ref());
    if want_view.is_some() && view(got.stream_specification.as_ref()) != want_view {
        out.push(format!(
            "stream is {:?}, Postbox needs {:?}",
            view(got.stream_specification.as_ref()),
            want_view
        ));
    }
    out
}

/// Creates `want` unless it exists; says what it did, or why the table is
/// refused.
async fn ensure_table(store: &DynamoStore, want: &Want) -> Result<&'static str, String> {
    let name = &want.input.table_name;
    let refused = |e: StoreError| format!("table {name}: {e}");
    let outcome = match store.describe_table(name).await {
        Ok(got) => {
            let diff = differences(&want.input, &got);
            if !diff.is_empty() {
                return Err(format!("table {name}: {}", diff.join("; ")));
            }
            "exists"
        }
        Err(StoreError::ResourceNotFound(_)) => {
            store
                .create_table(want.input.clone())
                .await
                .map_err(refused)?;
            "created"
        }
        Err(e) => return Err(refused(e)),
    };
    if let Some(attribute) = want.ttl {
        match store.describe_time_to_live(name).await.map_err(refused)? {
            Some(a) if a == attribute => {}
            Some(other) => {
                return Err(format!(
                    "table {name}: TTL is on attribute {other:?}, Postbox needs {attribute:?}"
                ));
            }
            None => {
                let spec = TimeToLiveSpecification {
                    enabled: true,
                    attribute_name: attribute.into(),
                };
                store
                    .update_time_to_live(name, spec)
                    .await
                    .map_err(refused)?;
            }
        }
    }
    Ok(outcome)
}

/// Creates queue `name` (FIFO when it ends in `.fifo`) with `attributes`
/// unless it exists; returns what it did and the queue's ARN.
async fn ensure_queue(
    queues: &SqsQueues,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> Result<(&'static str, String), String> {
    let fifo = name.ends_with(".fifo");
    let client = queues.client();
    let full = queues.name(name);
    let failed = |e: &dyn std::fmt::Display| format!("queue {name}: {e}");
    let (outcome, url) = match client.get_queue_url().queue_name(&full).send().await {
        Ok(out) => ("exists", out.queue_url().unwrap_or_default().to_owned()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_queue_does_not_exist()) =>
        {
            let mut create = client.create_queue().queue_name(&full);
            if fifo {
                create = create.attributes(QueueAttributeName::FifoQueue, "true");
            }
            for (k, v) in attributes {
                create = create.attributes(k.clone(), v);
            }
            let out = create
                .send()
                .await
                .map_err(|e| failed(&aws_sdk_sqs::error::DisplayErrorContext(e)))?;
            ("created", out.queue_url().unwrap_or_default().to_owned())
        }
        Err(e) => return Err(failed(&aws_sdk_sqs::error::DisplayErrorContext(e))),
    };
    let attrs = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| failed(&aws_sdk_sqs::error::DisplayErrorContext(e)))?;
    let got = attrs.attributes().cloned().unwrap_or_default();
    if fifo && got.get(&QueueAttributeName::FifoQueue).map(String::as_str) != Some("true") {
        return Err(format!("queue {name}: not a FIFO queue"));
    }
    Ok((
        outcome,
        got.get(&QueueAttributeName::QueueArn)
            .cloned()
            .unwrap_or_default(),
    ))
}

/// What a node's stack holds: its tables, and its FIFO queues, each with
/// its dead-letter queue and the receives before a message moves there.
/// `init` makes them; `serve --backend aws` checks them at start.
pub(crate) struct Stack {
    pub(crate) tables: Vec<Want>,
    pub(crate) fifos: Vec<(String, String, u32)>,
}

/// The [`Stack`] of a node, with the built-in examples' part if `examples`.
pub(crate) fn stack(topology: &Topology, examples: bool) -> Stack {
    let mut out = Stack {
        tables: tables(topology),
        fifos: vec![(
            topology.events_queue.clone(),
            topology.events_dlq.clone(),
            postbox_node::MAX_RECEIVE_COUNT,
        )],
    };
    if examples {
        use postbox_examples::reports;
        out.tables
            .extend(postbox_examples::tables().into_iter().map(|t| Want {
                input: t.input,
                ttl: t.ttl,
            }));
        out.fifos.push((
            reports::JOBS_QUEUE.to_owned(),
            reports::JOBS_DLQ.to_owned(),
            reports::MAX_RECEIVES,
        ));
    }
    out
}

/// Every queue `config`'s pipes may deliver to (targets, bus rules' queue
/// targets, dead-letter queues), once each.
fn pipe_queues(config: &postbox_relay::RelayConfig) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for q in config.pipes.iter().flat_map(|p| p.queues(&config.buses)) {
        if !out.contains(&q) {
            out.push(q);
        }
    }
    out
}

/// Gives `table`, which `pipe` reads, a NEW_AND_OLD_IMAGES stream unless
/// it has one; says what it did, or why the table is refused.
async fn ensure_stream(
    store: &DynamoStore,
    table: &str,
    pipe: &str,
) -> Result<&'static str, String> {
    let got = match store.describe_table(table).await {
        Ok(got) => got,
        Err(StoreError::ResourceNotFound(_)) => {
            return Err(format!(
                "table {table}, which pipe {pipe:?} reads, does not exist; create it with its keys (init makes only Postbox's own tables)"
            ));
        }
        Err(e) => return Err(format!("table {table}: {e}")),
    };
    let view = got
        .stream_specification
        .filter(|s| s.stream_enabled)
        .and_then(|s| s.stream_view_type);
    match view {
        Some(StreamViewType::NewAndOldImages) => Ok("exists, with its stream"),
        Some(other) => Err(format!(
            "table {table}: stream is {other:?}, pipe {pipe:?} needs NewAndOldImages"
        )),
        None => {
            store
                .update_table(postbox_store::api::UpdateTableInput {
                    table_name: table.to_owned(),
                    stream_specification: Some(postbox_store::api::StreamSpecification {
                        stream_enabled: true,
                        stream_view_type: Some(StreamViewType::NewAndOldImages),
                    }),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("table {table}: enabling its stream: {e}"))?;
            Ok("stream enabled (NEW_AND_OLD_IMAGES)")
        }
    }
}

/// Creates FIFO queue `name` and its dead-letter queue `dlq` (after
/// `max_receives` receives) unless they exist, printing what it did.
async fn ensure_fifo_with_dlq(
    queues: &SqsQueues,
    name: &str,
    dlq: &str,
    max_receives: u32,
) -> Result<(), String> {
    let (outcome, dlq_arn) = ensure_queue(queues, dlq, &[]).await?;
    println!("queue {dlq}: {outcome}");
    let policy = postbox_queue::attributes::redrive_policy_text(&dlq_arn, max_receives);
    let (outcome, _) =
        ensure_queue(queues, name, &[(QueueAttributeName::RedrivePolicy, policy)]).await?;
    println!("queue {name}: {outcome}");
    Ok(())
}

pub async fn run(args: InitArgs) -> Result<(), Failure> {
    if args.backend.backend != Backend::Aws {
        return Err(Failure::new(
            EXIT_REFUSED,
            "postbox init creates resources on AWS (--backend aws); `postbox serve` creates what the embedded store needs itself",
        ));
    }
    if let Some(path) = &args.catalog {
        let catalog = postbox_engine::Catalog::load(path)
            .map_err(|e| Failure::new(EXIT_REFUSED, e.to_string()))?;
        crate::catalog::check_lanes_on_aws(&catalog)?;
    }
    let (store, queues) = crate::backend::aws(&args.backend).await?;
    let topology = Topology::default();
    let Stack {
        tables: wanted,
        fifos,
    } = stack(&topology, args.examples);
    let mut plain = vec![topology.events_relay_dlq.clone()];
    if args.examples {
        // The log's path does not matter here: only the queues are read.
        let pipes = postbox_examples::pipes_toml(std::path::Path::new("report-ready.jsonl"));
        let config = postbox_relay::RelayConfig::from_toml(&pipes)
            .map_err(|e| Failure::new(EXIT_REFUSED, format!("the examples' pipes: {e}")))?;
        plain.extend(pipe_queues(&config));
    }
    let pipes = match &args.pipes {
        Some(path) => {
            let config = crate::pipe::load(path).map_err(|e| Failure::new(EXIT_REFUSED, e))?;
            plain.extend(pipe_queues(&config));
            config.pipes
        }
        None => Vec::new(),
    };
    // A queue made with its dead-letter queue above is not made again.
    let mut seen: Vec<String> = fifos
        .iter()
        .flat_map(|(q, d, _)| [q.clone(), d.clone()])
        .collect();
    plain.retain(|q| {
        let new = !seen.contains(q);
        seen.push(q.clone());
        new
    });
    let mut problems = Vec::new();
    for want in wanted {
        match ensure_table(&store, &want).await {
            Ok(outcome) => println!("table {}: {outcome}", want.input.table_name),
            Err(e) => problems.push(e),
        }
    }
    let mut sources: Vec<(&str, &str)> = Vec::new();
    for p in &pipes {
        if !sources.iter().any(|(t, _)| *t == p.table) {
            sources.push((&p.table, &p.name));
        }
    }
    for (table, pipe) in sources {
        match ensure_stream(&store, table, pipe).await {
            Ok(outcome) => println!("table {table}: {outcome}"),
            Err(e) => problems.push(e),
        }
    }
    for (queue, dlq, max_receives) in fifos {
        if let Err(e) = ensure_fifo_with_dlq(&queues, &queue, &dlq, max_receives).await {
            problems.push(e);
        }
    }
    for queue in plain {
        match ensure_queue(&queues, &queue, &[]).await {
            Ok((outcome, _)) => println!("queue {queue}: {outcome}"),
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(EXIT_REFUSED, problems.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_keyed_otherwise_is_named_with_its_difference() {
        let want = postbox_engine::layout::create_events_table("e");
        let mut got = postbox_store::api::TableDescription {
            table_name: "e".into(),
            table_arn: String::new(),
            table_status: "ACTIVE".into(),
            creation_date_time: 0.0,
            key_schema: want.key_schema.clone(),
            attribute_definitions: want.attribute_definitions.clone(),
            item_count: 0,
            table_size_bytes: 0,
            table_id: None,
            provisioned_throughput: None,
            billing_mode_summary: None,
            stream_specification: want.stream_specification.clone(),
            latest_stream_arn: None,
            latest_stream_label: None,
            global_secondary_indexes: None,
            local_secondary_indexes: None,
        };
        assert!(differences(&want, &got).is_empty());
        got.key_schema.truncate(1);
        got.stream_specification = None;
        let diff = differences(&want, &got);
        assert_eq!(diff.len(), 2, "{diff:?}");
        assert!(diff[0].contains("key schema is [pk HASH S]"), "{diff:?}");
        assert!(diff[1].contains("stream is None"), "{diff:?}");
    }
}

//! `postbox demo`: both example applications end to end on the embedded
//! store, printing what happened — the README's first command. Exits 0
//! only when every effect happened exactly once, the reconciliation report
//! is ok, and every report job succeeded and was announced once.

use std::path::PathBuf;

use postbox_examples::reports::JobStatus;
use postbox_examples::{payments, reports};
use postbox_worker::report::Verdict;

use crate::http::Failure;

/// `postbox demo`
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Keep the stores in this directory (it must not hold a previous
    /// demo); by default a temporary directory is used and removed.
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub async fn run(args: DemoArgs) -> Result<(), Failure> {
    let temp;
    let dir = match args.dir {
        Some(d) => d,
        None => {
            temp = tempfile::tempdir()
                .map_err(|e| Failure::from(format!("no temporary directory: {e}")))?;
            temp.path().to_owned()
        }
    };
    let mut out = std::io::stdout();
    println!("== Example (a): a payment fanned out to four durable handlers, one of them flaky\n");
    let p = payments::run(&dir.join("payments"), &mut out)
        .await
        .map_err(|e| Failure::from(format!("the payment example failed: {e}")))?;
    println!("\n== Example (b): the asynchronous report-job API\n");
    let r = reports::run(&dir.join("reports"), &mut out)
        .await
        .map_err(|e| Failure::from(format!("the report-job example failed: {e}")))?;

    let mut problems = Vec::new();
    for e in &p.events {
        for f in e.effects.iter().filter(|f| f.applied != 1) {
            problems.push(format!(
                "{}#{}: {} applied {} times",
                e.tenant, e.seq, f.subscription, f.applied
            ));
        }
    }
    if p.redelivery.extra_runs != 0 {
        problems.push(format!(
            "a redelivered event ran {} handler(s) again",
            p.redelivery.extra_runs
        ));
    }
    if let Verdict::Attention(reasons) = &p.reconciliation.verdict {
        problems.extend(reasons.iter().cloned());
    }
    for j in &r.jobs {
        if j.status != JobStatus::Succeeded {
            problems.push(format!("report job {} ended {}", j.id, j.status.as_str()));
        }
        if r.ready_per_job.get(&j.id).copied().unwrap_or(0) != 1 {
            problems.push(format!(
                "report job {} was announced {} times",
                j.id,
                r.ready_per_job.get(&j.id).copied().unwrap_or(0)
            ));
        }
    }
    println!();
    if problems.is_empty() {
        println!(
            "demo: ok — {} payment events x 4 subscriptions, each effect exactly once ({} retried deliveries); {} report job(s) succeeded, each announced once",
            p.events.len(),
            p.retried,
            r.jobs.len()
        );
        Ok(())
    } else {
        Err(Failure::new(
            crate::http::EXIT_ATTENTION,
            format!("demo: {}", problems.join("; ")),
        ))
    }
}

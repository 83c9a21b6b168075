//! `postbox catalog check`: runs the reachability contract on a catalog file
//! and prints the report, or the generated catalog as JSON or Markdown.
//! Exits non-zero on any violation, so CI can gate on it.

use std::path::PathBuf;
use std::process::ExitCode;

use postbox_engine::Lane;
use postbox_engine::catalog::Catalog;
use postbox_engine::contract::{Report, Rule, Violation, did_you_mean};
use postbox_worker::pull::PULL_HANDLER;

/// `postbox catalog ...`
#[derive(clap::Args)]
pub struct CatalogArgs {
    #[command(subcommand)]
    command: CatalogCommand,
}

#[derive(clap::Subcommand)]
enum CatalogCommand {
    /// Check the reachability contract (every subscription can run, every
    /// type declared and produced) and print the catalog.
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// The catalog file.
    #[arg(long, default_value = "catalog.toml", env = "POSTBOX_CATALOG")]
    catalog: PathBuf,
    /// Print the generated catalog as JSON (with the violations).
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the generated catalog as Markdown (with the violations).
    #[arg(long)]
    markdown: bool,
}

/// Runs the subcommand; the exit code is FAILURE on any violation.
pub fn run(args: CatalogArgs) -> ExitCode {
    let CatalogCommand::Check(args) = args.command;
    let catalog = match Catalog::load(&args.catalog) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut report = Report::new(&catalog);
    report.violations.extend(runnable(&catalog));
    if args.json {
        println!("{}", serde_json_pretty(&report.to_json()));
    } else if args.markdown {
        print!("{}", report.to_markdown());
    } else {
        print!("{}", report.to_text());
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        if args.json || args.markdown {
            eprintln!(
                "error: the catalog breaks the reachability contract ({} violation(s))",
                report.violations.len()
            );
        }
        ExitCode::FAILURE
    }
}

/// The subscriptions `postbox serve --catalog` could not run: a DURABLE
/// handler that is no URL, not `pull` and none of the binary's code
/// handlers (with the name meant, when one is close); a BEST_EFFORT handler
/// the binary lacks; any INLINE or LOCAL one (those run in the process
/// that embeds the engine and registers them).
fn runnable(catalog: &Catalog) -> Vec<Violation> {
    let known: postbox_node::Handlers = postbox_examples::code_handlers();
    let mut durable: Vec<&str> = known.durable.keys().map(String::as_str).collect();
    durable.push(PULL_HANDLER);
    durable.sort_unstable();
    let mut best_effort: Vec<&str> = known.best_effort.keys().map(String::as_str).collect();
    best_effort.sort_unstable();
    let mut out = Vec::new();
    for s in &catalog.subscriptions {
        let (names, runs) = match s.lane {
            Lane::Durable => (
                &durable,
                postbox_api::webhook::is_webhook(&s.handler)
                    || durable.contains(&s.handler.as_str()),
            ),
            Lane::BestEffort => (&best_effort, best_effort.contains(&s.handler.as_str())),
            Lane::Inline | Lane::Local => {
                out.push(Violation {
                    rule: Rule::MissingHandler,
                    subject: s.name.clone(),
                    message: format!(
                        "subscription {:?} on lane {} runs inside the process that embeds the engine and registers handler {:?}; `postbox serve --catalog` registers no {} handlers (use DURABLE with a URL or \"pull\" to run it in another language)",
                        s.name,
                        s.lane.as_str(),
                        s.handler,
                        s.lane.as_str()
                    ),
                    suggestion: None,
                });
                continue;
            }
        };
        if runs {
            continue;
        }
        let suggestion = did_you_mean(&s.handler, names);
        let offered = if s.lane == Lane::Durable {
            format!("an http(s):// URL, or one of: {}", names.join(", "))
        } else if names.is_empty() {
            "none: this binary has no BEST_EFFORT handlers".to_owned()
        } else {
            format!("one of: {}", names.join(", "))
        };
        out.push(Violation {
            rule: Rule::MissingHandler,
            subject: s.name.clone(),
            message: format!(
                "subscription {:?} on lane {} names handler {:?}, which postbox serve does not have{} (handlers it runs: {offered})",
                s.name,
                s.lane.as_str(),
                s.handler,
                suggestion
                    .as_deref()
                    .map(|m| format!("; did you mean {m:?}?"))
                    .unwrap_or_default()
            ),
            suggestion,
        });
    }
    out
}

fn serde_json_pretty(v: &postbox_engine::JsonValue) -> String {
    postbox_engine::to_pretty_json(v)
}

/// Row-change consumers and in-process lanes are the embedded node's: a
/// catalog with such a subscription is refused by name rather than left
/// unrun on AWS.
pub(crate) fn check_lanes_on_aws(catalog: &Catalog) -> Result<(), crate::http::Failure> {
    match catalog
        .subscriptions
        .iter()
        .find(|s| s.lane != Lane::Durable)
    {
        None => Ok(()),
        Some(s) => Err(crate::http::Failure::new(
            crate::http::EXIT_REFUSED,
            format!(
                "subscription {:?} is on lane {}; serve --backend aws runs DURABLE subscriptions (webhooks, pull, the built-in code handlers), not {} ones",
                s.name,
                s.lane.as_str(),
                s.lane.as_str()
            ),
        )),
    }
}

//! `postbox catalog check`: runs the reachability contract on a catalog file
//! and prints the report, or the generated catalog as JSON or Markdown.
//! Exits non-zero on any violation, so CI can gate on it.

use std::path::PathBuf;
use std::process::ExitCode;

use postbox_engine::catalog::Catalog;
use postbox_engine::contract::Report;

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
    let report = Report::new(&catalog);
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

fn serde_json_pretty(v: &postbox_engine::JsonValue) -> String {
    postbox_engine::to_pretty_json(v)
}

//! `postbox token`: API tokens and wire access keys of a running server,
//! created (shown once), listed, revoked and rotated over its HTTP API.

use serde_json::{Value, json};

use crate::http::{Api, Failure, Remote};
use crate::ops::print_json;

/// `postbox token ...`
#[derive(clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(clap::Subcommand)]
enum TokenCommand {
    /// Create an API token (shown once; only its hash is stored), or with
    /// --aws an access key for the wire protocols (shown once).
    Create(CreateTokenArgs),
    /// List API tokens and wire access keys by id (never their secrets).
    List(ListTokensArgs),
    /// Revoke an API token or access key by id; the next request with it
    /// is refused.
    Revoke(TokenIdArgs),
    /// Replace an API token: a new one for the same tenant and subject
    /// (shown once), and the old one revoked.
    Rotate(RotateTokenArgs),
}

#[derive(clap::Args)]
struct ListTokensArgs {
    #[command(flatten)]
    remote: Remote,
}

#[derive(clap::Args)]
struct TokenIdArgs {
    #[command(flatten)]
    remote: Remote,
    /// The id `postbox token list` shows (or an access key id, AKIA...).
    id: String,
}

#[derive(clap::Args)]
struct RotateTokenArgs {
    #[command(flatten)]
    remote: Remote,
    /// The id `postbox token list` shows.
    id: String,
    /// A new validity (30s, 10m, 12h, 90d); default: the old token's expiry.
    #[arg(long, value_parser = parse_validity)]
    expires_in: Option<u64>,
}

/// `--expires-in`: a number with a unit (s, m, h, d), in seconds.
fn parse_validity(text: &str) -> Result<u64, String> {
    crate::verifier::parse_every(text)?
        .map(|d| d.as_secs())
        .ok_or_else(|| "a token's validity cannot be `off`; leave --expires-in out".to_owned())
}

#[derive(clap::Args)]
struct CreateTokenArgs {
    #[command(flatten)]
    remote: Remote,
    /// The tenant the token acts for.
    #[arg(long, required_unless_present_any = ["admin", "consumer"], conflicts_with_all = ["admin", "consumer"])]
    tenant: Option<String>,
    /// An operator token instead of a tenant token.
    #[arg(long, conflicts_with = "consumer")]
    admin: bool,
    /// A token for the consumers of this pull subscription: it receives and
    /// settles its deliveries for every tenant, and reaches nothing else.
    #[arg(long, conflicts_with = "aws")]
    consumer: Option<String>,
    /// Who holds it (recorded as the actor of its events).
    #[arg(long)]
    subject: Option<String>,
    /// An access key for the DynamoDB, DynamoDB Streams and SQS endpoints
    /// (AWS Signature Version 4) instead of an API token; with --tenant, a
    /// key that reaches only that tenant's items (`<tenant>#` partitions).
    #[arg(long)]
    aws: bool,
    /// How long the token is valid (30s, 10m, 12h, 90d); default: until revoked.
    #[arg(long, value_parser = parse_validity, conflicts_with = "aws")]
    expires_in: Option<u64>,
}

pub async fn token(args: TokenArgs) -> Result<(), Failure> {
    let a = match args.command {
        TokenCommand::Create(a) => a,
        TokenCommand::List(l) => return list_tokens(l).await,
        TokenCommand::Revoke(r) => {
            let api = Api::new(&r.remote)?;
            let out = api
                .call("DELETE", &format!("/v1/tokens/{}", r.id), &[], None)
                .await?;
            if r.remote.json {
                print_json(&out);
            } else {
                println!("revoked {}", r.id);
            }
            return Ok(());
        }
        TokenCommand::Rotate(r) => {
            let api = Api::new(&r.remote)?;
            let body = r.expires_in.map(|s| json!({"expires_in": s}));
            let out = api
                .call(
                    "POST",
                    &format!("/v1/tokens/{}/rotate", r.id),
                    &[],
                    body.as_ref(),
                )
                .await?;
            if r.remote.json {
                print_json(&out);
            } else {
                println!("{}", out["token"].as_str().unwrap_or(""));
                eprintln!(
                    "token {} replaced by {} (shown only this once); the old one is revoked",
                    r.id,
                    out["id"].as_str().unwrap_or("")
                );
            }
            return Ok(());
        }
    };
    let api = Api::new(&a.remote)?;
    let mut body = json!({});
    if let Some(s) = a.expires_in {
        body["expires_in"] = json!(s);
    }
    match (&a.tenant, &a.consumer) {
        (Some(t), _) => body["tenant"] = json!(t),
        (None, Some(c)) => body["consumer"] = json!(c),
        (None, None) => body["admin"] = json!(true),
    }
    if let Some(s) = &a.subject {
        body["subject"] = json!(s);
    }
    if a.aws {
        body["aws"] = json!(true);
        let out = api.call("POST", "/v1/tokens", &[], Some(&body)).await?;
        if a.remote.json {
            print_json(&out);
        } else {
            // Shell-friendly, so `eval "$(postbox token create --aws --admin)"`
            // or `> key.env` works.
            println!(
                "AWS_ACCESS_KEY_ID={}",
                out["access_key_id"].as_str().unwrap_or("")
            );
            println!(
                "AWS_SECRET_ACCESS_KEY={}",
                out["secret_access_key"].as_str().unwrap_or("")
            );
            eprintln!(
                "created an access key for the wire endpoints ({}); the secret is shown only this once",
                a.tenant.as_deref().map_or("admin".to_owned(), |t| format!(
                    "tenant {t}: its items only"
                ))
            );
        }
        return Ok(());
    }
    let out = api.call("POST", "/v1/tokens", &[], Some(&body)).await?;
    if a.remote.json {
        print_json(&out);
    } else {
        // The token alone on stdout, so `$(postbox token create ...)` works.
        println!("{}", out["token"].as_str().unwrap_or(""));
        match &a.consumer {
            Some(c) => eprintln!(
                "created a consumer token for pull subscription {c} (every tenant's deliveries, nothing else); it is shown only this once"
            ),
            None => eprintln!(
                "created a {} token for {}; it is shown only this once",
                if a.admin { "admin" } else { "tenant" },
                a.tenant.as_deref().unwrap_or("operators")
            ),
        }
    }
    Ok(())
}

async fn list_tokens(l: ListTokensArgs) -> Result<(), Failure> {
    let api = Api::new(&l.remote)?;
    let out = api.call("GET", "/v1/tokens", &[], None).await?;
    if l.remote.json {
        print_json(&out);
        return Ok(());
    }
    let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    println!(
        "{:<20} {:<10} {:<20} {:<24} {:<24} expires",
        "id", "kind", "tenant", "subject", "created"
    );
    for t in out["tokens"].as_array().into_iter().flatten() {
        let tenant = if t["admin"] == true {
            "(admin)".to_owned()
        } else if let Some(c) = t["consumer"].as_str() {
            format!("(consumer {c})")
        } else {
            text(&t["tenant"])
        };
        println!(
            "{:<20} {:<10} {:<20} {:<24} {:<24} {}",
            text(&t["id"]),
            text(&t["kind"]),
            tenant,
            text(&t["subject"]),
            text(&t["created_at"]),
            text(&t["expires_at"])
        );
    }
    Ok(())
}

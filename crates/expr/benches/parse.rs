//! What the cache of parsed expressions saves: the worker's claim (an
//! UpdateItem with a 12-action update and a 3-branch condition, as
//! `postbox-worker`'s inbox sends it) parsed with fresh values each time,
//! through the cache and afresh, alternating, in the same run.
//!
//!     cargo bench -p postbox-expr --bench parse
//!
//! Prints the median time per request of each over `POSTBOX_BENCH_ROUNDS`
//! rounds (default 15) of 2,000 requests; then the same with a text no
//! request sent before (one more SET action naming a new attribute), where
//! the cache has nothing to reuse and should cost little.

use std::collections::BTreeMap;
use std::time::Instant;

use postbox_benchkit::{env_or, median};
use postbox_expr::{Condition, ExprError, Placeholders, Update, parse_condition, parse_update};
use postbox_item::AttributeValue;

const CONDITION: &str = "attribute_not_exists(pk) OR (#status = :pending AND #lease_expires_at < :now) \
     OR (#status = :failed AND #attempts < :max)";
const UPDATE: &str = "SET #status = :pending, #lease_owner = :owner, #lease_token = :token, \
     #lease_expires_at = :expires, #tenant = :tenant, #seq = :seq, #event_id = :event, \
     #subscription = :sub, #updated_at = :now, #created_at = if_not_exists(#created_at, :now), \
     #attempts = if_not_exists(#attempts, :zero), #ttl = :ttl";

type Parsers = (
    fn(&str, &mut Placeholders) -> Result<Update, ExprError>,
    fn(&str, &mut Placeholders) -> Result<Condition, ExprError>,
);

fn names() -> BTreeMap<String, String> {
    [
        "status",
        "lease_owner",
        "lease_token",
        "lease_expires_at",
        "tenant",
        "seq",
        "event_id",
        "subscription",
        "updated_at",
        "created_at",
        "attempts",
        "ttl",
    ]
    .into_iter()
    .map(|n| (format!("#{n}"), n.to_owned()))
    .collect()
}

fn values(i: i64) -> BTreeMap<String, AttributeValue> {
    let s = |v: String| AttributeValue::S(v);
    [
        (":pending", s("PENDING".into())),
        (":failed", s("FAILED".into())),
        (":now", AttributeValue::n(1_700_000_000_000 + i)),
        (":max", AttributeValue::n(5)),
        (":owner", s(format!("worker-{}", i % 7))),
        (":token", s(format!("token-{i:016x}"))),
        (":expires", AttributeValue::n(1_700_000_030_000 + i)),
        (":tenant", s(format!("t{:02}", i % 50))),
        (":seq", AttributeValue::n(i)),
        (":event", s(format!("01JD{i:022}"))),
        (":sub", s("s0".into())),
        (":zero", AttributeValue::n(0)),
        (":ttl", AttributeValue::n(1_800_000_000 + i)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Seconds for `n` requests; with `unique`, each with an update text of
/// its own.
fn round(
    parsers: Parsers,
    names: &BTreeMap<String, String>,
    n: i64,
    from: i64,
    unique: bool,
) -> f64 {
    let vals: Vec<_> = (from..from + n).map(values).collect();
    let texts: Vec<String> = (from..from + n)
        .map(|i| match unique {
            true => format!("{UPDATE}, f{i} = :zero"),
            false => UPDATE.to_owned(),
        })
        .collect();
    let t = Instant::now();
    for (v, text) in vals.iter().zip(&texts) {
        let mut ph = Placeholders::new(Some(names), Some(v));
        let u = parsers.0(text, &mut ph).expect("update parses");
        let c = parsers.1(CONDITION, &mut ph).expect("condition parses");
        ph.finish().expect("every placeholder used");
        std::hint::black_box((u, c));
    }
    t.elapsed().as_secs_f64()
}

fn main() {
    let rounds: usize = env_or("POSTBOX_BENCH_ROUNDS", 15);
    const N: i64 = 2_000;
    let names = names();
    let cached: Parsers = (parse_update, parse_condition);
    let fresh: Parsers = (
        postbox_expr::uncached::parse_update,
        postbox_expr::uncached::parse_condition,
    );
    let per = |s: f64| s / N as f64 * 1e6;
    for (unique, title) in [
        (
            false,
            "the worker's claim (12-action update + 3-branch condition), fresh values each request:",
        ),
        (
            true,
            "the same with a new update text each request (nothing to reuse):",
        ),
    ] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in 0..rounds as i64 {
            // Unique texts never repeat across rounds either.
            let from = r * N + if unique { 1 << 40 } else { 0 };
            b.push(round(fresh, &names, N, from, unique));
            a.push(round(cached, &names, N, from, unique));
        }
        let (a, b) = (per(median(a)), per(median(b)));
        println!("{title}");
        println!("  parsed afresh (baseline)   {b:7.2} us per request");
        println!(
            "  through the cache          {a:7.2} us per request   ({:.1}x)",
            b / a
        );
    }
}

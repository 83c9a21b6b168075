//! The emit scenarios of `postbox bench`: emitter tasks over tenants, each
//! emit an order with its payload and one write, timed one by one.

use super::*;

pub(super) fn order(tenant: &str, n: u64, filler: &str) -> (serde_json::Value, Vec<Write>) {
    let payload = json!({"order_id": format!("{n}"), "note": filler});
    let mut item = Item::new();
    item.insert(
        "pk".into(),
        AttributeValue::s(format!("{tenant}#order#{n}")),
    );
    item.insert("note".into(), AttributeValue::s(filler));
    (payload, vec![Write::put("orders", item)])
}

/// What an emit load measured.
pub(super) struct Emitted {
    /// Acknowledged emits per second.
    rate: f64,
    /// Each acknowledged emit's latency, sorted.
    latencies: Vec<Duration>,
    /// Emits that failed (contention retries exhausted, in the baseline).
    failed: usize,
}

/// Emits from `emitters` tasks over `tenants` for `secs`. Fails only when
/// no emit at all succeeded, naming the first error.
pub(super) async fn emit_load(
    engine: Arc<Engine<EmbeddedStore>>,
    tenants: usize,
    emitters: usize,
    secs: u64,
    filler: &str,
) -> Result<Emitted, Failure> {
    let stop = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..emitters)
        .map(|i| {
            let engine = engine.clone();
            let filler = filler.to_owned();
            tokio::spawn(async move {
                let tenant = format!("t{}", i % tenants);
                let ctx = Context::new(&tenant, "bench").expect("valid context");
                let mut lat = Vec::new();
                let (mut failed, mut first_error) = (0, None);
                let mut n = (i as u64) << 32;
                while Instant::now() < stop {
                    n += 1;
                    let (payload, writes) = order(&tenant, n, &filler);
                    let t = Instant::now();
                    match engine.emit(&ctx, "ORDER_PLACED", payload, writes).await {
                        Ok(_) => lat.push(t.elapsed()),
                        Err(e) => {
                            failed += 1;
                            first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                (lat, failed, first_error)
            })
        })
        .collect();
    let mut all = Vec::new();
    let (mut failed, mut first_error) = (0, None);
    for t in tasks {
        let (lat, f, e) = t.await.map_err(|e| Failure::from(e.to_string()))?;
        all.extend(lat);
        failed += f;
        first_error = first_error.or(e);
    }
    if all.is_empty() {
        return Err(Failure::from(format!(
            "no emit succeeded ({failed} failed); the first error: {}",
            first_error.as_deref().unwrap_or("none")
        )));
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    all.sort();
    Ok(Emitted {
        rate,
        latencies: all,
        failed,
    })
}

/// "N events/s", with the emits that failed when there were any.
pub(super) fn rate_of(e: &Emitted) -> String {
    match e.failed {
        0 => format!("{:.0} events/s", e.rate),
        n => format!("{:.0} events/s ({n} emits gave up)", e.rate),
    }
}

/// One emit scenario: `emitters` tasks over `tenants` for `secs`.
pub(super) struct EmitLoad<'a> {
    pub(super) name: &'static str,
    pub(super) tenants: usize,
    pub(super) emitters: usize,
    pub(super) secs: u64,
    pub(super) filler: &'a str,
}

impl EmitLoad<'_> {
    /// Runs the load on a fresh store, with group commit or (the baseline)
    /// one transaction per emit; gives back the store and the figures.
    pub(super) async fn run(
        &self,
        dir: &std::path::Path,
        group_commit: bool,
    ) -> Result<(EmbeddedStore, Emitted), Failure> {
        let name = match group_commit {
            true => self.name.to_owned(),
            false => format!("{}-base", self.name),
        };
        let store = open(dir, &name).await?;
        let engine = engine_on(&store, catalog_with(0), group_commit).await?;
        let emitted =
            emit_load(engine, self.tenants, self.emitters, self.secs, self.filler).await?;
        Ok((store, emitted))
    }

    /// The table's row: the group-committed figures beside the baseline's.
    pub(super) fn row(
        &self,
        kb: &str,
        target: (&'static str, f64),
        e: &Emitted,
        base: &Emitted,
    ) -> Row {
        let (target, min_rate) = target;
        let tenants = match self.tenants {
            1 => "1 tenant".to_owned(),
            n => format!("{n} tenants"),
        };
        Row {
            scenario: format!(
                "emit, {tenants}, {} emitters, {kb} + 1 write",
                self.emitters
            ),
            value: format!(
                "{} (p50 {:.2} ms, p99 {:.2} ms)",
                rate_of(e),
                pct(&e.latencies, 0.5),
                pct(&e.latencies, 0.99)
            ),
            target,
            baseline: format!("{}, one transaction per emit", rate_of(base)),
            figures: vec![
                ("events_per_second", e.rate),
                ("p50_ms", pct(&e.latencies, 0.5)),
                ("p99_ms", pct(&e.latencies, 0.99)),
                ("baseline_events_per_second", base.rate),
            ],
            bounds: vec![("events_per_second", Bound::AtLeast(min_rate))],
        }
    }
}

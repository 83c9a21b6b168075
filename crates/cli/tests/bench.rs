//! `postbox bench`, shortened: the scenarios `--only` picks run on a real
//! pipeline and report what they measured; bad arguments are refused
//! before anything runs.

use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_postbox"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The leading number of a result such as "1234 completions/s ...".
fn leading_number(text: &str) -> f64 {
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no leading number in {text:?}"))
}

#[test]
fn delivery_drains_a_relayed_backlog_for_one_and_four_subscriptions() {
    let (code, out, err) = bench(&[
        "--only",
        "delivery",
        "--events",
        "300",
        "--payload-bytes",
        "64",
        "--json",
    ]);
    assert_eq!(code, 0, "stderr: {err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 2, "one row per subscription count: {out}");
    for (row, subs) in rows.iter().zip([1, 4]) {
        let scenario = row["scenario"].as_str().unwrap();
        assert!(
            scenario.contains(&format!("{subs} subscription")),
            "{scenario}"
        );
        assert!(
            leading_number(row["result"].as_str().unwrap()) > 0.0,
            "{row}"
        );
        let baseline = row["baseline"].as_str().unwrap();
        assert!(baseline.contains("counting the emit and relay"), "{row}");
        // The numbers themselves, for scripts: not inside strings.
        let figures = &row["figures"];
        assert!(
            figures["completions_per_second"].as_f64().unwrap() > 0.0,
            "{row}"
        );
        assert!(
            figures["baseline_completions_per_second"].as_f64().unwrap() > 0.0,
            "{row}"
        );
        assert!(leading_number(baseline) > 0.0, "{row}");
    }
}

#[test]
fn verify_alone_checks_the_one_tenant_log_and_reports_no_emit_rows() {
    let (code, out, err) = bench(&["--only", "verify", "--secs", "1", "--json"]);
    assert_eq!(code, 0, "stderr: {err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 1, "{out}");
    let scenario = rows[0]["scenario"].as_str().unwrap();
    let checked: u64 = scenario
        .trim_start_matches("verify, ")
        .trim_end_matches(" events")
        .parse()
        .unwrap_or_else(|_| panic!("{scenario}"));
    assert!(checked > 0, "{scenario}");
}

#[test]
fn check_exits_1_exactly_when_a_row_misses_its_target_and_names_it() {
    let (code, out, err) = bench(&["--only", "verify", "--secs", "1", "--json", "--check"]);
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
    let missed: Vec<&Value> = rows.iter().filter(|r| r["met"] == false).collect();
    assert!(rows.iter().all(|r| r["met"].is_boolean()), "{out}");
    if missed.is_empty() {
        assert_eq!(code, 0, "{err}");
    } else {
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("bench: missed: verify"), "{err}");
    }
    // Without --check a miss is reported, not failed.
    let (code, _, err) = bench(&["--only", "verify", "--secs", "1", "--json"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn bad_arguments_are_refused_before_anything_runs() {
    for (args, wanted) in [
        (
            &["--payload-bytes", "400000"][..],
            "'400000' for '--payload-bytes",
        ),
        (&["--events", "0"][..], "'0' for '--events"),
        (&["--secs", "601"][..], "'601' for '--secs"),
        (&["--only", "everything"][..], "'everything' for '--only"),
    ] {
        let (code, out, err) = bench(args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert!(err.contains(wanted), "{args:?}: {err}");
        assert!(!err.contains("bench: "), "{args:?} started running: {err}");
    }
}

#[test]
fn latency_samples_every_completion_of_the_steady_load() {
    let (code, out, err) = bench(&[
        "--only",
        "latency",
        "--secs",
        "1",
        "--payload-bytes",
        "16",
        "--json",
    ]);
    assert_eq!(code, 0, "stderr: {err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 1, "{out}");
    let result = rows[0]["result"].as_str().unwrap();
    // 5,000 events/s for one second, one subscription: one sample each.
    assert!(result.ends_with("(5000 samples)"), "{result}");
    assert!(result.starts_with("p50 "), "{result}");
}

#[test]
fn the_http_bench_reports_every_tenth_of_a_run_against_a_server_it_starts() {
    let (code, out, err) = bench(&[
        "--http",
        "--secs",
        "2",
        "--tenants",
        "1",
        "--connections",
        "4",
        "--payload-bytes",
        "100",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
    assert_eq!(rows.len(), 1, "{out}");
    let row = &rows[0];
    assert_eq!(row["scenario"], "http_emit");
    assert_eq!(row["non_2xx"], 0, "{out}");
    let rate = row["emits_per_sec"].as_f64().unwrap();
    assert!(rate > 0.0, "{out}");
    let tenths: Vec<f64> = row["emits_per_sec_by_tenth"]
        .as_array()
        .unwrap_or_else(|| panic!("no tenths in {out}"))
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert_eq!(tenths.len(), 10, "{out}");
    // Every answer falls in one tenth, so the tenths average to the run's
    // rate (each rounded to a whole emit per second).
    let mean = tenths.iter().sum::<f64>() / 10.0;
    assert!(
        (mean - rate).abs() <= 1.0,
        "mean of tenths {mean} against {rate}: {out}"
    );
    let ratio = row["last_over_first"].as_f64().unwrap();
    let expected = if tenths[0] > 0.0 {
        tenths[9] / tenths[0]
    } else {
        0.0
    };
    assert!(
        (ratio - expected).abs() < 0.01,
        "last/first {ratio} against the tenths: {out}"
    );
    // Two 10-s windows need a run of 20 s or more.
    assert!(row["last_10s_over_first_10s"].is_null(), "{out}");
    // The count behind the rate, and the store file's growth per emit,
    // which the bench sees since it started the server.
    let emits = row["emits"]
        .as_f64()
        .unwrap_or_else(|| panic!("no emits in {out}"));
    assert!(
        (emits / 2.0 - rate).abs() <= 0.5,
        "{emits} emits in 2 s against {rate}/s: {out}"
    );
    let bytes = row["store_bytes_per_emit"]
        .as_f64()
        .unwrap_or_else(|| panic!("no store bytes per emit in {out}"));
    assert!(bytes >= 0.0, "{out}");
}

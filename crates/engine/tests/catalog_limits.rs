//! The catalog's `[limits]`: a rate must be a number above 0, a burst at
//! least 1 and only with a rate.

use postbox_engine::Catalog;

#[test]
fn limits_are_checked_when_the_catalog_loads() {
    let ok = Catalog::from_toml("[limits]\ntenant_emits_per_second = 2.5\n", "t").unwrap();
    assert_eq!(ok.limits.tenant_emits(), Some((2.5, 3.0)));
    let ok = Catalog::from_toml(
        "[limits]\ntenant_emits_per_second = 10\ntenant_emit_burst = 50\n",
        "t",
    )
    .unwrap();
    assert_eq!(ok.limits.tenant_emits(), Some((10.0, 50.0)));
    assert_eq!(
        Catalog::from_toml("", "t").unwrap().limits.tenant_emits(),
        None
    );
    for (bad, says) in [
        ("tenant_emits_per_second = 0", "above 0"),
        ("tenant_emits_per_second = -1", "above 0"),
        ("tenant_emits_per_second = nan", "above 0"),
        (
            "tenant_emits_per_second = 1\ntenant_emit_burst = 0",
            "at least 1",
        ),
        (
            "tenant_emit_burst = 5",
            "needs limits.tenant_emits_per_second",
        ),
        ("emits = 5", "unknown field"),
    ] {
        let err = Catalog::from_toml(&format!("[limits]\n{bad}\n"), "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

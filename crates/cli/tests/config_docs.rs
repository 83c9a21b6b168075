//! `docs/configuration.md` documents exactly the fields the catalog and
//! pipes-config parsers accept. Each section's probe puts an unknown field
//! where that section's fields go; the parser's refusal lists the fields it
//! accepts there, which must be the section table's first column.

use std::collections::BTreeSet;

fn docs() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap()
}

/// The first column of the table under the heading `### <heading>`.
fn documented(doc: &str, heading: &str) -> BTreeSet<String> {
    let start = doc
        .find(&format!("### {heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let section = &doc[start + 4..];
    let section = &section[..section.find("\n#").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l[3..].split('`').next().unwrap().to_owned())
        .collect()
}

/// The fields a serde refusal of the unknown field `zz_probe` says it expects.
fn accepted(error: &str) -> BTreeSet<String> {
    assert!(
        error.contains("zz_probe"),
        "not the probe's refusal: {error}"
    );
    // "expected one of `a`, `b`, `c`" or "expected `a` or `b`".
    let list = error
        .split("expected ")
        .nth(1)
        .unwrap_or_else(|| panic!("no expected fields in {error}"));
    let list = list.lines().next().unwrap_or_default();
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_catalog_field_is_documented_and_nothing_else() {
    let doc = docs();
    let sub =
        "[[subscriptions]]\nname = \"s\"\nglob = \"A\"\nlane = \"DURABLE\"\nhandler = \"h\"\n";
    for (heading, probe) in [
        ("Top level", "zz_probe = 1\n".to_owned()),
        (
            "`[[event_types]]`",
            "[[event_types]]\nname = \"A\"\nzz_probe = 1\n".to_owned(),
        ),
        (
            "`[[producers]]`",
            "[[producers]]\nname = \"p\"\nzz_probe = 1\n".to_owned(),
        ),
        (
            "`[[entities]]`",
            "[[entities]]\nname = \"E\"\nzz_probe = 1\n".to_owned(),
        ),
        ("`[[subscriptions]]`", format!("{sub}zz_probe = 1\n")),
        (
            "`retry = { ... }` of a subscription",
            format!("{sub}retry = {{ zz_probe = 1 }}\n"),
        ),
        ("`[limits]`", "[limits]\nzz_probe = 1\n".to_owned()),
    ] {
        let err = postbox_engine::Catalog::from_toml(&probe, "probe")
            .expect_err(&probe)
            .to_string();
        assert_eq!(
            documented(&doc, heading),
            accepted(&err),
            "section {heading}"
        );
    }
}

#[test]
fn every_pipes_config_field_is_documented_and_nothing_else() {
    let doc = docs();
    let pipe = "[pipes.p]\nsource = \"t\"\n";
    for (heading, probe) in [
        ("`[relay]`", "[relay]\nzz_probe = 1\n".to_owned()),
        (
            "`[pipes.NAME]`",
            format!("{pipe}target = {{ queue = \"q\" }}\nzz_probe = 1\n"),
        ),
        (
            "`target = { ... }` of a pipe or a rule",
            format!("{pipe}target = {{ queue = \"q\", zz_probe = 1 }}\n"),
        ),
        (
            "`[[buses.NAME.rules]]`",
            "[[buses.b.rules]]\nname = \"r\"\npattern = \"{}\"\ntargets = []\nzz_probe = 1\n"
                .to_owned(),
        ),
    ] {
        let err = postbox_relay::RelayConfig::from_toml(&probe)
            .expect_err(&probe)
            .to_string();
        assert_eq!(
            documented(&doc, heading),
            accepted(&err),
            "section {heading}"
        );
    }
}

//! ARCHITECTURE.md is a map that matches the tree: every crate is named,
//! each crate's "Modules:" list names every module at the top of its `src`
//! and nothing that is not there, and every file or folder the document
//! points to exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `backticked` spans of `text`.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The modules at the top of a crate's `src`: `x.rs` and `x/mod.rs`, not
/// `lib.rs` or `main.rs`.
fn top_modules(src: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let folder = path.is_dir() && path.join("mod.rs").exists();
        let file = path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main";
        if folder || file {
            out.insert(name);
        }
    }
    out
}

/// The crate sections: (crate name, the section's text).
fn sections(doc: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("### `crates/") {
            let name = rest.split('`').next().unwrap().to_owned();
            out.push((name, String::new()));
        } else if line.starts_with("## ") || line.starts_with("### ") {
            out.push((String::new(), String::new()));
        } else if let Some((_, text)) = out.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    out.retain(|(name, _)| !name.is_empty());
    out
}

/// The names listed after "Modules:" up to the end of that paragraph.
fn module_list(section: &str) -> Option<BTreeSet<String>> {
    let start = section.find("Modules:")?;
    let paragraph = section[start..].split("\n\n").next().unwrap();
    Some(spans(paragraph).into_iter().map(str::to_owned).collect())
}

#[test]
fn the_code_map_names_every_crate_and_module_and_nothing_else() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut problems = Vec::new();

    let crates: BTreeSet<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(crates.len() > 10, "the crates were not found");
    for name in &crates {
        if !doc.contains(&format!("crates/{name}")) {
            problems.push(format!("crate `crates/{name}` is not named"));
        }
    }

    for (name, text) in sections(&doc) {
        let dir = root.join("crates").join(&name);
        if !dir.is_dir() {
            problems.push(format!("section `crates/{name}`: no such crate"));
            continue;
        }
        let Some(listed) = module_list(&text) else {
            problems.push(format!("section `crates/{name}` has no Modules: line"));
            continue;
        };
        for module in &listed {
            let base = dir.join("src").join(module);
            if !base.with_extension("rs").exists() && !base.join("mod.rs").exists() {
                problems.push(format!("`crates/{name}`: module `{module}` does not exist"));
            }
        }
        for module in top_modules(&dir.join("src")) {
            if !listed.contains(&module) {
                problems.push(format!("`crates/{name}`: module `{module}` is not listed"));
            }
        }
        // Tests the section points to, relative to the crate.
        for span in spans(&text) {
            if span.starts_with("tests/") && !dir.join(span).exists() {
                problems.push(format!("`crates/{name}`: `{span}` does not exist"));
            }
        }
    }

    // Paths from the repository's root, anywhere in the document.
    for span in spans(&doc) {
        let rooted = ["crates/", "research/", "scripts/", "conformance/"]
            .iter()
            .any(|p| span.starts_with(p));
        if rooted && !span.contains(' ') && !span.contains('*') {
            let path = span.trim_end_matches('/');
            if !root.join(path).exists() {
                problems.push(format!("`{span}` does not exist"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_map_stays_short() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let words = doc.split_whitespace().count();
    assert!(
        words <= 2_100,
        "ARCHITECTURE.md has {words} words; keep it a map"
    );
    // No pointer to a document that is not in the repository.
    assert!(
        !doc.contains("SPEC §"),
        "ARCHITECTURE.md cites a SPEC section"
    );
}

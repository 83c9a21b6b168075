//! The names this crate defines are spelled nowhere else in the sources:
//! a crate that needs one reads it from here, so renaming a table or queue
//! is one change.

use std::path::{Path, PathBuf};

/// Quoted literals that only `crates/topology` may contain.
const NAMES: [&str; 4] = [
    "\"postbox_events\"",
    "\"postbox-events.fifo\"",
    "\"postbox-events-dlq.fifo\"",
    "\"postbox_inbox\"",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn own_names_are_spelled_only_in_the_topology() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap() {
        let krate = krate.unwrap().path();
        if krate.ends_with("topology") || !krate.join("src").is_dir() {
            continue;
        }
        rust_files(&krate.join("src"), &mut files);
    }
    assert!(files.len() > 50, "the crates' sources were not found");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for name in NAMES {
                if line.contains(name) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "spelled outside crates/topology (use postbox_topology's constants):\n{}",
        found.join("\n")
    );
}

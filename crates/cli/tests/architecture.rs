//! ARCHITECTURE.md is a map that matches the tree: every crate is named,
//! each crate's "Modules:" list names every module at the top of its `src`
//! and nothing that is not there, and every file or folder the document
//! points to exists; and no module of a crate is in a circle of imports
//! with another.

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

/// The source files of each top-level module of a crate: `x.rs`, and
/// everything under `x/`.
fn module_files(src: &Path) -> std::collections::BTreeMap<String, Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for name in top_modules(src) {
        let mut files = Vec::new();
        let file = src.join(format!("{name}.rs"));
        if file.exists() {
            files.push(file);
        }
        let dir = src.join(&name);
        if dir.is_dir() {
            walk(&dir, &mut files);
        }
        out.insert(name, files);
    }
    out
}

/// The top-level modules `text` (code before its tests, comments left out)
/// names as `crate::<module>`.
fn uses(
    text: &str,
    modules: &std::collections::BTreeMap<String, Vec<PathBuf>>,
) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains_key(&name) {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn no_module_is_in_a_circle_of_imports() {
    let mut circles = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let modules = module_files(&src);
        let graph: std::collections::BTreeMap<&str, BTreeSet<String>> = modules
            .iter()
            .map(|(name, files)| {
                let mut used = BTreeSet::new();
                for f in files {
                    used.extend(uses(&std::fs::read_to_string(f).unwrap(), &modules));
                }
                used.remove(name);
                (name.as_str(), used)
            })
            .collect();
        // A circle: a module reachable from one it uses.
        for (from, used) in &graph {
            for to in used {
                let mut stack = vec![to.as_str()];
                let mut seen = BTreeSet::new();
                while let Some(m) = stack.pop() {
                    if m == *from {
                        circles.push(format!(
                            "{}: {from} -> {to} -> ... -> {from}",
                            src.display()
                        ));
                        break;
                    }
                    if seen.insert(m) {
                        stack.extend(graph.get(m).into_iter().flatten().map(String::as_str));
                    }
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules in a circle of imports:\n{}",
        circles.join("\n")
    );
}

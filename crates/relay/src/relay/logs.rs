//! JSON-lines log-file targets. A commit's lines are appended and each
//! file fsync'd once, before the commit that moves the checkpoint over
//! their records: a crash between the two repeats those lines (at least
//! once), it never loses them.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::PathBuf;

use super::RelayError;

/// Appends log lines (each with a newline) and fsyncs each file once.
pub(super) fn append_logs(lines: &[(PathBuf, String)]) -> Result<(), RelayError> {
    let mut files: Vec<(&PathBuf, File)> = Vec::new();
    for (path, line) in lines {
        let io = |e: std::io::Error| RelayError::Log {
            path: path.display().to_string(),
            error: e.to_string(),
        };
        let at = match files.iter().position(|(p, _)| *p == path) {
            Some(at) => at,
            None => {
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(io)?;
                files.push((path, f));
                files.len() - 1
            }
        };
        writeln!(files[at].1, "{line}").map_err(io)?;
    }
    for (path, f) in files {
        f.sync_data().map_err(|e| RelayError::Log {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_to_their_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        std::fs::write(&a, "0\n").unwrap();
        let line = |p: &PathBuf, l: &str| (p.clone(), l.to_owned());
        append_logs(&[line(&a, "1"), line(&b, "x"), line(&a, "2")]).unwrap();
        append_logs(&[line(&b, "y")]).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "0\n1\n2\n");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "x\ny\n");
    }

    #[test]
    fn an_unwritable_file_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("missing").join("a.jsonl");
        let e = append_logs(&[(bad.clone(), "1".into())]).unwrap_err();
        let RelayError::Log { path, .. } = e else {
            panic!("{e}")
        };
        assert_eq!(path, bad.display().to_string());
    }
}

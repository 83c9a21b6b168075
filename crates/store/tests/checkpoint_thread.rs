//! The thread that writes and syncs checkpoints (`embedded::deferred`) runs
//! nicer than the process: its work can wait, the writer's and the request
//! threads' cannot. Alone in its test binary, since it reads every thread of
//! the process.
#![cfg(target_os = "linux")]

use std::time::Duration;

use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};

/// The name the checkpoint thread shows in /proc (15 bytes of it).
const SHOWN_AS: &str = "postbox-ckpt-sy";

/// The niceness in a `/proc/.../stat` line (its 19th field).
fn nice_of(stat: &str) -> i32 {
    let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let nice = after_name.split_whitespace().nth(16).expect("19 fields");
    nice.parse().expect("a number")
}

/// The niceness of every thread of this process named `name`.
fn niceness_of_threads(name: &str) -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .expect("the process's threads")
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            (comm.trim_end() == name)
                .then(|| nice_of(&std::fs::read_to_string(dir.join("stat")).expect("a stat file")))
        })
        .collect()
}

#[test]
fn the_checkpoint_thread_runs_nicer_than_the_process() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = EmbeddedStore::open(dir.path().join("store.redb"), EmbeddedOptions::default())
        .expect("the store opens");
    let own = nice_of(&std::fs::read_to_string("/proc/thread-self/stat").expect("own stat"));
    // The thread lowers its priority first thing: wait until it has run.
    let mut found = Vec::new();
    for _ in 0..500 {
        found = niceness_of_threads(SHOWN_AS);
        if !found.is_empty() && found.iter().all(|&n| n > own) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !found.is_empty() && found.iter().all(|&n| n > own),
        "checkpoint threads' niceness {found:?}, the test thread's {own}"
    );
    drop(store);
}

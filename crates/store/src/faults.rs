//! Named fault-injection points (TiKV-style fail points), compiled only
//! with the `faults` feature or in unit tests; without it [`hit`] is a
//! constant `false` the compiler removes.
//!
//! A test (or a child process it starts, through `POSTBOX_FAULTS`) arms a
//! point by name; when the code reaches it, the point takes its action. The
//! points are named where they are: `worker::*` in the worker,
//! `relay::after_enqueue_before_checkpoint` and `relay::stats_before_store`
//! in the relay, `emit::after_commit_before_return` in the engine,
//! [`LOG_APPEND`], [`LOG_SYNC`] and [`GROUP_SYNC`] in the store's commit log,
//! [`CHECKPOINT_SYNC`] in its checkpoints, [`ARRIVAL_SWEEP_READ`] in its TTL
//! sweep, [`ARRIVAL_SAVE`] in its closing checkpoint. A test that must know a held point was reached before it goes on
//! asks `reached` (test builds only).

/// The write of a batch's commit-log record fails (as on a full disk):
/// with `Stop`, the write returns an I/O error.
pub const LOG_APPEND: &str = "store::log_append";
/// The `fdatasync` of the commit log fails: with `Stop`, the sync returns
/// an I/O error.
pub const LOG_SYNC: &str = "store::log_sync";
/// The sync thread's `fdatasync` of the commit log for a group of batches
/// (not a checkpoint's, which runs on the writer), before [`LOG_SYNC`]:
/// `Hold` stalls the syncs that answer writes while the writer goes on.
pub const GROUP_SYNC: &str = "store::group_sync";
/// The `fdatasync` of the store file after a checkpoint (on its own
/// thread) fails: with `Stop`, the sync returns an I/O error.
pub const CHECKPOINT_SYNC: &str = "store::checkpoint_sync";
/// The TTL sweep of a table in arrival order, between its read of a block's
/// rows and its deletes and note of the block's next expiry: `Hold` lets a
/// write land in the block while the sweep works from its older read.
pub const ARRIVAL_SWEEP_READ: &str = "store::arrival_sweep_read";

/// The closing checkpoint's save of the arrival indexes, after the first
/// table's: with `Stop`, the save fails (the checkpoint is made without it).
pub const ARRIVAL_SAVE: &str = "store::arrival_save";

/// What an armed point does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Kill this process at once with SIGKILL: no destructors, no flush.
    Kill,
    /// Make the step fail as if the process had stopped there: the worker
    /// abandons the message (no further writes, no delete).
    Stop,
    /// Stall the step (as a slow disk would) until the point is disarmed,
    /// then let it go on as if nothing had happened.
    Hold,
}

#[cfg(any(test, feature = "faults"))]
mod imp {
    use super::Action;
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;

    static ARMED: Mutex<Option<HashMap<String, Action>>> = Mutex::new(None);
    /// The armed points the code has reached (for tests that must know a
    /// step is held before they go on).
    static REACHED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

    /// Arms point `name` with `action` (process-wide).
    pub fn arm(name: &str, action: Action) {
        ARMED
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(name.to_owned(), action);
    }

    /// Disarms point `name`.
    pub fn disarm(name: &str) {
        if let Some(armed) = ARMED.lock().unwrap().as_mut() {
            armed.remove(name);
        }
    }

    /// Arms `name` with [`Action::Hold`] until the guard is dropped, so a
    /// test that panics while holding a step still lets it go (and does not
    /// hang on closing the store).
    pub fn hold(name: &str) -> Held {
        arm(name, Action::Hold);
        Held(name.to_owned())
    }

    /// See [`hold`].
    #[must_use = "the point is disarmed when the guard is dropped"]
    pub struct Held(String);

    impl Drop for Held {
        fn drop(&mut self) {
            disarm(&self.0);
        }
    }

    /// Disarms every point and forgets which were reached.
    pub fn clear() {
        *ARMED.lock().unwrap() = None;
        *REACHED.lock().unwrap() = None;
    }

    /// Whether the code has reached point `name` while it was armed.
    pub fn reached(name: &str) -> bool {
        REACHED
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|r| r.contains(name))
    }

    /// Arms points from `POSTBOX_FAULTS` (`name=kill,name=stop,name=hold`),
    /// for child processes of crash tests.
    pub fn arm_from_env() {
        let Ok(spec) = std::env::var("POSTBOX_FAULTS") else {
            return;
        };
        for part in spec.split(',').filter(|p| !p.is_empty()) {
            let (name, action) = part.split_once('=').unwrap_or((part, "kill"));
            let action = match action {
                "stop" => Action::Stop,
                "hold" => Action::Hold,
                _ => Action::Kill,
            };
            arm(name, action);
        }
    }

    fn armed(name: &str) -> Option<Action> {
        ARMED
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|m| m.get(name).copied())
    }

    /// The action armed at `name`, taken here: Kill never returns; Stop
    /// returns `true` (the caller abandons the step); Hold returns `false`
    /// once the point is disarmed.
    pub fn hit(name: &str) -> bool {
        let action = armed(name);
        if action.is_some() {
            REACHED
                .lock()
                .unwrap()
                .get_or_insert_with(HashSet::new)
                .insert(name.to_owned());
        }
        match action {
            None => false,
            Some(Action::Stop) => true,
            Some(Action::Hold) => {
                while armed(name) == Some(Action::Hold) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                false
            }
            Some(Action::Kill) => {
                tracing::warn!(point = name, "fault point: killing the process");
                let pid = std::process::id().to_string();
                // SIGKILL ourselves: exactly what an OOM killer or `kill -9` does.
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid])
                    .status();
                std::process::abort();
            }
        }
    }
}

#[cfg(not(any(test, feature = "faults")))]
mod imp {
    /// Without the `faults` feature no point is ever armed.
    #[inline(always)]
    pub fn hit(_name: &str) -> bool {
        false
    }
}

pub use imp::*;

/// An I/O step's fault point `name`: with `Stop` armed, the error the step
/// returns in place of doing its I/O.
pub fn io_fault(name: &str) -> std::io::Result<()> {
    if hit(name) {
        Err(std::io::Error::other(format!(
            "injected by fault point {name}"
        )))
    } else {
        Ok(())
    }
}

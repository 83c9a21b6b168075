//! Named fault-injection points in the worker's path (TiKV-style fail
//! points), compiled only with the `faults` feature or in unit tests.
//!
//! A test (or a child process it starts) arms a point by name; when the
//! worker reaches it, the point takes its action. The crash test arms
//! `worker::after_claim` with [`Action::Abort`] in a child process, so the
//! process dies by SIGKILL-equivalent abort with the claim taken and the
//! handler's effect not committed.
//!
//! Points: [`AFTER_CLAIM`], [`AFTER_HANDLER_BEFORE_COMPLETE`],
//! [`AFTER_COMPLETE_BEFORE_DELETE`].

/// After a claim was taken, before the handler runs.
pub const AFTER_CLAIM: &str = "worker::after_claim";
/// After the handler returned, before its completion commits.
pub const AFTER_HANDLER_BEFORE_COMPLETE: &str = "worker::after_handler_before_complete";
/// After the completion committed, before the message is deleted.
pub const AFTER_COMPLETE_BEFORE_DELETE: &str = "worker::after_complete_before_delete";

/// What an armed point does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Kill this process at once with SIGKILL: no destructors, no flush.
    Kill,
    /// Make the step fail as if the process had stopped there: the worker
    /// abandons the message (no further writes, no delete).
    Stop,
}

#[cfg(any(test, feature = "faults"))]
mod imp {
    use super::Action;
    use std::collections::HashMap;
    use std::sync::Mutex;

    static ARMED: Mutex<Option<HashMap<String, Action>>> = Mutex::new(None);

    /// Arms point `name` with `action` (process-wide).
    pub fn arm(name: &str, action: Action) {
        ARMED
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(name.to_owned(), action);
    }

    /// Disarms every point.
    pub fn clear() {
        *ARMED.lock().unwrap() = None;
    }

    /// Arms points from `POSTBOX_FAULTS` (`name=kill,name=stop`), for child
    /// processes of crash tests.
    pub fn arm_from_env() {
        let Ok(spec) = std::env::var("POSTBOX_FAULTS") else {
            return;
        };
        for part in spec.split(',').filter(|p| !p.is_empty()) {
            let (name, action) = part.split_once('=').unwrap_or((part, "kill"));
            let action = if action == "stop" {
                Action::Stop
            } else {
                Action::Kill
            };
            arm(name, action);
        }
    }

    /// The action armed at `name`, taken here: Kill never returns; Stop
    /// returns `true` (the caller abandons the step).
    pub fn hit(name: &str) -> bool {
        let action = ARMED
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|m| m.get(name).copied());
        match action {
            None => false,
            Some(Action::Stop) => true,
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

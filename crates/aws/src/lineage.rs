//! Which shards of a DynamoDB stream a pipe reads now, and from where: a
//! pure function of the shard list, the pipe's checkpoints and its
//! starting position.
//!
//! DynamoDB keeps an item's changes in order within a shard, and a shard
//! that splits hands on to its children. So a child is read only after its
//! parent is read to its end, and a child of a known parent starts at its
//! oldest record (TRIM_HORIZON), never at LATEST, even for a pipe that
//! started at LATEST: its records all came after the parent's. A parent no
//! longer listed (trimmed by the 24-hour retention) counts as finished.

use std::collections::{HashMap, HashSet};

use crate::streams::{Shard, Start};

/// What the pipe has recorded for one shard of the current stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardState {
    /// The last sequence number relayed, if any.
    pub sequence: Option<String>,
    /// Read to its end (or skipped by a LATEST start): never read again.
    pub finished: bool,
    /// Taken at LATEST when the pipe first started, before any record was
    /// relayed from it: a restart takes LATEST again.
    pub latest: bool,
}

/// What to do with one shard now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read it from here.
    Read(Start),
    /// Its parent is not finished yet.
    Wait,
    /// Finished earlier.
    Done,
    /// A closed shard a LATEST pipe's first start passes over: record it
    /// as finished without reading it.
    Skip,
}

/// The step for every shard of `shards`, in their order. `state` holds the
/// pipe's rows for this stream only; `latest` is the pipe's starting
/// position. With no rows at all the pipe starts fresh: at LATEST every
/// open shard is read from its latest record and every closed one skipped,
/// at TRIM_HORIZON every shard is read from its oldest record, parents
/// first.
pub fn steps(
    shards: &[Shard],
    state: &HashMap<String, ShardState>,
    latest: bool,
) -> Vec<(String, Step)> {
    let fresh = state.is_empty();
    let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
    let finished = |id: &str| state.get(id).is_some_and(|s| s.finished);
    shards
        .iter()
        .map(|shard| {
            let row = state.get(&shard.id);
            let step = if row.is_some_and(|r| r.finished) {
                Step::Done
            } else if fresh && latest {
                if shard.closed {
                    Step::Skip
                } else {
                    Step::Read(Start::Latest)
                }
            } else if let Some(seq) = row.and_then(|r| r.sequence.clone()) {
                Step::Read(Start::After(seq))
            } else if row.is_some_and(|r| r.latest) {
                Step::Read(Start::Latest)
            } else if shard
                .parent
                .as_deref()
                .is_some_and(|p| listed.contains(p) && !finished(p))
            {
                Step::Wait
            } else {
                Step::Read(Start::TrimHorizon)
            };
            (shard.id.clone(), step)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>, closed: bool) -> Shard {
        Shard {
            id: id.into(),
            parent: parent.map(Into::into),
            closed,
        }
    }

    fn state(rows: &[(&str, ShardState)]) -> HashMap<String, ShardState> {
        rows.iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn done() -> ShardState {
        ShardState {
            finished: true,
            ..Default::default()
        }
    }

    fn at(seq: &str) -> ShardState {
        ShardState {
            sequence: Some(seq.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_child_waits_for_its_parent_then_starts_at_its_oldest_record() {
        let shards = [shard("p", None, true), shard("c", Some("p"), false)];
        let s = steps(&shards, &state(&[("p", at("10"))]), false);
        assert_eq!(s[0].1, Step::Read(Start::After("10".into())));
        assert_eq!(s[1].1, Step::Wait);
        let s = steps(&shards, &state(&[("p", done())]), false);
        assert_eq!(s[0].1, Step::Done);
        assert_eq!(s[1].1, Step::Read(Start::TrimHorizon));
    }

    #[test]
    fn a_fresh_trim_horizon_pipe_reads_roots_first_and_children_after() {
        let shards = [
            shard("p", None, true),
            shard("c1", Some("p"), false),
            shard("c2", Some("p"), false),
        ];
        let s = steps(&shards, &HashMap::new(), false);
        assert_eq!(s[0].1, Step::Read(Start::TrimHorizon));
        assert_eq!(s[1].1, Step::Wait);
        assert_eq!(s[2].1, Step::Wait);
    }

    #[test]
    fn a_fresh_latest_pipe_skips_closed_shards_and_reads_open_ones_from_the_latest() {
        let shards = [shard("p", None, true), shard("c", Some("p"), false)];
        let s = steps(&shards, &HashMap::new(), true);
        assert_eq!(s[0].1, Step::Skip);
        assert_eq!(s[1].1, Step::Read(Start::Latest));
    }

    #[test]
    fn after_its_first_start_a_latest_pipe_reads_new_children_from_their_oldest_record() {
        // The open shard was taken at LATEST, then closed and split.
        let shards = [shard("p", None, true), shard("c", Some("p"), false)];
        let s = steps(&shards, &state(&[("p", done())]), true);
        assert_eq!(s[1].1, Step::Read(Start::TrimHorizon));
        // A shard taken at LATEST that relayed nothing yet keeps LATEST.
        let latest = ShardState {
            latest: true,
            ..Default::default()
        };
        let s = steps(&shards, &state(&[("p", latest)]), true);
        assert_eq!(s[0].1, Step::Read(Start::Latest));
        assert_eq!(s[1].1, Step::Wait);
    }

    #[test]
    fn a_parent_past_the_retention_counts_as_finished() {
        let shards = [shard("c", Some("gone"), false)];
        let s = steps(&shards, &state(&[("x", done())]), false);
        assert_eq!(s[0].1, Step::Read(Start::TrimHorizon));
    }
}

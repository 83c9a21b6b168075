//! The slow path, for a round in which some batch failed its pre-check:
//! batches are committed in order, and a failing one is retried with
//! exponential backoff up to the pipe's `max_retries`, then bisected
//! (when the pipe says so), and what still fails alone goes to the
//! dead-letter queue with the last reason, so the relay moves on.
//!
//! Each step commits what it settled before the next one starts: the
//! checkpoint moves past every record delivered or dead-lettered, in
//! order, and a crash repeats only the step it interrupted.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::RelayError;
use super::batch::Planned;
use super::commit::Commit;
use super::precheck::Facts;
use super::runner::Runner;
use crate::plan::DeadReason;

/// The longest wait before a retry.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Runner {
    /// Delivers `planned` (read after checkpoint `after`, cut into
    /// `batches`) one batch at a time: passing batches are gathered into one
    /// commit; a failing one is committed alone, after what came before it.
    /// Returns the new checkpoint.
    pub(super) async fn relay_batch_by_batch(
        &self,
        planned: &[Planned],
        batches: Vec<Vec<usize>>,
        after: u64,
        token: u64,
    ) -> Result<u64, RelayError> {
        let mut facts = Facts::new();
        let mut commit = Commit::new(after);
        for batch in batches {
            match self.precheck(planned, &batch, &mut facts) {
                Ok(()) => batch.iter().for_each(|&i| commit.add(i, &planned[i], None)),
                Err(error) => {
                    // Deliver what came before, then work on the failing batch alone.
                    let done = std::mem::replace(&mut commit, Commit::new(0));
                    let at = self.commit(planned, done, token).await?;
                    let at = self
                        .deliver_failing(planned, &batch, at, token, error, &mut facts)
                        .await?;
                    commit = Commit::new(at);
                }
            }
        }
        self.commit(planned, commit, token).await
    }

    /// Retries a failing batch with backoff, then bisects it, then sends
    /// what still fails alone to the dead-letter queue. Returns the new
    /// checkpoint.
    async fn deliver_failing(
        &self,
        planned: &[Planned],
        batch: &[usize],
        at: u64,
        token: u64,
        mut error: String,
        facts: &mut Facts,
    ) -> Result<u64, RelayError> {
        for attempt in 0..self.spec.max_retries {
            self.counters.retries.fetch_add(1, Relaxed);
            tokio::time::sleep(backoff(self.spec.retry_backoff, attempt)).await;
            facts.clear();
            match self.precheck(planned, batch, facts) {
                Ok(()) => {
                    let c = Commit::of_batch(planned, batch, at);
                    return self.commit(planned, c, token).await;
                }
                Err(e) => error = e,
            }
        }
        if let Some((left, right)) = halves(planned, batch, self.spec.bisect_on_failure) {
            self.counters.bisections.fetch_add(1, Relaxed);
            let at = Box::pin(self.deliver_part(planned, left, at, token, facts)).await?;
            return Box::pin(self.deliver_part(planned, right, at, token, facts)).await;
        }
        let c = failed_batch(planned, batch, at, &error);
        self.commit(planned, c, token).await
    }

    /// A half of a bisected batch: delivered if it passes, else failing.
    async fn deliver_part(
        &self,
        planned: &[Planned],
        part: &[usize],
        at: u64,
        token: u64,
        facts: &mut Facts,
    ) -> Result<u64, RelayError> {
        match self.precheck(planned, part, facts) {
            Ok(()) => {
                let c = Commit::of_batch(planned, part, at);
                self.commit(planned, c, token).await
            }
            Err(e) => {
                self.deliver_failing(planned, part, at, token, e, facts)
                    .await
            }
        }
    }
}

/// The wait before retry `attempt` (from 0): `first`, doubled at each
/// attempt, at most [`MAX_BACKOFF`].
fn backoff(first: Duration, attempt: u32) -> Duration {
    first.saturating_mul(1 << attempt.min(16)).min(MAX_BACKOFF)
}

/// The two halves a failing `batch` is bisected into, by record count;
/// `None` when the pipe does not bisect (`bisect` false) or the batch has
/// at most one delivering record, which nothing can split further.
fn halves<'b>(
    planned: &[Planned],
    batch: &'b [usize],
    bisect: bool,
) -> Option<(&'b [usize], &'b [usize])> {
    let delivering = batch.iter().filter(|&&i| planned[i].delivers()).count();
    (bisect && delivering > 1).then(|| batch.split_at(batch.len() / 2))
}

/// The commit of a batch that failed for good (after checkpoint `at`): its
/// delivering records go to the dead-letter queue with `error`; the others
/// as planned.
fn failed_batch(planned: &[Planned], batch: &[usize], at: u64, error: &str) -> Commit {
    let mut c = Commit::new(at);
    for &i in batch {
        let dead = planned[i]
            .delivers()
            .then(|| DeadReason::Delivery(error.to_owned()));
        c.add(i, &planned[i], dead);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Outcome;
    use crate::relay::batch::tests::planned;
    use crate::template::TemplateError;

    #[test]
    fn backoff_doubles_up_to_thirty_seconds() {
        let first = Duration::from_millis(100);
        let waits: Vec<u128> = (0..6).map(|a| backoff(first, a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200]);
        assert_eq!(backoff(first, 9), MAX_BACKOFF);
        // No overflow however many attempts or however long the first wait.
        assert_eq!(backoff(first, u32::MAX), MAX_BACKOFF);
        assert_eq!(backoff(Duration::MAX, 3), MAX_BACKOFF);
        assert_eq!(backoff(Duration::ZERO, 3), Duration::ZERO);
    }

    fn round() -> Vec<Planned> {
        vec![
            planned(1, Outcome::Deliver(Vec::new())),
            planned(2, Outcome::Filtered),
            planned(3, Outcome::Filtered),
            planned(4, Outcome::Deliver(Vec::new())),
            planned(
                5,
                Outcome::Dead(DeadReason::Template(TemplateError::Invalid("t".into()))),
            ),
        ]
    }

    #[test]
    fn a_batch_is_bisected_by_record_count_while_two_records_deliver() {
        let p = round();
        let all = [0, 1, 2, 3, 4];
        assert_eq!(halves(&p, &all, true), Some((&[0, 1][..], &[2, 3, 4][..])));
        assert_eq!(halves(&p, &all, false), None);
        // One delivering record: bisecting cannot isolate anything more.
        assert_eq!(halves(&p, &[0, 1, 2], true), None);
        assert_eq!(halves(&p, &[2, 3, 4], true), None);
    }

    #[test]
    fn a_failed_batch_dead_letters_only_its_delivering_records() {
        let p = round();
        let c = failed_batch(&p, &[0, 1, 2, 3, 4], 0, "queue q: refused");
        assert_eq!((c.to, c.delivered, c.filtered), (5, 0, 2));
        let refused = || DeadReason::Delivery("queue q: refused".into());
        assert_eq!(c.dead.len(), 3);
        assert_eq!(c.dead[..2], [(0, refused()), (3, refused())]);
        // A record planned dead keeps its own reason.
        assert!(matches!(c.dead[2], (4, DeadReason::Template(_))));
    }
}

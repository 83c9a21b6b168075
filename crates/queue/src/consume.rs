//! The receive loop every consumer of a queue runs: receive a batch, hand
//! it to the consumer, keep up to `in_flight` batches running, pause after a
//! failed receive (its messages are still in the queue) and after an empty
//! short poll (so an idle consumer does not spin), and stop when told.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

/// Runs `receive` then `process` until `stop` turns true, with up to
/// `in_flight` batches being processed at once (at least one). With one,
/// the batch runs in the loop and a stop abandons it (its messages come
/// back after their visibility timeout); with more, each batch is its own
/// task and the loop waits for those running before it returns. `process`
/// reports its own failures: nothing it does is lost by going on, since an
/// unsettled message comes back.
pub async fn consume<M, E, R, RF, P, PF>(
    consumer: &str,
    in_flight: usize,
    mut stop: watch::Receiver<bool>,
    receive: R,
    process: P,
) where
    R: Fn() -> RF,
    RF: Future<Output = Result<Vec<M>, E>>,
    E: Display,
    P: Fn(Vec<M>) -> PF,
    PF: Future<Output = ()> + Send + 'static,
{
    let in_flight = in_flight.max(1);
    let permits = Arc::new(Semaphore::new(in_flight));
    while !*stop.borrow() {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = stop.changed() => continue,
        };
        let received = tokio::select! {
            r = receive() => r,
            _ = stop.changed() => continue,
        };
        match received {
            Err(e) => {
                tracing::error!(consumer, error = %e, "receive failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // A short poll (wait 0) on an empty queue returns without
            // awaiting; looping on it would hold a runtime thread and
            // starve the tasks that hold messages.
            Ok(messages) if messages.is_empty() => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Ok(messages) if in_flight == 1 => {
                tokio::select! {
                    () = process(messages) => {}
                    _ = stop.changed() => {}
                }
            }
            Ok(messages) => {
                let run = process(messages);
                tokio::spawn(async move {
                    run.await;
                    drop(permit);
                });
            }
        }
    }
    // Let the batches in flight finish.
    let _ = permits.acquire_many(in_flight as u32).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Batches 1..=5 then empty polls; every batch is processed once, and
    /// the loop returns after a stop with none left running.
    async fn run(in_flight: usize) -> (Vec<usize>, usize) {
        let next = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = watch::channel(false);
        let (n, s, r) = (next.clone(), seen.clone(), running.clone());
        let lp = tokio::spawn(async move {
            consume(
                "test",
                in_flight,
                rx,
                || {
                    let i = n.fetch_add(1, Ordering::SeqCst) + 1;
                    async move {
                        match i {
                            3 => Err("refused"),
                            1..=6 => Ok(vec![i]),
                            _ => Ok(vec![]),
                        }
                    }
                },
                |batch: Vec<usize>| {
                    let (s, r) = (s.clone(), r.clone());
                    r.fetch_add(1, Ordering::SeqCst);
                    async move {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        s.lock().unwrap().extend(batch);
                        r.fetch_sub(1, Ordering::SeqCst);
                    }
                },
            )
            .await
        });
        while next.load(Ordering::SeqCst) < 10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tx.send(true).unwrap();
        lp.await.unwrap();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        (seen, running.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn every_batch_runs_once_and_a_failed_receive_is_skipped() {
        for in_flight in [1, 4] {
            assert_eq!(
                run(in_flight).await,
                (vec![1, 2, 4, 5, 6], 0),
                "in_flight {in_flight}"
            );
        }
    }
}

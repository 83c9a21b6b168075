//! The relay on AWS: each pipe of the relay config read from its table's
//! DynamoDB stream and delivered to SQS, with the planning the embedded
//! relay uses (`postbox_relay::plan`: filters, maximum age, templates, bus
//! rules, dead letters), so a pipe means the same on both backends.
//!
//! One task per pipe holds the pipe's lease ([`crate::pipe_state`]), lists
//! the stream's shards, reads the shards [`crate::lineage`] allows (parents
//! before children), and for each page of records: plans them, sends the
//! messages in order (SendMessageBatch, up to 10 per call), then moves the
//! shard's checkpoint, fenced by the lease. A crash between the send and
//! the checkpoint sends the page again: FIFO targets drop the repeats by
//! their deduplication ids (the stream record's eventID unless the pipe
//! sets one) within SQS's five minutes, and the inbox drops any later
//! repeat. Nothing is skipped: the checkpoint moves only after every
//! record of the page was accepted by its queue or its dead-letter queue.
//!
//! A message its queue refuses is retried with the pipe's backoff up to
//! its `max_retries`, then dead-lettered with the reason. An expired shard
//! iterator is taken again from the checkpoint; records past the stream's
//! retention, and a stream replaced by a new one (disabled and enabled
//! again), are reported as a gap (an error in the log and
//! [`StreamsPipeStats::gaps`]) and the pipe goes on from the oldest record
//! still retained.
//!
//! Known difference from the embedded relay: a failing batch is retried
//! message by message rather than bisected, and a message retried after
//! later ones of its batch were accepted lands after them in its group.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use postbox_queue::{NewMessage, QueueClient};
use postbox_relay::RelayConfig;
use postbox_relay::config::{PipeSpec, Rule};
use postbox_relay::lease::Decision;
use postbox_relay::plan::{
    DeadReason, Delivery, Outcome, QueueMessage, RecordView, dead_letter, plan,
};
use postbox_store::{Clock, ItemStore, StoreError, SystemClock};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::lineage::{ShardState, Step, steps};
use crate::pipe_state::{PipeState, StateError};
use crate::streams::{ReadError, Start, StreamRecord, StreamSource};
use crate::{DynamoStore, SqsQueues};

/// Fault point: after a page's messages were sent, before its checkpoint
/// moves (`postbox_store::faults`; `Stop` ends the session there, as a
/// crash would).
pub const AFTER_SEND_BEFORE_CHECKPOINT: &str = "relay::aws::after_send_before_checkpoint";

/// How the relay on AWS runs.
#[derive(Clone)]
pub struct StreamsRelayOptions {
    /// This relay's identity in lease rows; unique per process.
    pub owner: String,
    /// The pause between reads of a stream with nothing new (DynamoDB
    /// Streams allows about four reads per second per shard).
    pub poll: Duration,
    /// Most records per GetRecords (1-1000).
    pub page: i32,
    /// The state table (before the stack's prefix).
    pub table: String,
    /// "Now" for record ages and leases.
    pub clock: Arc<dyn Clock>,
}

impl Default for StreamsRelayOptions {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        StreamsRelayOptions {
            owner: format!("relay-{}-{nanos:09}", std::process::id()),
            poll: Duration::from_millis(250),
            page: 1000,
            table: crate::pipe_state::TABLE.to_owned(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl std::fmt::Debug for StreamsRelayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsRelayOptions")
            .field("owner", &self.owner)
            .field("poll", &self.poll)
            .field("page", &self.page)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// A pipe's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamsPipeStats {
    /// The pipe.
    pub pipe: String,
    /// Whether this relay holds the pipe's lease.
    pub holds_lease: bool,
    /// Messages (and log lines) delivered.
    pub delivered: u64,
    /// Records no filter matched.
    pub filtered: u64,
    /// Records sent to the dead-letter queue.
    pub dead_lettered: u64,
    /// Times records were lost to the stream's retention or a replaced
    /// stream.
    pub gaps: u64,
    /// Commit time of the last record relayed, ms since the epoch.
    pub last_record_ms: u64,
}

#[derive(Default)]
struct Counters {
    holds_lease: AtomicBool,
    delivered: AtomicU64,
    filtered: AtomicU64,
    dead_lettered: AtomicU64,
    gaps: AtomicU64,
    last_record_ms: AtomicU64,
}

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
#[error("pipe {pipe}: {message}")]
pub struct StartError {
    /// The pipe.
    pub pipe: String,
    /// What is wrong.
    pub message: String,
}

/// A running relay on AWS: one task per pipe.
pub struct StreamsRelay {
    pipes: Vec<(String, Arc<Counters>)>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for StreamsRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsRelay")
            .field("pipes", &self.pipes.len())
            .finish_non_exhaustive()
    }
}

impl StreamsRelay {
    /// Checks every pipe (its table has a stream; its queues exist), then
    /// starts one task per pipe, reading the streams through `streams`
    /// (a [`crate::Streams`] client).
    pub async fn start<S: StreamSource>(
        store: DynamoStore,
        streams: S,
        queues: SqsQueues,
        config: RelayConfig,
        options: StreamsRelayOptions,
    ) -> Result<StreamsRelay, StartError> {
        let buses = Arc::new(config.buses.clone());
        let (stop, _) = watch::channel(false);
        let mut pipes = Vec::new();
        let mut tasks = Vec::new();
        for spec in config.pipes {
            let arn = stream_arn(&store, &spec.table)
                .await
                .map_err(|message| StartError {
                    pipe: spec.name.clone(),
                    message,
                })?;
            check_queues(&queues, &spec, &buses).await?;
            for w in &spec.warnings {
                tracing::warn!(pipe = %spec.name, "{w}");
            }
            tracing::info!(pipe = %spec.name, stream = %arn, "relaying from DynamoDB Streams");
            let counters = Arc::new(Counters::default());
            let pipe = Pipe {
                state: PipeState::new(store.clone(), &options.table, &spec.name),
                spec,
                buses: buses.clone(),
                store: store.clone(),
                streams: streams.clone(),
                queues: queues.clone(),
                options: options.clone(),
                lease: config.lease,
                counters: counters.clone(),
            };
            pipes.push((pipe.spec.name.clone(), counters));
            tasks.push(tokio::spawn(pipe.run(stop.subscribe())));
        }
        Ok(StreamsRelay { pipes, tasks, stop })
    }

    /// Every pipe's counters.
    pub fn stats(&self) -> Vec<StreamsPipeStats> {
        stats_of(&self.pipes)
    }

    /// A reader of [`StreamsRelay::stats`] that outlives a borrow of the
    /// relay (for a metrics page).
    pub fn stats_source(&self) -> impl Fn() -> Vec<StreamsPipeStats> + Send + Sync + 'static {
        let pipes = self.pipes.clone();
        move || stats_of(&pipes)
    }

    /// Stops every pipe after its current page and gives up the leases.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn stats_of(pipes: &[(String, Arc<Counters>)]) -> Vec<StreamsPipeStats> {
    pipes
        .iter()
        .map(|(pipe, c)| StreamsPipeStats {
            pipe: pipe.clone(),
            holds_lease: c.holds_lease.load(Relaxed),
            delivered: c.delivered.load(Relaxed),
            filtered: c.filtered.load(Relaxed),
            dead_lettered: c.dead_lettered.load(Relaxed),
            gaps: c.gaps.load(Relaxed),
            last_record_ms: c.last_record_ms.load(Relaxed),
        })
        .collect()
}

/// The ARN of `table`'s current stream, or why there is none.
async fn stream_arn(store: &DynamoStore, table: &str) -> Result<String, String> {
    let described = store
        .describe_table(table)
        .await
        .map_err(|e| format!("cannot describe the source table {table}: {e}"))?;
    described.latest_stream_arn.filter(|_| {
        described
            .stream_specification
            .as_ref()
            .is_some_and(|s| s.stream_enabled)
    })
    .ok_or_else(|| {
        format!(
            "the source table {table} has no stream; enable one with NEW_AND_OLD_IMAGES (postbox init --backend aws does for the events table)"
        )
    })
}

/// Every queue `spec` may send to exists.
async fn check_queues(
    queues: &SqsQueues,
    spec: &PipeSpec,
    buses: &BTreeMap<String, Vec<Rule>>,
) -> Result<(), StartError> {
    for name in spec.queues(buses) {
        if let Err(e) = queues
            .queue_attributes(&name, &["QueueArn".to_owned()])
            .await
        {
            return Err(StartError {
                pipe: spec.name.clone(),
                message: format!(
                    "queue {name}: {e} (create it first; postbox init --backend aws creates the events pipe's queues)"
                ),
            });
        }
    }
    Ok(())
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("the lease was lost to another relay")]
    LeaseLost,
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("stream: {0}")]
    Read(#[from] ReadError),
    #[error("{0}")]
    Send(String),
    #[error("stopped at fault point {0}")]
    Fault(&'static str),
}

impl From<StateError> for SessionError {
    fn from(e: StateError) -> Self {
        match e {
            StateError::LeaseLost => SessionError::LeaseLost,
            StateError::Store(e) => SessionError::Store(e),
        }
    }
}

/// One pipe's task.
struct Pipe<S> {
    spec: PipeSpec,
    buses: Arc<BTreeMap<String, Vec<Rule>>>,
    store: DynamoStore,
    streams: S,
    queues: SqsQueues,
    state: PipeState,
    options: StreamsRelayOptions,
    lease: Duration,
    counters: Arc<Counters>,
}

/// A held lease: its token and when this relay renews it.
struct Held {
    token: u64,
    renew_at: u64,
}

impl<S: StreamSource> Pipe<S> {
    fn now(&self) -> u64 {
        self.options.clock.now_ms()
    }

    /// Sessions until stopped; a failed one starts over after a pause.
    async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut failures = 0u32;
        loop {
            if *stop.borrow() {
                return;
            }
            match self.session(&mut stop).await {
                Ok(()) => return,
                Err(e) => {
                    self.counters.holds_lease.store(false, Relaxed);
                    failures += 1;
                    tracing::warn!(pipe = %self.spec.name, error = %e, "relay session ended; starting over");
                    let pause = Duration::from_millis(100 * 2u64.pow(failures.min(6)));
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
    }

    async fn session(&self, stop: &mut watch::Receiver<bool>) -> Result<(), SessionError> {
        let tick = self.lease / 3;
        let mut held = loop {
            match self
                .state
                .acquire(&self.options.owner, self.now(), self.lease)
                .await?
            {
                Decision::Take(l) => {
                    break Held {
                        token: l.token,
                        renew_at: l.expires_at - self.lease.as_millis() as u64 / 2,
                    };
                }
                Decision::Held(_) => {
                    tokio::select! {
                        () = tokio::time::sleep(tick) => {}
                        _ = stop.changed() => return Ok(()),
                    }
                }
            }
        };
        self.counters.holds_lease.store(true, Relaxed);
        tracing::info!(pipe = %self.spec.name, owner = %self.options.owner, token = held.token, "holding the pipe's lease");
        let result = self.relay(stop, &mut held).await;
        self.counters.holds_lease.store(false, Relaxed);
        if let Err(e) = self
            .state
            .release(&self.options.owner, held.token, self.now())
            .await
        {
            tracing::warn!(pipe = %self.spec.name, error = %e, "could not give the lease up");
        }
        result
    }

    /// Reads and delivers until stopped.
    async fn relay(
        &self,
        stop: &mut watch::Receiver<bool>,
        held: &mut Held,
    ) -> Result<(), SessionError> {
        let mut arn = self.current_stream().await?;
        let mut iterators: HashMap<String, String> = HashMap::new();
        // The stream whose replacement was last reported, to report it once.
        let mut reported: Option<String> = None;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            self.keep_lease(held).await?;
            let mut all = self.state.checkpoints().await?;
            let known = all.remove(&arn).unwrap_or_default();
            // Checkpoints of another stream only: the table's stream was
            // disabled and enabled again since this pipe last read it.
            let replaced = !all.is_empty() && known.is_empty();
            if replaced && reported.as_deref() != Some(arn.as_str()) {
                let old: Vec<&str> = all.keys().map(String::as_str).collect();
                self.gap(&format!(
                    "the stream of table {} was replaced: records of {} not yet relayed are lost to this pipe; reading the new stream {arn} from its oldest record",
                    self.spec.table,
                    old.join(", ")
                ));
                reported = Some(arn.clone());
            }
            let shards = self.streams.shards(&arn).await?;
            let latest =
                self.spec.start == postbox_relay::config::StartPosition::Latest && !replaced;
            let mut read_any = false;
            for (shard, step) in steps(&shards, &known, latest) {
                let row = known.get(&shard).cloned().unwrap_or_default();
                match step {
                    Step::Done | Step::Wait => {}
                    Step::Skip => {
                        let done = ShardState {
                            finished: true,
                            ..row
                        };
                        self.checkpoint(held, &arn, &shard, &done).await?;
                    }
                    Step::Read(start) => {
                        if start == Start::Latest && !row.latest {
                            let mark = ShardState {
                                latest: true,
                                ..row.clone()
                            };
                            self.checkpoint(held, &arn, &shard, &mark).await?;
                        }
                        read_any |= self
                            .read_shard(held, &arn, &shard, start, row, &mut iterators)
                            .await?;
                    }
                }
            }
            if !read_any {
                tokio::select! {
                    () = tokio::time::sleep(self.options.poll) => {}
                    _ = stop.changed() => return Ok(()),
                }
                let now_arn = self.current_stream().await?;
                if now_arn != arn {
                    arn = now_arn;
                    iterators.clear();
                }
            }
        }
    }

    async fn current_stream(&self) -> Result<String, SessionError> {
        stream_arn(&self.store, &self.spec.table)
            .await
            .map_err(|e| SessionError::Read(ReadError::NotFound(e)))
    }

    /// Reads up to a few pages of `shard` (from its iterator, or `start`);
    /// whether any record came.
    async fn read_shard(
        &self,
        held: &mut Held,
        arn: &str,
        shard: &str,
        start: Start,
        mut row: ShardState,
        iterators: &mut HashMap<String, String>,
    ) -> Result<bool, SessionError> {
        let iterator = match iterators.remove(shard) {
            Some(it) => it,
            None => match self.streams.iterator(arn, shard, &start).await {
                Ok(it) => it,
                Err(ReadError::Trimmed(what)) => {
                    self.gap(&format!("shard {shard}: the checkpoint is past the stream's retention ({what}); records between it and the oldest retained are lost to this pipe"));
                    row.sequence = None;
                    row.latest = false;
                    self.checkpoint(held, arn, shard, &row).await?;
                    self.streams
                        .iterator(arn, shard, &Start::TrimHorizon)
                        .await?
                }
                Err(e) => return Err(e.into()),
            },
        };
        let page = match self
            .streams
            .records(arn, &iterator, self.options.page)
            .await
        {
            Ok(page) => page,
            // Taken again from the checkpoint next round.
            Err(ReadError::Expired) => return Ok(false),
            // Before this pipe relayed anything from the shard, an iterator
            // taken at its start can only have been overtaken by the
            // retention between two calls, and DynamoDB Local answers so
            // for an iterator taken on an empty shard: take it again from
            // the start, nothing to report.
            Err(ReadError::Trimmed(what)) if row.sequence.is_none() => {
                tracing::debug!(pipe = %self.spec.name, shard, "{what}; taking the shard's iterator again");
                return Ok(false);
            }
            Err(ReadError::Trimmed(what)) => {
                self.gap(&format!(
                    "shard {shard}: records after the checkpoint were trimmed before they were read ({what}); reading goes on from the oldest retained"
                ));
                row.sequence = None;
                row.latest = false;
                self.checkpoint(held, arn, shard, &row).await?;
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        };
        let got = !page.records.is_empty();
        if got {
            self.deliver(&page.records).await?;
            if postbox_store::faults::hit(AFTER_SEND_BEFORE_CHECKPOINT) {
                return Err(SessionError::Fault(AFTER_SEND_BEFORE_CHECKPOINT));
            }
            let last = page.records.last().expect("not empty");
            row.sequence = Some(last.sequence.clone());
            row.latest = false;
            self.counters.last_record_ms.store(last.created_ms, Relaxed);
        }
        match page.next {
            Some(next) => {
                if got {
                    self.checkpoint(held, arn, shard, &row).await?;
                }
                iterators.insert(shard.to_owned(), next);
            }
            None => {
                row.finished = true;
                self.checkpoint(held, arn, shard, &row).await?;
                tracing::debug!(pipe = %self.spec.name, shard, "shard read to its end");
            }
        }
        Ok(got)
    }

    async fn checkpoint(
        &self,
        held: &mut Held,
        arn: &str,
        shard: &str,
        row: &ShardState,
    ) -> Result<(), SessionError> {
        self.keep_lease(held).await?;
        self.state
            .set_checkpoint(
                (&self.options.owner, held.token, self.now()),
                arn,
                shard,
                row,
            )
            .await?;
        Ok(())
    }

    /// Renews the lease once half of it is used.
    async fn keep_lease(&self, held: &mut Held) -> Result<(), SessionError> {
        let now = self.now();
        if now >= held.renew_at {
            self.state
                .renew(&self.options.owner, held.token, now, self.lease)
                .await?;
            held.renew_at = now + self.lease.as_millis() as u64 / 2;
        }
        Ok(())
    }

    fn gap(&self, what: &str) {
        self.counters.gaps.fetch_add(1, Relaxed);
        tracing::error!(pipe = %self.spec.name, "{what}");
    }

    /// Plans `records` and sends what they become, in order.
    async fn deliver(&self, records: &[StreamRecord]) -> Result<(), SessionError> {
        let now = self.now();
        let ids: Vec<String> = records
            .iter()
            .map(|r| format!("{}#{}", self.spec.table, r.sequence))
            .collect();
        let view = |i: usize| RecordView {
            json: &records[i].json,
            id: &ids[i],
            created_ms: records[i].created_ms,
            images: None,
        };
        // (message, the record it came from) in record order.
        let mut out: Vec<(QueueMessage, usize)> = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match plan(&self.spec, &self.buses, view(i), now) {
                Outcome::Filtered => {
                    self.counters.filtered.fetch_add(1, Relaxed);
                }
                Outcome::Dead(reason) => {
                    self.counters.dead_lettered.fetch_add(1, Relaxed);
                    tracing::warn!(pipe = %self.spec.name, record = %id, code = reason.code(), "{reason}");
                    out.push((
                        dead_letter(
                            &self.spec.name,
                            &self.spec.dead_letter_queue,
                            view(i),
                            &reason,
                            now,
                        ),
                        i,
                    ));
                }
                Outcome::Deliver(deliveries) => {
                    for d in deliveries {
                        match d {
                            Delivery::Queue(m) => out.push((m, i)),
                            Delivery::Log { path, line } => {
                                append_line(&path, &line).map_err(SessionError::Send)?;
                                self.counters.delivered.fetch_add(1, Relaxed);
                            }
                        }
                    }
                }
            }
        }
        // Consecutive messages for one queue go together, ten at most.
        let mut rest = &out[..];
        while !rest.is_empty() {
            let queue = &rest[0].0.queue;
            let n = rest
                .iter()
                .take(10)
                .take_while(|(m, _)| &m.queue == queue)
                .count();
            let failed = self.send_with_retries(&rest[..n]).await?;
            for (error, i) in failed {
                self.counters.dead_lettered.fetch_add(1, Relaxed);
                let reason = DeadReason::Delivery(error);
                tracing::warn!(pipe = %self.spec.name, record = %ids[i], "{reason}");
                let dead = dead_letter(
                    &self.spec.name,
                    &self.spec.dead_letter_queue,
                    view(i),
                    &reason,
                    now,
                );
                self.queues
                    .send(&dead.queue, dead.message)
                    .await
                    .map_err(|e| {
                        SessionError::Send(format!("dead-letter queue {}: {e}", dead.queue))
                    })?;
            }
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Sends `batch` (one queue), retrying what fails with the pipe's
    /// backoff; answers the messages still refused after every retry, with
    /// the error and their record.
    async fn send_with_retries(
        &self,
        batch: &[(QueueMessage, usize)],
    ) -> Result<Vec<(String, usize)>, SessionError> {
        let queue = batch[0].0.queue.clone();
        let mut pending: Vec<(NewMessage, usize, String)> = batch
            .iter()
            .map(|(m, i)| (m.message.clone(), *i, String::new()))
            .collect();
        let mut delay = self.spec.retry_backoff;
        for attempt in 0..=self.spec.max_retries {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            let messages = pending.iter().map(|(m, _, _)| m.clone()).collect();
            match self.queues.send_batch(&queue, messages).await {
                Ok(results) => {
                    let mut still = Vec::new();
                    for ((m, i, _), r) in pending.into_iter().zip(results) {
                        match r {
                            Ok(_) => {
                                self.counters.delivered.fetch_add(1, Relaxed);
                            }
                            Err(e) => still.push((m, i, e.to_string())),
                        }
                    }
                    pending = still;
                }
                Err(e) => {
                    for p in &mut pending {
                        p.2 = e.to_string();
                    }
                }
            }
            if pending.is_empty() {
                return Ok(Vec::new());
            }
            tracing::debug!(pipe = %self.spec.name, queue, attempt, failed = pending.len(), "send failed; retrying");
        }
        Ok(pending
            .into_iter()
            .map(|(_, i, e)| (format!("queue {queue}: {e}"), i))
            .collect())
    }
}

/// Appends `line` to the JSON-lines file `path` and syncs it before the
/// checkpoint moves (a crash repeats the line: at least once).
fn append_line(path: &std::path::Path, line: &str) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("log file {}: {e}", path.display()))?;
    writeln!(file, "{line}")
        .and_then(|()| file.sync_data())
        .map_err(|e| format!("log file {}: {e}", path.display()))
}

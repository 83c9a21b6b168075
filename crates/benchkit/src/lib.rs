//! What Postbox's benchmark harnesses share.
//!
//! Throughput moves with whatever else runs on the machine; CPU time per
//! unit of work moves much less, so the harnesses print both, and the bytes
//! written per unit of work. Every function reads Linux's /proc and returns
//! zero where it is missing.

/// CPU seconds (user + system) this process has used so far.
pub fn process_cpu() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .map(|stat| stat_cpu(&stat))
        .unwrap_or(0.0)
}

/// CPU seconds used so far by this process's threads whose name starts with
/// `prefix` (threads that have exited are not counted).
pub fn thread_cpu(prefix: &str) -> f64 {
    per_thread(prefix).values().sum()
}

/// The CPU time of each thread whose name starts with a prefix, at one
/// moment: [`ThreadCpu::elapsed`] then says what those threads, and any
/// started since, used in between. Unlike differences of [`thread_cpu`], a
/// thread that exits meanwhile (a store dropped by an earlier scenario)
/// cannot make the figure shrink or go negative.
#[derive(Clone, Debug)]
pub struct ThreadCpu {
    prefix: String,
    by_thread: std::collections::HashMap<String, f64>,
}

impl ThreadCpu {
    /// The threads named `prefix...` now.
    pub fn now(prefix: &str) -> ThreadCpu {
        ThreadCpu {
            prefix: prefix.to_owned(),
            by_thread: per_thread(prefix),
        }
    }

    /// CPU seconds used since [`ThreadCpu::now`] by the threads alive now:
    /// all of it for a thread started since, the growth for the others.
    pub fn elapsed(&self) -> f64 {
        per_thread(&self.prefix)
            .into_iter()
            .map(|(tid, cpu)| cpu - self.by_thread.get(&tid).copied().unwrap_or(0.0))
            .sum()
    }
}

/// CPU seconds by thread id, for the threads named `prefix...`.
fn per_thread(prefix: &str) -> std::collections::HashMap<String, f64> {
    threads_named(prefix)
        .filter_map(|(tid, dir)| {
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            Some((tid, stat_cpu(&stat)))
        })
        .collect()
}

/// This process's threads whose name starts with `prefix`: their ids and
/// /proc directories (none where /proc is missing).
fn threads_named(prefix: &str) -> impl Iterator<Item = (String, std::path::PathBuf)> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(move |task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .map(|task| (task.file_name().to_string_lossy().into_owned(), task.path()))
}

/// [`thread_cpu`] with nanosecond precision (the run time in
/// /proc/self/task/*/schedstat), fine enough for runs of a tenth of a
/// second; user and system time are not told apart.
pub fn thread_cpu_precise(prefix: &str) -> f64 {
    let ns: u64 = threads_named(prefix)
        .filter_map(|(_, dir)| std::fs::read_to_string(dir.join("schedstat")).ok())
        .filter_map(|stat| stat.split(' ').next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

/// Bytes this process has passed to write calls so far (`wchar` of
/// /proc/self/io): the store's commit-log records, the pages its
/// checkpoints write, and the log's preallocation. Not `write_bytes`, the
/// block layer's count: on the development VM it overstated a pwrite +
/// fdatasync loop 20x against the disk's own counters
/// (`/sys/block/*/stat`), which showed 1.02x.
pub fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// utime + stime of a stat line, in seconds. They are its 14th and 15th
/// fields (12th and 13th after the name), in ticks of 1/100 s.
fn stat_cpu(stat: &str) -> f64 {
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => (user + system) as f64 / 100.0,
        _ => 0.0,
    }
}

/// The setting `name` from the environment, parsed; `default` when it is
/// unset or does not parse.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `values` (the upper of the middle two for an even count).
/// Panics when `values` is empty.
pub fn median(values: Vec<f64>) -> f64 {
    median_by(values, |v| *v)
}

/// The item of `items` whose `key` is the median (the upper of the middle
/// two for an even count). Panics when `items` is empty.
pub fn median_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = items.len() / 2;
    items.swap_remove(mid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_name_with_spaces() {
        let line = "42 (tokio-rt (w) 1) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0";
        assert_eq!(stat_cpu(line), 4.0);
        assert_eq!(stat_cpu("42 (x) S 1 2"), 0.0);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let start = process_cpu();
        // This thread's name is the test's, cut to 15 bytes by the kernel.
        let mine = ThreadCpu::now("tests::this_pro");
        while mine.elapsed() < 0.02 {
            std::hint::black_box(0u64);
        }
        assert!(process_cpu() - start >= 0.02);
        assert!(thread_cpu_precise("tests::this_pro") >= 0.02);
        assert_eq!(thread_cpu("no thread is called this"), 0.0);
    }

    #[test]
    fn a_thread_that_ends_does_not_take_its_time_away() {
        // Spins until this thread has used `secs` of CPU itself.
        fn spin(name: &str, secs: f64) {
            while thread_cpu(name) < secs {
                std::hint::black_box(0u64);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let ended = std::thread::Builder::new()
            .name("benchkit-ended".into())
            .spawn(move || {
                spin("benchkit-ended", 0.03);
                rx.recv().unwrap();
            })
            .unwrap();
        while thread_cpu("benchkit-ended") < 0.03 {
            std::thread::yield_now();
        }
        let before = ThreadCpu::now("benchkit-");
        tx.send(()).unwrap();
        ended.join().unwrap();
        // A joined thread can still be listed in /proc for a moment while
        // the kernel finishes its exit.
        for _ in 0..1000 {
            if per_thread("benchkit-ended").is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            per_thread("benchkit-ended").is_empty(),
            "the thread is gone"
        );
        // The differences of totals go negative when a thread ends...
        assert!(thread_cpu("benchkit-") < 0.03);
        // ... the snapshot does not, and counts a thread started since.
        assert_eq!(before.elapsed(), 0.0);
        std::thread::Builder::new()
            .name("benchkit-new".into())
            .spawn(|| {
                let mine = ThreadCpu::now("benchkit-new");
                spin("benchkit-new", 0.02);
                assert!(mine.elapsed() >= 0.02);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_synced_file_counts_as_bytes_written() {
        use std::io::Write;
        let before = bytes_written();
        let mut f = tempfile_in_target();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        assert!(bytes_written() - before >= 1 << 20);
    }

    #[test]
    fn the_median_is_the_middle_value_and_the_upper_of_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        let runs = vec![("a", 9.0), ("b", 1.0), ("c", 5.0)];
        assert_eq!(median_by(runs, |r| r.1).0, "c");
    }

    fn tempfile_in_target() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("postbox-benchkit-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}

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
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| thread_name(stat).is_some_and(|name| name.starts_with(prefix)))
        .map(|stat| stat_cpu(&stat))
        .sum()
}

/// [`thread_cpu`] with nanosecond precision (the run time in
/// /proc/self/task/*/schedstat), fine enough for runs of a tenth of a
/// second; user and system time are not told apart.
pub fn thread_cpu_precise(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ns: u64 = tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split(' ').next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

/// Bytes this process has caused to be written to storage so far
/// (`write_bytes` of /proc/self/io): with durable commits, the write
/// amplification of the store, which a copy-on-write B-tree pays per page.
pub fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The name field of a stat line: between the first '(' and the last ')'
/// (a name may itself hold spaces and parentheses).
fn thread_name(stat: &str) -> Option<&str> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    stat.get(open + 1..close)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_name_with_spaces() {
        let line = "42 (tokio-rt (w) 1) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0";
        assert_eq!(thread_name(line), Some("tokio-rt (w) 1"));
        assert_eq!(stat_cpu(line), 4.0);
        assert_eq!(stat_cpu("42 (x) S 1 2"), 0.0);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let start = process_cpu();
        let mut x = 0u64;
        while process_cpu() - start < 0.02 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        // This thread's name is the test's, cut to 15 bytes by the kernel.
        assert!(thread_cpu("tests::this_pro") >= 0.01);
        assert_eq!(thread_cpu("no thread is called this"), 0.0);
        assert!(thread_cpu_precise("tests::this_pro") >= 0.01);
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

    fn tempfile_in_target() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("postbox-benchkit-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}

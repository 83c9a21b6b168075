//! Scratch benchmark: redb 4.x vs fjall 3.x on Postbox-like durable group commits.
//! usage: enginecmp <engine> <scenario A|B> [flags]
//!   engine: redb | fjall-tx | fjall-batch | ryw
//!   flags:  --secs N --min-events N --dir PATH
//!           --redb-none-every N   (N-1 commits Durability::None, then 1 Immediate)
//!           --redb-2pc --redb-cache-mb N
//!           --fjall-syncdata  --fjall-kvsep  --no-read
use std::collections::HashMap;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- process stats
#[derive(Clone, Copy, Debug)]
struct Stat {
    t: Instant,
    cpu_ticks: u64,
    sys_ticks: u64,
    wbytes: u64,
    rbytes: u64,
}
fn stat() -> Stat {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let cpu = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    let get = |name: &str| -> u64 {
        io.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap()
    };
    Stat { t: Instant::now(), cpu_ticks: cpu, sys_ticks: f[12].parse().unwrap(), wbytes: get("write_bytes:"), rbytes: get("read_bytes:") }
}
fn report(label: &str, a: Stat, b: Stat, events: u64, commits: u64) {
    let secs = (b.t - a.t).as_secs_f64();
    let cpu_us = (b.cpu_ticks - a.cpu_ticks) as f64 * 10_000.0; // 100 ticks/s
    println!(
        "{label}: events={events} commits={commits} wall={secs:.2}s ev/s={:.0} commits/s={:.1} cpu_us/ev={:.1} (sys {:.1}) cpu_util={:.2}cores wbytes/ev={:.0} rbytes/ev={:.0}",
        events as f64 / secs,
        commits as f64 / secs,
        cpu_us / events.max(1) as f64,
        (b.sys_ticks - a.sys_ticks) as f64 * 10_000.0 / events.max(1) as f64,
        cpu_us / 1e6 / secs,
        (b.wbytes - a.wbytes) as f64 / events.max(1) as f64,
        (b.rbytes - a.rbytes) as f64 / events.max(1) as f64,
    );
}

// ---------------------------------------------------------------- workload
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
const ITEMS_ID: u32 = 7; // user table holding tenant rows
const ORDERS_ID: u32 = 9; // caller's table
const STREAM_ID: u32 = 7;
const EVENT_LEN: usize = 1300;
const HEAD_LEN: usize = 120;
const ORDER_LEN: usize = 1050;

fn event_key(t: u32, seq: u64) -> Vec<u8> {
    let mut k = ITEMS_ID.to_be_bytes().to_vec();
    k.extend_from_slice(format!("TENANT#{t}#EVENT\0{seq:020}").as_bytes());
    k
}
fn event_prefix(t: u32) -> Vec<u8> {
    let mut k = ITEMS_ID.to_be_bytes().to_vec();
    k.extend_from_slice(format!("TENANT#{t}#EVENT\0").as_bytes());
    k
}
fn head_key(t: u32) -> Vec<u8> {
    let mut k = ITEMS_ID.to_be_bytes().to_vec();
    k.extend_from_slice(format!("TENANT#{t}#HEAD\0HEAD").as_bytes());
    k
}
fn head_val(seq: u64) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.resize(HEAD_LEN, b'h');
    v
}
fn stream_key(first_seq: u64) -> Vec<u8> {
    let mut k = STREAM_ID.to_be_bytes().to_vec();
    k.extend_from_slice(&first_seq.to_be_bytes());
    k
}

/// Abstract writer: one group commit = begin, ops, commit.
trait Ops {
    fn get(&mut self, k: &[u8]) -> Option<Vec<u8>>; // read-your-writes within the group
    fn put(&mut self, k: &[u8], v: &[u8]);
    fn put_stream(&mut self, k: &[u8], v: &[u8]);
    fn put_stream_head(&mut self, id: u32, last: u64);
}
trait Engine {
    /// begin a write transaction/batch, run f on it, commit durably
    fn group(&mut self, commit_no: u64, f: &mut dyn FnMut(&mut dyn Ops));
    fn drain(&mut self) {}
    fn scan_prefix(&mut self, p: &[u8]) -> (u64, u64);
    fn reopen(&mut self);
}

struct Workload {
    tenants: u32,
    per_tenant: u32,
    seqs: Vec<u64>,
    global_seq: u64,
    pool: Vec<u8>,
    rng: Rng,
}
impl Workload {
    fn slice(&mut self, n: usize) -> &[u8] {
        let off = (self.rng.next() as usize) % (self.pool.len() - n);
        &self.pool[off..off + n]
    }
    /// One group commit. Returns number of events.
    fn group(&mut self, eng: &mut dyn Engine, commit_no: u64) -> u64 {
        let mut n = 0;
        eng.group(commit_no, &mut |e: &mut dyn Ops| n = self.body(e));
        n
    }
    fn body(&mut self, e: &mut dyn Ops) -> u64 {
        let first = self.global_seq + 1;
        let mut stream = Vec::with_capacity((self.tenants * self.per_tenant) as usize * 1600);
        let mut n = 0;
        for t in 0..self.tenants {
            for _ in 0..self.per_tenant {
                // 1. read head (condition check), RYW after first event of tenant in group
                let hk = head_key(t);
                let old = e.get(&hk);
                let cur = old.as_ref().map(|v| u64::from_be_bytes(v[..8].try_into().unwrap())).unwrap_or(0);
                assert_eq!(cur, self.seqs[t as usize], "head condition failed");
                let seq = cur + 1;
                // 2. caller row condition check (attribute_not_exists) + put
                let ok = {
                    let mut k = ORDERS_ID.to_be_bytes().to_vec();
                    k.extend_from_slice(format!("orders#{:016x}", self.rng.next()).as_bytes());
                    k
                };
                assert!(e.get(&ok).is_none());
                let ov = self.slice(ORDER_LEN).to_vec();
                e.put(&ok, &ov);
                // 3. event row + head row
                let ev = self.slice(EVENT_LEN).to_vec();
                e.put(&event_key(t, seq), &ev);
                let nh = head_val(seq);
                e.put(&hk, &nh);
                self.seqs[t as usize] = seq;
                self.global_seq += 1;
                // 4. change-stream images
                stream.extend_from_slice(&ev);
                stream.extend_from_slice(old.as_deref().unwrap_or(&[]));
                stream.extend_from_slice(&nh);
                n += 1;
            }
        }
        e.put_stream(&stream_key(first), &stream);
        e.put_stream_head(STREAM_ID, self.global_seq);
        n
    }
}

// ---------------------------------------------------------------- null (workload cost only)
struct Null(HashMap<Vec<u8>, Vec<u8>>);
impl Ops for Null {
    fn get(&mut self, k: &[u8]) -> Option<Vec<u8>> { self.0.get(k).cloned() }
    fn put(&mut self, k: &[u8], v: &[u8]) { self.0.insert(k.to_vec(), v.to_vec()); }
    fn put_stream(&mut self, _k: &[u8], v: &[u8]) { std::hint::black_box(v); }
    fn put_stream_head(&mut self, _id: u32, _l: u64) {}
}
struct NullEngine(Null);
impl Engine for NullEngine {
    fn group(&mut self, _c: u64, f: &mut dyn FnMut(&mut dyn Ops)) {
        // keep only head rows so memory stays flat
        self.0 .0.retain(|k, _| k.ends_with(b"HEAD"));
        f(&mut self.0);
    }
    fn scan_prefix(&mut self, _p: &[u8]) -> (u64, u64) { (0, 0) }
    fn reopen(&mut self) {}
}

// ---------------------------------------------------------------- redb
#[cfg(feature = "redb")]
mod redb_impl {
    use super::*;
    use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
    const ITEMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("items");
    const STREAM: TableDefinition<(u32, u64), &[u8]> = TableDefinition::new("stream");
    const HEADS: TableDefinition<u32, (u64, u64)> = TableDefinition::new("stream_heads");
    pub struct R {
        pub path: std::path::PathBuf,
        pub db: Option<Database>,
        pub none_every: u64,
        pub two_pc: bool,
        pub cache: Option<usize>,
    }
    impl R {
        pub fn open(&mut self) {
            let mut b = Database::builder();
            if let Some(c) = self.cache {
                b.set_cache_size(c);
            }
            self.db = Some(b.create(&self.path).unwrap());
        }
    }
    struct ROps<'a> {
        items: redb::Table<'a, &'static [u8], &'static [u8]>,
        stream: redb::Table<'a, (u32, u64), &'static [u8]>,
        heads: redb::Table<'a, u32, (u64, u64)>,
    }
    impl Ops for ROps<'_> {
        fn get(&mut self, k: &[u8]) -> Option<Vec<u8>> {
            self.items.get(k).unwrap().map(|v| v.value().to_vec())
        }
        fn put(&mut self, k: &[u8], v: &[u8]) {
            self.items.insert(k, v).unwrap();
        }
        fn put_stream(&mut self, k: &[u8], v: &[u8]) {
            let id = u32::from_be_bytes(k[..4].try_into().unwrap());
            let s = u64::from_be_bytes(k[4..12].try_into().unwrap());
            self.stream.insert((id, s), v).unwrap();
        }
        fn put_stream_head(&mut self, id: u32, last: u64) {
            self.heads.insert(id, (last, 0)).unwrap();
        }
    }
    impl Engine for R {
        fn group(&mut self, commit_no: u64, f: &mut dyn FnMut(&mut dyn Ops)) {
            let mut tx = self.db.as_ref().unwrap().begin_write().unwrap();
            if self.none_every > 1 && commit_no % self.none_every != self.none_every - 1 {
                tx.set_durability(Durability::None).unwrap();
            }
            if self.two_pc {
                tx.set_two_phase_commit(true);
            }
            {
                let mut ops = ROps {
                    items: tx.open_table(ITEMS).unwrap(),
                    stream: tx.open_table(STREAM).unwrap(),
                    heads: tx.open_table(HEADS).unwrap(),
                };
                f(&mut ops);
            }
            tx.commit().unwrap();
        }
        fn drain(&mut self) {
            // make sure the last group is durable
            let mut tx = self.db.as_ref().unwrap().begin_write().unwrap();
            tx.set_durability(Durability::Immediate).unwrap();
            tx.commit().unwrap();
        }
        fn scan_prefix(&mut self, p: &[u8]) -> (u64, u64) {
            let rt = self.db.as_ref().unwrap().begin_read().unwrap();
            let t = rt.open_table(ITEMS).unwrap();
            let mut end = p.to_vec();
            *end.last_mut().unwrap() += 1;
            let (mut n, mut b) = (0, 0);
            for kv in t.range(p..end.as_slice()).unwrap() {
                let (k, v) = kv.unwrap();
                n += 1;
                b += (k.value().len() + v.value().len()) as u64;
            }
            (n, b)
        }
        fn reopen(&mut self) {
            self.db = None;
            self.open();
        }
    }
}

// ---------------------------------------------------------------- fjall
#[cfg(feature = "fjall")]
mod fjall_impl {
    use super::*;
    use fjall::{
        Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode, Readable,
        SingleWriterTxDatabase, SingleWriterTxKeyspace,
    };
    fn opts(kvsep: bool) -> KeyspaceCreateOptions {
        let mut o = KeyspaceCreateOptions::default();
        if std::env::args().any(|a| a == "--fjall-nocomp") {
            o = o.data_block_compression_policy(fjall::config::CompressionPolicy::disabled());
        }
        if kvsep {
            o.with_kv_separation(Some(if std::env::args().any(|a| a == "--fjall-nocomp") { KvSeparationOptions::default().compression(fjall::CompressionType::None) } else { KvSeparationOptions::default() }))
        } else {
            o
        }
    }
    pub fn mode(syncdata: bool) -> PersistMode {
        if syncdata { PersistMode::SyncData } else { PersistMode::SyncAll }
    }

    fn drain_db(db: &Database, kss: &[&Keyspace]) {
        for k in kss {
            k.rotate_memtable_and_wait().unwrap();
        }
        let mut quiet = 0;
        while quiet < 10 {
            std::thread::sleep(Duration::from_millis(100));
            if db.outstanding_flushes() == 0 && db.active_compactions() == 0 {
                quiet += 1;
            } else {
                quiet = 0;
            }
        }
        eprintln!(
            "  fjall drained: tables items={} stream={} l0(items)={} disk={}MB journals={} compactions_done={}",
            kss[0].table_count(),
            kss[1].table_count(),
            kss[0].l0_table_count(),
            db.disk_space().unwrap() / 1_000_000,
            db.journal_count(),
            db.compactions_completed()
        );
    }
    fn scan(ks: &Keyspace, p: &[u8]) -> (u64, u64) {
        let (mut n, mut b) = (0, 0);
        for g in ks.prefix(p) {
            let (k, v) = g.into_inner().unwrap();
            n += 1;
            b += (k.len() + v.len()) as u64;
        }
        (n, b)
    }

    // ---- transactional keyspace (built-in RYW through per-tx memtable)
    pub struct Tx {
        pub path: std::path::PathBuf,
        pub kvsep: bool,
        pub mode: PersistMode,
        pub db: Option<SingleWriterTxDatabase>,
        pub ks: Vec<SingleWriterTxKeyspace>,
    }
    impl Tx {
        pub fn open(&mut self) {
            let db = SingleWriterTxDatabase::builder(&self.path).open().unwrap();
            self.ks = ["items", "stream", "stream_heads"]
                .iter()
                .map(|n| db.keyspace(n, || opts(self.kvsep && *n != "stream_heads")).unwrap())
                .collect();
            self.db = Some(db);
        }
    }
    struct TxOps<'a, 'b> {
        tx: &'b mut fjall::SingleWriterWriteTx<'a>,
        ks: &'b [SingleWriterTxKeyspace],
    }
    impl Ops for TxOps<'_, '_> {
        fn get(&mut self, k: &[u8]) -> Option<Vec<u8>> {
            self.tx.get(self.ks[0].inner(), k).unwrap().map(|v| v.to_vec())
        }
        fn put(&mut self, k: &[u8], v: &[u8]) {
            self.tx.insert(&self.ks[0], k, v);
        }
        fn put_stream(&mut self, k: &[u8], v: &[u8]) {
            self.tx.insert(&self.ks[1], k, v);
        }
        fn put_stream_head(&mut self, id: u32, last: u64) {
            let mut v = last.to_be_bytes().to_vec();
            v.extend_from_slice(&0u64.to_be_bytes());
            self.tx.insert(&self.ks[2], id.to_be_bytes(), v);
        }
    }
    impl Engine for Tx {
        fn group(&mut self, _c: u64, f: &mut dyn FnMut(&mut dyn Ops)) {
            let db = self.db.as_ref().unwrap();
            let mut tx = db.write_tx().durability(Some(self.mode));
            f(&mut TxOps { tx: &mut tx, ks: &self.ks });
            tx.commit().unwrap();
        }
        fn drain(&mut self) {
            let k: Vec<&Keyspace> = self.ks.iter().map(|k| k.inner()).collect();
            drain_db(self.db.as_ref().unwrap().inner(), &k);
        }
        fn scan_prefix(&mut self, p: &[u8]) -> (u64, u64) {
            scan(self.ks[0].inner(), p)
        }
        fn reopen(&mut self) {
            self.ks.clear();
            self.db = None;
            std::thread::sleep(Duration::from_millis(500));
            self.open();
        }
    }

    // ---- plain Database + OwnedWriteBatch + our own overlay for RYW
    pub struct Batch {
        pub path: std::path::PathBuf,
        pub kvsep: bool,
        pub mode: PersistMode,
        pub db: Option<Database>,
        pub ks: Vec<Keyspace>,
        pub overlay: HashMap<Vec<u8>, Vec<u8>>,
    }
    impl Batch {
        pub fn open(&mut self) {
            let mut b = Database::builder(&self.path);
            if std::env::args().any(|a| a == "--fjall-nocomp") {
                b = b.journal_compression(fjall::CompressionType::None);
            }
            let db = b.open().unwrap();
            self.ks = ["items", "stream", "stream_heads"]
                .iter()
                .map(|n| db.keyspace(n, || opts(self.kvsep && *n != "stream_heads")).unwrap())
                .collect();
            self.db = Some(db);
        }
    }
    struct BOps<'b> {
        batch: fjall::OwnedWriteBatch,
        ks: &'b [Keyspace],
        overlay: &'b mut HashMap<Vec<u8>, Vec<u8>>,
    }
    impl Ops for BOps<'_> {
        fn get(&mut self, k: &[u8]) -> Option<Vec<u8>> {
            if let Some(v) = self.overlay.get(k) {
                return Some(v.clone());
            }
            self.ks[0].get(k).unwrap().map(|v| v.to_vec())
        }
        fn put(&mut self, k: &[u8], v: &[u8]) {
            self.overlay.insert(k.to_vec(), v.to_vec());
            self.batch.insert(&self.ks[0], k, v);
        }
        fn put_stream(&mut self, k: &[u8], v: &[u8]) {
            self.batch.insert(&self.ks[1], k, v);
        }
        fn put_stream_head(&mut self, id: u32, last: u64) {
            let mut v = last.to_be_bytes().to_vec();
            v.extend_from_slice(&0u64.to_be_bytes());
            self.batch.insert(&self.ks[2], id.to_be_bytes(), v);
        }
    }
    impl Engine for Batch {
        fn group(&mut self, _c: u64, f: &mut dyn FnMut(&mut dyn Ops)) {
            self.overlay.clear();
            let batch = self.db.as_ref().unwrap().batch().durability(Some(self.mode));
            let mut ops = BOps { batch, ks: &self.ks, overlay: &mut self.overlay };
            f(&mut ops);
            ops.batch.commit().unwrap();
        }
        fn drain(&mut self) {
            let k: Vec<&Keyspace> = self.ks.iter().collect();
            drain_db(self.db.as_ref().unwrap(), &k);
        }
        fn scan_prefix(&mut self, p: &[u8]) -> (u64, u64) {
            scan(&self.ks[0], p)
        }
        fn reopen(&mut self) {
            self.ks.clear();
            self.db = None;
            std::thread::sleep(Duration::from_millis(500));
            self.open();
        }
    }

    /// Micro-benchmark of read-your-writes cost.
    pub fn ryw(dir: &std::path::Path) {
        let db = SingleWriterTxDatabase::builder(dir.join("ryw")).open().unwrap();
        let ks = db.keyspace("items", KeyspaceCreateOptions::default).unwrap();
        for i in 0..10_000u32 {
            ks.insert(format!("committed{i:08}"), vec![1u8; 120]).unwrap();
        }
        let iters = 1_000_000u32;
        let mut tx = db.write_tx();
        for i in 0..100u32 {
            tx.insert(&ks, format!("pending{i:08}"), vec![2u8; 120]);
        }
        let keys_p: Vec<String> = (0..100).map(|i| format!("pending{i:08}")).collect();
        let keys_c: Vec<String> = (0..100).map(|i| format!("committed{:08}", i * 97)).collect();
        let t = Instant::now();
        let mut hits = 0;
        for i in 0..iters {
            hits += tx.get(ks.inner(), &keys_p[(i % 100) as usize]).unwrap().is_some() as u32;
        }
        let a = t.elapsed();
        let t = Instant::now();
        for i in 0..iters {
            hits += tx.get(ks.inner(), &keys_c[(i % 100) as usize]).unwrap().is_some() as u32;
        }
        let b = t.elapsed();
        let t = Instant::now();
        for i in 0..iters / 10 {
            tx.insert(&ks, format!("ins{i:08}"), vec![3u8; 1300]);
        }
        let c = t.elapsed();
        drop(tx);
        let snap = db.read_tx();
        let t = Instant::now();
        for i in 0..iters {
            hits += snap.get(ks.inner(), &keys_c[(i % 100) as usize]).unwrap().is_some() as u32;
        }
        let d = t.elapsed();
        let mut ov: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for k in &keys_p {
            ov.insert(k.as_bytes().to_vec(), vec![2u8; 120]);
        }
        let t = Instant::now();
        for i in 0..iters {
            hits += ov.get(keys_p[(i % 100) as usize].as_bytes()).map(|v| v.clone()).is_some() as u32;
        }
        let e = t.elapsed();
        let per = |d: Duration, n: u32| d.as_nanos() as f64 / n as f64;
        println!(
            "ryw: tx.get(own pending write)={:.0}ns tx.get(committed, memtable)={:.0}ns tx.insert(1.3KB)={:.0}ns snapshot.get(committed)={:.0}ns overlay HashMap get+clone={:.0}ns (hits {hits})",
            per(a, iters), per(b, iters), per(c, iters / 10), per(d, iters), per(e, iters)
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let engine = args[1].clone();
    let flag = |n: &str| args.iter().any(|a| a == n);
    let val = |n: &str, d: u64| {
        args.iter().position(|a| a == n).map(|i| args[i + 1].parse().unwrap()).unwrap_or(d)
    };
    let dir = std::path::PathBuf::from(
        args.iter().position(|a| a == "--dir").map(|i| args[i + 1].clone()).unwrap_or("/tmp/enginecmp-data".into()),
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    #[cfg(feature = "fjall")]
    if engine == "ryw" {
        fjall_impl::ryw(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    if engine == "fsync" {
        // raw probe: append N KiB + fdatasync, 3 s
        use std::io::Write;
        for kb in [4usize, 64, 256, 1024] {
            let p = dir.join("probe");
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&p).unwrap();
            let buf = vec![7u8; kb * 1024];
            let a = stat();
            let mut n = 0u64;
            while a.t.elapsed() < Duration::from_secs(3) {
                f.write_all(&buf).unwrap();
                f.sync_data().unwrap();
                n += 1;
            }
            let b = stat();
            let secs = (b.t - a.t).as_secs_f64();
            println!("fsync probe: append {kb} KiB + fdatasync: {:.0}/s ({:.2} ms each) wbytes/op={:.0}", n as f64 / secs, secs * 1e3 / n as f64, (b.wbytes - a.wbytes) as f64 / n as f64);
            drop(f);
            std::fs::remove_file(&p).unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let scenario = args[2].clone();
    let (tenants, per_tenant) = if scenario == "A" { (1, 64) } else { (100, 1) };
    let tenants = val("--tenants", tenants as u64) as u32;
    let per_tenant = val("--per-tenant", per_tenant as u64) as u32;
    let secs = val("--secs", 5);
    let min_events = val("--min-events", 100_000);

    let mut e: Box<dyn Engine> = match engine.as_str() {
        #[cfg(feature = "redb")]
        "redb" => {
            let mut r = redb_impl::R {
                path: dir.join("db.redb"),
                db: None,
                none_every: val("--redb-none-every", 1),
                two_pc: flag("--redb-2pc"),
                cache: args.iter().position(|a| a == "--redb-cache-mb").map(|i| args[i + 1].parse::<usize>().unwrap() << 20),
            };
            r.open();
            Box::new(r)
        }
        #[cfg(feature = "fjall")]
        "fjall-tx" => {
            let mut f = fjall_impl::Tx {
                path: dir.join("fjall"),
                kvsep: flag("--fjall-kvsep"),
                mode: fjall_impl::mode(flag("--fjall-syncdata")),
                db: None,
                ks: vec![],
            };
            f.open();
            Box::new(f)
        }
        #[cfg(feature = "fjall")]
        "fjall-batch" => {
            let mut f = fjall_impl::Batch {
                path: dir.join("fjall"),
                kvsep: flag("--fjall-kvsep"),
                mode: fjall_impl::mode(flag("--fjall-syncdata")),
                db: None,
                ks: vec![],
                overlay: HashMap::new(),
            };
            f.open();
            Box::new(f)
        }
        "null" => Box::new(NullEngine(Null(HashMap::new()))),
        _ => panic!("engine"),
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let pool: Vec<u8> = (0..(1 << 20)).map(|_| rng.next() as u8).collect();
    let mut w = Workload { tenants, per_tenant, seqs: vec![0; tenants as usize], global_seq: 0, pool, rng };

    // warm-up: 1 s
    let mut commit_no = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        w.group(e.as_mut(), commit_no);
        commit_no += 1;
    }
    let a = stat();
    let (mut events, mut commits) = (0u64, 0u64);
    while (a.t.elapsed() < Duration::from_secs(secs) || events < min_events) && a.t.elapsed() < Duration::from_secs(60) {
        events += w.group(e.as_mut(), commit_no);
        commit_no += 1;
        commits += 1;
    }
    let b = stat();
    let label = format!("{engine} {scenario} {}", args[3..].join(" "));
    report(&format!("{label} [foreground]"), a, b, events, commits);
    e.drain();
    let c = stat();
    report(&format!("{label} [incl. drain/bg]"), a, c, events, commits);
    if !flag("--no-read") {
        e.reopen();
        let s0 = stat();
        let (n, bytes) = e.scan_prefix(&event_prefix(0));
        let s1 = stat();
        let secs = (s1.t - s0.t).as_secs_f64();
        println!(
            "{label} [scan tenant0 after reopen]: rows={n} bytes={bytes} rows/s={:.0} cpu_us/row={:.2} rbytes={}",
            n as f64 / secs,
            (s1.cpu_ticks - s0.cpu_ticks) as f64 * 10_000.0 / n.max(1) as f64,
            s1.rbytes - s0.rbytes
        );
        // second scan (warm)
        let s0 = stat();
        let (n, _) = e.scan_prefix(&event_prefix(0));
        let s1 = stat();
        println!("{label} [scan tenant0 warm]: rows/s={:.0}", n as f64 / (s1.t - s0.t).as_secs_f64());
    }
    drop(e);
    let _ = std::fs::remove_dir_all(&dir);
}

//! The arrival indexes kept across a clean close (see the parent module):
//! an index as bytes and back, and the table `arrival_snapshots` that the
//! closing checkpoint writes them into and the next open reads and empties.

use std::collections::HashMap;
use std::sync::Arc;

use redb::{ReadableDatabase, ReadableTable};

use crate::StoreError;

use super::super::catalog::TableMeta;
use super::super::storage_err;
use super::super::tables::{
    self, ARRIVAL_SNAPSHOT_AT, ARRIVAL_SNAPSHOTS, CLEAN_CLOSE, SYSTEM, WAL_APPLIED,
};
use super::ArrivalIndex;

impl ArrivalIndex {
    /// The index as bytes, handed to `put` in parts of about
    /// [`SNAPSHOT_CHUNK`] bytes, little-endian: the version
    /// ([`SNAPSHOT_VERSION`]), the two hash keys, the next place, the
    /// number of places and each as (hash, place), every place held once in
    /// `first` before those in `more` in their order, then the number of
    /// blocks with an expiry and each as (block, second). False (and
    /// nothing put) for an index whose keys all collide (tests).
    pub(crate) fn snapshot(
        &self,
        mut put: impl FnMut(&[u8]) -> Result<(), StoreError>,
    ) -> Result<bool, StoreError> {
        let Some((k0, k1)) = self.keys else {
            return Ok(false);
        };
        let places = self.state.lock().expect("arrival index");
        let expiries = self.expiries.lock().expect("arrival expiries");
        let mut out = Vec::with_capacity(SNAPSHOT_CHUNK + 16);
        out.push(SNAPSHOT_VERSION);
        for n in [k0, k1, places.next, places.len() as u64] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        // A pair of values, after putting the part so far once it is full.
        let mut pair = |out: &mut Vec<u8>, a: u64, b: u64| -> Result<(), StoreError> {
            if out.len() >= SNAPSHOT_CHUNK {
                put(out)?;
                out.clear();
            }
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
            Ok(())
        };
        let more = places
            .more
            .iter()
            .flat_map(|(hash, seqs)| seqs.iter().map(move |seq| (hash, seq)));
        for (hash, place) in places.first.iter().chain(more) {
            pair(&mut out, *hash, *place)?;
        }
        out.extend_from_slice(&(expiries.earliest.len() as u64).to_le_bytes());
        for (block, at) in &expiries.earliest {
            pair(&mut out, *block, *at)?;
        }
        put(&out)?;
        Ok(true)
    }

    /// The index [`snapshot`](Self::snapshot) wrote, read from its parts in
    /// order (a value may span two), or why they do not make one.
    pub(crate) fn from_parts(
        parts: impl Iterator<Item = Result<Vec<u8>, String>>,
    ) -> Result<ArrivalIndex, String> {
        let mut bytes = Parts {
            parts,
            current: Vec::new(),
            at: 0,
        };
        let version = bytes.byte()?.ok_or("it is empty")?;
        if version != SNAPSHOT_VERSION {
            return Err(format!("its version is {version}, not {SNAPSHOT_VERSION}"));
        }
        let keys = (bytes.u64()?, bytes.u64()?);
        let mut index = ArrivalIndex::with_keys(Some(keys));
        index.restored = true;
        {
            let places = index.state.get_mut().expect("arrival index");
            places.next = bytes.u64()?;
            for _ in 0..bytes.u64()? {
                let (hash, place) = (bytes.u64()?, bytes.u64()?);
                if place >= places.next {
                    return Err(format!("place {place} is not below its next place"));
                }
                places.add(hash, place);
            }
            let expiries = index.expiries.get_mut().expect("arrival expiries");
            for _ in 0..bytes.u64()? {
                let (block, at) = (bytes.u64()?, bytes.u64()?);
                expiries.set(block, Some(at));
            }
        }
        match bytes.left()? {
            0 => Ok(index),
            n => Err(format!("{n} bytes follow its end")),
        }
    }
}

/// A snapshot's bytes, read part by part: at most one part in memory.
struct Parts<I> {
    parts: I,
    current: Vec<u8>,
    at: usize,
}

impl<I: Iterator<Item = Result<Vec<u8>, String>>> Parts<I> {
    /// Whether a byte is left, moving on to the next non-empty part.
    fn more(&mut self) -> Result<bool, String> {
        while self.at == self.current.len() {
            match self.parts.next() {
                Some(part) => (self.current, self.at) = (part?, 0),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    fn byte(&mut self) -> Result<Option<u8>, String> {
        if !self.more()? {
            return Ok(None);
        }
        self.at += 1;
        Ok(Some(self.current[self.at - 1]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut out = [0u8; 8];
        let mut filled = 0;
        while filled < 8 {
            if !self.more()? {
                return Err("it ends early".to_owned());
            }
            let n = (8 - filled).min(self.current.len() - self.at);
            out[filled..filled + n].copy_from_slice(&self.current[self.at..self.at + n]);
            (filled, self.at) = (filled + n, self.at + n);
        }
        Ok(u64::from_le_bytes(out))
    }

    /// How many bytes are left.
    fn left(&mut self) -> Result<usize, String> {
        let mut n = self.current.len() - self.at;
        for part in self.parts.by_ref() {
            n += part?.len();
        }
        Ok(n)
    }
}

/// The indexes [`take_snapshots`] read, by table id: each, or why its
/// snapshot makes none, and the time its read took.
pub(crate) type Saved = HashMap<u32, (Result<ArrivalIndex, String>, std::time::Duration)>;

/// The layout of [`ArrivalIndex::snapshot`]; another is rebuilt from rows.
const SNAPSHOT_VERSION: u8 = 1;
/// About how many bytes of a snapshot each row of `arrival_snapshots` holds.
const SNAPSHOT_CHUNK: usize = 1 << 20;

/// Writes into `txn` (the closing transaction: nothing is written after
/// it) the snapshot of the index of every table of `tables` kept in arrival
/// order, with the commit log's last applied record as `txn` leaves it, so
/// that the next open can tell the snapshots still describe the file.
/// Returns how many places they hold.
pub(crate) fn save_snapshots(
    txn: &redb::WriteTransaction,
    tables: &[Arc<TableMeta>],
) -> Result<u64, StoreError> {
    let mut saved = 0;
    let mut any = false;
    let mut rows = txn.open_table(ARRIVAL_SNAPSHOTS).map_err(storage_err)?;
    for meta in tables {
        let Some(index) = &meta.arrival else { continue };
        let mut chunk = 0u32;
        let wrote = index.snapshot(|part| {
            rows.insert((meta.id, chunk), part).map_err(storage_err)?;
            chunk += 1;
            Ok(())
        })?;
        if wrote {
            any = true;
            saved += index.len() as u64;
            if crate::faults::hit(crate::faults::ARRIVAL_SAVE) {
                return Err(StoreError::Storage(format!(
                    "fault point {}",
                    crate::faults::ARRIVAL_SAVE
                )));
            }
        }
    }
    drop(rows);
    if any {
        let mut system = txn.open_table(SYSTEM).map_err(storage_err)?;
        let applied = system
            .get(WAL_APPLIED)
            .map_err(storage_err)?
            .map_or(0, |g| g.value());
        system
            .insert(ARRIVAL_SNAPSHOT_AT, applied)
            .map_err(storage_err)?;
    } else {
        txn.delete_table(ARRIVAL_SNAPSHOTS).map_err(storage_err)?;
    }
    Ok(saved)
}

/// The indexes the last clean close saved, by table id (or why a table's
/// snapshot makes none, and how long the read took), read part by part;
/// then removes them from the
/// file (durably, before the open writes anything else). They are read
/// only when `usable` (the open replayed no record of the commit log), the
/// close was clean and no commit has moved the commit log's last applied
/// record since they were written (a build that does not know them could
/// have opened the file); otherwise the indexes are rebuilt from the rows.
pub(crate) fn take_snapshots(db: &redb::Database, usable: bool) -> Result<Saved, StoreError> {
    let mut out = HashMap::new();
    {
        let txn = db.begin_read().map_err(storage_err)?;
        let Some(rows) = tables::open_if_present(&txn, ARRIVAL_SNAPSHOTS)? else {
            return Ok(out);
        };
        let system = tables::open_if_present(&txn, SYSTEM)?;
        let value = |key: &str| -> Result<Option<u64>, StoreError> {
            match &system {
                Some(t) => Ok(t.get(key).map_err(storage_err)?.map(|g| g.value())),
                None => Ok(None),
            }
        };
        let current = usable
            && value(CLEAN_CLOSE)? != Some(0)
            && value(ARRIVAL_SNAPSHOT_AT)? == Some(value(WAL_APPLIED)?.unwrap_or(0));
        if current {
            let mut next = rows.first().map_err(storage_err)?.map(|(k, _)| k.value().0);
            while let Some(id) = next {
                let parts = rows
                    .range((id, 0)..=(id, u32::MAX))
                    .map_err(storage_err)?
                    .map(|row| {
                        row.map(|(_, part)| part.value().to_vec())
                            .map_err(|e| e.to_string())
                    });
                let started = std::time::Instant::now();
                let index = ArrivalIndex::from_parts(parts);
                out.insert(id, (index, started.elapsed()));
                next = match id.checked_add(1) {
                    Some(after) => rows
                        .range((after, 0)..)
                        .map_err(storage_err)?
                        .next()
                        .transpose()
                        .map_err(storage_err)?
                        .map(|(k, _)| k.value().0),
                    None => None,
                };
            }
        } else {
            tracing::info!(
                "the arrival indexes' snapshots are older than the file: rebuilding them"
            );
        }
    }
    // No sync of its own: the open's next durable commit (the log's
    // `in_use`, or the first write of a durable store) carries it, and
    // until then the file still holds nothing the snapshots miss.
    let mut txn = db.begin_write().map_err(storage_err)?;
    txn.set_durability(redb::Durability::None)
        .map_err(storage_err)?;
    txn.delete_table(ARRIVAL_SNAPSHOTS).map_err(storage_err)?;
    txn.open_table(SYSTEM)
        .map_err(storage_err)?
        .remove(ARRIVAL_SNAPSHOT_AT)
        .map_err(storage_err)?;
    txn.commit().map_err(storage_err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::EXPIRY_BLOCK;
    use super::*;

    /// The parts `index.snapshot` puts, each as written.
    fn snapshot_parts(index: &ArrivalIndex) -> Vec<Vec<u8>> {
        let mut parts = Vec::new();
        let wrote = index
            .snapshot(|part| {
                parts.push(part.to_vec());
                Ok(())
            })
            .unwrap();
        assert!(wrote);
        parts
    }

    #[test]
    fn a_snapshot_gives_back_the_same_places_keys_and_expiries() {
        let index = ArrivalIndex::new();
        // Enough places for several parts, one partition written again
        // (a second place for its hash), and some forgotten.
        let keys: Vec<Vec<u8>> = (0..150_000u32)
            .map(|n| format!("tenant-{n}").into_bytes())
            .collect();
        for key in &keys {
            index.insert(key);
        }
        let again = index.insert(&keys[7]);
        index.forget(&keys[8], 9);
        index.note_expiry(3, 500);
        index.note_expiry(EXPIRY_BLOCK * 40 + 1, 90);
        let parts = snapshot_parts(&index);
        assert!(parts.len() >= 2, "{} parts", parts.len());
        assert!(parts.iter().all(|p| p.len() <= SNAPSHOT_CHUNK + 16));
        let restored = ArrivalIndex::from_parts(parts.clone().into_iter().map(Ok)).unwrap();
        assert!(restored.restored() && !index.restored());
        assert_eq!(restored.len(), index.len());
        for key in &keys {
            assert_eq!(restored.candidates(key), index.candidates(key));
        }
        assert_eq!(restored.candidates(&keys[7]), vec![again, 8]);
        assert!(restored.candidates(&keys[8]).is_empty());
        // Its next place and its expiries carry on where the index left off.
        assert_eq!(restored.begin_sweep(None, 100), Some(40));
        restored.end_sweep(40, None);
        assert_eq!(restored.begin_sweep(None, 1_000), Some(0));
        assert_eq!(restored.insert(b"new"), index.insert(b"new"));
        // Parts cut anywhere (values spanning two, empty ones) read alike.
        let bytes = parts.concat();
        let odd = bytes
            .chunks(7)
            .flat_map(|c| [c.to_vec(), Vec::new()])
            .map(Ok);
        let again = ArrivalIndex::from_parts(odd).unwrap();
        assert_eq!(again.len(), index.len() - 1);
        for key in &keys {
            assert_eq!(again.candidates(key), restored.candidates(key));
        }
    }

    #[test]
    fn a_damaged_snapshot_is_refused_with_the_reason() {
        let index = ArrivalIndex::new();
        index.insert(b"a");
        index.note_expiry(1, 5);
        let bytes = snapshot_parts(&index).concat();
        let refused = |bytes: &[u8]| {
            let parts = std::iter::once(Ok(bytes.to_vec()));
            ArrivalIndex::from_parts(parts).err().unwrap()
        };
        assert_eq!(refused(&[]), "it is empty");
        assert_eq!(refused(&bytes[..bytes.len() - 1]), "it ends early");
        assert_eq!(
            refused(&[bytes.as_slice(), &[0]].concat()),
            "1 bytes follow its end"
        );
        let mut other = bytes.clone();
        other[0] = 9;
        assert_eq!(refused(&other), "its version is 9, not 1");
        // A place at or past the next one (bytes 17..25 hold the next place).
        let mut past = bytes;
        past[17..25].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(refused(&past), "place 1 is not below its next place");
    }
}

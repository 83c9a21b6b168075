//! The images of the stream records a batch wrote by reference, kept in
//! memory for the first snapshot read that asks for them.
//!
//! An insert's record refers to its row instead of copying the item
//! (`stream::refers_to_row`), so a reader resolves it by reading the row
//! and decoding it. The relay reads each record moments after its commit;
//! the writer, which has the item decoded already, leaves it here once the
//! batch has committed, and the first read of the record takes it instead
//! of reading and decoding the row. A record's image never changes, so a
//! kept one is right for any snapshot that holds the record; one nobody
//! takes is dropped once [`CAPACITY`] newer ones came, and a read that
//! finds nothing resolves the record from the file as before. Only
//! committed batches leave images: a failed batch's sequence numbers are
//! used again by the next one.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use postbox_item::Item;

/// Images kept at most (a few megabytes of events).
const CAPACITY: usize = 4096;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct RecentImages(Mutex<Recent>);

#[derive(Default)]
struct Recent {
    /// (table id, record sequence number) -> the record's new image.
    images: HashMap<(u32, u64), Item>,
    /// The keys in the order they came, taken ones included.
    order: VecDeque<(u32, u64)>,
}

impl RecentImages {
    /// Keeps the images of a committed batch's records:
    /// `(table id, sequence number, image)`.
    pub(crate) fn keep(&self, images: Vec<(u32, u64, Item)>) {
        if images.is_empty() {
            return;
        }
        let mut dropped = Vec::new();
        {
            let mut recent = self.0.lock().unwrap_or_else(|p| p.into_inner());
            for (id, seq, image) in images {
                if let Some(old) = recent.images.insert((id, seq), image) {
                    dropped.push(old);
                } else {
                    recent.order.push_back((id, seq));
                }
            }
            while recent.order.len() > CAPACITY {
                let oldest = recent.order.pop_front().expect("over capacity");
                dropped.extend(recent.images.remove(&oldest));
            }
        }
        // Freed outside the lock.
        drop(dropped);
    }

    /// The image of record `seq` of table `id`, if it is still kept; it is
    /// not kept after.
    pub(crate) fn take(&self, id: u32, seq: u64) -> Option<Item> {
        let mut recent = self.0.lock().unwrap_or_else(|p| p.into_inner());
        recent.images.remove(&(id, seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_item::AttributeValue;

    fn image(n: u64) -> Item {
        Item::from([("n".to_owned(), AttributeValue::n(n as i64))])
    }

    #[test]
    fn an_image_is_taken_once_and_the_oldest_go_first() {
        let recent = RecentImages::default();
        recent.keep(
            (1..=CAPACITY as u64 + 2)
                .map(|s| (7, s, image(s)))
                .collect(),
        );
        // The two oldest made room for the newest.
        assert_eq!(recent.take(7, 1), None);
        assert_eq!(recent.take(7, 2), None);
        assert_eq!(recent.take(7, 3), Some(image(3)));
        assert_eq!(recent.take(7, 3), None, "taken once");
        assert_eq!(recent.take(8, 4), None, "another table's record");
        let last = CAPACITY as u64 + 2;
        assert_eq!(recent.take(7, last), Some(image(last)));
    }
}

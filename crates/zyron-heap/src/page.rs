//! One heap page: the version chains of [`PAGE_SLOTS`] slots, kept in one
//! slab of version entries, with the row bytes of every version in one arena.
//!
//! Why not a `Vec` per chain and a `Box` per row (the first design): garbage
//! collection then freed one allocation per dead version and chased one
//! pointer per slot, which held it near 35M versions/s per core. Here a dead
//! version is unlinked onto the page's free list and its bytes are only
//! counted as dead. Once dead bytes pass half the arena (and the arena is
//! past [`MIN_COMPACT_BYTES`]), the live rows are copied into a fresh arena,
//! so a page holds at most about twice its live row bytes.
//!
//! A page is not synchronised; the table keeps each behind a lock.

use zyron_txn::{OPEN, Snapshot};

/// Slots (row chains) per page.
pub const PAGE_SLOTS: usize = 1024;

/// The end of a chain, and of the free list.
const NONE: u32 = u32::MAX;

/// Arenas smaller than this are never compacted: copying would cost more
/// than the memory it gives back.
const MIN_COMPACT_BYTES: usize = 64 << 10;

/// One version of a row: when it was created and ended (commit timestamps
/// or transaction marks, see `zyron_txn`), and where its bytes are.
#[derive(Debug, Clone, Copy)]
pub struct Version {
    pub begin: u64,
    pub end: u64,
    offset: u64,
    len: u32,
    /// The next older version of the chain, or the next free entry.
    next: u32,
}

impl Version {
    /// Bytes of the encoded row.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What [`Page::remove_where`] took out of one chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct Removed {
    /// Versions the chain held before.
    pub examined: u64,
    pub versions: u64,
    /// Row bytes of the removed versions.
    pub row_bytes: usize,
    /// The oldest version removed, if the chain is now empty (its row
    /// bytes stay readable through [`Page::row`] until the page is next
    /// changed).
    pub emptied_by: Option<Version>,
}

/// The marked slots of a page, from a copy of its marks (see [`Page::marked_slots`]).
pub struct MarkedSlots {
    words: [u64; MARK_WORDS],
    word: usize,
}

impl Iterator for MarkedSlots {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while let Some(bits) = self.words.get_mut(self.word) {
            if *bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                *bits &= *bits - 1;
                return Some(self.word * 64 + bit);
            }
            self.word += 1;
        }
        None
    }
}

#[derive(Debug)]
pub struct Page {
    /// The newest version of each slot's chain, or `NONE`.
    heads: Vec<u32>,
    versions: Vec<Version>,
    /// Head of the list of unused entries in `versions`.
    free: u32,
    bytes: Vec<u8>,
    /// Bytes in `bytes` that no version refers to any more.
    dead_bytes: usize,
    /// One bit per slot: a version of the slot may have ended. Set by every change that can
    /// end one, cleared by a garbage pass that leaves the slot only open versions, so that
    /// a pass's work follows the updates since the last one rather than the table's size.
    marked: [u64; MARK_WORDS],
}

const MARK_WORDS: usize = PAGE_SLOTS / 64;

impl Default for Page {
    fn default() -> Self {
        Self::new()
    }
}

impl Page {
    pub fn new() -> Self {
        Self {
            heads: vec![NONE; PAGE_SLOTS],
            versions: Vec::new(),
            free: NONE,
            bytes: Vec::new(),
            dead_bytes: 0,
            marked: [0; MARK_WORDS],
        }
    }

    pub fn is_empty(&self, slot: usize) -> bool {
        self.heads[slot] == NONE
    }

    /// The versions of `slot`, newest first.
    pub fn chain(&self, slot: usize) -> impl Iterator<Item = &Version> {
        let mut at = self.heads[slot];
        std::iter::from_fn(move || {
            let version = self.versions.get(at as usize)?;
            at = version.next;
            Some(version)
        })
    }

    pub fn newest(&self, slot: usize) -> Option<&Version> {
        self.versions.get(self.heads[slot] as usize)
    }

    pub fn newest_mut(&mut self, slot: usize) -> Option<&mut Version> {
        self.mark(slot);
        self.versions.get_mut(self.heads[slot] as usize)
    }

    /// The encoded row of `version` (a version of this page).
    pub fn row(&self, version: &Version) -> &[u8] {
        let start = version.offset as usize;
        &self.bytes[start..start + version.len as usize]
    }

    /// The row of the version of `slot` that `snapshot` sees.
    pub fn visible_row(&self, slot: usize, snapshot: &Snapshot) -> Option<&[u8]> {
        self.chain(slot)
            .find(|v| snapshot.sees(v.begin, v.end))
            .map(|v| self.row(v))
    }

    /// Makes a version of `row` the newest of `slot`.
    pub fn push_front(&mut self, slot: usize, begin: u64, end: u64, row: &[u8]) {
        let len = u32::try_from(row.len()).expect("a row is under 4 GiB");
        if self.bytes.len() + row.len() > self.bytes.capacity() {
            // About to grow: reuse dead space instead, if there is enough.
            self.compact_if_half_dead();
        }
        if end != OPEN || !self.is_empty(slot) {
            self.mark(slot);
        }
        let offset = self.bytes.len() as u64;
        self.bytes.extend_from_slice(row);
        let version = Version {
            begin,
            end,
            offset,
            len,
            next: self.heads[slot],
        };
        self.heads[slot] = self.allocate(version);
    }

    /// Takes the newest version of `slot` out (undo of its creation).
    pub fn pop_front(&mut self, slot: usize) -> Option<Version> {
        let at = self.heads[slot];
        let version = *self.versions.get(at as usize)?;
        self.heads[slot] = version.next;
        self.release(at);
        Some(version)
    }

    /// Runs `f` on the versions of `slot`, newest first, until it returns false.
    pub fn visit_mut_while(&mut self, slot: usize, mut f: impl FnMut(&mut Version) -> bool) {
        self.mark(slot);
        let mut at = self.heads[slot];
        while let Some(version) = self.versions.get_mut(at as usize) {
            if !f(version) {
                return;
            }
            at = version.next;
        }
    }

    /// Removes the versions of `slot` that `dead` picks; unmarks the slot if every version
    /// left is open.
    pub fn remove_where(&mut self, slot: usize, dead: impl Fn(&Version) -> bool) -> Removed {
        let mut removed = Removed::default();
        let mut kept_ended = false;
        let mut previous = NONE;
        let mut at = self.heads[slot];
        while let Some(&version) = self.versions.get(at as usize) {
            removed.examined += 1;
            if dead(&version) {
                match self.versions.get_mut(previous as usize) {
                    Some(newer) => newer.next = version.next,
                    None => self.heads[slot] = version.next,
                }
                self.release(at);
                removed.versions += 1;
                removed.row_bytes += version.len();
                removed.emptied_by = Some(version);
            } else {
                kept_ended |= version.end != OPEN;
                previous = at;
            }
            at = version.next;
        }
        if !self.is_empty(slot) {
            removed.emptied_by = None;
        }
        if !kept_ended {
            self.marked[slot / 64] &= !(1 << (slot % 64));
        }
        removed
    }

    fn mark(&mut self, slot: usize) {
        self.marked[slot / 64] |= 1 << (slot % 64);
    }

    /// The slots a garbage pass must look at, in order: those where a version may have
    /// ended since a pass last found only open versions there.
    pub fn marked_slots(&self) -> MarkedSlots {
        MarkedSlots {
            words: self.marked,
            word: 0,
        }
    }

    /// Row bytes of every version in the page.
    pub fn row_bytes(&self) -> usize {
        self.bytes.len() - self.dead_bytes
    }

    /// Versions in the page.
    pub fn version_count(&self) -> usize {
        (0..PAGE_SLOTS).map(|slot| self.chain(slot).count()).sum()
    }

    /// Copies the live rows into a fresh arena when at least half of this
    /// one is dead.
    pub fn compact_if_half_dead(&mut self) {
        if self.bytes.len() < MIN_COMPACT_BYTES || self.dead_bytes * 2 < self.bytes.len() {
            return;
        }
        let mut bytes = Vec::with_capacity(self.row_bytes() * 2);
        for slot in 0..PAGE_SLOTS {
            let mut at = self.heads[slot];
            while let Some(version) = self.versions.get_mut(at as usize) {
                let start = version.offset as usize;
                version.offset = bytes.len() as u64;
                bytes.extend_from_slice(&self.bytes[start..start + version.len as usize]);
                at = version.next;
            }
        }
        assert_eq!(
            bytes.len(),
            self.row_bytes(),
            "compaction kept every live byte"
        );
        self.bytes = bytes;
        self.dead_bytes = 0;
    }

    fn allocate(&mut self, version: Version) -> u32 {
        if let Some(entry) = self.versions.get_mut(self.free as usize) {
            let at = self.free;
            self.free = entry.next;
            *entry = version;
            return at;
        }
        let at = u32::try_from(self.versions.len()).expect("a page holds under 4G versions");
        assert!(at != NONE, "a page holds under 4G versions");
        self.versions.push(version);
        at
    }

    /// Puts entry `at` on the free list; its row bytes become dead.
    fn release(&mut self, at: u32) {
        let entry = &mut self.versions[at as usize];
        self.dead_bytes += entry.len as usize;
        entry.next = self.free;
        self.free = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(page: &Page, slot: usize) -> Vec<Vec<u8>> {
        page.chain(slot).map(|v| page.row(v).to_vec()).collect()
    }

    #[test]
    fn only_changes_that_can_end_a_version_mark_their_slot() {
        let mut page = Page::new();
        let marked = |page: &Page| page.marked_slots().collect::<Vec<_>>();
        for slot in [0, 1, 64, 1023] {
            page.push_front(slot, 1, OPEN, b"a");
        }
        assert_eq!(marked(&page), Vec::<usize>::new(), "inserts end nothing");
        page.newest_mut(64).unwrap().end = 2;
        page.newest_mut(1023).unwrap().end = 2;
        assert_eq!(marked(&page), [64, 1023]);
        // The pass keeps the ended version (a snapshot needs it): the slot stays marked.
        page.remove_where(64, |_| false);
        assert_eq!(marked(&page), [64, 1023]);
        let removed = page.remove_where(64, |v| v.end == 2);
        assert_eq!(removed.versions, 1);
        assert_eq!(marked(&page), [1023], "only open versions are left in 64");
        page.push_front(1, 3, OPEN, b"b");
        page.visit_mut_while(0, |_| false);
        page.push_front(5, 3, 4, b"c");
        assert_eq!(marked(&page), [0, 1, 5, 1023]);
    }

    #[test]
    fn chains_keep_newest_first_and_reuse_freed_entries() {
        let mut page = Page::new();
        page.push_front(3, 1, 2, b"old");
        page.push_front(3, 2, u64::MAX, b"new");
        page.push_front(4, 1, u64::MAX, b"other");
        assert_eq!(rows(&page, 3), [b"new".to_vec(), b"old".to_vec()]);
        let removed = page.remove_where(3, |v| v.end == 2);
        assert_eq!(
            (removed.examined, removed.versions, removed.row_bytes),
            (2, 1, 3)
        );
        assert!(removed.emptied_by.is_none(), "the slot still has a version");
        assert_eq!(rows(&page, 3), [b"new".to_vec()]);
        page.push_front(5, 7, u64::MAX, b"reused");
        assert_eq!(page.versions.len(), 3, "the freed entry was reused");
        assert_eq!(page.pop_front(5).map(|v| v.begin), Some(7));
        assert!(page.is_empty(5));
        assert_eq!(page.row_bytes(), b"new".len() + b"other".len());
    }

    #[test]
    fn an_emptied_chain_reports_its_oldest_row() {
        let mut page = Page::new();
        page.push_front(0, 1, 2, b"first");
        page.push_front(0, 2, 3, b"second");
        let removed = page.remove_where(0, |_| true);
        let oldest = removed.emptied_by.expect("the chain is empty");
        assert_eq!(page.row(&oldest), b"first");
        assert!(page.is_empty(0));
    }

    #[test]
    fn compaction_keeps_live_rows_and_bounds_the_arena() {
        let mut page = Page::new();
        let row = |slot: usize, round: u64| format!("{slot:04}-{round:08}").repeat(8).into_bytes();
        for round in 0..40u64 {
            for slot in 0..PAGE_SLOTS {
                page.push_front(slot, round, u64::MAX, &row(slot, round));
                // Keep only the newest version, as GC with a recent horizon does.
                page.remove_where(slot, |v| v.begin < round);
            }
            page.compact_if_half_dead();
            let live = PAGE_SLOTS * row(0, 0).len();
            assert_eq!(page.row_bytes(), live);
            assert!(
                page.bytes.len() <= 2 * live + MIN_COMPACT_BYTES,
                "arena {} bytes",
                page.bytes.len()
            );
        }
        for slot in 0..PAGE_SLOTS {
            assert_eq!(rows(&page, slot), [row(slot, 39)]);
        }
        assert_eq!(page.version_count(), PAGE_SLOTS);
    }
}

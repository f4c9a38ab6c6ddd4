//! One heap page: the version chains of [`PAGE_SLOTS`] slots, kept in one
//! slab of version entries, with the row bytes of every version in one arena.
//!
//! Why not a `Vec` per chain and a `Box` per row (the first design): garbage
//! collection then freed one allocation per dead version and chased one
//! pointer per slot, which held it near 35M versions/s per core. Here a dead
//! version is unlinked onto the page's free list and its bytes are only
//! counted as dead. Once dead bytes pass half the arena (and the arena is
//! past [`MIN_COMPACT_BYTES`]), the page is rebuilt: the live versions and
//! their rows are copied into a fresh slab and arena, each chain's versions
//! side by side, so a page holds at most about twice its live row bytes.
//!
//! A garbage pass cuts each chain at its first dead version (every older one
//! is dead too). Reading the dead versions only to free them was most of the
//! pass's time: they are scattered over a slab that is not in cache. So when a
//! pass cuts many chains, it rebuilds the page from the live versions and never
//! reads the dead ones; when it cuts few, it frees them one by one.
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

/// What a garbage pass took out of a page (see [`Page::collect`]).
#[derive(Debug, Default)]
pub struct Collected {
    /// Versions of marked slots the pass read.
    pub examined: u64,
    pub versions: u64,
    /// Row bytes of the removed versions.
    pub row_bytes: usize,
    /// Slots the pass left empty, each with the row of its oldest version (to free its key).
    pub emptied: Vec<(usize, Vec<u8>)>,
}

/// Where [`Page::cut`] cut one chain.
struct Cut {
    /// Versions kept, all newer than the cut.
    kept: u64,
    /// Whether a kept version has ended (the slot must stay marked).
    kept_ended: bool,
    /// The newest version cut off, or `NONE`.
    tail: u32,
}

/// A pass that cuts off at least this many chains of a page rebuilds the page from its live
/// versions rather than freeing the dead ones one by one: the rebuild reads only live
/// versions, and with this many cuts there are at least as many dead ones.
const REBUILD_CUTS: usize = PAGE_SLOTS / 4;

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
    /// Entries of `versions` not on the free list.
    in_use: usize,
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
            in_use: 0,
        }
    }

    pub fn is_empty(&self, slot: usize) -> bool {
        self.heads[slot] == NONE
    }

    /// The versions of `slot`, newest first.
    pub fn chain(&self, slot: usize) -> impl Iterator<Item = &Version> {
        self.chain_from(self.heads[slot])
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

    /// Removes from the marked slots every version `dead` picks, and unmarks the slots left
    /// with open versions only.
    ///
    /// `dead` must hold for a version only if it holds for every older version of its
    /// chain, as "ended at or before the horizon" does (a version ends when the next newer
    /// one begins). So each chain is cut at its first dead version, and the versions past
    /// the cut are freed without testing them; when many chains were cut, without even
    /// reading them (see [`REBUILD_CUTS`]).
    pub fn collect(&mut self, dead: impl Fn(&Version) -> bool) -> Collected {
        let mut collected = Collected::default();
        let (in_use, row_bytes) = (self.in_use, self.row_bytes());
        let mut tails = Vec::new();
        for slot in self.marked_slots() {
            let cut = self.cut(slot, &dead);
            collected.examined += cut.kept;
            if !cut.kept_ended {
                self.marked[slot / 64] &= !(1 << (slot % 64));
            }
            if cut.tail == NONE {
                continue;
            }
            if self.is_empty(slot) {
                let oldest = self.chain_from(cut.tail).last().expect("a cut-off version");
                collected.emptied.push((slot, self.row(oldest).to_vec()));
            }
            tails.push(cut.tail);
        }
        if tails.len() >= REBUILD_CUTS {
            collected.examined += tails.len() as u64;
            self.rebuild();
        } else {
            for tail in tails {
                collected.examined += self.release_chain(tail, &dead);
            }
            self.compact_if_half_dead();
        }
        collected.versions = (in_use - self.in_use) as u64;
        collected.row_bytes = row_bytes - self.row_bytes();
        collected
    }

    /// Unlinks the chain of `slot` at its first version `dead` picks.
    fn cut(&mut self, slot: usize, dead: impl Fn(&Version) -> bool) -> Cut {
        let mut cut = Cut {
            kept: 0,
            kept_ended: false,
            tail: NONE,
        };
        let mut previous = NONE;
        let mut at = self.heads[slot];
        while let Some(version) = self.versions.get(at as usize) {
            if dead(version) {
                // Debug builds only: the older version is a cache miss of its own, a third of
                // the pass's time. Release builds check each one they free one by one.
                debug_assert!(
                    (self.versions.get(version.next as usize)).is_none_or(&dead),
                    "a version older than a dead one is dead"
                );
                match self.versions.get_mut(previous as usize) {
                    Some(newer) => newer.next = NONE,
                    None => self.heads[slot] = NONE,
                }
                cut.tail = at;
                return cut;
            }
            cut.kept += 1;
            cut.kept_ended |= version.end != OPEN;
            previous = at;
            at = version.next;
        }
        cut
    }

    /// Frees a cut-off chain from `at` on; returns its length.
    fn release_chain(&mut self, mut at: u32, dead: impl Fn(&Version) -> bool) -> u64 {
        let mut released = 0;
        while let Some(&version) = self.versions.get(at as usize) {
            assert!(dead(&version), "a version older than a dead one is dead");
            self.release(at);
            released += 1;
            at = version.next;
        }
        released
    }

    /// The versions of a chain from entry `at` on.
    fn chain_from(&self, mut at: u32) -> impl Iterator<Item = &Version> {
        std::iter::from_fn(move || {
            let version = self.versions.get(at as usize)?;
            at = version.next;
            Some(version)
        })
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

    /// Rebuilds the page (see [`Page::rebuild`]) when at least half of its arena is dead.
    pub fn compact_if_half_dead(&mut self) {
        if self.bytes.len() < MIN_COMPACT_BYTES || self.dead_bytes * 2 < self.bytes.len() {
            return;
        }
        self.rebuild();
    }

    /// Copies the versions on the chains, and their rows, into a fresh slab and arena, each
    /// chain's versions side by side. Entries on the free list or on no chain (cut off by
    /// [`Page::collect`]) are dropped.
    fn rebuild(&mut self) {
        let (mut live_versions, mut live_bytes) = (0, 0);
        for slot in 0..PAGE_SLOTS {
            for version in self.chain(slot) {
                live_versions += 1;
                live_bytes += version.len as usize;
            }
        }
        let mut versions = Vec::with_capacity(live_versions);
        // Room to grow as much again before the next rebuild.
        let mut bytes = Vec::with_capacity(live_bytes * 2);
        for slot in 0..PAGE_SLOTS {
            let mut at = self.heads[slot];
            if at != NONE {
                self.heads[slot] = versions.len() as u32;
            }
            while let Some(version) = self.versions.get(at as usize) {
                let start = version.offset as usize;
                let next = match version.next {
                    NONE => NONE,
                    _ => versions.len() as u32 + 1,
                };
                versions.push(Version {
                    offset: bytes.len() as u64,
                    next,
                    ..*version
                });
                bytes.extend_from_slice(&self.bytes[start..start + version.len as usize]);
                at = version.next;
            }
        }
        assert!(
            versions.len() <= self.in_use && bytes.len() <= self.row_bytes(),
            "a rebuild only drops versions"
        );
        self.versions = versions;
        self.bytes = bytes;
        self.free = NONE;
        self.dead_bytes = 0;
        self.in_use = self.versions.len();
    }

    fn allocate(&mut self, version: Version) -> u32 {
        self.in_use += 1;
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
        self.in_use -= 1;
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

    /// Dead, for these tests: ended at or before `horizon`.
    fn ended_by(horizon: u64) -> impl Fn(&Version) -> bool {
        move |v| v.end != OPEN && v.end <= horizon
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
        page.push_front(64, 2, OPEN, b"b");
        page.newest_mut(1023).unwrap().end = 3;
        assert_eq!(marked(&page), [64, 1023]);
        // The pass keeps the ended versions (a snapshot needs them): the slots stay marked.
        let collected = page.collect(ended_by(1));
        assert_eq!((collected.examined, collected.versions), (3, 0));
        assert_eq!(marked(&page), [64, 1023]);
        let collected = page.collect(ended_by(2));
        assert_eq!((collected.examined, collected.versions), (3, 1));
        assert_eq!(marked(&page), [1023], "only an open version is left in 64");
        page.push_front(1, 3, OPEN, b"b");
        page.visit_mut_while(0, |_| false);
        page.push_front(5, 3, 4, b"c");
        assert_eq!(marked(&page), [0, 1, 5, 1023]);
    }

    #[test]
    fn chains_keep_newest_first_and_reuse_freed_entries() {
        let mut page = Page::new();
        page.push_front(3, 1, 2, b"old");
        page.push_front(3, 2, OPEN, b"new");
        page.push_front(4, 1, OPEN, b"other");
        assert_eq!(rows(&page, 3), [b"new".to_vec(), b"old".to_vec()]);
        let collected = page.collect(ended_by(2));
        assert_eq!(
            (collected.examined, collected.versions, collected.row_bytes),
            (2, 1, 3)
        );
        assert!(collected.emptied.is_empty(), "the slot still has a version");
        assert_eq!(rows(&page, 3), [b"new".to_vec()]);
        page.push_front(5, 7, OPEN, b"reused");
        assert_eq!(page.versions.len(), 3, "the freed entry was reused");
        assert_eq!(page.pop_front(5).map(|v| v.begin), Some(7));
        assert!(page.is_empty(5));
        assert_eq!(page.row_bytes(), b"new".len() + b"other".len());
        assert_eq!(page.in_use, 2);
    }

    #[test]
    fn an_emptied_chain_reports_its_oldest_row() {
        let mut page = Page::new();
        page.push_front(0, 1, 2, b"first");
        page.push_front(0, 2, 3, b"second");
        let collected = page.collect(ended_by(3));
        assert_eq!(collected.emptied, [(0, b"first".to_vec())]);
        assert_eq!(collected.versions, 2);
        assert!(page.is_empty(0));
    }

    #[test]
    #[should_panic(expected = "a version older than a dead one is dead")]
    fn a_live_version_older_than_a_dead_one_is_a_broken_invariant() {
        let mut page = Page::new();
        page.push_front(0, 1, 5, b"ended late");
        page.push_front(0, 2, 3, b"ended early");
        page.push_front(0, 3, OPEN, b"open");
        page.collect(ended_by(3));
    }

    /// Both ways a pass frees versions, one by one (few chains cut) and by rebuilding the page
    /// (many), keep exactly the live rows, count what they free, and bound the arena.
    #[test]
    fn collection_keeps_live_rows_and_bounds_the_arena() {
        let row = |slot: usize, round: u64| format!("{slot:04}-{round:08}").repeat(8).into_bytes();
        for updated in [PAGE_SLOTS, REBUILD_CUTS - 1, 7] {
            let mut page = Page::new();
            for slot in 0..PAGE_SLOTS {
                page.push_front(slot, 1, OPEN, &row(slot, 1));
            }
            let mut newest = vec![1; PAGE_SLOTS];
            for round in 2..40u64 {
                for slot in (0..PAGE_SLOTS).skip(round as usize % 3).take(updated) {
                    page.newest_mut(slot).unwrap().end = round;
                    page.push_front(slot, round, OPEN, &row(slot, round));
                    newest[slot] = round;
                }
                let dead_versions = page.in_use - PAGE_SLOTS;
                let collected = page.collect(ended_by(round));
                assert_eq!(
                    collected.versions as usize, dead_versions,
                    "{updated} updated"
                );
                assert_eq!(collected.row_bytes, dead_versions * row(0, 0).len());
                let live = PAGE_SLOTS * row(0, 0).len();
                assert_eq!(page.row_bytes(), live);
                assert!(
                    page.bytes.len() <= 2 * live + MIN_COMPACT_BYTES,
                    "arena {} bytes",
                    page.bytes.len()
                );
            }
            for slot in 0..PAGE_SLOTS {
                assert_eq!(rows(&page, slot), [row(slot, newest[slot])]);
            }
            assert_eq!(page.version_count(), PAGE_SLOTS);
            assert_eq!(page.in_use, PAGE_SLOTS);
            assert_eq!(page.marked_slots().count(), 0);
        }
    }
}

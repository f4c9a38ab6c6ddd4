//! One heap table: chains of row versions in pages, and the primary-key index.
//!
//! A row lives in a *slot*; the slot's chain holds its versions newest first.
//! An UPDATE ends the newest version and pushes a new one onto the same chain,
//! so the slot, and the index entry pointing at it, stay put. Slot numbers are
//! stable (the WAL and checkpoint images refer to rows by slot) until garbage
//! collection frees a slot whose every version is dead.
//!
//! Locking: the index lock is always taken before a page lock. Pages hold
//! [`PAGE_SLOTS`] chains behind one reader-writer lock, so a scan takes one
//! lock per 1,024 rows. How a page stores its chains is in [`crate::page`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use arrow::array::RecordBatch;

use zyron_common::{Result, SqlState, ZyronError};
use zyron_txn::{Isolation, OPEN, Snapshot, TXN_FLAG, TxnId, marked_by, txn_mark};

use crate::btree::{self, BPlusTree};
use crate::catalog::TableDef;
pub use crate::page::PAGE_SLOTS;
use crate::page::{Page, Version};
use crate::row::{KeyCodec, RowCodec};

/// Bytes a version costs beyond its row, counted against the memory budget.
pub const VERSION_OVERHEAD_BYTES: usize = 48;

type PageLock = RwLock<Page>;

/// The heap's memory, shared by every table; past `limit_bytes` writes fail.
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicUsize,
    limit_bytes: usize,
}

impl MemoryBudget {
    pub fn new(limit_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            limit_bytes,
        })
    }

    pub fn used_bytes(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    fn reserve(&self, bytes: usize) -> Result<()> {
        let before = self.used.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.limit_bytes {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            return Err(ZyronError::new(
                SqlState::OUT_OF_MEMORY,
                format!(
                    "the heap's memory budget of {} MiB is used up ({} MiB in use)",
                    self.limit_bytes >> 20,
                    before >> 20
                ),
            )
            .with_hint(
                "Raise heap_memory_budget_mib in the configuration, or delete rows and run VACUUM.",
            ));
        }
        Ok(())
    }

    /// Reserves without a limit check: recovery must load what was committed.
    fn force(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    fn take(&self, bytes: usize, charge: Charge) -> Result<()> {
        match charge {
            Charge::Checked => self.reserve(bytes),
            Charge::Forced => {
                self.force(bytes);
                Ok(())
            }
        }
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Whether a reservation may fail: recovery must load what was committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    Checked,
    Forced,
}

/// What a version of a `row_len`-byte row counts against the memory budget.
fn cost(row_len: usize) -> usize {
    row_len + VERSION_OVERHEAD_BYTES
}

/// Who the writer is, and what it may see.
#[derive(Debug, Clone, Copy)]
pub struct WriteCtx {
    pub txn: TxnId,
    pub snapshot: Snapshot,
    pub isolation: Isolation,
}

impl WriteCtx {
    fn mark(&self) -> u64 {
        txn_mark(self.txn)
    }
}

/// The result of a write that may have to wait for another transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    Done(T),
    /// Another open transaction holds the row: wait for it to end, then retry.
    Wait(TxnId),
}

/// What a transaction did to a slot, so it can be stamped or undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Pushed a new version at the front of the chain.
    Created,
    /// Set the `end` of the then-newest version.
    Ended,
}

/// What garbage collection found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Versions of the slots looked at: those where a version may have ended since the
    /// last pass (see [`crate::page::Page::marked_slots`]).
    pub versions_examined: u64,
    pub versions_removed: u64,
    pub slots_freed: u64,
}

pub struct HeapTable {
    def: TableDef,
    codec: RowCodec,
    key: Option<KeyCodec>,
    pages: RwLock<Vec<Arc<PageLock>>>,
    next_slot: AtomicU64,
    free_slots: Mutex<Vec<u64>>,
    index: RwLock<BPlusTree>,
    /// Snapshots older than this may not use the index: one built over existing rows (ALTER
    /// TABLE ... ADD PRIMARY KEY) holds each row's newest key only, and an older snapshot
    /// may see a version with another key. 0 for an index kept since the table was created;
    /// raised to the ALTER's commit timestamp when the new definition is published.
    index_serves_from_ts: AtomicU64,
    /// What the index counts against `memory`: what the tree allocates
    /// ([`BPlusTree::allocated_bytes`]), brought up to date after every change under the
    /// index's write lock. Given back when the table goes, as the index goes with it (rows
    /// are given back explicitly, by [`HeapTable::release_all`], because redefinitions
    /// share them).
    index_bytes: AtomicUsize,
    memory: Arc<MemoryBudget>,
}

impl Drop for HeapTable {
    fn drop(&mut self) {
        self.memory.release(*self.index_bytes.get_mut());
    }
}

impl std::fmt::Debug for HeapTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapTable")
            .field("id", &self.def.id)
            .field("name", &self.def.name)
            .field("slots", &self.slot_count())
            .finish()
    }
}

/// Where the newest version of a chain stands, for a writer.
enum Head {
    /// No version, or the newest was deleted and that deletion is settled.
    Vacant { deleted_after_snapshot: bool },
    /// A live version this writer may change.
    Live { changed_after_snapshot: bool },
    /// Another open transaction created or ended the newest version.
    Busy(TxnId),
}

fn head(newest: Option<&Version>, ctx: &WriteCtx) -> Head {
    let Some(newest) = newest else {
        return Head::Vacant {
            deleted_after_snapshot: false,
        };
    };
    let mine = ctx.mark();
    if let Some(owner) = marked_by(newest.begin).filter(|&t| t != ctx.txn) {
        return Head::Busy(owner);
    }
    if let Some(owner) = marked_by(newest.end).filter(|&t| t != ctx.txn) {
        return Head::Busy(owner);
    }
    if newest.end == mine {
        return Head::Vacant {
            deleted_after_snapshot: false,
        };
    }
    if newest.end != OPEN {
        return Head::Vacant {
            deleted_after_snapshot: ctx.snapshot.committed_after(newest.end),
        };
    }
    Head::Live {
        changed_after_snapshot: ctx.snapshot.committed_after(newest.begin),
    }
}

/// Puts `row` at the front of `slot`'s chain as a version the writer of `ctx` owns.
fn push_own_version(page: &mut Page, slot: usize, ctx: &WriteCtx, row: &[u8]) {
    page.push_front(slot, ctx.mark(), OPEN, row);
}

fn serialization_failure() -> ZyronError {
    ZyronError::new(
        SqlState::SERIALIZATION_FAILURE,
        "could not serialize access due to concurrent update",
    )
}

impl HeapTable {
    pub fn new(def: TableDef, memory: Arc<MemoryBudget>) -> Result<Self> {
        let schema = def.arrow_schema()?;
        let codec = RowCodec::new(schema.clone())?;
        let key = if def.primary_key.is_empty() {
            None
        } else {
            Some(KeyCodec::new(&schema, &def.primary_key)?)
        };
        Ok(Self {
            def,
            codec,
            key,
            pages: RwLock::new(Vec::new()),
            next_slot: AtomicU64::new(0),
            free_slots: Mutex::new(Vec::new()),
            index: RwLock::new(BPlusTree::new()),
            index_serves_from_ts: AtomicU64::new(0),
            index_bytes: AtomicUsize::new(0),
            memory,
        })
    }

    pub fn def(&self) -> &TableDef {
        &self.def
    }

    pub fn id(&self) -> u64 {
        self.def.id
    }

    pub fn codec(&self) -> &RowCodec {
        &self.codec
    }

    pub fn key_codec(&self) -> Option<&KeyCodec> {
        self.key.as_ref()
    }

    /// Slots handed out so far (live, dead or free).
    pub fn slot_count(&self) -> u64 {
        self.next_slot.load(Ordering::Acquire)
    }

    fn pages(&self) -> RwLockReadGuard<'_, Vec<Arc<PageLock>>> {
        self.pages.read().unwrap_or_else(|p| p.into_inner())
    }

    fn index_read(&self) -> RwLockReadGuard<'_, BPlusTree> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    fn index_write(&self) -> RwLockWriteGuard<'_, BPlusTree> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    fn page(&self, slot: u64) -> Arc<PageLock> {
        let index = slot as usize / PAGE_SLOTS;
        if let Some(page) = self.pages().get(index) {
            return page.clone();
        }
        let mut pages = self.pages.write().unwrap_or_else(|p| p.into_inner());
        while pages.len() <= index {
            pages.push(Arc::new(RwLock::new(Page::new())));
        }
        pages[index].clone()
    }

    /// Runs `f` on the page of `slot`, and `slot`'s place in it, under the
    /// page's write lock.
    fn with_chain<T>(&self, slot: u64, f: impl FnOnce(&mut Page, usize) -> T) -> T {
        let page = self.page(slot);
        let mut page = page.write().unwrap_or_else(|p| p.into_inner());
        f(&mut page, slot as usize % PAGE_SLOTS)
    }

    fn allocate_slot(&self) -> u64 {
        if let Some(slot) = self
            .free_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
        {
            return slot;
        }
        self.next_slot.fetch_add(1, Ordering::AcqRel)
    }

    /// Makes `slot` exist (recovery places rows at the slots they had).
    fn claim_slot(&self, slot: u64) {
        self.next_slot.fetch_max(slot + 1, Ordering::AcqRel);
    }

    /// Inserts one encoded row. With a primary key, `key` is its encoded key;
    /// a live row with the same key fails with SQLSTATE 23505.
    pub fn insert(&self, ctx: &WriteCtx, row: &[u8], key: Option<&[u8]>) -> Result<Step<u64>> {
        self.memory.reserve(cost(row.len()))?;
        let result = match key {
            Some(key) => self.insert_keyed(ctx, row, key),
            None => {
                let slot = self.allocate_slot();
                self.with_chain(slot, |page, i| {
                    assert!(page.is_empty(i), "a free slot has no versions");
                    push_own_version(page, i, ctx, row);
                });
                Ok(Step::Done(slot))
            }
        };
        if !matches!(result, Ok(Step::Done(_))) {
            self.memory.release(cost(row.len()));
        }
        result
    }

    fn insert_keyed(&self, ctx: &WriteCtx, row: &[u8], key: &[u8]) -> Result<Step<u64>> {
        let mut index = self.index_write();
        let slot = match index.get(key) {
            Some(slot) => slot,
            None => {
                // The budget must have room for the entry as `entry_bytes` estimates it; what
                // is counted after is what the tree's allocation changed by.
                let estimate = btree::entry_bytes(key.len());
                self.memory.reserve(estimate)?;
                let slot = self.allocate_slot();
                index.insert(key, slot).expect("the key was just looked up");
                self.memory.release(estimate);
                self.count_index_bytes(&index);
                slot
            }
        };
        self.with_chain(slot, |page, i| match head(page.newest(i), ctx) {
            Head::Busy(owner) => Ok(Step::Wait(owner)),
            Head::Live { .. } => Err(self.duplicate_key()),
            Head::Vacant {
                deleted_after_snapshot,
            } => {
                if deleted_after_snapshot && ctx.isolation == Isolation::RepeatableRead {
                    return Err(serialization_failure());
                }
                push_own_version(page, i, ctx, row);
                Ok(Step::Done(slot))
            }
        })
    }

    /// Brings what the index counts against the memory budget up to what it allocates now;
    /// called with the index's write lock held, after each change.
    fn count_index_bytes(&self, index: &BPlusTree) {
        let now = index.allocated_bytes();
        let before = self.index_bytes.swap(now, Ordering::Relaxed);
        if now >= before {
            self.memory.force(now - before);
        } else {
            self.memory.release(before - now);
        }
    }

    /// Bytes the primary-key index allocates, as the memory budget counts them.
    pub fn index_allocated_bytes(&self) -> usize {
        self.index_read().allocated_bytes()
    }

    /// Removes `key` from the index if it still leads to `slot` (an insert may have reused
    /// the key for another slot meanwhile), and gives its memory back.
    fn remove_key_of(&self, index: &mut BPlusTree, key: &[u8], slot: u64) {
        if index.get(key) == Some(slot) {
            index.remove(key);
            self.count_index_bytes(index);
        }
    }

    fn duplicate_key(&self) -> ZyronError {
        ZyronError::new(
            SqlState::UNIQUE_VIOLATION,
            format!(
                "duplicate key value violates unique constraint \"{}\"",
                self.def.primary_key_name()
            ),
        )
    }

    /// Replaces the row in `slot` by `new_row(current)`. `current` is the
    /// version the writer may change: under READ COMMITTED the newest
    /// committed one (re-read after a wait, as PostgreSQL does), under
    /// REPEATABLE READ the one in the snapshot, or SQLSTATE 40001 if someone
    /// committed a change after the snapshot. `new_row` returns `None` when
    /// the row no longer qualifies; returns whether the row was updated.
    pub fn update(
        &self,
        ctx: &WriteCtx,
        slot: u64,
        new_row: impl FnOnce(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> Result<Step<bool>> {
        self.with_chain(slot, |page, i| {
            let newest = match self.claimable(page.newest(i), ctx)? {
                Some(step) => return Ok(step),
                None => page.newest(i).expect("a live head exists"),
            };
            let Some(row) = new_row(page.row(newest))? else {
                return Ok(Step::Done(false));
            };
            self.memory.reserve(cost(row.len()))?;
            page.newest_mut(i).expect("a live head exists").end = ctx.mark();
            push_own_version(page, i, ctx, &row);
            Ok(Step::Done(true))
        })
    }

    /// Deletes the row in `slot` (same rules as [`HeapTable::update`]);
    /// `still_qualifies` re-checks the newest version under READ COMMITTED.
    pub fn delete(
        &self,
        ctx: &WriteCtx,
        slot: u64,
        still_qualifies: impl FnOnce(&[u8]) -> Result<bool>,
    ) -> Result<Step<bool>> {
        self.with_chain(slot, |page, i| {
            let newest = match self.claimable(page.newest(i), ctx)? {
                Some(step) => return Ok(step),
                None => page.newest(i).expect("a live head exists"),
            };
            if !still_qualifies(page.row(newest))? {
                return Ok(Step::Done(false));
            }
            page.newest_mut(i).expect("a live head exists").end = ctx.mark();
            Ok(Step::Done(true))
        })
    }

    /// `None` if the newest version may be changed by this writer; otherwise
    /// the step to report (wait, or nothing to do).
    fn claimable(&self, newest: Option<&Version>, ctx: &WriteCtx) -> Result<Option<Step<bool>>> {
        let repeatable = ctx.isolation == Isolation::RepeatableRead;
        match head(newest, ctx) {
            Head::Busy(owner) => Ok(Some(Step::Wait(owner))),
            Head::Vacant {
                deleted_after_snapshot,
            } if deleted_after_snapshot && repeatable => Err(serialization_failure()),
            Head::Vacant { .. } => Ok(Some(Step::Done(false))),
            Head::Live {
                changed_after_snapshot,
            } if changed_after_snapshot && repeatable => Err(serialization_failure()),
            Head::Live { .. } => Ok(None),
        }
    }

    /// Replaces this transaction's marks in `slot` with its commit timestamp.
    ///
    /// Only the newest versions carry them: a writer changes only the newest
    /// version, and no one else may change the chain until it ends, so its
    /// marks are the versions it created (a run at the front) and at most
    /// the one after them, which it ended. The walk stops there rather than
    /// running down a long chain of a hot row (pgbench's branches).
    pub fn stamp(&self, slot: u64, txn: TxnId, ts: u64) {
        let mark = txn_mark(txn);
        self.with_chain(slot, |page, i| {
            page.visit_mut_while(i, |version| {
                let created = version.begin == mark;
                if created {
                    version.begin = ts;
                }
                if version.end == mark {
                    version.end = ts;
                }
                created
            })
        });
    }

    /// Takes back one change of `txn` (changes are undone newest first).
    /// `key` is the row's primary key, for an undone insert that empties its slot.
    /// Undoes `change` in each of `slots`, last first. `frees_key`: the changes are
    /// inserts of keyed rows, whose keys are read back from the rows (a chunk at a time)
    /// so that a slot left empty also leaves the index.
    pub fn undo_run(
        &self,
        slots: std::ops::Range<u64>,
        txn: TxnId,
        change: Change,
        frees_key: bool,
    ) {
        const CHUNK_ROWS: u64 = 1024;
        if !frees_key || self.key.is_none() {
            for slot in slots.rev() {
                self.undo(slot, txn, change, None);
            }
            return;
        }
        let mut end = slots.end;
        while end > slots.start {
            let chunk = end.saturating_sub(CHUNK_ROWS).max(slots.start)..end;
            let rows: Vec<Vec<u8>> = chunk.clone().map(|slot| self.newest_row(slot)).collect();
            let rows: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
            let keys = self
                .keys_of(&rows)
                .expect("rows this transaction encoded decode again");
            assert_eq!(keys.len() as u64, chunk.end - chunk.start, "one key a row");
            for (slot, key) in chunk.clone().rev().zip(keys.iter().rev()) {
                self.undo(slot, txn, change, Some(key));
            }
            end = chunk.start;
        }
    }

    /// The row of the newest version of `slot`, which must have one.
    fn newest_row(&self, slot: u64) -> Vec<u8> {
        let page = self.page(slot);
        let page = page.read().unwrap_or_else(|p| p.into_inner());
        let version = page
            .newest(slot as usize % PAGE_SLOTS)
            .expect("an undone insert left its version");
        page.row(version).to_vec()
    }

    pub fn undo(&self, slot: u64, txn: TxnId, change: Change, key: Option<&[u8]>) {
        let mark = txn_mark(txn);
        let mut index = key.map(|_| self.index_write());
        let emptied = self.with_chain(slot, |page, i| {
            match change {
                Change::Created => {
                    let version = page.pop_front(i).expect("an undone version exists");
                    assert_eq!(
                        version.begin, mark,
                        "undoing a version this transaction did not create"
                    );
                    self.memory.release(cost(version.len()));
                }
                Change::Ended => {
                    let newest = page.newest_mut(i).expect("an undone end exists");
                    assert_eq!(
                        newest.end, mark,
                        "undoing an end this transaction did not write"
                    );
                    newest.end = OPEN;
                }
            }
            page.is_empty(i)
        });
        if emptied {
            if let (Some(index), Some(key)) = (index.as_mut(), key) {
                self.remove_key_of(index, key, slot);
            }
            self.free_slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(slot);
        }
    }

    /// Primary keys of encoded rows.
    pub fn keys_of(&self, rows: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let Some(key) = &self.key else {
            return Ok(Vec::new());
        };
        let batch = self.codec.decode(rows, None)?;
        Ok((0..batch.num_rows()).map(|r| key.key(&batch, r)).collect())
    }

    /// The visible rows of pages `pages`, decoded into one batch, with their slots.
    pub fn scan_pages(
        &self,
        snapshot: &Snapshot,
        pages: std::ops::Range<usize>,
        projection: Option<&[usize]>,
    ) -> Result<(Vec<u64>, RecordBatch)> {
        let limit = self.slot_count();
        let held: Vec<Arc<PageLock>> = {
            let all = self.pages();
            all[pages.start.min(all.len())..pages.end.min(all.len())].to_vec()
        };
        let guards: Vec<_> = held
            .iter()
            .map(|p| p.read().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let mut slots = Vec::new();
        let mut rows: Vec<&[u8]> = Vec::new();
        for (offset, page) in guards.iter().enumerate() {
            let first = ((pages.start + offset) * PAGE_SLOTS) as u64;
            for i in 0..PAGE_SLOTS {
                let slot = first + i as u64;
                if slot >= limit {
                    break;
                }
                if let Some(row) = page.visible_row(i, snapshot) {
                    slots.push(slot);
                    rows.push(row);
                }
            }
        }
        Ok((slots, self.codec.decode(&rows, projection)?))
    }

    /// The visible rows of one page, decoded, with their slots.
    pub fn scan_page(
        &self,
        snapshot: &Snapshot,
        page: usize,
        projection: Option<&[usize]>,
    ) -> Result<(Vec<u64>, RecordBatch)> {
        self.scan_pages(snapshot, page..page + 1, projection)
    }

    /// Number of pages a full scan visits.
    pub fn page_count(&self) -> usize {
        (self.slot_count() as usize).div_ceil(PAGE_SLOTS)
    }

    /// Whether lookups through the primary-key index find every row `snapshot`
    /// sees. When not, the caller scans the pages instead, as PostgreSQL plans
    /// a sequential scan for a transaction older than a new index.
    pub fn key_index_serves(&self, snapshot: &Snapshot) -> bool {
        snapshot.read_ts >= self.index_serves_from_ts.load(Ordering::Acquire)
    }

    /// Raises the oldest snapshot the index serves to `ts`: the commit timestamp of the
    /// definition that built it. Commits stamped before it may have ended versions the build
    /// saw as newest, and a snapshot below it may still see the keys they replaced.
    pub fn index_serves_from(&self, ts: u64) {
        self.index_serves_from_ts.fetch_max(ts, Ordering::AcqRel);
    }

    /// The slot holding `key`, if any version of it exists.
    pub fn slot_for_key(&self, key: &[u8]) -> Option<u64> {
        self.index_read().get(key)
    }

    /// Slots of keys in `low <= key < high`, in key order.
    pub fn slots_in_range(&self, low: &[u8], high: Option<&[u8]>) -> Vec<u64> {
        self.index_read()
            .range(low, high)
            .map(|(_, slot)| slot)
            .collect()
    }

    /// The visible rows among `slots`, decoded, with the slots that had one.
    pub fn fetch(
        &self,
        snapshot: &Snapshot,
        slots: &[u64],
        projection: Option<&[usize]>,
    ) -> Result<(Vec<u64>, RecordBatch)> {
        // Rows copied end to end into one buffer, each page locked once per run of
        // its slots: a 1,000-key range spent more on a lock, an allocation and a
        // free per row than on decoding it.
        let slot_count = self.slot_count();
        let mut found = Vec::with_capacity(slots.len());
        let mut rows_bytes: Vec<u8> = Vec::new();
        let mut row_ends: Vec<usize> = Vec::with_capacity(slots.len());
        let same_page = |a: &u64, b: &u64| a / PAGE_SLOTS as u64 == b / PAGE_SLOTS as u64;
        for run in slots.chunk_by(same_page) {
            if run.iter().all(|&slot| slot >= slot_count) {
                continue;
            }
            let page = self.page(run[0]);
            let page = page.read().unwrap_or_else(|p| p.into_inner());
            for &slot in run.iter().filter(|&&slot| slot < slot_count) {
                if let Some(row) = page.visible_row(slot as usize % PAGE_SLOTS, snapshot) {
                    rows_bytes.extend_from_slice(row);
                    row_ends.push(rows_bytes.len());
                    found.push(slot);
                }
            }
        }
        let mut start = 0;
        let rows: Vec<&[u8]> = row_ends
            .iter()
            .map(|&end| {
                let row = &rows_bytes[start..end];
                start = end;
                row
            })
            .collect();
        Ok((found, self.codec.decode(&rows, projection)?))
    }

    /// The encoded row `snapshot` sees in `slot`, if any.
    pub fn visible_row(&self, snapshot: &Snapshot, slot: u64) -> Option<Vec<u8>> {
        if slot >= self.slot_count() {
            return None;
        }
        let page = self.page(slot);
        let page = page.read().unwrap_or_else(|p| p.into_inner());
        page.visible_row(slot as usize % PAGE_SLOTS, snapshot)
            .map(<[u8]>::to_vec)
    }

    /// Removes versions no snapshot can see: those whose `end` is a commit
    /// timestamp at or below `horizon`. Frees slots left empty. Looks only at slots where a
    /// version may have ended since the last pass.
    pub fn collect_garbage(&self, horizon: u64) -> GcStats {
        let mut stats = GcStats::default();
        let mut emptied = Vec::new();
        let pages: Vec<Arc<PageLock>> = self.pages().clone();
        let mut freed_bytes = 0usize;
        let dead = |v: &Version| v.end & TXN_FLAG == 0 && v.end <= horizon;
        for (p, page) in pages.iter().enumerate() {
            let collected = page
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .collect(dead);
            stats.versions_examined += collected.examined;
            stats.versions_removed += collected.versions;
            freed_bytes +=
                collected.row_bytes + collected.versions as usize * VERSION_OVERHEAD_BYTES;
            // An emptied slot goes; freeing its key needs a row of it.
            emptied.extend(
                (collected.emptied.into_iter()).map(|(i, row)| ((p * PAGE_SLOTS + i) as u64, row)),
            );
        }
        self.memory.release(freed_bytes);
        if !emptied.is_empty() {
            self.free_slots_and_keys(&emptied);
        }
        stats.slots_freed = emptied.len() as u64;
        stats
    }

    /// Frees slots GC emptied, and their keys (unless an insert reused the key meanwhile).
    fn free_slots_and_keys(&self, emptied: &[(u64, Vec<u8>)]) {
        let rows: Vec<&[u8]> = emptied.iter().map(|(_, row)| row.as_slice()).collect();
        let keys = self.keys_of(&rows).unwrap_or_default();
        let mut index = self.key.as_ref().map(|_| self.index_write());
        let mut free = Vec::with_capacity(emptied.len());
        for (i, (slot, _)) in emptied.iter().enumerate() {
            let page = self.page(*slot);
            let page = page.read().unwrap_or_else(|p| p.into_inner());
            if !page.is_empty(*slot as usize % PAGE_SLOTS) {
                continue;
            }
            if let (Some(index), Some(key)) = (index.as_mut(), keys.get(i)) {
                self.remove_key_of(index, key, *slot);
            }
            free.push(*slot);
        }
        self.free_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(free);
    }

    // ---- Recovery: changes re-applied from the WAL and checkpoint images ----

    /// Places a committed row at `slot` (WAL replay of an insert).
    pub fn redo_insert(&self, slot: u64, row: &[u8], key: Option<&[u8]>, ts: u64) {
        self.redo_inserts(&[(slot, row)], key.as_slice(), ts);
    }

    /// Places committed rows at their slots, with their primary keys (`keys` is empty for a
    /// table without one, else holds one key per row): how a checkpoint image loads, a few
    /// thousand rows per call, under one index lock. A key already present (a row replayed
    /// over an older one) moves to its new slot. The tree is searched once per new key: an
    /// insert that finds its key changes nothing, and only then is the key replaced.
    pub fn redo_inserts<K: AsRef<[u8]>>(&self, rows: &[(u64, &[u8])], keys: &[K], ts: u64) {
        assert!(
            keys.is_empty() || keys.len() == rows.len(),
            "one key per row, or none"
        );
        if let Some(last) = rows.iter().map(|(slot, _)| *slot).max() {
            self.claim_slot(last);
        }
        self.memory
            .force(rows.iter().map(|(_, row)| cost(row.len())).sum());
        if !keys.is_empty() {
            let mut index = self.index_write();
            for ((slot, _), key) in rows.iter().zip(keys) {
                let key = key.as_ref();
                if index.insert(key, *slot).is_err() {
                    index.replace(key, *slot);
                }
            }
            self.count_index_bytes(&index);
        }
        for (slot, row) in rows {
            self.with_chain(*slot, |page, i| page.push_front(i, ts, OPEN, row));
        }
    }

    /// Replays an update: the newest version ends at `ts`, `row` begins there.
    pub fn redo_update(&self, slot: u64, row: Vec<u8>, ts: u64) -> Result<()> {
        self.memory.force(cost(row.len()));
        self.with_chain(slot, |page, i| {
            let newest = page
                .newest_mut(i)
                .ok_or_else(|| self.replay_error(slot, "update"))?;
            newest.end = ts;
            page.push_front(i, ts, OPEN, &row);
            Ok(())
        })
    }

    /// Replays a delete: the newest version ends at `ts`.
    pub fn redo_delete(&self, slot: u64, ts: u64) -> Result<()> {
        self.with_chain(slot, |page, i| {
            let newest = page
                .newest_mut(i)
                .filter(|v| v.end == OPEN)
                .ok_or_else(|| self.replay_error(slot, "delete"))?;
            newest.end = ts;
            Ok(())
        })
    }

    fn replay_error(&self, slot: u64, what: &str) -> ZyronError {
        ZyronError::new(
            SqlState::DATA_CORRUPTED,
            format!(
                "WAL replay: {what} of slot {slot} in table \"{}\" finds no live row",
                self.def.name
            ),
        )
    }

    /// Every version visible at `snapshot`, for a checkpoint image: `(slot, row)`.
    pub fn visible_versions(
        &self,
        snapshot: &Snapshot,
        mut visit: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let pages: Vec<Arc<PageLock>> = self.pages().clone();
        for (p, page) in pages.iter().enumerate() {
            let page = page.read().unwrap_or_else(|p| p.into_inner());
            for i in 0..PAGE_SLOTS {
                if let Some(row) = page.visible_row(i, snapshot) {
                    visit((p * PAGE_SLOTS + i) as u64, row)?;
                }
            }
        }
        Ok(())
    }

    /// Memory the table's versions hold, for a dropped table's release.
    pub fn release_all(&self) {
        let pages: Vec<Arc<PageLock>> = self.pages().clone();
        let mut bytes = 0;
        for page in pages {
            let page = page.read().unwrap_or_else(|p| p.into_inner());
            bytes += page.row_bytes() + page.version_count() * VERSION_OVERHEAD_BYTES;
        }
        self.memory.release(bytes);
    }

    /// The same rows under a new definition (same columns; for example a new
    /// primary key), sharing this table's pages; the index is rebuilt over the
    /// newest versions, so only snapshots taken at `built_ts` or later, and once
    /// the definition commits at its commit timestamp or later, may use it (see
    /// [`HeapTable::key_index_serves`]).
    /// The index's memory is reserved as `charge` says (forced when replay redoes a
    /// redefinition that committed).
    pub fn with_def(&self, def: TableDef, built_ts: u64, charge: Charge) -> Result<HeapTable> {
        let mut table = HeapTable::new(def, self.memory.clone())?;
        table.index_serves_from_ts = AtomicU64::new(built_ts);
        *table.pages.get_mut().unwrap_or_else(|p| p.into_inner()) = self.pages().clone();
        table.next_slot = AtomicU64::new(self.slot_count());
        *table
            .free_slots
            .get_mut()
            .unwrap_or_else(|p| p.into_inner()) = self
            .free_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(key) = &table.key {
            let index = self.build_index(key)?;
            let bytes = index.allocated_bytes();
            table.memory.take(bytes, charge)?;
            *table.index_bytes.get_mut() = bytes;
            *table.index.get_mut().unwrap_or_else(|p| p.into_inner()) = index;
        }
        Ok(table)
    }

    /// A primary-key index over the newest versions under `key` (for
    /// ALTER TABLE ... ADD PRIMARY KEY); fails with 23505 if two live rows
    /// share a key.
    pub fn build_index(&self, key: &KeyCodec) -> Result<BPlusTree> {
        let mut tree = BPlusTree::new();
        let pages: Vec<Arc<PageLock>> = self.pages().clone();
        for (p, page) in pages.iter().enumerate() {
            let page = page.read().unwrap_or_else(|p| p.into_inner());
            let mut slots = Vec::new();
            let mut rows: Vec<&[u8]> = Vec::new();
            for i in 0..PAGE_SLOTS {
                if let Some(newest) = page
                    .newest(i)
                    .filter(|v| v.end == OPEN || marked_by(v.end).is_some())
                {
                    slots.push((p * PAGE_SLOTS + i) as u64);
                    rows.push(page.row(newest));
                }
            }
            let batch = self.codec.decode(&rows, None)?;
            for (r, slot) in slots.into_iter().enumerate() {
                if tree.insert(&key.key(&batch, r), slot).is_err() {
                    return Err(self.duplicate_key());
                }
            }
        }
        Ok(tree)
    }
}

//! The durable store: heap tables and their catalog, logged through the WAL,
//! checkpointed to images, recovered on open.
//!
//! A transaction's changes live in the heap as versions marked with its id
//! and, encoded as redo ops, in a buffer. COMMIT appends one WAL record with
//! the buffer (large transactions spill earlier records as they go), waits
//! for group commit to make it durable, stamps its versions with the commit
//! timestamp, and only then becomes visible. Nothing uncommitted is ever
//! replayed: recovery applies a transaction's ops only when it finds its
//! commit record.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use zyron_common::{Result, SqlState, ZyronError};
use zyron_txn::{Isolation, Snapshot, TxnId, TxnManager};
use zyron_wal::{Record, Wal, WalOptions};

use crate::catalog::TableDef;
use crate::checkpoint::{self, Control, Entry, ImageWriter};
use crate::redo::{self, KIND_ABORT, KIND_COMMIT, KIND_ROLLBACK_TO, KIND_TXN_DATA, Op, Reader};
use crate::table::{Change, Charge, GcStats, HeapTable, MemoryBudget, Step, WriteCtx};

/// A transaction's redo buffer is written to the WAL early past this size
/// (or a quarter of the WAL's largest record, if that is smaller).
pub const SPILL_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub dir: PathBuf,
    pub wal: WalOptions,
    /// Rows and versions may hold this much memory; writes beyond fail with 53200.
    pub memory_budget_bytes: usize,
}

impl StoreOptions {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            wal: WalOptions::default(),
            memory_budget_bytes: 4 << 30,
        }
    }
}

/// Whether COMMIT waits for its record to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous_commit = on`: acknowledged only once durable.
    #[default]
    Synchronous,
    /// `synchronous_commit = off`: acknowledged at once; the record is
    /// durable within the WAL's background flush interval.
    Asynchronous,
}

/// What opening the store did.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecoveryReport {
    pub image_rows: u64,
    pub replayed_records: u64,
    pub replayed_commits: u64,
    pub wal_bytes_replayed: u64,
    pub torn_bytes_cut: u64,
    /// Loading the checkpoint image into memory.
    pub image_load: Duration,
    /// Replaying the WAL written after the checkpoint.
    pub replay: Duration,
    /// The whole open, both of the above included.
    pub elapsed: Duration,
}

/// What a checkpoint wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointStats {
    pub rows: u64,
    pub image_bytes: u64,
    pub redo_lsn: u64,
    pub segments_released: usize,
    pub elapsed: Duration,
}

struct CatalogEntry {
    table: Arc<HeapTable>,
    /// Set when a committed DROP removed it; kept until no snapshot or
    /// checkpoint can need it.
    dropped_ts: Option<u64>,
    /// The transaction whose DROP, TRUNCATE or ALTER of this table is being
    /// committed: it has its commit timestamp and waits for its fdatasync.
    dropping: Option<TxnId>,
    /// Commits that wrote to this version of the table, so that an ALTER can tell
    /// whether one came after it copied the table (see `Transaction::claim_tables`).
    write_commits: AtomicU64,
}

#[derive(Default)]
struct Catalog {
    entries: BTreeMap<u64, CatalogEntry>,
    names: Names<u64>,
    /// Names taken by open transactions' CREATE TABLE.
    reserved: Names<TxnId>,
}

/// Values by (schema, table) name, looked up by borrowed names: every
/// statement resolves its tables, and an owned key cost two allocations.
struct Names<V>(HashMap<String, HashMap<String, V>>);

impl<V> Default for Names<V> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<V> Names<V> {
    fn get(&self, schema: &str, name: &str) -> Option<&V> {
        self.0.get(schema)?.get(name)
    }

    fn insert(&mut self, schema: &str, name: &str, value: V) {
        self.0
            .entry(schema.to_owned())
            .or_default()
            .insert(name.to_owned(), value);
    }

    fn remove(&mut self, schema: &str, name: &str) -> Option<V> {
        let in_schema = self.0.get_mut(schema)?;
        let removed = in_schema.remove(name);
        if in_schema.is_empty() {
            self.0.remove(schema);
        }
        removed
    }
}

impl Catalog {
    fn live(&self, id: u64) -> Option<&Arc<HeapTable>> {
        self.entries
            .get(&id)
            .filter(|e| e.dropped_ts.is_none())
            .map(|e| &e.table)
    }

    /// The entry of table `id` if `txn` may still commit a drop or a new version
    /// of it: no DROP, TRUNCATE or ALTER by another transaction has committed or
    /// taken its timestamp.
    fn claimable_by(&self, id: u64, txn: TxnId) -> Option<&CatalogEntry> {
        self.entries
            .get(&id)
            .filter(|e| e.dropped_ts.is_none() && e.dropping.is_none_or(|t| t == txn))
    }

    /// Whether `txn` may commit writes to `table`: it is still the current version.
    fn writable_by(&self, table: &Arc<HeapTable>, txn: TxnId) -> bool {
        self.claimable_by(table.id(), txn)
            .is_some_and(|e| Arc::ptr_eq(&e.table, table))
    }

    fn put(&mut self, table: Arc<HeapTable>) {
        let def = table.def();
        self.names.insert(&def.schema, &def.name, def.id);
        self.entries.insert(
            def.id,
            CatalogEntry {
                table,
                dropped_ts: None,
                dropping: None,
                write_commits: AtomicU64::new(0),
            },
        );
    }

    fn drop_table(&mut self, id: u64, ts: u64) {
        if let Some(entry) = self.entries.get_mut(&id) {
            let def = entry.table.def();
            self.names.remove(&def.schema, &def.name);
            entry.dropped_ts = Some(ts);
        }
    }
}

pub struct Store {
    dir: PathBuf,
    wal: Wal,
    txns: TxnManager,
    memory: Arc<MemoryBudget>,
    catalog: RwLock<Catalog>,
    next_table_id: AtomicU64,
    checkpointing: Mutex<()>,
    /// A row travels in one op of one WAL record, with room for the framing.
    max_row_bytes: usize,
    spill_bytes: usize,
}

impl Store {
    /// Opens (or creates) the store in `options.dir`: loads the last
    /// checkpoint image and replays the WAL after it.
    pub fn open(options: StoreOptions) -> Result<(Arc<Store>, RecoveryReport)> {
        let started = Instant::now();
        let dir = options.dir.clone();
        std::fs::create_dir_all(&dir)
            .map_err(|e| ZyronError::io(&format!("creating {}", dir.display()), &e))?;
        let memory = MemoryBudget::new(options.memory_budget_bytes);
        let control = checkpoint::read_control(&dir)?;
        let mut replay = Replay::new(memory.clone());
        let mut report = RecoveryReport::default();
        if let Some(control) = &control {
            replay.image_ts = control.snapshot_ts;
            report.image_rows = replay.load_image(&dir.join(&control.image))?;
            report.image_load = started.elapsed();
            replay.max_ts = control.snapshot_ts;
            replay.max_txn = control.next_txn.saturating_sub(1);
            replay.max_table_id = control.next_table_id.saturating_sub(1);
        }
        let redo_lsn = control.as_ref().map_or(0, |c| c.redo_lsn);
        let replay_started = Instant::now();
        let (wal, recovered) =
            zyron_wal::open(&dir.join("wal"), options.wal.clone(), redo_lsn, |record| {
                replay.apply(record)
            })?;
        report.replay = replay_started.elapsed();
        report.replayed_records = recovered.replayed_records;
        report.replayed_commits = replay.commits;
        report.wal_bytes_replayed = recovered.end_lsn - recovered.replay_from_lsn;
        report.torn_bytes_cut = recovered.torn_bytes_cut;
        let txns = TxnManager::recovered(replay.max_ts, replay.max_txn + 1);
        let mut catalog = Catalog::default();
        for table in replay.tables.into_values() {
            catalog.put(table);
        }
        let store = Arc::new(Store {
            dir,
            wal,
            txns,
            memory,
            catalog: RwLock::new(catalog),
            next_table_id: AtomicU64::new(replay.max_table_id + 1),
            checkpointing: Mutex::new(()),
            // A commit record holds at most the spill threshold plus one row.
            max_row_bytes: options.wal.max_record_bytes / 2 - 64,
            spill_bytes: SPILL_BYTES.min(options.wal.max_record_bytes / 4),
        });
        report.elapsed = started.elapsed();
        Ok((store, report))
    }

    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    pub fn txns(&self) -> &TxnManager {
        &self.txns
    }

    pub fn memory(&self) -> &MemoryBudget {
        &self.memory
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn catalog_read(&self) -> std::sync::RwLockReadGuard<'_, Catalog> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner())
    }

    fn catalog_write(&self) -> std::sync::RwLockWriteGuard<'_, Catalog> {
        self.catalog.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A committed table by name.
    pub fn table(&self, schema: &str, name: &str) -> Option<Arc<HeapTable>> {
        let catalog = self.catalog_read();
        catalog
            .names
            .get(schema, name)
            .and_then(|id| catalog.live(*id))
            .cloned()
    }

    /// Every committed table.
    pub fn tables(&self) -> Vec<Arc<HeapTable>> {
        self.catalog_read()
            .entries
            .values()
            .filter(|e| e.dropped_ts.is_none())
            .map(|e| e.table.clone())
            .collect()
    }

    pub fn begin(self: &Arc<Self>, isolation: Isolation) -> Transaction {
        let txn = self.txns.begin();
        let snapshot = self.txns.snapshot(txn);
        Transaction {
            store: self.clone(),
            txn,
            isolation,
            snapshot,
            writes: Vec::new(),
            writes_fixed: 0,
            redo: Vec::new(),
            redo_op_ends: Vec::new(),
            ops_total: 0,
            ops_logged: 0,
            ddl: Vec::new(),
            savepoints: Vec::new(),
            finished: false,
        }
    }

    /// Garbage-collects every table: versions no snapshot can see, and
    /// dropped tables no snapshot can reach.
    pub fn vacuum(&self) -> GcStats {
        let horizon = self.txns.gc_horizon();
        let mut total = GcStats::default();
        let tables: Vec<Arc<HeapTable>> = self
            .catalog_read()
            .entries
            .values()
            .map(|e| e.table.clone())
            .collect();
        for table in tables {
            let stats = table.collect_garbage(horizon);
            total.versions_examined += stats.versions_examined;
            total.versions_removed += stats.versions_removed;
            total.slots_freed += stats.slots_freed;
        }
        // A TRUNCATE's old table goes here, not only at the next checkpoint, so its
        // memory is back before a reload needs it.
        self.prune_dropped(horizon);
        total
    }

    /// Writes every row visible now to a new image, points the control file
    /// at it, and releases the WAL before its redo position.
    pub fn checkpoint(&self) -> Result<CheckpointStats> {
        let started = Instant::now();
        let _one_at_a_time = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
        let reader = self.txns.begin();
        let result = self.write_checkpoint(reader);
        self.txns.finish_abort(reader);
        let mut stats = result?;
        stats.elapsed = started.elapsed();
        Ok(stats)
    }

    fn write_checkpoint(&self, reader: TxnId) -> Result<CheckpointStats> {
        let (snapshot, redo_lsn, tables) = {
            let catalog = self.catalog_read();
            let (snapshot, redo_lsn) = self
                .txns
                .checkpoint_snapshot(reader, || self.wal.next_lsn());
            // Tables dropped after the snapshot are still needed: replay may insert into them.
            let tables: Vec<Arc<HeapTable>> = catalog
                .entries
                .values()
                .filter(|e| e.dropped_ts.is_none_or(|ts| ts > snapshot.read_ts))
                .map(|e| e.table.clone())
                .collect();
            (snapshot, redo_lsn, tables)
        };
        self.wal.flush(redo_lsn)?;
        let name = format!("checkpoint-{redo_lsn:016x}-{:016x}.zck", snapshot.read_ts);
        let path = self.dir.join(&name);
        let mut image =
            ImageWriter::create(&path, snapshot.read_ts, redo_lsn, tables.len() as u32)?;
        for table in &tables {
            image.table(&table.def().to_json())?;
            table.visible_versions(&snapshot, |slot, row| image.row(slot, row))?;
        }
        let rows = image.finish()?;
        checkpoint::sync_dir(&self.dir)?;
        let control = Control {
            image: name.clone(),
            snapshot_ts: snapshot.read_ts,
            redo_lsn,
            next_txn: self.txns.next_txn_id(),
            next_table_id: self.next_table_id.load(Ordering::Relaxed),
        };
        checkpoint::write_control(&self.dir, &control)?;
        self.remove_old_images(&name);
        let segments_released = self.wal.truncate_before(redo_lsn)?;
        self.prune_dropped(self.txns.gc_horizon().min(snapshot.read_ts));
        let image_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Ok(CheckpointStats {
            rows,
            image_bytes,
            redo_lsn,
            segments_released,
            elapsed: Duration::ZERO,
        })
    }

    fn remove_old_images(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("checkpoint-") && name != keep {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Forgets tables whose DROP committed at or below `horizon`: no snapshot can
    /// reach them, and a checkpoint that still needs one pins a snapshot below its
    /// DROP.
    ///
    /// A table some transaction (or a view's plan) still holds is kept: its uncommitted versions'
    /// memory goes back through that transaction's undo, and must not be given
    /// back twice.
    fn prune_dropped(&self, horizon: u64) {
        let prunable = |e: &CatalogEntry| {
            e.dropped_ts.is_some_and(|ts| ts <= horizon) && Arc::strong_count(&e.table) == 1
        };
        if !self.catalog_read().entries.values().any(prunable) {
            return;
        }
        let mut catalog = self.catalog_write();
        catalog.entries.retain(|_, e| {
            let gone = prunable(e);
            if gone {
                e.table.release_all();
            }
            !gone
        });
    }

    async fn wait_durable(&self, end_lsn: u64) -> Result<()> {
        let (tx, rx) = futures_channel::oneshot::channel();
        self.wal.on_durable(
            end_lsn,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        rx.await.unwrap_or_else(|_| {
            Err(ZyronError::internal(
                "the WAL stopped before the commit was durable",
            ))
        })
    }
}

/// Writes of a transaction, for stamping at commit and undo at rollback: `count`
/// consecutive slots of one table that had the same change, so that a bulk insert
/// is one entry (a 2M-row COPY kept 2M entries and 2M boxed keys, 110 MB of fresh
/// memory the kernel had to zero).
struct Write {
    table: Arc<HeapTable>,
    first_slot: u64,
    count: u32,
    change: Change,
    /// Inserts into a table with a primary key: undoing one frees its key, which
    /// is read back from the row then.
    frees_key: bool,
}

impl Write {
    fn slots(&self) -> std::ops::Range<u64> {
        self.first_slot..self.first_slot + u64::from(self.count)
    }
}

enum Ddl {
    Create(Arc<HeapTable>),
    Drop(Arc<HeapTable>),
    Redefine {
        new: Arc<HeapTable>,
        /// The version `new` was copied from.
        source: Arc<HeapTable>,
        /// The source's `write_commits` before `new` copied it.
        commits_before: u64,
    },
}

/// The catalog, held shared by a committing transaction that only writes rows and
/// exclusively by one that drops or alters tables (see `Transaction::claim_tables`).
enum CatalogLock<'s> {
    Read(std::sync::RwLockReadGuard<'s, Catalog>),
    Write(std::sync::RwLockWriteGuard<'s, Catalog>),
}

impl std::ops::Deref for CatalogLock<'_> {
    type Target = Catalog;

    fn deref(&self) -> &Catalog {
        match self {
            CatalogLock::Read(guard) => guard,
            CatalogLock::Write(guard) => guard,
        }
    }
}

struct Savepoint {
    name: String,
    writes: usize,
    ops_total: u64,
    ddl: usize,
}

/// An open transaction. Dropping it without COMMIT rolls it back.
pub struct Transaction {
    store: Arc<Store>,
    txn: TxnId,
    isolation: Isolation,
    snapshot: Snapshot,
    writes: Vec<Write>,
    /// Entries of `writes` below this are fixed (a savepoint counts them): a write
    /// extends only a later entry.
    writes_fixed: usize,
    /// Ops not yet in the WAL, and where each ends in `redo`.
    redo: Vec<u8>,
    redo_op_ends: Vec<usize>,
    ops_total: u64,
    /// Ops already written to the WAL in TxnData records.
    ops_logged: u64,
    ddl: Vec<Ddl>,
    savepoints: Vec<Savepoint>,
    finished: bool,
}

impl Transaction {
    pub fn id(&self) -> TxnId {
        self.txn
    }

    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    pub fn snapshot(&self) -> Snapshot {
        self.snapshot
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Whether the transaction has changed anything.
    pub fn has_writes(&self) -> bool {
        !self.writes.is_empty() || !self.ddl.is_empty() || self.ops_logged > 0
    }

    /// Starts a statement: under READ COMMITTED it reads a fresh snapshot.
    pub fn begin_statement(&mut self) {
        if self.isolation == Isolation::ReadCommitted {
            self.snapshot = self.store.txns.snapshot(self.txn);
        }
    }

    fn ctx(&self) -> WriteCtx {
        WriteCtx {
            txn: self.txn,
            snapshot: self.snapshot,
            isolation: self.isolation,
        }
    }

    /// A table as this transaction sees it (its own DDL first).
    pub fn table(&self, schema: &str, name: &str) -> Option<Arc<HeapTable>> {
        for ddl in self.ddl.iter().rev() {
            match ddl {
                Ddl::Create(t) | Ddl::Redefine { new: t, .. }
                    if t.def().schema == schema && t.def().name == name =>
                {
                    return Some(t.clone());
                }
                Ddl::Drop(t) if t.def().schema == schema && t.def().name == name => return None,
                _ => {}
            }
        }
        self.store.table(schema, name)
    }

    /// Every table this transaction sees.
    pub fn tables(&self) -> Vec<Arc<HeapTable>> {
        let mut by_name: BTreeMap<(String, String), Arc<HeapTable>> = self
            .store
            .tables()
            .into_iter()
            .map(|t| ((t.def().schema.clone(), t.def().name.clone()), t))
            .collect();
        for ddl in &self.ddl {
            match ddl {
                Ddl::Create(t) | Ddl::Redefine { new: t, .. } => {
                    by_name.insert((t.def().schema.clone(), t.def().name.clone()), t.clone());
                }
                Ddl::Drop(t) => {
                    by_name.remove(&(t.def().schema.clone(), t.def().name.clone()));
                }
            }
        }
        by_name.into_values().collect()
    }

    /// Notes a change to `slot`: extends the last entry when it is the same change to
    /// the slot before, in the same table, made since the last savepoint.
    fn record(&mut self, table: &Arc<HeapTable>, slot: u64, change: Change, frees_key: bool) {
        if self.writes.len() > self.writes_fixed
            && let Some(last) = self.writes.last_mut()
            && Arc::ptr_eq(&last.table, table)
            && last.change == change
            && last.frees_key == frees_key
            && last.slots().end == slot
            && last.count < u32::MAX
        {
            last.count += 1;
            return;
        }
        self.writes.push(Write {
            table: table.clone(),
            first_slot: slot,
            count: 1,
            change,
            frees_key,
        });
    }

    fn log(&mut self, op: &Op) -> Result<()> {
        redo::encode_op(&mut self.redo, op);
        self.redo_op_ends.push(self.redo.len());
        self.ops_total += 1;
        if self.redo.len() >= self.store.spill_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the buffered ops to the WAL ahead of the commit.
    fn spill(&mut self) -> Result<()> {
        let mut payload = self.txn.to_le_bytes().to_vec();
        payload.extend_from_slice(&self.redo);
        let appended = self.store.wal.append_unwaited(KIND_TXN_DATA, &payload)?;
        self.store.txns.note_logged(self.txn, appended.lsn);
        self.ops_logged = self.ops_total;
        self.redo.clear();
        self.redo_op_ends.clear();
        Ok(())
    }

    async fn wait_for(&self, holder: TxnId) -> Result<()> {
        let ended = self.store.txns.wait_for(self.txn, holder)?;
        let _ = ended.await;
        self.store.txns.stop_waiting(self.txn);
        Ok(())
    }

    fn check_row_size(&self, row: &[u8]) -> Result<()> {
        let limit = self.store.max_row_bytes;
        if row.len() > limit {
            return Err(ZyronError::new(
                SqlState::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "row is {} bytes, more than the {limit} bytes a heap row may hold",
                    row.len()
                ),
            ));
        }
        Ok(())
    }

    /// Inserts every row of `batch` (columns in table order); returns the count.
    pub async fn insert(&mut self, table: &Arc<HeapTable>, batch: &RecordBatch) -> Result<u64> {
        let rows = table.codec().encode(batch)?;
        let keys: Vec<Vec<u8>> = match table.key_codec() {
            Some(codec) => (0..batch.num_rows()).map(|r| codec.key(batch, r)).collect(),
            None => Vec::new(),
        };
        for (r, row) in rows.into_iter().enumerate() {
            self.check_row_size(&row)?;
            let key = keys.get(r).map(|k| k.as_slice());
            let slot = loop {
                match table.insert(&self.ctx(), &row, key)? {
                    Step::Done(slot) => break slot,
                    Step::Wait(holder) => self.wait_for(holder).await?,
                }
            };
            self.record(table, slot, Change::Created, key.is_some());
            self.log(&Op::Insert {
                table: table.id(),
                slot,
                row,
            })?;
        }
        Ok(batch.num_rows() as u64)
    }

    /// Updates the row in `slot` to `new_row(current)` (see [`HeapTable::update`]).
    pub async fn update(
        &mut self,
        table: &Arc<HeapTable>,
        slot: u64,
        mut new_row: impl FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> Result<bool> {
        loop {
            let mut written = None;
            let step = table.update(&self.ctx(), slot, |current| {
                let row = new_row(current)?;
                // Refused before the version is pushed: afterwards the row
                // would hold this transaction's marks with no write to undo.
                if let Some(row) = &row {
                    self.check_row_size(row)?;
                }
                written = row.clone();
                Ok(row)
            })?;
            match step {
                Step::Wait(holder) => self.wait_for(holder).await?,
                Step::Done(false) => return Ok(false),
                Step::Done(true) => {
                    let row = written.expect("an update wrote a row");
                    self.record(table, slot, Change::Ended, false);
                    self.record(table, slot, Change::Created, false);
                    self.log(&Op::Update {
                        table: table.id(),
                        slot,
                        row,
                    })?;
                    return Ok(true);
                }
            }
        }
    }

    /// Deletes the row in `slot` if `still_qualifies(current)`.
    pub async fn delete(
        &mut self,
        table: &Arc<HeapTable>,
        slot: u64,
        mut still_qualifies: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<bool> {
        loop {
            match table.delete(&self.ctx(), slot, &mut still_qualifies)? {
                Step::Wait(holder) => self.wait_for(holder).await?,
                Step::Done(false) => return Ok(false),
                Step::Done(true) => {
                    self.record(table, slot, Change::Ended, false);
                    self.log(&Op::Delete {
                        table: table.id(),
                        slot,
                    })?;
                    return Ok(true);
                }
            }
        }
    }

    /// `CREATE TABLE`: visible to this transaction now, to others once committed.
    pub fn create_table(&mut self, mut def: TableDef) -> Result<Arc<HeapTable>> {
        if self.table(&def.schema, &def.name).is_some() {
            return Err(already_exists(&def.name));
        }
        {
            let mut catalog = self.store.catalog_write();
            match catalog.reserved.get(&def.schema, &def.name) {
                Some(&holder) if holder != self.txn => return Err(already_exists(&def.name)),
                _ => {}
            }
            let taken = catalog.names.get(&def.schema, &def.name).is_some();
            if taken && !self.drops(&def.schema, &def.name) {
                return Err(already_exists(&def.name));
            }
            catalog.reserved.insert(&def.schema, &def.name, self.txn);
        }
        def.id = self.store.next_table_id.fetch_add(1, Ordering::Relaxed);
        let table = Arc::new(HeapTable::new(def, self.store.memory.clone())?);
        self.log(&Op::Create {
            def: table.def().to_json(),
        })?;
        self.ddl.push(Ddl::Create(table.clone()));
        Ok(table)
    }

    fn drops(&self, schema: &str, name: &str) -> bool {
        self.ddl
            .iter()
            .any(|d| matches!(d, Ddl::Drop(t) if t.def().schema == schema && t.def().name == name))
    }

    /// `DROP TABLE`.
    pub fn drop_table(&mut self, table: &Arc<HeapTable>) -> Result<()> {
        self.log(&Op::Drop { table: table.id() })?;
        self.ddl.push(Ddl::Drop(table.clone()));
        Ok(())
    }

    /// `TRUNCATE`: replaces the table with an empty one of the same definition (and
    /// a new id), as PostgreSQL gives a truncated table a new file, so the cost does
    /// not grow with the rows; their memory goes back at the next VACUUM or
    /// checkpoint once nothing holds the old table (see `Store::prune_dropped`).
    /// As in PostgreSQL, it is not MVCC-safe: once committed, older snapshots see
    /// the table empty. A concurrent transaction that writes to the table and
    /// commits after it fails with 40001 (see `claim_tables`), as does a second
    /// concurrent TRUNCATE.
    pub fn truncate_table(&mut self, table: &Arc<HeapTable>) -> Result<Arc<HeapTable>> {
        let def = table.def().clone();
        let held_by_other = self
            .store
            .catalog_read()
            .reserved
            .get(&def.schema, &def.name)
            .is_some_and(|&holder| holder != self.txn);
        if held_by_other {
            return Err(name_taken_concurrently(&def.name));
        }
        let name = def.name.clone();
        self.drop_table(table)?;
        self.create_table(def).map_err(|err| match err.sqlstate() {
            // A concurrent TRUNCATE took the name after the check above.
            SqlState::DUPLICATE_TABLE => name_taken_concurrently(&name),
            _ => err,
        })
    }

    /// A new definition for a table (same columns), such as an added primary key.
    pub fn redefine_table(
        &mut self,
        table: &Arc<HeapTable>,
        def: TableDef,
    ) -> Result<Arc<HeapTable>> {
        assert_eq!(def.id, table.id(), "a redefinition keeps the table's id");
        // Snapshots below this may see versions older than the newest, which the new index
        // holds; it rises to the commit timestamp at publication. (`visible_ts`, not a new
        // snapshot: taking one would move this transaction's pin for garbage collection.)
        let built_ts = self.store.txns.visible_ts();
        // Read before copying: a write that commits after this is caught at commit.
        let commits_before = self
            .store
            .catalog_read()
            .entries
            .get(&table.id())
            .map_or(0, |e| e.write_commits.load(Ordering::Acquire));
        let new = Arc::new(table.with_def(def, built_ts, Charge::Checked)?);
        self.log(&Op::Redefine {
            def: new.def().to_json(),
        })?;
        self.ddl.push(Ddl::Redefine {
            new: new.clone(),
            source: table.clone(),
            commits_before,
        });
        Ok(new)
    }

    pub fn savepoint(&mut self, name: &str) {
        self.writes_fixed = self.writes.len();
        self.savepoints.push(Savepoint {
            name: name.to_owned(),
            writes: self.writes.len(),
            ops_total: self.ops_total,
            ddl: self.ddl.len(),
        });
    }

    fn savepoint_index(&self, name: &str) -> Result<usize> {
        self.savepoints
            .iter()
            .rposition(|s| s.name == name)
            .ok_or_else(|| {
                ZyronError::new(
                    SqlState::INVALID_SAVEPOINT_SPECIFICATION,
                    format!("savepoint \"{name}\" does not exist"),
                )
            })
    }

    /// `RELEASE SAVEPOINT`: forgets it (and those set after it), keeping the changes.
    pub fn release_savepoint(&mut self, name: &str) -> Result<()> {
        let index = self.savepoint_index(name)?;
        self.savepoints.truncate(index);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT`: undoes every change made after it; the savepoint stays.
    pub fn rollback_to_savepoint(&mut self, name: &str) -> Result<()> {
        let index = self.savepoint_index(name)?;
        let (writes, ops_total, ddl) = {
            let s = &self.savepoints[index];
            (s.writes, s.ops_total, s.ddl)
        };
        self.savepoints.truncate(index + 1);
        self.undo_writes(writes);
        self.writes_fixed = writes;
        self.undo_ddl(ddl);
        if ops_total >= self.ops_logged {
            let keep = (ops_total - self.ops_logged) as usize;
            let end = if keep == 0 {
                0
            } else {
                self.redo_op_ends[keep - 1]
            };
            self.redo.truncate(end);
            self.redo_op_ends.truncate(keep);
        } else {
            let mut payload = self.txn.to_le_bytes().to_vec();
            payload.extend_from_slice(&ops_total.to_le_bytes());
            self.store.wal.append_unwaited(KIND_ROLLBACK_TO, &payload)?;
            self.ops_logged = ops_total;
            self.redo.clear();
            self.redo_op_ends.clear();
        }
        self.ops_total = ops_total;
        Ok(())
    }

    fn undo_writes(&mut self, keep: usize) {
        while self.writes.len() > keep {
            let write = self.writes.pop().expect("len > keep");
            write
                .table
                .undo_run(write.slots(), self.txn, write.change, write.frees_key);
        }
    }

    fn undo_ddl(&mut self, keep: usize) {
        let mut catalog = self.store.catalog_write();
        let undone: Vec<Ddl> = self.ddl.drain(keep..).collect();
        for ddl in undone {
            match ddl {
                Ddl::Create(t) => {
                    // `CREATE t; SAVEPOINT s; TRUNCATE t; ROLLBACK TO s`: the first
                    // CREATE still holds the name.
                    let (schema, name) = (&t.def().schema, &t.def().name);
                    let still_created = self.ddl.iter().any(|d| {
                        matches!(d, Ddl::Create(c) if &c.def().schema == schema && &c.def().name == name)
                    });
                    if !still_created {
                        catalog.reserved.remove(schema, name);
                    }
                    t.release_all();
                }
                // A commit that claimed the table and then failed (its fdatasync) gives it back.
                Ddl::Drop(t) | Ddl::Redefine { new: t, .. } => {
                    if let Some(entry) = catalog.entries.get_mut(&t.id())
                        && entry.dropping == Some(self.txn)
                    {
                        entry.dropping = None;
                    }
                }
            }
        }
    }

    /// Makes the transaction's changes durable (as `durability` says) and visible.
    pub async fn commit(mut self, durability: Durability) -> Result<()> {
        self.finished = true;
        if !self.has_writes() {
            self.store.txns.finish_abort(self.txn);
            return Ok(());
        }
        let mut payload = Vec::with_capacity(16 + self.redo.len());
        payload.extend_from_slice(&self.txn.to_le_bytes());
        payload.extend_from_slice(&[0; 8]);
        payload.extend_from_slice(&self.redo);
        let mut end_lsn = 0;
        let store = self.store.clone();
        let claimed = match self.claim_tables(&store) {
            Ok(claimed) => claimed,
            Err(err) => {
                self.abort();
                return Err(err);
            }
        };
        let ticket = store.txns.commit_in_order(self.txn, |ts| {
            payload[8..16].copy_from_slice(&ts.to_le_bytes());
            let appended = store.wal.append(KIND_COMMIT, &payload)?;
            end_lsn = appended.end_lsn;
            Ok(appended.lsn)
        });
        drop(claimed);
        let ticket = match ticket {
            Ok(ticket) => ticket,
            Err(err) => {
                self.abort();
                return Err(err);
            }
        };
        if durability == Durability::Synchronous {
            // The only open transaction flushes on its own thread: no hand-off to the WAL's
            // thread and back. With others open, commits wait through the WAL's thread, so
            // they share its rounds and no runtime worker blocks in fdatasync while other
            // sessions have work for it.
            let lone = store.txns.active_count() == 1;
            let durable = match lone.then(|| store.wal.flush_if_idle(end_lsn)).flatten() {
                Some(result) => result,
                None => store.wait_durable(end_lsn).await,
            };
            if let Err(err) = durable {
                self.undo_writes(0);
                self.undo_ddl(0);
                store.txns.abandon_commit(self.txn, ticket.ts);
                return Err(err);
            }
        }
        for write in &self.writes {
            for slot in write.slots() {
                write.table.stamp(slot, self.txn, ticket.ts);
            }
        }
        let dropped_any = self.ddl.iter().any(|d| matches!(d, Ddl::Drop(_)));
        self.publish_ddl(ticket.ts);
        store.txns.finish_commit(self.txn, ticket.ts);
        if dropped_any {
            // A TRUNCATE's old table, when no snapshot or statement still holds it:
            // a reload right after needs the memory (the maintenance thread's VACUUM
            // would give it back a few seconds later).
            self.writes.clear();
            store.prune_dropped(store.txns.gc_horizon());
        }
        Ok(())
    }

    /// Checks that no DROP, TRUNCATE or ALTER ordered before this commit replaced a
    /// table it writes, drops or alters, and that no write committed to a table it
    /// alters since it copied it; then claims the tables it replaces. The caller
    /// holds the returned lock while the commit takes its timestamp and its place
    /// in the WAL, so that no commit can follow a DROP in the log with writes to
    /// the dropped table (replay would find no table for them), and no write is
    /// lost to a version of a table that another commit replaced. The loser gets
    /// 40001 and may retry. (The catalog lock is taken before the transaction
    /// manager's, as a checkpoint takes them.)
    fn claim_tables<'s>(&self, store: &'s Store) -> Result<CatalogLock<'s>> {
        let replaces_any = self
            .ddl
            .iter()
            .any(|d| matches!(d, Ddl::Drop(_) | Ddl::Redefine { .. }));
        let mut catalog = match replaces_any {
            true => CatalogLock::Write(store.catalog_write()),
            false => CatalogLock::Read(store.catalog_read()),
        };
        // Tables created here, and versions made here, are in no catalog yet.
        let created: Vec<u64> = self
            .ddl
            .iter()
            .filter_map(|d| match d {
                Ddl::Create(t) => Some(t.id()),
                _ => None,
            })
            .collect();
        let made_here = |table: &Arc<HeapTable>| {
            created.contains(&table.id())
                || self
                    .ddl
                    .iter()
                    .any(|d| matches!(d, Ddl::Redefine { new, .. } if Arc::ptr_eq(new, table)))
        };
        let written: Vec<&Arc<HeapTable>> = self
            .writes
            .iter()
            .map(|w| &w.table)
            .filter(|t| !made_here(t))
            .collect();
        if let Some(gone) = written.iter().find(|t| !catalog.writable_by(t, self.txn)) {
            return Err(replaced_concurrently(gone, "dropped, truncated or altered"));
        }
        // A DROP or ALTER must replace the version it saw, not one another commit
        // put in its place (a TRUNCATE would undo a committed ALTER); an ALTER also
        // needs that no write committed to it since it was copied. Versions made
        // here were checked through the catalog version they came from.
        let mut replaced = Vec::new();
        for ddl in &self.ddl {
            let (base, commits_before) = match ddl {
                Ddl::Drop(t) => (t, None),
                Ddl::Redefine {
                    source,
                    commits_before,
                    ..
                } => (source, Some(*commits_before)),
                Ddl::Create(_) => continue,
            };
            if made_here(base) {
                continue;
            }
            if !catalog.writable_by(base, self.txn) {
                return Err(replaced_concurrently(base, "dropped, truncated or altered"));
            }
            let entry = &catalog.entries[&base.id()];
            if commits_before.is_some_and(|c| c != entry.write_commits.load(Ordering::Acquire)) {
                return Err(replaced_concurrently(base, "written"));
            }
            replaced.push(base.id());
        }
        for table in written {
            if let Some(entry) = catalog.entries.get(&table.id()) {
                entry.write_commits.fetch_add(1, Ordering::AcqRel);
            }
        }
        if let CatalogLock::Write(catalog) = &mut catalog {
            for id in replaced {
                if let Some(entry) = catalog.entries.get_mut(&id) {
                    entry.dropping = Some(self.txn);
                }
            }
        }
        Ok(catalog)
    }

    fn publish_ddl(&mut self, ts: u64) {
        if self.ddl.is_empty() {
            return;
        }
        let mut catalog = self.store.catalog_write();
        for ddl in self.ddl.drain(..) {
            match ddl {
                Ddl::Create(t) => {
                    catalog.reserved.remove(&t.def().schema, &t.def().name);
                    catalog.put(t);
                }
                Ddl::Drop(t) => catalog.drop_table(t.id(), ts),
                Ddl::Redefine { new, .. } => {
                    new.index_serves_from(ts);
                    catalog.put(new)
                }
            }
        }
    }

    /// Undoes everything and ends the transaction.
    pub fn rollback(mut self) {
        self.abort();
    }

    fn abort(&mut self) {
        self.finished = true;
        self.undo_writes(0);
        self.undo_ddl(0);
        if self.ops_logged > 0 {
            // Lets replay drop the logged part early; without it the part is dropped at the end.
            let _ = self
                .store
                .wal
                .append_unwaited(KIND_ABORT, &self.txn.to_le_bytes());
        }
        self.store.txns.finish_abort(self.txn);
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.finished {
            self.abort();
        }
    }
}

/// 40001 for a commit that lost a race for `table` (see `Transaction::claim_tables`).
fn replaced_concurrently(table: &HeapTable, how: &str) -> ZyronError {
    ZyronError::new(
        SqlState::SERIALIZATION_FAILURE,
        format!(
            "could not serialize access: table \"{}\" was {how} by a concurrent transaction",
            table.def().name
        ),
    )
}

/// 40001 for a TRUNCATE whose table name another open transaction holds.
fn name_taken_concurrently(name: &str) -> ZyronError {
    ZyronError::new(
        SqlState::SERIALIZATION_FAILURE,
        format!(
            "could not serialize access: table \"{name}\" is being truncated or created by a concurrent transaction"
        ),
    )
}

fn already_exists(name: &str) -> ZyronError {
    ZyronError::new(
        SqlState::DUPLICATE_TABLE,
        format!("relation \"{name}\" already exists"),
    )
}

/// Rebuilds the tables from an image and the WAL.
struct Replay {
    memory: Arc<MemoryBudget>,
    tables: BTreeMap<u64, Arc<HeapTable>>,
    pending: HashMap<TxnId, Vec<Op>>,
    image_ts: u64,
    max_ts: u64,
    max_txn: TxnId,
    max_table_id: u64,
    commits: u64,
}

impl Replay {
    fn new(memory: Arc<MemoryBudget>) -> Self {
        Replay {
            memory,
            tables: BTreeMap::new(),
            pending: HashMap::new(),
            image_ts: 0,
            max_ts: 0,
            max_txn: 0,
            max_table_id: 0,
            commits: 0,
        }
    }

    /// Loads an image; its rows begin at `self.image_ts`.
    fn load_image(&mut self, path: &Path) -> Result<u64> {
        let ts = self.image_ts;
        let mut current: Option<Arc<HeapTable>> = None;
        let mut batch = ImageRows::default();
        let (snapshot_ts, _, rows) = checkpoint::read_image(path, |entry| {
            match entry {
                Entry::Table(json) => {
                    if let Some(table) = &current {
                        load_rows(table, &mut batch, ts)?;
                    }
                    let table = Arc::new(HeapTable::new(
                        TableDef::from_json(json)?,
                        self.memory.clone(),
                    )?);
                    self.max_table_id = self.max_table_id.max(table.id());
                    self.tables.insert(table.id(), table.clone());
                    current = Some(table);
                }
                Entry::Row { slot, row } => {
                    let table = current.as_ref().ok_or_else(|| {
                        ZyronError::new(
                            SqlState::DATA_CORRUPTED,
                            format!("{}: rows before any table", path.display()),
                        )
                    })?;
                    batch.push(slot, row);
                    if batch.is_full() {
                        load_rows(table, &mut batch, ts)?;
                    }
                }
            }
            Ok(())
        })?;
        if let Some(table) = &current {
            load_rows(table, &mut batch, ts)?;
        }
        if snapshot_ts != ts {
            return Err(ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!(
                    "{} is not the image the control file names (snapshot {snapshot_ts}, expected {ts})",
                    path.display()
                ),
            ));
        }
        Ok(rows)
    }

    fn apply(&mut self, record: Record) -> Result<()> {
        let mut reader = Reader::new(&record.payload);
        let txn = reader.u64()?;
        self.max_txn = self.max_txn.max(txn);
        match record.kind {
            KIND_TXN_DATA => self.pending.entry(txn).or_default().extend(reader.ops()?),
            KIND_ROLLBACK_TO => {
                let keep = reader.u64()? as usize;
                self.pending.entry(txn).or_default().truncate(keep);
            }
            KIND_ABORT => {
                self.pending.remove(&txn);
            }
            KIND_COMMIT => {
                let ts = reader.u64()?;
                let mut ops = self.pending.remove(&txn).unwrap_or_default();
                ops.extend(reader.ops()?);
                self.max_ts = self.max_ts.max(ts);
                if ts > self.image_ts {
                    for op in ops {
                        self.apply_op(op, ts)?;
                    }
                    self.commits += 1;
                }
            }
            other => {
                return Err(ZyronError::new(
                    SqlState::DATA_CORRUPTED,
                    format!("WAL record of unknown kind {other} at LSN {}", record.lsn),
                ));
            }
        }
        Ok(())
    }

    fn table(&self, id: u64) -> Result<&Arc<HeapTable>> {
        self.tables.get(&id).ok_or_else(|| {
            ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!("WAL replay: table {id} does not exist"),
            )
        })
    }

    fn apply_op(&mut self, op: Op, ts: u64) -> Result<()> {
        match op {
            Op::Insert { table, slot, row } => {
                let table = self.table(table)?;
                let key = table.keys_of(&[&row])?.pop();
                table.redo_insert(slot, &row, key.as_deref(), ts);
            }
            Op::Update { table, slot, row } => self.table(table)?.redo_update(slot, row, ts)?,
            Op::Delete { table, slot } => self.table(table)?.redo_delete(slot, ts)?,
            Op::Create { def } => {
                let def = TableDef::from_json(&def)?;
                self.max_table_id = self.max_table_id.max(def.id);
                if !self.tables.contains_key(&def.id) {
                    let table = Arc::new(HeapTable::new(def, self.memory.clone())?);
                    self.tables.insert(table.id(), table);
                }
            }
            Op::Drop { table } => {
                if let Some(table) = self.tables.remove(&table) {
                    table.release_all();
                }
            }
            Op::Redefine { def } => {
                let def = TableDef::from_json(&def)?;
                // Recovery: no snapshot from before the restart survives it.
                let new = Arc::new(self.table(def.id)?.with_def(def, 0, Charge::Forced)?);
                self.tables.insert(new.id(), new);
            }
        }
        Ok(())
    }
}

fn load_rows(table: &Arc<HeapTable>, batch: &mut ImageRows, ts: u64) -> Result<()> {
    let rows: Vec<(u64, &[u8])> = batch.rows().collect();
    let bytes: Vec<&[u8]> = rows.iter().map(|(_, row)| *row).collect();
    let keys = table.keys_of(&bytes)?;
    table.redo_inserts(&rows, &keys, ts);
    batch.clear();
    Ok(())
}

/// Rows of a checkpoint image waiting to be loaded together, their bytes end to end in one
/// buffer that is reused batch after batch.
#[derive(Default)]
struct ImageRows {
    slots: Vec<u64>,
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

impl ImageRows {
    /// Rows per load: enough to take the index lock and decode keys rarely, few enough
    /// that the buffer stays small (a few MiB for wide rows).
    const BATCH_ROWS: usize = 4096;

    fn push(&mut self, slot: u64, row: &[u8]) {
        self.slots.push(slot);
        self.bytes.extend_from_slice(row);
        self.ends.push(self.bytes.len());
    }

    fn is_full(&self) -> bool {
        self.slots.len() >= Self::BATCH_ROWS
    }

    fn rows(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        self.slots
            .iter()
            .zip(starts.zip(&self.ends))
            .map(|(slot, (start, end))| (*slot, &self.bytes[start..*end]))
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.ends.clear();
        self.bytes.clear();
    }
}

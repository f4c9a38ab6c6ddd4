//! Data files: record batches written as `.zyr` files with their zone maps
//! in the log, and a snapshot's live rows read back with deletion vectors
//! applied and files pruned by those zone maps. [`LakeWrite`] gathers one
//! transaction's appends and deletes into one commit.
//!
//! ```
//! # futures::executor::block_on(async {
//! use std::sync::Arc;
//! use arrow::array::{AsArray, Int64Array, RecordBatch};
//! use arrow::compute::kernels::cmp::lt;
//! use arrow::datatypes::{DataType, Field, Int64Type, Schema};
//! use object_store::{memory::InMemory, path::Path};
//! use zyron_lake::{FileFilter, LakeTable, TableMetadata};
//! use zyron_format::{CmpOp, PredicateOp, Scalar};
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
//! let ids = |r: std::ops::Range<i64>| RecordBatch::try_new(schema.clone(),
//!     vec![Arc::new(Int64Array::from_iter_values(r))]).unwrap();
//! let metadata = TableMetadata { schema: serde_json::json!({}), checkpoint_interval: 10,
//!                                properties: Default::default() };
//! let table = LakeTable::create(Arc::new(InMemory::new()), Path::from("t"), metadata).await.unwrap();
//!
//! let mut write = table.begin().await.unwrap();
//! write.append(&[ids(0..100)]).await.unwrap();
//! write.commit("append").await.unwrap();
//!
//! // DELETE WHERE id < 10: files whose zone maps rule it out are not read.
//! let mut write = table.begin().await.unwrap();
//! let filters = [FileFilter::new("id", PredicateOp::Cmp(CmpOp::Lt, Scalar::Int(10)))];
//! let gone = write.delete_where(&filters, &|b| Ok(lt(b.column(0), &Int64Array::new_scalar(10)).unwrap()))
//!     .await.unwrap();
//! assert_eq!(gone.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
//! let done = write.commit("delete").await.unwrap();
//!
//! let (batches, report) = table.scan(&done.snapshot, None, &[]).await.unwrap();
//! assert_eq!(report.rows, 90);
//! assert_eq!(batches[0].column(0).as_primitive::<Int64Type>().value(0), 10);
//! # });
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::Schema;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};
use zyron_common::{Result, SqlState, ZyronError};
use zyron_format::{
    ColumnPredicate, FilterMode, PredicateOp, ScanOptions, Stat, WriterOptions, ZoneMap, ZyrFile,
    ZyrWriter, object_reader,
};

use crate::log::{Action, ColumnStats, DataFile, DeletedRows, InlineBytes, StatRange};
use crate::rowset::RowSet;
use crate::snapshot::Snapshot;
use crate::table::{CommitOptions, Committed, LakeTable, join_relative, now_ms, store_error};

/// Where data files go, under the table's root.
pub const DATA_DIR: &str = "data";
/// The path prefix of inline data files (which name no object).
pub const INLINE_DIR: &str = "inline";

/// A predicate on one column (by name) that can rule out whole files by
/// their zone maps. Callers still filter rows exactly: a file that may
/// match is read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct FileFilter {
    pub column: String,
    pub op: PredicateOp,
}

impl FileFilter {
    pub fn new(column: &str, op: PredicateOp) -> FileFilter {
        FileFilter {
            column: column.to_owned(),
            op,
        }
    }

    /// Whether `file` may hold a row passing this filter. A file without
    /// statistics for the column may.
    pub fn might_match(&self, file: &DataFile) -> bool {
        let Some(stats) = file.stats.get(&self.column) else {
            return true;
        };
        let predicate = ColumnPredicate {
            column: 0,
            op: self.op.clone(),
        };
        predicate.might_match(&stat_of(&stats.range), stats.nulls, stats.values)
    }
}

/// What a scan read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanReport {
    pub files: usize,
    /// Files skipped by their zone maps, without a request to storage.
    pub files_pruned: usize,
    pub rows: u64,
}

/// Decides which rows of a batch a DELETE or UPDATE touches (nulls do not).
pub type RowMask<'a> = &'a (dyn Fn(&RecordBatch) -> Result<BooleanArray> + Sync);

impl LakeTable {
    /// Writes `batches` (all of one schema) as a new `.zyr` file and
    /// describes it for an `Add`: kept inline (in the log entry) when it is
    /// at most `inline_max_bytes`, else written under `data/`, durable when
    /// this returns. Nothing refers to the file until a commit adds it.
    pub async fn write_data_file(
        &self,
        batches: &[RecordBatch],
        inline_max_bytes: u64,
    ) -> Result<DataFile> {
        let Some(first) = batches.first() else {
            return Err(ZyronError::internal("a data file needs at least one batch"));
        };
        let schema = first.schema();
        let mut writer = ZyrWriter::new(Vec::new(), schema.clone(), WriterOptions::default())?;
        for batch in batches {
            writer.write(batch)?;
        }
        let (bytes, summary) = writer.finish()?;
        let bytes = Bytes::from(bytes);
        let stats = file_stats(&schema, &ZyrFile::open(bytes.clone())?)?;
        let id = rand::random::<u128>();
        if summary.bytes <= inline_max_bytes {
            return Ok(DataFile {
                path: format!("{INLINE_DIR}/{id:032x}.zyr"),
                rows: summary.rows,
                bytes: summary.bytes,
                stats,
                deleted: RowSet::default(),
                inline: Some(InlineBytes(bytes)),
            });
        }
        // The creation time in the name is the writer's lease (see
        // `vacuum`): VACUUM spares an unreferenced file younger than the
        // lease, and a commit refuses a file older than it.
        let name = format!("{DATA_DIR}/{:013}-{id:032x}.zyr", now_ms());
        let path = self
            .root()
            .clone()
            .join(DATA_DIR)
            .join(&name[DATA_DIR.len() + 1..]);
        // Put-if-absent: a random 128-bit name never repeats by chance, and
        // if it ever did, overwriting a live file would be the worst outcome.
        self.store()
            .put_opts(
                &path,
                PutPayload::from(bytes),
                PutOptions::from(PutMode::Create),
            )
            .await
            .map_err(|e| store_error(&format!("writing {path}"), &e))?;
        Ok(DataFile {
            path: name,
            rows: summary.rows,
            bytes: summary.bytes,
            stats,
            deleted: RowSet::default(),
            inline: None,
        })
    }

    /// Opens a data file (from the log if inline) with the columns that
    /// `needed` picks fetched, checking it holds the rows the log says.
    async fn open_data_file(
        &self,
        file: &DataFile,
        needed: &(dyn Fn(&Schema) -> Vec<usize> + Sync),
    ) -> Result<Arc<ZyrFile>> {
        let zyr = match &file.inline {
            Some(bytes) => Arc::new(ZyrFile::open(bytes.0.clone())?),
            None => {
                let path = self.data_path(&file.path);
                let object = object_reader::open(self.store().clone(), &path).await?;
                object.prefetch(&needed(&object.file.schema())).await?;
                object.file
            }
        };
        if zyr.num_rows() != file.rows {
            return Err(ZyronError::new(
                SqlState::DATA_CORRUPTED,
                format!(
                    "{} holds {} rows; the lake log says {}",
                    file.path,
                    zyr.num_rows(),
                    file.rows
                ),
            ));
        }
        Ok(zyr)
    }

    /// Every live row of `snapshot` in files that `filters` cannot rule out,
    /// `projection` (column indices) applied.
    pub async fn scan(
        &self,
        snapshot: &Snapshot,
        projection: Option<&[usize]>,
        filters: &[FileFilter],
    ) -> Result<(Vec<RecordBatch>, ScanReport)> {
        let mut report = ScanReport::default();
        let mut batches = Vec::new();
        for file in snapshot.files.values() {
            report.files += 1;
            if !filters.iter().all(|f| f.might_match(file)) {
                report.files_pruned += 1;
                continue;
            }
            for batch in self.read_file(file, projection, filters).await? {
                report.rows += batch.num_rows() as u64;
                batches.push(batch);
            }
        }
        Ok((batches, report))
    }

    /// The live rows of one data file. Without deleted rows, `filters` also
    /// skip blocks inside the file; with them, every block is read so that
    /// row positions line up with the deletion vector.
    pub async fn read_file(
        &self,
        file: &DataFile,
        projection: Option<&[usize]>,
        filters: &[FileFilter],
    ) -> Result<Vec<RecordBatch>> {
        let columns = |schema: &Schema| -> Vec<usize> {
            match projection {
                Some(p) => p.to_vec(),
                None => (0..schema.fields().len()).collect(),
            }
        };
        let predicates = |schema: &Schema| -> Vec<ColumnPredicate> {
            match file.deleted.is_empty() {
                true => block_predicates(schema, filters),
                false => vec![],
            }
        };
        let needed = |schema: &Schema| {
            let mut needed = columns(schema);
            needed.extend(predicates(schema).iter().map(|p| p.column));
            needed
        };
        let zyr = self.open_data_file(file, &needed).await?;
        let schema = zyr.schema();
        let options = ScanOptions {
            projection: Some(columns(&schema)),
            predicates: predicates(&schema),
            filter_mode: FilterMode::ZoneMapsOnly,
            ..ScanOptions::default()
        };
        let scan = zyr.scan(options)?;
        let mut batches = Vec::new();
        let mut position = 0u64;
        for batch in scan {
            let batch = batch?;
            let len = batch.num_rows() as u64;
            let batch = without_deleted(batch, &file.deleted, position)?;
            position += len;
            if batch.num_rows() > 0 {
                batches.push(batch);
            }
        }
        Ok(batches)
    }

    /// A data file's path in the store.
    pub fn data_path(&self, relative: &str) -> Path {
        join_relative(self.root(), relative)
    }

    /// Starts a write on the latest version.
    pub async fn begin(&self) -> Result<LakeWrite<'_>> {
        Ok(self.begin_at(self.latest().await?))
    }

    /// Starts a write on `base` (a version read earlier).
    pub fn begin_at(&self, base: Snapshot) -> LakeWrite<'_> {
        LakeWrite {
            table: self,
            base,
            actions: Vec::new(),
        }
    }
}

/// One transaction's changes to a lake table, committed together. Data
/// files are written as the transaction goes; if it never commits (or
/// fails on a conflict) they stay unreferenced until VACUUM removes them.
pub struct LakeWrite<'t> {
    table: &'t LakeTable,
    base: Snapshot,
    actions: Vec<Action>,
}

impl LakeWrite<'_> {
    /// The version this write reads.
    pub fn base(&self) -> &Snapshot {
        &self.base
    }

    /// Adds `batches` as one new data file.
    pub async fn append(&mut self, batches: &[RecordBatch]) -> Result<()> {
        if batches.iter().all(|b| b.num_rows() == 0) {
            return Ok(());
        }
        let limit = self.base.metadata.inline_max_bytes();
        let file = self.table.write_data_file(batches, limit).await?;
        self.actions.push(Action::Add(file));
        Ok(())
    }

    /// Deletes the rows of the base version for which `mask` is true,
    /// reading only files that `filters` cannot rule out, and returns them
    /// (an UPDATE appends their new versions). Recorded as deletion vectors;
    /// no file is rewritten.
    pub async fn delete_where(
        &mut self,
        filters: &[FileFilter],
        mask: RowMask<'_>,
    ) -> Result<Vec<RecordBatch>> {
        let mut deleted_rows = Vec::new();
        for file in self.base.files.values() {
            if !filters.iter().all(|f| f.might_match(file)) {
                continue;
            }
            let (positions, rows) = matching_rows(self.table, file, mask).await?;
            if !positions.is_empty() {
                self.actions.push(Action::DeleteRows(DeletedRows {
                    path: file.path.clone(),
                    rows: RowSet::from_positions(positions),
                }));
                deleted_rows.extend(rows);
            }
        }
        Ok(deleted_rows)
    }

    /// Adds an action prepared elsewhere (OPTIMIZE's removes, say).
    pub fn push(&mut self, action: Action) {
        self.actions.push(action);
    }

    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Commits every change as one version (see [`LakeTable::commit`]).
    pub async fn commit(self, operation: &str) -> Result<Committed> {
        self.commit_with(operation, CommitOptions::default()).await
    }

    pub(crate) async fn commit_with(
        self,
        operation: &str,
        options: CommitOptions,
    ) -> Result<Committed> {
        self.table
            .commit_with(&self.base, operation, self.actions, options)
            .await
    }

    /// Commits changes that keep the table's rows (OPTIMIZE, clustering):
    /// the change feed skips them.
    pub(crate) async fn commit_rearrangement(self, operation: &str) -> Result<Committed> {
        let options = CommitOptions {
            data_change: false,
            ..CommitOptions::default()
        };
        self.commit_with(operation, options).await
    }
}

/// Positions (in file order) of the live rows of `file` that `mask` picks,
/// and those rows.
async fn matching_rows(
    table: &LakeTable,
    file: &DataFile,
    mask: RowMask<'_>,
) -> Result<(Vec<u64>, Vec<RecordBatch>)> {
    let all = |schema: &Schema| (0..schema.fields().len()).collect();
    let scan = table
        .open_data_file(file, &all)
        .await?
        .scan(ScanOptions::default())?;
    let (mut positions, mut rows) = (Vec::new(), Vec::new());
    let mut start = 0u64;
    for batch in scan {
        let batch = batch?;
        let picked = mask(&batch)?;
        let mut keep = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let position = start + i as u64;
            let hit = picked.is_valid(i) && picked.value(i) && !file.deleted.contains(position);
            if hit {
                positions.push(position);
            }
            keep.push(hit);
        }
        start += batch.num_rows() as u64;
        if keep.iter().any(|k| *k) {
            rows.push(filter(&batch, keep)?);
        }
    }
    Ok((positions, rows))
}

/// `batch` (rows `first_position..` of its file) without the deleted rows.
fn without_deleted(
    batch: RecordBatch,
    deleted: &RowSet,
    first_position: u64,
) -> Result<RecordBatch> {
    let end = first_position + batch.num_rows() as u64;
    let any_deleted = deleted
        .ranges()
        .iter()
        .any(|&(s, e)| s < end && first_position < e);
    if !any_deleted {
        return Ok(batch);
    }
    let keep = (first_position..end)
        .map(|p| !deleted.contains(p))
        .collect();
    filter(&batch, keep)
}

fn filter(batch: &RecordBatch, keep: Vec<bool>) -> Result<RecordBatch> {
    filter_record_batch(batch, &BooleanArray::from(keep))
        .map_err(|e| ZyronError::internal(format!("filtering a lake batch: {e}")))
}

/// `filters` as the file reader's predicates, for columns the file has.
fn block_predicates(schema: &Schema, filters: &[FileFilter]) -> Vec<ColumnPredicate> {
    filters
        .iter()
        .filter_map(|f| {
            let column = schema.index_of(&f.column).ok()?;
            Some(ColumnPredicate {
                column,
                op: f.op.clone(),
            })
        })
        .collect()
}

/// Whole-file zone maps of every top-level column, by name.
fn file_stats(schema: &Schema, file: &ZyrFile) -> Result<BTreeMap<String, ColumnStats>> {
    let mut stats = BTreeMap::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let zone = file.column_statistics(i)?;
        stats.insert(field.name().clone(), column_stats(&zone));
    }
    Ok(stats)
}

fn column_stats(zone: &ZoneMap) -> ColumnStats {
    let range = match &zone.stat {
        Stat::None => StatRange::Unknown,
        Stat::Int { min, max } => StatRange::Int {
            min: *min,
            max: *max,
        },
        // JSON has no spelling for an infinity: such a file is not pruned
        // by this column's values.
        Stat::Float { min, max, .. } if !min.is_finite() || !max.is_finite() => StatRange::Unknown,
        Stat::Float { min, max, has_nan } => StatRange::Float {
            min: *min,
            max: *max,
            has_nan: *has_nan,
        },
        Stat::Bytes { min, max, exact } => StatRange::Bytes {
            min: hex(min),
            max: hex(max),
            exact: *exact,
        },
    };
    ColumnStats {
        values: zone.values,
        nulls: zone.nulls,
        range,
    }
}

/// The zone-map statistic a [`StatRange`] records (`Stat::None` when unknown).
pub fn stat_of(range: &StatRange) -> Stat {
    match range {
        StatRange::Unknown => Stat::None,
        StatRange::Int { min, max } => Stat::Int {
            min: *min,
            max: *max,
        },
        StatRange::Float { min, max, has_nan } => Stat::Float {
            min: *min,
            max: *max,
            has_nan: *has_nan,
        },
        StatRange::Bytes { min, max, exact } => match (unhex(min), unhex(max)) {
            (Some(min), Some(max)) => Stat::Bytes {
                min,
                max,
                exact: *exact,
            },
            _ => Stat::None,
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

//! `LakeScanExec`: the physical scan of one lake snapshot. The files left
//! after pruning by the log's zone maps are split among partitions and read
//! one at a time as the query pulls rows (a file's deletion vector applied),
//! and the planner gets row counts, null counts, min and max from the same
//! zone maps: `SELECT count(*)` of a table with no pushed-down filter is
//! answered without opening a file.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;
use zyron_format::ZoneMap;
use zyron_lake::data::stat_of;
use zyron_lake::log::DataFile;
use zyron_lake::{FileFilter, LakeTable, Snapshot};

use crate::heap::to_df;
use crate::zyr::{column_statistics, precision};

/// What to scan: a snapshot's files that `filters` cannot rule out.
pub struct ScanRequest<'a> {
    pub snapshot: &'a Snapshot,
    /// Column indices of the table; `None` for all.
    pub projection: Option<Vec<usize>>,
    /// The table's schema as DataFusion sees it (every column nullable).
    pub table_schema: &'a SchemaRef,
    pub filters: Vec<FileFilter>,
    pub target_partitions: usize,
}

#[derive(Debug)]
pub struct LakeScanExec {
    table: LakeTable,
    version: u64,
    /// The files each partition reads, in order.
    partitions: Vec<Vec<DataFile>>,
    files_pruned: usize,
    projection: Option<Vec<usize>>,
    filters: Vec<FileFilter>,
    /// The projected schema the scan produces.
    schema: SchemaRef,
    statistics: Arc<Statistics>,
    properties: Arc<PlanProperties>,
}

impl LakeScanExec {
    pub fn new(table: LakeTable, request: ScanRequest<'_>) -> Result<LakeScanExec> {
        let schema = match &request.projection {
            Some(p) => Arc::new(request.table_schema.project(p)?),
            None => request.table_schema.clone(),
        };
        let kept: Vec<&DataFile> = request
            .snapshot
            .files
            .values()
            .filter(|file| request.filters.iter().all(|f| f.might_match(file)))
            .collect();
        let files_pruned = request.snapshot.files.len() - kept.len();
        let statistics = statistics(&kept, &request, &schema);
        let mut partitions =
            vec![Vec::new(); request.target_partitions.clamp(1, kept.len().max(1))];
        for (i, file) in kept.into_iter().enumerate() {
            let n = partitions.len();
            partitions[i % n].push(file.clone());
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(LakeScanExec {
            table,
            version: request.snapshot.version,
            partitions,
            files_pruned,
            projection: request.projection,
            filters: request.filters,
            schema,
            statistics: Arc::new(statistics),
            properties: Arc::new(properties),
        })
    }

    /// Files the scan reads (after pruning).
    pub fn files(&self) -> usize {
        self.partitions.iter().map(Vec::len).sum()
    }

    /// Files ruled out by their zone maps without a request to storage.
    pub fn files_pruned(&self) -> usize {
        self.files_pruned
    }
}

/// Row count and per-column statistics of the files a scan reads. Exact
/// only when the scan returns exactly the rows the log describes: no filter
/// (which could also skip blocks inside a file) and, for column values, no
/// deleted rows (a zone map still counts them).
fn statistics(files: &[&DataFile], request: &ScanRequest<'_>, schema: &SchemaRef) -> Statistics {
    let unfiltered = request.filters.is_empty();
    let no_deletes = files.iter().all(|f| f.deleted.is_empty());
    let rows: u64 = files.iter().map(|f| f.live_rows()).sum();
    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let columns = schema
        .fields()
        .iter()
        .map(|field| match merged_zone_map(files, field.name()) {
            Some(zone) => {
                column_statistics(Some(&zone), field.data_type(), unfiltered && no_deletes)
            }
            None => ColumnStatistics::new_unknown(),
        })
        .collect();
    Statistics {
        num_rows: precision(rows as usize, unfiltered),
        total_byte_size: Precision::Inexact(bytes as usize),
        column_statistics: columns,
    }
}

/// The column's zone map over all `files`; `None` when a file has no
/// statistics for it or an unknown range over non-null values.
fn merged_zone_map(files: &[&DataFile], column: &str) -> Option<ZoneMap> {
    let mut merged: Option<ZoneMap> = None;
    for file in files {
        // A file whose values have no known range makes the merged range unknown too
        // (ZoneMap::merge), while its counts still add up.
        let stats = file.stats.get(column)?;
        let zone = ZoneMap {
            values: stats.values,
            nulls: stats.nulls,
            stat: stat_of(&stats.range),
        };
        merged = Some(match merged {
            None => zone,
            Some(m) => m.merge(&zone),
        });
    }
    merged
}

impl DisplayAs for LakeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "LakeScanExec: version={}, files={}, pruned={}, projection={:?}, filters={}",
            self.version,
            self.files(),
            self.files_pruned,
            self.projection,
            self.filters.len()
        )
    }
}

impl ExecutionPlan for LakeScanExec {
    fn name(&self) -> &str {
        "LakeScanExec"
    }
    crate::leaf_exec::leaf_exec_methods!();

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let files = self.partitions.get(partition).cloned().unwrap_or_default();
        let (table, projection, filters, schema) = (
            self.table.clone(),
            self.projection.clone(),
            self.filters.clone(),
            self.schema.clone(),
        );
        let batches = futures::stream::iter(files)
            .then(move |file| {
                let (table, projection, filters, schema) = (
                    table.clone(),
                    projection.clone(),
                    filters.clone(),
                    schema.clone(),
                );
                async move { read(&table, &file, projection.as_deref(), &filters, &schema).await }
            })
            .flat_map(futures::stream::iter);
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batches,
        )))
    }

    crate::leaf_exec::whole_scan_statistics!();
}

/// One file's live rows, in the scan's schema (or the error, as one item).
async fn read(
    table: &LakeTable,
    file: &DataFile,
    projection: Option<&[usize]>,
    filters: &[FileFilter],
    schema: &SchemaRef,
) -> Vec<Result<RecordBatch>> {
    match table.read_file(file, projection, filters).await {
        Ok(batches) => batches.iter().map(|b| super::conform(schema, b)).collect(),
        Err(e) => vec![Err(to_df(e))],
    }
}

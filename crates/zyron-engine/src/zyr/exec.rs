//! `ZyrScanExec`: the physical scan of `.zyr` files, one partition per span of their vectors.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, Statistics};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, RecordOutput,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use zyron_format::{
    ColumnPredicate, FilterMode, Scan, ScanMetrics, ScanOptions, VectorPos, ZyrFile,
};

/// The part of one file that one partition reads.
#[derive(Clone, Debug)]
pub struct FileSpan {
    pub file: usize,
    pub span: Range<VectorPos>,
}

#[derive(Debug)]
pub struct ZyrScanExec {
    files: Vec<Arc<ZyrFile>>,
    projection: Vec<usize>,
    predicates: Vec<ColumnPredicate>,
    filter_mode: FilterMode,
    partitions: Vec<Vec<FileSpan>>,
    schema: SchemaRef,
    statistics: Arc<Statistics>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// Whether `schema` has strings as `Utf8View` (see `ScanOptions::string_views`).
    string_views: bool,
}

impl ZyrScanExec {
    pub fn new(
        files: Vec<Arc<ZyrFile>>,
        projection: Vec<usize>,
        predicates: Vec<ColumnPredicate>,
        filter_mode: FilterMode,
        partitions: Vec<Vec<FileSpan>>,
        schema: SchemaRef,
        statistics: Statistics,
    ) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            files,
            projection,
            predicates,
            filter_mode,
            partitions,
            schema,
            statistics: Arc::new(statistics),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
            string_views: false,
        }
    }

    /// Returns strings as `Utf8View`; `schema` must say so.
    pub fn with_string_views(mut self, string_views: bool) -> Self {
        self.string_views = string_views;
        self
    }

    pub fn predicates(&self) -> &[ColumnPredicate] {
        &self.predicates
    }
}

impl DisplayAs for ZyrScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ZyrScanExec: files={}, projection={:?}, predicates={}, filter={:?}",
            self.files.len(),
            self.projection,
            self.predicates.len(),
            self.filter_mode
        )
    }
}

impl ExecutionPlan for ZyrScanExec {
    fn name(&self) -> &str {
        "ZyrScanExec"
    }
    crate::leaf_exec::leaf_exec_methods!();

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let ranges = self.partitions.get(partition).cloned().unwrap_or_default();
        let files = self.files.clone();
        let options = ScanOptions {
            projection: Some(self.projection.clone()),
            predicates: self.predicates.clone(),
            filter_mode: self.filter_mode,
            verify_checksums: true,
            batch_rows: context.session_config().batch_size(),
            string_views: self.string_views,
        };
        let scans = ranges
            .into_iter()
            .map(move |r| -> Result<zyron_format::Scan> {
                let scan = files[r.file].scan(options.clone()).map_err(format_error)?;
                Ok(scan.with_span(r.span))
            });
        let batches = MeteredBatches {
            scans,
            current: None,
            metrics: PartitionMetrics::new(&self.metrics, partition),
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    crate::leaf_exec::whole_scan_statistics!();
}

/// What EXPLAIN ANALYZE shows of the reader's work, beyond rows and time: how much the zone
/// maps and bloom filters pruned, and how often predicates ran on encoded data.
const SCAN_COUNTERS: [(&str, fn(&ScanMetrics) -> u64); 7] = [
    ("blocks", |m| m.blocks),
    ("blocks_pruned", |m| m.blocks_skipped),
    ("vectors", |m| m.vectors),
    ("vectors_pruned", |m| m.vectors_skipped),
    ("vectors_matched_by_zone_maps", |m| {
        m.vectors_matched_by_zone_maps
    }),
    ("bloom_filter_prunes", |m| m.bloom_skips),
    ("batches_filtered_encoded", |m| m.batches_filtered_encoded),
];

/// One partition's metrics.
struct PartitionMetrics {
    baseline: BaselineMetrics,
    counters: Vec<Count>,
}

impl PartitionMetrics {
    fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            baseline: BaselineMetrics::new(set, partition),
            counters: SCAN_COUNTERS
                .iter()
                .map(|(name, _)| MetricBuilder::new(set).counter(*name, partition))
                .collect(),
        }
    }

    fn add(&self, scan: &ScanMetrics) {
        for (counter, (_, value)) in self.counters.iter().zip(SCAN_COUNTERS) {
            counter.add(value(scan) as usize);
        }
    }
}

/// The batches of a partition's scans, one scan after another, counted into the plan's
/// metrics as each scan ends (or is dropped part-way, under a LIMIT).
struct MeteredBatches<I> {
    scans: I,
    current: Option<Scan>,
    metrics: PartitionMetrics,
}

impl<I: Iterator<Item = Result<Scan>>> Iterator for MeteredBatches<I> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let elapsed_compute = self.metrics.baseline.elapsed_compute().clone();
        let _timer = elapsed_compute.timer();
        loop {
            if let Some(scan) = &mut self.current {
                match scan.next() {
                    Some(Ok(batch)) => {
                        return Some(Ok(batch.record_output(&self.metrics.baseline)));
                    }
                    Some(Err(e)) => return Some(Err(format_error(e))),
                    None => self.finish_scan(),
                }
            }
            match self.scans.next() {
                Some(Ok(scan)) => self.current = Some(scan),
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    self.metrics.baseline.done();
                    return None;
                }
            }
        }
    }
}

impl<I> MeteredBatches<I> {
    fn finish_scan(&mut self) {
        if let Some(scan) = self.current.take() {
            self.metrics.add(scan.metrics());
        }
    }
}

impl<I> Drop for MeteredBatches<I> {
    fn drop(&mut self) {
        self.finish_scan();
    }
}

pub fn format_error(e: zyron_format::FormatError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

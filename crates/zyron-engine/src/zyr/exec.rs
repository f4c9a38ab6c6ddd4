//! `ZyrScanExec`: the physical scan of `.zyr` files, one partition per group of blocks.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Result, Statistics};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use zyron_format::{ColumnPredicate, FilterMode, ScanOptions, ZyrFile};

/// The blocks one partition reads from one file.
#[derive(Clone, Debug)]
pub struct BlockRange {
    pub file: usize,
    pub blocks: Range<usize>,
}

#[derive(Debug)]
pub struct ZyrScanExec {
    files: Vec<Arc<ZyrFile>>,
    projection: Vec<usize>,
    predicates: Vec<ColumnPredicate>,
    filter_mode: FilterMode,
    partitions: Vec<Vec<BlockRange>>,
    schema: SchemaRef,
    statistics: Arc<Statistics>,
    properties: Arc<PlanProperties>,
}

impl ZyrScanExec {
    pub fn new(
        files: Vec<Arc<ZyrFile>>,
        projection: Vec<usize>,
        predicates: Vec<ColumnPredicate>,
        filter_mode: FilterMode,
        partitions: Vec<Vec<BlockRange>>,
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
        }
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
        };
        let scans = ranges
            .into_iter()
            .map(move |r| -> Result<zyron_format::Scan> {
                let scan = files[r.file].scan(options.clone()).map_err(format_error)?;
                Ok(scan.with_blocks(r.blocks))
            });
        let batches = scans.flat_map(|scan| -> Box<dyn Iterator<Item = Result<_>> + Send> {
            match scan {
                Ok(scan) => Box::new(scan.map(|b| b.map_err(format_error))),
                Err(e) => Box::new(std::iter::once(Err(e))),
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        )))
    }

    crate::leaf_exec::whole_scan_statistics!();
}

pub fn format_error(e: zyron_format::FormatError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

//! Scanning a heap table at a snapshot: whole pages, or the rows the
//! primary-key index finds for key equalities and ranges.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::{Result, ScalarValue, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use zyron_heap::Store;
use zyron_heap::table::{HeapTable, PAGE_SLOTS};
use zyron_txn::Snapshot;

use super::{SessionTxn, committed_snapshot, to_df};
use crate::params;

/// Pages decoded into one batch: 8 pages of 1,024 slots.
const PAGES_PER_BATCH: usize = 8;

/// Keeps the versions a scan reads from garbage collection while it runs,
/// even after its statement's transaction ended (a streamed result).
struct Pin {
    store: Arc<Store>,
    read_ts: u64,
}

impl Pin {
    fn new(store: Arc<Store>, read_ts: u64) -> Arc<Self> {
        store.txns().pin(read_ts);
        Arc::new(Pin { store, read_ts })
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.store.txns().unpin(self.read_ts);
    }
}

#[derive(Clone, Debug)]
enum Work {
    Pages(Range<usize>),
    Slots(Arc<Vec<u64>>),
}

/// Where a scan reads from, and what it needs to read there again at a later
/// snapshot (a kept physical plan runs its scans again, see [`HeapScanExec::rebound`]).
#[derive(Clone)]
pub struct ScanSource {
    pub table: Arc<HeapTable>,
    pub store: Arc<Store>,
    /// The session whose statement's snapshot the scan reads at; `None` reads
    /// everything committed.
    pub session: Option<Arc<SessionTxn>>,
    /// The filters DataFusion pushed down; they may read parameters.
    pub filters: Vec<Expr>,
}

impl ScanSource {
    fn snapshot(&self) -> Snapshot {
        match &self.session {
            Some(session) => session.snapshot(),
            None => committed_snapshot(&self.store),
        }
    }

    /// The slots the index names for the filters with their parameters' current values.
    fn key_slots(&self, snapshot: &Snapshot) -> Result<Option<Vec<u64>>> {
        if !self.filters.iter().any(params::reads_params) {
            return key_lookup(&self.table, snapshot, &self.filters);
        }
        let bound = self
            .filters
            .iter()
            .map(params::with_current_values)
            .collect::<Result<Vec<_>>>()?;
        key_lookup(&self.table, snapshot, &bound)
    }
}

pub struct HeapScanExec {
    source: ScanSource,
    snapshot: Snapshot,
    projection: Option<Vec<usize>>,
    partitions: Vec<Work>,
    schema: SchemaRef,
    /// `None` in a kept plan's copy, which never runs (it would hold back
    /// garbage collection for as long as the plan is kept).
    pin: Option<Arc<Pin>>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for HeapScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapScanExec")
            .field("table", &self.source.table.def().name)
            .finish()
    }
}

impl HeapScanExec {
    /// A scan at the snapshot of the source's statement, through the index
    /// when the filters pin the key.
    pub fn new(
        source: ScanSource,
        projection: Option<Vec<usize>>,
        target_partitions: usize,
    ) -> Result<Self> {
        let snapshot = source.snapshot();
        let slots = source.key_slots(&snapshot)?;
        let full = source.table.codec().nullable_schema().clone();
        let schema = match &projection {
            Some(p) => Arc::new(full.project(p)?),
            None => full,
        };
        let pages = source.table.page_count();
        let parts = match slots {
            Some(_) => 1,
            None => target_partitions.clamp(1, pages.max(1)),
        };
        let partitions = shape_work(slots, pages, parts);
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(partitions.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            pin: Some(Pin::new(source.store.clone(), snapshot.read_ts)),
            source,
            snapshot,
            projection,
            partitions,
            schema,
            properties: Arc::new(properties),
        })
    }

    /// The same scan for a new execution of a kept plan: at the snapshot of the
    /// statement now running, with the index looked up for the parameters' values
    /// now, in as many partitions as before, so that the plan above it, made for
    /// that many, still holds (it keeps its properties).
    pub fn rebound(&self) -> Result<Self> {
        let snapshot = self.source.snapshot();
        let slots = self.source.key_slots(&snapshot)?;
        let pages = self.source.table.page_count();
        Ok(Self {
            pin: Some(Pin::new(self.source.store.clone(), snapshot.read_ts)),
            source: self.source.clone(),
            snapshot,
            projection: self.projection.clone(),
            partitions: shape_work(slots, pages, self.partitions.len()),
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        })
    }

    /// This scan without its hold on garbage collection, to be kept (not run).
    pub fn unpinned(&self) -> Self {
        Self {
            source: self.source.clone(),
            snapshot: self.snapshot,
            projection: self.projection.clone(),
            partitions: self.partitions.clone(),
            schema: self.schema.clone(),
            pin: None,
            properties: self.properties.clone(),
        }
    }
}

/// The work of `parts` partitions: the index's slots in the first (the others
/// empty), or the pages split evenly.
fn shape_work(slots: Option<Vec<u64>>, pages: usize, parts: usize) -> Vec<Work> {
    assert!(parts >= 1, "a scan has at least one partition");
    match slots {
        Some(slots) => std::iter::once(Work::Slots(Arc::new(slots)))
            .chain((1..parts).map(|_| Work::Pages(0..0)))
            .collect(),
        None => split_pages(pages, parts),
    }
}

/// `pages` split into exactly `parts` ranges, as even as can be (some empty
/// when there are fewer pages than parts).
fn split_pages(pages: usize, parts: usize) -> Vec<Work> {
    let per = pages.div_ceil(parts).max(1);
    (0..parts)
        .map(|i| Work::Pages((i * per).min(pages)..((i + 1) * per).min(pages)))
        .collect()
}

impl DisplayAs for HeapScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let how = match self.partitions.first() {
            Some(Work::Slots(slots)) => format!("index lookup of {} keys", slots.len()),
            _ => format!("{} pages", self.source.table.page_count()),
        };
        write!(
            f,
            "HeapScanExec: table={}, {how}, projection={:?}",
            self.source.table.def().name,
            self.projection
        )
    }
}

impl ExecutionPlan for HeapScanExec {
    fn name(&self) -> &str {
        "HeapScanExec"
    }
    crate::leaf_exec::leaf_exec_methods!();

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let work = self
            .partitions
            .get(partition)
            .cloned()
            .unwrap_or(Work::Pages(0..0));
        let Some(pin) = self.pin.clone() else {
            return datafusion::common::internal_err!(
                "a kept plan's scan of {} ran without being rebound",
                self.source.table.def().name
            );
        };
        let (table, snapshot, projection) = (
            self.source.table.clone(),
            self.snapshot,
            self.projection.clone(),
        );
        let batches: Box<dyn Iterator<Item = Result<RecordBatch>> + Send> = match work {
            Work::Pages(pages) => {
                Box::new(pages.clone().step_by(PAGES_PER_BATCH).map(move |start| {
                    let _pinned = &pin;
                    let end = (start + PAGES_PER_BATCH).min(pages.end);
                    table
                        .scan_pages(&snapshot, start..end, projection.as_deref())
                        .map(|(_, b)| b)
                        .map_err(to_df)
                }))
            }
            Work::Slots(slots) => Box::new(std::iter::once_with(move || {
                let _pinned = &pin;
                table
                    .fetch(&snapshot, &slots, projection.as_deref())
                    .map(|(_, b)| b)
                    .map_err(to_df)
            })),
        };
        let schema = self.schema.clone();
        let batches = batches
            .filter(|b| b.as_ref().map_or(true, |b| b.num_rows() > 0))
            .map(move |b| b.and_then(|b| Ok(b.with_schema(schema.clone())?)));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        )))
    }

    /// At most how many rows the scan yields (slots the index named, or the slots of the
    /// pages scanned): an upper bound, as some may hold no version the snapshot sees. With
    /// it the planner keeps a scan of a few keys in one partition instead of spreading
    /// its rows over threads (see the engine's `use_row_number_estimates_...` setting).
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        let rows = |work: &Work| match work {
            Work::Slots(slots) => slots.len(),
            Work::Pages(pages) => pages.len() * PAGE_SLOTS,
        };
        let at_most = match partition {
            Some(p) => self.partitions.get(p).map_or(0, rows),
            None => self.partitions.iter().map(rows).sum(),
        };
        let mut statistics = Statistics::new_unknown(&self.schema);
        statistics.num_rows = Precision::Inexact(at_most);
        Ok(Arc::new(statistics))
    }
}

/// The slots the primary-key index names for `filters`, if they pin the key:
/// an equality (or IN list) on every key column, or a range on a one-column key.
/// `None` means the filters do not narrow the scan, or the index does not serve
/// `snapshot` (it is newer than the snapshot).
pub fn key_lookup(
    table: &HeapTable,
    snapshot: &Snapshot,
    filters: &[Expr],
) -> Result<Option<Vec<u64>>> {
    let Some(codec) = table.key_codec() else {
        return Ok(None);
    };
    if !table.key_index_serves(snapshot) {
        return Ok(None);
    }
    let schema = table.codec().schema();
    let columns = codec.key_columns();
    let conjuncts: Vec<&Expr> = filters.iter().flat_map(|f| split_conjunction(f)).collect();
    // Equality on every key column (IN lists multiply out).
    let mut choices: Vec<Vec<ArrayRef>> = Vec::new();
    for &c in columns {
        let name = schema.field(c).name();
        let data_type = schema.field(c).data_type();
        match conjuncts.iter().find_map(|e| equal_values(e, name)) {
            Some(values) => choices.push(
                values
                    .iter()
                    .filter_map(|v| literal_array(v, data_type))
                    .collect(),
            ),
            None => return range_lookup(table, &conjuncts, columns),
        }
    }
    let mut keys: Vec<Vec<ArrayRef>> = vec![Vec::new()];
    for options in choices {
        keys = keys
            .into_iter()
            .flat_map(|prefix| {
                options
                    .iter()
                    .map(move |v| [prefix.clone(), vec![v.clone()]].concat())
            })
            .collect();
        if keys.len() > 10_000 {
            return Ok(None);
        }
    }
    let mut slots: Vec<u64> = keys
        .iter()
        .filter_map(|k| table.slot_for_key(&codec.key_of(k)))
        .collect();
    slots.sort_unstable();
    slots.dedup();
    Ok(Some(slots))
}

/// A `>=`/`>`/`<`/`<=`/BETWEEN range on a one-column integer key.
fn range_lookup(
    table: &HeapTable,
    conjuncts: &[&Expr],
    columns: &[usize],
) -> Result<Option<Vec<u64>>> {
    let [c] = columns else { return Ok(None) };
    let schema = table.codec().schema();
    let (name, data_type) = (schema.field(*c).name(), schema.field(*c).data_type());
    if !data_type.is_integer() {
        return Ok(None);
    }
    let codec = table.key_codec().expect("caller checked");
    let (mut low, mut high): (Option<i128>, Option<i128>) = (None, None);
    for e in conjuncts {
        if let Some((op, v)) = comparison(e, name) {
            let Some(v) = scalar_to_i128(&v) else {
                continue;
            };
            match op {
                Operator::Gt => low = Some(low.map_or(v + 1, |l| l.max(v + 1))),
                Operator::GtEq => low = Some(low.map_or(v, |l| l.max(v))),
                Operator::Lt => high = Some(high.map_or(v, |h| h.min(v))),
                Operator::LtEq => high = Some(high.map_or(v + 1, |h| h.min(v + 1))),
                _ => {}
            }
        }
    }
    if low.is_none() && high.is_none() {
        return Ok(None);
    }
    let bound = |v: i128| -> Result<Option<Vec<u8>>> {
        let scalar = ScalarValue::Decimal128(Some(v), 38, 0);
        match cast(&scalar.to_array()?, data_type) {
            Ok(array) if !array.is_null(0) => Ok(Some(codec.key_of(&[array]))),
            _ => Ok(None),
        }
    };
    let low_key = match low {
        Some(v) => bound(v)?.unwrap_or_default(),
        None => Vec::new(),
    };
    let high_key = match high {
        Some(v) => bound(v)?,
        None => None,
    };
    Ok(Some(table.slots_in_range(&low_key, high_key.as_deref())))
}

fn column_name(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(c) => column_name(&c.expr),
        _ => None,
    }
}

fn literal(expr: &Expr) -> Option<ScalarValue> {
    match expr {
        Expr::Literal(v, _) if !v.is_null() => Some(v.clone()),
        Expr::Cast(c) => literal(&c.expr).and_then(|v| v.cast_to(c.field.data_type()).ok()),
        _ => None,
    }
}

/// Values `name` must equal: `name = v`, `v = name`, or `name IN (...)`.
fn equal_values(expr: &Expr, name: &str) -> Option<Vec<ScalarValue>> {
    match comparison(expr, name) {
        Some((Operator::Eq, v)) => Some(vec![v]),
        _ => match expr {
            Expr::InList(list) if !list.negated && column_name(&list.expr) == Some(name) => {
                list.list.iter().map(literal).collect()
            }
            _ => None,
        },
    }
}

/// `name op literal`, normalised so the column is on the left.
fn comparison(expr: &Expr, name: &str) -> Option<(Operator, ScalarValue)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    if column_name(left) == Some(name) {
        return literal(right).map(|v| (*op, v));
    }
    if column_name(right) == Some(name) {
        let swapped = op.swap()?;
        return literal(left).map(|v| (swapped, v));
    }
    None
}

/// An integer literal as i128; other literals (1.5) do not bound an integer key exactly.
fn scalar_to_i128(v: &ScalarValue) -> Option<i128> {
    if !v.data_type().is_integer() {
        return None;
    }
    let as_decimal = v
        .cast_to(&datafusion::arrow::datatypes::DataType::Decimal128(38, 0))
        .ok()?;
    match as_decimal {
        ScalarValue::Decimal128(Some(v), _, _) => Some(v),
        _ => None,
    }
}

/// A one-row array of `v` as the column's type; `None` for a value that
/// does not convert (it can equal no key, so it finds no row).
fn literal_array(
    v: &ScalarValue,
    data_type: &datafusion::arrow::datatypes::DataType,
) -> Option<ArrayRef> {
    let array = cast(&v.to_array().ok()?, data_type).ok()?;
    (!array.is_null(0)).then_some(array)
}

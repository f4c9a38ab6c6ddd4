//! SQL access to `.zyr` files: a [`ZyrTable`] provider with projection and filter pushdown,
//! zone-map and bloom-filter pruning and exact statistics; `CREATE EXTERNAL TABLE ... STORED AS
//! ZYR`; the `read_zyr('path')` table function; and `COPY (query) TO 'file.zyr'`.
//!
//! Filters the reader evaluates exactly (see [`filters`]) are pushed down as *exact*: the scan
//! applies them to every block, on encoded data where the encoding allows, and DataFusion
//! drops its own filter, so a column the query only filters on is never decoded to Arrow.
//! With only inexact filters, whether they run on encoded data is decided per query and per
//! block: the reader keeps evaluating them while they remove most rows and falls back to
//! zone-map pruning with a plain scan once they do not ([`FilterMode::Auto`]), so pushdown
//! never costs more than a plain scan plus one block's worth of filtering.

mod copy;
mod exec;
mod filters;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::catalog::{
    Session, TableFunctionArgs, TableFunctionImpl, TableProvider, TableProviderFactory,
};
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Result, Statistics, plan_err};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{CreateExternalTable, Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::scalar::ScalarValue;
use zyron_format::{ColumnPredicate, FilterMode, Stat, VectorPos, ZyrFile};

pub use copy::{copy_to_zyr, is_zyr_target};
pub use exec::ZyrScanExec;
pub use filters::to_predicates;

use exec::{FileSpan, format_error};

/// The fewest candidate vectors a filtered scan's partition gets (two DataFusion batches).
const MIN_PARTITION_VECTORS: usize = 16;

/// One or more `.zyr` files with one schema, queryable through DataFusion.
#[derive(Debug)]
pub struct ZyrTable {
    files: Vec<Arc<ZyrFile>>,
    /// The files' schema, with `Utf8` as `Utf8View` when `string_views`.
    schema: SchemaRef,
    string_views: bool,
}

impl ZyrTable {
    /// Opens a `.zyr` file, or every `.zyr` file in a directory (in name order), with the
    /// column types as stored.
    pub fn open(location: &str) -> Result<ZyrTable> {
        Self::open_with(location, false)
    }

    /// Opens as a query in `session` reads Parquet: strings as `Utf8View` when the session's
    /// `datafusion.execution.parquet.schema_force_view_types` is on (DataFusion's default),
    /// so dictionary columns are handed out as views into their values, not copied.
    pub fn open_for(location: &str, session: &dyn Session) -> Result<ZyrTable> {
        let views = session
            .config_options()
            .execution
            .parquet
            .schema_force_view_types;
        Self::open_with(location, views)
    }

    fn open_with(location: &str, string_views: bool) -> Result<ZyrTable> {
        let path = PathBuf::from(location.strip_prefix("file://").unwrap_or(location));
        let paths = if path.is_dir() {
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&path)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "zyr"))
                .collect();
            paths.sort();
            paths
        } else {
            vec![path.clone()]
        };
        if paths.is_empty() {
            return plan_err!("no .zyr files in {}", path.display());
        }
        let files = paths
            .iter()
            .map(|p| open_file(p))
            .collect::<Result<Vec<_>>>()?;
        let schema = files[0].schema();
        if let Some((p, _)) = paths
            .iter()
            .zip(&files)
            .find(|(_, f)| f.schema().fields() != schema.fields())
        {
            return plan_err!(
                "{} has a different schema from {}",
                p.display(),
                paths[0].display()
            );
        }
        let schema = match string_views {
            true => Arc::new(zyron_format::lanes::schema_with_string_views(&schema)),
            false => schema,
        };
        Ok(ZyrTable {
            files,
            schema,
            string_views,
        })
    }

    pub fn files(&self) -> &[Arc<ZyrFile>] {
        &self.files
    }

    fn statistics_for(&self, projection: &[usize], exact: bool) -> Result<Statistics> {
        let rows: u64 = self.files.iter().map(|f| f.num_rows()).sum();
        let bytes: u64 = self.files.iter().map(|f| f.file_len()).sum();
        let mut columns = vec![];
        for c in projection {
            let mut merged: Option<zyron_format::ZoneMap> = None;
            for f in &self.files {
                let s = f.column_statistics(*c).map_err(format_error)?;
                merged = Some(match merged {
                    None => s,
                    Some(m) => m.merge(&s),
                });
            }
            let dt = self.schema.field(*c).data_type();
            columns.push(column_statistics(merged.as_ref(), dt, exact));
        }
        Ok(Statistics {
            num_rows: precision(rows as usize, exact),
            total_byte_size: Precision::Inexact(bytes as usize),
            column_statistics: columns,
        })
    }

    /// Splits the files into at most `partitions` partitions of similar work, in file order;
    /// together they cover every vector, so each scan still counts what it prunes. A plain
    /// scan is cut at block boundaries. A filtered one is cut between the vectors that zone
    /// maps leave as candidates, inside a block when that is where they lie, so a selective
    /// range within one block still keeps every partition busy (Parquet's unit of work, the
    /// row group, cannot be split this way).
    fn partitions(
        &self,
        partitions: usize,
        predicates: &[ColumnPredicate],
    ) -> Result<Vec<Vec<FileSpan>>> {
        // Units of work in scan order: (file, the vector it starts at).
        let mut units: Vec<(usize, VectorPos)> = vec![];
        for (file, f) in self.files.iter().enumerate() {
            for block in 0..f.block_count().map_err(format_error)? {
                if predicates.is_empty() {
                    units.push((file, VectorPos::block_start(block)));
                    continue;
                }
                let candidates = f.zone_candidates(predicates, block).map_err(format_error)?;
                let kept = candidates.iter().enumerate().filter(|(_, keep)| **keep);
                units.extend(kept.map(|(vector, _)| (file, VectorPos { block, vector })));
            }
        }
        let per = units
            .len()
            .div_ceil(partitions.max(1))
            .max(match predicates {
                [] => 1,
                // Partitions sharing a block each read and check all of it: not for a few vectors.
                _ => MIN_PARTITION_VECTORS,
            });
        let mut cuts = vec![(0, VectorPos::block_start(0))];
        for pair in units.windows(2).skip(per - 1).step_by(per) {
            let ((file, before), (next_file, next)) = (pair[0], pair[1]);
            // Cut inside a block only between two of its candidates; otherwise at the start
            // of the next candidate's block, so no partition reads a block it need not open.
            let same_block = file == next_file && before.block == next.block;
            let at = if same_block {
                next
            } else {
                VectorPos::block_start(next.block)
            };
            cuts.push((next_file, at));
        }
        cuts.push((self.files.len(), VectorPos::block_start(0)));
        Ok(cuts.windows(2).map(|w| file_spans(w[0], w[1])).collect())
    }
}

/// The spans of each file from `from` up to `to`, both (file, vector) in scan order.
fn file_spans(from: (usize, VectorPos), to: (usize, VectorPos)) -> Vec<FileSpan> {
    let whole_file = VectorPos::block_start(usize::MAX);
    (from.0..=to.0)
        .map(|file| FileSpan {
            file,
            span: (if file == from.0 {
                from.1
            } else {
                VectorPos::block_start(0)
            })..(if file == to.0 { to.1 } else { whole_file }),
        })
        .filter(|s| s.span.start < s.span.end)
        .collect()
}

fn open_file(path: &Path) -> Result<Arc<ZyrFile>> {
    let file = std::fs::File::open(path)
        .map_err(|e| DataFusionError::Plan(format!("cannot open {}: {e}", path.display())))?;
    let zyr = ZyrFile::open(file)
        .map_err(|e| DataFusionError::Plan(format!("{}: {e}", path.display())))?;
    Ok(Arc::new(zyr))
}

/// `value` as exact or as an estimate.
pub(crate) fn precision<T>(value: T, exact: bool) -> Precision<T>
where
    T: std::fmt::Debug + Clone + PartialEq + Eq + PartialOrd,
{
    match exact {
        true => Precision::Exact(value),
        false => Precision::Inexact(value),
    }
}

/// What the planner learns of a column from its zone map (merged over the
/// files a scan reads): null count, min and max; exact when the scan returns
/// exactly the rows the zone map describes.
pub(crate) fn column_statistics(
    zone: Option<&zyron_format::ZoneMap>,
    dt: &DataType,
    exact: bool,
) -> ColumnStatistics {
    let Some(zone) = zone else {
        return ColumnStatistics::new_unknown();
    };
    let (min, max) = stat_bounds(&zone.stat, dt);
    let bound = |v: Option<ScalarValue>| v.map_or(Precision::Absent, |v| precision(v, exact));
    ColumnStatistics {
        null_count: precision(zone.nulls as usize, exact),
        min_value: bound(min),
        max_value: bound(max),
        ..ColumnStatistics::new_unknown()
    }
}

/// Min and max of a column as scalars of its type, when the statistic is exact.
fn stat_bounds(stat: &Stat, dt: &DataType) -> (Option<ScalarValue>, Option<ScalarValue>) {
    let int = |v: i128| -> Option<ScalarValue> {
        Some(match dt {
            DataType::Boolean => ScalarValue::Boolean(Some(v == 1)),
            DataType::Int8 => ScalarValue::Int8(Some(v as i8)),
            DataType::Int16 => ScalarValue::Int16(Some(v as i16)),
            DataType::Int32 => ScalarValue::Int32(Some(v as i32)),
            DataType::Int64 => ScalarValue::Int64(Some(v as i64)),
            DataType::UInt8 => ScalarValue::UInt8(Some(v as u8)),
            DataType::UInt16 => ScalarValue::UInt16(Some(v as u16)),
            DataType::UInt32 => ScalarValue::UInt32(Some(v as u32)),
            DataType::UInt64 => ScalarValue::UInt64(Some(v as u64)),
            DataType::Date32 => ScalarValue::Date32(Some(v as i32)),
            DataType::Decimal128(p, s) => ScalarValue::Decimal128(Some(v), *p, *s),
            DataType::Timestamp(unit, tz) => {
                let (v, tz) = (Some(v as i64), tz.clone());
                match unit {
                    TimeUnit::Second => ScalarValue::TimestampSecond(v, tz),
                    TimeUnit::Millisecond => ScalarValue::TimestampMillisecond(v, tz),
                    TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(v, tz),
                    TimeUnit::Nanosecond => ScalarValue::TimestampNanosecond(v, tz),
                }
            }
            _ => return None,
        })
    };
    match (stat, dt) {
        (Stat::Int { min, max }, _) => (int(*min), int(*max)),
        (
            Stat::Float {
                min,
                max,
                has_nan: false,
            },
            DataType::Float64,
        ) => (
            Some(ScalarValue::Float64(Some(*min))),
            Some(ScalarValue::Float64(Some(*max))),
        ),
        (
            Stat::Float {
                min,
                max,
                has_nan: false,
            },
            DataType::Float32,
        ) => (
            Some(ScalarValue::Float32(Some(*min as f32))),
            Some(ScalarValue::Float32(Some(*max as f32))),
        ),
        (
            Stat::Bytes {
                min,
                max,
                exact: true,
            },
            DataType::Utf8 | DataType::Utf8View,
        ) => {
            let s = |b: &Vec<u8>| String::from_utf8(b.clone()).ok();
            let make = |v: Option<String>| {
                v.map(|v| {
                    if *dt == DataType::Utf8 {
                        ScalarValue::Utf8(Some(v))
                    } else {
                        ScalarValue::Utf8View(Some(v))
                    }
                })
            };
            (make(s(min)), make(s(max)))
        }
        _ => (None, None),
    }
}

#[async_trait]
impl TableProvider for ZyrTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if filters::is_exact(f, &self.schema) {
                    TableProviderFilterPushDown::Exact
                } else if to_predicates(f, &self.schema).is_empty() {
                    TableProviderFilterPushDown::Unsupported
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        self.statistics_for(&(0..self.schema.fields().len()).collect::<Vec<_>>(), true)
            .ok()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let predicates: Vec<_> = filters
            .iter()
            .flat_map(|f| to_predicates(f, &self.schema))
            .collect();
        // DataFusion dropped its filter for exact ones, so they must be applied to every row.
        let filter_mode = if filters.iter().any(|f| filters::is_exact(f, &self.schema)) {
            FilterMode::Pushdown
        } else {
            FilterMode::Auto
        };
        let schema = Arc::new(self.schema.project(&projection)?);
        let statistics = self.statistics_for(&projection, predicates.is_empty())?;
        let partitions = self.partitions(state.config().target_partitions(), &predicates)?;
        Ok(Arc::new(
            ZyrScanExec::new(
                self.files.clone(),
                projection,
                predicates,
                filter_mode,
                partitions,
                schema,
                statistics,
            )
            .with_string_views(self.string_views),
        ))
    }
}

/// `CREATE EXTERNAL TABLE name STORED AS ZYR LOCATION 'path'`.
#[derive(Debug, Default)]
pub struct ZyrTableFactory;

#[async_trait]
impl TableProviderFactory for ZyrTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let [location] = cmd.locations.as_slice() else {
            return plan_err!("a ZYR table needs exactly one LOCATION");
        };
        Ok(Arc::new(ZyrTable::open_for(location, state)?))
    }
}

/// `SELECT ... FROM read_zyr('path')`.
#[derive(Debug, Default)]
pub struct ReadZyr;

impl TableFunctionImpl for ReadZyr {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        match args.exprs() {
            [
                Expr::Literal(
                    ScalarValue::Utf8(Some(path))
                    | ScalarValue::Utf8View(Some(path))
                    | ScalarValue::LargeUtf8(Some(path)),
                    _,
                ),
            ] => Ok(Arc::new(ZyrTable::open_for(path, args.session())?)),
            _ => plan_err!(
                "read_zyr takes one string literal: the path of a .zyr file or of a directory of them"
            ),
        }
    }
}

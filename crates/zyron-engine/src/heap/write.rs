//! Writing heap tables from SQL: INSERT through a `DataSink`, UPDATE and
//! DELETE through the provider's DML hooks, CHECK constraints, and the guard
//! that keeps a DML statement from ever losing its WHERE clause.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{CastOptions, cast_with_options, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, WriteOp};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;
use zyron_common::{SqlState, ZyronError};
use zyron_heap::Transaction;
use zyron_heap::table::HeapTable;

use super::scan::key_lookup;
use super::{SessionTxn, no_transaction, to_df};

/// Compiles a logical expression against a table's columns, type coercion
/// included: a DataFusion session's `create_physical_expr`, or the point
/// statements' own compiler (`point.rs`), which skips the session state copy.
pub type Compile<'a> = &'a (dyn Fn(Expr, &DFSchema) -> Result<Arc<dyn PhysicalExpr>> + Send + Sync);

/// A CHECK constraint, parsed.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: String,
    pub expr: Expr,
}

/// The one-row `count` result DataFusion's DML statements return.
pub fn count_plan(count: u64) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(UInt64Array::from(vec![count]))],
    )?;
    Ok(MemorySourceConfig::try_new_exec(
        &[vec![batch]],
        schema,
        None,
    )?)
}

/// Refuses UPDATE and DELETE shapes whose WHERE clause cannot reach the
/// table's DML hooks intact: DataFusion 55 passes them an empty filter list,
/// which means "every row", when the condition became a join (IN or EXISTS
/// subqueries, UPDATE ... FROM). Returns `false` when the optimizer proved
/// that no row qualifies (the statement then changes nothing).
pub fn guard_dml_input(plan: &LogicalPlan) -> zyron_common::Result<bool> {
    let LogicalPlan::Dml(dml) = plan else {
        return Ok(true);
    };
    if !matches!(dml.op, WriteOp::Update | WriteOp::Delete) {
        return Ok(true);
    }
    let mut scans = 0;
    let mut empty = false;
    let mut unsupported = None;
    dml.input
        .apply(|node| {
            match node {
                LogicalPlan::TableScan(_) => scans += 1,
                LogicalPlan::EmptyRelation(_) => empty = true,
                LogicalPlan::Projection(_)
                | LogicalPlan::Filter(_)
                | LogicalPlan::SubqueryAlias(_) => {}
                other => unsupported = Some(other.display().to_string()),
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(crate::errors::to_zyron_error)?;
    if let Some(node) = unsupported {
        return Err(ZyronError::not_supported(format!(
            "{} with a subquery or join in its WHERE clause is not supported yet ({node})",
            if dml.op == WriteOp::Update {
                "UPDATE"
            } else {
                "DELETE"
            }
        )));
    }
    Ok(!(empty || scans == 0))
}

/// Casts that fail on a value the target type cannot hold (an INTEGER
/// column given 3000000000), as PostgreSQL does, rather than writing NULL.
pub fn strict_cast_options() -> CastOptions<'static> {
    CastOptions {
        safe: false,
        ..Default::default()
    }
}

pub(crate) fn strict_cast(array: &ArrayRef, data_type: &DataType) -> Result<ArrayRef> {
    Ok(cast_with_options(array, data_type, &strict_cast_options())?)
}

/// Makes a batch from a query match the table: its column types and its
/// NOT NULL columns (SQLSTATE 23502 with PostgreSQL's message).
fn conform(table: &HeapTable, batch: &RecordBatch) -> Result<RecordBatch> {
    conform_to(table.codec().schema(), &table.def().name, batch)
}

/// Makes `batch` a batch of `schema`: NOT NULL columns checked (23502,
/// naming `relation`, as PostgreSQL does, since DataFusion sees every
/// column nullable) and types cast strictly. Heap and lake tables share it.
pub(crate) fn conform_to(
    schema: &SchemaRef,
    relation: &str,
    batch: &RecordBatch,
) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(to_df(ZyronError::new(
                SqlState::NOT_NULL_VIOLATION,
                format!(
                    "null value in column \"{}\" of relation \"{relation}\" violates not-null constraint",
                    field.name()
                ),
            )));
        }
        columns.push(if column.data_type() == field.data_type() {
            column.clone()
        } else {
            strict_cast(column, field.data_type())?
        });
    }
    let options =
        datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?)
}

/// Compiled CHECK constraints of one table.
pub struct Checks {
    table: String,
    compiled: Vec<(String, Arc<dyn PhysicalExpr>)>,
}

impl Checks {
    pub fn compile(compile: Compile<'_>, table: &HeapTable, checks: &[Check]) -> Result<Self> {
        let df_schema = DFSchema::try_from(table.codec().schema().as_ref().clone())?;
        let compiled = checks
            .iter()
            .map(|c| Ok((c.name.clone(), compile(c.expr.clone(), &df_schema)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            table: table.def().name.clone(),
            compiled,
        })
    }

    /// A row passes when each check is true or NULL, as in PostgreSQL.
    fn verify(&self, batch: &RecordBatch) -> Result<()> {
        for (name, expr) in &self.compiled {
            let result = expr.evaluate(batch)?.into_array(batch.num_rows())?;
            let result = result.as_boolean();
            if (0..result.len()).any(|r| result.is_valid(r) && !result.value(r)) {
                return Err(to_df(ZyronError::new(
                    SqlState::CHECK_VIOLATION,
                    format!(
                        "new row for relation \"{}\" violates check constraint \"{name}\"",
                        self.table
                    ),
                )));
            }
        }
        Ok(())
    }
}

/// INSERT: a sink that writes each incoming batch through the session's transaction.
pub fn insert_plan(
    table: Arc<HeapTable>,
    session: Arc<SessionTxn>,
    checks: Vec<Check>,
    input: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = table.codec().nullable_schema().clone();
    let sink = HeapSink {
        table,
        session,
        checks,
        schema,
    };
    Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
}

struct HeapSink {
    table: Arc<HeapTable>,
    session: Arc<SessionTxn>,
    checks: Vec<Check>,
    schema: SchemaRef,
}

impl fmt::Debug for HeapSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeapSink")
            .field("table", &self.table.def().name)
            .finish()
    }
}

impl DisplayAs for HeapSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "HeapSink: table={}", self.table.def().name)
    }
}

#[async_trait]
impl DataSink for HeapSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_config(context.session_config().clone())
            .with_runtime_env(context.runtime_env())
            .build();
        let compile = |expr, schema: &DFSchema| state.create_physical_expr(expr, schema);
        let checks = Checks::compile(&compile, &self.table, &self.checks)?;
        let mut guard = self.session.lock().await;
        let txn = guard.as_mut().ok_or_else(no_transaction)?;
        let mut count = 0;
        while let Some(batch) = data.next().await {
            count += insert_rows(txn, &self.table, &checks, &batch?).await?;
        }
        Ok(count)
    }
}

/// Writes rows (in the table's column order) through the transaction, after
/// the NOT NULL and CHECK constraints.
pub async fn insert_rows(
    txn: &mut Transaction,
    table: &Arc<HeapTable>,
    checks: &Checks,
    batch: &RecordBatch,
) -> Result<u64> {
    let batch = conform(table, batch)?;
    checks.verify(&batch)?;
    txn.insert(table, &batch).await.map_err(to_df)
}

/// Rows of `table` the statement's filters select, at the transaction's
/// snapshot: `(slots, rows)` batch by batch.
pub fn candidates(
    table: &HeapTable,
    txn: &Transaction,
    filters: &[Expr],
    predicate: &[Arc<dyn PhysicalExpr>],
) -> Result<Vec<(Vec<u64>, RecordBatch)>> {
    candidates_in(
        table,
        txn,
        key_lookup(table, &txn.snapshot(), filters)?,
        predicate,
    )
}

/// As [`candidates`], with the index lookup already done: `slots` from
/// [`key_lookup`], `None` to scan every page.
pub fn candidates_in(
    table: &HeapTable,
    txn: &Transaction,
    slots: Option<Vec<u64>>,
    predicate: &[Arc<dyn PhysicalExpr>],
) -> Result<Vec<(Vec<u64>, RecordBatch)>> {
    let snapshot = txn.snapshot();
    let scanned: Vec<(Vec<u64>, RecordBatch)> = match slots {
        Some(slots) => vec![table.fetch(&snapshot, &slots, None).map_err(to_df)?],
        None => (0..table.page_count())
            .step_by(8)
            .map(|p| {
                table
                    .scan_pages(&snapshot, p..(p + 8).min(table.page_count()), None)
                    .map_err(to_df)
            })
            .collect::<Result<_>>()?,
    };
    scanned
        .into_iter()
        .map(|(slots, batch)| {
            let mask = matches(predicate, &batch)?;
            let kept: Vec<u64> = slots
                .iter()
                .zip(mask.iter())
                .filter(|(_, m)| *m == Some(true))
                .map(|(s, _)| *s)
                .collect();
            Ok((kept, filter_record_batch(&batch, &mask)?))
        })
        .filter(|r| r.as_ref().map_or(true, |(slots, _)| !slots.is_empty()))
        .collect()
}

pub fn compile_filters(
    compile: Compile<'_>,
    table: &HeapTable,
    filters: &[Expr],
) -> Result<Vec<Arc<dyn PhysicalExpr>>> {
    let df_schema = DFSchema::try_from(table.codec().schema().as_ref().clone())?;
    let compiled = filters
        .iter()
        .map(|f| compile(f.clone(), &df_schema))
        .collect::<Result<Vec<_>>>()?;
    crate::short_circuit::lazy_conditions(compiled, table.codec().schema())
}

/// Rows where every filter is true (NULL does not qualify). Each filter runs
/// only on the rows the ones before it kept, as PostgreSQL's qual list does:
/// `WHERE b <> 0 AND a / b > 2` does not divide by zero.
pub(crate) fn matches(
    predicate: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> Result<BooleanArray> {
    let mut mask = BooleanArray::from(vec![true; batch.num_rows()]);
    for expr in predicate {
        if mask.true_count() == 0 {
            break;
        }
        let result = expr
            .evaluate_selection(batch, &mask)?
            .into_array(batch.num_rows())?;
        let kept = result.as_boolean();
        mask = mask
            .iter()
            .zip(kept.iter())
            .map(|(m, k)| Some(m == Some(true) && k == Some(true)))
            .collect();
    }
    Ok(mask)
}

/// Whether the newest version of a row (re-read after waiting for a
/// concurrent writer) still satisfies the filters.
fn still_qualifies(
    table: &HeapTable,
    predicate: &[Arc<dyn PhysicalExpr>],
    row: &[u8],
) -> zyron_common::Result<bool> {
    let batch = table.codec().decode(&[row], None)?;
    let mask = matches(predicate, &batch).map_err(crate::errors::to_zyron_error)?;
    Ok(mask.value(0))
}

pub async fn delete(
    compile: Compile<'_>,
    table: &Arc<HeapTable>,
    session: &SessionTxn,
    filters: Vec<Expr>,
) -> Result<u64> {
    let mut guard = session.lock().await;
    let txn = guard.as_mut().ok_or_else(no_transaction)?;
    let predicate = compile_filters(compile, table, &filters)?;
    let mut count = 0;
    for (slots, batch) in candidates(table, txn, &filters, &predicate)? {
        let seen = table.codec().encode(&batch).map_err(to_df)?;
        for (slot, seen) in slots.into_iter().zip(seen) {
            let deleted = txn
                .delete(table, slot, |current| {
                    if current == seen.as_slice() {
                        Ok(true)
                    } else {
                        still_qualifies(table, &predicate, current)
                    }
                })
                .await
                .map_err(to_df)?;
            count += u64::from(deleted);
        }
    }
    Ok(count)
}

/// `compile` turns the assignments and filters into physical expressions; `checks` are the
/// table's CHECK constraints, compiled by the caller (which may have prepared the assignments
/// and filters already, and then compiles them without preparing them again).
pub async fn update(
    compile: Compile<'_>,
    table: &Arc<HeapTable>,
    session: &SessionTxn,
    checks: &Checks,
    assignments: Vec<(String, Expr)>,
    filters: Vec<Expr>,
) -> Result<u64> {
    let schema = table.codec().schema().clone();
    let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
    let mut assigned: Vec<Option<Arc<dyn PhysicalExpr>>> = vec![None; schema.fields().len()];
    for (name, expr) in assignments {
        let index = schema.index_of(&name).map_err(|_| {
            to_df(ZyronError::new(
                SqlState::UNDEFINED_COLUMN,
                format!(
                    "column \"{name}\" of relation \"{}\" does not exist",
                    table.def().name
                ),
            ))
        })?;
        assigned[index] = Some(compile(expr, &df_schema)?);
    }
    let key_changes = table
        .def()
        .primary_key
        .iter()
        .any(|c| assigned[*c].is_some());
    let predicate = compile_filters(compile, table, &filters)?;
    let new_rows = |batch: &RecordBatch| -> Result<RecordBatch> {
        let columns = assigned
            .iter()
            .enumerate()
            .map(|(c, expr)| match expr {
                Some(expr) => {
                    let value = expr.evaluate(batch)?.into_array(batch.num_rows())?;
                    strict_cast(&value, schema.field(c).data_type())
                }
                None => Ok(batch.column(c).clone()),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let options = datafusion::arrow::array::RecordBatchOptions::new()
            .with_row_count(Some(batch.num_rows()));
        let raw = RecordBatch::try_new_with_options(
            table.codec().nullable_schema().clone(),
            columns,
            &options,
        )?;
        let conformed = conform(table, &raw)?;
        checks.verify(&conformed)?;
        Ok(conformed)
    };

    let mut guard = session.lock().await;
    let txn = guard.as_mut().ok_or_else(no_transaction)?;
    let mut count = 0;
    for (slots, batch) in candidates(table, txn, &filters, &predicate)? {
        let updated = new_rows(&batch)?;
        if key_changes {
            count += move_rows(txn, table, &predicate, &slots, &batch, &updated).await?;
            continue;
        }
        let seen = table.codec().encode(&batch).map_err(to_df)?;
        let fresh = table.codec().encode(&updated).map_err(to_df)?;
        for ((slot, seen), fresh) in slots.into_iter().zip(seen).zip(fresh) {
            let changed = txn
                .update(table, slot, |current| {
                    if current == seen.as_slice() {
                        return Ok(Some(fresh.clone()));
                    }
                    // Someone changed the row while we waited: re-evaluate on their version.
                    if !still_qualifies(table, &predicate, current)? {
                        return Ok(None);
                    }
                    let current = table.codec().decode(&[current], None)?;
                    let row = new_rows(&current).map_err(crate::errors::to_zyron_error)?;
                    Ok(table.codec().encode(&row)?.pop())
                })
                .await
                .map_err(to_df)?;
            count += u64::from(changed);
        }
    }
    Ok(count)
}

/// An UPDATE that changes the primary key: delete the old row, insert the new one.
async fn move_rows(
    txn: &mut Transaction,
    table: &Arc<HeapTable>,
    predicate: &[Arc<dyn PhysicalExpr>],
    slots: &[u64],
    old: &RecordBatch,
    new: &RecordBatch,
) -> Result<u64> {
    let seen = table.codec().encode(old).map_err(to_df)?;
    let mut moved = Vec::new();
    for (i, (slot, seen)) in slots.iter().zip(seen).enumerate() {
        let deleted = txn
            .delete(table, *slot, |current| {
                if current == seen.as_slice() {
                    Ok(true)
                } else {
                    still_qualifies(table, predicate, current)
                }
            })
            .await
            .map_err(to_df)?;
        if deleted {
            moved.push(i as u32);
        }
    }
    let indices = datafusion::arrow::array::UInt32Array::from(moved);
    let rows = datafusion::arrow::compute::take_record_batch(new, &indices)?;
    txn.insert(table, &rows).await.map_err(to_df)
}

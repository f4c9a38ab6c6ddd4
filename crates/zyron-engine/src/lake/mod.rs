//! ZyronLake tables in SQL.
//!
//! ```sql
//! CREATE EXTERNAL TABLE events (id BIGINT NOT NULL, kind TEXT, at TIMESTAMP)
//!     STORED AS LAKE LOCATION 's3://bucket/events'      -- or a local directory
//!     OPTIONS ('checkpoint_interval' '100', 'inline_max_bytes' '8192');
//! INSERT INTO events VALUES (...);          -- one commit per statement
//! UPDATE events SET kind = 'x' WHERE id < 10;   -- deletion vectors + new rows
//! DELETE FROM events WHERE id = 3;          -- deletion vectors
//! SELECT * FROM events WHERE id BETWEEN 5 AND 9; -- files pruned by the log's zone maps
//! SELECT * FROM lake_version('events', 3);  -- AS OF VERSION 3
//! SELECT * FROM lake_timestamp('events', '2026-11-30T12:00:00Z');  -- AS OF TIMESTAMP
//! SELECT * FROM lake_changes('events', 2, 5);   -- change feed of versions 3..=5
//! SELECT * FROM lake_optimize('events');    -- and lake_vacuum, lake_cluster,
//!                                           -- lake_tag, lake_branch, lake_merge
//! ```
//!
//! `CREATE EXTERNAL TABLE` on a location that already holds a lake table
//! opens it (its columns must match any the statement declares). The
//! maintenance and versioning table functions run when the query runs and
//! answer one row per figure (`item`, `value`).

mod scan;
pub mod syntax;

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{
    Session, TableFunctionArgs, TableFunctionImpl, TableProvider, TableProviderFactory,
};
use datafusion::common::{DFSchema, Result, plan_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{CreateExternalTable, Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use datafusion::scalar::ScalarValue;
use futures::StreamExt;
use futures::future::BoxFuture;
use zyron_common::{SqlState, ZyronError};
use zyron_lake::{
    ClusterKey, ClusterSpec, Curve, FileFilter, LakeTable, Location, Snapshot, TableMetadata,
};

pub use scan::LakeScanExec;

use crate::heap::to_df;
use crate::heap::write::{conform_to, count_plan, matches, strict_cast};

/// Lake tables by SQL name, so table functions can find them: the lake
/// providers among the shared (external) tables, so a dropped table is gone
/// for the functions too.
#[derive(Debug)]
pub struct LakeRegistry {
    pub shared: crate::heap::SharedTables,
}

impl LakeRegistry {
    fn get(&self, name: &str) -> Result<(LakeTable, SchemaRef)> {
        let tables = self.shared.read().unwrap_or_else(|p| p.into_inner());
        // The name as a quoted identifier first, then folded as an unquoted one.
        tables
            .get(name)
            .or_else(|| tables.get(&name.to_ascii_lowercase()))
            .and_then(lake_table_of)
            .ok_or_else(|| {
                to_df(ZyronError::new(
                    SqlState::UNDEFINED_TABLE,
                    format!("lake table \"{name}\" does not exist"),
                ))
            })
    }
}

/// The CREATE EXTERNAL TABLE option that opens a branch of the table.
const BRANCH_OPTION: &str = "branch";

/// `STORED AS LAKE`.
#[derive(Debug)]
pub struct LakeTableFactory;

#[async_trait]
impl TableProviderFactory for LakeTableFactory {
    async fn create(
        &self,
        _state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let [location] = cmd.locations.as_slice() else {
            return plan_err!("a LAKE table needs exactly one LOCATION");
        };
        let options = table_options(cmd);
        let s3_options = options.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let Location { store, root } = Location::parse_with(location, s3_options).map_err(to_df)?;
        let declared: SchemaRef = Arc::new(cmd.schema.as_arrow().clone());
        // OPTIONS ('branch' 'dev'): the table's branch `dev`, to read and write.
        let branch = options.get(BRANCH_OPTION);
        let existing = match branch {
            Some(name) => LakeTable::new(store.clone(), root.clone()).branch(name),
            None => LakeTable::new(store.clone(), root.clone()),
        };
        let (table, schema) = match existing.latest().await {
            Ok(snapshot) => {
                let schema = schema_of(&snapshot.metadata).map_err(to_df)?;
                if !declared.fields().is_empty() && !same_columns(&declared, &schema) {
                    return Err(to_df(ZyronError::new(
                        SqlState::DATATYPE_MISMATCH,
                        format!(
                            "the lake table at {location} has columns {}",
                            describe(&schema)
                        ),
                    )));
                }
                (existing, schema)
            }
            Err(e) if e.sqlstate() == SqlState::UNDEFINED_TABLE => {
                if let Some(name) = branch {
                    return Err(to_df(ZyronError::new(
                        SqlState::UNDEFINED_OBJECT,
                        format!("the lake table at {location} has no branch \"{name}\""),
                    )));
                }
                if declared.fields().is_empty() {
                    return plan_err!(
                        "no lake table at {location}: declare its columns to create one"
                    );
                }
                let metadata = TableMetadata {
                    schema: schema_json(&declared),
                    checkpoint_interval: number_option(&options, "checkpoint_interval")?
                        .unwrap_or(100),
                    properties: options
                        .iter()
                        // Credentials and endpoints stay out of the log.
                        .filter(|(k, _)| {
                            k.as_str() != "checkpoint_interval"
                                && k.as_str() != BRANCH_OPTION
                                && !k.starts_with(zyron_lake::location::S3_OPTION_PREFIX)
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                };
                let table = LakeTable::create(store, root, metadata)
                    .await
                    .map_err(to_df)?;
                (table, declared)
            }
            Err(e) => return Err(to_df(e)),
        };
        Ok(Arc::new(LakeProvider::new(table, schema, At::Latest)))
    }
}

/// The statement's OPTIONS by the names the user gave: DataFusion files a
/// key without a dot under `format.`, which is taken off again.
fn table_options(cmd: &CreateExternalTable) -> std::collections::BTreeMap<String, String> {
    cmd.options
        .iter()
        .map(|(k, v)| (k.strip_prefix("format.").unwrap_or(k).to_owned(), v.clone()))
        .collect()
}

fn number_option(
    options: &std::collections::BTreeMap<String, String>,
    key: &str,
) -> Result<Option<u64>> {
    match options.get(key) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            to_df(ZyronError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("{key} must be a whole number, not {v:?}"),
            ))
        }),
    }
}

fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

fn describe(schema: &Schema) -> String {
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    columns.join(", ")
}

/// The schema as the lake's metadata stores it.
fn schema_json(schema: &Schema) -> serde_json::Value {
    let columns: Vec<serde_json::Value> = schema
        .fields()
        .iter()
        .map(|f| {
            serde_json::json!({"name": f.name(), "type": f.data_type().to_string(),
                               "nullable": f.is_nullable()})
        })
        .collect();
    serde_json::json!({ "columns": columns })
}

fn schema_of(metadata: &TableMetadata) -> zyron_common::Result<SchemaRef> {
    let bad = |why: &str| {
        ZyronError::new(
            SqlState::DATA_CORRUPTED,
            format!("the lake table's schema is unreadable: {why}"),
        )
    };
    let columns = metadata.schema["columns"]
        .as_array()
        .ok_or_else(|| bad("no columns"))?;
    let fields = columns
        .iter()
        .map(|c| {
            let name = c["name"]
                .as_str()
                .ok_or_else(|| bad("a column has no name"))?;
            let type_text = c["type"]
                .as_str()
                .ok_or_else(|| bad("a column has no type"))?;
            let data_type = DataType::from_str(type_text).map_err(|e| bad(&e.to_string()))?;
            Ok(Field::new(
                name,
                data_type,
                c["nullable"].as_bool().unwrap_or(true),
            ))
        })
        .collect::<zyron_common::Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// Which version a provider reads.
#[derive(Debug, Clone)]
enum At {
    Latest,
    Version(u64),
    /// The version a tag names.
    Tag(String),
    TimestampMs(i64),
}

/// A lake table (at one version, for time travel) as a DataFusion table.
#[derive(Debug)]
pub struct LakeProvider {
    table: LakeTable,
    /// The table's own schema, NOT NULL included.
    schema: SchemaRef,
    /// What DataFusion sees: every column nullable.
    lenient: SchemaRef,
    at: At,
}

impl LakeProvider {
    fn new(table: LakeTable, schema: SchemaRef, at: At) -> LakeProvider {
        LakeProvider {
            lenient: crate::heap::lenient(&schema),
            table,
            schema,
            at,
        }
    }
}

impl LakeProvider {
    async fn snapshot(&self) -> Result<Snapshot> {
        match self.at {
            At::Latest => self.table.latest().await,
            At::Version(v) => self.table.at_version(v).await,
            At::Tag(ref name) => match self.table.tag(name).await {
                Ok(v) => self.table.at_version(v).await,
                Err(e) => Err(e),
            },
            At::TimestampMs(t) => self.table.at_timestamp(t).await,
        }
        .map_err(to_df)
    }

    fn writable(&self) -> Result<()> {
        match self.at {
            At::Latest => Ok(()),
            _ => Err(to_df(ZyronError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "an old version of a lake table cannot be written",
            ))),
        }
    }

    /// DataFusion filters as file filters (by column name) for pruning.
    fn file_filters(&self, filters: &[Expr]) -> Vec<FileFilter> {
        filters
            .iter()
            .flat_map(|f| crate::zyr::to_predicates(f, &self.schema))
            .map(|p| FileFilter {
                column: self.schema.field(p.column).name().clone(),
                op: p.op,
            })
            .collect()
    }

    /// Compiles `filters` against the table and evaluates their AND.
    fn mask(&self, state: &dyn Session, filters: &[Expr]) -> Result<Vec<Arc<dyn PhysicalExpr>>> {
        let df_schema = DFSchema::try_from(self.schema.as_ref().clone())?;
        let compiled = filters
            .iter()
            .map(|f| state.create_physical_expr(f.clone(), &df_schema))
            .collect::<Result<Vec<_>>>()?;
        crate::short_circuit::lazy_conditions(compiled, &self.schema)
    }

    /// Deletes the rows `filters` select; returns them.
    async fn delete_rows(
        &self,
        write: &mut zyron_lake::LakeWrite<'_>,
        state: &dyn Session,
        filters: &[Expr],
    ) -> Result<Vec<RecordBatch>> {
        let predicate = self.mask(state, filters)?;
        let mask = |batch: &RecordBatch| -> zyron_common::Result<BooleanArray> {
            matches(&predicate, batch).map_err(crate::errors::to_zyron_error)
        };
        write
            .delete_where(&self.file_filters(filters), &mask)
            .await
            .map_err(to_df)
    }
}

#[async_trait]
impl TableProvider for LakeProvider {
    /// Every column nullable: NOT NULL is checked here, with PostgreSQL's
    /// message, rather than by DataFusion.
    fn schema(&self) -> SchemaRef {
        self.lenient.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let snapshot = self.snapshot().await?;
        let request = scan::ScanRequest {
            snapshot: &snapshot,
            projection: projection.cloned(),
            table_schema: &self.lenient,
            filters: self.file_filters(filters),
            target_partitions: state.config().target_partitions(),
        };
        Ok(Arc::new(LakeScanExec::new(self.table.clone(), request)?))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        if insert_op != InsertOp::Append {
            return Err(to_df(ZyronError::not_supported(format!(
                "{insert_op} is not supported for lake tables"
            ))));
        }
        let sink = LakeSink {
            table: self.table.clone(),
            schema: self.schema.clone(),
            lenient: self.lenient.clone(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let mut write = self.table.begin().await.map_err(to_df)?;
        let gone = self.delete_rows(&mut write, state, &filters).await?;
        let count: usize = gone.iter().map(RecordBatch::num_rows).sum();
        if count > 0 {
            write.commit("delete").await.map_err(to_df)?;
        }
        count_plan(count as u64)
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.writable()?;
        let df_schema = DFSchema::try_from(self.schema.as_ref().clone())?;
        let mut assigned: Vec<Option<Arc<dyn PhysicalExpr>>> =
            vec![None; self.schema.fields().len()];
        for (name, expr) in assignments {
            let index = self.schema.index_of(&name).map_err(|_| {
                to_df(ZyronError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!("column \"{name}\" of the lake table does not exist"),
                ))
            })?;
            assigned[index] = Some(state.create_physical_expr(expr, &df_schema)?);
        }
        let mut write = self.table.begin().await.map_err(to_df)?;
        let old = self.delete_rows(&mut write, state, &filters).await?;
        let mut new = Vec::with_capacity(old.len());
        for batch in &old {
            let batch = conform(&self.schema, batch)?;
            let columns = assigned
                .iter()
                .enumerate()
                .map(|(c, expr)| match expr {
                    Some(expr) => {
                        let value = expr.evaluate(&batch)?.into_array(batch.num_rows())?;
                        strict_cast(&value, self.schema.field(c).data_type())
                    }
                    None => Ok(batch.column(c).clone()),
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            let lenient = RecordBatch::try_new(self.lenient.clone(), columns)?;
            new.push(conform(&self.schema, &lenient)?);
        }
        let count: usize = new.iter().map(RecordBatch::num_rows).sum();
        if count > 0 {
            write.append(&new).await.map_err(to_df)?;
            write.commit("update").await.map_err(to_df)?;
        }
        count_plan(count as u64)
    }
}

/// Refuses plans that write a lake table (DML, or a maintenance or
/// versioning function) where that cannot be done right: inside a
/// transaction block (a lake statement commits on its own and could not
/// roll back with the rest: 25001), and under EXPLAIN (planning these runs
/// them: 0A000).
pub fn check_lake_writes(
    plan: &datafusion::logical_expr::LogicalPlan,
    in_transaction_block: bool,
) -> zyron_common::Result<()> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::logical_expr::LogicalPlan;
    let provider_of = |source: &Arc<dyn datafusion::logical_expr::TableSource>| {
        datafusion::datasource::source_as_provider(source).ok()
    };
    let mut writes = false;
    let _ = plan.apply_with_subqueries(|node| {
        writes |= match node {
            LogicalPlan::Dml(dml) => provider_of(&dml.target)
                .is_some_and(|p| (p.as_ref() as &dyn std::any::Any).is::<LakeProvider>()),
            LogicalPlan::TableScan(scan) => provider_of(&scan.source).is_some_and(|p| {
                (p.as_ref() as &dyn std::any::Any)
                    .downcast_ref::<Deferred>()
                    .is_some_and(|d| matches!(d.what, DeferredKind::Action(_)))
            }),
            _ => false,
        };
        Ok(match writes {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    if !writes {
        return Ok(());
    }
    if matches!(plan, LogicalPlan::Explain(_)) {
        return Err(ZyronError::not_supported(
            "EXPLAIN of a statement that writes a lake table is not supported: planning it would run it",
        ));
    }
    if in_transaction_block {
        return Err(in_block_error());
    }
    Ok(())
}

/// Why a lake write is refused inside BEGIN ... COMMIT.
pub(crate) fn in_block_error() -> ZyronError {
    ZyronError::new(
        SqlState::ACTIVE_SQL_TRANSACTION,
        "lake tables are written outside transaction blocks: each statement commits on its own",
    )
    .with_hint("Run it outside BEGIN ... COMMIT, as a query of its own.")
}

/// `batch` (every column nullable) as a batch of the table's `schema`:
/// NOT NULL checked with PostgreSQL's error, types cast strictly.
pub(crate) fn conform_checked(
    schema: &SchemaRef,
    batch: &RecordBatch,
) -> zyron_common::Result<RecordBatch> {
    conform(schema, batch).map_err(crate::errors::to_zyron_error)
}

/// The lake table behind `provider`, if it is one: (table, schema).
pub(crate) fn lake_table_of(provider: &Arc<dyn TableProvider>) -> Option<(LakeTable, SchemaRef)> {
    (provider.as_ref() as &dyn std::any::Any)
        .downcast_ref::<LakeProvider>()
        .filter(|p| matches!(p.at, At::Latest))
        .map(|p| (p.table.clone(), p.schema.clone()))
}

/// `batch` as a batch of `schema` (NOT NULL checked, types cast).
fn conform(schema: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    conform_to(schema, "lake table", batch)
}

/// INSERT: every batch of the statement in one commit.
#[derive(Debug)]
struct LakeSink {
    table: LakeTable,
    /// The table's own schema, NOT NULL included.
    schema: SchemaRef,
    /// What DataFusion hands over: every column nullable.
    lenient: SchemaRef,
}

impl DisplayAs for LakeSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "LakeSink({})", self.table.root())
    }
}

#[async_trait]
impl DataSink for LakeSink {
    fn schema(&self) -> &SchemaRef {
        &self.lenient
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let mut batches = Vec::new();
        while let Some(batch) = data.next().await {
            let batch = conform(&self.schema, &batch?)?;
            batches.push(batch);
        }
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows > 0 {
            let mut write = self.table.begin().await.map_err(to_df)?;
            write.append(&batches).await.map_err(to_df)?;
            write.commit("insert").await.map_err(to_df)?;
        }
        Ok(rows as u64)
    }
}

/// The table functions over registered lake tables. The lake statements
/// (`OPTIMIZE`, `VACUUM`, `ALTER TABLE ... CREATE TAG`, ...) are rewritten
/// into calls of these, so each operation has one implementation.
pub fn register_functions(ctx: &datafusion::prelude::SessionContext, registry: &Arc<LakeRegistry>) {
    let functions: [(&str, Kind); 12] = [
        ("lake_version", Kind::Version),
        ("lake_timestamp", Kind::Timestamp),
        ("lake_changes", Kind::Changes),
        ("lake_optimize", Kind::Optimize),
        ("lake_vacuum", Kind::Vacuum),
        ("lake_cluster", Kind::Cluster),
        ("lake_cluster_by", Kind::ClusterBy),
        ("lake_tag", Kind::Tag),
        ("lake_drop_tag", Kind::DropTag),
        ("lake_branch", Kind::Branch),
        ("lake_drop_branch", Kind::DropBranch),
        ("lake_merge", Kind::Merge),
    ];
    for (name, kind) in functions {
        ctx.register_udtf(
            name,
            Arc::new(LakeFunction {
                registry: registry.clone(),
                kind,
            }),
        );
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Version,
    Timestamp,
    Changes,
    Optimize,
    Vacuum,
    Cluster,
    ClusterBy,
    Tag,
    DropTag,
    Branch,
    DropBranch,
    Merge,
}

impl Kind {
    /// Operations on the table's main line only: on a handle opened on a
    /// branch they would record or compare versions of the wrong log.
    fn main_line_only(self) -> bool {
        matches!(
            self,
            Kind::ClusterBy
                | Kind::Tag
                | Kind::DropTag
                | Kind::Branch
                | Kind::DropBranch
                | Kind::Merge
        )
    }
}

#[derive(Debug)]
struct LakeFunction {
    registry: Arc<LakeRegistry>,
    kind: Kind,
}

/// A literal argument as text (strings and numbers).
fn text_arg(args: &[Expr], i: usize, what: &str) -> Result<String> {
    match args.get(i) {
        Some(Expr::Literal(value, _)) if !value.is_null() => Ok(match value {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)) => s.clone(),
            other => other.to_string(),
        }),
        _ => plan_err!("argument {} ({what}) must be a literal", i + 1),
    }
}

fn int_arg(args: &[Expr], i: usize, what: &str) -> Result<i64> {
    let text = text_arg(args, i, what)?;
    text.parse().map_err(|_| {
        to_df(ZyronError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("{what} must be a whole number, not {text:?}"),
        ))
    })
}

/// An optional version argument (`None`: the latest when the call runs).
fn version_arg(args: &[Expr], i: usize) -> Result<Option<u64>> {
    match args.len() > i {
        true => Ok(Some(int_arg(args, i, "version")? as u64)),
        false => Ok(None),
    }
}

/// The table property that remembers `ALTER TABLE ... CLUSTER BY`.
pub const CLUSTER_BY_PROPERTY: &str = "cluster_by";
/// Rows per file a clustering rewrite writes.
const CLUSTER_FILE_ROWS: usize = 1 << 20;

/// Each figure a maintenance call reports, as (item, value) rows.
type Figures = Vec<(&'static str, i64)>;

fn optimize_figures(r: &zyron_lake::OptimizeReport) -> Figures {
    vec![
        ("files_removed", r.files_removed as i64),
        ("files_added", r.files_added as i64),
        ("rows_written", r.rows_written as i64),
        ("deleted_rows_purged", r.deleted_rows_purged as i64),
        ("version", r.version.map_or(-1, |v| v as i64)),
    ]
}

impl TableFunctionImpl for LakeFunction {
    fn call_with_args(&self, call: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let args = call.exprs();
        let (table, schema) = self.registry.get(&text_arg(args, 0, "table name")?)?;
        if table.log_root() != table.root() && self.kind.main_line_only() {
            return Err(to_df(ZyronError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "tags, branches and CLUSTER BY belong to the table's main line: \
                 use the table that opens it, not one opened on a branch",
            )));
        }
        let at = match self.kind {
            Kind::Version => Some(match int_arg(args, 1, "version") {
                Ok(v) => At::Version(v as u64),
                // Not a number: a tag's name (tags name main-line versions).
                Err(_) if table.log_root() != table.root() => {
                    return Err(to_df(ZyronError::new(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "tags name versions of the main line, not of a branch",
                    )));
                }
                Err(_) => At::Tag(text_arg(args, 1, "version or tag")?),
            }),
            Kind::Timestamp => Some(At::TimestampMs(timestamp_ms(&text_arg(
                args,
                1,
                "timestamp",
            )?)?)),
            _ => None,
        };
        if let Some(at) = at {
            return Ok(Arc::new(LakeProvider::new(table, schema, at)));
        }
        let action: Action = match self.kind {
            Kind::Changes => {
                let (from, to) = (
                    int_arg(args, 1, "from version")? as u64,
                    int_arg(args, 2, "to version")? as u64,
                );
                return Ok(Arc::new(Deferred::changes(table, schema, from, to)));
            }
            Kind::Optimize => {
                let target = match args.len() > 1 {
                    true => int_arg(args, 1, "target rows per file")? as u64,
                    false => zyron_lake::optimize::DEFAULT_TARGET_FILE_ROWS,
                };
                let compiler = ClusterCompiler::new(call.session(), &schema)?;
                Box::new(move |t| {
                    let compiler = compiler.clone();
                    Box::pin(async move {
                        // A table with a CLUSTER BY is clustered as it is compacted.
                        let remembered = t
                            .latest()
                            .await?
                            .metadata
                            .properties
                            .get(CLUSTER_BY_PROPERTY)
                            .cloned();
                        let report = match remembered {
                            Some(text) => t.cluster(&compiler.compile(&text)?).await?,
                            None => t.optimize(target).await?,
                        };
                        Ok(optimize_figures(&report))
                    })
                })
            }
            Kind::Vacuum => {
                let hours = int_arg(args, 1, "retention hours")?;
                let dry_run =
                    args.len() > 2 && text_arg(args, 2, "dry run")?.eq_ignore_ascii_case("true");
                Box::new(move |t| {
                    Box::pin(async move {
                        let retention_ms = hours.checked_mul(3_600_000).ok_or_else(|| {
                            ZyronError::new(
                                SqlState::INVALID_PARAMETER_VALUE,
                                "VACUUM retention is too long",
                            )
                        })?;
                        let r = t.vacuum(retention_ms, dry_run).await?;
                        Ok(vec![
                            ("files_deleted", r.files_deleted as i64),
                            ("bytes_deleted", r.bytes_deleted as i64),
                            ("files_referenced", r.files_referenced as i64),
                            ("files_within_lease", r.files_within_lease as i64),
                            ("oldest_readable_version", r.oldest_readable_version as i64),
                        ])
                    })
                })
            }
            Kind::Cluster => {
                let given = match args.len() > 1 {
                    true => Some(cluster_text(args)?),
                    false => None,
                };
                let target_file_rows = match args.len() > 3 {
                    true => int_arg(args, 3, "rows per file")? as usize,
                    false => CLUSTER_FILE_ROWS,
                };
                let compiler = ClusterCompiler::new(call.session(), &schema)?;
                // Checked now, so a bad key fails before anything runs.
                if let Some(text) = &given {
                    compiler.compile(text).map_err(to_df)?;
                }
                Box::new(move |t| {
                    let (compiler, given) = (compiler.clone(), given.clone());
                    Box::pin(async move {
                        let text = match given {
                            Some(text) => text,
                            None => t
                                .latest()
                                .await?
                                .metadata
                                .properties
                                .get(CLUSTER_BY_PROPERTY)
                                .cloned()
                                .ok_or_else(|| {
                                    ZyronError::new(
                                        SqlState::INVALID_PARAMETER_VALUE,
                                        "the table has no CLUSTER BY: name a curve and keys",
                                    )
                                })?,
                        };
                        let spec = ClusterSpec {
                            target_file_rows,
                            ..compiler.compile(&text)?
                        };
                        Ok(optimize_figures(&t.cluster(&spec).await?))
                    })
                })
            }
            Kind::ClusterBy => {
                let text = match text_arg(args, 1, "curve")?.eq_ignore_ascii_case("none") {
                    true => None,
                    false => {
                        let text = cluster_text(args)?;
                        ClusterCompiler::new(call.session(), &schema)?
                            .compile(&text)
                            .map_err(to_df)?;
                        Some(text)
                    }
                };
                Box::new(move |t| {
                    let text = text.clone();
                    Box::pin(async move {
                        let committed =
                            t.set_property(CLUSTER_BY_PROPERTY, text.as_deref()).await?;
                        Ok(vec![("version", committed.version as i64)])
                    })
                })
            }
            Kind::Tag | Kind::Branch => {
                let (name, version) = (text_arg(args, 1, "name")?, version_arg(args, 2)?);
                let branch = matches!(self.kind, Kind::Branch);
                Box::new(move |t| {
                    let name = name.clone();
                    Box::pin(async move {
                        let version = match version {
                            Some(v) => v,
                            None => t.latest().await?.version,
                        };
                        match branch {
                            true => drop(t.create_branch(&name, version).await?),
                            false => t.create_tag(&name, version).await?,
                        }
                        Ok(vec![("version", version as i64)])
                    })
                })
            }
            Kind::DropTag | Kind::DropBranch => {
                let name = text_arg(args, 1, "name")?;
                let branch = matches!(self.kind, Kind::DropBranch);
                Box::new(move |t| {
                    let name = name.clone();
                    Box::pin(async move {
                        match branch {
                            true => t.drop_branch(&name).await?,
                            false => t.drop_tag(&name).await?,
                        }
                        Ok(vec![])
                    })
                })
            }
            Kind::Merge => {
                let name = text_arg(args, 1, "branch")?;
                Box::new(move |t| {
                    let name = name.clone();
                    Box::pin(async move {
                        let merged = t.merge_branch(&name).await?;
                        Ok(vec![("version", merged.map_or(-1, |c| c.version as i64))])
                    })
                })
            }
            Kind::Version | Kind::Timestamp => unreachable!("answered above"),
        };
        Ok(Arc::new(Deferred::action(table, action)))
    }
}

/// `curve (key, ...)` from a call's curve and keys arguments (1 and 2), as
/// the `cluster_by` property stores it.
fn cluster_text(args: &[Expr]) -> Result<String> {
    let curve = text_arg(args, 1, "curve")?.to_ascii_lowercase();
    let keys = text_arg(args, 2, "keys")?;
    Ok(format!("{curve} ({keys})"))
}

/// Turns `curve (key, ...)` into a [`ClusterSpec`]: each key a column or
/// any SQL expression over the table's columns (`ts / 3600`, `lower(name)`).
#[derive(Clone)]
struct ClusterCompiler {
    state: Arc<datafusion::execution::SessionState>,
    schema: SchemaRef,
}

impl ClusterCompiler {
    fn new(session: &dyn Session, schema: &SchemaRef) -> Result<ClusterCompiler> {
        let state = session
            .as_any()
            .downcast_ref::<datafusion::execution::SessionState>()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("no session state".into())
            })?;
        Ok(ClusterCompiler {
            state: Arc::new(state.clone()),
            schema: schema.clone(),
        })
    }

    fn compile(&self, text: &str) -> zyron_common::Result<ClusterSpec> {
        let invalid = |message: String| ZyronError::new(SqlState::INVALID_PARAMETER_VALUE, message);
        let (curve, keys) = text
            .split_once('(')
            .and_then(|(curve, rest)| Some((curve.trim(), rest.trim().strip_suffix(')')?)))
            .ok_or_else(|| invalid(format!("{text:?} is not \"curve (key, ...)\"")))?;
        let curve = match curve {
            "zorder" | "z-order" => Curve::ZOrder,
            "hilbert" => Curve::Hilbert,
            other => {
                return Err(invalid(format!(
                    "curve must be ZORDER or HILBERT, not {other:?}"
                )));
            }
        };
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let exprs = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(keys)
            .and_then(|mut p| p.parse_comma_separated(|p| p.parse_expr()))
            .map_err(|e| {
                ZyronError::new(SqlState::SYNTAX_ERROR, format!("clustering keys: {e}"))
            })?;
        let df_schema = DFSchema::try_from(self.schema.as_ref().clone())
            .map_err(crate::errors::to_zyron_error)?;
        let keys = exprs
            .into_iter()
            .map(|sql| self.key(sql, &df_schema))
            .collect::<zyron_common::Result<Vec<_>>>()?;
        Ok(ClusterSpec {
            curve,
            keys,
            target_file_rows: CLUSTER_FILE_ROWS,
        })
    }

    fn key(
        &self,
        sql: datafusion::sql::sqlparser::ast::Expr,
        schema: &DFSchema,
    ) -> zyron_common::Result<ClusterKey> {
        let name = sql.to_string();
        let with_alias = datafusion::sql::sqlparser::ast::ExprWithAlias {
            expr: sql,
            alias: None,
        };
        let to_error = crate::errors::to_zyron_error;
        let expr = self
            .state
            .create_logical_expr_from_sql_expr(with_alias, schema)
            .map_err(to_error)?;
        if let Expr::Column(column) = &expr {
            return Ok(ClusterKey::Column(column.name.clone()));
        }
        let physical = self
            .state
            .create_physical_expr(expr, schema)
            .map_err(to_error)?;
        Ok(ClusterKey::Derived {
            name,
            eval: Arc::new(move |batch: &RecordBatch| {
                physical
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(to_error)
            }),
        })
    }
}

/// Parses RFC 3339 (`2026-11-30T12:00:00Z`) or milliseconds since the epoch.
fn timestamp_ms(text: &str) -> Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let parsed = datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text)
        .map_err(|e| {
        to_df(ZyronError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("{text:?} is not a timestamp: {e}"),
        ))
    })?;
    Ok(parsed / 1_000_000)
}

type Action = Box<
    dyn Fn(LakeTable) -> BoxFuture<'static, zyron_common::Result<Vec<(&'static str, i64)>>>
        + Send
        + Sync,
>;

/// A table function's result, computed when the query runs (scan), not
/// while it is planned: the maintenance operations, and the change feed.
struct Deferred {
    table: LakeTable,
    schema: SchemaRef,
    what: DeferredKind,
}

enum DeferredKind {
    Action(Action),
    Changes { from: u64, to: u64, columns: usize },
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({})", self.table.root())
    }
}

impl Deferred {
    fn action(table: LakeTable, action: Action) -> Deferred {
        let schema = Arc::new(Schema::new(vec![
            Field::new("item", DataType::Utf8, false),
            Field::new("value", DataType::Int64, false),
        ]));
        Deferred {
            table,
            schema,
            what: DeferredKind::Action(action),
        }
    }

    /// The table's columns plus `_change_type`, `_commit_version`,
    /// `_commit_timestamp`.
    fn changes(table: LakeTable, schema: SchemaRef, from: u64, to: u64) -> Deferred {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("_change_type", DataType::Utf8, false));
        fields.push(Field::new("_commit_version", DataType::Int64, false));
        fields.push(Field::new(
            "_commit_timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into())),
            false,
        ));
        Deferred {
            table,
            schema: Arc::new(Schema::new(fields)),
            what: DeferredKind::Changes {
                from,
                to,
                columns: schema.fields().len(),
            },
        }
    }

    async fn run(&self) -> zyron_common::Result<Vec<RecordBatch>> {
        let to_error =
            |e: datafusion::arrow::error::ArrowError| ZyronError::internal(e.to_string());
        match &self.what {
            DeferredKind::Action(action) => {
                let figures = action(self.table.clone()).await?;
                let items = StringArray::from_iter_values(figures.iter().map(|f| f.0));
                let values = Int64Array::from_iter_values(figures.iter().map(|f| f.1));
                let batch = RecordBatch::try_new(
                    self.schema.clone(),
                    vec![Arc::new(items), Arc::new(values)],
                )
                .map_err(to_error)?;
                Ok(vec![batch])
            }
            DeferredKind::Changes { from, to, columns } => {
                let changes = self.table.changes(*from, *to).await?;
                let table_schema = Arc::new(Schema::new(self.schema.fields()[..*columns].to_vec()));
                changes
                    .into_iter()
                    .map(|change| {
                        let n = change.rows.num_rows();
                        let rows = conform(&table_schema, &change.rows)
                            .map_err(crate::errors::to_zyron_error)?;
                        let mut columns = rows.columns().to_vec();
                        columns.push(Arc::new(StringArray::from(vec![change.kind.name(); n])));
                        columns.push(Arc::new(Int64Array::from(vec![change.version as i64; n])));
                        columns.push(Arc::new(
                            TimestampMillisecondArray::from(vec![change.timestamp_ms; n])
                                .with_timezone("+00:00"),
                        ));
                        RecordBatch::try_new(self.schema.clone(), columns).map_err(to_error)
                    })
                    .collect()
            }
        }
    }
}

#[async_trait]
impl TableProvider for Deferred {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batches = self.run().await.map_err(to_df)?;
        let exec =
            MemorySourceConfig::try_new_exec(&[batches], self.schema.clone(), projection.cloned())?;
        Ok(exec)
    }
}

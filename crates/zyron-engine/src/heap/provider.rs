//! One heap table as DataFusion sees it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::{Constraint, Constraints, DFSchema, Result, Statistics};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use zyron_common::{SqlState, ZyronError};
use zyron_heap::Store;
use zyron_heap::table::HeapTable;

use super::scan::{HeapScanExec, ScanSource};
use super::write::{self, Check};
use super::{SessionTxn, to_df};

pub struct HeapTableProvider {
    /// Not held: a view's plan keeps its provider for as long as the view
    /// lives, and must not keep a dropped or truncated table's rows in memory
    /// ([`Store::prune_dropped`] forgets only a table nothing holds).
    table: Weak<HeapTable>,
    /// The table's schema and name, to find it again by.
    name: (String, String),
    store: Arc<Store>,
    session: Option<Arc<SessionTxn>>,
    schema: SchemaRef,
    defaults: HashMap<String, Expr>,
    checks: Vec<Check>,
    constraints: Constraints,
}

impl std::fmt::Debug for HeapTableProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapTableProvider")
            .field("table", &self.name)
            .finish()
    }
}

/// Parses a stored SQL expression (a DEFAULT or a CHECK) against a table's columns.
pub fn parse_stored_expr(sql: &str, schema: &SchemaRef) -> Result<Expr> {
    static PARSER: std::sync::OnceLock<SessionContext> = std::sync::OnceLock::new();
    let ctx = PARSER.get_or_init(SessionContext::new);
    let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
    ctx.parse_sql_expr(sql, &df_schema)
}

impl HeapTableProvider {
    pub fn new(
        table: Arc<HeapTable>,
        store: Arc<Store>,
        session: Option<Arc<SessionTxn>>,
    ) -> Result<Self> {
        let schema = table.codec().nullable_schema().clone();
        let def = table.def();
        let defaults = def
            .columns
            .iter()
            .filter_map(|c| c.default.as_ref().map(|sql| (c.name.clone(), sql)))
            .map(|(name, sql)| Ok((name, parse_stored_expr(sql, &schema)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        let checks = def
            .checks
            .iter()
            .map(|c| {
                Ok(Check {
                    name: c.name.clone(),
                    expr: parse_stored_expr(&c.sql, &schema)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let constraints = if def.primary_key.is_empty() {
            Constraints::default()
        } else {
            Constraints::new_unverified(vec![Constraint::PrimaryKey(def.primary_key.clone())])
        };
        Ok(Self {
            name: (def.schema.clone(), def.name.clone()),
            table: Arc::downgrade(&table),
            store,
            session,
            schema,
            defaults,
            checks,
            constraints,
        })
    }

    /// The table this provider was made for, if it is still in use: `None`
    /// once it was dropped or truncated and nothing holds it.
    pub fn table(&self) -> Option<Arc<HeapTable>> {
        self.table.upgrade()
    }

    /// The table a write goes to: 40001 if it was dropped or truncated since
    /// the statement was planned (a later commit to it would fail the same way).
    fn written_table(&self) -> Result<Arc<HeapTable>> {
        self.table().ok_or_else(|| {
            to_df(ZyronError::new(
                SqlState::SERIALIZATION_FAILURE,
                format!(
                    "table \"{}\" was dropped or truncated by a concurrent transaction",
                    self.name.1
                ),
            ))
        })
    }

    /// The table's CHECK constraints, parsed.
    pub(crate) fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// The table a scan reads and the session whose snapshot it reads at: the
    /// session running the query, and the table as that session sees it now. A
    /// provider outlives the statement that made it in a view's plan, which every
    /// session shares: there it names the session that created the view (whose
    /// open transaction's writes a scan must not see) and the version of the table
    /// the view saw, since truncated or altered. The engine's own context, with
    /// no session, reads the provider's table as committed.
    async fn bound_to(
        &self,
        state: &dyn Session,
    ) -> Result<(Arc<HeapTable>, Option<Arc<SessionTxn>>)> {
        let (schema_name, name) = &self.name;
        let missing = || {
            to_df(ZyronError::new(
                SqlState::UNDEFINED_TABLE,
                format!("relation \"{name}\" does not exist"),
            ))
        };
        let Some(querying) = state.config().get_extension::<SessionTxn>() else {
            return Ok((self.table().ok_or_else(missing)?, self.session.clone()));
        };
        let current = querying
            .table(schema_name, name)
            .await
            .ok_or_else(missing)?;
        if !std::ptr::eq(Arc::as_ptr(&current), self.table.as_ptr())
            && current.codec().nullable_schema() != &self.schema
        {
            return Err(to_df(ZyronError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "table \"{name}\" has other columns than when this query or view was planned; create the view again"
                ),
            )));
        }
        Ok((current, Some(querying)))
    }

    fn session(&self) -> Result<&Arc<SessionTxn>> {
        self.session.as_ref().ok_or_else(|| {
            to_df(ZyronError::not_supported(
                "heap tables are written from a client session only",
            ))
        })
    }
}

#[async_trait]
impl TableProvider for HeapTableProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Key equalities and ranges are used to find rows through the index;
        // DataFusion still applies every filter to what the scan returns.
        Ok(filters
            .iter()
            .map(|_| TableProviderFilterPushDown::Inexact)
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut statistics = Statistics::new_unknown(&self.schema);
        if let Some(table) = self.table() {
            statistics.num_rows = Precision::Inexact(table.slot_count() as usize);
        }
        Some(statistics)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (table, session) = self.bound_to(state).await?;
        let source = ScanSource {
            table,
            store: self.store.clone(),
            session,
            filters: filters.to_vec(),
        };
        Ok(Arc::new(HeapScanExec::new(
            source,
            projection.cloned(),
            state.config().target_partitions(),
        )?))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(to_df(ZyronError::not_supported(format!(
                "{insert_op} is not supported for heap tables"
            ))));
        }
        write::insert_plan(
            self.written_table()?,
            self.session()?.clone(),
            self.checks.clone(),
            input,
        )
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let compile = |expr, schema: &DFSchema| state.create_physical_expr(expr, schema);
        let count =
            write::delete(&compile, &self.written_table()?, self.session()?, filters).await?;
        write::count_plan(count)
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let compile = |expr, schema: &DFSchema| state.create_physical_expr(expr, schema);
        let table = self.written_table()?;
        let checks = write::Checks::compile(&compile, &table, &self.checks)?;
        let count = write::update(
            &compile,
            &table,
            self.session()?,
            &checks,
            assignments,
            filters,
        )
        .await?;
        write::count_plan(count)
    }

    async fn truncate(&self, state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        let compile = |expr, schema: &DFSchema| state.create_physical_expr(expr, schema);
        let table = self.written_table()?;
        let count = write::delete(&compile, &table, self.session()?, Vec::new()).await?;
        write::count_plan(count)
    }
}

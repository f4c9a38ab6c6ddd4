//! Plans of prepared queries, kept between executions.
//!
//! Without a kept plan, every execution of a prepared query turned its SQL into a plan and
//! optimized that plan again: for the `storage` suite's prepared 1,000-key range aggregate,
//! 38% of the server's time. A prepared query's [`PlanSlot`] keeps the optimized plan with its
//! parameters still placeholders. An execution binds the values, folds the expressions they
//! make constant, and plans the physical side as before, which is where scans take their
//! snapshot and their index ranges.
//!
//! A kept plan serves only while it still describes the query:
//! - every relation the query names resolves to the same table, view or external table as when
//!   it was planned (a DROP and CREATE, or any DDL that replaces the table, plans it again);
//! - the session's settings are unchanged (a SET can change how a query plans: the time zone);
//! - it calls only immutable functions, because the optimizer folds `now()` into a constant.
//!
//! A query that reads anything the catalog cannot vouch for, such as a table function like
//! `read_zyr('...')`, is never kept.
//!
//! Planning the physical side at each execution still cost more than reading a 1,000-key
//! range (DataFusion's physical optimizer rebuilds each node several times, computing its
//! statistics each time). So a kept plan also keeps a physical [`Template`] when it can: its
//! placeholders read their values from a cell ([`crate::params`]), and an execution puts the
//! values in the cell, rebinds each heap scan to the statement's snapshot and the index
//! entries those values select (keeping its partitions, so the plan above stays right), and
//! runs it. A template serves one execution at a time (a portal suspended mid-result still
//! reads its cell): a second one meanwhile is planned the usual way. It is made only when
//! every leaf of the physical plan is a heap scan or reads nothing, because any other
//! source fixes what it reads (files, a table version) when it is planned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, ScalarValue, TableReference};
use datafusion::execution::session_state::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::optimizer::Optimizer;
use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast;
use futures::StreamExt;
use zyron_common::Result;
use zyron_heap::table::HeapTable;

use crate::errors::to_zyron_error;
use crate::heap::{HeapScanExec, HeapTableProvider};
use crate::params::{self, ParamCell, ParamTypes};
use crate::statement;

/// A prepared statement's place for its plan. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct PlanSlot(Arc<Mutex<Slot>>);

/// A plan a slot gives out.
pub struct SlotPlan {
    /// Optimized, with the parameters still placeholders.
    pub plan: LogicalPlan,
    /// Whether it was kept from an earlier execution (else it was made just now).
    pub reused: bool,
}

#[derive(Debug, Default)]
enum Slot {
    /// Not planned yet, or the kept plan went stale.
    #[default]
    Empty,
    /// A statement whose plan cannot be kept (see the module documentation).
    Never,
    Kept(KeptPlan),
}

#[derive(Debug, Clone)]
struct KeptPlan {
    /// Optimized, with the parameters still placeholders.
    plan: LogicalPlan,
    /// Every relation the query names, as it resolved when the plan was made.
    relations: Vec<(TableReference, Relation)>,
    /// The session's settings generation when the plan was made.
    settings_generation: u64,
    physical: Physical,
}

#[derive(Debug, Clone)]
enum Physical {
    /// Not tried yet.
    Untried,
    /// The plan cannot keep a physical template (see the module documentation).
    Never,
    Ready(Arc<Template>),
}

/// A kept plan's physical side, made once, run by every execution with its own parameters.
pub struct Template {
    /// Its heap scans unpinned: each execution runs rebound copies.
    plan: Arc<dyn ExecutionPlan>,
    cell: Arc<ParamCell>,
    types: ParamTypes,
    task_ctx: Arc<TaskContext>,
    schema: SchemaRef,
    /// Whether a stream of an execution is still open (it reads the cell).
    in_use: Arc<AtomicBool>,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template")
            .field("types", &self.types)
            .finish()
    }
}

/// Rows of one execution: the schema and the stream.
pub type Rows = (SchemaRef, SendableRecordBatchStream);

impl Template {
    /// Runs the template with `values` as its parameters; `None` if the values do not
    /// convert to the parameters' types or another execution's stream is still open.
    fn run(&self, values: Vec<ScalarValue>) -> Result<Option<Rows>> {
        let Some(values) = params::conform(values, &self.types) else {
            return Ok(None);
        };
        if self.in_use.swap(true, Ordering::Acquire) {
            return Ok(None);
        }
        let released = Release(self.in_use.clone());
        self.cell.set(values);
        let plan = rebind(&self.plan).map_err(to_zyron_error)?;
        let stream = execute_stream(plan, self.task_ctx.clone()).map_err(to_zyron_error)?;
        let stream = stream.map(move |batch| {
            let _held_until_the_stream_ends = &released;
            batch
        });
        let stream = RecordBatchStreamAdapter::new(self.schema.clone(), stream);
        Ok(Some((self.schema.clone(), Box::pin(stream))))
    }
}

/// Marks a template free again when an execution's stream is dropped.
struct Release(Arc<AtomicBool>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A copy of `plan` for one execution: each heap scan rebound to the statement now running,
/// every other node with fresh execution state.
fn rebind(plan: &Arc<dyn ExecutionPlan>) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
    plan.clone()
        .transform_up(|node| {
            let any: &dyn std::any::Any = node.as_ref();
            let fresh: Arc<dyn ExecutionPlan> = match any.downcast_ref::<HeapScanExec>() {
                Some(scan) => Arc::new(scan.rebound()?),
                None => node.reset_state()?,
            };
            Ok(Transformed::yes(fresh))
        })
        .map(|t| t.data)
}

/// `plan` with its heap scans unpinned, to be kept; `None` if a leaf is neither a heap scan
/// nor a node that reads nothing.
fn keepable_physical(
    plan: Arc<dyn ExecutionPlan>,
) -> datafusion::common::Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut keepable = true;
    let kept = plan
        .transform_up(|node| {
            let any: &dyn std::any::Any = node.as_ref();
            if let Some(scan) = any.downcast_ref::<HeapScanExec>() {
                return Ok(Transformed::yes(Arc::new(scan.unpinned()) as _));
            }
            let reads_nothing = any.is::<EmptyExec>() || any.is::<PlaceholderRowExec>();
            keepable &= !node.children().is_empty() || reads_nothing;
            Ok(Transformed::no(node))
        })?
        .data;
    Ok(keepable.then_some(kept))
}

/// What a name resolved to. Holding it keeps its address from being reused, so an address
/// comparison cannot mistake a new table for the old one.
#[derive(Clone)]
enum Relation {
    Heap(Arc<HeapTable>),
    Other(Arc<dyn TableProvider>),
}

impl std::fmt::Debug for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Relation::Heap(table) => write!(f, "Heap({:p})", Arc::as_ptr(table)),
            Relation::Other(provider) => write!(f, "Other({:p})", Arc::as_ptr(provider)),
        }
    }
}

impl Relation {
    /// Heap tables are compared by the table itself: sessions get a fresh provider for every
    /// lookup, all wrapping the one table the transaction sees.
    fn of(provider: Arc<dyn TableProvider>) -> Self {
        let any: &dyn std::any::Any = provider.as_ref();
        match any
            .downcast_ref::<HeapTableProvider>()
            .and_then(|heap| heap.table())
        {
            Some(table) => Relation::Heap(table),
            None => Relation::Other(provider),
        }
    }

    fn same(&self, other: &Relation) -> bool {
        match (self, other) {
            (Relation::Heap(a), Relation::Heap(b)) => Arc::ptr_eq(a, b),
            (Relation::Other(a), Relation::Other(b)) => {
                std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
            }
            _ => false,
        }
    }
}

impl PlanSlot {
    /// The optimized plan of `statement` with placeholders for its parameters: the kept one
    /// while it still describes the query, else a new one (kept when it can be). `None` for a
    /// statement whose plan cannot be kept; the caller plans it the usual way.
    pub async fn plan(
        &self,
        ctx: &SessionContext,
        state: &SessionState,
        statement: &DfStatement,
        settings_generation: u64,
    ) -> Result<Option<SlotPlan>> {
        let kept = match &*self.lock() {
            Slot::Never => return Ok(None),
            Slot::Kept(kept) if kept.settings_generation == settings_generation => {
                Some(kept.clone())
            }
            Slot::Kept(_) | Slot::Empty => None,
        };
        if let Some(kept) = kept
            && still_resolves(ctx, &kept.relations).await
        {
            return Ok(Some(SlotPlan {
                plan: kept.plan,
                reused: true,
            }));
        }
        if !is_query(statement) {
            *self.lock() = Slot::Never;
            return Ok(None);
        }
        let Some(relations) = resolve(ctx, state, statement).await else {
            // A name that does not resolve: the usual path reports it.
            *self.lock() = Slot::Empty;
            return Ok(None);
        };
        let plan = statement::plan_statement(state, statement.clone()).await?;
        // `SELECT ... INTO t` parses as a query and plans as DDL: that runs the usual way.
        if statement::command_for_plan(&plan).is_some() || !keepable(&plan, &relations) {
            *self.lock() = Slot::Never;
            return Ok(None);
        }
        let plan = state.optimize(&plan).map_err(to_zyron_error)?;
        // An Apply's subqueries are out of reach of binding: their `$1` would
        // stay unbound in a kept plan. Such a query is planned at each execution.
        if crate::subquery::holds_apply(&plan) {
            *self.lock() = Slot::Never;
            return Ok(None);
        }
        *self.lock() = Slot::Kept(KeptPlan {
            plan: plan.clone(),
            relations,
            settings_generation,
            physical: Physical::Untried,
        });
        Ok(Some(SlotPlan {
            plan,
            reused: false,
        }))
    }

    /// Runs the kept physical template with `params`, if there is one, it still describes
    /// the query, and it is free; `None` sends the caller to [`PlanSlot::plan`].
    pub async fn run_template(
        &self,
        ctx: &SessionContext,
        settings_generation: u64,
        params: &ParamValues,
    ) -> Result<Option<Rows>> {
        let (template, relations) = match &*self.lock() {
            Slot::Kept(KeptPlan {
                physical: Physical::Ready(template),
                relations,
                settings_generation: generation,
                ..
            }) if *generation == settings_generation => (template.clone(), relations.clone()),
            _ => return Ok(None),
        };
        let Some(values) = list_values(params) else {
            return Ok(None);
        };
        if !still_resolves(ctx, &relations).await {
            return Ok(None);
        }
        template.run(values)
    }

    /// Makes the physical template of `plan` (the optimized plan [`PlanSlot::plan`] gave,
    /// placeholders and all) if none was tried yet, and runs it with `params`. `None` when
    /// the plan cannot keep one or this execution cannot use it: the caller binds the
    /// parameters and plans as usual.
    pub async fn make_template(
        &self,
        plan: &LogicalPlan,
        state: &SessionState,
        params: &ParamValues,
    ) -> Result<Option<Rows>> {
        if !matches!(
            &*self.lock(),
            Slot::Kept(KeptPlan {
                physical: Physical::Untried,
                ..
            })
        ) {
            return Ok(None);
        }
        let Some(values) = list_values(params) else {
            return Ok(None);
        };
        let cell = Arc::new(ParamCell::default());
        let Some((reading, types)) = params::read_from_cell(plan, &cell).map_err(to_zyron_error)?
        else {
            self.set_physical(Physical::Never);
            return Ok(None);
        };
        let Some(first) = params::conform(values.clone(), &types) else {
            return Ok(None);
        };
        // The scans look the index up for these values while they are planned.
        cell.set(first);
        let physical = match state
            .query_planner()
            .create_physical_plan(&reading, state)
            .await
        {
            Ok(physical) => keepable_physical(physical).map_err(to_zyron_error)?,
            // Planned as usual, it reports its own error (or plans some other way).
            Err(_) => None,
        };
        let Some(physical) = physical else {
            self.set_physical(Physical::Never);
            return Ok(None);
        };
        let template = Arc::new(Template {
            plan: physical,
            cell,
            types,
            task_ctx: state.task_ctx(),
            schema: Arc::new(plan.schema().as_arrow().clone()),
            in_use: Arc::new(AtomicBool::new(false)),
        });
        self.set_physical(Physical::Ready(template.clone()));
        template.run(values)
    }

    fn set_physical(&self, physical: Physical) {
        if let Slot::Kept(kept) = &mut *self.lock() {
            kept.physical = physical;
        }
    }

    /// Whether the statement was found to be one whose plan cannot be kept: the caller then
    /// goes straight to the usual path (without copying the session's state for this one).
    pub fn gave_up(&self) -> bool {
        matches!(*self.lock(), Slot::Never)
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `plan` with `params` in place of its placeholders, and the expressions that made constant
/// folded (so that `k BETWEEN $1 AND $1 + 99` reaches the scan as a key range).
pub fn bind(plan: LogicalPlan, params: ParamValues, state: &SessionState) -> Result<LogicalPlan> {
    let bound = plan.with_param_values(params).map_err(to_zyron_error)?;
    Optimizer::with_rules(vec![Arc::new(SimplifyExpressions::new())])
        .optimize(bound, state, |_, _| {})
        .map_err(to_zyron_error)
}

/// Positional parameter values (`$1`, `$2`, ...); `None` for named ones.
fn list_values(params: &ParamValues) -> Option<Vec<ScalarValue>> {
    match params {
        ParamValues::List(list) => Some(list.iter().map(|v| v.value.clone()).collect()),
        ParamValues::Map(_) => None,
    }
}

fn is_query(statement: &DfStatement) -> bool {
    matches!(statement, DfStatement::Statement(s) if matches!(s.as_ref(), ast::Statement::Query(_)))
}

/// Each relation `statement` names, resolved now; `None` if one does not resolve.
async fn resolve(
    ctx: &SessionContext,
    state: &SessionState,
    statement: &DfStatement,
) -> Option<Vec<(TableReference, Relation)>> {
    let references = state.resolve_table_references(statement).ok()?;
    let mut relations = Vec::with_capacity(references.len());
    for reference in references {
        let provider = ctx.table_provider(reference.clone()).await.ok()?;
        relations.push((reference, Relation::of(provider)));
    }
    Some(relations)
}

async fn still_resolves(ctx: &SessionContext, relations: &[(TableReference, Relation)]) -> bool {
    for (reference, relation) in relations {
        let Ok(provider) = ctx.table_provider(reference.clone()).await else {
            return false;
        };
        if !Relation::of(provider).same(relation) {
            return false;
        }
    }
    true
}

/// Whether a plan can serve later executions: it calls only immutable functions, and every
/// scan in it (subqueries included) reads one of the relations the query names.
fn keepable(plan: &LogicalPlan, relations: &[(TableReference, Relation)]) -> bool {
    let mut keepable = true;
    let _ = plan.apply_with_subqueries(|node| {
        let scan_known = match node {
            LogicalPlan::TableScan(scan) => source_as_provider(&scan.source)
                .map(Relation::of)
                .is_ok_and(|scanned| relations.iter().any(|(_, r)| r.same(&scanned))),
            _ => true,
        };
        let mut immutable = true;
        let _ = node.apply_expressions(|expr| {
            immutable &= !expr.exists(|e| Ok(is_not_immutable(e)))?;
            Ok(TreeNodeRecursion::Continue)
        });
        keepable &= scan_known && immutable;
        Ok(if keepable {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    keepable
}

fn is_not_immutable(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.func.signature().volatility != Volatility::Immutable)
}

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

use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, TableReference};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::optimizer::Optimizer;
use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast;
use zyron_common::Result;
use zyron_heap::table::HeapTable;

use crate::errors::to_zyron_error;
use crate::heap::HeapTableProvider;
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
        match any.downcast_ref::<HeapTableProvider>() {
            Some(heap) => Relation::Heap(Arc::clone(heap.table())),
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
        let plan = state
            .statement_to_plan(statement.clone())
            .await
            .map_err(to_zyron_error)?;
        // `SELECT ... INTO t` parses as a query and plans as DDL: that runs the usual way.
        if statement::command_for_plan(&plan).is_some() || !keepable(&plan, &relations) {
            *self.lock() = Slot::Never;
            return Ok(None);
        }
        let plan = state.optimize(&plan).map_err(to_zyron_error)?;
        *self.lock() = Slot::Kept(KeptPlan {
            plan: plan.clone(),
            relations,
            settings_generation,
        });
        Ok(Some(SlotPlan {
            plan,
            reused: false,
        }))
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

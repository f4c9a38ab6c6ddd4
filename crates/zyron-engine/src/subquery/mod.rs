//! Subqueries of every shape, with PostgreSQL's answers.
//!
//! DataFusion decorrelates the common shapes into joins; what it leaves, it
//! cannot run (non-equality correlation, EXISTS or IN in a select list, a
//! constant on the left of IN, ANY and ALL). [`ZyronQueryPlanner`] gives each
//! of those an [`apply::Apply`] node, run by [`exec::ApplyExec`] as a nested
//! loop; [`single_row`] makes correlated scalar subqueries without an
//! aggregate plannable at all.

mod apply;
mod exec;
pub mod outer_aggregate;
pub mod output_name;
mod rewrite;
pub mod single_row;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::expr::{Exists, InSubquery, SetComparison};
use datafusion::logical_expr::{Expr, LogicalPlan, Subquery};
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};

/// DataFusion's optimizer rules with ours: [`rewrite::ApplyMisplannedSubqueries`]
/// first and again just before DataFusion's decorrelation, and
/// [`rewrite::ApplyLeftoverSubqueries`] after it.
pub fn optimizer_rules() -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    let mut rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> =
        vec![Arc::new(rewrite::ApplyMisplannedSubqueries)];
    for rule in Optimizer::new().rules {
        let last_decorrelation = rule.name() == "decorrelate_lateral_join";
        if rule.name() == "decorrelate_predicate_subquery" {
            // Again, now that simplification may have made a probe constant
            // (`CASE WHEN false THEN c END NOT IN (..)` is `NULL NOT IN (..)`).
            rules.push(Arc::new(rewrite::ApplyMisplannedSubqueries));
        }
        rules.push(rule);
        if last_decorrelation {
            rules.push(Arc::new(rewrite::ApplyLeftoverSubqueries));
        }
    }
    assert!(
        rules
            .iter()
            .any(|r| r.name() == "apply_leftover_subqueries"),
        "DataFusion's optimizer has no decorrelate_lateral_join rule to follow"
    );
    rules
}

/// The subquery of a scalar subquery, EXISTS, IN or ANY/ALL expression.
fn subquery_of(expr: &Expr) -> Option<&Subquery> {
    match expr {
        Expr::ScalarSubquery(subquery)
        | Expr::Exists(Exists { subquery, .. })
        | Expr::InSubquery(InSubquery { subquery, .. })
        | Expr::SetComparison(SetComparison { subquery, .. }) => Some(subquery),
        _ => None,
    }
}

fn subquery_of_mut(expr: &mut Expr) -> Option<&mut Subquery> {
    match expr {
        Expr::ScalarSubquery(subquery)
        | Expr::Exists(Exists { subquery, .. })
        | Expr::InSubquery(InSubquery { subquery, .. })
        | Expr::SetComparison(SetComparison { subquery, .. }) => Some(subquery),
        _ => None,
    }
}

/// Whether `plan` has an [`apply::Apply`] node.
pub fn holds_apply(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Extension(extension) = node {
            found |= extension.node.as_any().is::<apply::Apply>();
        }
        Ok(if found {
            datafusion::common::tree_node::TreeNodeRecursion::Stop
        } else {
            datafusion::common::tree_node::TreeNodeRecursion::Continue
        })
    });
    found
}

/// DataFusion's physical planner, after the subqueries it cannot run are
/// given to [`exec::ApplyExec`].
#[derive(Debug)]
pub struct ZyronQueryPlanner;

#[async_trait]
impl QueryPlanner for ZyronQueryPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let planner =
            DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(exec::ApplyPlanner)]);
        if !rewrite::has_subqueries(plan) {
            return planner.create_physical_plan(plan, session).await;
        }
        let plan = rewrite::plan_subqueries(plan.clone())?.data;
        planner.create_physical_plan(&plan, session).await
    }
}

//! `(SELECT max(t1.a) FROM t2)` inside a query over `t1`: an aggregate whose
//! arguments read only columns of an outer query belongs to that outer query
//! in SQL, which PostgreSQL follows (the outer query becomes an aggregate).
//! DataFusion evaluates it in the subquery instead, which gave one row per
//! outer row where PostgreSQL gives one row. Until Zyron moves such an
//! aggregate out, it refuses the query (0A000) rather than answer wrong.

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;
use zyron_common::{SqlState, ZyronError};

use crate::heap::to_df;

#[derive(Debug, Default)]
pub struct RefuseOuterAggregates;

impl AnalyzerRule for RefuseOuterAggregates {
    fn name(&self) -> &str {
        "refuse_outer_aggregates"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|expr| {
                expr.apply(|e| {
                    if let Some(subquery) = super::subquery_of(e) {
                        check_level(&subquery.subquery)?;
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        Ok(plan)
    }
}

/// Fails if an aggregate of `plan`'s own level reads outer columns only.
fn check_level(plan: &LogicalPlan) -> Result<()> {
    plan.apply(|node| {
        let LogicalPlan::Aggregate(aggregate) = node else {
            return Ok(TreeNodeRecursion::Continue);
        };
        for expr in &aggregate.aggr_expr {
            expr.apply(|e| {
                if let Expr::AggregateFunction(AggregateFunction { params, .. }) = e {
                    let args = params.args.iter();
                    let reads_outer = args.clone().any(|a| a.contains_outer());
                    let reads_own = args.clone().any(|a| !a.column_refs().is_empty());
                    if reads_outer && !reads_own {
                        return Err(to_df(ZyronError::new(
                            SqlState::FEATURE_NOT_SUPPORTED,
                            format!(
                                "aggregate {} reads only columns of an outer query, which makes it \
                                 an aggregate of that query; not supported yet",
                                e.schema_name()
                            ),
                        )));
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

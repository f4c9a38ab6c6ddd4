//! `2 IN (SELECT x FROM t2 WHERE t2.x = t1.a)`: type coercion makes the
//! subquery return `CAST(t2.x AS BIGINT)`, which DataFusion names `t2.x` like
//! the column, and decorrelation then projects `t2.x` beside it and fails
//! ("Projections require unique expression names"). Naming the compared
//! value of an IN or ANY subquery apart from every column avoids the clash;
//! the name is never seen, as the value is only compared.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::expr::{InSubquery, SetComparison};
use datafusion::logical_expr::{Expr, LogicalPlan, Projection, Subquery};
use datafusion::optimizer::AnalyzerRule;

const COMPARED_VALUE: &str = "__compared_value";

#[derive(Debug, Default)]
pub struct NameComparedSubqueryValues;

impl AnalyzerRule for NameComparedSubqueryValues {
    fn name(&self) -> &str {
        "name_compared_subquery_values"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| {
                expr.transform(|e| match e {
                    Expr::InSubquery(InSubquery {
                        expr,
                        subquery,
                        negated,
                    }) => Ok(named(subquery)?.update_data(|subquery| {
                        Expr::InSubquery(InSubquery {
                            expr,
                            subquery,
                            negated,
                        })
                    })),
                    Expr::SetComparison(comparison) => {
                        let SetComparison {
                            expr,
                            subquery,
                            op,
                            quantifier,
                        } = comparison;
                        Ok(named(subquery)?.update_data(|subquery| {
                            Expr::SetComparison(SetComparison {
                                expr,
                                subquery,
                                op,
                                quantifier,
                            })
                        }))
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|t| t.data)
    }
}

/// `subquery` with a computed single value renamed to [`COMPARED_VALUE`].
fn named(mut subquery: Subquery) -> Result<Transformed<Subquery>> {
    let LogicalPlan::Projection(projection) = subquery.subquery.as_ref() else {
        return Ok(Transformed::no(subquery));
    };
    let [value] = projection.expr.as_slice() else {
        return Ok(Transformed::no(subquery));
    };
    if matches!(value, Expr::Column(_)) || value.schema_name().to_string() == COMPARED_VALUE {
        return Ok(Transformed::no(subquery));
    }
    let renamed = value.clone().unalias().alias(COMPARED_VALUE);
    let plan = Projection::try_new(vec![renamed], projection.input.clone())?;
    subquery.subquery = Arc::new(LogicalPlan::Projection(plan));
    Ok(Transformed::yes(subquery))
}

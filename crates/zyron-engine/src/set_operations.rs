//! `INTERSECT ALL` and `EXCEPT ALL` with their multiset meaning: a row that
//! appears m times on the left and n times on the right appears min(m, n)
//! times in the intersection and max(m - n, 0) times in the difference.
//!
//! DataFusion 55 plans both as a semi or anti join on every column, which
//! answers each left row once per match: `{1, 1, 1} INTERSECT ALL {1}` gave
//! three rows and `{1, 1} EXCEPT ALL {1}` none. Numbering the copies of each
//! row on both sides (`row_number() OVER (PARTITION BY every column)`) and
//! joining on the number as well makes the k-th copy on the left meet the
//! k-th copy on the right, which is the multiset answer.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, NullEquality, Result};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::{
    Expr, ExprFunctionExt, Join, JoinType, LogicalPlan, LogicalPlanBuilder,
};
use datafusion::optimizer::AnalyzerRule;

/// Name of the copy number each side gets.
const COPY: &str = "__copy";

#[derive(Debug, Default)]
pub struct MultisetIntersectExcept;

impl AnalyzerRule for MultisetIntersectExcept {
    fn name(&self) -> &str {
        "multiset_intersect_except"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match &node {
            LogicalPlan::Join(join) if is_all_set_operation(join) => {
                Ok(Transformed::yes(numbered(join)?))
            }
            _ => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
    }
}

/// The join `INTERSECT ALL` or `EXCEPT ALL` plans: semi or anti, NULL equal
/// to NULL, on column i of the left with column i of the right for every i,
/// and no other condition. (The DISTINCT forms have a distinct left input,
/// which numbering leaves right, as every copy number there is 1.)
fn is_all_set_operation(join: &Join) -> bool {
    let semi_or_anti = matches!(join.join_type, JoinType::LeftSemi | JoinType::LeftAnti);
    let left = join.left.schema();
    let right = join.right.schema();
    let every_column = join.on.len() == left.fields().len()
        && left.fields().len() == right.fields().len()
        && join.on.iter().enumerate().all(|(i, (l, r))| {
            names_column(l, left.field(i).name()) && names_column(r, right.field(i).name())
        });
    semi_or_anti
        && join.null_equality == NullEquality::NullEqualsNull
        && join.filter.is_none()
        && every_column
        && !left.fields().iter().any(|f| f.name() == COPY)
}

/// `expr` is the column `name`, or a cast of it (type coercion casts one
/// side of a key where the two sides' types differ).
fn names_column(expr: &Expr, name: &str) -> bool {
    match expr {
        Expr::Column(column) => column.name == name,
        Expr::Cast(cast) => names_column(&cast.expr, name),
        _ => false,
    }
}

fn numbered(join: &Join) -> Result<LogicalPlan> {
    let left = with_copy_numbers(join.left.as_ref().clone())?;
    let right = with_copy_numbers(join.right.as_ref().clone())?;
    let copy_of = |plan: &LogicalPlan| -> Result<Expr> {
        let (qualifier, field) = plan.schema().qualified_field_with_unqualified_name(COPY)?;
        Ok(Expr::Column(Column::new(qualifier.cloned(), field.name())))
    };
    let mut on = join.on.clone();
    on.push((copy_of(&left)?, copy_of(&right)?));
    let numbered = Join::try_new(
        Arc::new(left),
        Arc::new(right),
        on,
        None,
        join.join_type,
        join.join_constraint,
        NullEquality::NullEqualsNull,
        false,
    )?;
    let columns: Vec<Expr> = join
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    LogicalPlanBuilder::from(LogicalPlan::Join(numbered))
        .project(columns)?
        .build()
}

/// `plan` with a column numbering the copies of each of its rows from 1.
fn with_copy_numbers(plan: LogicalPlan) -> Result<LogicalPlan> {
    let every_column: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let copy = row_number().partition_by(every_column).build()?.alias(COPY);
    LogicalPlanBuilder::from(plan).window(vec![copy])?.build()
}

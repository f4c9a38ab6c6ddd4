//! IN lists that hold a column or a NULL, written as the comparisons they
//! stand for (`x = y OR x = z`, `x <> y AND x <> z`). DataFusion's simplifier
//! combines two lists tested against the same expression by set algebra on
//! their items (`x IN (y) AND x NOT IN (x, 'a')` became `x = y`), which holds
//! only for distinct non-NULL constants: a column may equal any item at run
//! time, and a NULL item makes NOT IN never true. Comparisons it leaves alone;
//! lists of constants, which it may combine, keep their hashed lookup.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct SpellOutInLists;

impl AnalyzerRule for SpellOutInLists {
    fn name(&self) -> &str {
        "spell_out_in_lists"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| expr.transform_up(spell_out))
        })
        .data()
    }
}

fn spell_out(expr: Expr) -> Result<Transformed<Expr>> {
    match expr {
        Expr::InList(list) if not_constants(&list) => {
            Ok(Transformed::yes(comparisons(Expr::InList(list))))
        }
        _ => Ok(Transformed::no(expr)),
    }
}

/// Whether a list holds anything but non-NULL constants.
fn not_constants(list: &InList) -> bool {
    list.list.iter().any(|item| !is_constant(item))
}

fn is_constant(item: &Expr) -> bool {
    match item {
        Expr::Literal(value, _) => !value.is_null(),
        Expr::Cast(cast) => is_constant(&cast.expr),
        Expr::TryCast(cast) => is_constant(&cast.expr),
        _ => false,
    }
}

/// `x IN (a, b)` as `x = a OR x = b`, `x NOT IN (a, b)` as `x <> a AND x <> b`.
fn comparisons(expr: Expr) -> Expr {
    let Expr::InList(InList {
        expr,
        list,
        negated,
    }) = expr
    else {
        return expr;
    };
    let (compare, join) = match negated {
        false => (Operator::Eq, Operator::Or),
        true => (Operator::NotEq, Operator::And),
    };
    list.into_iter()
        .map(|item| Expr::BinaryExpr(BinaryExpr::new(expr.clone(), compare, Box::new(item))))
        .reduce(|chain, next| {
            Expr::BinaryExpr(BinaryExpr::new(Box::new(chain), join, Box::new(next)))
        })
        .unwrap_or_else(|| Expr::Literal(ScalarValue::Boolean(Some(negated)), None))
}

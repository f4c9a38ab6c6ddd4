//! Finds the subqueries DataFusion's optimizer left in a plan (it decorrelates
//! only some shapes, and its physical planner runs none of the others) and
//! gives each filter or projection that holds them an [`Apply`] input.
//!
//! `Filter(p(EXISTS ..))` over `input` becomes
//! `Projection(input columns)` over `Filter(p(__subquery_n))` over `Apply(input)`,
//! and a projection reads the Apply's columns in place of its subqueries.
//! An `IN` or `ANY` probe that is not a plain column is computed first, by a
//! projection under the Apply.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, Result};
use datafusion::logical_expr::expr::{Alias, Exists, InSubquery, SetComparison, SetQuantifier};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, Extension, Filter, LogicalPlan, Operator, Projection};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use super::apply::{Apply, Correlated, Kind};

/// Whether `plan` holds a subquery [`plan_subqueries`] may take.
pub fn has_subqueries(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        let _ = node.apply_expressions(|expr| {
            found |= expr.exists(|e| Ok(is_subquery(e)))?;
            Ok(stop_if(found))
        });
        Ok(stop_if(found))
    });
    found
}

fn stop_if(found: bool) -> TreeNodeRecursion {
    if found {
        TreeNodeRecursion::Stop
    } else {
        TreeNodeRecursion::Continue
    }
}

fn is_subquery(expr: &Expr) -> bool {
    super::subquery_of(expr).is_some()
}

/// `plan` with each filter and projection whose subqueries DataFusion cannot
/// run reading them from an [`Apply`].
pub fn plan_subqueries(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(|node| {
        let rewritten = match &node {
            LogicalPlan::Filter(filter) => rewrite_filter(filter, Which::All)?,
            LogicalPlan::Projection(projection) => rewrite_projection(projection, Which::All)?,
            _ => None,
        };
        Ok(match rewritten {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(node),
        })
    })
}

/// Runs after DataFusion's decorrelation: the subqueries it left go to an
/// Apply before filter pushdown, which moves a predicate with a correlated
/// subquery as if the subquery read no column (to the wrong side of a join).
#[derive(Debug, Default)]
pub struct ApplyLeftoverSubqueries;

impl OptimizerRule for ApplyLeftoverSubqueries {
    fn name(&self) -> &str {
        "apply_leftover_subqueries"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if !has_subqueries(&plan) {
            return Ok(Transformed::no(plan));
        }
        plan_subqueries(plan)
    }
}

/// Which subqueries a node gives its Apply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    /// All that DataFusion's physical planner cannot run.
    All,
    /// Those DataFusion's decorrelation plans wrong:
    /// - with a subquery inside that reads this node's input: the inner one
    ///   becomes a join that still names the outer column ("No field named t1.a");
    /// - NOT IN with a constant probe, whose null-aware anti join loses its
    ///   NULLs when the constant key is pushed into the subquery (`-2 NOT IN
    ///   (1, NULL)` answered true), or with a correlated subquery, whose
    ///   null-aware join takes one key only;
    /// - IN and ANY anywhere but as a conjunct of a filter: the mark join they
    ///   become answers false where a NULL makes the answer unknown;
    /// - IN whose probe holds a subquery ([`probe_has_subquery`]);
    /// - a correlated scalar subquery given `single_row`: decorrelated, it is
    ///   grouped over every key of the inner table, and a key no outer row
    ///   reads would raise 21000.
    MisplannedByDataFusion,
}

/// An IN whose probe holds a subquery: DataFusion's semi join would compare
/// on the subquery itself, which its physical planner cannot run.
fn probe_has_subquery(expr: &Expr) -> bool {
    matches!(expr, Expr::InSubquery(InSubquery { expr: probe, .. })
        if probe.exists(|e| Ok(is_subquery(e))).unwrap_or(true))
}

fn misplanned_not_in(expr: &Expr, correlated: bool) -> bool {
    matches!(
        expr,
        Expr::InSubquery(InSubquery { expr: probe, negated: true, .. })
            if correlated || probe.column_refs().is_empty()
    )
}

/// Runs before DataFusion's decorrelation and gives an Apply the subqueries
/// it would plan wrong ([`Which::MisplannedByDataFusion`]). An Apply runs a
/// subquery with the outer values in place, when only one level is left.
#[derive(Debug, Default)]
pub struct ApplyMisplannedSubqueries;

impl OptimizerRule for ApplyMisplannedSubqueries {
    fn name(&self) -> &str {
        "apply_misplanned_subqueries"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let rewritten = match &plan {
            LogicalPlan::Filter(filter) => rewrite_filter(filter, Which::MisplannedByDataFusion)?,
            LogicalPlan::Projection(projection) => {
                rewrite_projection(projection, Which::MisplannedByDataFusion)?
            }
            _ => None,
        };
        Ok(match rewritten {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(plan),
        })
    }
}

fn rewrite_filter(filter: &Filter, which: Which) -> Result<Option<LogicalPlan>> {
    let mut taken = Taken::new(filter.input.schema(), which);
    // Conjuncts without a subquery the Apply runs stay below it, where they can
    // still become join conditions and cut the rows the Apply sees; above it,
    // a WHERE that joins tables left a cross join behind. One that reads an
    // outer query stays above, where DataFusion's decorrelation of the
    // enclosing subquery finds it (it pulls nothing out of an extension node).
    let mut above = Vec::new();
    let mut below = Vec::new();
    for conjunct in split_conjunction(&filter.predicate) {
        // A conjunct that is an IN is a semi or anti join of DataFusion's;
        // deeper in the predicate it would be a mark join.
        let joined = matches!(conjunct, Expr::InSubquery(_));
        let before = taken.subqueries.len();
        let rewritten = taken.take_from(conjunct.clone(), joined)?;
        if taken.subqueries.len() > before || rewritten.contains_outer() {
            above.push(rewritten);
        } else {
            below.push(rewritten);
        }
    }
    if taken.subqueries.is_empty() {
        return Ok(None);
    }
    let predicate = conjunction(above).expect("a taken subquery is in a conjunct");
    let input = match conjunction(below) {
        Some(rest) => LogicalPlan::Filter(Filter::try_new(rest, Arc::clone(&filter.input))?),
        None => filter.input.as_ref().clone(),
    };
    let apply = taken.into_apply(input)?;
    let filtered = LogicalPlan::Filter(Filter::try_new(predicate, Arc::new(apply))?);
    let columns = filter
        .input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    Ok(Some(LogicalPlan::Projection(Projection::try_new(
        columns,
        Arc::new(filtered),
    )?)))
}

fn rewrite_projection(projection: &Projection, which: Which) -> Result<Option<LogicalPlan>> {
    let mut taken = Taken::new(projection.input.schema(), which);
    let mut exprs = Vec::with_capacity(projection.expr.len());
    for expr in &projection.expr {
        exprs.push(match expr {
            Expr::Alias(Alias {
                expr,
                relation,
                name,
                metadata,
            }) => Expr::Alias(Alias {
                expr: Box::new(taken.take_from(expr.as_ref().clone(), false)?),
                relation: relation.clone(),
                name: name.clone(),
                metadata: metadata.clone(),
            }),
            expr => {
                let before = taken.subqueries.len();
                let rewritten = taken.take_from(expr.clone(), false)?;
                if taken.subqueries.len() == before {
                    rewritten
                } else {
                    // Keeps the column's name.
                    let (relation, name) = expr.qualified_name();
                    rewritten.alias_qualified(relation, name)
                }
            }
        });
    }
    if taken.subqueries.is_empty() {
        return Ok(None);
    }
    let apply = taken.into_apply(projection.input.as_ref().clone())?;
    Ok(Some(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(apply),
    )?)))
}

/// The subqueries taken out of one node's expressions.
struct Taken<'a> {
    input_schema: &'a DFSchema,
    which: Which,
    subqueries: Vec<Correlated>,
    /// Probes of IN and ANY computed under the Apply, aliased to their columns.
    probes: Vec<Expr>,
}

impl<'a> Taken<'a> {
    fn new(input_schema: &'a DFSchema, which: Which) -> Self {
        Self {
            input_schema,
            which,
            subqueries: Vec::new(),
            probes: Vec::new(),
        }
    }

    /// A name no input column, probe or earlier subquery has.
    fn fresh_name(&self, prefix: &str) -> String {
        let n = self.input_schema.fields().len() + self.probes.len() + self.subqueries.len();
        format!("__{prefix}_{n}")
    }

    /// `expr` with each subquery this node can run replaced by its column;
    /// `joined` says that `expr` itself is an IN that DataFusion plans as a
    /// semi or anti join.
    fn take_from(&mut self, expr: Expr, joined: bool) -> Result<Expr> {
        let mut top = true;
        expr.transform_down(|e| {
            let joined = std::mem::replace(&mut top, false) && joined;
            if !is_subquery(&e) {
                return Ok(Transformed::no(e));
            }
            match self.take(&e, joined)? {
                Some(column) => Ok(Transformed::new(column, true, TreeNodeRecursion::Jump)),
                None => Ok(Transformed::new(e, false, TreeNodeRecursion::Jump)),
            }
        })
        .map(|t| t.data)
    }

    /// The column holding `expr`'s answer, or `None` where DataFusion runs it
    /// (an uncorrelated scalar subquery), it reads a query further out, or
    /// this pass does not take it.
    fn take(&mut self, expr: &Expr, joined: bool) -> Result<Option<Expr>> {
        let Some(subquery) = super::subquery_of(expr) else {
            return Ok(None);
        };
        let references = outer_references(&subquery.subquery)?;
        let outer = references.free();
        if !outer.iter().all(|c| self.input_schema.has_column(c)) {
            return Ok(None);
        }
        let wanted = match self.which {
            Which::All => !(matches!(expr, Expr::ScalarSubquery(_)) && outer.is_empty()),
            Which::MisplannedByDataFusion => {
                let marked =
                    matches!(expr, Expr::InSubquery(_) | Expr::SetComparison(_)) && !joined;
                marked
                    || probe_has_subquery(expr)
                    || (!outer.is_empty()
                        && super::single_row::holds_single_row(&subquery.subquery))
                    || !references.through_nested.is_empty()
                    || misplanned_not_in(expr, !outer.is_empty())
            }
        };
        if !wanted {
            return Ok(None);
        }
        let kind = match expr {
            Expr::Exists(Exists { negated, .. }) => Kind::Exists { negated: *negated },
            Expr::InSubquery(InSubquery { expr, negated, .. }) => {
                let Some(probe) = self.probe(expr) else {
                    return Ok(None);
                };
                Kind::Compare {
                    probe,
                    op: Operator::Eq,
                    all: false,
                    negated: *negated,
                }
            }
            Expr::SetComparison(SetComparison {
                expr,
                op,
                quantifier,
                ..
            }) => {
                let Some(probe) = self.probe(expr) else {
                    return Ok(None);
                };
                Kind::Compare {
                    probe,
                    op: *op,
                    all: *quantifier == SetQuantifier::All,
                    negated: false,
                }
            }
            _ => Kind::Scalar,
        };
        let output = self.fresh_name("subquery");
        self.subqueries.push(Correlated {
            plan: subquery.subquery.clone(),
            kind,
            outer,
            output: output.clone(),
        });
        Ok(Some(Expr::Column(Column::new_unqualified(output))))
    }

    /// The input column an IN or ANY compares, computed under the Apply
    /// unless it is one already; `None` when it cannot be computed there.
    fn probe(&mut self, probe: &Expr) -> Option<Column> {
        if let Expr::Column(column) = probe
            && self.input_schema.has_column(column)
        {
            return Some(column.clone());
        }
        // Below the Apply, a scalar subquery of the probe is planned like any
        // other (decorrelated, or given an Apply of its own).
        let computable = !probe
            .exists(|e| {
                Ok(match e {
                    Expr::OuterReferenceColumn(..) => true,
                    Expr::ScalarSubquery(subquery) => !outer_references(&subquery.subquery)?
                        .free()
                        .iter()
                        .all(|c| self.input_schema.has_column(c)),
                    other => is_subquery(other),
                })
            })
            .unwrap_or(true);
        if !computable {
            return None;
        }
        let name = self.fresh_name("probe");
        self.probes.push(probe.clone().alias(&name));
        Some(Column::new_unqualified(name))
    }

    fn into_apply(self, input: LogicalPlan) -> Result<LogicalPlan> {
        let input = if self.probes.is_empty() {
            input
        } else {
            let columns = input.schema().columns().into_iter().map(Expr::Column);
            let exprs = columns.chain(self.probes).collect();
            LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(input))?)
        };
        let apply = Apply::try_new(input, self.subqueries)?;
        Ok(LogicalPlan::Extension(Extension {
            node: Arc::new(apply),
        }))
    }
}

/// The outer references of a subquery's plan that no query inside it binds.
struct OuterReferences {
    /// Read by the plan's own nodes.
    direct: Vec<Column>,
    /// Read by subqueries nested in it, naming none of its columns.
    through_nested: Vec<Column>,
}

impl OuterReferences {
    fn free(&self) -> Vec<Column> {
        let mut unique: Vec<Column> = Vec::new();
        for column in self.direct.iter().chain(&self.through_nested) {
            if !unique.contains(column) {
                unique.push(column.clone());
            }
        }
        unique
    }
}

fn outer_references(plan: &LogicalPlan) -> Result<OuterReferences> {
    let mut direct: Vec<Column> = Vec::new();
    let mut nested: Vec<Column> = Vec::new();
    let mut own: HashSet<Column> = HashSet::new();
    plan.apply(|node| {
        own.extend(node.schema().columns());
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::OuterReferenceColumn(_, column) = e {
                    direct.push(column.clone());
                } else if let Some(subquery) = super::subquery_of(e) {
                    nested.extend(outer_references(&subquery.subquery)?.free());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    let through_nested = nested.into_iter().filter(|c| !own.contains(c)).collect();
    Ok(OuterReferences {
        direct,
        through_nested,
    })
}

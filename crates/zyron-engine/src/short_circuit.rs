//! `AND` and `OR` that evaluate their right side only on the rows their left
//! side leaves undecided, as PostgreSQL does row by row: `WHERE b <> 0 AND
//! a / b > 2` must not divide by zero. DataFusion's `AND` evaluates its right
//! side on the whole batch once more than a fifth of the rows pass the left
//! side, which is harmless only where the right side cannot fail.
//!
//! [`ShortCircuit`] is the physical optimizer rule that gives the operators
//! whose right side may fail a [`LazyLogicExpr`] in filters, join conditions,
//! projections and aggregates; it runs last, after the filters have been
//! pushed down and the parquet pruning predicates taken from them.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, RecordBatch};
use datafusion::arrow::compute::kernels::boolean::{and_kleene, or_kleene};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::{
    Aggregate, Case as LogicalCase, ColumnarValue, Expr, LogicalPlan, Operator,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NotExpr,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{
    HashJoinExec, NestedLoopJoinExec, NestedLoopJoinExecBuilder,
};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

/// The right side runs on the whole batch first where more than one row in
/// this many is undecided (DataFusion's own `AND` copies rows out below it).
const EAGER_SHARE_DENOMINATOR: usize = 5;

fn is_volatile(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.is_volatile_node() || expr.children().into_iter().any(is_volatile)
}

/// `left AND right` or `left OR right` with `right` evaluated only where
/// `left` does not decide the row (for `AND`: where `left` is not false).
#[derive(Debug, Eq)]
pub struct LazyLogicExpr {
    left: Arc<dyn PhysicalExpr>,
    is_and: bool,
    right: Arc<dyn PhysicalExpr>,
}

// By hand, as DataFusion's `BinaryExpr` does: the derived impls try to move
// out of the `Arc<dyn PhysicalExpr>` fields.
impl PartialEq for LazyLogicExpr {
    fn eq(&self, other: &Self) -> bool {
        self.left.eq(&other.left) && self.is_and == other.is_and && self.right.eq(&other.right)
    }
}

impl Hash for LazyLogicExpr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.left.hash(state);
        self.is_and.hash(state);
        self.right.hash(state);
    }
}

impl LazyLogicExpr {
    fn operator(&self) -> Operator {
        if self.is_and {
            Operator::And
        } else {
            Operator::Or
        }
    }

    /// The rows whose answer depends on `right`: for `AND` those where `left`
    /// is true or NULL, for `OR` those where it is false or NULL.
    fn undecided(&self, left: &BooleanArray) -> BooleanArray {
        let deciding = if self.is_and {
            !left.values()
        } else {
            left.values().clone()
        };
        let deciding = match left.nulls() {
            Some(valid) => &deciding & valid.inner(),
            None => deciding,
        };
        BooleanArray::new(!&deciding, None)
    }
}

impl fmt::Display for LazyLogicExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}) {} ({})", self.left, self.operator(), self.right)
    }
}

impl PhysicalExpr for LazyLogicExpr {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.left.nullable(input_schema)? || self.right.nullable(input_schema)?)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        let nullable = self.nullable(input_schema)?;
        Ok(Arc::new(Field::new(
            self.to_string(),
            DataType::Boolean,
            nullable,
        )))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let rows = batch.num_rows();
        let left = match self.left.evaluate(batch)? {
            ColumnarValue::Scalar(value) => {
                return match (value.is_null(), value == self.is_and.into()) {
                    // TRUE AND r, FALSE OR r: r. NULL AND r: r decides too.
                    (false, true) => self.right.evaluate(batch),
                    (false, false) => Ok(ColumnarValue::Scalar(value)),
                    (true, _) => {
                        let left = value.to_array_of_size(rows)?;
                        match left.as_any().downcast_ref::<BooleanArray>() {
                            Some(left) => self.combine(left, batch),
                            None => internal_err!("{self}: the left side is not boolean"),
                        }
                    }
                };
            }
            ColumnarValue::Array(left) => left,
        };
        let Some(left) = left.as_any().downcast_ref::<BooleanArray>() else {
            return internal_err!("{self}: the left side is not boolean");
        };
        self.combine(left, batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [left, right] = <[_; 2]>::try_from(children).map_err(|_| {
            datafusion::common::DataFusionError::Internal(format!("{self}: two children"))
        })?;
        Ok(Arc::new(Self {
            left,
            is_and: self.is_and,
            right,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        self.left.fmt_sql(f)?;
        write!(f, ") {} (", self.operator())?;
        self.right.fmt_sql(f)?;
        write!(f, ")")
    }
}

impl LazyLogicExpr {
    fn combine(&self, left: &BooleanArray, batch: &RecordBatch) -> Result<ColumnarValue> {
        let undecided = self.undecided(left);
        let undecided_rows = undecided.true_count();
        if undecided_rows == 0 {
            return Ok(ColumnarValue::Array(Arc::new(left.clone())));
        }
        // Where most rows are undecided, copying them out costs more than
        // running the right side on every row, which is right unless it
        // fails on a row the left side decided: then only the undecided run.
        let whole_batch = undecided_rows * EAGER_SHARE_DENOMINATOR > batch.num_rows()
            && !is_volatile(&self.right);
        let right = match whole_batch.then(|| self.right.evaluate(batch)) {
            Some(Ok(right)) => right,
            // Rows outside `undecided` come back NULL, which the left side's
            // FALSE (for AND) or TRUE (for OR) overrides.
            _ => self.right.evaluate_selection(batch, &undecided)?,
        }
        .into_array(batch.num_rows())?;
        let Some(right) = right.as_any().downcast_ref::<BooleanArray>() else {
            return internal_err!("{self}: the right side is not boolean");
        };
        let combined = if self.is_and {
            and_kleene(left, right)?
        } else {
            or_kleene(left, right)?
        };
        Ok(ColumnarValue::Array(Arc::new(combined)))
    }
}

/// Whether evaluating `expr` on a row can raise an error: anything but
/// columns, constants, parameters, comparisons, pattern matches, null tests,
/// NOT, IN lists and widening casts of those is assumed to (arithmetic
/// overflows, division by zero, casts of text, any other function). A bad
/// pattern fails on every row alike, so no condition guards it.
pub(crate) fn may_fail(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    let infallible_node = if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        use Operator::*;
        matches!(
            binary.op(),
            Eq | NotEq
                | Lt
                | LtEq
                | Gt
                | GtEq
                | IsDistinctFrom
                | IsNotDistinctFrom
                | And
                | Or
                | RegexMatch
                | RegexIMatch
                | RegexNotMatch
                | RegexNotIMatch
                | LikeMatch
                | ILikeMatch
                | NotLikeMatch
                | NotILikeMatch
        )
    } else if let Some(cast) = expr.downcast_ref::<CastExpr>() {
        cast.expr()
            .data_type(schema)
            .is_ok_and(|from| widens(&from, cast.cast_type()))
    } else if let Some(function) = expr.downcast_ref::<ScalarFunctionExpr>() {
        function.name() == crate::params::PARAMETER_FUNCTION
    } else {
        expr.downcast_ref::<Column>().is_some()
            || expr.downcast_ref::<Literal>().is_some()
            || expr.downcast_ref::<IsNullExpr>().is_some()
            || expr.downcast_ref::<IsNotNullExpr>().is_some()
            || expr.downcast_ref::<NotExpr>().is_some()
            || expr.downcast_ref::<LikeExpr>().is_some()
            || expr.downcast_ref::<InListExpr>().is_some()
            || expr.downcast_ref::<LazyLogicExpr>().is_some()
    };
    !infallible_node || expr.children().into_iter().any(|c| may_fail(c, schema))
}

/// Casts that cannot fail: to a wider integer or float, or between string types.
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let rank = |t: &DataType| match t {
        Int8 => Some(1),
        Int16 => Some(2),
        Int32 => Some(3),
        Int64 => Some(4),
        _ => None,
    };
    match (from, to) {
        _ if from == to => true,
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        (Int8 | Int16 | Int32 | Int64 | Float32, Float64) => true,
        _ => matches!((rank(from), rank(to)), (Some(f), Some(t)) if f <= t),
    }
}

/// Whether a top-level `AND` chain is a list of conditions that may run in
/// any order (a filter's, as PostgreSQL's qual lists are) or an expression
/// evaluated from left to right (anything else).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Conditions {
    AnyOrder,
    AsWritten,
}

/// `expr` with every `AND` and `OR` whose right side may fail made lazy. A
/// filter's conditions that cannot fail go first, as PostgreSQL orders a qual
/// list by cost: `WHERE a / b > 2 AND b <> 0` answers there too.
pub fn make_lazy(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
    conditions: Conditions,
) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    let Some(op) = logic_operator(expr) else {
        let children: Vec<_> = expr.children().into_iter().cloned().collect();
        let mut changed = false;
        let mut lazy_children = Vec::with_capacity(children.len());
        for child in &children {
            let lazy = make_lazy(child, schema, Conditions::AsWritten)?;
            changed |= lazy.transformed;
            lazy_children.push(lazy.data);
        }
        return Ok(if changed {
            Transformed::yes(Arc::clone(expr).with_new_children(lazy_children)?)
        } else {
            Transformed::no(Arc::clone(expr))
        });
    };
    let mut terms = Vec::new();
    flatten(expr, op, &mut terms);
    let mut changed = false;
    let mut lazy_terms = Vec::with_capacity(terms.len());
    for term in terms {
        let lazy = make_lazy(&term, schema, Conditions::AsWritten)?;
        changed |= lazy.transformed;
        lazy_terms.push(lazy.data);
    }
    let reorder = conditions == Conditions::AnyOrder && op == Operator::And;
    let risky =
        |(i, term): (usize, &Arc<dyn PhysicalExpr>)| (i > 0 || reorder) && may_fail(term, schema);
    if !changed && !lazy_terms.iter().enumerate().any(risky) {
        return Ok(Transformed::no(Arc::clone(expr)));
    }
    if reorder {
        // A stable sort: safe conditions first, each group in written order.
        lazy_terms.sort_by_key(|t| may_fail(t, schema));
    }
    let mut terms = lazy_terms.into_iter();
    let mut chain = terms.next().expect("a logic operator has two sides");
    for term in terms {
        chain = if may_fail(&term, schema) {
            Arc::new(LazyLogicExpr {
                left: chain,
                is_and: op == Operator::And,
                right: term,
            })
        } else {
            Arc::new(BinaryExpr::new(chain, op, term))
        };
    }
    Ok(Transformed::yes(chain))
}

fn logic_operator(expr: &Arc<dyn PhysicalExpr>) -> Option<Operator> {
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    matches!(binary.op(), Operator::And | Operator::Or).then_some(*binary.op())
}

/// The operands of a chain of one logic operator, left to right.
fn flatten(expr: &Arc<dyn PhysicalExpr>, op: Operator, terms: &mut Vec<Arc<dyn PhysicalExpr>>) {
    match expr.downcast_ref::<BinaryExpr>() {
        Some(binary) if *binary.op() == op => {
            flatten(binary.left(), op, terms);
            flatten(binary.right(), op, terms);
        }
        _ => terms.push(Arc::clone(expr)),
    }
}

/// The conditions of an UPDATE or DELETE (each one a conjunct) made lazy,
/// those that cannot fail first; [`crate::heap::write::matches`] evaluates
/// each only on the rows the ones before it kept.
pub fn lazy_conditions(
    conditions: Vec<Arc<dyn PhysicalExpr>>,
    schema: &Schema,
) -> Result<Vec<Arc<dyn PhysicalExpr>>> {
    let mut lazy = conditions
        .iter()
        .map(|c| make_lazy(c, schema, Conditions::AnyOrder).map(|t| t.data))
        .collect::<Result<Vec<_>>>()?;
    lazy.sort_by_key(|c| may_fail(c, schema));
    Ok(lazy)
}

#[derive(Debug)]
pub struct ShortCircuit;

impl PhysicalOptimizerRule for ShortCircuit {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(lazy_node).data()
    }

    fn name(&self) -> &str {
        "zyron_short_circuit"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn lazy_node(node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let input_schema = match node.children().first() {
        Some(input) => input.schema(),
        None => return Ok(Transformed::no(node)),
    };
    if let Some(filter) = node.downcast_ref::<FilterExec>() {
        let predicate = make_lazy(filter.predicate(), &input_schema, Conditions::AnyOrder)?;
        if !predicate.transformed {
            return Ok(Transformed::no(node));
        }
        let rebuilt = FilterExecBuilder::from(filter)
            .with_predicate(predicate.data)
            .build()?;
        return Ok(Transformed::yes(Arc::new(rebuilt)));
    }
    if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        let mut changed = false;
        let mut exprs = Vec::with_capacity(projection.expr().len());
        for item in projection.expr() {
            let lazy = make_lazy(&item.expr, &input_schema, Conditions::AsWritten)?;
            changed |= lazy.transformed;
            exprs.push(ProjectionExpr {
                expr: lazy.data,
                alias: item.alias.clone(),
            });
        }
        if !changed {
            return Ok(Transformed::no(node));
        }
        let rebuilt = ProjectionExec::try_new_with_schema_metadata(
            exprs,
            Arc::clone(projection.input()),
            projection.schema().as_ref(),
        )?;
        return Ok(Transformed::yes(Arc::new(rebuilt)));
    }
    if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        return Ok(match lazy_join_filter(join.filter())? {
            Some(filter) => {
                Transformed::yes(Arc::new(join.builder().with_filter(Some(filter)).build()?))
            }
            None => Transformed::no(node),
        });
    }
    if let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() {
        return Ok(match lazy_join_filter(join.filter())? {
            Some(filter) => Transformed::yes(Arc::new(
                NestedLoopJoinExecBuilder::from(join)
                    .with_filter(Some(filter))
                    .build()?,
            )),
            None => Transformed::no(node),
        });
    }
    if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
        return lazy_aggregate_filters(aggregate, &input_schema).map(|rebuilt| match rebuilt {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(node),
        });
    }
    Ok(Transformed::no(node))
}

/// A join's non-equality condition, a qual list as a filter's is.
fn lazy_join_filter(filter: Option<&JoinFilter>) -> Result<Option<JoinFilter>> {
    let Some(filter) = filter else {
        return Ok(None);
    };
    let lazy = make_lazy(filter.expression(), filter.schema(), Conditions::AnyOrder)?;
    Ok(lazy.transformed.then(|| {
        JoinFilter::new(
            lazy.data,
            filter.column_indices().to_vec(),
            Arc::clone(filter.schema()),
        )
    }))
}

/// An aggregate whose arguments hold an `AND` or `OR` that may fail (the
/// `CASE WHEN filter` of [`FilteredAggregateArguments`]) with them made lazy.
fn lazy_arguments(
    aggr: &AggregateFunctionExpr,
    input_schema: &Schema,
) -> Result<Option<AggregateFunctionExpr>> {
    let mut changed = false;
    let mut args = Vec::new();
    for arg in aggr.expressions() {
        let lazy = make_lazy(&arg, input_schema, Conditions::AsWritten)?;
        changed |= lazy.transformed;
        args.push(lazy.data);
    }
    if !changed {
        return Ok(None);
    }
    let order_by = aggr
        .order_bys()
        .iter()
        .map(|o| Arc::clone(&o.expr))
        .collect();
    Ok(aggr.with_new_expressions(args, order_by))
}

fn lazy_aggregate_filters(
    aggregate: &AggregateExec,
    input_schema: &Schema,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut changed = false;
    let mut filters = Vec::with_capacity(aggregate.filter_expr().len());
    for filter in aggregate.filter_expr() {
        filters.push(match filter {
            Some(filter) => {
                let lazy = make_lazy(filter, input_schema, Conditions::AsWritten)?;
                changed |= lazy.transformed;
                Some(lazy.data)
            }
            None => None,
        });
    }
    let mut aggr_exprs = Vec::with_capacity(aggregate.aggr_expr().len());
    for aggr in aggregate.aggr_expr() {
        match lazy_arguments(aggr, input_schema)? {
            Some(lazy) => {
                changed = true;
                aggr_exprs.push(Arc::new(lazy));
            }
            None => aggr_exprs.push(Arc::clone(aggr)),
        }
    }
    if !changed {
        return Ok(None);
    }
    let rebuilt = AggregateExec::try_new(
        *aggregate.mode(),
        aggregate.group_expr().clone(),
        aggr_exprs,
        filters,
        Arc::clone(aggregate.input()),
        aggregate.input_schema(),
    )?
    .with_limit_options(aggregate.limit_options());
    Ok(Some(Arc::new(rebuilt)))
}

/// Aggregate arguments computed only on the rows their FILTER keeps, as
/// PostgreSQL computes them: `sum(a / b) FILTER (WHERE b <> 0)` must not
/// divide by zero. DataFusion's grouped aggregation evaluates arguments on
/// every row first, so an argument that is more than a column or a constant
/// becomes `CASE WHEN filter THEN argument END`, whose branch runs lazily.
#[derive(Debug, Default)]
pub struct FilteredAggregateArguments;

impl AnalyzerRule for FilteredAggregateArguments {
    fn name(&self) -> &str {
        "filtered_aggregate_arguments"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Aggregate(aggregate) => guard_arguments(aggregate),
            other => Ok(Transformed::no(other)),
        })
        .data()
    }
}

fn guard_arguments(aggregate: Aggregate) -> Result<Transformed<LogicalPlan>> {
    let mut changed = false;
    let mut aggr_expr = Vec::with_capacity(aggregate.aggr_expr.len());
    for expr in &aggregate.aggr_expr {
        let guarded = guard_filtered_arguments(expr.clone())?;
        if guarded.transformed {
            changed = true;
            let name = expr.schema_name().to_string();
            aggr_expr.push(guarded.data.unalias().alias(name));
        } else {
            aggr_expr.push(guarded.data);
        }
    }
    if !changed {
        return Ok(Transformed::no(LogicalPlan::Aggregate(aggregate)));
    }
    let rebuilt = Aggregate::try_new(aggregate.input, aggregate.group_expr, aggr_expr)?;
    Ok(Transformed::yes(LogicalPlan::Aggregate(rebuilt)))
}

fn guard_filtered_arguments(expr: Expr) -> Result<Transformed<Expr>> {
    expr.transform_up(|node| {
        let Expr::AggregateFunction(mut function) = node else {
            return Ok(Transformed::no(node));
        };
        let Some(filter) = function.params.filter.clone() else {
            return Ok(Transformed::no(Expr::AggregateFunction(function)));
        };
        let mut changed = false;
        for arg in function.params.args.iter_mut() {
            if matches!(arg, Expr::Column(_) | Expr::Literal(..)) {
                continue;
            }
            changed = true;
            *arg = Expr::Case(LogicalCase::new(
                None,
                vec![(filter.clone(), Box::new(arg.clone()))],
                None,
            ));
        }
        Ok(if changed {
            Transformed::yes(Expr::AggregateFunction(function))
        } else {
            Transformed::no(Expr::AggregateFunction(function))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int32Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{binary, col, lit};

    fn batch(left: Vec<Option<bool>>, divisor: Vec<Option<i32>>) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("l", DataType::Boolean, true),
            Field::new("d", DataType::Int32, true),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from(left)),
            Arc::new(Int32Array::from(divisor)),
        ];
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    /// `10 / d > 4`: true for d = 1 and 2, false for 5, NULL for NULL, an
    /// error for 0.
    fn fallible(schema: &Schema) -> Arc<dyn PhysicalExpr> {
        let quotient = binary(
            lit(10i32),
            Operator::Divide,
            col("d", schema).unwrap(),
            schema,
        );
        binary(quotient.unwrap(), Operator::Gt, lit(4i32), schema).unwrap()
    }

    fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<Vec<Option<bool>>> {
        let value = expr.evaluate(batch)?.into_array(batch.num_rows())?;
        Ok(value
            .as_any()
            .downcast_ref::<BooleanArray>()
            .unwrap()
            .iter()
            .collect())
    }

    /// Every pair of three-valued operands gives Kleene's answer, and the right
    /// side, which divides by zero on the decided rows, never runs there.
    #[test]
    fn right_side_runs_only_on_undecided_rows() {
        let values = [Some(true), Some(false), None];
        let divisor_for = |r: Option<bool>| match r {
            Some(true) => Some(1),
            Some(false) => Some(5),
            None => None,
        };
        for is_and in [true, false] {
            let decided = Some(!is_and);
            let mut left = Vec::new();
            let mut divisor = Vec::new();
            let mut expected = Vec::new();
            for l in values {
                for r in values {
                    left.push(l);
                    divisor.push(if l == decided {
                        Some(0)
                    } else {
                        divisor_for(r)
                    });
                    expected.push(match (is_and, l, r) {
                        (true, Some(false), _) | (true, _, Some(false)) => Some(false),
                        (true, Some(true), Some(true)) => Some(true),
                        (false, Some(true), _) | (false, _, Some(true)) => Some(true),
                        (false, Some(false), Some(false)) => Some(false),
                        _ => None,
                    });
                }
            }
            let batch = batch(left, divisor);
            let schema = batch.schema();
            let op = if is_and { Operator::And } else { Operator::Or };
            let eager = binary(col("l", &schema).unwrap(), op, fallible(&schema), &schema).unwrap();
            assert!(
                evaluate(&eager, &batch).is_err(),
                "the eager {op} divides by zero"
            );
            let lazy = make_lazy(&eager, &schema, Conditions::AsWritten).unwrap();
            assert!(lazy.transformed);
            assert_eq!(evaluate(&lazy.data, &batch).unwrap(), expected, "{op}");
        }
    }

    /// A filter's safe conditions run first; an expression's run as written;
    /// operators whose right side cannot fail stay DataFusion's.
    #[test]
    fn only_filters_reorder_and_safe_operators_stay() {
        let batch = batch(vec![Some(true), Some(false)], vec![Some(0), Some(0)]);
        let schema = batch.schema();
        let guard = binary(
            col("d", &schema).unwrap(),
            Operator::NotEq,
            lit(0i32),
            &schema,
        )
        .unwrap();
        let written = binary(
            fallible(&schema),
            Operator::And,
            Arc::clone(&guard),
            &schema,
        )
        .unwrap();
        let filter = make_lazy(&written, &schema, Conditions::AnyOrder)
            .unwrap()
            .data;
        assert_eq!(
            evaluate(&filter, &batch).unwrap(),
            vec![Some(false), Some(false)]
        );
        let expression = make_lazy(&written, &schema, Conditions::AsWritten).unwrap();
        assert!(!expression.transformed);
        assert!(evaluate(&expression.data, &batch).is_err());
        let safe = binary(col("l", &schema).unwrap(), Operator::And, guard, &schema).unwrap();
        assert!(
            !make_lazy(&safe, &schema, Conditions::AnyOrder)
                .unwrap()
                .transformed
        );
    }
}

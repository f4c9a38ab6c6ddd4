//! Scalar subqueries without an aggregate, such as
//! `(SELECT y FROM t2 WHERE t2.x = t1.a)`: PostgreSQL answers the one row's
//! value, NULL for none and 21000 for more. DataFusion refuses correlated
//! ones before planning (its issue #16137), so this analyzer rule gives each
//! one an aggregate with exactly that meaning, `single_row(y)`, which
//! DataFusion then decorrelates like any other aggregate (or an Apply runs).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result, ScalarValue, internal_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Expr, LogicalPlan, LogicalPlanBuilder, Signature,
    Subquery, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use zyron_common::{SqlState, ZyronError};

use crate::heap::to_df;

/// Gives correlated scalar subqueries without an aggregate a [`SingleRow`] one.
#[derive(Debug, Default)]
pub struct AggregateSingleRowSubqueries;

impl AnalyzerRule for AggregateSingleRowSubqueries {
    fn name(&self) -> &str {
        "aggregate_single_row_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| {
                expr.transform(|e| match e {
                    Expr::ScalarSubquery(subquery) if needs_single_row(&subquery) => Ok(
                        Transformed::yes(Expr::ScalarSubquery(single_row(subquery)?)),
                    ),
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|t| t.data)
    }
}

/// A scalar subquery that may return more than one row, or none where its
/// value is never NULL: every one except an aggregate without GROUP BY (one
/// row, always), unless it is uncorrelated with a nullable value (DataFusion
/// runs those itself, 21000 included). No row must read as NULL, and
/// DataFusion takes the nullability of the value for that of the subquery:
/// `(SELECT 'ab' FROM t WHERE false) IS NULL` was simplified to false.
fn needs_single_row(subquery: &Subquery) -> bool {
    let mut plan = subquery.subquery.as_ref();
    while let LogicalPlan::Projection(projection) = plan {
        plan = projection.input.as_ref();
    }
    if let LogicalPlan::Aggregate(aggregate) = plan
        && aggregate.group_expr.is_empty()
    {
        return false;
    }
    let fields = subquery.subquery.schema().fields();
    let never_null = fields.len() == 1 && !fields[0].is_nullable();
    let correlated = !subquery.outer_ref_columns.is_empty();
    never_null || (correlated && subquery.subquery.max_rows().is_none_or(|n| n > 1))
}

fn single_row(mut subquery: Subquery) -> Result<Subquery> {
    let plan = subquery.subquery.as_ref().clone();
    let schema = plan.schema().clone();
    if schema.fields().len() != 1 {
        return Ok(subquery); // DataFusion's own check reports it
    }
    let (qualifier, field) = schema.qualified_field(0);
    let value = Expr::Column(Column::new(qualifier.cloned(), field.name()));
    let call = AggregateUDF::from(SingleRow::new()).call(vec![value]);
    let aggregated = LogicalPlanBuilder::from(plan)
        .aggregate(Vec::<Expr>::new(), vec![call])?
        .build()?;
    let (agg_qualifier, agg_field) = aggregated.schema().qualified_field(0);
    let answer = Expr::Column(Column::new(agg_qualifier.cloned(), agg_field.name()))
        .alias_qualified(qualifier.cloned(), field.name());
    subquery.subquery = Arc::new(
        LogicalPlanBuilder::from(aggregated)
            .project(vec![answer])?
            .build()?,
    );
    Ok(subquery)
}

/// Whether `plan`'s own level aggregates with [`SingleRow`].
pub fn holds_single_row(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if let LogicalPlan::Aggregate(aggregate) = node {
            found |= aggregate.aggr_expr.iter().any(|e| {
                matches!(e.clone().unalias(), Expr::AggregateFunction(call)
                    if (call.func.inner().as_ref() as &dyn std::any::Any).is::<SingleRow>())
            });
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

/// `single_row(x)`: the value of the only row, NULL for none, 21000 for more.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleRow {
    signature: Signature,
}

impl SingleRow {
    pub fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for SingleRow {
    fn name(&self) -> &str {
        "single_row"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [t] => Ok(t.clone()),
            _ => internal_err!("single_row takes one argument"),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SingleRowAccumulator {
            rows: 0,
            value: ScalarValue::try_from(args.return_field.data_type())?,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format_state_name(args.name, "value"),
                args.return_type().clone(),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "rows"),
                DataType::UInt64,
                false,
            )),
        ])
    }
}

#[derive(Debug)]
struct SingleRowAccumulator {
    rows: u64,
    value: ScalarValue,
}

impl SingleRowAccumulator {
    fn add(&mut self, rows: u64, first: impl FnOnce() -> Result<ScalarValue>) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        self.rows += rows;
        if self.rows > 1 {
            return Err(to_df(ZyronError::new(
                SqlState::CARDINALITY_VIOLATION,
                "more than one row returned by a subquery used as an expression",
            )));
        }
        self.value = first()?;
        Ok(())
    }
}

impl Accumulator for SingleRowAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let column = &values[0];
        self.add(column.len() as u64, || {
            ScalarValue::try_from_array(column, 0)
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (values, rows) = (&states[0], &states[1]);
        let Some(rows) = rows.as_any().downcast_ref::<UInt64Array>() else {
            return internal_err!("single_row's state holds its row count as UInt64");
        };
        for (i, n) in rows.iter().enumerate() {
            let n = n.unwrap_or(0);
            self.add(n, || ScalarValue::try_from_array(values, i))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::UInt64(Some(self.rows)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

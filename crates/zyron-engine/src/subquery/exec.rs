//! `ApplyExec`: runs each subquery of an [`Apply`] once per distinct set of
//! outer values, with those values in place of the outer references, and adds
//! the answers to the input's rows.
//!
//! With the outer values as literals a subquery is an ordinary query, which
//! DataFusion optimizes and runs like any other (a key becomes an index
//! lookup). Answers are kept per outer values, so a repeated value costs a
//! lookup, up to [`MAX_CACHED_ANSWERS`] per subquery.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, Scalar, new_empty_array,
};
use datafusion::arrow::compute::kernels::cmp;
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result, ScalarValue, internal_err};
use datafusion::execution::context::SessionState;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, LogicalPlan, LogicalPlanBuilder, Operator, UserDefinedLogicalNode,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::StreamExt;
use zyron_common::{SqlState, ZyronError};

use super::apply::{Apply, Correlated, Kind};
use crate::heap::to_df;

/// Answers kept per subquery before the oldest are dropped (all of them: the
/// cache is a bound on memory, not a policy).
pub const MAX_CACHED_ANSWERS: usize = 16_384;

/// Plans an [`Apply`] as an [`ApplyExec`].
#[derive(Debug)]
pub struct ApplyPlanner;

#[async_trait]
impl ExtensionPlanner for ApplyPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(apply) = node.as_any().downcast_ref::<Apply>() else {
            return Ok(None);
        };
        let Some(state) = session.as_any().downcast_ref::<SessionState>() else {
            return internal_err!("Apply is planned only within a SessionState");
        };
        let input_schema = logical_inputs[0].schema();
        let index = |column: &Column| input_schema.index_of_column(column);
        let subqueries = apply
            .subqueries
            .iter()
            .map(|s| {
                let outer = s
                    .outer
                    .iter()
                    .map(|c| Ok((c.clone(), index(c)?)))
                    .collect::<Result<Vec<_>>>()?;
                let probe = match &s.kind {
                    Kind::Compare { probe, .. } => {
                        let i = index(probe)?;
                        Some((i, input_schema.field(i).data_type().clone()))
                    }
                    _ => None,
                };
                Ok(Runnable {
                    subquery: s.clone(),
                    outer,
                    probe,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::new(apply.schema().as_arrow().clone());
        Ok(Some(Arc::new(ApplyExec::new(
            physical_inputs[0].clone(),
            subqueries,
            schema,
            Arc::new(state.clone()),
        ))))
    }
}

/// A subquery with the input positions of the values it reads.
#[derive(Clone, Debug)]
struct Runnable {
    subquery: Correlated,
    outer: Vec<(Column, usize)>,
    /// The input position and type of an IN or ANY/ALL probe.
    probe: Option<(usize, DataType)>,
}

#[derive(Debug)]
pub struct ApplyExec {
    input: Arc<dyn ExecutionPlan>,
    subqueries: Vec<Runnable>,
    schema: SchemaRef,
    /// Plans the subqueries; each execution swaps in its task's settings,
    /// which carry its transaction and snapshot.
    state: Arc<SessionState>,
    properties: Arc<PlanProperties>,
}

impl ApplyExec {
    fn new(
        input: Arc<dyn ExecutionPlan>,
        subqueries: Vec<Runnable>,
        schema: SchemaRef,
        state: Arc<SessionState>,
    ) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            input.output_partitioning().clone(),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            input,
            subqueries,
            schema,
            state,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for ApplyExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self
            .subqueries
            .iter()
            .map(|s| s.subquery.output.as_str())
            .collect();
        write!(f, "ApplyExec: {}", names.join(", "))
    }
}

impl ExecutionPlan for ApplyExec {
    fn name(&self) -> &str {
        "ApplyExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("ApplyExec takes one input");
        }
        Ok(Arc::new(Self::new(
            children.remove(0),
            self.subqueries.clone(),
            self.schema.clone(),
            self.state.clone(),
        )))
    }

    #[allow(deprecated)]
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(
                datafusion::physical_plan::execution_plan::ChildrenPropertiesMode::Recompute,
            ),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context.clone())?;
        let state = SessionStateBuilder::new_from_existing(self.state.as_ref().clone())
            .with_config(context.session_config().clone())
            .with_runtime_env(context.runtime_env())
            .build();
        let answers = Answers {
            state,
            context,
            subqueries: self.subqueries.clone(),
            cache: vec![HashMap::new(); self.subqueries.len()],
        };
        let schema = self.schema.clone();
        let stream = futures::stream::unfold(
            (input, answers, schema.clone()),
            |(mut input, mut answers, schema)| async move {
                let batch = match input.next().await? {
                    Ok(batch) => answers.add_columns(batch, &schema).await,
                    Err(e) => Err(e),
                };
                Some((batch, (input, answers, schema)))
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// What a subquery returned for one set of outer values.
enum Answer {
    /// A scalar subquery's value (NULL for no row).
    Value(ScalarValue),
    /// Whether an EXISTS subquery returned a row.
    Exists(bool),
    /// The values an ANY/ALL subquery returned, as the probe's type.
    Values(ArrayRef),
    /// The values an IN subquery returned, for lookups.
    Members(Members),
}

/// The values of an IN subquery: NULL apart, as SQL's IN treats it.
struct Members {
    values: HashSet<ScalarValue>,
    has_null: bool,
}

impl Members {
    fn of(values: &ArrayRef) -> Result<Self> {
        let mut members = Self {
            values: HashSet::with_capacity(values.len()),
            has_null: false,
        };
        for i in 0..values.len() {
            let value = ScalarValue::try_from_array(values, i)?;
            if value.is_null() {
                members.has_null = true;
            } else {
                members.values.insert(value);
            }
        }
        Ok(members)
    }

    /// `probe IN (values)`: true if found; unknown if the probe or a value is NULL; else false.
    fn contain(&self, probe: &ScalarValue) -> Option<bool> {
        let empty = self.values.is_empty() && !self.has_null;
        if empty {
            return Some(false);
        }
        if probe.is_null() {
            return None;
        }
        if self.values.contains(probe) {
            return Some(true);
        }
        (!self.has_null).then_some(false)
    }
}

struct Answers {
    state: SessionState,
    context: Arc<TaskContext>,
    subqueries: Vec<Runnable>,
    cache: Vec<HashMap<Vec<ScalarValue>, Arc<Answer>>>,
}

impl Answers {
    async fn add_columns(&mut self, batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
        let mut columns = batch.columns().to_vec();
        for index in 0..self.subqueries.len() {
            columns.push(self.column(index, &batch).await?);
        }
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }

    /// The answers of subquery `index` for every row of `batch`.
    async fn column(&mut self, index: usize, batch: &RecordBatch) -> Result<ArrayRef> {
        let runnable = self.subqueries[index].clone();
        let mut values = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let key = runnable
                .outer
                .iter()
                .map(|(_, i)| ScalarValue::try_from_array(batch.column(*i), row))
                .collect::<Result<Vec<_>>>()?;
            let answer = match self.cache[index].get(&key) {
                Some(answer) => answer.clone(),
                None => {
                    let answer = Arc::new(self.run(&runnable, &key).await?);
                    if self.cache[index].len() >= MAX_CACHED_ANSWERS {
                        self.cache[index].clear();
                    }
                    self.cache[index].insert(key, answer.clone());
                    answer
                }
            };
            let probe = match &runnable.probe {
                Some((i, _)) => Some(ScalarValue::try_from_array(batch.column(*i), row)?),
                None => None,
            };
            values.push(value_for_row(&runnable.subquery.kind, &answer, probe)?);
        }
        if values.is_empty() {
            return Ok(new_empty_array(&runnable.subquery.output_type()));
        }
        ScalarValue::iter_to_array(values)
    }

    /// Runs `runnable` with `key` in place of its outer references.
    async fn run(&self, runnable: &Runnable, key: &[ScalarValue]) -> Result<Answer> {
        let bound: Vec<(&Column, &ScalarValue)> =
            runnable.outer.iter().map(|(c, _)| c).zip(key).collect();
        let plan = with_outer_values(&runnable.subquery.plan, &bound)?;
        // Two rows tell a scalar subquery's error; one row answers EXISTS.
        let fetch = match runnable.subquery.kind {
            Kind::Scalar => Some(2),
            Kind::Exists { .. } => Some(1),
            Kind::Compare { .. } => None,
        };
        let plan = match fetch {
            Some(n) => LogicalPlanBuilder::from(plan).limit(0, Some(n))?.build()?,
            None => plan,
        };
        let physical = self.state.create_physical_plan(&plan).await?;
        let batches = datafusion::physical_plan::collect(physical, self.context.clone()).await?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        Ok(match runnable.subquery.kind {
            Kind::Exists { .. } => Answer::Exists(rows > 0),
            Kind::Scalar if rows > 1 => {
                return Err(to_df(ZyronError::new(
                    SqlState::CARDINALITY_VIOLATION,
                    "more than one row returned by a subquery used as an expression",
                )));
            }
            Kind::Scalar => Answer::Value(match batches.iter().find(|b| b.num_rows() > 0) {
                Some(batch) => ScalarValue::try_from_array(batch.column(0), 0)?,
                None => ScalarValue::try_from(&runnable.subquery.output_type())?,
            }),
            Kind::Compare { op, all, .. } => {
                let Some((_, probe_type)) = &runnable.probe else {
                    return internal_err!("a comparison with a subquery has no probe");
                };
                let arrays: Vec<&dyn Array> =
                    batches.iter().map(|b| b.column(0).as_ref()).collect();
                let values = match arrays.is_empty() {
                    true => new_empty_array(probe_type),
                    false => cast(&concat(&arrays)?, probe_type)?,
                };
                match (op, all) {
                    (Operator::Eq, false) => Answer::Members(Members::of(&values)?),
                    _ => Answer::Values(values),
                }
            }
        })
    }
}

/// The answer column's value for one row.
fn value_for_row(kind: &Kind, answer: &Answer, probe: Option<ScalarValue>) -> Result<ScalarValue> {
    match (kind, answer) {
        (Kind::Scalar, Answer::Value(value)) => Ok(value.clone()),
        (Kind::Exists { negated }, Answer::Exists(found)) => {
            Ok(ScalarValue::Boolean(Some(found != negated)))
        }
        (Kind::Compare { negated, .. }, Answer::Members(members)) => {
            let Some(probe) = probe else {
                return internal_err!("a comparison with a subquery has no probe");
            };
            Ok(ScalarValue::Boolean(
                members.contain(&probe).map(|b| b != *negated),
            ))
        }
        (
            Kind::Compare {
                op, all, negated, ..
            },
            Answer::Values(values),
        ) => {
            let Some(probe) = probe else {
                return internal_err!("a comparison with a subquery has no probe");
            };
            let outcome = compare_with_all(&probe, *op, *all, values)?;
            Ok(ScalarValue::Boolean(outcome.map(|b| b != *negated)))
        }
        _ => internal_err!("a subquery's answer does not match its kind"),
    }
}

/// `probe op ANY (values)` or `probe op ALL (values)` with SQL's three values:
/// ANY is true if one comparison is, else NULL if one is NULL, else false;
/// ALL is false if one comparison is, else NULL if one is NULL, else true.
fn compare_with_all(
    probe: &ScalarValue,
    op: Operator,
    all: bool,
    values: &ArrayRef,
) -> Result<Option<bool>> {
    if values.is_empty() {
        return Ok(Some(all));
    }
    let probe = Scalar::new(probe.to_array_of_size(1)?);
    // `probe op value` for each value, written with the value on the left.
    let results: BooleanArray = match op {
        Operator::Eq => cmp::eq(values, &probe)?,
        Operator::NotEq => cmp::neq(values, &probe)?,
        Operator::Lt => cmp::gt(values, &probe)?,
        Operator::LtEq => cmp::gt_eq(values, &probe)?,
        Operator::Gt => cmp::lt(values, &probe)?,
        Operator::GtEq => cmp::lt_eq(values, &probe)?,
        other => return internal_err!("{other} ANY/ALL is not a comparison"),
    };
    let decisive = !all; // ANY looks for a true, ALL for a false
    let found = results.iter().any(|r| r == Some(decisive));
    if found {
        return Ok(Some(decisive));
    }
    if results.null_count() > 0 {
        return Ok(None);
    }
    Ok(Some(!decisive))
}

/// `plan` with the outer references named in `bound` replaced by their values.
fn with_outer_values(plan: &LogicalPlan, bound: &[(&Column, &ScalarValue)]) -> Result<LogicalPlan> {
    let value_of = |column: &Column| bound.iter().find(|(c, _)| *c == column).map(|(_, v)| *v);
    let substitute = |expr: Expr| -> Result<Transformed<Expr>> {
        Ok(match expr {
            Expr::OuterReferenceColumn(field, column) => match value_of(&column) {
                Some(value) => Transformed::yes(Expr::Literal(value.clone(), None)),
                None => Transformed::no(Expr::OuterReferenceColumn(field, column)),
            },
            // A nested subquery no longer reads the values now in place.
            mut other => {
                if let Some(subquery) = super::subquery_of_mut(&mut other) {
                    subquery
                        .outer_ref_columns
                        .retain(|e| !reads_bound(e, &value_of));
                }
                Transformed::no(other)
            }
        })
    };
    plan.clone()
        .transform_up_with_subqueries(|node| {
            // Names of projected and aggregated values stay as they were: the
            // nodes above find them by name (`outer_ref(t1.a)`, `max(x.b + outer_ref(t1.a))`).
            let named = matches!(node, LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_));
            node.map_expressions(|e| {
                let name = (named && !matches!(e, Expr::Alias(_))).then(|| e.qualified_name());
                let substituted = e.transform(substitute)?;
                Ok(match (substituted.transformed, name) {
                    (true, Some((relation, name))) => {
                        Transformed::yes(substituted.data.alias_qualified(relation, name))
                    }
                    _ => substituted,
                })
            })
        })
        .map(|t| t.data)
}

fn reads_bound<'a>(expr: &Expr, value_of: &impl Fn(&Column) -> Option<&'a ScalarValue>) -> bool {
    matches!(expr, Expr::OuterReferenceColumn(_, column) if value_of(column).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn values(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn any_and_all_follow_sql_three_valued_logic() {
        let one = ScalarValue::Int64(Some(1));
        let null = ScalarValue::Int64(None);
        let eq_any = |p: &ScalarValue, v: &[Option<i64>]| {
            compare_with_all(p, Operator::Eq, false, &values(v)).unwrap()
        };
        assert_eq!(eq_any(&one, &[Some(2), Some(1)]), Some(true));
        assert_eq!(eq_any(&one, &[Some(2), None]), None);
        assert_eq!(eq_any(&one, &[Some(2)]), Some(false));
        assert_eq!(eq_any(&one, &[]), Some(false));
        assert_eq!(eq_any(&null, &[]), Some(false));
        assert_eq!(eq_any(&null, &[Some(1)]), None);
        // 1 < ALL (..)
        let gt_all =
            |v: &[Option<i64>]| compare_with_all(&one, Operator::Lt, true, &values(v)).unwrap();
        assert_eq!(gt_all(&[]), Some(true));
        assert_eq!(gt_all(&[Some(0), None]), Some(false));
        assert_eq!(gt_all(&[Some(3), None]), None);
    }

    #[test]
    fn in_follows_sql_three_valued_logic() {
        let members = |v: &[Option<i64>]| Members::of(&values(v)).unwrap();
        let one = ScalarValue::Int64(Some(1));
        let null = ScalarValue::Int64(None);
        assert_eq!(members(&[Some(2), Some(1)]).contain(&one), Some(true));
        assert_eq!(members(&[Some(2), None]).contain(&one), None);
        assert_eq!(members(&[Some(2)]).contain(&one), Some(false));
        assert_eq!(members(&[]).contain(&null), Some(false));
        assert_eq!(members(&[None]).contain(&null), None);
        assert_eq!(members(&[Some(1)]).contain(&null), None);
    }
}
